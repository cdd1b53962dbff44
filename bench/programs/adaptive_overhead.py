#!/usr/bin/env python3
"""What adaptive mode costs next to sample mode: whole `wprof run` processes side by side.

For each program of the benchmark set (see README.md here): `WPROF=0`, `--mode sample` and
`--mode adaptive`, interleaved, each run once first to warm the cache; prints the medians,
their ratios to `WPROF=0`, and what the last adaptive run walked and timed.

    python3 bench/programs/adaptive_overhead.py --runs 7 lua sqlite
"""

import json
import subprocess
import tempfile
from pathlib import Path

from side_by_side import medians, parser, programs


def main():
    args = parser(__doc__, "/tmp/wprof-adaptive-overhead-cache").parse_args()
    out = Path(tempfile.mkdtemp()) / "adaptive.wprof"
    for name, p, dirs, tail, env in programs(args):
        base = [args.wprof, "run", "-q"] + dirs
        stdin = (Path(args.bench) / p["stdin"]).read_bytes() if p.get("stdin") else b""
        runs = {
            "WPROF=0": (base + ["-o", "/dev/null"] + tail, dict(env, WPROF="0")),
            "sample": (base + ["-o", "/dev/null", "--mode", "sample"] + tail, env),
            "adaptive": (base + ["-o", str(out), "--mode", "adaptive"] + tail, env),
        }
        times = medians(name, runs, args, stdin)
        off = times["WPROF=0"]
        report = json.loads(
            subprocess.run(
                [args.wprof, "report", "--format", "json", str(out)], capture_output=True, check=True
            ).stdout
        )
        record = report.get("adaptive") or {}
        contexts = record.get("contexts", [])
        print(
            f"{name:<11} "
            + "  ".join(f"{k} {v:.3f} s ({v / off:.2f}x)" for k, v in times.items())
            + f"  adaptive/sample {times['adaptive'] / times['sample']:.2f}x;"
            + f" {len(record.get('paths', []))} paths, {record.get('steps', 0)} steps,"
            + f" {sum(1 for c in contexts if c.get('timed'))} contexts timed,"
            + f" {sum(1 for c in contexts if c.get('inclusive_ns') is not None)} with a timed figure",
            flush=True,
        )


if __name__ == "__main__":
    main()
