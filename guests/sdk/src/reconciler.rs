//! Reconcilers: `fn reconcile(obj: Arc<K>, ctx: &Context) -> Result<Action, Error>`.
//!
//! The host owns the loop around this function (caches, queue, retries, finalizer,
//! `observedGeneration`, the `Ready` condition, writing status only on change); the
//! function looks at one object, acts through [`Context`], and says what the status
//! should be and when to come back. Export it with [`crate::reconciler!`].
//! See the crate documentation for a complete example.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::reconciler_exports as raw;
use crate::client::{Client, ClientError, ClusterClient, Event, ObjectRef};
use crate::http::{self, HttpError};
use crate::log::{self, Level};

/// What a reconcile can reach: the typed client ([`Context::client`]: `ctx.client().get`,
/// `.list`, `.patch`, ...), events about the object, logs and HTTP.
#[derive(Debug, Clone)]
pub struct Context {
    client: Client,
    object: ObjectRef,
}

impl Context {
    /// A context for reconciling `object` (the SDK makes these; tests may too).
    pub fn new(object: ObjectRef) -> Self {
        Context {
            client: Client::new(),
            object,
        }
    }

    /// A context for reconciling `obj`.
    pub fn for_object<K: Resource<DynamicType = ()>>(obj: &K) -> Self {
        Self::new(ObjectRef::from_obj(obj))
    }

    /// The object being reconciled.
    pub fn object(&self) -> &ObjectRef {
        &self.object
    }

    /// The typed client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The typed client of the host's named cluster `name` (`--cluster
    /// NAME=KUBECONFIG`), e.g. `ctx.cluster("eu-west").patch(...)`; the manifest's
    /// `[clusters.NAME]` (or `[clusters."*"]`) says what this plugin may do there.
    pub fn cluster(&self, name: &str) -> ClusterClient {
        self.client.cluster(name)
    }

    /// Records an Event, about the object being reconciled unless `event` says otherwise.
    pub fn event(&self, mut event: Event) -> Result<(), ClientError> {
        if event.regarding.is_none() {
            event.regarding = Some(self.object.clone());
        }
        self.client.event(&event)
    }

    /// Writes a log record with key/value fields.
    pub fn log(&self, level: Level, message: &str, fields: &[(&str, &str)]) {
        log::log(level, message, fields);
    }

    /// Writes `message` at debug level, without fields.
    pub fn debug(&self, message: &str) {
        log::debug(message);
    }

    /// Writes `message` at info level, without fields.
    pub fn info(&self, message: &str) {
        log::info(message);
    }

    /// Writes `message` at warn level, without fields.
    pub fn warn(&self, message: &str) {
        log::warn(message);
    }

    /// Writes `message` at error level, without fields.
    pub fn error(&self, message: &str) {
        log::error(message);
    }

    /// Sends an HTTP request to an allowed host.
    pub fn fetch(&self, req: &http::Request) -> Result<http::Response, HttpError> {
        http::fetch(req)
    }
}

/// A condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold; `reason` and `message` say why.
    False,
    /// The reconciler cannot tell (yet).
    Unknown,
}

/// A condition to set on the object (the host adds `lastTransitionTime` and
/// `observedGeneration`, and folds declared conditions into `Ready`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The condition type, UpperCamelCase (`Summarised`); one condition per type on the object.
    pub type_: String,
    /// Whether it holds.
    pub status: ConditionStatus,
    /// Why the condition is as it is, one UpperCamelCase word (`Listed`) for programs to match on.
    pub reason: String,
    /// A sentence for the user.
    pub message: String,
}

impl Condition {
    /// A condition of `type_` with this status and no reason or message.
    pub fn new(type_: &str, status: ConditionStatus) -> Self {
        Condition {
            type_: type_.to_owned(),
            status,
            reason: String::new(),
            message: String::new(),
        }
    }

    /// `type_` is True.
    pub fn is_true(type_: &str) -> Self {
        Self::new(type_, ConditionStatus::True)
    }

    /// `type_` is False.
    pub fn is_false(type_: &str) -> Self {
        Self::new(type_, ConditionStatus::False)
    }

    /// `type_` is Unknown.
    pub fn unknown(type_: &str) -> Self {
        Self::new(type_, ConditionStatus::Unknown)
    }

    /// UpperCamelCase reason.
    pub fn reason(mut self, reason: &str) -> Self {
        self.reason = reason.to_owned();
        self
    }

