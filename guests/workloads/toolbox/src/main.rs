//! A multi-call WASI command, as busybox: what it does is its argv[0], so a
//! pod runs it as its container (any other name: print `tick N` every 100 ms
//! forever) and `kubectl exec POD -- echo hi` runs it again as `echo`.
//!
//! - `echo ARGS...`: the arguments on stdout; `warn ARGS...` on stderr
//! - `cat [FILE]`: the file, or stdin line by line to its end, on stdout
//! - `env`: the environment, `NAME=value` per line
//! - `exit CODE`: exits with CODE
//! - `touch FILE`, `rm FILE`, `test-file FILE` (exits 0 when FILE exists, else 1)
//! - `flood BYTES`: that many `x` on stdout
//! - `spin`: burns CPU forever

use std::io::{BufRead, Write};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.first().map(String::as_str).unwrap_or("");
    let name = name.rsplit('/').next().unwrap_or(name);
    let rest = &args[args.len().min(1)..];
    let arg = |i: usize| rest.get(i).cloned().unwrap_or_default();
    match name {
        "echo" => println!("{}", rest.join(" ")),
        "warn" => eprintln!("{}", rest.join(" ")),
        "cat" => {
            if rest.is_empty() {
                // Line by line, as it comes: a caller sees each line echoed at once.
                let mut out = std::io::stdout();
                for line in std::io::stdin().lines() {
                    writeln!(out, "{}", line.expect("stdin")).expect("stdout");
                }
            } else {
                let data = std::fs::read(arg(0)).unwrap_or_else(|e| {
                    eprintln!("cat: {}: {e}", arg(0));
                    std::process::exit(1)
                });
                std::io::stdout().write_all(&data).expect("stdout");
            }
        }
        "env" => {
            for (k, v) in std::env::vars() {
                println!("{k}={v}");
            }
        }
        "exit" => std::process::exit(arg(0).parse().unwrap_or(1)),
        "touch" => {
            std::fs::write(arg(0), b"").unwrap_or_else(|e| {
                eprintln!("touch: {}: {e}", arg(0));
                std::process::exit(1)
            });
        }
        "rm" => {
            std::fs::remove_file(arg(0)).unwrap_or_else(|e| {
                eprintln!("rm: {}: {e}", arg(0));
                std::process::exit(1)
            });
        }
        "test-file" => {
            if std::fs::metadata(arg(0)).is_err() {
                println!("{} is missing", arg(0));
                std::process::exit(1);
            }
        }
        "flood" => {
            let n: usize = arg(0).parse().unwrap_or(0);
            let chunk = vec![b'x'; 64 * 1024];
            let mut out = std::io::stdout().lock();
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len());
                out.write_all(&chunk[..k]).expect("stdout");
                left -= k;
            }
        }
        "spin" => {
            let mut x: u64 = 0;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        _ => {
            let mut n = 0u64;
            loop {
                println!("tick {n}");
                n += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
