"""The SDK's own behaviour, natively: the export's translation, errors, the client
against the fake host."""

import json
from datetime import timedelta
from typing import Any

import pytest

import wasmlet
from wasmlet import (
    Action,
    Client,
    Condition,
    ConditionStatus,
    Conflict,
    Context,
    Denied,
    ErrorKind,
    Event,
    Finalize,
    NotFound,
    Object,
    Patch,
    TerminalError,
    TransientError,
)
from wasmlet.export import Failure, Outcome, reconciler, run_finalize, run_reconcile
from wasmlet.testing import FakeHost, fields_match, labels_match

OBJ = json.dumps({"apiVersion": "example.com/v1", "kind": "Thing",
                  "metadata": {"name": "t", "namespace": "ns"}})


def failed(result: Outcome | Failure | int | None) -> Failure:
    assert isinstance(result, Failure), result
    return result


def succeeded(result: Outcome | Failure) -> Outcome:
    assert isinstance(result, Outcome), result
    return result


def test_an_action_becomes_the_contracts_outcome() -> None:
    def rec(obj: Object, ctx: Context) -> Action:
        assert ctx.object == wasmlet.ObjectRef("example.com/v1", "Thing", "t", "ns")
        return Action.requeue(timedelta(minutes=5), status={"n": 1},
                              conditions=[Condition.false("Ready2", "Waiting", "soon")])
    out = run_reconcile(rec, OBJ)
    assert out == Outcome('{"n":1}', [Condition("Ready2", ConditionStatus.FALSE, "Waiting", "soon")],
                          300_000)
    assert run_reconcile(lambda o, c: Action.await_change(), OBJ) == Outcome(None, [], None)
    assert succeeded(run_reconcile(lambda o, c: Action.requeue(0.25), OBJ)).requeue_after_ms == 250


def test_errors_keep_their_kind_status_and_conditions() -> None:
    def rec(obj: Object, ctx: Context) -> Action:
        raise TerminalError("BadSpec", "spec.size must be positive", status={"phase": "Bad"},
                            conditions=[Condition.false("Valid", "BadSpec")])
    out = run_reconcile(rec, OBJ)
    assert out == Failure(ErrorKind.TERMINAL, "BadSpec", "spec.size must be positive",
                          '{"phase":"Bad"}', [Condition.false("Valid", "BadSpec")])

    def transient(obj: Object, ctx: Context) -> Action:
        raise TransientError("Waiting", "for the database")
    assert failed(run_reconcile(transient, OBJ)).kind == ErrorKind.TRANSIENT


def test_client_errors_map_as_in_the_rust_sdk() -> None:
    host = FakeHost()
    host.deny("Secret")
    with host.install():
        # The lambdas return what `get` returns: never reached, it raises.
        denied = failed(run_reconcile(
            lambda o, c: c.client.get("v1", "Secret", "s", "ns"), OBJ))  # type: ignore[arg-type, return-value]
        missing = failed(run_reconcile(
            lambda o, c: c.client.get("v1", "Secret2", "s", "ns"), OBJ))  # type: ignore[arg-type, return-value]
    assert (denied.kind, denied.reason, denied.message) == (
        ErrorKind.TERMINAL, "Forbidden", "denied by the plugin manifest: get Secret")
    assert (missing.kind, missing.reason, missing.message) == (
        ErrorKind.TRANSIENT, "NotFound", "not found")


def test_a_bug_is_a_transient_error_naming_where_it_was_raised() -> None:
    def rec(obj: Object, ctx: Context) -> Action:
        empty: dict[str, Action] = {}
        return empty["missing"]
    out = failed(run_reconcile(rec, OBJ))
    assert out.kind == ErrorKind.TRANSIENT and out.reason == "UncaughtException"
    assert out.message.startswith("KeyError: 'missing' (test_sdk.py:"), out.message


