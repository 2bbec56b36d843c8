//! CEL validation rules (`x-kubernetes-validations`) on a CRD, through
//! kubectl and kube-rs: an object breaking a rule is refused with upstream's
//! 422 (message, messageExpression, fieldPath, reason), a transition rule
//! keeps a field immutable, status rules run on `/status` writes, and a CRD
//! whose rule does not compile or is over the cost budget is refused.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject};
use serde_json::{Value, json};
use wasmlet_e2e::*;

/// `scalers.test.wasmlet.dev`: rules on `spec` (a cross-field rule, a
/// messageExpression, a fieldPath with a reason), on `spec.name` (a
/// transition rule) and on `status`.
fn scaler_crd(extra_spec_rules: Value) -> Value {
    let mut spec_rules = json!([
        {"rule": "self.minReplicas <= self.replicas",
         "message": "minReplicas must not exceed replicas"},
        {"rule": "self.replicas <= 10",
         "messageExpression": "'replicas ' + string(self.replicas) + ' is over 10'"},
        {"rule": "!has(self.mode) || self.mode in ['fast', 'slow']", "fieldPath": ".mode",
         "reason": "FieldValueForbidden", "message": "mode must be fast or slow"},
    ]);
    spec_rules
        .as_array_mut()
        .unwrap()
        .extend(extra_spec_rules.as_array().unwrap().iter().cloned());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "scalers.test.wasmlet.dev"},
        "spec": {
            "group": "test.wasmlet.dev",
            "scope": "Namespaced",
            "names": {"plural": "scalers", "singular": "scaler", "kind": "Scaler"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-validations": spec_rules, "properties": {
                        "replicas": {"type": "integer"},
                        "minReplicas": {"type": "integer"},
                        "mode": {"type": "string", "maxLength": 16},
                        "name": {"type": "string", "maxLength": 63, "x-kubernetes-validations": [
                            {"rule": "self == oldSelf", "message": "name is immutable"}]},
                        "hosts": {"type": "array", "items": {"type": "string", "maxLength": 253}},
                    }},
                    "status": {"type": "object", "properties": {"ready": {"type": "integer"}},
                        "x-kubernetes-validations": [{"rule": "self.ready >= 0",
                            "message": "ready must not be negative"}]},
                }}},
            }],
        },
    })
}

fn scalers(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "test.wasmlet.dev".into(),
        version: "v1".into(),
        api_version: "test.wasmlet.dev/v1".into(),
        kind: "Scaler".into(),
        plural: "scalers".into(),
    };
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn manifest(dir: &tempfile::TempDir, name: &str, v: &Value) -> anyhow::Result<PathBuf> {
    let p = dir.path().join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(v)?)?;
    Ok(p)
}

fn scaler(spec: Value) -> Value {
    json!({"apiVersion": "test.wasmlet.dev/v1", "kind": "Scaler",
        "metadata": {"name": "x", "namespace": "default"}, "spec": spec})
}

/// The message of the 422 a kube call got.
#[track_caller]
fn invalid<T: std::fmt::Debug>(r: std::result::Result<T, kube::Error>) -> String {
    expect_status(r, 422, "Invalid").message
}

#[tokio::test]
async fn rules_refuse_objects_that_break_them() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let dir = tempfile::tempdir()?;
    let crd = manifest(&dir, "crd.json", &scaler_crd(json!([])))?;
    plane.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()])?;

    // kubectl: create breaking the cross-field rule, upstream's text.
    let bad = manifest(
        &dir,
        "bad.json",
        &scaler(json!({"replicas": 1, "minReplicas": 2, "name": "a"})),
    )?;
    let out = plane.kubectl(&["apply", "-f", bad.to_str().unwrap()])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "The Scaler \"x\" is invalid: spec: Invalid value: \"object\": minReplicas must not exceed replicas"
        ),
        "{stderr}"
    );
    // Fixed, it is created.
    let good = manifest(
        &dir,
        "good.json",
        &scaler(json!({"replicas": 3, "minReplicas": 2, "name": "a"})),
    )?;
    plane.kubectl_ok(&["apply", "-f", good.to_str().unwrap()])?;

    let api = scalers(&client);
    // kube-rs: a messageExpression's message, then a fieldPath with its reason.
    let r = api
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 12}})),
        )
        .await;
    assert_eq!(
        invalid(r),
        "Scaler.test.wasmlet.dev \"x\" is invalid: spec: Invalid value: \"object\": replicas 12 is over 10"
    );
    let r = api
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "turbo"}})),
        )
        .await;
    let s = expect_status(r, 422, "Invalid");
    let causes = s.details.unwrap().causes;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(
        (
            causes[0].field.as_str(),
            causes[0].reason.as_str(),
            causes[0].message.as_str()
        ),
        (
            "spec.mode",
            "FieldValueForbidden",
            "Forbidden: mode must be fast or slow"
        )
    );

    // The transition rule: `name` may not change, by update or by apply.
    let mut obj = api.get("x").await?;
    obj.data["spec"]["name"] = json!("b");
    let r = api.replace("x", &PostParams::default(), &obj).await;
    assert_eq!(
        invalid(r),
        "Scaler.test.wasmlet.dev \"x\" is invalid: spec.name: Invalid value: \"string\": name is immutable"
    );
    let r = api
        .patch(
            "x",
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(scaler(
                json!({"replicas": 3, "minReplicas": 2, "name": "c"}),
            )),
        )
        .await;
    assert!(invalid(r).ends_with("spec.name: Invalid value: \"string\": name is immutable"));
    // Other changes pass with the name kept.
    let ok = api
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5, "mode": "slow"}})),
        )
        .await?;
    assert_eq!(ok.data["spec"]["replicas"], 5);

    // Status rules: a /status write is checked; the main resource's writes
    // keep the stored status.
    let r = api
        .patch_status(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": -1}})),
        )
        .await;
    assert_eq!(
        invalid(r),
        "Scaler.test.wasmlet.dev \"x\" is invalid: status: Invalid value: \"object\": ready must not be negative"
    );
    api.patch_status(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"ready": 2}})),
    )
    .await?;
    assert_eq!(api.get("x").await?.data["status"]["ready"], 2);
    Ok(())
}

