#!/bin/sh
# Symlinks, FIFOs, sockets and devices under a source are skipped (only
# regular files ship; a FIFO is never opened, so nothing waits on it), and
# what the walk skipped is counted by kind: in the --once summary line, in
# the metrics (ingest_agent_special_files{kind}, here through the JSON line
# --stats-interval logs at exit), and in the daemon's /metrics and
# ingestctl status.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/sp"
mkdir -p "$S/sub"
printf 'regular a\n' > "$S/a.txt"
printf 'regular b\n' > "$S/sub/b.txt"
ln -s a.txt "$S/link"
ln -s /etc/passwd "$S/sub/outside"
mkfifo "$S/fifo"
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$S/sock" ||
    fail "could not make a unix socket"
[ -S "$S/sock" ] || fail "no socket at $S/sock"
devs=0
if mknod "$S/null" c 1 3 2>/dev/null; then devs=1; fi

write_agent_config dev1 "$S"
rc=0
timeout 60 "$AGENT" --config "$T/dev1.yaml" --once --stats-interval 3600 > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" -ne 124 ] || fail "the agent hung (on the FIFO?)"
[ "$rc" -eq 0 ] || { cat "$T/dev1.err"; fail "the agent failed ($rc)"; }
cat "$T/dev1.out"
[ "$(field dev1 files)" -eq 2 ] || fail "shipped $(field dev1 files) files, expected the 2 regular ones"
same_tree "$S" "$(landed_root dev1)/sp"
[ -z "$(find "$(landed_root dev1)" ! -type f ! -type d)" ] || fail "something not a regular file landed"
[ "$(field dev1 skipped_symlinks)" = 2 ] || fail "skipped_symlinks=$(field dev1 skipped_symlinks), expected 2"
[ "$(field dev1 skipped_fifos)" = 1 ] || fail "skipped_fifos=$(field dev1 skipped_fifos), expected 1"
[ "$(field dev1 skipped_sockets)" = 1 ] || fail "skipped_sockets=$(field dev1 skipped_sockets), expected 1"
[ "$(field dev1 skipped_devices)" = $devs ] || fail "skipped_devices=$(field dev1 skipped_devices), expected $devs"
grep -q 'walk: skipped 2 symlinks, 1 FIFOs, 1 sockets and '$devs' devices under the sources' "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "no log line says what the walk skipped"; }
pass "the 2 regular files land; the summary line counts 2 symlinks, 1 FIFO, 1 socket, $devs devices; nothing hangs"

grep ']: stats {' "$T/dev1.err" | tail -1 | sed 's/.*]: stats //' > "$T/stats.json"
python3 - "$T/stats.json" "$devs" <<'PY' || { cat "$T/stats.json"; fail "the metrics do not count the skipped kinds"; }
import json, sys
m = json.load(open(sys.argv[1]))["ingest_agent_special_files"]
assert m == {"symlink": 2, "fifo": 1, "socket": 1, "device": int(sys.argv[2]), "bad_link": 0}, m
PY
pass "ingest_agent_special_files{kind} counts them (the --stats-interval line at exit)"

# The daemon: the same counts on /metrics and in ingestctl status, after its first walk.
write_agent_config dev2 "$S" 'metrics:
  listen: 127.0.0.1:0'
"$AGENT" --config "$T/dev2.yaml" > "$T/dev2.out" 2> "$T/dev2.err" &
AGENT_PID=$!
trap 'kill "$AGENT_PID" 2>/dev/null || true; cleanup' EXIT
i=0
until grep -q 'metrics on http://' "$T/dev2.err" && grep -q 'walk: skipped' "$T/dev2.err"; do
    i=$((i + 1)); [ $i -gt 200 ] && { cat "$T/dev2.err"; fail "the daemon did not walk its source"; }
    sleep 0.05
done
amaddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/dev2.err" | tail -1)
bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\n\r\n" >&3; cat <&3' "$amaddr" |
    sed '1,/^\r*$/d' | tr -d '\r' > "$T/a1"
aval() { awk -v k="$1" '$1 == k { print $2 }' "$T/a1"; }
[ "$(aval 'ingest_agent_special_files{kind="symlink"}')" = 2 ] || { cat "$T/a1"; fail "/metrics: symlinks"; }
[ "$(aval 'ingest_agent_special_files{kind="fifo"}')" = 1 ] || fail "/metrics: fifos"
[ "$(aval 'ingest_agent_special_files{kind="socket"}')" = 1 ] || fail "/metrics: sockets"
[ "$(aval 'ingest_agent_special_files{kind="device"}')" = $devs ] || fail "/metrics: devices"
"$CTL" status --socket "$T/astate-dev2/agent.sock" > "$T/st.txt" || fail "ingestctl status failed"
grep -q "not regular files .*symlink=2 fifo=1 socket=1 device=$devs" "$T/st.txt" || { cat "$T/st.txt"; fail "ingestctl status does not show them"; }
"$CTL" status --json --socket "$T/astate-dev2/agent.sock" > "$T/st.json" || fail "ingestctl status --json failed"
python3 - "$T/st.json" "$devs" <<'PY' || { cat "$T/st.json"; fail "status --json does not count them"; }
import json, sys
w = json.load(open(sys.argv[1]))["walks"]["not_regular"]
assert w == {"symlink": 2, "fifo": 1, "socket": 1, "device": int(sys.argv[2]), "bad_link": 0}, w
PY
kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true
grep -q "skipped_symlinks=2 skipped_fifos=1 skipped_sockets=1 skipped_devices=$devs" "$T/dev2.out" ||
    { cat "$T/dev2.out"; fail "the daemon's stop line does not count them"; }
pass "the daemon shows them on /metrics, in ingestctl status (text and JSON) and in its stop line"
