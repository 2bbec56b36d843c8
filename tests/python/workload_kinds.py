"""The official Python kubernetes client on the kinds issue 31 item 8 added:
DaemonSets and ReplicationControllers read back defaulted through the typed
APIs (scale included), and SelfSubjectReview / SelfSubjectRulesReview answer.
Run by tests/tests/python_workload_kinds.rs with KUBECONFIG set; prints one
line per check and exits non-zero on the first failure."""

import json
import sys

from kubernetes import client, config

config.load_kube_config()
core = client.CoreV1Api()
apps = client.AppsV1Api()
NS = "default"


def check(name, cond, detail=""):
    if not cond:
        print(f"FAIL {name}: {detail}")
        sys.exit(1)
    print(f"ok {name}")


template = {"metadata": {"labels": {"app": "agent"}},
            "spec": {"containers": [{"name": "c", "image": "example.com/agent:1"}]}}
ds = apps.create_namespaced_daemon_set(NS, {
    "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
    "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template}})
check("daemonset updateStrategy defaulted",
      ds.spec.update_strategy.type == "RollingUpdate"
      and ds.spec.update_strategy.rolling_update.max_unavailable == 1,
      str(ds.spec.update_strategy))
check("daemonset revisionHistoryLimit defaulted", ds.spec.revision_history_limit == 10,
      str(ds.spec.revision_history_limit))
names = [d.metadata.name for d in apps.list_namespaced_daemon_set(NS).items]
check("daemonsets list", names == ["agent"], str(names))

rc = core.create_namespaced_replication_controller(NS, {
    "apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "web"},
    "spec": {"template": {"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "c", "image": "example.com/web:1"}]}}}})
check("rc selector defaulted from the template", rc.spec.selector == {"app": "web"},
      str(rc.spec.selector))
check("rc replicas defaulted", rc.spec.replicas == 1, str(rc.spec.replicas))
core.patch_namespaced_replication_controller_scale("web", NS, {"spec": {"replicas": 3}})
scale = core.read_namespaced_replication_controller_scale("web", NS)
check("rc scale", scale.spec.replicas == 3 and scale.status.selector == "app=web", str(scale))

me = client.AuthenticationV1Api().create_self_subject_review(
    {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
check("whoami", me.status.user_info.username == "wasmlet-admin", str(me.status))
rules = client.AuthorizationV1Api().create_self_subject_rules_review(
    {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
     "spec": {"namespace": NS}})
check("rules review", not rules.status.incomplete
      and any(r.resources == ["*"] and r.verbs == ["*"] for r in rules.status.resource_rules),
      str(rules.status))
print(json.dumps({"checks": "all passed"}))
