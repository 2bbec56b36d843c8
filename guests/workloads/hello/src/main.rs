//! Prints a greeting (with its argv and the `GREETING` variable) on stdout and a line on
//! stderr, then exits 0. Built for wasm32-wasip2 (a command component) and for
//! wasm32-wasip1 (a core module), where an argument `exit=N` makes it `proc_exit(N)`.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    println!(
        "hello from {}",
        args.first().map(String::as_str).unwrap_or("?")
    );
    println!("args: {}", args[1..].join(" "));
    match std::env::var("GREETING") {
        Ok(g) => println!("GREETING={g}"),
        Err(_) => println!("GREETING unset"),
    }
    println!("env count: {}", std::env::vars().count());
    eprintln!("a line on stderr");
    print!("no newline at the end");
    for a in &args[1..] {
        if let Some(n) = a.strip_prefix("exit=") {
            use std::io::Write;
            std::io::stdout().flush().ok();
            std::process::exit(n.parse().unwrap_or(2));
        }
    }
}