    /// Sets the human-readable message.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    fn to_raw(&self) -> raw::Condition {
        raw::Condition {
            type_: self.type_.clone(),
            status: match self.status {
                ConditionStatus::True => raw::ConditionStatus::True,
                ConditionStatus::False => raw::ConditionStatus::False,
                ConditionStatus::Unknown => raw::ConditionStatus::Unknown,
            },
            reason: self.reason.clone(),
            message: self.message.clone(),
        }
    }
}

/// The status a reconcile wants, as JSON; `Err` holds why the guest's value did not
/// serialise (reported as a terminal error rather than silently writing nothing).
type StatusValue = Option<Result<serde_json::Value, String>>;

fn status_value(status: impl Serialize) -> StatusValue {
    Some(serde_json::to_value(status).map_err(|e| e.to_string()))
}

/// A successful reconcile: when to come back, plus the status and conditions to write.
///
/// ```
/// use std::time::Duration;
/// use wasmlet_sdk::reconciler::{Action, Condition};
/// let a = Action::requeue(Duration::from_secs(300))
///     .status(serde_json::json!({ "keys": 3 }))
///     .condition(Condition::is_true("Summarised").reason("Listed").message("3 keys"));
/// assert_eq!(a.requeue_after(), Some(Duration::from_secs(300)));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Action {
    requeue_after: Option<Duration>,
    status: StatusValue,
    conditions: Vec<Condition>,
    applied_generation: Option<i64>,
}

impl Action {
    /// Nothing more to do until something changes (same as [`Action::await_change`]).
    pub fn done() -> Self {
        Action {
            requeue_after: None,
            status: None,
            conditions: Vec::new(),
            applied_generation: None,
        }
    }

    /// Reconcile again only when the object, something it owns or watches, changes.
    pub fn await_change() -> Self {
        Self::done()
    }

    /// Reconcile again after `after` even if nothing changes. A zero `after`
    /// means "again soon" and goes through the host's per-object back-off.
    pub fn requeue(after: Duration) -> Self {
        Action {
            requeue_after: Some(after),
            ..Self::done()
        }
    }

    /// The status fields this reconciler owns (a struct or `json!` object, without
    /// `conditions`/`observedGeneration`); merged into the object's status by the host.
    pub fn status(mut self, status: impl Serialize) -> Self {
        self.status = status_value(status);
        self
    }

    /// Sets one condition (call again for more).
    pub fn condition(mut self, condition: Condition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// The generation this pass applied, when it is not the one it was handed
    /// (a change rolled out in steps: the generation whose rollout is
    /// complete). The host writes it as `status.observedGeneration`, which
    /// upstream's conventions define as the generation the controller acted
    /// on; without it a successful pass sets the object's own generation. A
    /// value that is not one of the object's generations so far (above
    /// `metadata.generation`, negative) is ignored. A failed reconcile leaves
    /// `observedGeneration` where it was, unless it is [`ErrorKind::Terminal`].
    ///
    /// ```
    /// use wasmlet_sdk::reconciler::Action;
    /// let a = Action::done().applied_generation(3);
    /// assert_eq!(a.applied(), Some(3));
    /// ```
    pub fn applied_generation(mut self, generation: i64) -> Self {
        self.applied_generation = Some(generation);
        self
    }

    /// The generation set with [`Action::applied_generation`], if any.
    pub fn applied(&self) -> Option<i64> {
        self.applied_generation
    }

    /// The wait before the next reconcile set with [`Action::requeue`], if any.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }

    /// The status set with [`Action::status`], if any (and if it serialised).
    pub fn status_json(&self) -> Option<&serde_json::Value> {
        self.status.as_ref().and_then(|s| s.as_ref().ok())
    }

    /// The conditions set with [`Action::condition`].
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

/// Whether a failed reconcile is worth retrying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Retry with back-off.
    Transient,
    /// Do not retry until the object changes; `Ready=False` with the reason.
    Terminal,
}

/// A failed reconcile. Client and HTTP errors convert with `?`: `Denied`, `Invalid`
/// and `Decode` become terminal (retrying cannot fix them), the rest transient.
///
/// ```
/// use wasmlet_sdk::reconciler::{Condition, Error};
/// let e = Error::terminal("BadSpec", "spec.size must be positive")
///     .condition(Condition::is_false("Summarised").reason("BadSpec"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Error {
    /// Whether the host retries this failure.
    pub kind: ErrorKind,
    /// UpperCamelCase reason the host writes to the `Ready` condition and the Event.
    pub reason: String,
    /// The message the host writes beside the reason.
    pub message: String,
    /// Boxed: a failure travels in `Result`s, and the status (a JSON value)
    /// would make every one of them large.
    status: Box<StatusValue>,
    conditions: Vec<Condition>,
}

