#!/usr/bin/env bash
# A long run of the differential test (tests/all/fuzz.rs) on seeds FIRST..FIRST+CASES, in
# chunks of CHUNK seeds, one process each (one engine, a case per core), each chunk's tally
# in LOGDIR/seeds-A-B.log; a chunk whose log already ends with its tally is not run again,
# so the same command resumes a run that was stopped. See docs/fuzzing.md.
#
#   bash fuzz/long-run.sh FIRST CASES [CHUNK] [LOGDIR]
#   nohup bash fuzz/long-run.sh 1 1000000 50000 fuzz-logs > fuzz-logs/run.out 2>&1 &
set -euo pipefail

first=${1:?first seed}
cases=${2:?number of cases}
chunk=${3:-50000}
logdir=${4:-fuzz-logs}
root=$(cd "$(dirname "$0")/.." && pwd)
test=fuzz::instrumented_modules_behave_as_the_originals

mkdir -p "$logdir"
logdir=$(cd "$logdir" && pwd)
cd "$root"
# The integration tests' binary, built as the tests are (the dev profile: optimized, with
# debug assertions); cargo prints its path.
binary=$(cargo test -p wprof --test all --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\/all-[^"]*\)".*/\1/p' | tail -n 1)
test -x "$binary" || { echo "no test binary" >&2; exit 1; }
# A copy, which a rebuild of the tests while the run goes on does not replace.
cp "$binary" "$logdir/all-tests"
binary=$logdir/all-tests

end=$((first + cases))
for ((start = first; start < end; start += chunk)); do
    n=$((end - start < chunk ? end - start : chunk))
    log="$logdir/seeds-$start-$((start + n - 1)).log"
    if [ -f "$log" ] && grep -q '] done: ' "$log"; then
        continue
    fi
    rm -f "$log"
    echo "$(date -u +%FT%TZ) seeds $start..$((start + n - 1)) -> $log"
    # The test binary runs in host/, as cargo runs it.
    (cd host && WPROF_FUZZ_SEED=$start WPROF_FUZZ_CASES=$n WPROF_FUZZ_LOG="$log" \
        "$binary" --exact "$test" --nocapture) || echo "chunk $start failed (see $log)"
done
