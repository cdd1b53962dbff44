#!/usr/bin/env python3
"""What live probes cost: whole `wprof run` processes side by side, warm caches.

For each program of the benchmark set (see README.md here): `WPROF=0`, every function
probed, `--live --off '*'` (every switch off) and `--live` (every switch on), interleaved,
each run once first to warm the cache; prints the medians and their ratios to `WPROF=0`.

    python3 bench/programs/live_overhead.py --runs 9 --mode sample lua sqlite
"""

from side_by_side import medians, parser, programs


def main():
    ap = parser(__doc__, "/tmp/wprof-live-overhead-cache")
    ap.add_argument("--mode", default="sample")
    args = ap.parse_args()
    for name, _, dirs, tail, env in programs(args):
        base = [args.wprof, "run", "-q", "-o", "/dev/null", "--mode", args.mode] + dirs
        runs = {
            "WPROF=0": (base + tail, dict(env, WPROF="0")),
            "probed": (base + tail, env),
            "live, all off": (base + ["--live", "--off", "*"] + tail, env),
            "live, all on": (base + ["--live"] + tail, env),
        }
        times = medians(name, runs, args)
        off = times["WPROF=0"]
        print(
            f"{name:<11} {args.mode:<6} "
            + "  ".join(f"{k} {v:.3f} s ({v / off:.2f}x)" for k, v in times.items()),
            flush=True,
        )


if __name__ == "__main__":
    main()
