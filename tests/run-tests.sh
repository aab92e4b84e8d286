#!/bin/sh
# Run every test binary and script; print one summary line per suite and a
# final "N passed, N failed".  Usage: run-tests.sh BUILD [unit|fuzz|integration]...
# VALGRIND=1 runs the unit tests under valgrind --error-exitcode.  Logs go to
# BUILD/test-logs/KIND/NAME.log (a unit test and an integration test may share
# a name: test_throttle).
set -u
build=${1:-build}
shift 2>/dev/null || true
kinds=${*:-unit fuzz integration}
top=$(cd "$(dirname "$0")/.." && pwd)
logdir="$build/test-logs"
mkdir -p "$logdir/unit" "$logdir/fuzz" "$logdir/integration"
passed=0
failed=0
failures=""

count() { # count PASS FAIL NAME
    passed=$((passed + $1)); failed=$((failed + $2))
    [ "$2" -gt 0 ] && failures="$failures $3"
    printf '%-40s %s passed, %s failed\n' "$3" "$1" "$2"
}

for kind in $kinds; do
case $kind in
unit)
    for t in "$build"/tests/test_*; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        log="$logdir/unit/$name.log"
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
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
        [ "$f" -gt 0 ] && { echo "--- $name (exit $rc), last lines of $log:"; tail -30 "$log"; }
        count "$p" "$f" "$name"
    done ;;
fuzz)
    for t in "$build"/fuzz/fuzz_*; do
        [ -x "$t" ] || continue
        name=$(basename "$t")
        corpus="$top/tests/fuzz/corpus/${name#fuzz_}"
        log="$logdir/fuzz/$name.log"
        if "$t" "$corpus" > "$log" 2>&1; then count 1 0 "$name (corpus replay)"
        else echo "--- $name:"; tail -20 "$log"; count 0 1 "$name (corpus replay)"; fi
    done ;;
integration)
    for t in "$top"/tests/integration/test_*.sh; do
        [ -f "$t" ] || continue
        name=$(basename "$t" .sh)
        log="$logdir/integration/$name.log"
        if BUILD="$(cd "$build" && pwd)" timeout 600 sh "$t" > "$log" 2>&1; then count 1 0 "$name"
        else echo "--- $name, last lines of $log:"; tail -40 "$log"; count 0 1 "$name"; fi
    done ;;
esac
done

[ -n "$failures" ] && echo "failed:$failures"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
