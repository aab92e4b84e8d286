#!/bin/sh
# Trained dictionaries end to end (docs/compression.md, "Dictionaries").
# 1. A dictionary trained with `ingestctl dict train` on small CSV/JSON
#    files: dev1 ships new files of the kind with it; the receiver asks for
#    it once, stores it under state_dir/dicts/{BLAKE2b-256}.zdict, and the
#    files land byte-identical.
# 2. After a restart the receiver loads it again (a damaged file beside it
#    is reported by name and skipped) and does not ask for it: new files land.
# 3. dev2 with the same dictionary: held already, its files land.
# 4. dev2 with another dictionary carrying the same id (ids are 31 bits):
#    the receiver asks for it, both are stored, and both devices' files
#    land right: no device decodes with the other's dictionary.
# 5. The same kind of files, one per batch, without a dictionary: at least
#    10% more bytes than with it (so the device compresses with it).
# 6. A device whose DICT_DATA does not match its offer (id or hash) gets an
#    ERROR, nothing is stored, and the receiver serves on.
# 7. A chunk naming a dictionary the receiver stores, but that its session
#    did not offer, is refused; offered, it lands.
# 8. compression.dictionary: auto: the agent trains one from its sources'
#    small files, keeps it in state_dir and ships with it (10% smaller one
#    file per batch); the next run reuses it; a damaged one is trained
#    again; one a day old is tried against a new one (replaced when files
#    of another kind came, else kept); too few files: none.
# 9. The same in a daemon started on an empty source whose files are
#    deleted after shipping: trained from the small files it took, offered
#    on its next connection, stored.
# 10. That daemon again, its dictionary kept in state_dir: files of its kind
#    keep it; when small files of another kind come (log lines) and it stops
#    saving, the daemon trains a new one from them, offers it on its next
#    connection (stored), and the new one saves more on them than the old;
#    random bytes make it try again, and what it trains from them is refused.
# 11. Two kinds of small files in one source (JSON events and log files, from
#    `ingestctl bench gen --profile gateway`): auto takes samples of both
#    from all over the tree, trains a part of its dictionary per kind, and
#    it saves on new files of both kinds about what one trained per kind
#    does (`ingestctl dict test` measures; one trained from all the files
#    at once is shown beside them).
. "$(dirname "$0")/lib.sh"
EVIL="$BUILD/tools/evil-agent"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver

# gen_small DIR COUNT SEED: COUNT small telemetry files (CSV and JSON lines, 10-40 records each)
gen_small() {
    mkdir -p "$1"
    awk -v dir="$1" -v n="$2" -v seed="$3" 'BEGIN {
        s = seed
        split("north south east west", site, " "); split("temp humidity pressure flow vibration", met, " ")
        for (f = 0; f < n; f++) {
            s = (s * 1103515245 + 12345) % 2147483648
            lines = 10 + s % 31
            csv = (f % 2 == 0)
            out = sprintf("%s/t%05d.%s", dir, f, csv ? "csv" : "json")
            if (csv) print "ts,site,sensor,metric,value,state" > out
            for (i = 0; i < lines; i++) {
                s = (s * 1103515245 + 12345) % 2147483648
                ts = sprintf("2024-05-%02dT%02d:%02d:%02dZ", 1 + s % 28, s % 24, (s / 24) % 60, (s / 1440) % 60)
                if (csv)
                    printf "%s,%s,pump-%d,%s,%.3f,%s\n", ts, site[1 + s % 4], s % 17, met[1 + s % 5], (s % 100000) / 997.0, (s % 9 ? "ok" : "alarm") > out
                else
                    printf "{\"ts\":\"%s\",\"site\":\"%s\",\"sensor\":\"pump-%d\",\"metric\":\"%s\",\"value\":%.3f,\"state\":\"%s\"}\n", ts, site[1 + s % 4], s % 17, met[1 + s % 5], (s % 100000) / 997.0, (s % 9 ? "ok" : "alarm") > out
            }
            close(out)
        }
    }'
}
# gen_logs DIR COUNT SEED: COUNT small files of log lines, nothing like gen_small's telemetry
gen_logs() {
    mkdir -p "$1"
    awk -v dir="$1" -v n="$2" -v seed="$3" 'BEGIN {
        s = seed
        split("modbusd canbridge ntpsync watchdog uplink", prog, " ")
        split("retry scheduled after timeout|register block read complete|link quality degraded on channel|"\
              "clock offset corrected by|buffer high water mark reached|session renegotiated with peer", msg, "|")
        for (f = 0; f < n; f++) {
            s = (s * 1103515245 + 12345) % 2147483648
            lines = 12 + s % 25
            out = sprintf("%s/l%05d.log", dir, f)
            for (i = 0; i < lines; i++) {
                s = (s * 1103515245 + 12345) % 2147483648
                printf "<%d>Nov %2d %02d:%02d:%02d gw%03d %s[%d]: %s %d (seq 0x%08x)\n", 8 + s % 16, 1 + s % 30, s % 24,
                    (s / 24) % 60, (s / 1440) % 60, s % 200, prog[1 + s % 5], 100 + s % 9000, msg[1 + (s / 7) % 6],
                    s % 977, s > out
            }
            close(out)
        }
    }'
}
# dict_id FILE: the id `ingestctl dict info` reports
dict_id() { "$CTL" dict info "$1" | sed -n 's/.*dict id \([0-9]*\).*/\1/p'; }
# stored: number of dictionaries the receiver stored
stored() { find "$T/rstate/dicts" -name '*.zdict' | wc -l; }
logcount() { grep -c -- "$1" "$T/receiver.log" || true; }

