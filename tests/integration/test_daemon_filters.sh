#!/bin/sh
# Per-source filters in the daemon: one source per rule; for each, what
# landed is exactly the files the rule keeps, and the shutdown line counts
# the files it passed over, by reason.  Then the same sources shipped by
# `--once` (and `--once --all`) as dev2: the same files kept, the summary
# line counting the others by reason (--once used to ship them all).
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
B="$T/src"
mkdir -p "$B/inc/d" "$B/exc" "$B/sizes" "$B/age" "$B/samp" "$B/pfx"
# include: only **/*.csv   (keeps a.csv, d/b.csv; skips c.txt, d/e.log)
echo 1 > "$B/inc/a.csv"; echo 2 > "$B/inc/d/b.csv"; echo 3 > "$B/inc/c.txt"; echo 4 > "$B/inc/d/e.log"
# exclude: *.tmp   (keeps x.dat; skips y.tmp, z.tmp)
echo 1 > "$B/exc/x.dat"; echo 2 > "$B/exc/y.tmp"; echo 3 > "$B/exc/z.tmp"
# min_size 100, max_size 1000  (keeps mid; skips small (min_size), big (max_size))
gen_log "$B/sizes/small" 50 1; gen_log "$B/sizes/mid" 500 2; gen_log "$B/sizes/big" 5000 3
# max_age 1h  (keeps new; skips old)
echo new > "$B/age/new"; echo old > "$B/age/old"; touch -d '3 days ago' "$B/age/old"
# sample_every 4 over 40 files
for i in $(seq 1 40); do echo "$i" > "$B/samp/s$i"; done
# drop_if_prefix hex:00000000  (keeps data; skips empty-frame and zeros)
printf 'DATA....' > "$B/pfx/data"; printf '\000\000\000\000frame' > "$B/pfx/empty-frame"; head -c 64 /dev/zero > "$B/pfx/zeros"
write_agent_config dev1 "$B/inc" 'batch:
  max_wait: 200ms'
python_free_yaml() {
cat <<EOT
  - path: $B/inc
    settle: 100ms
    include: ["**/*.csv"]
  - path: $B/exc
    settle: 100ms
    exclude: ["*.tmp"]
  - path: $B/sizes
    settle: 100ms
    min_size: 100
    max_size: 1000
  - path: $B/age
    settle: 100ms
    max_age: 1h
  - path: $B/samp
    settle: 100ms
    sample_every: 4
  - path: $B/pfx
    settle: 100ms
    drop_if_prefix: "hex:00000000"
EOT
}
python_free_yaml > "$T/sources.yaml"
awk -v f="$T/sources.yaml" '/^  - path: / { while ((getline l < f) > 0) print l; next } { print }' "$T/dev1.yaml" > "$T/dev1.yaml.new"
mv "$T/dev1.yaml.new" "$T/dev1.yaml"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
R="$(landed_root dev1)"
i=0
while [ ! -f "$R/pfx/data" ] || [ ! -f "$R/inc/d/b.csv" ] || [ ! -f "$R/sizes/mid" ] || [ ! -f "$R/age/new" ] || [ ! -f "$R/exc/x.dat" ]; do
    i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1.err"; fail "the kept files did not land"; }; sleep 0.05
