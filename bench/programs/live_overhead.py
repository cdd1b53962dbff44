#!/usr/bin/env python3
"""What live probes cost: whole `wprof run` processes side by side, warm caches.

For each program of the benchmark set (see README.md here): `WPROF=0`, every function
probed, `--live --off '*'` (every switch off) and `--live` (every switch on), interleaved,
each run once first to warm the cache; prints the medians and their ratios to `WPROF=0`.

    python3 bench/programs/live_overhead.py --runs 9 --mode sample lua sqlite
"""

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("programs", nargs="*", help="names from programs.json (default: all small ones)")
    ap.add_argument("--wprof", default=str(ROOT / "target/debug/wprof"))
    ap.add_argument("--bench", default=str(ROOT / ".tools/bench"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mode", default="sample")
    ap.add_argument("--cache-dir", default="/tmp/wprof-live-overhead-cache")
    args = ap.parse_args()
    bench = Path(args.bench)
    programs = {p["name"]: p for p in json.loads((bench / "programs.json").read_text())}
    names = args.programs or ["lua", "sqlite", "zstd", "tiny_calls", "fib"]
    env = dict(os.environ, WPROF_CACHE_DIR=args.cache_dir, WPROF_CONFIG="off")
    for name in names:
        p = programs[name]
        base = [args.wprof, "run", "-q", "-o", "/dev/null", "--mode", args.mode]
        for d in p.get("dirs", []):
            base += ["--dir", d]
        tail = [str(bench / p["wasm"]), "--"] + p.get("args", [])
        runs = {
            "WPROF=0": (base + tail, dict(env, WPROF="0")),
            "probed": (base + tail, env),
            "live, all off": (base + ["--live", "--off", "*"] + tail, env),
            "live, all on": (base + ["--live"] + tail, env),
        }
        times = {k: [] for k in runs}
        for _ in range(args.runs + 1):
            for k, (cmd, e) in runs.items():
                start = time.perf_counter()
                done = subprocess.run(cmd, env=e, capture_output=True, cwd=bench)
                times[k].append(time.perf_counter() - start)
                if done.returncode != 0:
                    raise SystemExit(f"{name} ({k}) failed: {done.stderr.decode()[-300:]}")
        medians = {k: statistics.median(v[1:]) for k, v in times.items()}
        off = medians["WPROF=0"]
        print(
            f"{name:<11} {args.mode:<6} "
            + "  ".join(f"{k} {v:.3f} s ({v / off:.2f}x)" for k, v in medians.items()),
            flush=True,
        )


if __name__ == "__main__":
    main()
