#!/usr/bin/env python3
"""The system calls of whole runs: the wasmtime CLI, `WPROF=0` and the default mode.

Each program of the benchmark set (default: the I/O-heavy ones and two that compute) runs
once to warm the caches, then once under `strace -f -c` per way of running it: `wasmtime
run` (the CLI of the line wprof embeds, `$WASMTIME_CLI`), `WPROF=0 wprof run` and `wprof
run`. Prints, per program, every system call whose count differs by more than a tenth
between the ways (or by more than 50 calls), and each way's total. Counts, not times:
strace slows every call, and what it counts is the same from one run to the next, where
this machine's wall times are not.

    python3 bench/programs/syscalls.py --wprof target/release/wprof
"""

import os
import subprocess
import tempfile
from pathlib import Path

from side_by_side import parser, programs

DEFAULT = ["stdout_flood", "many_files", "sqlite_file", "zstd_files", "zstd", "lua"]


def counts(command, env, cwd, stdout):
    """The calls of each system call a process (and its threads) made, by name."""
    with tempfile.NamedTemporaryFile(prefix="wprof-strace-", suffix=".txt") as out:
        traced = ["strace", "-f", "-c", "-o", out.name, "--"] + command
        done = subprocess.run(traced, env=env, cwd=cwd, stdout=stdout, stderr=subprocess.PIPE)
        if done.returncode != 0:
            raise SystemExit(f"{command[0]} failed: {done.stderr.decode()[-300:]}")
        table = {}
        for line in Path(out.name).read_text().splitlines():
            cells = line.split()
            # "% time seconds usecs/call calls [errors] syscall"
            if len(cells) in (5, 6) and cells[0][0].isdigit() and cells[-1] != "total":
                table[cells[-1]] = int(cells[3])
        return table


def main():
    ap = parser(__doc__, tempfile.mkdtemp(prefix="wprof-syscalls-"))
    ap.add_argument("--wasmtime", default=os.environ.get("WASMTIME_CLI", "wasmtime"))
    args = ap.parse_args()
    args.programs = args.programs or DEFAULT
    args.wprof = os.path.abspath(args.wprof)
    for name, p, dirs, tail, env in programs(args):
        scratch = tempfile.mkdtemp(prefix="wprof-syscalls-scratch-")
        if p.get("scratch"):
            dirs = dirs + ["--dir", f"{scratch}::/scratch"]
        module, rest = tail[0], tail[2:]
        cli = [args.wasmtime, "run", *p.get("wasmtime_flags", [])]
        cli += [f for d in p.get("dirs", []) for f in ("--dir", d)]
        if p.get("scratch"):
            cli += ["--dir", f"{scratch}::/scratch"]
        cli += [module] + rest
        wprof = [args.wprof, "run", "-q", "-o", os.path.join(scratch, "x.wprof")] + dirs + tail
        ways = {
            "wasmtime run": (cli, env),
            "WPROF=0": (wprof, dict(env, WPROF="0")),
            "default": (wprof, env),
        }
        found = {}
        for way, (command, environment) in ways.items():
            subprocess.run(command, env=environment, cwd=args.bench, capture_output=True)
            # Where stdout is a pipe in the benchmark, it is one here too (read by `cat`).
            if p.get("stdout_pipe"):
                cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
                found[way] = counts(command, environment, args.bench, cat.stdin)
                cat.stdin.close()
                cat.wait()
            else:
                found[way] = counts(command, environment, args.bench, subprocess.DEVNULL)
        names = sorted(set().union(*found.values()))
        print(f"{name}: " + ", ".join(f"{w} {sum(c.values()):,}" for w, c in found.items()))
        for call in names:
            values = [found[w].get(call, 0) for w in ways]
            low, high = min(values), max(values)
            if high - low > max(50, high / 10):
                print(f"  {call:20} " + "  ".join(f"{v:>10,}" for v in values))
        print(flush=True)


if __name__ == "__main__":
    main()
