#!/usr/bin/env python3
"""Runs every program of a benchmark list (programs.json, as build.sh writes it) under the
wasmtime CLI and checks it: exit code 0 and the expected text in its output. One warm-up
run first (it fills wasmtime's compile cache), then --runs timed runs; prints a Markdown
table with the median wall time and the median CPU time (user + system of the wasmtime
process, less sensitive than wall time to other load on the machine), and exits 1 if any
program failed its check.

Usage: check.py [--wasmtime PATH] [--runs N] [--only NAME,...] [programs.json]
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Outside this range a non-startup program is flagged in the table (seconds).
TARGET = (0.5, 3.0)


def command(wasmtime, base, program, scratch):
    """The `wasmtime run` command line of one program; host paths resolved against base,
    `scratch` preopened as /scratch for a program that writes files."""
    cmd = [wasmtime, "run", *program.get("wasmtime_flags", [])]
    for spec in program.get("dirs", []):
        host, guest = spec.split("::", 1)
        cmd += ["--dir", f"{os.path.join(base, host)}::{guest}"]
    if program.get("scratch"):
        cmd += ["--dir", f"{scratch}::/scratch"]
    cmd.append(os.path.join(base, program["wasm"]))
    cmd += program.get("args", [])
    return cmd


def run_once(cmd, base, program):
    stdin = program.get("stdin")
    with open(os.path.join(base, stdin) if stdin else os.devnull, "rb") as inp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        proc = subprocess.run(cmd, stdin=inp, capture_output=True,
                              env={**os.environ, "RUST_BACKTRACE": "0"})
        took = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return took, cpu, proc


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="?", default=".tools/bench/programs.json")
    parser.add_argument("--wasmtime", default=shutil.which("wasmtime") or "wasmtime")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", help="comma-separated program names")
    opts = parser.parse_args()
    opts.runs = max(1, opts.runs)

    with open(opts.programs) as f:
        programs = json.load(f)
    base = os.path.dirname(os.path.abspath(opts.programs))
    only = set(opts.only.split(",")) if opts.only else None

    print("| program | kind | module size | functions | `wasmtime run` wall (median) "
          "| CPU user+sys (median) | check |")
    print("|---|---|---:|---:|---:|---:|---|")
    failed = 0
    for p in programs:
        if only and p["name"] not in only:
            continue
        if p.get("threads"):
            # The wasmtime CLI no longer runs wasi-threads programs (`-S threads`).
            print(f"| {p['name']} | {p['kind']} | {p['bytes'] / 1e6:.1f} MB | {p['functions']} "
                  "| - | - | skipped: threaded, not run by the wasmtime CLI |", flush=True)
            continue
        scratch = tempfile.TemporaryDirectory(prefix="wprof-check-")
        cmd = command(opts.wasmtime, base, p, scratch.name)
        run_once(cmd, base, p)  # warm-up: compiles into wasmtime's cache
        times, cpus = [], []
        for _ in range(opts.runs):
            took, cpu, proc = run_once(cmd, base, p)
            times.append(took)
            cpus.append(cpu)
            if proc.returncode != 0:
                break
        out = proc.stdout if p.get("expect_stream", "stdout") == "stdout" else proc.stderr
        out = out.decode("utf-8", "replace")
        if proc.returncode != 0:
            verdict = f"FAILED: exit {proc.returncode}"
            sys.stderr.write(proc.stderr.decode("utf-8", "replace")[-2000:])
        elif p["expect"] not in out:
            verdict = f"FAILED: no `{p['expect']}` in {p.get('expect_stream', 'stdout')}"
        else:
            verdict = f"ok: `{p['expect']}`"
        failed += verdict.startswith("FAILED")
        median = statistics.median(times)
        note = ""
        if not p.get("startup_only") and not TARGET[0] <= median <= TARGET[1]:
            note = " (outside 0.5-3 s)"
        print(f"| {p['name']} | {p['kind']} | {p['bytes'] / 1e6:.1f} MB | {p['functions']} "
              f"| {median:.2f} s{note} | {statistics.median(cpus):.2f} s | {verdict} |",
              flush=True)
        scratch.cleanup()
    if failed:
        print(f"{failed} program(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
