//! Caps on the files workloads hold open. Every descriptor a WASI 0.2
//! workload opens (`wasi:filesystem/types.descriptor.open-at`) is a file
//! descriptor of the host process, which also serves the API server's TLS
//! connections and compiles plugins: one pod opening its mounted Secret
//! 30,000 times took all of them. So:
//!
//! - at start the process's `RLIMIT_NOFILE` soft limit is raised to its hard
//!   limit ([`raise_nofile_limit`]);
//! - a part of it is kept for the host ([`host_reserve`]); the rest is shared
//!   by the workloads, and the per-workload cap is lowered at start so that
//!   the caps of the most workloads the node runs at once fit in it
//!   ([`per_workload_cap`]): a spawn is never refused for descriptors;
//! - `open-at` past a workload's cap fails inside the guest with
//!   `error-code.quota` (WASI 0.2 has no `EMFILE`) before the host opens
//!   anything; the workload and the node carry on;
//! - a preview 1 module's resource table is capped instead
//!   (`cap_p1_table`): wasmtime-wasi keeps its descriptor table private and
//!   its `path_open` cannot be wrapped (the original needs the guest's memory
//!   through its caller), so an open past the cap traps the workload, with a
//!   message naming the cap, and the node carries on.

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::WasiFilesystemView;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self as fs, DescriptorFlags, HostDescriptor, OpenFlags, PathFlags,
};

use super::run::P2State;

/// The default of `--workload-max-open-files`.
pub(crate) const DEFAULT_MAX_OPEN_FILES: usize = 256;

/// The interface whose `open-at` is capped (the version `wasmtime-wasi`
/// links; guests importing an older 0.2.x resolve to it).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Raises the process's `RLIMIT_NOFILE` soft limit to its hard limit (as a
/// server does at start); returns the soft limit in force afterwards.
pub(crate) fn raise_nofile_limit() -> u64 {
    use rustix::process::{Resource as R, getrlimit, setrlimit};
    let mut limit = getrlimit(R::Nofile);
    let before = limit.current;
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(R::Nofile, limit) {
            tracing::warn!(error = %e, "cannot raise the open-file limit to its hard limit");
        }
    }
    let now = getrlimit(R::Nofile).current.unwrap_or(u64::MAX);
    tracing::info!(before = ?before, now, "open-file limit");
    now
}

/// Descriptors kept for the host out of `limit`: a quarter, at least 1024
/// (the API server's connections, the store, plugin compiles, the kubelet API).
pub(crate) fn host_reserve(limit: u64) -> u64 {
    (limit / 4).max(1024).min(limit)
}

/// The per-workload cap: `wanted`, lowered so that `max_workloads` caps fit
/// in what `limit` leaves after the host's reserve (at least 16: a workload
/// needs its stdio and mounts).
pub(crate) fn per_workload_cap(wanted: usize, limit: u64, max_workloads: usize) -> usize {
    let shared = limit.saturating_sub(host_reserve(limit));
    let fair = shared / (max_workloads.max(1) as u64);
    wanted
        .min(usize::try_from(fair).unwrap_or(usize::MAX))
        .max(16)
}

/// Open descriptors (files and directories, preopens included) in a
/// workload's table. A scan: the table holds what the workload holds, and
/// open-at is where it grows.
fn open_descriptors(state: &mut P2State) -> usize {
    state
        .table_mut()
        .iter_mut()
        .filter(|e| e.is::<wasmtime_wasi::filesystem::Descriptor>())
        .count()
}

/// Replaces `open-at` in `linker` with one that refuses past the workload's
/// cap, and otherwise does what `wasmtime-wasi`'s does.
pub(super) fn cap_open_at(linker: &mut Linker<P2State>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store,
         (fd, path_flags, path, oflags, flags): (
            Resource<fs::Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state: &mut P2State = store.data_mut();
                if open_descriptors(state) >= state.max_open_files {
                    return Ok((Err(fs::ErrorCode::Quota),));
                }
                let mut view = state.filesystem();
                match HostDescriptor::open_at(&mut view, fd, path_flags, path, oflags, flags).await
                {
                    Ok(d) => Ok((Ok(d),)),
                    Err(e) => Ok((Err(e.downcast()?),)),
                }
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Entries of a preview 1 workload's resource table besides its
/// descriptors: stdio streams and the pollables of a `poll_oneoff`.
const P1_TABLE_HEADROOM: usize = 32;

/// Caps a preview 1 workload's resource table at its descriptor cap (mounts
/// included, as for WASI 0.2) plus [`P1_TABLE_HEADROOM`].
pub(super) fn cap_p1_table(ctx: &mut wasmtime_wasi::p1::WasiP1Ctx, max_open_files: usize) {
    use wasmtime_wasi::WasiView;
    ctx.ctx()
        .table
        .set_max_capacity(max_open_files.saturating_add(P1_TABLE_HEADROOM));
}

/// Whether `e` is a preview 1 workload's trap for a full resource table.
pub(super) fn is_p1_table_full(e: &wasmtime::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<wasmtime::component::ResourceTableError>(),
            Some(wasmtime::component::ResourceTableError::Full)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_of_all_workloads_fit_beside_the_hosts_reserve() {
        // 20,000 descriptors, 440 workloads: a quarter kept, the rest shared.
        assert_eq!(host_reserve(20_000), 5_000);
        let cap = per_workload_cap(256, 20_000, 440);
        assert_eq!(cap, 34);
        assert!(cap as u64 * 440 <= 20_000 - host_reserve(20_000));
        // Plenty of descriptors: the flag's value stands.
        assert_eq!(per_workload_cap(256, 1 << 20, 440), 256);
        // A tiny limit keeps at least 1024 for the host, and a workload its floor.
        assert_eq!(host_reserve(1024), 1024);
        assert_eq!(per_workload_cap(256, 1024, 440), 16);
    }
}
