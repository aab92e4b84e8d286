#!/bin/sh
# Text a peer or a device controls is escaped in the logs, so that it can
# neither forge a log line nor drive the terminal:
#   1. a device's ERROR message, with a newline and a forged log line, an
#      ANSI escape, a C1 control (U+009B) and a byte that is not UTF-8,
#      is one receiver log line, escaped;
#   2. a device's file name with the same is escaped in the agent's log
#      (a FIFO, logged as skipped at level debug), and the library's line
#      about it, which no prog_escape saw, still is one line (the guard in
#      prog_log); valid UTF-8 next to it lands and is left alone
#      (tests/unit/test_prog.c has the byte-level cases).
. "$(dirname "$0")/lib.sh"
EVIL="$BUILD/tools/evil-agent"
[ -x "$EVIL" ] || fail "$EVIL not built (make tests)"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
ESC=$(printf '\033')
FORGED='2020-01-01T00:00:00.000Z'

# no_raw WHAT FILE: FILE holds no ESC byte, no C1 byte sequence and no forged line
no_raw() {
    ! grep -q "$ESC" "$2" || { cat -v "$2" >&2; fail "$1: a raw ESC byte in the log"; }
    ! grep -q "$(printf '\302\233')" "$2" || { cat -v "$2" >&2; fail "$1: a raw U+009B in the log"; }
    ! grep -q "^$FORGED" "$2" || { cat -v "$2" >&2; fail "$1: a forged line in the log"; }
}

text=$(printf 'disk full\n%s ingest-receiver[info]: device dev2 connected\033[2J\302\233\377 end' "$FORGED")
"$EVIL" --address "$(cat "$T/receiver.addr")" --device dev1 --key "$T/keys/dev1.key" \
    --receiver-pub "$T/keys/receiver.pub" --dedup-key "$T/keys/fleet.dedup" --error "$text" \
    > "$T/evil.out" 2> "$T/evil.err" || true
wait_log "device dev1 reported"
want='device dev1 reported: I/O error: disk full\n'"$FORGED"' ingest-receiver[info]: device dev2 connected\x1b[2J\u{009b}\xff end'
grep -qF -- "$want" "$T/receiver.log" || { cat -v "$T/receiver.log" >&2; fail "the device's ERROR text is not escaped as expected"; }
no_raw "receiver" "$T/receiver.log"
pass "a device's ERROR text is one receiver log line, escaped"

mkdir -p "$T/src"
printf 'ok\n' > "$T/src/plain.txt"
printf 'grec\n' > "$T/src/$(printf '\316\261\316\262\316\263').txt"
fifo=$(printf 'pipe\n%s ingest-agent[error]: forged\033[31m' "$FORGED")
mkfifo "$T/src/$fifo"
write_agent_config dev1 "$T/src" 'log:
  level: debug'
ship dev1 > /dev/null
grep -qF -- 'pipe\n'"$FORGED"' ingest-agent[error]: forged\x1b[31m' "$T/dev1.err" \
    || { cat -v "$T/dev1.err" >&2; fail "the FIFO's name is not escaped in the agent's log"; }
no_raw "agent" "$T/dev1.err"
cmp "$T/src/plain.txt" "$T/bronze/dev1/src/plain.txt" || fail "plain.txt did not land"
greek=$(printf '\316\261\316\262\316\263').txt
cmp "$T/src/$greek" "$T/bronze/dev1/src/$greek" || fail "the UTF-8 named file did not land"
pass "a device's file name is escaped in the agent's log"