fn crd_error(r: std::result::Result<CustomResourceDefinition, kube::Error>) -> String {
    invalid(r)
}

/// Creates the CRD `v` (a test's literal, so it must parse).
async fn create_crd(
    crds: &Api<CustomResourceDefinition>,
    v: Value,
) -> std::result::Result<CustomResourceDefinition, kube::Error> {
    let crd: CustomResourceDefinition = serde_json::from_value(v).unwrap();
    crds.create(&PostParams::default(), &crd).await
}

#[tokio::test]
async fn crds_with_bad_or_costly_rules_are_refused() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let create = |v: Value| create_crd(&crds, v);
    let path = "spec.versions[0].schema.openAPIV3Schema.properties[spec]";

    // A rule that does not compile, through kubectl and kube-rs.
    let dir = tempfile::tempdir()?;
    let broken = scaler_crd(json!([{"rule": "self.replicas >"}]));
    let file = manifest(&dir, "broken.json", &broken)?;
    let out = plane.kubectl(&["apply", "-f", file.to_str().unwrap()])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "{path}.x-kubernetes-validations[3].rule: Invalid value: apiextensions.ValidationRule{{Rule:\"self.replicas >\""
        )) && stderr.contains("compilation failed: ERROR: <input>:1:16: Syntax error"),
        "{stderr}"
    );
    let msg = crd_error(create(scaler_crd(json!([{"rule": "self.nope == 1"}]))).await);
    assert!(
        msg.contains(&format!("{path}.x-kubernetes-validations[3].rule"))
            && msg.contains("undefined field 'nope'"),
        "{msg}"
    );

    // Every pair of an unbounded list's items: refused as upstream refuses it.
    let pairs = json!([{"rule": "self.hosts.all(a, self.hosts.exists_one(b, a == b))",
        "message": "hosts must be unique"}]);
    let msg = crd_error(create(scaler_crd(pairs.clone())).await);
    assert!(
        msg.contains(&format!(
            "{path}.x-kubernetes-validations[3].rule: Forbidden: estimated rule cost exceeds budget by factor of"
        )) && msg.contains("try simplifying the rule, or adding maxItems"),
        "{msg}"
    );
    // With maxItems the same rule is accepted and enforced.
    let mut bounded = scaler_crd(pairs);
    bounded["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["hosts"]["maxItems"] = json!(32);
    create(bounded).await?;
    let api = scalers(&client);
    let obj = dynamic(scaler(
        json!({"replicas": 1, "minReplicas": 1, "hosts": ["a", "b", "a"]}),
    ));
    let r = eventually(
        std::time::Duration::from_secs(60),
        "the CRD served",
        || async {
            match api.create(&PostParams::default(), &obj).await {
                Err(kube::Error::Api(s)) if s.code == 404 => None,
                other => Some(other),
            }
        },
    )
    .await?;
    assert!(invalid(r).ends_with("spec: Invalid value: \"object\": hosts must be unique"));
    let mut unique = obj.clone();
    unique.data["spec"]["hosts"] = json!(["a", "b"]);
    api.create(&PostParams::default(), &unique).await?;
    Ok(())
}

/// The CRD kube-rs derives for a type with `#[x_kube(validation)]` rules,
/// as its users write them.
mod derived {
    use kube::{CustomResource, KubeSchema};
    use serde::{Deserialize, Serialize};

    #[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug)]
    #[kube(group = "test.wasmlet.dev", version = "v1", kind = "Range", namespaced)]
    #[x_kube(validation = Rule::new("self.max >= self.min").message("max must be at least min"))]
    pub struct RangeSpec {
        pub min: i32,
        pub max: i32,
        #[x_kube(validation = Rule::new("self == oldSelf").message("unit is immutable"))]
        pub unit: String,
    }
}

