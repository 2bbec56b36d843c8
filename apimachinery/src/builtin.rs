//! List merge semantics of the built-in kinds the server serves, taken from
//! upstream's Go types rather than guessed.
//!
//! Strategic merge patch and server-side apply read *different* upstream markers,
//! so there are two views of the same table:
//!
//! * [`BuiltinListTypes::for_kind`] answers like `patchStrategy`/`patchMergeKey`
//!   (what strategic merge patch uses): `merge` + key → [`ListType::Map`] with that
//!   one key, `merge` on scalars → [`ListType::Set`], anything else → atomic.
//!   Node `spec.taints`, for instance, declares no strategy and is replaced whole.
//! * [`BuiltinListTypes::for_apply`] answers like `+listType`/`+listMapKey` (what
//!   server-side apply uses), falling back to the patch strategy where no list type
//!   is declared, exactly as upstream's `schemaconv` does. Container `ports` are
//!   keyed by `containerPort` alone for SMP but by `(containerPort, protocol)` for
//!   apply, with `protocol` defaulting to `"TCP"`.
//!
//! ```
//! use wasmlet_apimachinery::builtin::BuiltinListTypes;
//! use wasmlet_apimachinery::listtype::{ListType, ListTypes};
//!
//! let pod = BuiltinListTypes::for_kind("", "Pod");
//! assert_eq!(pod.list_type(&["spec", "containers"]), ListType::Map(vec!["name".into()]));
//! assert_eq!(pod.list_type(&["spec", "containers", "env"]), ListType::Map(vec!["name".into()]));
//! assert_eq!(pod.list_type(&["metadata", "finalizers"]), ListType::Set);
//! assert_eq!(pod.list_type(&["spec", "containers", "args"]), ListType::Atomic);
//!
//! let sts = BuiltinListTypes::for_apply("apps", "StatefulSet");
//! assert_eq!(
//!     sts.list_type(&["spec", "template", "spec", "containers", "ports"]),
//!     ListType::Map(vec!["containerPort".into(), "protocol".into()]),
//! );
//! ```
//!
//! The table at the bottom is generated from kubernetes/api, kubernetes/apimachinery
//! and kubernetes/apiextensions-apiserver (commits in its header) by walking the Go
//! struct tags from each kind's root type and keeping only the fields through which
//! a non-atomic list is reachable; every path not in it is atomic. Kinds not in
//! [`ROOTS`] (custom resources among them) get an all-atomic answer, which is right
//! for strategic merge patch (upstream refuses it for custom resources anyway) and
//! for schemaless objects.

use crate::listtype::{ListType, ListTypes};
use serde_json::Value;

/// Which upstream markers to answer from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Patch,
    Apply,
}

/// [`ListTypes`] for one built-in kind. Cheap to build: a pointer into a static table.
#[derive(Debug, Clone, Copy)]
pub struct BuiltinListTypes {
    root: Option<&'static str>,
    mode: Mode,
}

impl BuiltinListTypes {
    /// Strategic-merge-patch view (`patchStrategy`/`patchMergeKey`). `group` is `""`
    /// (or `"core"`) for the core group.
    pub fn for_kind(group: &str, kind: &str) -> BuiltinListTypes {
        BuiltinListTypes {
            root: root(group, kind),
            mode: Mode::Patch,
        }
    }

    /// Server-side-apply view (`+listType`/`+listMapKey`, falling back to the
    /// patch strategy).
    pub fn for_apply(group: &str, kind: &str) -> BuiltinListTypes {
        BuiltinListTypes {
            root: root(group, kind),
            mode: Mode::Apply,
        }
    }

    /// Whether the kind is in the table; the handler uses this to refuse strategic
    /// merge patch on kinds that have no Go types (upstream: 415 for custom resources).
    pub fn is_known(&self) -> bool {
        self.root.is_some()
    }

