//! One reason an object is invalid, naming the field: a `Status` detail
//! (`status.rs`), and what CEL rules and validation return. Its own module,
//! below both `status` and `registry` (whose types hold compiled CEL rules),
//! so that neither imports the other back.

/// One reason an object is invalid, naming the field.
#[derive(Debug, Clone)]
pub struct Cause {
    pub(crate) reason: String,
    pub(crate) message: String,
    pub(crate) field: String,
}
