#!/bin/sh
# throttle.rate: 4 MiB of incompressible data shipped at 1 MiB/s (burst of
# one second) cannot take less than 3 s; assert the lower bound a correct
# throttle must satisfy (2.5 s, from the agent's own summary) and that
# everything landed byte-identical.  No upper bound: CI machines are slow.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
for i in 1 2 3 4; do head -c 1048576 /dev/urandom > "$S/r$i.bin"; done
write_agent_config dev1 "$S" 'throttle:
  rate: 1MiB'
ship dev1 >/dev/null
secs=$(field dev1 seconds)
waited=$(field dev1 throttle_wait_seconds)
wire=$(field dev1 wire_bytes)
[ "$(field dev1 files)" = 4 ] || fail "not 4 files shipped"
same_tree "$S" "$(landed_root dev1)/data"
awk -v s="$secs" 'BEGIN { exit !(s >= 2.5) }' || fail "4 MiB at 1 MiB/s took only $secs s"
awk -v w="$waited" 'BEGIN { exit !(w >= 2.0) }' || fail "the throttle waited only $waited s"
pass "throttle.rate 1MiB: $wire wire bytes in $secs s (waited $waited s); everything landed"

# without a throttle (another device, its own state) nothing is held back
write_agent_config dev2 "$S"
ship dev2 >/dev/null
[ "$(field dev2 throttle_wait_seconds)" = 0.000 ] || fail "unthrottled agent waited"
pass "no throttle: no wait ($(field dev2 seconds) s)"