    /// The list field at `path`, with the type that declares it.
    fn list_field(&self, path: &[&str]) -> Option<(&'static str, &'static F)> {
        let mut ty = self.root?;
        let mut i = 0;
        while i < path.len() {
            let field = type_def(ty)?.fields.iter().find(|f| f.json == path[i])?;
            let last = i + 1 == path.len();
            match &field.shape {
                S::Struct(next) => ty = next,
                // The next segment is a map key, not a field name.
                S::MapOf(next) => {
                    ty = next;
                    i += 1;
                }
                S::List { elem, .. } => {
                    if last {
                        return Some((ty, field));
                    }
                    ty = (*elem)?;
                }
            }
            i += 1;
        }
        None
    }
}

impl ListTypes for BuiltinListTypes {
    fn list_type(&self, path: &[&str]) -> ListType {
        match self.list_field(path) {
            Some((
                _,
                F {
                    shape: S::List { smp, ssa, .. },
                    ..
                },
            )) => {
                let l = if self.mode == Mode::Patch { smp } else { ssa };
                match l {
                    L::Atomic => ListType::Atomic,
                    L::Set => ListType::Set,
                    L::Map(keys) => ListType::Map(keys.iter().map(|k| k.to_string()).collect()),
                }
            }
            _ => ListType::Atomic,
        }
    }

    fn key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        let (owner, field) = self.list_field(path)?;
        KEY_DEFAULTS
            .iter()
            .find(|(t, f, k, _)| *t == owner && *f == field.json && *k == key)
            .and_then(|(_, _, _, json)| serde_json::from_str(json).ok())
    }
}

fn root(group: &str, kind: &str) -> Option<&'static str> {
    let group = if group == "core" { "" } else { group };
    ROOTS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map(|(_, _, t)| *t)
}

fn type_def(name: &str) -> Option<&'static TypeDef> {
    TYPES
        .binary_search_by(|t| t.name.cmp(name))
        .ok()
        .map(|i| &TYPES[i])
}

/// A Go struct reduced to the fields that lead to a non-atomic list.
pub(crate) struct TypeDef {
    name: &'static str,
    fields: &'static [F],
}

pub(crate) struct F {
    json: &'static str,
    shape: S,
}

