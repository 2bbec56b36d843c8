//! Probes what the sandbox allows. Each argument is an operation; each prints one line
//! `OP ARG: OK ...` or `OP ARG: ERR ...` on stdout:
//!   read:PATH          print the file's contents
//!   write:PATH=TEXT    create/overwrite a file
//!   list:PATH          list a directory
//!   connect:HOST:PORT  open a TCP connection
//!   resolve:NAME       resolve a host name
//!   alloc:MIB          allocate and touch MIB MiB (aborts when the memory cap is hit)
//!   hold:PATH=N        open PATH N times, keeping every file open (until exit)
//!   sleep:SECS         sleep (holding what `hold` opened)
fn main() {
    let mut held: Vec<std::fs::File> = Vec::new();
    for arg in std::env::args().skip(1) {
        let (op, rest) = arg.split_once(':').unwrap_or((arg.as_str(), ""));
        let result: Result<String, String> = match op {
            "read" => std::fs::read_to_string(rest).map_err(|e| e.to_string()),
            "write" => {
                let (path, text) = rest.split_once('=').unwrap_or((rest, ""));
                std::fs::write(path, text)
                    .map(|_| "written".to_string())
                    .map_err(|e| e.to_string())
            }
            "list" => std::fs::read_dir(rest).map_err(|e| e.to_string()).map(|d| {
                let mut names: Vec<String> = d
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                names.join(",")
            }),
            "connect" => std::net::TcpStream::connect(rest)
                .map(|_| "connected".to_string())
                .map_err(|e| e.to_string()),
            "resolve" => {
                use std::net::ToSocketAddrs;
                (rest, 80)
                    .to_socket_addrs()
                    .map(|a| format!("{:?}", a.collect::<Vec<_>>()))
                    .map_err(|e| e.to_string())
            }
            "alloc" => {
                let mib: usize = rest.parse().unwrap_or(1);
                let mut v: Vec<u8> = Vec::with_capacity(mib << 20);
                v.resize(mib << 20, 1);
                Ok(format!(
                    "allocated {} bytes, sum {}",
                    v.len(),
                    v.iter().map(|&b| b as usize).sum::<usize>()
                ))
            }
            "hold" => {
                let (path, n) = rest.split_once('=').unwrap_or((rest, "1"));
                let n: usize = n.parse().unwrap_or(1);
                let before = held.len();
                let mut failed = None;
                for _ in 0..n {
                    match std::fs::File::open(path) {
                        Ok(f) => held.push(f),
                        Err(e) => {
                            failed = Some(e.to_string());
                            break;
                        }
                    }
                }
                let opened = held.len() - before;
                match failed {
                    None => Ok(format!("opened {opened}")),
                    Some(e) => Err(format!("opened {opened}, then: {e}")),
                }
            }
            "sleep" => {
                let secs: u64 = rest.parse().unwrap_or(1);
                std::thread::sleep(std::time::Duration::from_secs(secs));
                Ok(format!("slept, holding {}", held.len()))
            }
            _ => Err(format!("unknown op {op}")),
        };
        match result {
            Ok(s) => println!("{op} {rest}: OK {}", s.replace('\n', "\\n")),
            Err(e) => println!("{op} {rest}: ERR {}", e.replace('\n', "\\n")),
        }
    }
}
