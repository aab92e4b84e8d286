#!/bin/sh
# libFuzzer campaigns over every target in tests/fuzz (`make fuzz`).
#
# Usage: run-libfuzzer.sh [SECONDS]      (default 60 per target)
# Environment:
#   BUILD         build dir of the caller (default build); everything this
#                 script writes goes under it, never into the tree, except
#                 crash inputs and (FUZZ_MERGE=1) merged corpus entries
#   FUZZ_TARGETS  names to run, e.g. "wire keys" (default: every fuzz_*.c)
#   FUZZ_MERGE=1  after a clean run, merge the inputs that add coverage into
#                 tests/fuzz/corpus/NAME (libFuzzer -merge=1)
#   FUZZ_TIMEOUT  seconds one input may take before it counts as a crash (10)
#   FUZZ_CC       the clang to use (clang)
#   FUZZ_JOBS     targets fuzzed at once, each on a core of its own (default:
#                 the number of CPUs); a crash is reported as it would be alone
#
# Each target is built with clang -fsanitize=fuzzer,address,undefined in
# $BUILD/fuzz-clang, then runs for SECONDS with tests/fuzz/corpus/NAME as its
# seed (read only) and $BUILD/fuzz-corpus/NAME as its work corpus (kept from
# run to run).  A crash, leak, timeout or out-of-memory input is copied to
# tests/fuzz/corpus/NAME/crash-SHA1, so the corpus replay of `make check`
# runs it from then on; the script then exits 1.  Executions add up across
# runs in $BUILD/fuzz-stats/NAME.execs.
set -u
seconds=${1:-60}
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-build}
case $build in /*) ;; *) build=$top/$build ;; esac
cc=${FUZZ_CC:-clang}
timeout_s=${FUZZ_TIMEOUT:-10}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in ''|*[!0-9]*|0) echo "run-libfuzzer.sh: FUZZ_JOBS must be a positive number, got '$jobs'" >&2; exit 2 ;; esac
fb=$build/fuzz-clang

case $seconds in ''|*[!0-9]*) echo "run-libfuzzer.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac

# The build libraries, clang and its libFuzzer runtime: installed as root,
# else the command to run.
sh "$top/packaging/install-deps.sh" build fuzz || exit 1
command -v "$cc" >/dev/null 2>&1 || { echo "run-libfuzzer.sh: $cc not found" >&2; exit 1; }

targets=${FUZZ_TARGETS:-}
if [ -z "$targets" ]; then
    for f in "$top"/tests/fuzz/fuzz_*.c; do
        n=$(basename "$f" .c)
        targets="$targets ${n#fuzz_}"
    done
fi
bins=""
for t in $targets; do
    [ -f "$top/tests/fuzz/fuzz_$t.c" ] || { echo "run-libfuzzer.sh: no target tests/fuzz/fuzz_$t.c" >&2; exit 2; }
    bins="$bins $fb/libfuzzer/fuzz_$t"
done

# The library and the targets with coverage and sanitizers (the Makefile's
# rules, in a build dir of their own).
echo "fuzz: building with $cc in $fb"
make -C "$top" --no-print-directory -s -j"$jobs" BUILD="$fb" CC="$cc" OPT=-O1 \
    SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
    CFLAGS="-fsanitize=fuzzer-no-link" $bins || { echo "fuzz: build failed" >&2; exit 1; }

mkdir -p "$build/fuzz-stats" "$build/fuzz-logs"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
status=0
total_crashes=0
# paths T: the binary, seed and work corpora, artifacts, log, exit code and stats of target T
paths() {
    bin=$fb/libfuzzer/fuzz_$1
    seed=$top/tests/fuzz/corpus/$1
    work=$build/fuzz-corpus/$1
    art=$build/fuzz-artifacts/$1
    log=$build/fuzz-logs/$1.log
    rcf=$build/fuzz-logs/$1.rc
    stats=$build/fuzz-stats/$1.execs
}
# The campaigns, $jobs at once (each runs SECONDS on one core); their exit codes to NAME.rc.
n=0
for t in $targets; do
    paths "$t"
    mkdir -p "$seed" "$work" "$art"
    rm -f "$art"/* "$rcf"
    ("$bin" -max_total_time="$seconds" -timeout="$timeout_s" -print_final_stats=1 \
        -artifact_prefix="$art/" "$work" "$seed" > "$log" 2>&1
     echo $? > "$rcf") &
    n=$((n + 1))
    if [ "$n" -ge "$jobs" ]; then wait; n=0; fi
done
wait

printf '%-16s %12s %14s  %s\n' target "execs (run)" "execs (total)" result
for t in $targets; do
    paths "$t"
    rc=$(cat "$rcf" 2>/dev/null || echo 99)
    # The final stats are printed on a clean end and on a crash; a run killed
    # harder than that leaves only its progress lines ("#N ...").
    execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -1)
    [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9][0-9]*\)[[:space:]].*/\1/p' "$log" | tail -1)
    execs=${execs:-0}
    old=0
    [ -f "$stats" ] && old=$(cat "$stats")
    total=$((old + execs))
    echo "$total" > "$stats"

    crashes=0
    result=ok
    saved=""
    for a in "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-*; do
        [ -f "$a" ] || continue
        crashes=$((crashes + 1))
        sha=$(sha1sum "$a" | cut -d' ' -f1)
        cp "$a" "$seed/crash-$sha"
        saved="$saved $seed/crash-$sha"
        result="CRASH ($(basename "$a" | cut -d- -f1)): tests/fuzz/corpus/$t/crash-$sha"
    done
    if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then
        crashes=1
        result="FAILED (exit $rc, no input saved)"
    fi
    printf '%-16s %12s %14s  %s\n' "fuzz_$t" "$execs" "$total" "$result"
    if [ "$crashes" -gt 0 ]; then
        status=1
        total_crashes=$((total_crashes + crashes))
        # The report and the input, so a crash on a CI machine can be
        # reproduced from its log alone (the target's own message, the
        # sanitizer's first lines, libFuzzer's Base64 of the input).
        echo "--- fuzz_$t: $log, the report:"
        grep -E "^(==[0-9]+==|SUMMARY|fuzz_$t: |.*runtime error|Base64: )" "$log" | cut -c1-2000 | head -12
        echo "--- last lines:"
        tail -5 "$log"
        for c in $saved; do echo "--- reproduce: $bin $c"; done
        continue
    fi
    if [ "${FUZZ_MERGE:-0}" = 1 ]; then
        before=$(ls "$seed" | wc -l)
        "$bin" -merge=1 -timeout="$timeout_s" "$seed" "$work" >> "$log" 2>&1 ||
            { echo "fuzz_$t: merge failed, see $log" >&2; status=1; continue; }
        echo "fuzz_$t: merged $(($(ls "$seed" | wc -l) - before)) inputs into tests/fuzz/corpus/$t"
    fi
done
echo "fuzz: $total_crashes crashes; logs in $build/fuzz-logs, work corpora in $build/fuzz-corpus"
exit $status
