//! The `x-kubernetes-validations` step of a custom resource's write: the
//! version's compiled rules (see [`crate::cel_rules`]) run on the
//! admitted object, with the stored one as `oldSelf` on an update.

use serde_json::Value;

use super::Resources;
use crate::meta;
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult};

impl Resources {
    /// 422 with every rule `obj` fails; `old` is the stored object on an
    /// update (main resource or status).
    pub(super) fn admit_rules(
        &self,
        rt: &ResourceType,
        version: &str,
        obj: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(rules) = rt.cel.get(version) else {
            return Ok(());
        };
        // The slowest step of a write: not begun for a client that has gone.
        if crate::cancel::cancelled() {
            return Err(ApiError::new(
                499,
                "Cancelled",
                "the client closed the request before its rules ran",
            ));
        }
        let causes = rules.validate(obj, old);
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid(rt, meta::name(obj), causes))
        }
    }
}
