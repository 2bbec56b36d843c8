//! Runs until killed: prints `tick N` every 100 ms, or with the argument `spin` burns
//! CPU without ever sleeping or calling the host (prints once before it starts).
fn main() {
    let spin = std::env::args().nth(1).as_deref() == Some("spin");
    if spin {
        println!("spinning");
        let mut x: u64 = 0;
        loop {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    let mut n = 0u64;
    loop {
        println!("tick {n}");
        n += 1;
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
