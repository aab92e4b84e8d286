#!/usr/bin/env bash
# bench/daemon-cpu.sh BUILD [BUILD...]: the edge daemon's CPU while one log
# of a large source is appended to (issue 18 item 4), for each build given,
# in one run.
#
# For each build: a source of FILES files (default 20,000, in 20
# directories) is shipped to a receiver on loopback by the daemon; once it
# has landed and the daemon is quiet, its CPU seconds (utime + stime from
# /proc/PID/stat) are read over DURATION seconds idle (default 60), then
# over DURATION seconds while one log in it is appended to every EVERY
# seconds (default 0.1: open, write, close, as `echo >> log` does).  Prints
# and writes to RESULTS (default bench/results-daemon-cpu.md) the CPU
# seconds per second idle and appending, the difference, and the daemon's
# walks of every source and looks at single files in the appending phase.
# The issue's bound: at most 0.05 CPU seconds per second above idle.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
[ $# -ge 1 ] || { echo "usage: bench/daemon-cpu.sh BUILD [BUILD...]" >&2; exit 2; }
FILES=${FILES:-20000}
DURATION=${DURATION:-60}
EVERY=${EVERY:-0.1}
RESULTS=${RESULTS:-$HERE/results-daemon-cpu.md}
command -v python3 >/dev/null || { echo "daemon-cpu: python3 is needed to read the status JSON" >&2; exit 1; }
HZ=$(getconf CLK_TCK)
rows=""

one() { # one BUILD: sets row
    local build=$1
    case $build in /*) ;; *) build=$TOP/$build ;; esac
    (
        set +o pipefail # lib.sh's generators end pipes early (head -c), as plain sh allows
        export BUILD=$build
        # shellcheck source=../tests/integration/lib.sh
        . "$TOP/tests/integration/lib.sh"
        setup_keys
        write_receiver_config 'layout: "{device}/{path}"'
        start_receiver
        S="$T/src/data"
        per=$((FILES / 20))
        gen_log "$T/blob" $((per * 60)) 3
        for k in $(seq 0 19); do mkdir -p "$S/d$k" && (cd "$S/d$k" && split -a 4 -n "$per" "$T/blob" "f$k."); done
        rm "$T/blob"
        write_agent_config dev1 "$S" 'batch:
  max_wait: 200ms'
        sed -i 's|^  - path: .*|&\n    settle: 1s|' "$T/dev1.yaml"
        "$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
        apid=$!
        n=$(find "$S" -type f | wc -l)
        i=0
        while [ "$(find "$(landed_root dev1)/data" -type f 2>/dev/null | wc -l)" -lt "$n" ]; do
            i=$((i + 1)); [ $i -gt 6000 ] && { tail "$T/dev1.err"; fail "the source did not land"; }
            sleep 0.1
        done
        sleep 3
        cpu() { awk '{ print $14 + $15 }' "/proc/$apid/stat"; }
        st() { "$CTL" status --json --socket "$T/astate-dev1/agent.sock" | python3 -c 'import json,sys
v = json.load(sys.stdin)["walks"]
print(v["count"], v.get("of_changed_files", 0))'; }
        c0=$(cpu); sleep "$DURATION"; c1=$(cpu)
        read -r w0 p0 < <(st)
        end=$(($(date +%s) + DURATION))
        c2=$(cpu)
        k=0
        while [ "$(date +%s)" -lt "$end" ]; do
            printf 'line %d\n' $k >> "$S/d0/app.log"
            k=$((k + 1))
            sleep "$EVERY"
        done
        c3=$(cpu)
        read -r w1 p1 < <(st)
        kill -TERM $apid; wait $apid || true
        awk -v a="$c0" -v b="$c1" -v c="$c2" -v d="$c3" -v hz="$HZ" -v s="$DURATION" -v k="$k" -v w=$((w1 - w0)) \
            -v p=$((p1 - p0)) -v f="$n" -v bn="$(basename "$build")" \
            'BEGIN { idle = (b - a) / hz / s; app = (d - c) / hz / s;
                     printf "| %s | %d | %d | %.4f | %.4f | %.4f | %d | %d |\n", bn, f, k, idle, app, app - idle, w, p }'
    )
}

for b in "$@"; do
    echo "daemon-cpu: $b" >&2
    row=$(one "$b")
    echo "$row"
    rows="$rows$row
"
done
{
    echo "# The edge daemon's CPU while one log is appended to"
    echo
    echo "\`bash bench/daemon-cpu.sh $*\` (FILES=$FILES DURATION=$DURATION EVERY=$EVERY), $(date -u +%Y-%m-%d):"
    echo "a source of $FILES files shipped by the daemon to a receiver on loopback; then its CPU seconds per"
    echo "second over ${DURATION} s idle, and over ${DURATION} s while one log of the source is appended to every"
    echo "${EVERY} s (open, write, close). Walks: walks of every source during the appending phase; looks: files"
    echo "looked at alone (the files events name). The bound of issue 18: at most 0.05 above idle."
    echo
    echo "| build | files | appends | CPU s/s idle | CPU s/s appending | above idle | walks | looks |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s' "$rows"
} > "$RESULTS"
echo "daemon-cpu: wrote $RESULTS" >&2
