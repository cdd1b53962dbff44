#!/usr/bin/env python3
"""What wprof adds to a short run of an interpreter: `print(1)` under each, whole processes.

For each interpreter of the benchmark set (default: lua, quickjs, python, python312), a
one-line script that prints 1, run `--runs` times interleaved (after one run each to warm
the caches): `WPROF=0`, the default mode, and with `--against OTHER_WPROF` the default mode
of another wprof build (each build with a cache of its own). Median milliseconds, and each
against `WPROF=0`. What a run does around the program (reading the module, its DWARF, the
interpreter's layout, writing the profile) is most of such a run.

    python3 bench/programs/short_runs.py --runs 11 --wprof target/release/wprof \\
        --against /tmp/wprof-before
"""

import tempfile
from pathlib import Path

from side_by_side import medians, parser, programs

SCRIPTS = {"lua": "print(1)\n", "js": "print(1)\n", "py": "print(1)\n"}
LANGUAGE = {"lua": "lua", "quickjs": "js", "python": "py", "python312": "py"}


def main():
    ap = parser(__doc__, tempfile.mkdtemp(prefix="wprof-short-"))
    ap.add_argument("--against", help="another wprof binary, run the same way")
    args = ap.parse_args()
    args.programs = args.programs or list(LANGUAGE)
    scripts = Path(tempfile.mkdtemp(prefix="wprof-short-scripts-"))
    for language, text in SCRIPTS.items():
        (scripts / f"one.{language}").write_text(text)
    for name, _, dirs, tail, env in programs(args):
        # The benchmark's own script replaced by one that prints 1.
        module = tail[0]
        dirs = dirs + ["--dir", f"{scripts}::/s"]
        script = [module, f"/s/one.{LANGUAGE[name]}"]
        run = lambda wprof: [wprof, "run", "-q", "-o", str(scripts / "x.wprof")] + dirs + script
        runs = {
            "WPROF=0": (run(args.wprof), dict(env, WPROF="0")),
            "default": (run(args.wprof), env),
        }
        if args.against:
            other = dict(env, WPROF_CACHE_DIR=env["WPROF_CACHE_DIR"] + "-against")
            runs["against"] = (run(args.against), other)
        m = medians(name, runs, args)
        off = m["WPROF=0"]
        said = ", ".join(f"{k} {v * 1000:.1f} ms ({v / off:.2f}x)" for k, v in m.items())
        print(f"{name}: {said}", flush=True)


if __name__ == "__main__":
    main()