gen_small "$T/samples" 600 1
"$CTL" dict train --out "$T/fleet.dict" "$T/samples"/* > "$T/train.out" 2> /dev/null || fail "dict train failed"
id1=$(dict_id "$T/fleet.dict")
[ -n "$id1" ] || fail "no dictionary id"
hash1=$(b2sum -l 256 "$T/fleet.dict" | cut -d' ' -f1)

# ---- 1. first ship: the receiver asks for the dictionary and stores it ----
gen_small "$T/src1/data" 150 101
write_agent_config dev1 "$T/src1/data" "compression:
  dictionary: $T/fleet.dict"
ship dev1
same_tree "$T/src1/data" "$(landed_root dev1)/data"
dict_bytes=$(field dev1 chunk_bytes); dict_raw=$(field dev1 chunk_raw_bytes)
[ "$(logcount "dictionary $id1 .* received and stored")" -eq 1 ] || { cat "$T/receiver.log"; fail "dictionary not received once"; }
[ -f "$T/rstate/dicts/$hash1.zdict" ] || fail "no $hash1.zdict in state_dir/dicts"
cmp -s "$T/fleet.dict" "$T/rstate/dicts/$hash1.zdict" || fail "stored dictionary differs from the trained one"
! grep -q "is not used" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the agent did not use its dictionary"; }
[ -z "$(find "$T/bronze" -name '*.zdict')" ] || fail "a dictionary landed in the bronze tree"
pass "dictionary sent once, stored by hash, files land byte-identical"

# ---- 2. restart: loaded from the store, not asked for again ----
stop_receiver
# A damaged file (bytes not matching its name) and a crash's temporary file beside it.
bad=0000000000000000000000000000000000000000000000000000000000000000
head -c 3000 "$T/fleet.dict" > "$T/rstate/dicts/$bad.zdict"
echo partial > "$T/rstate/dicts/.$hash1.zdict.tmp"
start_receiver
grep -q "dictionaries: 1 loaded" "$T/receiver.log" || { tail "$T/receiver.log"; fail "store not loaded at start"; }
grep -q "dictionary .*/$bad.zdict skipped: its bytes do not have the hash its name says" "$T/receiver.log" ||
    { tail "$T/receiver.log"; fail "the damaged dictionary file was not reported by name"; }
[ ! -e "$T/rstate/dicts/.$hash1.zdict.tmp" ] || fail "temporary dictionary file not removed at start"
rm "$T/rstate/dicts/$bad.zdict"
sed -i "s|address: .*|address: $(cat "$T/receiver.addr")|" "$T/dev1.yaml"
gen_small "$T/src1/data/more" 80 202
ship dev1
same_tree "$T/src1/data" "$(landed_root dev1)/data"
[ "$(logcount "received and stored")" -eq 1 ] || fail "the receiver asked for the dictionary again after a restart"
[ "$(logcount "device dev1: dictionary $id1 .* held already")" -eq 1 ] || fail "no 'held already' for dev1"
[ "$(field dev1 chunks_new)" -gt 0 ] || fail "second ship sent no chunk"
pass "after a restart the stored dictionary decodes new files without being sent again"

# ---- 3. a second device with the same dictionary ----
gen_small "$T/src2/data" 120 303
write_agent_config dev2 "$T/src2/data" "compression:
  dictionary: $T/fleet.dict"
