//! The host's own health checks (in [`host`]), answered at its address in
//! kube-apiserver's per-check format (`wasmlet_apiserver::health::format`,
//! shared with the embedded API server).

pub(crate) mod host;
