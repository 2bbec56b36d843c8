//! `wasmlet plugin new NAME --lang typescript`: a standalone TypeScript
//! reconciler project. It carries its own copies of the contract (`wit/`) and
//! of the TypeScript SDK (`wasmlet/`), both built into this binary, and pins
//! its build tools (componentize-js, jco, esbuild, typescript) in package.json
//! as scripts/setup does, so `npm install` is all it needs.

use std::path::Path;

use anyhow::{Context, Result};

/// The tools the project's package.json pins: guests/sdk-js/toolchain's versions
/// (a unit test keeps them equal).
pub(super) const TOOLS: &[(&str, &str)] = &[
    ("@bytecodealliance/componentize-js", "0.23.0"),
    ("@bytecodealliance/jco", "1.34.0"),
    ("esbuild", "0.28.2"),
    ("typescript", "5.9.3"),
];

/// The SDK, as `wasmlet/NAME`.
const SDK: &[(&str, &str)] = &[
    (
        "client.ts",
        include_str!("../../../../guests/sdk-js/src/client.ts"),
    ),
    (
        "export.ts",
        include_str!("../../../../guests/sdk-js/src/export.ts"),
    ),
    (
        "host.ts",
        include_str!("../../../../guests/sdk-js/src/host.ts"),
    ),
    (
        "index.ts",
        include_str!("../../../../guests/sdk-js/src/index.ts"),
    ),
    (
        "log.ts",
        include_str!("../../../../guests/sdk-js/src/log.ts"),
    ),
    (
        "reconciler.ts",
        include_str!("../../../../guests/sdk-js/src/reconciler.ts"),
    ),
    (
        "testing.ts",
        include_str!("../../../../guests/sdk-js/src/testing.ts"),
    ),
    (
        "wit.ts",
        include_str!("../../../../guests/sdk-js/src/wit.ts"),
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
    let tools: Vec<String> = TOOLS
        .iter()
        .map(|(package, version)| format!("    {package:?}: {version:?}"))
        .collect();
    write("app.ts", &fill(APP))?;
    write(&format!("{name}.toml"), &fill(super::RECONCILER_TOML))?;
    write(crd_file, &fill(super::python::CRD))?;
    write("tests/app.test.ts", &fill(TEST))?;
    write(
        "package.json",
        &fill(PACKAGE_JSON).replace("@TOOLS@", &tools.join(",\n")),
    )?;
    write("tsconfig.json", TSCONFIG)?;
    write("build.sh", &fill(BUILD))?;
    write("test.sh", TEST_SH)?;
    write("README.md", &fill(README))?;
    write(".gitignore", "*.wasm\nnode_modules/\ntypes/\n")?;
    for (file, text) in super::python::WIT {
        write(&format!("wit/{file}"), text)?;
    }
    for (file, text) in SDK {
        write(&format!("wasmlet/{file}"), text)?;
    }
    #[cfg(unix)]
    for script in ["build.sh", "test.sh"] {
        use std::os::unix::fs::PermissionsExt;
        let path = root.join(script);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("making {} executable", path.display()))?;
    }
    Ok(())
}

const APP: &str = r#"/**
 * @NAME@: reconciles @KIND@ objects; the host watches, queues, retries and
 * writes the status this returns.
 */

import { Action, type Context, defineReconciler, type KubeObject } from "wasmlet";

export function reconcile(obj: KubeObject, _ctx: Context): Action {
  const name: string = obj.spec?.name ?? "";
  return Action.awaitChange({ status: { message: `Hello, ${name}!` } });
}

/** What the component exports (the contract's `reconciler` interface). */
export const reconciler = defineReconciler(reconcile);
"#;

const TEST: &str = r#"// Unit tests on the SDK's fake host (no wasm): `npm test`.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Context } from "wasmlet";
import { FakeHost } from "wasmlet/testing";
import { reconcile } from "../app";

test("greets by name", () => {
  const obj = {
    apiVersion: "@GROUP@/@VERSION@",
    kind: "@KIND@",
    metadata: { name: "a", namespace: "default" },
    spec: { name: "wasm" },
  };
  const action = new FakeHost().run(() => reconcile(obj, Context.forObject(obj)));
  assert.deepEqual(action.status, { message: "Hello, wasm!" });
});
"#;

