#!/bin/sh
# A device whose state_dir is restored from an older copy (a backup, an
# image flashed again): its batch numbers go back, and its next batches
# reuse ids the core landed with other files.  The core answers such a
# batch "batch id used before for other data" (INGEST_EBATCHID); the agent
# takes a new instance (state_dir/instance) and ships the files again
# under new ids at once.  Before, each reused id was refused as a batch the
# core failed: --once exited non-zero with every colliding batch refused,
# and the daemon waited a growing back-off before each of them (minutes to
# days for a copy some hundreds of batches old).
. "$(dirname "$0")/lib.sh"
trap 'if [ -n "${APID:-}" ]; then kill "$APID" 2>/dev/null || true; wait "$APID" 2>/dev/null || true; fi; stop_receiver; cleanup' EXIT
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
pin_receiver_port
S="$T/src/data"
mkdir -p "$S"
head -c 20000 /dev/urandom > "$S/m0.bin"
write_agent_config dev1 "$S" 'batch:
  max_files: 1'
ship dev1
cp -a "$T/astate-dev1" "$T/astate-old"
# twelve batches after the copy: ids 2..13 of this instance are at the core
for i in $(seq 10 21); do head -c 20000 /dev/urandom > "$S/m$i.bin"; done
ship dev1
inst=$(cat "$T/astate-dev1/instance")

restore() {
    rm -rf "$T/astate-dev1"
    cp -a "$T/astate-old" "$T/astate-dev1"
}
collisions() { grep -c 'already used for other data' "$T/receiver.log" || true; }

# ---- --once ------------------------------------------------------------
restore
# new files that sort first: the batches numbered 2.. now hold other files
for i in 1 2 3; do head -c 20000 /dev/urandom > "$S/a$i.bin"; done
before=$(collisions)
rc=0
"$AGENT" --once --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" = 0 ] || { tail -5 "$T/dev1.err"; fail "--once after the restore exited $rc"; }
same_tree "$S" "$(landed_root dev1)/data"
n=$(( $(collisions) - before ))
[ "$n" = 1 ] || { tail -5 "$T/dev1.err"; fail "$n batches answered as reused ids (one, then a new instance, expected)"; }
new=$(cat "$T/astate-dev1/instance")
[ "$new" != "$inst" ] || fail "state_dir/instance was not renewed"
grep -q "batch ids are made with a new instance, $new (was $inst)" "$T/dev1.err" ||
    { tail -5 "$T/dev1.err"; fail "the agent did not say it took a new instance"; }
grep -q "refused by the receiver" "$T/dev1.err" && { tail -5 "$T/dev1.err"; fail "a batch was reported refused"; }
for i in 1 2 3; do
    grep -lq "\"a$i.bin\"" "$T/bronze/_manifests/dev1/$new-"*.jsonl 2>/dev/null ||
        grep -lq "a$i.bin" "$T/bronze/_manifests/dev1/$new-"*.jsonl ||
        fail "a$i.bin is not in a manifest of the new instance"
done
pass "--once after a restore: one batch answered as a reused id, a new instance, every file landed"

# ---- the daemon ---------------------------------------------------------
restore
for i in 1 2 3 4 5 6; do head -c 20000 /dev/urandom > "$S/b$i.bin"; done
sed -i 's|^  max_files: 1$|&\n  max_wait: 100ms|' "$T/dev1.yaml"
printf 'metrics:\n  listen: 127.0.0.1:0\n' >> "$T/dev1.yaml"
sed -i 's|^  - path: .*|&\n    settle: 100ms|' "$T/dev1.yaml"
before=$(collisions)
"$AGENT" --config "$T/dev1.yaml" > "$T/d.out" 2> "$T/d.err" &
APID=$!
i=0
until [ -f "$(landed_root dev1)/data/b6.bin" ] && same_tree "$S" "$(landed_root dev1)/data" 2>/dev/null; do
    # reused ids refused one by one behind a growing back-off would take about a minute here
    i=$((i + 1)); [ $i -gt 300 ] && { tail -5 "$T/d.err"; fail "the daemon did not land the new files within 15 s of a restore"; }
    sleep 0.05
done
n=$(( $(collisions) - before ))
[ "$n" -le 2 ] || { tail -5 "$T/d.err"; fail "$n batches answered as reused ids"; }
[ "$n" -ge 1 ] || fail "no batch collided: the test does not test the restore"
grep -q "batch ids are made with a new instance" "$T/d.err" || { tail -5 "$T/d.err"; fail "the daemon did not take a new instance"; }
grep -q "batch refused by the core" "$T/d.err" && { tail -5 "$T/d.err"; fail "the daemon backed off as for a refused batch"; }
maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/d.err" | tail -1)
[ -n "$maddr" ] || fail "the daemon did not report its metrics address"
bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n" >&3; cat <&3' "$maddr" |
    tr -d '\r' > "$T/metrics"
grep -q "^ingest_agent_batches_total{outcome=\"id_taken\"} $n\$" "$T/metrics" ||
    { grep batches_total "$T/metrics"; fail "the metrics do not count the $n batch(es) answered as reused ids"; }
kill "$APID"
wait "$APID" || fail "the daemon exited non-zero on SIGTERM"
APID=
pass "the daemon after a restore: $n batch(es) answered as reused ids, a new instance, every file landed at once"

# ---- the daemon, a spooled source: the spool copy is the only one left ---------------
# The batch answered as a reused id goes again as it is, under a new id: its spool copy kept (it was
# forgotten with its copy, and a file whose original was rotated away never landed).
kill "$APID" 2>/dev/null || true
wait "$APID" 2>/dev/null || true
APID=
restore
sed -i 's|^    settle: 100ms$|&\n    spool: copy|' "$T/dev1.yaml"
stop_receiver
head -c 20000 /dev/urandom > "$S/0c1.bin"
cp "$S/0c1.bin" "$T/0c1.orig"
"$AGENT" --config "$T/dev1.yaml" > "$T/d3.out" 2> "$T/d3.err" &
APID=$!
i=0
until ls "$T"/astate-dev1/spool/*/*/0c1.bin > /dev/null 2>&1 && grep -q "core unreachable" "$T/d3.err"; do
    i=$((i + 1)); [ $i -gt 300 ] && { tail -5 "$T/d3.err"; fail "0c1.bin was not spooled"; }
    sleep 0.05
done
rm "$S/0c1.bin" # rotated away: the spool copy is the data now
start_receiver
wait_same "$T/0c1.orig" "$(landed_root dev1)/data/0c1.bin" 300 "$T/d3.err" "the spooled 0c1.bin did not land after the reused-id answer"
grep -q "landed this batch id before" "$T/d3.err" || fail "no batch was answered as a reused id: the test did not test it"
grep -q "goes again as" "$T/d3.err" || { tail -5 "$T/d3.err"; fail "the batch was not journaled again under a new id"; }
kill "$APID"
wait "$APID" || fail "the daemon exited non-zero on SIGTERM"
APID=
pass "a spooled file whose original is gone lands from its spool copy after a reused-id answer"
