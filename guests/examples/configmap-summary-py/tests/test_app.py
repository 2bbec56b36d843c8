"""Native unit tests of the reconciler against wasmlet.testing.FakeHost (no wasm)."""

from pathlib import Path

import app
from wasmlet import Context, ErrorKind, TerminalError
from wasmlet.export import Failure, run_reconcile
from wasmlet.testing import FakeHost

HERE = Path(__file__).resolve().parent.parent


def summary(name, prefix=None, namespace="ns"):
    meta = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    spec = {"keyPrefix": prefix} if prefix else {}
    return {"apiVersion": "examples.wasmlet.dev/v1", "kind": "ConfigSummary",
            "metadata": meta, "spec": spec}


def config_map(name, summary_name, keys):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns",
                         "labels": {app.SUMMARY_LABEL: summary_name}},
            "data": {k: "v" for k in keys}}


def test_counts_labelled_keys_and_sets_the_condition():
    host = FakeHost()
    host.insert(config_map("a", "s1", ["x", "y"]))
    host.insert(config_map("b", "s1", ["app.z"]))
    host.insert(config_map("c", "s2", ["w"]))
    with host.install():
        obj = summary("s1")
        action = app.reconcile(obj, Context.for_object(obj))
        assert action.status == {"keys": 3, "configMaps": 2}
        assert [c.type for c in action.conditions] == ["Summarised"]
        assert action.conditions[0].reason == "Counted"
        assert action.requeue_after is None

        obj = summary("s1", prefix="app.")
        action = app.reconcile(obj, Context.for_object(obj))
        assert action.status == {"keys": 1, "configMaps": 2}
    assert host.logs() == [("debug", "summarised")] * 2
    assert host.log_fields()[0] == {"configMaps": "2", "keys": "3"}
    assert host.writes() == []


def test_a_summary_outside_a_namespace_is_a_terminal_error():
    with FakeHost().install():
        out = run_reconcile(app.reconcile, '{"apiVersion": "examples.wasmlet.dev/v1",'
                                           ' "kind": "ConfigSummary", "metadata": {"name": "x"}}')
    assert isinstance(out, Failure)
    assert (out.kind, out.reason) == (ErrorKind.TERMINAL, "NotNamespaced")


def test_denied_listing_is_terminal_as_in_the_rust_sdk():
    host = FakeHost()
    host.deny("ConfigMap")
    with host.install():
        out = run_reconcile(app.reconcile, '{"apiVersion": "examples.wasmlet.dev/v1",'
                                           ' "kind": "ConfigSummary",'
                                           ' "metadata": {"name": "x", "namespace": "ns"}}')
    assert (out.kind, out.reason) == (ErrorKind.TERMINAL, "Forbidden")
    assert issubclass(TerminalError, Exception)


def test_ships_the_rust_examples_crd():
    """One kind, two implementations: the CRD is the Rust example's, byte for byte."""
    rust = HERE.parent / "configmap-summary" / "configsummary.crd.yaml"
    assert (HERE / "configsummary.crd.yaml").read_bytes() == rust.read_bytes()


def test_manifest_is_the_rust_examples():
    """Same kind, watches, permissions and limits as the Rust example (comments aside)."""
    def body(p):
        return [l for l in p.read_text().splitlines() if l and not l.startswith("#")]
    rust = HERE.parent / "configmap-summary" / "configmap-summary.toml"
    assert body(HERE / "configmap-summary-py.toml") == body(rust)
