#!/bin/sh
# ingestctl bench fleet: three devices with overlapping trees ship to one
# receiver; the JSON adds up, every tree lands byte for byte, staggered
# devices deduplicate the shared part, and a failing agent or a signal
# leaves no process and no work directory behind.
. "$(dirname "$0")/lib.sh"

# flatten FILE: parse the JSON object in FILE (failing when it is not valid
# JSON) and write FILE.flat, one "path value" line per scalar, paths like
# per_device.1.chunks; val FILE PATH then reads a value (strings unquoted).
if command -v python3 > /dev/null; then
    flatten() {
        python3 -c 'import json,sys
def walk(p, v):
    if isinstance(v, dict):
        for k, x in v.items(): walk(p + [k], x)
    elif isinstance(v, list):
        for i, x in enumerate(v): walk(p + [str(i)], x)
    else:
        print(".".join(p), json.dumps(v))
walk([], json.load(open(sys.argv[1])))' "$1" > "$1.flat"
    }
elif command -v jq > /dev/null; then
    flatten() {
        jq -r 'paths(scalars) as $p | "\($p | map(tostring) | join(".")) \(getpath($p) | tojson)"' "$1" > "$1.flat"
    }
else
    fail "needs python3 or jq to read the JSON"
fi
val() { awk -v k="$2" '$1 == k { v = $2; gsub(/"/, "", v); print v; f = 1 } END { exit !f }' "$1.flat"; }
# ge A B: A >= B for decimal numbers
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }
sum_files() { find "$@" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'; }

# 1. All three at once, work directory kept.
mkdir -p "$T/a"
"$CTL" bench fleet --devices 3 --size 4MiB --shared 50 --keep "$T/a" > "$T/a.json" 2> "$T/a.err" \
    || { cat "$T/a.err"; fail "bench fleet failed"; }
[ "$(wc -l < "$T/a.json")" -eq 1 ] || { cat "$T/a.json"; fail "expected one JSON line"; }
flatten "$T/a.json" || { cat "$T/a.json"; fail "not valid JSON"; }
W=$(ls -d "$T"/a/ingest-fleet.*)
[ -d "$W/dev-003/tree" ] || fail "--keep did not keep the work directory"
F="$T/a.json"
[ "$(val "$F" devices)" = 3 ] || fail "devices $(val "$F" devices)"
[ "$(grep -c '^per_device\.[0-9]*\.device ' "$F.flat")" = 3 ] || fail "per_device does not have 3 entries"
ge 0 "$(val "$F" stagger_s)" || fail "stagger_s $(val "$F" stagger_s)"
[ "$(val "$F" source_bytes)" = "$(sum_files "$W"/dev-*/tree)" ] \
    || fail "source_bytes $(val "$F" source_bytes) != $(sum_files "$W"/dev-*/tree) bytes of the trees"
[ "$(val "$F" source_files)" = "$(find "$W"/dev-*/tree -type f | wc -l)" ] || fail "source_files"
# The shared part is the same on every device; the own parts differ.
diff -r "$W/dev-001/tree/shared" "$W/dev-003/tree/shared" > /dev/null || fail "shared parts differ"
! cmp -s "$W/dev-001/tree/own/logs/gateway.log" "$W/dev-002/tree/own/logs/gateway.log" || fail "own parts are equal"
sc=0; sn=0; sd=0; sw=0
for i in 0 1 2; do
    id=$(val "$F" per_device.$i.device)
    [ "$id" = "dev-00$((i + 1))" ] || fail "per_device.$i is $id"
    [ "$(val "$F" per_device.$i.source_bytes)" = "$(sum_files "$W/$id/tree")" ] || fail "$id source_bytes"
    c=$(val "$F" per_device.$i.chunks); n=$(val "$F" per_device.$i.chunks_new); k=$(val "$F" per_device.$i.chunks_dedup)
    [ "$c" -gt 0 ] && [ $((n + k)) -eq "$c" ] || fail "$id: chunks $c != chunks_new $n + chunks_dedup $k"
    sc=$((sc + c)); sn=$((sn + n)); sd=$((sd + k)); sw=$((sw + $(val "$F" per_device.$i.wire_bytes)))
    p50=$(val "$F" per_device.$i.latency_p50_s); p99=$(val "$F" per_device.$i.latency_p99_s)
    ge "$p50" 0 && ge "$p99" "$p50" || fail "$id: latency p50 $p50 p99 $p99"
    ge "$(val "$F" per_device.$i.seconds)" 0.001 || fail "$id: seconds"
    ge "$(val "$F" per_device.$i.cpu_s)" 0 || fail "$id: cpu_s"
    [ "$(val "$F" per_device.$i.peak_rss_kib)" -gt 0 ] || fail "$id: peak_rss_kib"
    # Every file of the device's tree landed, byte for byte.
    same_tree "$W/$id/tree" "$W/bronze/$id/tree"
done
[ "$(val "$F" chunks)" -eq "$sc" ] || fail "chunks $(val "$F" chunks) != per-device sum $sc"
[ "$(val "$F" chunks_new)" -eq "$sn" ] || fail "chunks_new $(val "$F" chunks_new) != per-device sum $sn"
[ "$(val "$F" chunks_dedup)" -eq "$sd" ] || fail "chunks_dedup != per-device sum"
[ "$(val "$F" wire_bytes)" -eq "$sw" ] || fail "wire_bytes != per-device sum"
[ "$(val "$F" receiver_peak_rss_kib)" -gt 0 ] || fail "receiver_peak_rss_kib"
[ "$(val "$F" receiver_rss_anon_kib)" -gt 0 ] || fail "receiver_rss_anon_kib"
ge "$(val "$F" receiver_cpu_s)" 0 && ge "$(val "$F" seconds)" 0.001 && ge "$(val "$F" MBps)" 0.1 \
    || fail "receiver_cpu_s, seconds or MBps out of range"
pass "bench fleet: 3 devices at once, JSON totals match the trees and every tree landed"

# 2. One device a second: the later devices find the shared part at the core.
mkdir -p "$T/b"
"$CTL" bench fleet --devices 3 --size 4MiB --shared 50 --stagger 1s "$T/b" > "$T/b.json" 2> "$T/b.err" \
    || { cat "$T/b.err"; fail "bench fleet --stagger failed"; }
F="$T/b.json"
flatten "$F" || fail "staggered: not valid JSON"
ge "$(val "$F" cross_device_dedup)" 0.0001 || fail "cross_device_dedup $(val "$F" cross_device_dedup) is not > 0"
[ "$(val "$F" bytes_saved_by_dedup)" -gt 0 ] || fail "bytes_saved_by_dedup is 0"
[ "$(val "$F" chunks_new)" -lt "$(val "$F" chunks)" ] || fail "every chunk was sent"
ge "$(val "$F" seconds)" 2 || fail "three devices one second apart took $(val "$F" seconds) s"
[ -z "$(ls "$T/b")" ] || fail "the work directory was not removed: $(ls "$T/b")"
pass "bench fleet --stagger: cross_device_dedup $(val "$F" cross_device_dedup), work directory removed"

# 3. A failing agent: non-zero exit naming the device, its log, nothing left behind.
mkdir -p "$T/bin" "$T/c"
cp "$CTL" "$T/bin/ingestctl"
ln -s "$RECEIVER" "$T/bin/ingest-receiver"
printf '#!/bin/sh\necho "simulated agent failure" >&2\nexit 3\n' > "$T/bin/ingest-agent"
chmod +x "$T/bin/ingest-agent"
if "$T/bin/ingestctl" bench fleet --devices 2 --size 256KiB "$T/c" > "$T/c.json" 2> "$T/c.err"; then
    fail "bench fleet succeeded with failing agents"
fi
grep -q 'device dev-00[12] failed: ingest-agent exited with status 3' "$T/c.err" || { cat "$T/c.err"; fail "no clear message"; }
grep -q 'simulated agent failure' "$T/c.err" || { cat "$T/c.err"; fail "the agent's log was not shown"; }
[ ! -s "$T/c.json" ] || fail "printed JSON although an agent failed"
[ -z "$(ls "$T/c")" ] || fail "work directory left after a failure"
! pgrep -f "$T/c/ingest-fleet" > /dev/null || fail "processes left after a failure"
pass "bench fleet: a failing agent gives a non-zero exit and a clear message"

# 4. SIGTERM while it runs (the second agent 30 s away): every child stops, the work directory goes.
mkdir -p "$T/d"
"$CTL" bench fleet --devices 2 --size 256KiB --stagger 30s "$T/d" > "$T/d.json" 2> "$T/d.err" &
pid=$!
i=0
until [ -s "$(ls -d "$T"/d/ingest-fleet.*/dev-001 2>/dev/null | head -1)/agent.out" ]; do
    i=$((i + 1))
    [ $i -gt 400 ] && { kill "$pid"; cat "$T/d.err"; fail "the first agent did not finish"; }
    sleep 0.05
done
pgrep -f "$T/d/ingest-fleet" > /dev/null || fail "no receiver running while the fleet waits"
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -ne 0 ] || fail "exit status 0 after SIGTERM"
grep -q 'interrupted by signal 15' "$T/d.err" || { cat "$T/d.err"; fail "no message about the signal"; }
! pgrep -f "$T/d/ingest-fleet" > /dev/null || fail "processes left after SIGTERM"
[ -z "$(ls "$T/d")" ] || fail "work directory left after SIGTERM"
pass "bench fleet: SIGTERM stops the receiver and agents and removes the work directory"

"$CTL" bench fleet --devices 0 > /dev/null 2>&1 && fail "--devices 0 accepted"
rc=0; "$CTL" bench fleet --devices 2 --shared 101 > /dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "--shared 101: exit $rc, expected 2"
pass "bench fleet: bad arguments exit 2"
