//! `wasmlet plugin new NAME --lang python`: a standalone Python reconciler
//! project. It carries its own copies of the contract (`wit/`) and of the
//! Python SDK (`wasmlet/`), both built into this binary, so it builds with
//! nothing but componentize-py (PyPI) wherever the binary came from.

use std::path::Path;

use anyhow::{Context, Result};

/// The componentize-py release the project's build pins (as scripts/setup does).
pub(super) const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// The contract, as `wit/NAME`.
pub(super) const WIT: &[(&str, &str)] = &[
    ("client.wit", include_str!("../../../../wit/client.wit")),
    ("clusters.wit", include_str!("../../../../wit/clusters.wit")),
    ("http.wit", include_str!("../../../../wit/http.wit")),
    ("log.wit", include_str!("../../../../wit/log.wit")),
    ("provider.wit", include_str!("../../../../wit/provider.wit")),
    (
        "reconciler.wit",
        include_str!("../../../../wit/reconciler.wit"),
    ),
    ("types.wit", include_str!("../../../../wit/types.wit")),
    (
        "workloads.wit",
        include_str!("../../../../wit/workloads.wit"),
    ),
    ("worlds.wit", include_str!("../../../../wit/worlds.wit")),
];

/// The SDK, as `wasmlet/NAME`.
const SDK: &[(&str, &str)] = &[
    (
        "__init__.py",
        include_str!("../../../../guests/sdk-python/wasmlet/__init__.py"),
    ),
    (
        "_wit.py",
        include_str!("../../../../guests/sdk-python/wasmlet/_wit.py"),
    ),
    (
        "client.py",
        include_str!("../../../../guests/sdk-python/wasmlet/client.py"),
    ),
    (
        "export.py",
        include_str!("../../../../guests/sdk-python/wasmlet/export.py"),
    ),
    (
        "host.py",
        include_str!("../../../../guests/sdk-python/wasmlet/host.py"),
    ),
    (
        "log.py",
        include_str!("../../../../guests/sdk-python/wasmlet/log.py"),
    ),
    (
        "reconciler.py",
        include_str!("../../../../guests/sdk-python/wasmlet/reconciler.py"),
    ),
    (
        "testing.py",
        include_str!("../../../../guests/sdk-python/wasmlet/testing.py"),
    ),
];

/// Writes the project into `root` (which exists and is empty); `fill` replaces
/// the templates' placeholders.
pub(super) fn write(
    root: &Path,
    name: &str,
    crd_file: &str,
    fill: impl Fn(&str) -> String,
) -> Result<()> {
    let write = |file: &str, text: &str| super::write_under(root, file, text);
    write("app.py", &fill(APP))?;
    write(&format!("{name}.toml"), &fill(super::RECONCILER_TOML))?;
    write(crd_file, &fill(CRD))?;
    write("tests/test_app.py", &fill(TEST))?;
    write("pytest.ini", PYTEST_INI)?;
    write("build.sh", &fill(BUILD))?;
    write("README.md", &fill(README))?;
    write(".gitignore", "*.wasm\n__pycache__/\n")?;
    for (file, text) in WIT {
        write(&format!("wit/{file}"), text)?;
    }
    for (file, text) in SDK {
        write(&format!("wasmlet/{file}"), text)?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let build = root.join("build.sh");
        std::fs::set_permissions(&build, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", build.display()))?;
    }
    Ok(())
}

const APP: &str = r#""""@NAME@: reconciles @KIND@ objects; the host watches, queues, retries
and writes the status this returns."""

from wasmlet import Action, Context, reconciler


def reconcile(obj: dict, ctx: Context) -> Action:
    name = (obj.get("spec") or {}).get("name", "")
    return Action.await_change(status={"message": f"Hello, {name}!"})


Reconciler = reconciler(reconcile)
"#;

const TEST: &str = r#""""Unit tests on the SDK's fake host (no wasm): `python -m pytest`."""

import app
from wasmlet import Context
from wasmlet.testing import FakeHost


def test_greets_by_name():
    obj = {"apiVersion": "@GROUP@/@VERSION@", "kind": "@KIND@",
           "metadata": {"name": "a", "namespace": "default"}, "spec": {"name": "wasm"}}
    with FakeHost().install():
        action = app.reconcile(obj, Context.for_object(obj))
    assert action.status == {"message": "Hello, wasm!"}
"#;

const PYTEST_INI: &str = "[pytest]\npythonpath = .\ntestpaths = tests\n";

const BUILD: &str = r#"#!/bin/sh
# Builds @NAME@.wasm (CPython and app.py in one component) from the contract in wit/.
set -eu
cd "$(dirname "$0")"
componentize-py -d wit -w reconciler-plugin componentize app -p . -o @NAME@.wasm
"#;

pub(super) const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: @PLURAL@.@GROUP@
spec:
  group: @GROUP@
  names:
    kind: @KIND@
    plural: @PLURAL@
  scope: Namespaced
  versions:
  - name: @VERSION@
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              name:
                description: Who to greet.
                type: string
          status:
            description: '`message` is the reconciler''s; `observedGeneration` and `conditions` are the host''s.'
            type: object
            properties:
              message:
                type: string
              observedGeneration:
                type: integer
                format: int64
              conditions:
                type: array
                items:
                  type: object
                  required: [type, status]
                  properties:
                    type: {type: string}
                    status: {type: string}
                    reason: {type: string}
                    message: {type: string}
                    lastTransitionTime: {type: string}
                    observedGeneration: {type: integer, format: int64}
"#;

const README: &str = r#"# @NAME@

A wasmlet reconciler of `@KIND@` (`@GROUP@/@VERSION@`) in Python, made by
`wasmlet plugin new --lang python`. Edit `app.py` (`reconcile` returns the
status) and `@CRD_FILE@` (the kind's schema).

```sh
python3 -m venv .venv && .venv/bin/pip install @COMPONENTIZE_PY@ pytest
.venv/bin/python -m pytest                    # unit tests on the SDK's fake host
PATH=.venv/bin:$PATH ./build.sh               # @NAME@.wasm (tens of MB: CPython is inside)
wasmlet plugin check @NAME@.wasm && cp @NAME@.wasm @NAME@.toml @CRD_FILE@ PLUGIN_DIR/
```

The host loads the plugin from `PLUGIN_DIR` (`wasmlet up --plugins PLUGIN_DIR`),
applies the CRD, and from then on `kubectl apply` of a @KIND@ gets its status.
`wit/` is the contract and `wasmlet/` the Python SDK, both copied from the
`wasmlet` that made this project. The first load compiles the component (seconds);
the host's cache makes every later load take milliseconds.
"#;