def test_bad_input_and_output_are_terminal_and_say_what() -> None:
    assert failed(run_reconcile(lambda o, c: Action(), "not json")).reason == "InvalidObject"
    # What the types refuse, a reconciler without them can still do.
    assert failed(run_reconcile(lambda o, c: "done", OBJ)).reason == "InvalidAction"  # type: ignore[arg-type, return-value]
    bad = failed(run_reconcile(lambda o, c: Action.await_change(status={"t": object()}), OBJ))
    assert (bad.kind, bad.reason) == (ErrorKind.TERMINAL, "InvalidStatus")
    not_a_dict: Any = [1]
    assert failed(run_reconcile(lambda o, c: Action.await_change(status=not_a_dict), OBJ)).reason == "InvalidStatus"
    negative = failed(run_reconcile(lambda o, c: Action.requeue(-1), OBJ))
    assert (negative.reason, negative.message) == (
        "InvalidAction",
        "requeue: a duration must be 0 or more seconds, not datetime.timedelta(days=-1, seconds=86399)")


def test_finalize() -> None:
    assert run_finalize(None, OBJ) is None
    assert run_finalize(lambda o, c: Finalize.done(), OBJ) is None
    assert run_finalize(lambda o, c: Finalize.retry(2), OBJ) == 2000
    assert failed(run_finalize(lambda o, c: None, OBJ)).reason == "InvalidFinalize"  # type: ignore[arg-type, return-value]


def test_the_exported_class_declares_its_conditions() -> None:
    cls = reconciler(lambda o, c: Action(), conditions=["A", "B"])
    assert cls.__name__ == "Reconciler"
    assert cls().declared_conditions() == ["A", "B"]


def test_the_fake_client_reads_writes_and_records() -> None:
    host = FakeHost()
    host.insert({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "x"}}})
    c = Client()
    with host.install():
        assert [m["metadata"]["name"] for m in c.list("v1", "ConfigMap", "ns", "app=x")] == ["a"]
        assert c.list("v1", "ConfigMap", "ns", "app!=x") == []
        assert c.list("v1", "ConfigMap", None, fields="metadata.name=a")[0]["kind"] == "ConfigMap"
        assert c.get_opt("v1", "ConfigMap", "b", "ns") is None
        made = c.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "b", "namespace": "ns"}})
        with pytest.raises(Conflict):
            c.create(made)
        stale = dict(made, metadata=dict(made["metadata"], resourceVersion="0"))
        with pytest.raises(Conflict):
            c.update(stale)
        c.patch("v1", "ConfigMap", "b", Patch.merge({"data": {"k": "v"}}), "ns")
        applied = c.patch("v1", "ConfigMap", "c", Patch.apply(
            {"apiVersion": "v1", "kind": "ConfigMap", "data": {"x": "1"}}, "me", force=True), "ns")
        assert applied["data"] == {"x": "1"}
        c.delete("v1", "ConfigMap", "a", "ns")
        with pytest.raises(NotFound):
            c.delete("v1", "ConfigMap", "a", "ns")
        host.insert({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
        c.evict("ns", "p")
        ctx = Context.for_object(json.loads(OBJ))
        ctx.event(Event.warning("Stuck", "Reconcile", "no maps"))
        ctx.info("hello", n=1)
        host.deny("Pod")
        with pytest.raises(Denied):
            c.list("v1", "Pod")
    assert host.writes() == ["create ConfigMap ns/b", "patch ConfigMap ns/b",
                             "apply-create ConfigMap ns/c", "delete ConfigMap ns/a",
                             "evict Pod ns/p"]
    assert (host.object("v1", "ConfigMap", "b", "ns") or {})["data"] == {"k": "v"}
    assert host.events() == [("Warning", "Stuck", "no maps")]
    regarding = host.recorded_events()[0].regarding
    assert regarding is not None and regarding.name == "t"
    assert host.logs() == [("info", "hello")] and host.log_fields() == [{"n": "1"}]


def test_without_a_fake_host_natively_the_error_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match="install a wasmlet.testing.FakeHost"):
        Client().get("v1", "ConfigMap", "a")


def test_selectors() -> None:
    assert labels_match("a=1,b", {"a": "1", "b": "2"})
    assert labels_match("a==1,!c", {"a": "1"})
    assert not labels_match("a!=1", {"a": "1"})
    assert fields_match("metadata.namespace=ns", {"metadata": {"namespace": "ns"}})
    assert not fields_match("spec.nodeName!=", {"spec": {}})
