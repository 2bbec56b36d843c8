//! `kubectl get`'s columns: the server-side `Table` of each built-in kind
//! (`as=Table;g=meta.k8s.io`), as upstream's printers, and of custom
//! resources (their `additionalPrinterColumns`).

pub(crate) mod table;
mod table_apps;
mod table_batch;
mod table_core;
mod table_stored;
mod table_workloads;
