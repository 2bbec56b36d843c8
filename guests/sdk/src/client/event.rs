//! [`Event`]: a Kubernetes Event a plugin records.

use super::ObjectRef;

/// `type` of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
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
    pub type_: EventType,
    pub reason: String,
    pub action: String,
    pub note: String,
    /// `None`: the object being reconciled (or the pod being handled).
    pub regarding: Option<ObjectRef>,
    pub related: Option<ObjectRef>,
}

impl Event {
    pub fn normal(reason: &str, action: &str) -> Self {
        Self::new(EventType::Normal, reason, action)
    }

    pub fn warning(reason: &str, action: &str) -> Self {
        Self::new(EventType::Warning, reason, action)
    }

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

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    pub fn regarding(mut self, object: ObjectRef) -> Self {
        self.regarding = Some(object);
        self
    }

    pub fn related(mut self, object: ObjectRef) -> Self {
        self.related = Some(object);
        self
    }
}
