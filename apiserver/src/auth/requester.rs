//! Who makes a write, for the admission checks that depend on the user:
//! NodeRestriction ([`crate::auth::noderestriction`]) and RBAC escalation
//! prevention ([`crate::auth::rbac::escalation`]), run through `resources`'
//! [`Admit`] trait (this module imports `resources`, never the reverse).
//! The server's own writes (bootstrap, controllers, garbage collection)
//! carry no requester.

use std::sync::Arc;

use serde_json::Value;
use wasmlet_apimachinery::rbac::UserInfo;

use crate::auth::rbac::PolicyCache;
use crate::registry::ResourceType;
use crate::resources::{Admit, Resources, Sub};
use crate::status::ApiResult;

#[derive(Clone)]
pub(crate) struct Requester {
    pub(crate) user: UserInfo,
    pub(crate) policy: Arc<PolicyCache>,
}

impl std::fmt::Debug for Requester {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Requester")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Admit for Requester {
    fn admit(
        &self,
        resources: &Resources,
        rt: &ResourceType,
        ns: &str,
        sub: Sub,
        old: Option<&Value>,
        new: &Value,
    ) -> ApiResult<()> {
        crate::auth::noderestriction::check(&self.user, rt, ns, sub, old, new)?;
        crate::auth::rbac::escalation::check(resources, &self.policy, &self.user, rt, ns, old, new)
    }
}
