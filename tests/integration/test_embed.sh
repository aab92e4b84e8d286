#!/bin/sh
# An embedder ships with libingest's public API alone (tests/tools/embed-ship.c:
# keys, sender, its own socket, the handshake, a tcp link, the edge side):
# the real receiver lands the tree byte-identical, and a second run of the
# same tree sends no chunk data.
. "$(dirname "$0")/lib.sh"
EMBED="$BUILD/tools/embed-ship"
[ -x "$EMBED" ] || fail "$EMBED not built (make tests)"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
"$CTL" bench gen --size 3MiB --seed 7 "$T/src" > /dev/null
addr=$(cat "$T/receiver.addr")
run() {
    (cd "$T" && "$EMBED" dev1 keys/dev1.key keys/receiver.pub keys/fleet.dedup "$addr" "$T/src") \
        > "$T/embed.out" 2> "$T/embed.err" || { cat "$T/embed.err"; tail -20 "$T/receiver.log"; fail "embed-ship failed"; }
    cat "$T/embed.out"
}
run
files=$(find "$T/src" -type f | wc -l)
grep -q "files=$files " "$T/embed.out" || fail "embed-ship did not report $files files acknowledged"
same_tree "$T/src" "$T/bronze/dev1/data"
pass "an embedder's ship of $files files landed byte-identical"
run
grep -q "chunks_sent=0$" "$T/embed.out" || fail "the unchanged tree sent chunk data again"
pass "the same tree again sends no chunk data"
