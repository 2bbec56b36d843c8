//! [`Event`]: a Kubernetes Event a plugin records.

use super::ObjectRef;

/// `type` of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Routine: something happened as expected (`Created`, `Scaled`).
    Normal,
    /// Something went wrong or needs attention; `kubectl describe` lists these for the user.
    Warning,
}

/// A Kubernetes Event to record (see [`Client::event`](super::Client::event), `Context::event`).
///
/// ```
/// use wasmlet_sdk::client::Event;
/// let ev = Event::warning("ListFailed", "Reconcile").note("the cache is not ready");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// Why the action was taken, a short UpperCamelCase word (`FailedCreate`).
    pub reason: String,
    /// What was done or attempted, UpperCamelCase (`Reconcile`, `Create`).
    pub action: String,
    /// Free text for the user, at most 1 kB upstream; empty by default.
    pub note: String,
    /// `None`: the object being reconciled (or the pod being handled).
    pub regarding: Option<ObjectRef>,
    /// A second object involved (the Pod a ReplicaSet created), or `None`.
    pub related: Option<ObjectRef>,
}

impl Event {
    /// A Normal event with this reason and action.
    pub fn normal(reason: &str, action: &str) -> Self {
        Self::new(EventType::Normal, reason, action)
    }

    /// A Warning event with this reason and action.
    pub fn warning(reason: &str, action: &str) -> Self {
        Self::new(EventType::Warning, reason, action)
    }

    /// An event of `type_` with this reason and action, no note, about the object being handled.
    pub fn new(type_: EventType, reason: &str, action: &str) -> Self {
        Event {
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: String::new(),
            regarding: None,
            related: None,
        }
    }

    /// Sets the human-readable note.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    /// Makes the event about `object` instead of the object being handled.
    pub fn regarding(mut self, object: ObjectRef) -> Self {
        self.regarding = Some(object);
        self
    }

    /// Names a second object involved.
    pub fn related(mut self, object: ObjectRef) -> Self {
        self.related = Some(object);
        self
    }
}
