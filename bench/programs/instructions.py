#!/usr/bin/env python3
"""What wprof's own instructions cost a program, counted: whole `wprof run` processes under valgrind.

A virtual machine's wall times move by a tenth from run to run, and it has no hardware
counters; valgrind's cachegrind counts every instruction a process executes, the program's
compiled code included, and gives the same count to 0.1% run after run. For each program
of the benchmark set: the instructions of `WPROF=0`, of the default mode and of sample
mode, both with their ticks a second apart (`WPROF_SAMPLE_PERIOD_US=1000000`: what the
counters and probes execute, not what a tick costs, which is the kernel's and the
hypervisor's and no instruction count sees), each once under valgrind to warm the cache
and then once counted; prints the counts and their ratios to `WPROF=0`. What a run does besides the
program (loading the module, writing the profile) counts too: take programs whose runs
last long enough.

    python3 bench/programs/instructions.py --wprof $PWD/target/release/wprof lua fib
"""

import re
import subprocess
import tempfile
from pathlib import Path

from side_by_side import parser, programs

MODES = {
    "WPROF=0": ([], {"WPROF": "0"}),
    "stack": ([], {"WPROF_SAMPLE_PERIOD_US": "1000000"}),
    "sample": (["--mode", "sample"], {"WPROF_SAMPLE_PERIOD_US": "1000000"}),
}


def instructions(cmd, env, cwd, stdin):
    """The instructions `cmd` executes, counted by cachegrind (`None` if it failed)."""
    valgrind = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--smc-check=all-non-file",
        "--cachegrind-out-file=/dev/null",
    ]
    done = subprocess.run(valgrind + cmd, env=env, input=stdin, capture_output=True, cwd=cwd)
    found = re.search(rb"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or not found:
        return None
    return int(found.group(1).replace(b",", b""))


def main():
    ap = parser(__doc__, "/tmp/wprof-instructions-cache")
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="wprof-instructions-"))
    for name, p, dirs, tail, env in programs(args):
        stdin = (Path(args.bench) / p["stdin"]).read_bytes() if p.get("stdin") else b""
        if p.get("scratch"):
            dirs = dirs + ["--dir", f"{scratch}::/scratch"]
        counts = {}
        for mode, (flags, extra) in MODES.items():
            cmd = [args.wprof, "run", "-q", "-o", "/dev/null"] + flags + dirs + tail
            # Once to fill the cache, under valgrind too (the code compiled for the CPU
            # valgrind shows is not the code compiled for the real one), then counted.
            warm = ["valgrind", "--tool=none", "--smc-check=all-non-file"] + cmd
            subprocess.run(warm, env=dict(env, **extra), input=stdin, capture_output=True, cwd=args.bench)
            counts[mode] = instructions(cmd, dict(env, **extra), args.bench, stdin)
        off = counts["WPROF=0"]
        print(
            f"{name:<13} "
            + "  ".join(
                f"{mode} {n / 1e9:.3f} G ({n / off:.3f}x)" if n and off else f"{mode} failed"
                for mode, n in counts.items()
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