impl Error {
    /// A failure the host retries with back-off.
    pub fn transient(reason: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transient, reason, message)
    }

    /// A failure not retried until the object changes.
    pub fn terminal(reason: &str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Terminal, reason, message)
    }

    /// A failure of `kind` with this reason and message.
    pub fn new(kind: ErrorKind, reason: &str, message: impl Into<String>) -> Self {
        Error {
            kind,
            reason: reason.to_owned(),
            message: message.into(),
            status: Box::new(None),
            conditions: Vec::new(),
        }
    }

    /// Status to write even though the reconcile failed.
    pub fn status(mut self, status: impl Serialize) -> Self {
        self.status = Box::new(status_value(status));
        self
    }

    /// A condition to write even though the reconcile failed.
    pub fn condition(mut self, condition: Condition) -> Self {
        self.conditions.push(condition);
        self
    }

    /// The conditions set with [`Error::condition`].
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    /// The status set with [`Error::status`], if any (and if it serialised).
    pub fn status_json(&self) -> Option<&serde_json::Value> {
        (*self.status).as_ref().and_then(|s| s.as_ref().ok())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ErrorKind::Transient => "transient",
            ErrorKind::Terminal => "terminal",
        };
        write!(f, "{kind} error {}: {}", self.reason, self.message)
    }
}

impl std::error::Error for Error {}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        let kind = match e {
            ClientError::Denied(_) | ClientError::Invalid(_) | ClientError::Decode(_) => {
                ErrorKind::Terminal
            }
            _ => ErrorKind::Transient,
        };
        Error::new(kind, e.reason(), e.to_string())
    }
}

impl From<HttpError> for Error {
    fn from(e: HttpError) -> Self {
        let kind = match e {
            HttpError::Denied(_) | HttpError::InvalidRequest(_) => ErrorKind::Terminal,
            _ => ErrorKind::Transient,
        };
        Error::new(kind, "HttpError", e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::terminal("SerializationError", e.to_string())
    }
}

/// What a finalizer step achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalize {
    /// Cleanup is complete: the host removes the finalizer.
    Done,
    /// Call again after this long (e.g. children still terminating).
    RetryAfter(Duration),
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn split_status(
    status: StatusValue,
    conditions: &[Condition],
) -> Result<(Option<String>, Vec<raw::Condition>), raw::ReconcileError> {
    let status = match status {
        None => None,
        Some(Ok(v)) => Some(v.to_string()),
        Some(Err(e)) => {
            return Err(raw::ReconcileError {
                kind: raw::ErrorKind::Terminal,
                reason: "InvalidStatus".into(),
                message: format!("the reconciler's status did not serialise: {e}"),
                status: None,
                conditions: Vec::new(),
            });
        }
    };
    Ok((status, conditions.iter().map(Condition::to_raw).collect()))
}

/// The key under which the host reads the generation a pass applied (see
/// [`Action::applied_generation`]): part of the status the guest returns,
/// because the contract's `reconcile-outcome` record cannot gain a field
/// without breaking every component built against it.
const APPLIED_GENERATION: &str = "wasmlet.dev/appliedGeneration";

/// `status` with the applied generation added (an empty status then becomes
/// `{}`, which merges as no change). A status that is not an object is left
/// as it is: the host refuses it anyway.
fn with_applied(status: StatusValue, applied: Option<i64>) -> StatusValue {
    let Some(generation) = applied else {
        return status;
    };
    let mut status = status.unwrap_or_else(|| Ok(serde_json::Value::Object(Default::default())));
    if let Ok(serde_json::Value::Object(map)) = &mut status {
        map.insert(APPLIED_GENERATION.into(), generation.into());
    }
    Some(status)
}

fn error_to_raw(e: Error) -> raw::ReconcileError {
    let (status, conditions) = match split_status(*e.status, &e.conditions) {
        Ok(parts) => parts,
        Err(raw_err) => return raw_err,
    };
    raw::ReconcileError {
        kind: match e.kind {
            ErrorKind::Transient => raw::ErrorKind::Transient,
            ErrorKind::Terminal => raw::ErrorKind::Terminal,
        },
        reason: e.reason,
        message: e.message,
        status,
        conditions,
    }
}

fn decode_object<K: DeserializeOwned>(obj: &str) -> Result<Arc<K>, raw::ReconcileError> {
    serde_json::from_str(obj)
        .map(Arc::new)
        .map_err(|e| raw::ReconcileError {
            kind: raw::ErrorKind::Terminal,
            reason: "InvalidObject".into(),
            message: format!(
                "the object does not decode as {}: {e}",
                std::any::type_name::<K>()
            ),
            status: None,
            conditions: Vec::new(),
        })
}

/// The `reconcile` export: decode, call, encode. Used by [`crate::reconciler!`].
#[doc(hidden)]
pub fn __reconcile<K>(
    obj: String,
    f: impl FnOnce(Arc<K>, &Context) -> Result<Action, Error>,
) -> Result<raw::ReconcileOutcome, raw::ReconcileError>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    crate::panic::install();
    let obj = decode_object::<K>(&obj)?;
    let ctx = Context::for_object(&*obj);
    match f(obj, &ctx) {
        Ok(action) => {
            let status = with_applied(action.status, action.applied_generation);
            let (status, conditions) = split_status(status, &action.conditions)?;
            Ok(raw::ReconcileOutcome {
                status,
                conditions,
                requeue_after_ms: action.requeue_after.map(millis),
            })
        }
        Err(e) => Err(error_to_raw(e)),
    }
}

