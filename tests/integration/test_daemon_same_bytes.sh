#!/bin/sh
# A change of ctime alone (chmod, a new hard link) does not ship a new
# version when the bytes are those shipped:
#   - f.log and g.log ship; then f.log is chmod'ed, g.log gets a second
#     link, and h.log is chmod'ed and appended to.  h.log's new version
#     ships; f.log and g.log are recorded (status totals.files_same_bytes 2)
#     and not shipped again: each is in one manifest only;
#   - after a restart they are still not shipped again.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null 2>&1 || { pass "skipped: python3 is needed to read the JSON"; exit 0; }
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
gen_log "$S/f.log" 70000 1
gen_log "$S/g.log" 3000 2
gen_log "$S/h.log" 5000 3
write_agent_config dev1 "$S" 'batch:
  max_wait: 100ms
rescan_interval: 300ms'
sed -i 's|^  - path: .*|&\n    settle: 100ms|' "$T/dev1.yaml"
SOCK="$T/astate-dev1/agent.sock"
start_agent() {
    "$AGENT" --config "$T/dev1.yaml" >> "$T/dev1.out" 2>> "$T/dev1.err" &
    AGENT_PID=$!
}
# wait_walks N: until N more walks ran
wait_walks() {
    status_json; _w=$(jget walks.count); i=0
    while ! status_json || [ "$(jget walks.count)" -lt $((_w + $1)) ]; do
        i=$((i + 1)); [ $i -gt 400 ] && fail "no further walks"
        sleep 0.05
    done
}
in_manifests() { manifest_paths dev1 | grep -c "^data/$1\$" || true; }
start_agent
until_status totals.files_shipped 3
chmod 600 "$S/f.log"
ln "$S/g.log" "$T/g.link"
chmod 600 "$S/h.log"
echo "one more line" >> "$S/h.log"
i=0
while ! cmp -s "$S/h.log" "$(landed_root dev1)/data/h.log"; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1.err"; fail "h.log's new version did not land"; }
    sleep 0.05
done
wait_walks 3
[ "$(in_manifests h.log)" = 2 ] || fail "h.log is in $(in_manifests h.log) manifests, not 2"
[ "$(in_manifests f.log)" = 1 ] || { manifest_paths dev1; fail "chmod f.log shipped it again ($(in_manifests f.log) manifests)"; }
[ "$(in_manifests g.log)" = 1 ] || { manifest_paths dev1; fail "a new link to g.log shipped it again ($(in_manifests g.log) manifests)"; }
[ "$(jget totals.files_same_bytes)" = 2 ] || { cat "$T/status.json"; fail "files_same_bytes is not 2"; }
[ "$(jget totals.files_shipped)" = 4 ] || { cat "$T/status.json"; fail "files_shipped is not 4"; }
pass "chmod and a new link (ctime alone, same bytes): recorded, not shipped; chmod + append shipped"
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
start_agent
i=0; while ! status_json; do i=$((i + 1)); [ $i -gt 200 ] && fail "no status after the restart"; sleep 0.05; done
wait_walks 3
[ "$(in_manifests f.log)" = 1 ] || fail "f.log shipped again after a restart"
[ "$(in_manifests g.log)" = 1 ] || fail "g.log shipped again after a restart"
[ "$(jget totals.files_shipped)" = 0 ] || { cat "$T/status.json"; fail "files shipped after the restart"; }
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || fail "agent exited $rc"
same_tree "$S" "$(landed_root dev1)/data"
pass "after a restart: nothing shipped again"
