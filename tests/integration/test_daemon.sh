#!/bin/sh
# The edge daemon (ingest-agent without --once):
#   - files present at start and files written while it runs land, byte-identical;
#   - a file written slowly (appended every 0.3 s for ~3 s) lands once, complete:
#     one FILE record for it across the manifests, with its full size;
#   - a file renamed into the tree lands without waiting for the settle time;
#   - SIGHUP with an invalid config is rejected and the old one stays; SIGTERM exits 0.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S/sub"
for i in 1 2 3 4 5; do gen_log "$S/sub/pre$i.log" $((i * 3000)) $i; done
write_agent_config dev1 "$S" 'batch:
  max_files: 50
  max_wait: 300ms'
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
agent_log() { i=0; while ! grep -q -- "$1" "$T/dev1.err"; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "no '$1' in the agent log"; }; sleep 0.05; done; }
wait_landed() { i=0; while [ ! -f "$(landed_root dev1)/data/$1" ] || ! cmp -s "$S/$1" "$(landed_root dev1)/data/$1"; do i=$((i + 1)); [ $i -gt "${2:-300}" ] && { cat "$T/dev1.err"; fail "$1 did not land"; }; sleep 0.05; done; }

wait_landed sub/pre5.log
pass "files present at start land"

# a slow writer: 10 appends 0.3 s apart
(for k in 1 2 3 4 5 6 7 8 9 10; do gen_log "$S/slow.log" 2000 $k; sleep 0.3; done) &
WPID=$!
# meanwhile a new directory with files
mkdir -p "$S/new/deep"
gen_log "$S/new/deep/a.log" 5000 42
wait_landed new/deep/a.log
pass "a file in a new directory lands"
wait $WPID
wait_landed slow.log 200
size=$(stat -c %s "$S/slow.log")
sleep 1.5
n=$(manifest_paths dev1 | grep -c '^data/slow.log$' || true)
[ "$n" = 1 ] || { manifest_paths dev1 | sort | uniq -c; fail "slow.log recorded $n times in the manifests"; }
grep -h '"path":"data/slow.log"' "$T/bronze/_manifests/dev1/"* | grep -q "\"size\":$size[,}]" ||
    fail "slow.log's record does not carry its full size $size"
pass "a slowly written file lands once, complete ($size bytes)"

# renamed into the tree: no settle wait needed (the settle time is 2 s by default)
gen_log "$T/src/staged.tmp" 7000 9
mv "$T/src/staged.tmp" "$S/moved.log"
wait_landed moved.log
pass "a renamed-in file lands"

# SIGHUP with a broken config: rejected, the old one stays
cp "$T/dev1.yaml" "$T/dev1.yaml.good"
echo 'bogus_key: 1' >> "$T/dev1.yaml"
kill -HUP $AGENT_PID
agent_log "config reload rejected"
cp "$T/dev1.yaml.good" "$T/dev1.yaml"
gen_log "$S/after-hup.log" 3000 77
wait_landed after-hup.log
kill -HUP $AGENT_PID
agent_log "configuration reloaded"
pass "SIGHUP: an invalid config is rejected and the agent goes on; a valid one is taken"

# compression.dictionary changed by a reload: logged to take effect at the next start, and it does not
# before (no sampling, training or auto.zdict from the small files that come meanwhile)
cp "$T/dev1.yaml.good" "$T/dev1.yaml"
printf 'compression:\n  dictionary: auto\n' >> "$T/dev1.yaml"
kill -HUP $AGENT_PID
agent_log "compression.dictionary changed: read only at the start, so the change takes effect at the next start"
mkdir -p "$S/ev"
for i in $(seq 1 100); do
    printf '{"sensor":"t%d","site":"north","value":%d.%d,"unit":"C","ok":true,"seq":%d}\n' $((i % 17)) \
        $((i * 7 % 100)) $((i % 10)) "$i" > "$S/ev/e$i.json"
done
wait_landed ev/e100.json
sleep 1
! grep -q "compression.dictionary auto" "$T/dev1.err" ||
    { cat "$T/dev1.err"; fail "compression.dictionary auto acted before the next start"; }
[ ! -e "$T/astate-dev1/auto.zdict" ] || fail "an auto.zdict was trained before the next start"
pass "a reload's compression.dictionary waits for the next start, as logged"

kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { cat "$T/dev1.err"; fail "agent exited $rc on SIGTERM"; }
grep -q "stopped: " "$T/dev1.err" || fail "no shutdown line"
same_tree "$S" "$(landed_root dev1)/data"
# each path recorded once
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
[ "$dups" = 0 ] || fail "$dups paths recorded more than once"
pass "SIGTERM: clean exit 0; every file landed once, byte-identical"
