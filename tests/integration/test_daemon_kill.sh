#!/bin/sh
# kill -9 of the daemon at random moments while it ships 2,000 small files
# (SOAK_KILLS kills, default 5; `make soak` runs 20+).  After the final
# restart every file has landed exactly once and byte-identical: each path
# has one FILE record across all manifests (a batch whose ack was lost is
# replayed under the same batch id, which the core acknowledges as a
# duplicate without writing a second manifest).
. "$(dirname "$0")/lib.sh"
KILLS=${SOAK_KILLS:-5}
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
# 2,000 files of about 200 bytes in 8 directories ("waves" of 250), made
# one wave per restart so kills hit discovery and shipping alike
wave() {
    mkdir -p "$T/stage/w$1"
    gen_log "$T/blob.$1" 50000 "$1"
    (cd "$T/stage/w$1" && split -a 3 -n 250 "$T/blob.$1" f.)
    rm "$T/blob.$1"
    mv "$T/stage/w$1" "$S/w$1"
}
W=0
next_wave() { [ $W -lt 8 ] && { wave $W; W=$((W + 1)); }; return 0; }
next_wave
write_agent_config dev1 "$S" 'batch:
  max_files: 20
  max_wait: 200ms'
sed -i 's|^  - path: .*|&\n    settle: 300ms|' "$T/dev1.yaml"
rnd_ms() { od -An -N2 -tu2 /dev/urandom | awk -v lo="$1" -v hi="$2" '{ print lo + $1 % (hi - lo) }'; }
start_agent() { "$AGENT" --config "$T/dev1.yaml" >> "$T/dev1.out" 2>> "$T/dev1.err" & AGENT_PID=$!; }
landed_count() { find "$(landed_root dev1)/data" -type f 2>/dev/null | wc -l; }

k=0
start_agent
while [ $k -lt "$KILLS" ]; do
    ms=$(rnd_ms 40 400)
    sleep "$(echo "$ms" | awk '{ printf "%.3f", $1 / 1000 }')"
    kill -9 $AGENT_PID 2>/dev/null || true
    wait $AGENT_PID 2>/dev/null || true
    k=$((k + 1))
    echo "kill $k after ${ms} ms: $(landed_count) files landed" >> "$T/kills.log"
    start_agent
    next_wave
done
while [ $W -lt 8 ]; do next_wave; done
nfiles=$(find "$S" -type f | wc -l)
[ "$nfiles" = 2000 ] || fail "made $nfiles files, not 2000"
i=0
while [ "$(landed_count)" -lt 2000 ]; do
    i=$((i + 1))
    [ $i -gt 600 ] && { cat "$T/kills.log"; tail -30 "$T/dev1.err"; fail "only $(landed_count) of 2000 files landed"; }
    sleep 0.05
done
sleep 0.5
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev1.err"; fail "agent exited $rc on SIGTERM"; }
cat "$T/kills.log"
same_tree "$S" "$(landed_root dev1)/data"
recs=$(manifest_paths dev1 | wc -l)
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
[ "$dups" = 0 ] || { manifest_paths dev1 | sort | uniq -d | head; fail "$dups paths recorded in more than one manifest"; }
[ "$recs" = 2000 ] || fail "$recs FILE records for 2000 files"
replays=$(grep -c "acknowledged again" "$T/receiver.log" || true)
pass "$KILLS kills: 2000 files landed exactly once, byte-identical ($replays batch replays acknowledged as duplicates)"