#[tokio::test]
async fn rules_derived_by_kube_rs_are_enforced() -> anyhow::Result<()> {
    use derived::{Range, RangeSpec};
    use kube::CustomResourceExt;

    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Range::crd()).await?;
    let ranges: Api<Range> = Api::namespaced(client.clone(), "default");
    let range = |min, max, unit: &str| {
        Range::new(
            "r",
            RangeSpec {
                min,
                max,
                unit: unit.into(),
            },
        )
    };
    let r = eventually(
        std::time::Duration::from_secs(60),
        "the CRD served",
        || async {
            match ranges
                .create(&PostParams::default(), &range(5, 1, "s"))
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 => None,
                other => Some(other),
            }
        },
    )
    .await?;
    assert_eq!(
        invalid(r),
        "Range.test.wasmlet.dev \"r\" is invalid: spec: Invalid value: \"object\": max must be at least min"
    );
    let created = ranges
        .create(&PostParams::default(), &range(1, 5, "s"))
        .await?;
    let mut changed = created.clone();
    changed.spec.unit = "ms".into();
    let r = ranges.replace("r", &PostParams::default(), &changed).await;
    assert_eq!(
        invalid(r),
        "Range.test.wasmlet.dev \"r\" is invalid: spec.unit: Invalid value: \"string\": unit is immutable"
    );
    let mut wider = created;
    wider.spec.max = 9;
    assert_eq!(
        ranges
            .replace("r", &PostParams::default(), &wider)
            .await?
            .spec
            .max,
        9
    );
    Ok(())
}

/// Rules whose worst case the estimate used to miss (a conditional's larger
/// branch, `replace('')`) are refused when the CRD is written, naming the
/// rule; a rule over many items with a Unicode regex (compiled per call, it
/// took 26 s for 1,000 items) is compiled once and the write is quick.
#[tokio::test]
async fn underpriced_rules_are_refused_and_bounded_writes_are_quick() -> anyhow::Result<()> {
    let plane = Plane::start_limited(&[], wasmlet_e2e::Limits::ATTACK).await?;
    let client = plane.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let create = |v: Value| create_crd(&crds, v);
    let with_max_hosts = |rules: Value, max: u64| {
        let mut crd = scaler_crd(rules);
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["hosts"]["maxItems"] = json!(max);
        crd
    };
    let path = "spec.versions[0].schema.openAPIV3Schema.properties[spec]";
    let over = format!(
        "{path}.x-kubernetes-validations[3].rule: Forbidden: estimated rule cost exceeds budget by factor of"
    );

    // 300³ steps through `cond ? [] : list` (28.8 s for one write).
    let nested = json!([{"rule": "self.hosts.all(a, (a == '' ? [] : self.hosts).all(b, \
        (b == '' ? [] : self.hosts).all(c, c != a + b)))"}]);
    let msg = crd_error(create(with_max_hosts(nested, 300)).await);
    assert!(msg.contains(&over), "{msg}");
    // 63 characters with the name between every two, four times over.
    let replaced = json!([{"rule": "self.name.replace('', self.name).replace('', self.name)\
        .replace('', self.name).replace('', self.name) != ''"}]);
    let msg = crd_error(create(scaler_crd(replaced)).await);
    assert!(msg.contains(&over), "{msg}");

    let names = json!([{"rule": "self.hosts.all(h, h.matches('^[\\\\p{L}\\\\p{N}.-]{1,63}$'))",
        "message": "hosts are letters, digits, dots and dashes"}]);
    create(with_max_hosts(names, 1000)).await?;
    let api = scalers(&client);
    let small = dynamic(scaler(
        json!({"replicas": 1, "minReplicas": 1, "hosts": ["a"]}),
    ));
    eventually(
        std::time::Duration::from_secs(60),
        "the CRD served",
        || async {
            match api.create(&PostParams::default(), &small).await {
                Err(kube::Error::Api(s)) if s.code == 404 => None,
                other => Some(other),
            }
        },
    )
    .await??;
    let hosts: Vec<String> = (0..1000).map(|i| format!("hôst-{i}.example")).collect();
    let mut obj = dynamic(scaler(
        json!({"replicas": 1, "minReplicas": 1, "hosts": hosts}),
    ));
    obj.metadata.name = Some("big".into());
    // Accepted: within the runtime deadline (5 s), which the per-call compiles
    // (26 s) were far past.
    api.create(&PostParams::default(), &obj).await?;
    let mut bad = obj.clone();
    bad.metadata.name = Some("y".into());
    bad.data["spec"]["hosts"] = json!(["ok", "not ok"]);
    let msg = invalid(api.create(&PostParams::default(), &bad).await);
    assert!(
        msg.ends_with(
            "spec: Invalid value: \"object\": hosts are letters, digits, dots and dashes"
        ),
        "{msg}"
    );
    Ok(())
}
