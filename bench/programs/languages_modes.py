#!/usr/bin/env python3
"""How alike the modes that read an interpreter's script frames see the script: total variation.

For each interpreter of the benchmark set (default: lua, quickjs, python), `--runs` runs of
each mode (stack, the default; sample; adaptive), interleaved; each profile's self-time
shares of the script's functions (of the whole profile's time), and the total variation
between each pair of runs: stack against stack (the sampling's own noise), and stack
against each other mode. Also each run's share of the profile in the script's functions.

    python3 bench/programs/languages_modes.py --runs 3 --wprof target/release/wprof
"""

import itertools
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from side_by_side import parser, programs

MODES = ["stack", "sample", "adaptive"]
SCRIPT_KINDS = {"lua", "js", "py"}


def script_shares(wprof, profile):
    """The script's functions' self-time shares of `profile`, by name, and their sum."""
    out = subprocess.run(
        [wprof, "report", "--format", "json", str(profile)], capture_output=True, check=True
    )
    functions = json.loads(out.stdout)["functions"]
    total = sum(f["self"] for f in functions) or 1
    shares = {f["name"]: f["self"] / total for f in functions if f["kind"] in SCRIPT_KINDS}
    return shares, sum(shares.values())


def distance(a, b):
    return sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)) / 2


def main():
    ap = parser(__doc__, "/tmp/wprof-languages-modes-cache")
    ap.set_defaults(runs=3)
    args = ap.parse_args()
    args.programs = args.programs or ["lua", "quickjs", "python"]
    scratch = Path(tempfile.mkdtemp(prefix="wprof-languages-modes-"))
    for name, _, dirs, tail, env in programs(args):
        seen = {mode: [] for mode in MODES}
        for run in range(args.runs + 1):
            for mode in MODES:
                out = scratch / f"{name}-{mode}.wprof"
                cmd = [args.wprof, "run", "-q", "--mode", mode, "-o", str(out)] + dirs + tail
                done = subprocess.run(cmd, env=env, capture_output=True, cwd=args.bench)
                if done.returncode != 0:
                    raise SystemExit(f"{name} ({mode}) failed: {done.stderr.decode()[-300:]}")
                # The first round fills the cache.
                if run > 0:
                    seen[mode].append(script_shares(args.wprof, out))
        stack = [s for s, _ in seen["stack"]]
        noise = [distance(a, b) for a, b in itertools.combinations(stack, 2)]
        line = f"{name:<9} stack/stack {statistics.median(noise):.1%}"
        for mode in MODES[1:]:
            apart = [distance(a, b) for a in stack for b, _ in seen[mode]]
            line += f"  stack/{mode} {statistics.median(apart):.1%}"
        shares = "  ".join(
            f"{mode} {statistics.median(t for _, t in seen[mode]):.1%}" for mode in MODES
        )
        print(f"{line}  (script's share: {shares})", flush=True)


if __name__ == "__main__":
    main()
