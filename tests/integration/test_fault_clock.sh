#!/bin/sh
# Clock faults (issue 17): files whose mtime is far in the future or long
# past land like any other, under the layout's date of their mtime, with
# their mtime kept, through --once and through the daemon (whose settle time
# is measured by the agent's clock, not the file's).  The clock moving back
# while a file settles restarts its settle time (unit test: test_journal
# test_stability); the system clock is not changed here.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config
start_receiver
S="$T/src/clk"
mkdir -p "$S"
printf 'from the future\n' > "$S/future.txt"
printf 'from the past\n' > "$S/past.txt"
printf 'from now\n' > "$S/now.txt"
touch -d '2100-03-04 05:06:07 UTC' "$S/future.txt"
touch -d '1971-02-03 04:05:06 UTC' "$S/past.txt"
write_agent_config dev1 "$S"
ship dev1 > /dev/null
[ "$(field dev1 files)" -eq 3 ] || fail "--once shipped $(field dev1 files) files, expected 3"
R="$(landed_root dev1)"
[ "$(cat "$R/2100/03/04/clk/future.txt")" = "from the future" ] || fail "the future file did not land under 2100/03/04"
[ "$(cat "$R/1971/02/03/clk/past.txt")" = "from the past" ] || fail "the past file did not land under 1971/02/03"
[ "$(stat -c %Y "$R/2100/03/04/clk/future.txt")" = "$(stat -c %Y "$S/future.txt")" ] || fail "the future mtime was not kept"
[ "$(stat -c %Y "$R/1971/02/03/clk/past.txt")" = "$(stat -c %Y "$S/past.txt")" ] || fail "the past mtime was not kept"
pass "--once: mtimes in 2100 and 1971 land under their dates, mtimes kept"

D="$T/src/dclk"
mkdir -p "$D"
write_agent_config dev2 "$D" 'batch:
  max_wait: 200ms
rescan_interval: 1h'
sed -i 's|^  - path: .*|&\n    settle: 500ms|' "$T/dev2.yaml"
"$AGENT" --config "$T/dev2.yaml" > "$T/dev2.out" 2> "$T/dev2.err" &
APID=$!
sleep 0.5
printf 'future, daemon\n' > "$D/f.txt.part"
touch -d '2100-03-04 05:06:07 UTC' "$D/f.txt.part"
mv "$D/f.txt.part" "$D/f.txt"
printf 'past, daemon\n' > "$D/p.txt"
touch -d '1971-02-03 04:05:06 UTC' "$D/p.txt"
R2="$(landed_root dev2)"
i=0
until [ -f "$R2/2100/03/04/dclk/f.txt" ] && [ -f "$R2/1971/02/03/dclk/p.txt" ]; do
    i=$((i + 1)); [ $i -gt 300 ] && { kill $APID; cat "$T/dev2.err"; fail "the daemon did not land the future and past files"; }
    sleep 0.05
done
kill -TERM $APID
wait $APID || fail "the daemon did not stop cleanly"
[ "$(cat "$R2/2100/03/04/dclk/f.txt")" = "future, daemon" ] && [ "$(cat "$R2/1971/02/03/dclk/p.txt")" = "past, daemon" ] ||
    fail "the daemon's future/past files differ"
pass "the daemon: future and past mtimes settle by the agent's clock and land under their dates"
