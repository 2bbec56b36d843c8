//! Runs until killed: prints `tick N` every 100 ms; with the argument `spin` burns
//! CPU without ever sleeping or calling the host (prints once before it starts); with
//! `pause` prints once and then sleeps, as upstream's pause container (the scale
//! benchmark's pods: their cost is the control plane's, not their own output).
fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("spin") => {
            println!("spinning");
            let mut x: u64 = 0;
            loop {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        }
        Some("pause") => {
            println!("paused");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        _ => {}
    }
    let mut n = 0u64;
    loop {
        println!("tick {n}");
        n += 1;
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
