//! `wasmlet plugin new NAME --lang python`: a standalone Python reconciler
//! project. Its `pyproject.toml` depends on the Python SDK (`wasmlet-sdk`) by a
//! `file://` URL to the SDK's directory (the installed copy or the checkout),
//! as a user's own project would, so `pip install -e '.[dev]'` installs it with
//! the build and test tools. It carries its own copy of the contract (`wit/`),
//! built into this binary, which componentize-py reads.

use std::path::Path;

use anyhow::{Context, Result, anyhow};

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

/// The project's dependency on the SDK at `sdk`: a PEP 508 direct reference
/// (`wasmlet-sdk @ file:///...`, the path percent-encoded).
pub(super) fn dependency(sdk: &Path) -> Result<String> {
    let url = url::Url::from_directory_path(sdk)
        .map_err(|()| anyhow!("{}: not an absolute path to the Python SDK", sdk.display()))?;
    Ok(format!(
        "wasmlet-sdk @ {}",
        url.as_str().trim_end_matches('/')
    ))
}

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
    write("pyproject.toml", &fill(PYPROJECT))?;
    write("build.sh", &fill(BUILD))?;
    write("README.md", &fill(README))?;
    write(".gitignore", "*.wasm\n__pycache__/\n.venv/\n")?;
    for (file, text) in WIT {
        write(&format!("wit/{file}"), text)?;
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

from wasmlet import Action, Context, Object, reconciler


def reconcile(obj: Object, ctx: Context) -> Action:
    name = (obj.get("spec") or {}).get("name", "")
    return Action.await_change(status={"message": f"Hello, {name}!"})


Reconciler = reconciler(reconcile)
"#;

const TEST: &str = r#""""Unit tests on the SDK's fake host (no wasm): `python -m pytest`."""

import app
from wasmlet import Context, Object
from wasmlet.testing import FakeHost


def test_greets_by_name() -> None:
    obj: Object = {"apiVersion": "@GROUP@/@VERSION@", "kind": "@KIND@",
           "metadata": {"name": "a", "namespace": "default"}, "spec": {"name": "wasm"}}
    with FakeHost().install():
        action = app.reconcile(obj, Context.for_object(obj))
    assert action.status == {"message": "Hello, wasm!"}
"#;

const PYPROJECT: &str = r#"# @NAME@: `pip install -e '.[dev]'` installs the SDK it is written against
# (wasmlet-sdk, from the wasmlet that made this project) and the tools that
# test, check and build it.
[project]
name = "@NAME@"
version = "0.1.0"
description = "A wasmlet reconciler of @KIND@ (@GROUP@/@VERSION@)"
requires-python = ">=3.10"
dependencies = ["@SDK@"]

[project.optional-dependencies]
dev = ["@COMPONENTIZE_PY@", "pytest", "mypy"]

[build-system]
requires = ["flit_core>=3.11,<5"]
build-backend = "flit_core.buildapi"

[tool.flit.module]
name = "app"

[tool.pytest.ini_options]
pythonpath = ["."]
testpaths = ["tests"]

[tool.mypy]
strict = true
files = ["app.py", "tests"]
"#;

const BUILD: &str = r#"#!/bin/sh
# Builds @NAME@.wasm (CPython and app.py in one component) from the contract in
# wit/. componentize-py bundles what app.py imports from the project and from the
# site-packages of the python3 on PATH (the venv's, with the SDK in it).
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
python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'   # the SDK, componentize-py, pytest, mypy
.venv/bin/python -m pytest                    # unit tests on the SDK's fake host
.venv/bin/mypy                                # strict type check of app.py and tests
PATH=.venv/bin:$PATH ./build.sh               # @NAME@.wasm (tens of MB: CPython is inside)
wasmlet plugin check @NAME@.wasm && cp @NAME@.wasm @NAME@.toml @CRD_FILE@ PLUGIN_DIR/
```

The host loads the plugin from `PLUGIN_DIR` (`wasmlet up --plugins PLUGIN_DIR`),
applies the CRD, and from then on `kubectl apply` of a @KIND@ gets its status.
`wit/` is the contract, copied from the `wasmlet` that made this project;
`pyproject.toml` names the Python SDK (`wasmlet-sdk`) by the path of that
wasmlet's copy. The first load compiles the component (seconds);
the host's cache makes every later load take milliseconds.
"#;
