#!/bin/sh
# A layout without {device} would let one device's file land over another
# device's file of the same path: the receiver refuses such a config (at
# --check-config and at start) unless layout_shared: true says it is meant.
# With it, two devices shipping the same path do share one file.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{yyyy}/{path}"'
rc=0
"$RECEIVER" --config "$T/receiver.yaml" --check-config > "$T/check.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$T/check.out"; fail "--check-config of a layout without {device}: exit $rc, expected 2"; }
grep -q "key 'layout': \"{yyyy}/{path}\" has no {device}, so devices would overwrite each other's files" \
    "$T/check.out" || { cat "$T/check.out"; fail "no message naming the layout and the danger"; }
grep -q "layout_shared: true" "$T/check.out" || { cat "$T/check.out"; fail "the message does not name layout_shared"; }
rc=0
timeout 20 "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/receiver.addr" > "$T/start.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ ! -e "$T/receiver.addr" ] \
    || { cat "$T/start.out"; fail "the receiver started with a layout without {device}"; }
pass "a layout without {device} is refused, naming layout_shared"

write_receiver_config 'layout: "{path}"
layout_shared: true'
"$RECEIVER" --config "$T/receiver.yaml" --check-config > "$T/check.out" 2>&1 || { cat "$T/check.out"; fail "layout_shared: true refused"; }
start_receiver
for d in dev1 dev2; do
    mkdir -p "$T/src-$d/logs"
    printf 'from %s\n' "$d" > "$T/src-$d/logs/app.log"
    write_agent_config "$d" "$T/src-$d/logs"
    ship "$d" > /dev/null
done
[ "$(cat "$T/bronze/logs/app.log")" = "from dev2" ] || fail "shared layout: bronze/logs/app.log holds '$(cat "$T/bronze/logs/app.log")'"
pass "with layout_shared: true the devices share one tree (dev2's app.log replaced dev1's)"
