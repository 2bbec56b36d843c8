//! The control loops that run inside the plane, as kube-controller-manager's
//! do upstream: garbage collection (owner references, namespace deletion),
//! the Namespace conditions, each namespace's `default` ServiceAccount, the
//! ResourceQuotas' `status.used`, the APIServices of the served groups
//! (kube-aggregator's autoregistration), the signers of the plane's client
//! certificates (`csrsigning`), and the writes at start
//! (`bootstrap`).

pub(crate) mod apiservices;
pub(crate) mod bootstrap;
pub(crate) mod csrsigning;
pub(crate) mod gc;
pub(crate) mod nsconditions;
pub(crate) mod resourcequota;
pub(crate) mod serviceaccounts;
