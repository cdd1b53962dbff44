#!/usr/bin/env bash
# Builds the component benchmark programs into .tools/bench/components:
#
#   lua_component.wasm     Lua 5.4 (the benchmark's lua.wasm, built by build.sh first) made a
#                          WASI 0.2 command component with the preview 1 adapter
#                          (the `componentize` example: what `wasm-tools component new --adapt`
#                          does)
#   python_component.wasm  CPython 3.14 running src/python_component/app.py, made by
#                          componentize-py (PyPI) for wasi:cli/command: 14 core modules,
#                          dynamically linked; `python_component.wasm SCRIPT` runs SCRIPT
#
# Usage: bash bench/programs/components.sh [python]   (`python`: that one only, as CI does)
#
# Run them with `wprof run`, and compare with `wasmtime run` (docs/components.md
# has the figures and the commands). The WASI WIT files come from the wasmtime-wasi crate in
# cargo's registry (a dependency of wprof), so nothing is downloaded but componentize-py.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/.tools/bench/components"
only="${1:-}"
python="${PYTHON:-python3}"
mkdir -p "$out"

lua="$root/.tools/bench/lua.wasm"
if [ "$only" = python ]; then
    :
elif [ -f "$lua" ]; then
    (cd "$root" && cargo run -q -p wprof --example componentize -- "$lua" "$out/lua_component.wasm")
    echo "lua_component.wasm"
else
    echo "no $lua: run bench/programs/build.sh first; lua_component.wasm skipped" >&2
fi

if ! command -v componentize-py >/dev/null 2>&1; then
    "$python" -m pip install --quiet componentize-py==0.25.1
fi
wasi_wit="$(cd "$root" && cargo metadata --format-version 1 2>/dev/null | "$python" -c '
import json, os, sys
meta = json.load(sys.stdin)
for p in meta["packages"]:
    if p["name"] == "wasmtime-wasi":
        print(os.path.join(os.path.dirname(p["manifest_path"]), "src", "p2", "wit", "deps"))
        break
')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/wit"
cp -r "$wasi_wit" "$work/wit/deps"
cp "$here/src/python_component/world.wit" "$work/wit/"
cp "$here/src/python_component/app.py" "$work/"
(cd "$work" && componentize-py -d wit -w app componentize app -o "$out/python_component.wasm" >/dev/null)
echo "python_component.wasm"
