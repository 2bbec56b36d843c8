//! Exits with the code given as its first argument (default 1) through
//! `std::process::exit`, or with `err` returns an error from `main`.
fn main() -> Result<(), String> {
    let arg = std::env::args().nth(1).unwrap_or_else(|| "1".into());
    println!("exiting with {arg}");
    if arg == "err" {
        return Err("main returned an error".into());
    }
    std::process::exit(arg.parse().unwrap_or(1));
}
