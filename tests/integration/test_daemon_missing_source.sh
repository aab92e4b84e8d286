#!/bin/sh
# A source missing when the daemon starts:
#   - the other sources are watched and ship; the missing one is said
#     once (not once or twice per walk) and the status shows it `missing`;
#   - when its directory appears it is watched without a restart: its
#     files land, the status shows it `watching`, and a file written later
#     (rescans every hour: only inotify can tell) lands too;
#   - a source removed while running is `missing` again, said once;
#   - a source directory removed and made again at once is watched again.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
L="$T/src/late"
mkdir -p "$S"
gen_log "$S/a.log" 3000 1
write_agent_config dev1 "$S" 'batch:
  max_wait: 100ms
rescan_interval: 300ms'
sed -i "s|^  - path: .*|&\n    settle: 100ms\n  - path: $L\n    settle: 100ms|" "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err" 2>/dev/null; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
status_json() { "$CTL" status --json --socket "$SOCK" > "$T/status.json" || fail "ingestctl status --json failed"; }
# wait_walks N: until N more walks ran
wait_walks() {
    status_json; _w=$(jget walks.count); i=0
    while status_json && [ "$(jget walks.count)" -lt $((_w + $1)) ]; do
        i=$((i + 1)); [ $i -gt 400 ] && fail "no further walks"
        sleep 0.05
    done
}
agent_log "batch .* acked: 1 files"
wait_walks 5
n=$(grep -c "\[warn\].*late" "$T/dev1.err" || true)
[ "$n" = 1 ] || { cat "$T/dev1.err"; fail "the missing source was said $n times in 6 walks, not once"; }
grep -q "source late: $L does not exist" "$T/dev1.err" || { cat "$T/dev1.err"; fail "no message for the missing source"; }
[ "$(jget sources.1.name)" = late ] || fail "second source is not late"
[ "$(jget sources.1.state)" = missing ] || { cat "$T/status.json"; fail "the missing source's state is $(jget sources.1.state)"; }
[ "$(jget sources.0.state)" = watching ] || fail "the present source is not watching"
"$CTL" status --socket "$SOCK" | grep -q "^late  *missing  *none  *$L\$" || fail "text status: no missing row"
pass "missing at start: said once in 6 walks, status says missing, the other source shipped"

mkdir -p "$L/sub"
gen_log "$L/sub/b.log" 5000 2
agent_log "source late: $L is here now"
i=0
while ! cmp -s "$L/sub/b.log" "$(landed_root dev1)/late/sub/b.log"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1.err"; fail "b.log of the late source did not land"; }
    sleep 0.05
done
status_json
[ "$(jget sources.1.state)" = watching ] || { cat "$T/status.json"; fail "the late source is not watching once there"; }
pass "the source appeared: watched without a restart, its file landed"

gen_log "$L/sub/c.log" 4000 3
i=0
while ! cmp -s "$L/sub/c.log" "$(landed_root dev1)/late/sub/c.log"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1.err"; fail "c.log, written later, did not land"; }
    sleep 0.05
done
cp -r "$L" "$T/late.copy"
rm -rf "$L"
wait_walks 4
[ "$(jget sources.1.state)" = missing ] || { cat "$T/status.json"; fail "the removed source is not missing"; }
n=$(grep -c "source late: $L does not exist" "$T/dev1.err" || true)
[ "$n" = 2 ] || { cat "$T/dev1.err"; fail "missing said $n times (once at start, once when removed: 2)"; }
pass "removed while running: missing again, said once"
# the other source's directory removed and made again at once: watched again (its watches went with it)
cp -r "$S" "$T/data.copy"
rm -rf "$S" && mkdir "$S"
wait_walks 2
[ "$(jget sources.0.state)" = watching ] || { cat "$T/status.json"; fail "the remade source is $(jget sources.0.state)"; }
gen_log "$S/d.log" 2000 4
i=0
while ! cmp -s "$S/d.log" "$(landed_root dev1)/data/d.log"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1.err"; fail "d.log of the remade source did not land"; }
    sleep 0.05
done
pass "a source directory removed and made again: watching again, its new file landed"

kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
cp "$S/d.log" "$T/data.copy/"
same_tree "$T/data.copy" "$(landed_root dev1)/data"
same_tree "$T/late.copy" "$(landed_root dev1)/late"
