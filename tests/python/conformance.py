"""The official Python kubernetes client against the embedded plane (issue 10):
each check reproduces a difference that broke this client and asserts
upstream's behaviour. Run by tests/tests/python_client.rs with KUBECONFIG set;
prints one line per check and exits non-zero on the first failure."""

import json
import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config()
core = client.CoreV1Api()
apps = client.AppsV1Api()
api = client.ApiClient()
NS = "default"


def check(name, cond, detail=""):
    if not cond:
        print(f"FAIL {name}: {detail}")
        sys.exit(1)
    print(f"ok {name}")


# 1. A ConfigMap with `data: 5` is refused, and the typed client can still
#    list the namespace (it could not when the server stored it).
try:
    api.call_api(
        f"/api/v1/namespaces/{NS}/configmaps", "POST",
        body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "five"}, "data": 5},
        response_type="object", auth_settings=["BearerToken"], _return_http_data_only=True,
    )
    check("data: 5 is refused", False, "the server stored it")
except ApiException as e:
    check("data: 5 is refused with 400", e.status == 400, f"status {e.status}: {e.body}")
names = [c.metadata.name for c in core.list_namespaced_config_map(NS).items]
check("the namespace stays listable by the typed client", "five" not in names, str(names))

# 2. A watch with a label selector reports an object leaving it as DELETED
#    with the last state that matched.
cm = core.create_namespaced_config_map(
    NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="leaver", labels={"tier": "web"})))
w = watch.Watch()
stream = w.stream(core.list_namespaced_config_map, NS, label_selector="tier=web",
                  resource_version=cm.metadata.resource_version, timeout_seconds=10)
core.patch_namespaced_config_map("leaver", NS, {"metadata": {"labels": {"tier": "db"}}})
event = next(stream)
w.stop()
check("leaving the selector is DELETED", event["type"] == "DELETED", event["type"])
check("with the labels that matched", event["object"].metadata.labels.get("tier") == "web",
      str(event["object"].metadata.labels))

# 3. A StatefulSet reads back defaulted, so typed clients and
#    `kubectl rollout status` find what they need.
sts = apps.create_namespaced_stateful_set(NS, {
    "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web"},
    "spec": {"selector": {"matchLabels": {"app": "web"}}, "serviceName": "web",
             "template": {"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "c", "image": "x"}]}}}})
check("statefulset replicas defaulted", sts.spec.replicas == 1, str(sts.spec.replicas))
check("statefulset updateStrategy defaulted",
      sts.spec.update_strategy.type == "RollingUpdate"
      and sts.spec.update_strategy.rolling_update.partition == 0,
      str(sts.spec.update_strategy))
check("statefulset podManagementPolicy defaulted",
      sts.spec.pod_management_policy == "OrderedReady", str(sts.spec.pod_management_policy))

# 4. DELETE of a ConfigMap answers a Status naming it; of a Pod, the pod.
status = core.delete_namespaced_config_map("leaver", NS)
check("configmap delete answers a Status", status.kind == "Status" and status.details.name == "leaver",
      str(status))

# 5. DELETE of a batch/v1 Job without a propagation policy answers the Job,
#    held by the `orphan` finalizer (upstream orphans a Job's pods by default,
#    for compatibility), with upstream's warning.
batch = client.BatchV1Api()
batch.create_namespaced_job(NS, {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once"},
    "spec": {"template": {"spec": {"restartPolicy": "Never",
                                   "containers": [{"name": "c", "image": "x"}]}}}})
deleted = batch.delete_namespaced_job("once", NS)
check("job delete answers the Job", getattr(deleted, "kind", None) == "Job"
      or (isinstance(deleted, dict) and deleted.get("kind") == "Job"), str(deleted)[:300])

# 6. A Status is written as Go writes it: details before code, no empty group.
try:
    core.read_namespaced_config_map("nowhere", NS)
    check("a missing ConfigMap is 404", False, "it was found")
except ApiException as e:
    check("a Status reads as upstream's, byte for byte", e.body ==
          '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
          '"message":"configmaps \\"nowhere\\" not found","reason":"NotFound",'
          '"details":{"name":"nowhere","kind":"configmaps"},"code":404}', e.body)
print(json.dumps({"checks": "all passed"}))
