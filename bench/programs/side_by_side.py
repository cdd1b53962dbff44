"""What the side-by-side scripts of this folder share: their common flags, the programs of
the benchmark set they run, and timing whole `wprof run` processes interleaved."""

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["lua", "sqlite", "zstd", "tiny_calls", "fib"]


def parser(doc, cache_dir):
    """The flags every script takes: programs, --wprof, --bench, --runs, --cache-dir."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("programs", nargs="*", help="names from programs.json (default: all small ones)")
    ap.add_argument("--wprof", default=str(ROOT / "target/debug/wprof"))
    ap.add_argument("--bench", default=str(ROOT / ".tools/bench"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cache-dir", default=cache_dir)
    return ap


def programs(args):
    """(name, program, its `--dir` and `--env` flags, module and arguments, environment) per
    program asked."""
    bench = Path(args.bench)
    listed = {p["name"]: p for p in json.loads((bench / "programs.json").read_text())}
    env = dict(os.environ, WPROF_CACHE_DIR=args.cache_dir, WPROF_CONFIG="off")
    for name in args.programs or SMALL:
        p = listed[name]
        dirs = [flag for d in p.get("dirs", []) for flag in ("--dir", d)]
        dirs += [flag for e in p.get("env", []) for flag in ("--env", e)]
        tail = [str(bench / p["wasm"]), "--"] + p.get("args", [])
        yield name, p, dirs, tail, env


def rounds(name, runs, args, stdin=b""):
    """Runs each of `runs` (label -> (command, environment)) once to warm, then `args.runs`
    times interleaved, a round being one run of each; the seconds per label, round by
    round."""
    times = {k: [] for k in runs}
    for _ in range(args.runs + 1):
        for k, (cmd, env) in runs.items():
            start = time.perf_counter()
            done = subprocess.run(cmd, env=env, input=stdin, capture_output=True, cwd=args.bench)
            times[k].append(time.perf_counter() - start)
            if done.returncode != 0:
                raise SystemExit(f"{name} ({k}) failed: {done.stderr.decode()[-300:]}")
    return {k: v[1:] for k, v in times.items()}


def medians(name, runs, args, stdin=b""):
    """The median seconds per label of [`rounds`]."""
    return median_of(rounds(name, runs, args, stdin))


def median_of(times):
    """The median per label of `times` (as [`rounds`] gives them)."""
    return {k: statistics.median(v) for k, v in times.items()}


def paired(times, base):
    """Per label of `times` (as [`rounds`] gives them), the median over the rounds of its
    time over `base`'s in the same round: on a machine whose speed drifts from minute to
    minute, steadier than the ratio of two medians."""
    return {
        k: statistics.median(a / b for a, b in zip(v, times[base])) for k, v in times.items()
    }