/// The `finalize` export. Used by [`crate::reconciler!`].
#[doc(hidden)]
pub fn __finalize<K>(
    obj: String,
    f: impl FnOnce(Arc<K>, &Context) -> Result<Finalize, Error>,
) -> Result<raw::FinalizeOutcome, raw::ReconcileError>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    crate::panic::install();
    let obj = decode_object::<K>(&obj)?;
    let ctx = Context::for_object(&*obj);
    match f(obj, &ctx) {
        Ok(Finalize::Done) => Ok(raw::FinalizeOutcome::Done),
        Ok(Finalize::RetryAfter(d)) => Ok(raw::FinalizeOutcome::RetryAfterMs(millis(d))),
        Err(e) => Err(error_to_raw(e)),
    }
}

/// Exports a reconciler: the kind it reconciles, its reconcile function, and optionally
/// a finalize function and the condition types it reports (which the host initialises
/// to Unknown and folds into `Ready`).
///
/// ```ignore
/// wasmlet_sdk::reconciler!(ConfigSummary, reconcile);
/// wasmlet_sdk::reconciler!(ConfigSummary, reconcile, finalize = finalize, conditions = ["Summarised"]);
/// ```
///
/// `reconcile: fn(Arc<K>, &Context) -> Result<Action, Error>`,
/// `finalize: fn(Arc<K>, &Context) -> Result<Finalize, Error>` (without one, finalize
/// reports `Done` at once). Use it once per crate.
#[macro_export]
macro_rules! reconciler {
    ($kind:ty, $reconcile:expr
        $(, finalize = $finalize:expr)?
        $(, conditions = [$($condition:expr),* $(,)?])?
        $(,)?) => {
        const _: () = {
            struct __WasmletReconciler;

            impl $crate::bindings::reconciler_exports::Guest for __WasmletReconciler {
                fn declared_conditions() -> ::std::vec::Vec<::std::string::String> {
                    ::std::vec![$($(::std::string::String::from($condition)),*)?]
                }

                fn reconcile(
                    obj: ::std::string::String,
                ) -> ::std::result::Result<
                    $crate::bindings::reconciler_exports::ReconcileOutcome,
                    $crate::bindings::reconciler_exports::ReconcileError,
                > {
                    $crate::reconciler::__reconcile::<$kind>(obj, $reconcile)
                }

                fn finalize(
                    obj: ::std::string::String,
                ) -> ::std::result::Result<
                    $crate::bindings::reconciler_exports::FinalizeOutcome,
                    $crate::bindings::reconciler_exports::ReconcileError,
                > {
                    $crate::reconciler!(@finalize $kind, obj $(, $finalize)?)
                }
            }

            $crate::bindings::reconciler::export_reconciler!(
                __WasmletReconciler with_types_in $crate::bindings::reconciler
            );
        };
    };
    (@finalize $kind:ty, $obj:ident) => {{
        let _ = $obj;
        ::std::result::Result::Ok($crate::bindings::reconciler_exports::FinalizeOutcome::Done)
    }};
    (@finalize $kind:ty, $obj:ident, $finalize:expr) => {
        $crate::reconciler::__finalize::<$kind>($obj, $finalize)
    };
}
