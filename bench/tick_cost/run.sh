#!/usr/bin/env bash
# What one sampling interrupt costs a thread on this machine (see tick_cost.c): builds the
# C program natively with zig (PyPI `ziglang`), runs every way of sampling RUNS times,
# interleaved, and prints each way's median loop time and its cost per interrupt against
# the unsampled loop.
#
# Usage: bash bench/tick_cost/run.sh [PERIOD_US (200)] [RUNS (5)]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
period="${1:-200}"
runs="${2:-5}"
python3 -c 'import ziglang' 2>/dev/null || python3 -m pip install --quiet ziglang==0.17.1
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
python3 -m ziglang cc -O2 -o "$out/tick_cost" "$here/tick_cost.c"
for _ in $(seq "$runs"); do
    for mode in none periodic rearm perf perfcc; do
        "$out/tick_cost" "$mode" "$period" || echo "$mode $period - 0 0"
    done
done | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    mode, _, took, ticks, _ = line.split()
    if took != "-":
        runs.setdefault(mode, []).append((float(took), int(ticks)))
bare = statistics.median(t for t, _ in runs["none"])
count = len(runs["none"])
print(f"unsampled loop: {bare:.3f} s (median of {count})")
for mode, values in runs.items():
    if mode == "none":
        continue
    took = statistics.median(t for t, _ in values)
    ticks = statistics.median(n for _, n in values)
    cost = (took - bare) / ticks * 1e6 if ticks else float("nan")
    print(f"{mode:9} {took:.3f} s, {ticks:.0f} interrupts, {cost:.1f} us each")
'
