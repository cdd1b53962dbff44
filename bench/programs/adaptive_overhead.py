#!/usr/bin/env python3
"""What adaptive mode costs next to sample mode: whole `wprof run` processes side by side.

For each program of the benchmark set (see README.md here): `WPROF=0`, `--mode sample` and
`--mode adaptive`, interleaved, each run once first to warm the cache; prints the medians,
their ratios to `WPROF=0`, and what the last adaptive run walked and timed.

    python3 bench/programs/adaptive_overhead.py --runs 7 lua sqlite
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("programs", nargs="*", help="names from programs.json (default: all small ones)")
    ap.add_argument("--wprof", default=str(ROOT / "target/debug/wprof"))
    ap.add_argument("--bench", default=str(ROOT / ".tools/bench"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cache-dir", default="/tmp/wprof-adaptive-overhead-cache")
    args = ap.parse_args()
    bench = Path(args.bench)
    programs = {p["name"]: p for p in json.loads((bench / "programs.json").read_text())}
    names = args.programs or ["lua", "sqlite", "zstd", "tiny_calls", "fib"]
    env = dict(os.environ, WPROF_CACHE_DIR=args.cache_dir, WPROF_CONFIG="off")
    out = Path(tempfile.mkdtemp()) / "adaptive.wprof"
    for name in names:
        p = programs[name]
        base = [args.wprof, "run", "-q"]
        for d in p.get("dirs", []):
            base += ["--dir", d]
        tail = [str(bench / p["wasm"]), "--"] + p.get("args", [])
        stdin = (bench / p["stdin"]).read_bytes() if p.get("stdin") else b""
        runs = {
            "WPROF=0": (base + ["-o", "/dev/null"] + tail, dict(env, WPROF="0")),
            "sample": (base + ["-o", "/dev/null", "--mode", "sample"] + tail, env),
            "adaptive": (base + ["-o", str(out), "--mode", "adaptive"] + tail, env),
        }
        times = {k: [] for k in runs}
        for _ in range(args.runs + 1):
            for k, (cmd, e) in runs.items():
                start = time.perf_counter()
                done = subprocess.run(cmd, env=e, input=stdin, capture_output=True, cwd=bench)
                times[k].append(time.perf_counter() - start)
                if done.returncode != 0 and p.get("expect_exit", 0) == 0:
                    raise SystemExit(f"{name} ({k}) failed: {done.stderr.decode()[-300:]}")
        medians = {k: statistics.median(v[1:]) for k, v in times.items()}
        off = medians["WPROF=0"]
        report = json.loads(
            subprocess.run(
                [args.wprof, "report", "--format", "json", str(out)], capture_output=True, check=True
            ).stdout
        )
        record = report.get("adaptive") or {}
        contexts = record.get("contexts", [])
        print(
            f"{name:<11} "
            + "  ".join(f"{k} {v:.3f} s ({v / off:.2f}x)" for k, v in medians.items())
            + f"  adaptive/sample {medians['adaptive'] / medians['sample']:.2f}x;"
            + f" {len(record.get('paths', []))} paths, {record.get('steps', 0)} steps,"
            + f" {sum(1 for c in contexts if c.get('timed'))} contexts timed,"
            + f" {sum(1 for c in contexts if c.get('inclusive_ns') is not None)} with a timed figure",
            flush=True,
        )


if __name__ == "__main__":
    main()
