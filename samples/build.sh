#!/usr/bin/env bash
# Rebuilds every sample in this folder: X.c -> X.wasm and X.wat -> X.wasm
# (component.c -> a WASI 0.2 command component, through the componentize example).
#
#   samples/build.sh            build all
#   samples/build.sh c          only the C samples
#   samples/build.sh wat        only the WAT samples
#   samples/build.sh fib nbody  only these (by base name)
#
# C: zig's clang for wasm32-wasi (wasi-libc), -O2 with DWARF (-g), not
# stripped, so function names and line tables stay in the module. Zig comes
# from PyPI (`pip install ziglang`); its first compile builds the libc cache
# and takes about a minute.
# WAT: the `wat2wasm` example of the wprof package (the `wat` crate), which
# keeps $names in the name section.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
python="${PYTHON:-python3}"

want_c=1
want_wat=1
only=()
case "${1:-}" in
    c) want_wat=0 ;;
    wat) want_c=0 ;;
    "") ;;
    *) only=("$@") ;;
esac

selected() {
    local name="$1" o
    [ "${#only[@]}" -eq 0 ] && return 0
    for o in "${only[@]}"; do
        [ "$o" = "$name" ] && return 0
    done
    return 1
}

ensure_zig() {
    if ! "$python" -m ziglang version >/dev/null 2>&1; then
        echo "installing zig (pip install ziglang)" >&2
        "$python" -m pip install --quiet ziglang
    fi
}

c_sources=()
wat_sources=()
for f in "$here"/*.c; do
    [ -e "$f" ] || continue
    name="$(basename "$f" .c)"
    if [ "$want_c" = 1 ] && selected "$name"; then c_sources+=("$f"); fi
done
for f in "$here"/*.wat; do
    [ -e "$f" ] || continue
    name="$(basename "$f" .wat)"
    if [ "$want_wat" = 1 ] && selected "$name"; then wat_sources+=("$f"); fi
done

if [ "${#c_sources[@]}" -gt 0 ]; then
    ensure_zig
    for src in "${c_sources[@]}"; do
        out="${src%.c}.wasm"
        echo "cc   $(basename "$src") -> $(basename "$out")"
        extra=()
        case "$(basename "$src" .c)" in
            # wasi-threads: atomics, a shared memory imported and exported, small stacks.
            threads|shared_wasi|stdin_threads|stdout_threads) extra=(-mcpu=generic+atomics+bulk_memory -Wl,--shared-memory
                -Wl,--import-memory -Wl,--export-memory -Wl,--max-memory=4194304
                -Wl,-z,stack-size=65536) ;;
        esac
        "$python" -m ziglang cc --target=wasm32-wasi -O2 -g "${extra[@]}" -o "$out" "$src"
        case "$(basename "$src" .c)" in
            # A WASI 0.2 command component: the module and the preview 1 adapter.
            component) echo "     $(basename "$out") -> component"
                (cd "$root" && cargo run -q -p wprof --example componentize -- "$out" "$out") ;;
        esac
    done
fi

if [ "${#wat_sources[@]}" -gt 0 ]; then
    for src in "${wat_sources[@]}"; do
        out="${src%.wat}.wasm"
        echo "wat  $(basename "$src") -> $(basename "$out")"
        (cd "$root" && cargo run -q -p wprof --example wat2wasm -- "$src" "$out")
    done
fi
