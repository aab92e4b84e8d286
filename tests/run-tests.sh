#!/bin/sh
# Run every test binary and script; print one summary line per suite (with
# its seconds) and a final "N passed, N failed".
# Usage: run-tests.sh BUILD [unit|fuzz|integration]...
#
# JOBS=N runs up to N suites at once (default: twice the number of CPUs,
# at most 4; JOBS=1 runs them one after the other).  Most suites wait on
# processes, sockets and fsyncs more than they compute: on two cores the
# integration suites took 463 s one at a time, about 215 s four at a time.  A suite that must have the machine to itself
# (it installs packages system-wide, mounts loop devices, drops the page
# cache or compares timings) has the line "# run-tests: alone" and runs after
# the others, by itself.  Lines are printed in name order once every suite of
# a kind has ended.
#
# VALGRIND=1 runs the unit tests under valgrind --error-exitcode.  Logs go to
# BUILD/test-logs/KIND/NAME.log (a unit test and an integration test may
# share a name: test_throttle), each suite's result to NAME.res.
set -u

# name_of KIND PATH: the suite's name (its log is KIND/NAME.log)
name_of() { if [ "$1" = integration ]; then basename "$2" .sh; else basename "$2"; fi; }

if [ "${1:-}" = --one ]; then
    # --one KIND PATH LOGDIR TOP: run one suite, write "PASSED FAILED EXIT SECONDS" to its .res
    kind=$2; t=$3; logdir=$4; top=$5
    name=$(name_of "$kind" "$t")
    log="$logdir/$kind/$name.log"
    res="$logdir/$kind/$name.res"
    start=$(date +%s.%N)
    case $kind in
    unit)
        if [ "${VALGRIND:-0}" = 1 ]; then
            INGEST_TEST_QUICK=1 valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
                "$t" > "$log" 2>&1
        else
            "$t" > "$log" 2>&1
        fi
        rc=$?
        p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
        f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
        p=${p:-0}; f=${f:-0}
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi ;;
    fuzz)
        corpus="$top/tests/fuzz/corpus/${name#fuzz_}"
        "$t" "$corpus" > "$log" 2>&1
        rc=$?
        if [ "$rc" -eq 0 ]; then p=1; f=0; else p=0; f=1; fi ;;
    integration)
        BUILD="$BUILD_ABS" timeout 600 sh "$t" > "$log" 2>&1
        rc=$?
        if [ "$rc" -eq 0 ]; then p=1; f=0; else p=0; f=1; fi ;;
    esac
    end=$(date +%s.%N)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    echo "$p $f $rc $secs" > "$res.tmp" && mv "$res.tmp" "$res"
    exit 0
fi

build=${1:-build}
shift 2>/dev/null || true
kinds=${*:-unit fuzz integration}
top=$(cd "$(dirname "$0")/.." && pwd)
self="$top/tests/run-tests.sh"
logdir="$build/test-logs"
mkdir -p "$logdir/unit" "$logdir/fuzz" "$logdir/integration"
BUILD_ABS=$(cd "$build" && pwd)
export BUILD_ABS
logdir_abs="$BUILD_ABS/test-logs"
if [ -z "${JOBS:-}" ]; then
    JOBS=$(( $(nproc 2>/dev/null || echo 1) * 2 ))
    [ "$JOBS" -gt 4 ] && JOBS=4
fi
case $JOBS in
'' | *[!0-9]* | 0) echo "run-tests.sh: JOBS must be a positive number, not '$JOBS'" >&2; exit 2 ;;
esac
passed=0
failed=0
failures=""

# suites KIND: the suites of that kind, one path per line
suites() {
    case $1 in
    unit) for t in "$build"/tests/test_*; do [ -x "$t" ] && echo "$BUILD_ABS/tests/$(basename "$t")"; done ;;
    fuzz) for t in "$build"/fuzz/fuzz_*; do [ -x "$t" ] && echo "$BUILD_ABS/fuzz/$(basename "$t")"; done ;;
    integration) for t in "$top"/tests/integration/test_*.sh; do [ -f "$t" ] && echo "$t"; done ;;
    esac
    return 0
}

# run KIND N: the suites on stdin, up to N at once
run() {
    xargs -r -I '{}' -P "$2" sh "$self" --one "$1" '{}' "$logdir_abs" "$top"
}

nl='
'
for kind in $kinds; do
    list=$(suites "$kind")
    [ -n "$list" ] || continue
    IFS=$nl # one path per line, whatever characters the paths hold
    for t in $list; do
        n=$(name_of "$kind" "$t")
        rm -f "$logdir/$kind/$n.res"
    done
    alone=""
    [ "$kind" = integration ] && alone=$(grep -l '^# run-tests: alone' $list || true)
    printf '%s\n' $list | grep -vxF "$alone" | run "$kind" "$JOBS"
    [ -n "$alone" ] && printf '%s\n' $alone | run "$kind" 1
    for t in $list; do
        n=$(name_of "$kind" "$t")
        [ "$kind" = fuzz ] && label="$n (corpus replay)" || label=$n
        log="$logdir/$kind/$n.log"
        if [ -f "$logdir/$kind/$n.res" ]; then
            IFS=" " read -r p f rc secs < "$logdir/$kind/$n.res"
        else
            p=0; f=1; rc="none: the runner lost it"; secs="?"
        fi
        if [ "$f" -gt 0 ]; then
            echo "--- $label (exit $rc), last lines of $log:"
            tail -40 "$log" 2>/dev/null
        fi
        passed=$((passed + p)); failed=$((failed + f))
        [ "$f" -gt 0 ] && failures="$failures $n"
        printf '%-40s %s passed, %s failed  %6ss\n' "$label" "$p" "$f" "$secs"
    done
    unset IFS
done

[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
