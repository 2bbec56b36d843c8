// jemalloc, not glibc's malloc: with 16 reconciles in flight, malloc and free
// were about a fifth of the host's CPU (the versus bench, issue 16). mimalloc
// was as quick but held twice the peak RSS unless tuned by environment.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's build-time options (`_RJEM_MALLOC_CONF` in the environment
/// overrides them): freed pages go back to the kernel within a second, and
/// at once rather than after a second "muzzy" period, so a burst (a relist,
/// a large plane write) does not stay resident.
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    wasmlet::main()
}
