#!/bin/sh
# The crash soak (issue 17): kill -9 of the agent daemon and of the receiver
# at random moments while a writer keeps adding files the whole time, so
# that kills find work in flight.  SOAK_AGENT_KILLS (default 12) and
# SOAK_RECEIVER_KILLS (default 3) kills; `make soak` runs 1,000 and 200.
#
# The writer puts each file (random bytes, 64 B..24 KiB) into a kept copy
# first, then into the source by rename from outside it, a few every 20-60 ms, in 16
# directories.  The daemon ships with after_ship: delete (so a file deleted
# before its ack was read would be lost), batches of 20 files at most.
# Every kill must find the killed program alive (exit status 137 or, for
# the receiver, death by SIGKILL): nothing else may have ended it.  A kill
# "found work in flight" when fewer files had landed than had been written.
#
# At the end, with the writer stopped and everything shipped: every file
# written landed exactly once (one FILE record across all manifests) and
# byte-identical, the source is empty (each file deleted after its ack),
# and no temporary file is left in bronze.  The last line reports the kills,
# how many found work in flight, and the files lost, duplicated and corrupt
# (each must be 0).
. "$(dirname "$0")/lib.sh"
AKILLS=${SOAK_AGENT_KILLS:-12}
RKILLS=${SOAK_RECEIVER_KILLS:-3}
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
ADDR=$(cat "$T/receiver.addr")
sed -i "s|^listen: .*|listen: $ADDR|" "$T/receiver.yaml" # restarts take the same port
S="$T/src/data"
K="$T/keep"
mkdir -p "$S" "$K"
write_agent_config dev1 "$S" 'batch:
  max_files: 20
  max_wait: 100ms
rescan_interval: 2s'
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    after_ship: delete|' "$T/dev1.yaml"

# the writer: until $T/stop exists; the count of files written in $T/written
(
    n=0
    while [ ! -e "$T/stop" ]; do
        for j in 1 2 3; do
            n=$((n + 1))
            d=d$((n % 16))
            mkdir -p "$K/$d" "$S/$d" "$T/stage"
            size=$(od -An -N2 -tu2 /dev/urandom | awk '{ print 64 + $1 % 24512 }')
            head -c "$size" /dev/urandom > "$K/$d/f$n"
            # written outside the source, then renamed in (same filesystem): a temporary name
            # inside the source would be shipped, and deleted, when the writer is slow to rename
            cp "$K/$d/f$n" "$T/stage/f$n"
            mv "$T/stage/f$n" "$S/$d/f$n"
        done
        echo "$n" > "$T/written.tmp" && mv "$T/written.tmp" "$T/written"
        sleep "$(od -An -N1 -tu1 /dev/urandom | awk '{ printf "0.0%02d", 20 + $1 % 40 }')"
    done
) &
WRITER=$!
trap 'touch "$T/stop"; kill "$WRITER" 2>/dev/null || true; cleanup' EXIT

rnd_ms() { od -An -N2 -tu2 /dev/urandom | awk -v lo="$1" -v hi="$2" '{ print lo + $1 % (hi - lo) }'; }
start_agent() { "$AGENT" --config "$T/dev1.yaml" >> "$T/dev1.out" 2>> "$T/dev1.err" & AGENT_PID=$!; }
landed_count() { find "$(landed_root dev1)/data" -type f ! -name '*.ingest-tmp-*' 2>/dev/null | wc -l; }
written() { cat "$T/written" 2>/dev/null || echo 0; }

start_agent
ak=0
rk=0
inflight=0
total=$((AKILLS + RKILLS))
k=0
while [ $k -lt $total ]; do
    ms=$(rnd_ms 30 350)
    sleep "$(echo "$ms" | awk '{ printf "%.3f", $1 / 1000 }')"
    [ "$(landed_count)" -lt "$(written)" ] && inflight=$((inflight + 1))
    # the receiver's kills spread evenly among the agent's
    if [ $rk -lt "$RKILLS" ] && [ $((k * RKILLS / total)) -ne $(((k + 1) * RKILLS / total)) ]; then
        kill -9 "$RECV_PID" 2>/dev/null || true
        rc=0
        wait "$RECV_PID" 2>/dev/null || rc=$?
        [ "$rc" = 137 ] || { tail -20 "$T/receiver.log"; fail "receiver kill $((rk + 1)): it had already exited with status $rc"; }
        RECV_PID=""
        rk=$((rk + 1))
        start_receiver
    else
        kill -9 "$AGENT_PID" 2>/dev/null || true
        rc=0
        wait "$AGENT_PID" 2>/dev/null || rc=$?
        [ "$rc" = 137 ] || { tail -20 "$T/dev1.err"; fail "agent kill $((ak + 1)): it had already exited with status $rc"; }
        ak=$((ak + 1))
        start_agent
    fi
    k=$((k + 1))
done
touch "$T/stop"
wait "$WRITER" || true
n=$(written)
[ "$n" -gt 0 ] || fail "the writer wrote nothing"
i=0
while [ "$(landed_count)" -lt "$n" ] || [ -n "$(find "$S" -type f)" ]; do
    i=$((i + 1))
    [ $i -gt 2400 ] && { tail -30 "$T/dev1.err"; fail "only $(landed_count) of $n files landed; $(find "$S" -type f | wc -l) still in the source"; }
    sleep 0.05
done
kill -TERM "$AGENT_PID"
rc=0; wait "$AGENT_PID" || rc=$?
[ "$rc" = 0 ] || { tail -20 "$T/dev1.err"; fail "the agent exited $rc on SIGTERM"; }
landed=$(landed_count)
lost=$((n - landed))
[ "$lost" -ge 0 ] || lost=0
(cd "$K" && find . -type f | sort | xargs -r sha256sum) > "$T/keep.sums"
corrupt=$(cd "$(landed_root dev1)/data" && sha256sum -c --quiet "$T/keep.sums" 2>/dev/null | wc -l)
dups=$(manifest_paths dev1 | sort | uniq -d | wc -l)
recs=$(manifest_paths dev1 | wc -l)
tmp=$(count_tmp "$T/bronze")
echo "soak: $ak agent kills and $rk receiver kills, $inflight of them with work in flight; $n files written, $landed landed: lost=$lost duplicated=$dups corrupt=$corrupt (FILE records: $recs; temporary files left: $tmp)"
[ "$lost" = 0 ] && [ "$dups" = 0 ] && [ "$corrupt" = 0 ] && [ "$recs" = "$n" ] && [ "$tmp" = 0 ] ||
    fail "files lost, duplicated or corrupt"
[ "$inflight" -gt 0 ] || fail "no kill found work in flight"
pass "$ak agent kills and $rk receiver kills ($inflight with work in flight): $n files landed exactly once, byte-identical, none lost"