done
sleep 1
kill -TERM $AGENT_PID
rc=0; wait $AGENT_PID || rc=$?
[ "$rc" = 0 ] || { cat "$T/dev1.err"; fail "agent exited $rc"; }
landed() { (cd "$R/$1" && find . -type f | sed 's|^\./||' | sort | tr '\n' ' '); }
expect() { got=$(landed "$1"); [ "$got" = "$2" ] || fail "$1: landed '$got', expected '$2'"; }
OUT="$T/dev1.out"
count() { v=$(tail -1 "$OUT" | tr ' ' '\n' | sed -n "s/^skipped_$1=//p"); [ "$v" = "$2" ] || { cat "$OUT"; fail "skipped_$1=$v, expected $2"; }; }
expect inc "a.csv d/b.csv "; count include 2; pass "include: kept 2, counted 2"
expect exc "x.dat "; count exclude 2; pass "exclude: kept 1, counted 2"
expect sizes "mid "; count min_size 1; count max_size 1; pass "min_size/max_size: kept 1, counted 1 + 1"
expect age "new "; count max_age 1; pass "max_age: kept 1, counted 1"
ns=$(find "$R/samp" -type f | wc -l)
count sample $((40 - ns))
[ "$ns" -ge 3 ] && [ "$ns" -le 20 ] || fail "sample_every 4 kept $ns of 40"
expect pfx "data "; count prefix 2; pass "drop_if_prefix: kept 1, counted 2"
pass "sample_every 4: kept $ns of 40, counted $((40 - ns))"
for f in $(landed samp); do cmp -s "$B/samp/$f" "$R/samp/$f" || fail "samp/$f differs"; done
# a second run does not count the same versions again
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
sleep 1
kill -TERM $AGENT_PID; wait $AGENT_PID || true
count include 0; count sample 0
pass "a restart does not count the same skipped versions again"

# Skip records name the version and the rules that judged it: the exc source's rule changed (exclude
# *.log, no longer *.tmp) and a restart: y.tmp and z.tmp are judged again and land; a file skipped for its
# prefix, rewritten to the same size with its mtime put back (cp -p, tar and rsync -t do so): judged again
# and lands.  (Both stayed unshipped for good, their records matching size and mtime.)
sed -i 's|^    exclude: \["\*.tmp"\]$|    exclude: ["*.log"]|' "$T/dev1.yaml"
grep -q 'exclude: \["\*.log"\]' "$T/dev1.yaml" || fail "the exclude rule was not changed"
touch -r "$B/pfx/empty-frame" "$T/pfx-ref"
printf 'DATAframe' > "$B/pfx/empty-frame"
touch -r "$T/pfx-ref" "$B/pfx/empty-frame"
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
i=0
while [ ! -f "$R/exc/y.tmp" ] || [ ! -f "$R/exc/z.tmp" ] || ! cmp -s "$B/pfx/empty-frame" "$R/pfx/empty-frame"; do
    i=$((i + 1)); [ $i -gt 300 ] && { kill $AGENT_PID; cat "$T/dev1.err"; fail "files skipped before were not judged again"; }
    sleep 0.05
done
kill -TERM $AGENT_PID; wait $AGENT_PID || true
pass "a changed filter rule, and a skipped file rewritten with its mtime put back, are judged again"
sed -i 's|^    exclude: \["\*.log"\]$|    exclude: ["*.tmp"]|' "$T/dev1.yaml"
printf '\000\000\000\000frame' > "$B/pfx/empty-frame"

# ---- --once applies the same filters ----
sed -e 's/^  id: dev1$/  id: dev2/' -e 's|keys/dev1.key|keys/dev2.key|' -e 's|astate-dev1|astate-dev2|' \
    "$T/dev1.yaml" > "$T/dev2.yaml"
mkdir -p "$T/astate-dev2"
samp1=$(landed samp)
for all in "" --all; do
    rm -rf "$(landed_root dev2)"
    "$AGENT" --config "$T/dev2.yaml" --once $all > "$T/dev2.out" 2> "$T/dev2.err" || { cat "$T/dev2.err"; fail "--once $all failed"; }
    R="$(landed_root dev2)"
    OUT="$T/dev2.out"
    expect inc "a.csv d/b.csv "; count include 2
    expect exc "x.dat "; count exclude 2
    expect sizes "mid "; count min_size 1; count max_size 1
    expect age "new "; count max_age 1
    expect pfx "data "; count prefix 2
    [ "$(landed samp)" = "$samp1" ] || fail "--once $all sampled '$(landed samp)', the daemon '$samp1'"
    count sample $((40 - ns))
    pass "--once $all: each rule keeps what the daemon kept, the others counted by reason"
done
