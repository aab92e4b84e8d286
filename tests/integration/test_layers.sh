#!/bin/sh
# The folders of libingest show its layers (docs/architecture.md): the edge
# side (libingest/edge/) and the core side (libingest/core/) never include
# each other's headers, and the transports (libingest/transport/) include
# neither.  A violation names the file and the line.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT/libingest" || fail "no libingest/"
EDGE_H='ingest/(edge|sender|journal|filter|throttle)\.h|\.\./edge/'
CORE_H='ingest/(core|lander)\.h|\.\./core/|core_int\.h'
check() { # dir pattern what
    bad=$(grep -nE "#include \"($2)" "$1"/*.c "$1"/*.h 2>/dev/null || true)
    [ -z "$bad" ] || fail "$1 includes $3: $bad"
}
[ -n "$(ls edge/*.c 2>/dev/null)" ] && [ -n "$(ls core/*.c 2>/dev/null)" ] && [ -n "$(ls transport/*.c 2>/dev/null)" ] ||
    fail "libingest/edge, core and transport are expected to hold the sides and the transports"
check edge "$CORE_H" "the core side"
check core "$EDGE_H" "the edge side"
check transport "$CORE_H|$EDGE_H" "a protocol side"
# and the check itself sees an include when there is one
grep -qE "#include \"(ingest/core\.h)" core/core_int.h || fail "the layer check does not see core/core_int.h's own include"
pass "edge and core sides never include each other; transports include neither"
