#!/usr/bin/env python3
"""What an interpreter's script frames cost: whole `wprof run` processes side by side.

For each interpreter of the benchmark set (default: lua, lua_eh): `WPROF=0`, the default
mode with the script's frames, the same with its ticks a second apart (what the counters and
wprof's own work cost without the interrupts), and the default mode with `--native` (the
interpreter's own frames: entry counters and the capture store, no walk of the script's
stack), interleaved, each run once first to warm the cache; prints the medians, their
ratios to `WPROF=0`, and in brackets the median of each round's ratio to that round's
`WPROF=0` (steadier where the machine's speed drifts). `--mode sample` (or `adaptive`)
measures that mode instead of the default. `--periods 50,1000` adds the default mode with
its ticks that many microseconds apart (what more or fewer ticks cost).

    python3 bench/programs/languages_overhead.py --runs 9 --wprof target/release/wprof
"""

from side_by_side import median_of, paired, parser, programs, rounds


def main():
    ap = parser(__doc__, "/tmp/wprof-languages-overhead-cache")
    ap.add_argument("--mode", default=None, help="a mode other than the default")
    ap.add_argument(
        "--periods",
        default="",
        help="comma-separated sample periods in microseconds to run the default mode at too",
    )
    args = ap.parse_args()
    args.programs = args.programs or ["lua", "lua_eh"]
    for name, _, dirs, tail, env in programs(args):
        mode = ["--mode", args.mode] if args.mode else []
        base = [args.wprof, "run", "-q", "-o", "/dev/null"] + mode + dirs
        runs = {
            "WPROF=0": (base + tail, dict(env, WPROF="0")),
            "script frames": (base + tail, env),
            "no ticks": (base + tail, dict(env, WPROF_SAMPLE_PERIOD_US="1000000")),
            "--native": (base + ["--native"] + tail, env),
        }
        for period in filter(None, args.periods.split(",")):
            runs[f"every {period} us"] = (base + tail, dict(env, WPROF_SAMPLE_PERIOD_US=period))
        times = rounds(name, runs, args)
        median = median_of(times)
        ratio = paired(times, "WPROF=0")
        off = median["WPROF=0"]
        print(
            f"{name:<8} "
            + "  ".join(
                f"{k} {v:.3f} s ({v / off:.3f}x) [{ratio[k]:.3f}x]" for k, v in median.items()
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