pub(crate) enum S {
    Struct(&'static str),
    /// `map[string]T`: the path's next segment is the map key.
    MapOf(&'static str),
    List {
        smp: L,
        ssa: L,
        elem: Option<&'static str>,
    },
}

pub(crate) enum L {
    Atomic,
    Set,
    Map(&'static [&'static str]),
}

// ---------------------------------------------------------------------------
// @generated by the extractor described in the module docs; upstream commits:
//   kubernetes/api 10b39a39bcee, kubernetes/apimachinery eed236ceee2c,
//   kubernetes/apiextensions-apiserver 1aa2717a552e.
// Only fields through which a non-atomic list is reachable are listed.
pub(crate) static ROOTS: &[(&str, &str, &str)] = &[
    ("", "Pod", "core/Pod"),
    ("", "Node", "core/Node"),
    ("", "Namespace", "core/Namespace"),
    ("", "ConfigMap", "core/ConfigMap"),
    ("", "Secret", "core/Secret"),
    ("", "Event", "core/Event"),
    ("", "Binding", "core/Binding"),
    ("apps", "StatefulSet", "apps/StatefulSet"),
    ("apps", "ControllerRevision", "apps/ControllerRevision"),
    (
        "policy",
        "PodDisruptionBudget",
        "policy/PodDisruptionBudget",
    ),
    ("policy", "Eviction", "policy/Eviction"),
    ("coordination.k8s.io", "Lease", "coordination/Lease"),
    ("events.k8s.io", "Event", "events/Event"),
    (
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "apiext/CustomResourceDefinition",
    ),
];

pub(crate) static TYPES: &[TypeDef] = &[
    TypeDef {
        name: "apiext/CustomResourceDefinition",
        fields: &[
            F {
                json: "metadata",
                shape: S::Struct("meta/ObjectMeta"),
            },
            F {
                json: "spec",
                shape: S::Struct("apiext/CustomResourceDefinitionSpec"),
            },
            F {
                json: "status",
                shape: S::Struct("apiext/CustomResourceDefinitionStatus"),
            },
        ],
    },
    TypeDef {
        name: "apiext/CustomResourceDefinitionSpec",
        fields: &[F {
            json: "versions",
            shape: S::List {
                smp: L::Atomic,
                ssa: L::Atomic,
                elem: Some("apiext/CustomResourceDefinitionVersion"),
            },
        }],
    },
    TypeDef {
        name: "apiext/CustomResourceDefinitionStatus",
        fields: &[F {
            json: "conditions",
            shape: S::List {
                smp: L::Atomic,
                ssa: L::Map(&["type"]),
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "apiext/CustomResourceDefinitionVersion",
        fields: &[F {
            json: "schema",
            shape: S::Struct("apiext/CustomResourceValidation"),
        }],
    },
    TypeDef {
        name: "apiext/CustomResourceValidation",
        fields: &[F {
            json: "openAPIV3Schema",
            shape: S::Struct("apiext/JSONSchemaProps"),
        }],
    },
    TypeDef {
        name: "apiext/JSONSchemaProps",
        fields: &[
            F {
                json: "allOf",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("apiext/JSONSchemaProps"),
                },
            },
            F {
                json: "oneOf",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("apiext/JSONSchemaProps"),
                },
            },
            F {
                json: "anyOf",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("apiext/JSONSchemaProps"),
                },
            },
            F {
                json: "not",
                shape: S::Struct("apiext/JSONSchemaProps"),
            },
            F {
                json: "properties",
                shape: S::MapOf("apiext/JSONSchemaProps"),
            },
            F {
                json: "patternProperties",
                shape: S::MapOf("apiext/JSONSchemaProps"),
            },
            F {
                json: "definitions",
                shape: S::MapOf("apiext/JSONSchemaProps"),
            },
            F {
                json: "x-kubernetes-validations",
                shape: S::List {
                    smp: L::Map(&["rule"]),
                    ssa: L::Map(&["rule"]),
                    elem: None,
                },
            },
        ],
    },
    TypeDef {
        name: "apps/ControllerRevision",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "apps/StatefulSet",
        fields: &[
            F {
                json: "metadata",
                shape: S::Struct("meta/ObjectMeta"),
            },
            F {
                json: "spec",
                shape: S::Struct("apps/StatefulSetSpec"),
            },
            F {
                json: "status",
                shape: S::Struct("apps/StatefulSetStatus"),
            },
        ],
    },
    TypeDef {
        name: "apps/StatefulSetSpec",
        fields: &[
            F {
                json: "template",
                shape: S::Struct("core/PodTemplateSpec"),
            },
            F {
                json: "volumeClaimTemplates",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("core/PersistentVolumeClaim"),
                },
            },
        ],
    },
    TypeDef {
        name: "apps/StatefulSetStatus",
        fields: &[F {
            json: "conditions",
            shape: S::List {
                smp: L::Map(&["type"]),
                ssa: L::Map(&["type"]),
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "coordination/Lease",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "core/Binding",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "core/ConfigMap",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "core/Container",
        fields: &[
            F {
                json: "ports",
                shape: S::List {
                    smp: L::Map(&["containerPort"]),
                    ssa: L::Map(&["containerPort", "protocol"]),
                    elem: None,
                },
            },
            F {
                json: "env",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
            F {
                json: "resources",
                shape: S::Struct("core/ResourceRequirements"),
            },
            F {
                json: "restartPolicyRules",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("core/ContainerRestartRule"),
                },
            },
            F {
                json: "volumeMounts",
                shape: S::List {
                    smp: L::Map(&["mountPath"]),
                    ssa: L::Map(&["mountPath"]),
                    elem: Some("core/VolumeMount"),
                },
            },
            F {
                json: "volumeDevices",
                shape: S::List {
                    smp: L::Map(&["devicePath"]),
                    ssa: L::Map(&["devicePath"]),
                    elem: None,
                },
            },
        ],
    },
    TypeDef {
        name: "core/ContainerRestartRule",
        fields: &[F {
            json: "exitCodes",
            shape: S::Struct("core/ContainerRestartRuleOnExitCodes"),
        }],
    },
    TypeDef {
        name: "core/ContainerRestartRuleOnExitCodes",
        fields: &[F {
            json: "values",
            shape: S::List {
                smp: L::Atomic,
                ssa: L::Set,
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "core/ContainerStatus",
        fields: &[
            F {
                json: "resources",
                shape: S::Struct("core/ResourceRequirements"),
            },
            F {
                json: "volumeMounts",
                shape: S::List {
                    smp: L::Map(&["mountPath"]),
                    ssa: L::Map(&["mountPath"]),
                    elem: None,
                },
            },
            F {
                json: "allocatedResourcesStatus",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: Some("core/ResourceStatus"),
                },
            },
        ],
    },
    TypeDef {
        name: "core/EphemeralContainer",
        fields: &[
            F {
                json: "ports",
                shape: S::List {
                    smp: L::Map(&["containerPort"]),
                    ssa: L::Map(&["containerPort", "protocol"]),
                    elem: None,
                },
            },
            F {
                json: "env",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
            F {
                json: "resources",
                shape: S::Struct("core/ResourceRequirements"),
            },
            F {
                json: "restartPolicyRules",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("core/ContainerRestartRule"),
                },
            },
            F {
                json: "volumeMounts",
                shape: S::List {
                    smp: L::Map(&["mountPath"]),
                    ssa: L::Map(&["mountPath"]),
                    elem: Some("core/VolumeMount"),
                },
            },
            F {
                json: "volumeDevices",
                shape: S::List {
                    smp: L::Map(&["devicePath"]),
                    ssa: L::Map(&["devicePath"]),
                    elem: None,
                },
            },
        ],
    },
    TypeDef {
        name: "core/EphemeralVolumeSource",
        fields: &[F {
            json: "volumeClaimTemplate",
            shape: S::Struct("core/PersistentVolumeClaimTemplate"),
        }],
    },
    TypeDef {
        name: "core/Event",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "core/Namespace",
        fields: &[
            F {
                json: "metadata",
                shape: S::Struct("meta/ObjectMeta"),
            },
            F {
                json: "status",
                shape: S::Struct("core/NamespaceStatus"),
            },
        ],
    },
    TypeDef {
        name: "core/NamespaceStatus",
        fields: &[F {
            json: "conditions",
            shape: S::List {
                smp: L::Map(&["type"]),
                ssa: L::Map(&["type"]),
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "core/Node",
        fields: &[
            F {
                json: "metadata",
                shape: S::Struct("meta/ObjectMeta"),
            },
            F {
                json: "spec",
                shape: S::Struct("core/NodeSpec"),
            },
            F {
                json: "status",
                shape: S::Struct("core/NodeStatus"),
            },
        ],
    },
    TypeDef {
        name: "core/NodeAllocatableResourceClaimStatus",
        fields: &[
            F {
                json: "containers",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Set,
                    elem: None,
                },
            },
            F {
                json: "mapping",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
            F {
                json: "overhead",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
        ],
    },
    TypeDef {
        name: "core/NodePodPreemptionPolicy",
        fields: &[F {
            json: "disableResizePreemption",
            shape: S::List {
                smp: L::Atomic,
                ssa: L::Set,
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "core/NodeSpec",
        fields: &[
            F {
                json: "podCIDRs",
                shape: S::List {
                    smp: L::Set,
                    ssa: L::Set,
                    elem: None,
                },
            },
            F {
                json: "podPreemptionPolicy",
                shape: S::Struct("core/NodePodPreemptionPolicy"),
            },
        ],
    },
    TypeDef {
        name: "core/NodeStatus",
        fields: &[
            F {
                json: "conditions",
                shape: S::List {
                    smp: L::Map(&["type"]),
                    ssa: L::Map(&["type"]),
                    elem: None,
                },
            },
            F {
                json: "addresses",
                shape: S::List {
                    smp: L::Map(&["type"]),
                    ssa: L::Map(&["type"]),
                    elem: None,
                },
            },
        ],
    },
    TypeDef {
        name: "core/PersistentVolumeClaim",
        fields: &[
            F {
                json: "metadata",
                shape: S::Struct("meta/ObjectMeta"),
            },
            F {
                json: "status",
                shape: S::Struct("core/PersistentVolumeClaimStatus"),
            },
        ],
    },
    TypeDef {
        name: "core/PersistentVolumeClaimStatus",
        fields: &[
            F {
                json: "conditions",
                shape: S::List {
                    smp: L::Map(&["type"]),
                    ssa: L::Map(&["type"]),
                    elem: None,
                },
            },
            F {
                json: "healthStatus",
                shape: S::Struct("core/VolumeHealthStatus"),
            },
        ],
    },
    TypeDef {
        name: "core/PersistentVolumeClaimTemplate",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "core/Pod",
        fields: &[
            F {
                json: "metadata",
                shape: S::Struct("meta/ObjectMeta"),
            },
            F {
                json: "spec",
                shape: S::Struct("core/PodSpec"),
            },
            F {
                json: "status",
                shape: S::Struct("core/PodStatus"),
            },
        ],
    },
    TypeDef {
        name: "core/PodSpec",
        fields: &[
            F {
                json: "volumes",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: Some("core/Volume"),
                },
            },
            F {
                json: "initContainers",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: Some("core/Container"),
                },
            },
            F {
                json: "containers",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: Some("core/Container"),
                },
            },
            F {
                json: "ephemeralContainers",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: Some("core/EphemeralContainer"),
                },
            },
            F {
                json: "imagePullSecrets",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
            F {
                json: "hostAliases",
                shape: S::List {
                    smp: L::Map(&["ip"]),
                    ssa: L::Map(&["ip"]),
                    elem: None,
                },
            },
            F {
                json: "topologySpreadConstraints",
                shape: S::List {
                    smp: L::Map(&["topologyKey"]),
                    ssa: L::Map(&["topologyKey", "whenUnsatisfiable"]),
                    elem: None,
                },
            },
            F {
                json: "schedulingGates",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
            F {
                json: "resourceClaims",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
            F {
                json: "resources",
                shape: S::Struct("core/ResourceRequirements"),
            },
            F {
                json: "evictionResponders",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
        ],
    },
    TypeDef {
        name: "core/PodStatus",
        fields: &[
            F {
                json: "conditions",
                shape: S::List {
                    smp: L::Map(&["type"]),
                    ssa: L::Map(&["type"]),
                    elem: None,
                },
            },
            F {
                json: "hostIPs",
                shape: S::List {
                    smp: L::Map(&["ip"]),
                    ssa: L::Atomic,
                    elem: None,
                },
            },
            F {
                json: "podIPs",
                shape: S::List {
                    smp: L::Map(&["ip"]),
                    ssa: L::Map(&["ip"]),
                    elem: None,
                },
            },
            F {
                json: "initContainerStatuses",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("core/ContainerStatus"),
                },
            },
            F {
                json: "containerStatuses",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("core/ContainerStatus"),
                },
            },
            F {
                json: "ephemeralContainerStatuses",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Atomic,
                    elem: Some("core/ContainerStatus"),
                },
            },
            F {
                json: "resourceClaimStatuses",
                shape: S::List {
                    smp: L::Map(&["name"]),
                    ssa: L::Map(&["name"]),
                    elem: None,
                },
            },
            F {
                json: "resources",
                shape: S::Struct("core/ResourceRequirements"),
            },
            F {
                json: "nodeAllocatableResourceClaimStatuses",
                shape: S::List {
                    smp: L::Map(&["resourceClaimName"]),
                    ssa: L::Map(&["resourceClaimName"]),
                    elem: Some("core/NodeAllocatableResourceClaimStatus"),
                },
            },
            F {
                json: "volumeHealth",
                shape: S::List {
                    smp: L::Atomic,
                    ssa: L::Map(&["name"]),
                    elem: Some("core/PodVolumeHealth"),
                },
            },
        ],
    },
    TypeDef {
        name: "core/PodTemplateSpec",
        fields: &[
            F {
                json: "metadata",
                shape: S::Struct("meta/ObjectMeta"),
            },
            F {
                json: "spec",
                shape: S::Struct("core/PodSpec"),
            },
        ],
    },
    TypeDef {
        name: "core/PodVolumeHealth",
        fields: &[F {
            json: "healthConditions",
            shape: S::List {
                smp: L::Map(&["status"]),
                ssa: L::Map(&["status", "reason"]),
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "core/ResourceRequirements",
        fields: &[F {
            json: "claims",
            shape: S::List {
                smp: L::Atomic,
                ssa: L::Map(&["name"]),
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "core/ResourceStatus",
        fields: &[F {
            json: "resources",
            shape: S::List {
                smp: L::Atomic,
                ssa: L::Map(&["resourceID"]),
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "core/Secret",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "core/Volume",
        fields: &[F {
            json: "ephemeral",
            shape: S::Struct("core/EphemeralVolumeSource"),
        }],
    },
    TypeDef {
        name: "core/VolumeHealthStatus",
        fields: &[F {
            json: "healthConditions",
            shape: S::List {
                smp: L::Map(&["status"]),
                ssa: L::Map(&["status", "reason"]),
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "core/VolumeMount",
        fields: &[F {
            json: "bindMountOptions",
            shape: S::List {
                smp: L::Atomic,
                ssa: L::Set,
                elem: None,
            },
        }],
    },
    TypeDef {
        name: "events/Event",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "meta/ObjectMeta",
        fields: &[
            F {
                json: "ownerReferences",
                shape: S::List {
                    smp: L::Map(&["uid"]),
                    ssa: L::Map(&["uid"]),
                    elem: None,
                },
            },
            F {
                json: "finalizers",
                shape: S::List {
                    smp: L::Set,
                    ssa: L::Set,
                    elem: None,
                },
            },
        ],
    },
    TypeDef {
        name: "policy/Eviction",
        fields: &[F {
            json: "metadata",
            shape: S::Struct("meta/ObjectMeta"),
        }],
    },
    TypeDef {
        name: "policy/PodDisruptionBudget",
        fields: &[
            F {
                json: "metadata",
                shape: S::Struct("meta/ObjectMeta"),
            },
            F {
                json: "status",
                shape: S::Struct("policy/PodDisruptionBudgetStatus"),
            },
        ],
    },
    TypeDef {
        name: "policy/PodDisruptionBudgetStatus",
        fields: &[F {
            json: "conditions",
            shape: S::List {
                smp: L::Map(&["type"]),
                ssa: L::Map(&["type"]),
                elem: None,
            },
        }],
    },
];

/// Defaults of map-list key fields (`+default=`): (owner type, list field, key, JSON default).
pub(crate) static KEY_DEFAULTS: &[(&str, &str, &str, &str)] = &[
    ("core/Container", "ports", "protocol", r#""TCP""#),
    ("core/EphemeralContainer", "ports", "protocol", r#""TCP""#),
    ("core/PodSpec", "imagePullSecrets", "name", r#""""#),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn map(keys: &[&str]) -> ListType {
        ListType::Map(keys.iter().map(|k| k.to_string()).collect())
    }

    #[test]
    fn table_is_sorted_and_closed() {
        assert!(TYPES.windows(2).all(|w| w[0].name < w[1].name));
        // Every type the table refers to is in it (a dangling name would silently
        // turn a whole subtree atomic).
        for def in TYPES {
            for f in def.fields {
                let target = match &f.shape {
                    S::Struct(t) | S::MapOf(t) => Some(*t),
                    S::List { elem, .. } => *elem,
                };
                if let Some(t) = target {
                    assert!(type_def(t).is_some(), "{}.{} -> {t}", def.name, f.json);
                }
            }
        }
    }

    #[test]
    fn pod_strategic_keys_match_upstream_tags() {
        let pod = BuiltinListTypes::for_kind("", "Pod");
        for c in ["containers", "initContainers", "ephemeralContainers"] {
            assert_eq!(pod.list_type(&["spec", c]), map(&["name"]), "{c}");
            assert_eq!(
                pod.list_type(&["spec", c, "ports"]),
                map(&["containerPort"])
            );
            assert_eq!(pod.list_type(&["spec", c, "env"]), map(&["name"]));
            assert_eq!(
                pod.list_type(&["spec", c, "volumeMounts"]),
                map(&["mountPath"])
            );
            assert_eq!(
                pod.list_type(&["spec", c, "volumeDevices"]),
                map(&["devicePath"])
            );
            assert_eq!(pod.list_type(&["spec", c, "command"]), ListType::Atomic);
        }
        assert_eq!(pod.list_type(&["spec", "volumes"]), map(&["name"]));
        assert_eq!(pod.list_type(&["spec", "imagePullSecrets"]), map(&["name"]));
        assert_eq!(pod.list_type(&["spec", "hostAliases"]), map(&["ip"]));
        assert_eq!(pod.list_type(&["spec", "tolerations"]), ListType::Atomic);
        assert_eq!(pod.list_type(&["status", "conditions"]), map(&["type"]));
        assert_eq!(pod.list_type(&["status", "podIPs"]), map(&["ip"]));
        assert_eq!(
            pod.list_type(&["status", "containerStatuses"]),
            ListType::Atomic
        );
        assert_eq!(pod.list_type(&["metadata", "finalizers"]), ListType::Set);
        assert_eq!(
            pod.list_type(&["metadata", "ownerReferences"]),
            map(&["uid"])
        );
        // A path that names a struct, or nothing, is not a mergeable list.
        assert_eq!(pod.list_type(&["spec"]), ListType::Atomic);
        assert_eq!(
            pod.list_type(&["spec", "nope", "containers"]),
            ListType::Atomic
        );
    }

    #[test]
    fn other_kinds() {
        let node = BuiltinListTypes::for_kind("", "Node");
        assert_eq!(node.list_type(&["spec", "taints"]), ListType::Atomic);
        assert_eq!(node.list_type(&["spec", "podCIDRs"]), ListType::Set);
        assert_eq!(node.list_type(&["status", "conditions"]), map(&["type"]));
        assert_eq!(node.list_type(&["status", "addresses"]), map(&["type"]));
        let sts = BuiltinListTypes::for_kind("apps", "StatefulSet");
        assert_eq!(
            sts.list_type(&["spec", "template", "spec", "containers"]),
            map(&["name"])
        );
        assert_eq!(
            sts.list_type(&["spec", "template", "metadata", "finalizers"]),
            ListType::Set
        );
        assert_eq!(sts.list_type(&["status", "conditions"]), map(&["type"]));
        assert_eq!(
            sts.list_type(&["spec", "volumeClaimTemplates"]),
            ListType::Atomic
        );
        let pdb = BuiltinListTypes::for_kind("policy", "PodDisruptionBudget");
        assert_eq!(pdb.list_type(&["status", "conditions"]), map(&["type"]));
        let ns = BuiltinListTypes::for_kind("core", "Namespace");
        assert_eq!(ns.list_type(&["status", "conditions"]), map(&["type"]));
        let cm = BuiltinListTypes::for_kind("", "ConfigMap");
        assert_eq!(cm.list_type(&["metadata", "finalizers"]), ListType::Set);
        let unknown = BuiltinListTypes::for_kind("example.com", "Widget");
        assert!(!unknown.is_known());
        assert_eq!(
            unknown.list_type(&["metadata", "finalizers"]),
            ListType::Atomic
        );
    }

    #[test]
    fn apply_view_uses_list_map_keys_and_defaults() {
        let pod = BuiltinListTypes::for_apply("", "Pod");
        let ports = ["spec", "containers", "ports"];
        assert_eq!(pod.list_type(&ports), map(&["containerPort", "protocol"]));
        assert_eq!(
            pod.key_default(&ports, "protocol"),
            Some(Value::from("TCP"))
        );
        assert_eq!(pod.key_default(&ports, "containerPort"), None);
        // listType=atomic wins over the patch strategy.
        assert_eq!(pod.list_type(&["status", "hostIPs"]), ListType::Atomic);
        assert_eq!(
            BuiltinListTypes::for_kind("", "Pod").list_type(&["status", "hostIPs"]),
            map(&["ip"])
        );
        let crd = BuiltinListTypes::for_apply("apiextensions.k8s.io", "CustomResourceDefinition");
        assert_eq!(crd.list_type(&["status", "conditions"]), map(&["type"]));
        // Map-typed fields consume one path segment for the key.
        let rules = [
            "spec",
            "versions",
            "schema",
            "openAPIV3Schema",
            "properties",
            "spec",
            "x-kubernetes-validations",
        ];
        assert_eq!(crd.list_type(&rules), map(&["rule"]));
    }
}
