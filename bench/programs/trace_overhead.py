#!/usr/bin/env python3
"""What `--trace` costs: whole `wprof run` processes side by side, warm caches.

For each program of the benchmark set (see README.md here): `WPROF=0`, time mode, time
mode with `--trace` (a ring of a million calls, written as JSON at the end) and with
`--trace --trace-buffer 1000` (the ring's work without the large file), interleaved, each
run once first to warm the cache; prints the medians and their ratios to `WPROF=0`.

    python3 bench/programs/trace_overhead.py --runs 5 lua sqlite
"""

import os
import tempfile

from side_by_side import medians, parser, programs


def main():
    ap = parser(__doc__, "/tmp/wprof-trace-overhead-cache")
    args = ap.parse_args()
    out = os.path.join(tempfile.mkdtemp(prefix="wprof-trace-"), "t.trace.json")
    for name, _, dirs, tail, env in programs(args):
        base = [args.wprof, "run", "-q", "-o", "/dev/null", "--mode", "time"] + dirs
        traced = base + ["--trace", "--trace-out", out]
        runs = {
            "WPROF=0": (base + tail, dict(env, WPROF="0")),
            "time": (base + tail, env),
            "--trace": (traced + tail, env),
            "--trace-buffer 1000": (traced + ["--trace-buffer", "1000"] + tail, env),
        }
        times = medians(name, runs, args)
        off = times["WPROF=0"]
        time_mode = times["time"]
        print(
            f"{name:<11} "
            + "  ".join(f"{k} {v:.3f} s ({v / off:.2f}x)" for k, v in times.items())
            + f"  trace/time {times['--trace'] / time_mode:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