const PACKAGE_JSON: &str = r#"{
  "name": "@NAME@",
  "private": true,
  "type": "module",
  "scripts": {
    "build": "./build.sh",
    "test": "./test.sh"
  },
  "devDependencies": {
@TOOLS@
  }
}
"#;

const TSCONFIG: &str = r#"{
  "compilerOptions": {
    "strict": true,
    "noEmit": true,
    "skipLibCheck": true,
    "types": [],
    "target": "ES2022",
    "lib": ["ES2022"],
    "module": "ESNext",
    "moduleResolution": "Bundler",
    "paths": { "wasmlet": ["./wasmlet/index.ts"], "wasmlet/*": ["./wasmlet/*"] }
  },
  "include": ["app.ts", "wasmlet/**/*.ts", "types/**/*.d.ts"]
}
"#;

const BUILD: &str = r#"#!/bin/sh
# Builds @NAME@.wasm (SpiderMonkey and app.ts in one component) from the contract
# in wit/: jco writes the contract's types (types/), tsc checks, esbuild bundles
# the app and the SDK with an entry routing the SDK to the host's imports, and
# componentize-js makes the component (no wasi:http: the host has none).
set -eu
cd "$(dirname "$0")"
bin=node_modules/.bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin/jco" guest-types wit -n reconciler-plugin -q -o types
"$bin/tsc" -p tsconfig.json
cat >"$tmp/entry.ts" <<EOF
import { install } from "$PWD/wasmlet/host";
import { witHost } from "$PWD/wasmlet/wit";
install(witHost);
export { reconciler } from "$PWD/app";
EOF
"$bin/esbuild" "$tmp/entry.ts" --bundle --format=esm --platform=neutral --target=es2022 \
    --alias:wasmlet=./wasmlet --external:'wasmlet:*' --log-level=warning --outfile="$tmp/bundle.js"
"$bin/componentize-js" "$tmp/bundle.js" -w wit -n reconciler-plugin -d http fetch-event -o @NAME@.wasm
"#;

const TEST_SH: &str = r#"#!/bin/sh
# Unit tests on the SDK's fake host (no wasm): esbuild bundles each
# tests/*.test.ts with the app and the SDK, node's test runner runs them.
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in tests/*.test.ts; do
    node_modules/.bin/esbuild "$t" --bundle --format=esm --platform=node --target=node20 \
        --alias:wasmlet=./wasmlet --define:import.meta.dirname="\"$PWD/tests\"" \
        --log-level=warning --outfile="$tmp/$(basename "$t" .ts).mjs"
done
node --test "$tmp"/*.mjs
"#;

const README: &str = r#"# @NAME@

A wasmlet reconciler of `@KIND@` (`@GROUP@/@VERSION@`) in TypeScript, made by
`wasmlet plugin new --lang typescript`. Edit `app.ts` (`reconcile` returns the
status) and `@CRD_FILE@` (the kind's schema).

```sh
npm install                                   # the pinned build tools (Node.js 20+)
npm test                                      # unit tests on the SDK's fake host
npm run build                                 # @NAME@.wasm (~12 MB: SpiderMonkey is inside)
wasmlet plugin check @NAME@.wasm && cp @NAME@.wasm @NAME@.toml @CRD_FILE@ PLUGIN_DIR/
```

The host loads the plugin from `PLUGIN_DIR` (`wasmlet up --plugins PLUGIN_DIR`),
applies the CRD, and from then on `kubectl apply` of a @KIND@ gets its status.
`wit/` is the contract and `wasmlet/` the TypeScript SDK, both copied from the
`wasmlet` that made this project. Calls are synchronous (no `async`/`await`):
each reconcile runs in a fresh instance and the client's calls return at once.
The first load compiles the component (seconds); the host's cache makes every
later load take milliseconds.
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_tools_are_the_repositorys() {
        let repo = include_str!("../../../../guests/sdk-js/toolchain/package.json");
        for (package, version) in TOOLS {
            assert!(
                repo.contains(&format!("{package:?}: {version:?}")),
                "guests/sdk-js/toolchain/package.json does not pin {package} {version}"
            );
        }
    }
}