ship dev2
same_tree "$T/src2/data" "$(landed_root dev2)/data"
[ "$(logcount "device dev2: dictionary $id1 .* held already")" -eq 1 ] || fail "no 'held already' for dev2"
[ "$(logcount "received and stored")" -eq 1 ] && [ "$(stored)" -eq 1 ] || fail "dev2's dictionary was sent again"
pass "a second device with the same dictionary does not send it"

# ---- 4. another dictionary under the same id, from dev2 ----
gen_small "$T/samples2" 600 7
"$CTL" dict train --out "$T/other.dict" "$T/samples2"/* > /dev/null 2>&1 || fail "second dict train failed"
# Give it dev1's id (the id is bytes 4..7 of the header; the tables stay valid).
b() { printf '\\%03o' $(( ($1 >> $2) & 255 )); }
printf "$(b "$id1" 0)$(b "$id1" 8)$(b "$id1" 16)$(b "$id1" 24)" | dd of="$T/other.dict" bs=1 seek=4 conv=notrunc 2> /dev/null
[ "$(dict_id "$T/other.dict")" = "$id1" ] || fail "could not give the second dictionary id $id1"
cmp -s "$T/fleet.dict" "$T/other.dict" && fail "the two dictionaries are the same"
sed -i "s|dictionary: .*|dictionary: $T/other.dict|" "$T/dev2.yaml"
gen_small "$T/src2/data/more" 100 404
ship dev2
same_tree "$T/src2/data" "$(landed_root dev2)/data"
[ "$(logcount "device dev2: dictionary $id1 .* received and stored")" -eq 1 ] || fail "dev2's other dictionary not received"
[ "$(stored)" -eq 2 ] || fail "expected 2 stored dictionaries, found $(stored)"
gen_small "$T/src1/data/third" 60 505
ship dev1
same_tree "$T/src1/data" "$(landed_root dev1)/data"
pass "two dictionaries with one id: each device decodes with its own"

# ---- 5. without a dictionary the same kind of files takes more bytes ----
# One file per batch, so each travels alone (small chunks of one batch are
# compressed together: docs/compression.md, "Chunk groups", where a
# dictionary gains less): with dev1's dictionary, then without one.
gen_small "$T/src4/data/base" 150 708
write_agent_config dev1 "$T/src4/data" "compression:
  dictionary: $T/fleet.dict
batch:
  max_files: 1"
ship dev1
same_tree "$T/src4/data" "$(landed_root dev1)/data"
dict_bytes=$(field dev1 chunk_bytes); dict_raw=$(field dev1 chunk_raw_bytes)
write_agent_config dev1 "$T/src1/data" "compression:
  dictionary: $T/fleet.dict"
gen_small "$T/src3/data/base" 150 707
write_agent_config dev2 "$T/src3/data" "batch:
  max_files: 1"
ship dev2
same_tree "$T/src3/data" "$(landed_root dev2)/data"
plain_bytes=$(field dev2 chunk_bytes); plain_raw=$(field dev2 chunk_raw_bytes)
[ $((dict_bytes * plain_raw * 10)) -lt $((plain_bytes * dict_raw * 9)) ] ||
    fail "with the dictionary $dict_bytes of $dict_raw bytes, without $plain_bytes of $plain_raw: not 10% smaller"
pass "the dictionary was used: $dict_bytes of $dict_raw bytes with it, $plain_bytes of $plain_raw without"

# ---- 6. DICT_DATA that does not match the offer ----
"$CTL" dict train --size 8KiB --out "$T/evil.dict" "$T/samples"/t000* > /dev/null 2>&1 || fail "evil dict train failed (--size 8KiB)"
for off in 4 -1; do
    rc=0
    "$EVIL" --address "$(cat "$T/receiver.addr")" --device dev1 --key "$T/keys/dev1.key" \
        --receiver-pub "$T/keys/receiver.pub" --dedup-key "$T/keys/fleet.dedup" \
        --dict "$T/evil.dict" --dict-tamper "$off" > "$T/evil.out" 2> "$T/evil.err" || rc=$?
    [ "$rc" -eq 3 ] || { cat "$T/evil.out" "$T/evil.err"; fail "tampered dictionary (byte $off): evil-agent exit $rc, expected 3 (ERROR)"; }
    case $off in
    4) grep -q "has id .* offered as" "$T/evil.out" || { cat "$T/evil.out"; fail "no id mismatch named"; } ;;
    *) grep -q "do not have the offered hash" "$T/evil.out" || { cat "$T/evil.out"; fail "no hash mismatch named"; } ;;
    esac
    [ "$(stored)" -eq 2 ] || fail "a tampered dictionary was stored"
done
[ -z "$(find "$T/rstate/dicts" -name '.*')" ] || fail "temporary files left in state_dir/dicts"
gen_small "$T/src1/data/fourth" 30 606
ship dev1
same_tree "$T/src1/data" "$(landed_root dev1)/data"
pass "DICT_DATA not matching its offer: ERROR, nothing stored, the receiver serves on"

# ---- 7. a chunk may only use a dictionary accepted on its own session ----
# fleet.dict is in the receiver's store (dev1 sent it), but this session did not offer it.
line=$(sed -n 2p "$T/samples/t00000.csv")
content="$line
$(sed -n 3p "$T/samples/t00000.csv")
$(sed -n 4p "$T/samples/t00000.csv")"
evil_run() {
    rc=0
    "$EVIL" --address "$(cat "$T/receiver.addr")" --device dev2 --key "$T/keys/dev2.key" \
        --receiver-pub "$T/keys/receiver.pub" --dedup-key "$T/keys/fleet.dedup" --content "$content" "$@" \
        > "$T/evil.out" 2> "$T/evil.err" || rc=$?
}
evil_run --batch nooffer1 --path data/nooffer.csv --dict-chunk "$T/fleet.dict"
[ "$rc" -eq 3 ] || { cat "$T/evil.out" "$T/evil.err"; fail "chunk with a dictionary not offered: evil-agent exit $rc, expected 3 (ERROR)"; }
grep -q "dictionary $id1 is not loaded" "$T/evil.out" || { cat "$T/evil.out"; fail "the refusal does not name the dictionary"; }
[ ! -e "$(landed_root dev2)/data/nooffer.csv" ] || fail "a chunk with a dictionary not offered landed"
# Offered (held already) on the session, the same chunk lands.
evil_run --batch offer1 --path data/offer.csv --dict "$T/fleet.dict" --dict-chunk "$T/fleet.dict"
[ "$rc" -eq 2 ] || { cat "$T/evil.out" "$T/evil.err"; fail "chunk with an offered dictionary: evil-agent exit $rc, expected 2 (landed)"; }
[ "$(cat "$(landed_root dev2)/data/offer.csv")" = "$content" ] || fail "landed content differs"
pass "a chunk naming a dictionary not offered on its session is refused; offered, it lands"

# ---- 8. compression.dictionary: auto ----
# The agent trains one from its sources' small files at its first start, keeps it in state_dir, and
# offers it like a configured one; one file per batch, so the gain is the dictionary's (as in 5.).
gen_small "$T/src5/data" 120 909
write_agent_config dev2 "$T/src5/data" "compression:
  dictionary: auto
batch:
  max_files: 1"
sed -i 's|^state_dir: astate-dev2$|state_dir: astate-auto|' "$T/dev2.yaml"
mkdir -p "$T/astate-auto"
n0=$(stored)
ship dev2
same_tree "$T/src5/data" "$(landed_root dev2)/data"
grep -q "compression.dictionary auto: trained .* from 120 small files" "$T/dev2.err" ||
    { cat "$T/dev2.err"; fail "no dictionary trained from the 120 files"; }
auto="$T/astate-auto/auto.zdict"
[ -s "$auto" ] || fail "no auto.zdict in state_dir"
hauto=$(b2sum -l 256 "$auto" | cut -d' ' -f1)
cmp -s "$auto" "$T/rstate/dicts/$hauto.zdict" || fail "the receiver did not store the trained dictionary"
[ "$(stored)" -eq $((n0 + 1)) ] || fail "expected one more stored dictionary"
! grep -q "is not used" "$T/dev2.err" || { cat "$T/dev2.err"; fail "the agent did not use the trained dictionary"; }
auto_bytes=$(field dev2 chunk_bytes); auto_raw=$(field dev2 chunk_raw_bytes)
[ $((auto_bytes * plain_raw * 10)) -lt $((plain_bytes * auto_raw * 9)) ] ||
    fail "trained: $auto_bytes of $auto_raw bytes, without a dictionary $plain_bytes of $plain_raw: not 10% smaller"
pass "dictionary auto: trained from the sources, stored by the receiver, $auto_bytes of $auto_raw bytes ($plain_bytes of $plain_raw without)"
# The next run takes it from state_dir (trains nothing); the receiver holds it already.
gen_small "$T/src5/data/more" 30 910
ship dev2
same_tree "$T/src5/data" "$(landed_root dev2)/data"
grep -q "compression.dictionary auto: .*/auto.zdict (" "$T/dev2.err" || { cat "$T/dev2.err"; fail "auto.zdict not loaded"; }
! grep -q "auto: trained" "$T/dev2.err" || fail "trained again though state_dir holds one"
[ "$(logcount "device dev2: dictionary $(dict_id "$auto") .* held already")" -ge 1 ] || fail "the trained dictionary sent again"
pass "dictionary auto: a later run uses the one kept in state_dir"
# A damaged auto.zdict (cut inside its tables) is said and replaced by a new one.
head -c 100 "$auto" > "$T/cut.zdict" && mv "$T/cut.zdict" "$auto"
gen_small "$T/src5/data/third" 10 912
ship dev2
same_tree "$T/src5/data" "$(landed_root dev2)/data"
grep -q "compression.dictionary auto: .*auto.zdict .*: training a new one" "$T/dev2.err" ||
    { cat "$T/dev2.err"; fail "the damaged auto.zdict was not reported"; }
grep -q "auto: trained .* from 160 small files" "$T/dev2.err" || { cat "$T/dev2.err"; fail "not trained again"; }
"$CTL" dict info "$auto" > /dev/null || fail "auto.zdict not a dictionary after training again"
pass "dictionary auto: a damaged auto.zdict is reported and trained again"
# --once with an auto.zdict a day old: small files of another kind under the source now (log lines); a
# dictionary trained from half of the small files sampled beats it on the other half, so a new one replaces
# it, and the receiver stores it
gen_logs "$T/src5/data/zlogs" 300 920
touch -d '2 days ago' "$auto"
hold=$(b2sum -l 256 "$auto" | cut -d' ' -f1)
ship dev2
same_tree "$T/src5/data" "$(landed_root dev2)/data"
grep -q "auto: one trained from .* of the small files sampled saves .*: training a new one from all of them" \
    "$T/dev2.err" || { cat "$T/dev2.err"; fail "a day-old auto.zdict was not tried against a new one"; }
trial1=$(sed -n 's/.*auto: one trained from \(.*\): training a new one.*/\1/p' "$T/dev2.err")
hnew=$(b2sum -l 256 "$auto" | cut -d' ' -f1)
[ "$hnew" != "$hold" ] || fail "auto.zdict not replaced"
cmp -s "$auto" "$T/rstate/dicts/$hnew.zdict" || fail "the receiver did not store the new dictionary"
# a fresh one is not tried again; a day later, against the same files, the trial does not win: kept, its
# time set to now
ship dev2
! grep -q "auto: one trained from" "$T/dev2.err" || fail "a fresh auto.zdict was tried again"
touch -d '2 days ago' "$auto"
ship dev2
grep -q "auto: one trained from .*: keeping the one in use" "$T/dev2.err" || { cat "$T/dev2.err"; fail "not kept"; }
trial2=$(sed -n 's/.*auto: one trained from \(.*\): keeping.*/\1/p' "$T/dev2.err")
[ "$(b2sum -l 256 "$auto" | cut -d' ' -f1)" = "$hnew" ] || fail "replaced though the trial did not win"
[ -n "$(find "$auto" -mmin -10)" ] || fail "the time of the kept auto.zdict was not set to now"
pass "dictionary auto: --once tries a day-old auto.zdict against a new one: replaced for files of another kind (one trained from $trial1), else kept ($trial2)"
# Too few small files: no dictionary (said), the files land all the same.
gen_small "$T/src6/data" 10 911
write_agent_config dev1 "$T/src6/data" "compression:
  dictionary: auto"
sed -i 's|^state_dir: astate-dev1$|state_dir: astate-few|' "$T/dev1.yaml"
mkdir -p "$T/astate-few"
ship dev1
same_tree "$T/src6/data" "$(landed_root dev1)/data"
grep -q "auto: 10 small files .* fewer than the 64" "$T/dev1.err" || { cat "$T/dev1.err"; fail "too few files not said"; }
[ ! -e "$T/astate-few/auto.zdict" ] || fail "a dictionary was kept from 10 files"
pass "dictionary auto: with too few small files, none, and the files land"

# ---- 9. compression.dictionary: auto in a daemon started on an empty source ----
# None at the start (too few files); it samples the small files it takes, and once enough shipped it trains
# one, ends its connection, and the next connection offers it: the receiver stores it. The source deletes
# its files after shipping (after_ship: delete), so the dictionary can only come from the files it took.
mkdir -p "$T/src7/data" "$T/gen7"
write_agent_config dev1 "$T/src7/data" "compression:
  dictionary: auto
batch:
  max_wait: 200ms"
sed -i -e 's|^state_dir: astate-dev1$|state_dir: astate-d9|' \
    -e "s|^  - path: $T/src7/data\$|&\n    settle: 100ms\n    after_ship: delete|" "$T/dev1.yaml"
mkdir -p "$T/astate-d9"
# The daemon's log is $DLOG.
# wait_landed N: until N files landed under dev1/data (at most 30 s)
wait_landed() {
    i=0
    while [ "$(find "$(landed_root dev1)/data" -type f 2>/dev/null | wc -l)" -lt "$1" ]; do
        i=$((i + 1)); [ $i -gt 600 ] && { cat "$DLOG"; fail "$1 files did not land"; }; sleep 0.05
    done
}
# wait_said PATTERN WHY: until the daemon's log has PATTERN (at most 10 s), else fail with WHY
wait_said() {
    i=0
    while ! grep -q -- "$1" "$DLOG"; do
        i=$((i + 1)); [ $i -gt 200 ] && { cat "$DLOG"; fail "$2"; }; sleep 0.05
    done
}
# stop_daemon: once after_ship emptied the source, stop the daemon (exit 0) and check what landed
stop_daemon() {
    i=0
    while [ -n "$(find "$T/src7/data" -type f)" ]; do
        i=$((i + 1)); [ $i -gt 200 ] && fail "after_ship delete left files in the source"; sleep 0.05
    done
    kill -TERM $AGENT_PID
    rc=0; wait $AGENT_PID || rc=$?
    [ "$rc" = 0 ] || { cat "$DLOG"; fail "daemon exited $rc"; }
    same_tree "$T/gen7" "$(landed_root dev1)/data"
}
DLOG="$T/d9.err"
"$AGENT" --config "$T/dev1.yaml" > "$T/d9.out" 2> "$DLOG" &
AGENT_PID=$!
rm -rf "$(landed_root dev1)/data"
sleep 0.5
gen_small "$T/gen7/a" 100 913
cp -r "$T/gen7/a" "$T/src7/data/"
wait_landed 100
wait_said "auto: offered from the next connection on" "the daemon trained no dictionary after 100 small files"
grep -q "auto: trained .* from 100 small files .* taken since the start" "$T/d9.err" ||
    { cat "$T/d9.err"; fail "not trained from the 100 files taken"; }
h9=$(b2sum -l 256 "$T/astate-d9/auto.zdict" | cut -d' ' -f1)
gen_small "$T/gen7/b" 20 914
cp -r "$T/gen7/b" "$T/src7/data/"
wait_landed 120
stop_daemon
cmp -s "$T/astate-d9/auto.zdict" "$T/rstate/dicts/$h9.zdict" || fail "the receiver did not get the daemon's dictionary"
! grep -q "is not used" "$T/d9.err" || { cat "$T/d9.err"; fail "the daemon did not use its dictionary"; }
pass "dictionary auto in a daemon: trained from the 100 small files it took (deleted after shipping), offered on its next connection"

# ---- 10. the daemon replaces its dictionary when it stops saving ----
sed -i 's|^\(  dictionary: auto\)$|\1\nlog:\n  level: debug|' "$T/dev1.yaml"
grep -q "level: debug" "$T/dev1.yaml" || fail "could not set the daemon's log level"
rm -rf "$T/gen7" "$(landed_root dev1)/data"
DLOG="$T/d10.err"
"$AGENT" --config "$T/dev1.yaml" > "$T/d10.out" 2> "$DLOG" &
AGENT_PID=$!
sleep 0.5
grep -q "compression.dictionary auto: .*auto.zdict (" "$DLOG" || { cat "$DLOG"; fail "auto.zdict not loaded"; }
gen_small "$T/gen7/c" 300 915
cp -r "$T/gen7/c" "$T/src7/data/"
wait_landed 300
grep -q "auto: .* saves .* on the last 16 small files probed" "$DLOG" || { cat "$DLOG"; fail "no probe window"; }
! grep -q "training a new one" "$DLOG" || { cat "$DLOG"; fail "retrained on files of its own kind"; }
gen_logs "$T/gen7/d" 500 916
cp -r "$T/gen7/d" "$T/src7/data/"
wait_landed 800
wait_said "auto: offered from the next connection on" "no new dictionary after 500 files of another kind"
grep -q "training a new one from the next small files" "$DLOG" || { cat "$DLOG"; fail "the drop was not said"; }
grep -q "auto: trained .* taken since the last one stopped saving" "$DLOG" || { cat "$DLOG"; fail "not trained"; }
h10=$(b2sum -l 256 "$T/astate-d9/auto.zdict" | cut -d' ' -f1)
[ "$h10" != "$h9" ] || fail "auto.zdict was not replaced"
# more of the new kind: shipped on the next connection with the new dictionary, which the probes find better
gen_logs "$T/gen7/e" 300 917
cp -r "$T/gen7/e" "$T/src7/data/"
wait_landed 1100
# files no dictionary helps (random bytes): the drop is seen, but what it trains from them does not beat the
# one in use, which stays
mkdir -p "$T/gen7/f"
for k in $(seq 1 300); do head -c $((1000 + k * 37)) /dev/urandom > "$T/gen7/f/r$k.bin"; done
cp -r "$T/gen7/f" "$T/src7/data/"
wait_landed 1400
# the status shows the dictionary in use, what it saves and that it was replaced once (the random trial refused)
wait_said "keeping the one in use" "random files: no retrain tried and refused"
SOCK="$T/astate-d9/agent.sock"
status_json || fail "no status from the daemon"
[ "$(jget dictionary.id)" = "$(dict_id "$T/astate-d9/auto.zdict")" ] && [ "$(jget dictionary.auto)" = true ] &&
    [ "$(jget dictionary.replaced)" = 1 ] && [ "$(jget dictionary.bytes)" = "$(wc -c < "$T/astate-d9/auto.zdict")" ] ||
    { cat "$T/status.json"; fail "the status does not show the dictionary as it is"; }
"$CTL" status --socket "$SOCK" | grep -q "^dictionary .* (auto).*replaced 1 times" || fail "no dictionary line in the status"
stop_daemon
grep -q "auto: .*keeping the one in use" "$DLOG" || { cat "$DLOG"; fail "random files: no retrain tried and refused"; }
[ "$(b2sum -l 256 "$T/astate-d9/auto.zdict" | cut -d' ' -f1)" = "$h10" ] || fail "replaced by one trained on random bytes"
cmp -s "$T/astate-d9/auto.zdict" "$T/rstate/dicts/$h10.zdict" || fail "the receiver did not get the new dictionary"
! grep -q "is not used" "$DLOG" || { cat "$DLOG"; fail "the daemon did not use its new dictionary"; }
# what the old one saved when it was dropped, and what the new one saves on the same kind of files
old=$(sed -n 's/.*auto: .* saves \(-\{0,1\}[0-9.]*\)% on the last 16 small files probed (.*at best): training.*/\1/p' "$DLOG" | head -1)
new=$(awk '/offered from the next connection on/ { after = 1 } after && v == "" && /small files probed \(/ { v = $0 }
    END { sub(/.* saves /, "", v); sub(/%.*/, "", v); print v }' "$DLOG")
[ -n "$old" ] && [ -n "$new" ] || { cat "$DLOG"; fail "no probe figures (old '$old', new '$new')"; }
awk -v o="$old" -v n="$new" 'BEGIN { exit !(n > o + 10) }' || fail "the new dictionary saves $new%, the old one $old%"
pass "dictionary auto in a daemon: replaced when it stopped saving (old $old%, new $new% on the new kind of files), kept against random bytes"

# ---- 11. compression.dictionary: auto, two kinds of small files in one source ----
# gw_kinds TREE DIR: the JSON events of a gateway tree, and its logs cut into files of 2,900 bytes
gw_kinds() {
    "$CTL" bench gen --profile gateway --size 24MiB --seed "$3" "$1" > /dev/null || fail "bench gen failed"
    mkdir -p "$2/events" "$2/logs"
    find "$1/events" -name '*.json' | head -1500 | while read -r f; do cp "$f" "$2/events/"; done
    for f in "$1/logs"/*.log; do split -b 2900 -a 4 --additional-suffix=.log "$f" "$2/logs/$(basename "$f" .log)-"; done
}
gw_kinds "$T/gw1" "$T/src11/data" 1
gw_kinds "$T/gw2" "$T/new11" 2
write_agent_config dev2 "$T/src11/data" "compression:
  dictionary: auto"
sed -i 's|^state_dir: astate-dev2$|state_dir: astate-kinds|' "$T/dev2.yaml"
mkdir -p "$T/astate-kinds"
ship dev2
same_tree "$T/src11/data" "$(landed_root dev2)/data"
grep -q "compression.dictionary auto: trained .* kinds)" "$T/dev2.err" || { cat "$T/dev2.err"; fail "no dictionary trained"; }
kinds=$(sed -n 's/.*auto: trained .*bytes, \([0-9]*\) kinds).*/\1/p' "$T/dev2.err")
[ "$kinds" = 2 ] || { cat "$T/dev2.err"; fail "trained from $kinds kinds of files, not 2"; }
auto="$T/astate-kinds/auto.zdict"
size=$(wc -c < "$auto")
# the same size trained from all the source's small files at once, and one per kind
find "$T/src11/data" -type f > "$T/all11.lst"
"$CTL" dict train --size "$size" --out "$T/one11.dict" --from "$T/all11.lst" > /dev/null || fail "dict train failed"
"$CTL" dict train --size "$size" --out "$T/ev11.dict" "$T/src11/data/events"/* > /dev/null || fail "dict train failed"
"$CTL" dict train --size "$size" --out "$T/lg11.dict" "$T/src11/data/logs"/* > /dev/null || fail "dict train failed"
# saves DICT DIR: what DICT saves on the files of DIR (each compressed alone), in tenths of a percent
saves() { "$CTL" dict test "$1" "$2"/* | sed -n 's/.*; saves \(-\{0,1\}[0-9]*\)\.\([0-9]\)%$/\1\2/p'; }
a_ev=$(saves "$auto" "$T/new11/events"); a_lg=$(saves "$auto" "$T/new11/logs")
o_ev=$(saves "$T/one11.dict" "$T/new11/events"); o_lg=$(saves "$T/one11.dict" "$T/new11/logs")
k_ev=$(saves "$T/ev11.dict" "$T/new11/events"); k_lg=$(saves "$T/lg11.dict" "$T/new11/logs")
fig="saved on new events / log files, in tenths of %: auto $a_ev / $a_lg, trained at once $o_ev / $o_lg, one per kind $k_ev / $k_lg"
[ -n "$a_ev" ] && [ -n "$a_lg" ] && [ -n "$o_lg" ] && [ -n "$k_ev" ] && [ -n "$k_lg" ] || fail "no figures: $fig"
# each kind as well served as by a dictionary of its own (within 4 points); before the samples were spread
# over the tree, the first log files in name order (all of one log) left the others at 4% saved
[ "$a_ev" -ge $((k_ev - 40)) ] && [ "$a_lg" -ge $((k_lg - 40)) ] || fail "$fig"
pass "dictionary auto, two kinds in one source: a part per kind ($fig)"
# ingestctl dict train --part: the same kinds by hand; dict test and --from refuse what they cannot use
find "$T/src11/data/events" -type f > "$T/ev11.lst"; find "$T/src11/data/logs" -type f > "$T/lg11.lst"
"$CTL" dict train --size "$size" --out "$T/parts11.dict" --part "$T/ev11.lst" --part "$T/lg11.lst" > "$T/parts11.out" ||
    fail "dict train --part failed"
grep -q "from $(($(wc -l < "$T/ev11.lst") + $(wc -l < "$T/lg11.lst"))) samples in 2 parts" "$T/parts11.out" ||
    { cat "$T/parts11.out"; fail "dict train --part: not 2 parts of all the files"; }
p_lg=$(saves "$T/parts11.dict" "$T/new11/logs")
[ -n "$p_lg" ] && [ "$p_lg" -ge $((k_lg - 40)) ] || fail "the dictionary in parts saves $p_lg on logs, one of its own $k_lg"
if "$CTL" dict test "$T/ev11.lst" "$T/new11/logs"/* > /dev/null 2> "$T/dt.err"; then fail "dict test took a list for a dictionary"; fi
grep -q "not a zstd dictionary" "$T/dt.err" || { cat "$T/dt.err"; fail "dict test: no reason given"; }
if "$CTL" dict test --from "$T/nonesuch.lst" "$auto" > /dev/null 2> "$T/dt.err"; then fail "dict test took a missing list"; fi
grep -q "nonesuch.lst: No such file" "$T/dt.err" || { cat "$T/dt.err"; fail "dict test --from: no reason given"; }
pass "ingestctl dict train --part ($p_lg on logs), dict test and --from refuse a list for a dictionary and a missing list"
