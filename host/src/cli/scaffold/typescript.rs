//! `wasmlet plugin new NAME --lang typescript`: a standalone TypeScript
//! reconciler project. Its package.json depends on the TypeScript SDK
//! (`wasmlet`) by a `file:` spec to the SDK's directory (the installed copy or
//! the checkout), as a user's own project would, and pins its build tools
//! (componentize-js, jco, esbuild, typescript, @types/node) as scripts/setup
//! does, so `npm install` is all it needs. It carries its own copy of the
//! contract (`wit/`), built into this binary, which componentize-js reads.

use std::path::Path;

use anyhow::{Context, Result};

/// The tools the project's package.json pins: guests/sdk-js/toolchain's versions
/// (a unit test keeps them equal).
pub(super) const TOOLS: &[(&str, &str)] = &[
    ("@bytecodealliance/componentize-js", "0.23.0"),
    ("@bytecodealliance/jco", "1.34.0"),
    ("@types/node", "20.19.43"),
    ("esbuild", "0.28.2"),
    ("typescript", "5.9.3"),
];

/// The project's dependency on the SDK at `sdk`: npm's `file:` spec, as a
/// JSON string (npm links the directory into node_modules/wasmlet).
pub(super) fn dependency(sdk: &Path) -> String {
    serde_json::Value::String(format!("file:{}", sdk.display())).to_string()
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
    write(".gitignore", "*.wasm\nnode_modules/\n")?;
    for (file, text) in super::python::WIT {
        write(&format!("wit/{file}"), text)?;
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
    "test": "./test.sh",
    "check": "tsc -p tsconfig.json"
  },
  "dependencies": {
    "wasmlet": @SDK@
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
    "types": ["node"],
    "target": "ES2022",
    "lib": ["ES2022"],
    "module": "ESNext",
    "moduleResolution": "Bundler"
  },
  "include": ["app.ts", "tests/**/*.ts"]
}
"#;

const BUILD: &str = r#"#!/bin/sh
# Builds @NAME@.wasm (SpiderMonkey and app.ts in one component) from the contract
# in wit/: tsc checks the app and its tests against the SDK's types, esbuild
# bundles the app and the SDK (node_modules/wasmlet) with an entry routing the
# SDK to the host's imports, and componentize-js makes the component (no
# wasi:http: the host has none).
set -eu
cd "$(dirname "$0")"
bin=node_modules/.bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin/tsc" -p tsconfig.json
# The entry comes on stdin: esbuild resolves its imports from this directory.
"$bin/esbuild" --bundle --loader=ts --sourcefile=entry.ts --format=esm --platform=neutral \
    --target=es2022 --external:'wasmlet:*' --log-level=warning --outfile="$tmp/bundle.js" <<EOF
import { install } from "wasmlet/host";
import { witHost } from "wasmlet/wit";
install(witHost);
export { reconciler } from "./app";
EOF
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
        --define:import.meta.dirname="\"$PWD/tests\"" \
        --log-level=warning --outfile="$tmp/$(basename "$t" .ts).mjs"
done
node --test "$tmp"/*.mjs
"#;

const README: &str = r#"# @NAME@

A wasmlet reconciler of `@KIND@` (`@GROUP@/@VERSION@`) in TypeScript, made by
`wasmlet plugin new --lang typescript`. Edit `app.ts` (`reconcile` returns the
status) and `@CRD_FILE@` (the kind's schema).

```sh
npm install                                   # the SDK and the pinned build tools (Node.js 20+)
npm test                                      # unit tests on the SDK's fake host
npm run check                                 # tsc --noEmit --strict of app.ts and tests
npm run build                                 # @NAME@.wasm (~12 MB: SpiderMonkey is inside)
wasmlet plugin check @NAME@.wasm && cp @NAME@.wasm @NAME@.toml @CRD_FILE@ PLUGIN_DIR/
```

The host loads the plugin from `PLUGIN_DIR` (`wasmlet up --plugins PLUGIN_DIR`),
applies the CRD, and from then on `kubectl apply` of a @KIND@ gets its status.
`wit/` is the contract, copied from the `wasmlet` that made this project;
package.json names the TypeScript SDK (`wasmlet`) by the path of that wasmlet's
copy (its TypeScript source is its types; esbuild bundles it). Calls are synchronous (no `async`/`await`):
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
