#!/bin/sh
# after_ship: delete acts only on files that landed.  A batch's journal
# record lists every file taken for it; a file that drops out of the batch
# unchanged must stay in the source, and ship in a later batch:
#   1. unreadable for a moment (one open fails with EIO) while the batch is
#      built: it leaves the batch, the batch lands and is acknowledged;
#   2. withdrawn (its open at send time says ENOENT) from a batch whose
#      after-ship action is deferred (another of its files is held open),
#      so that the action runs again from the journal's record.
# The layer tests/tools/fsfault makes the failing open.  Each time the file
# stays, is found again, lands byte-identical, and only then is deleted.
. "$(dirname "$0")/lib.sh"
FSFAULT="$BUILD/tools/fsfault.so"
# a sanitizer build's run-time need not come first: the layer only wraps openat
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
export ASAN_OPTIONS
AGENT_PID=""
trap 'for p in "${AGENT_PID:-}" "${HOLD_PID:-}"; do if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; fi; done; cleanup' EXIT # (a failed check leaves no daemon behind)
[ -f "$FSFAULT" ] || fail "$FSFAULT is not built (make tests)"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
K="$T/keep" # a copy of everything written, to compare with what landed
mkdir -p "$S" "$K"
head -c 20000 /dev/urandom > "$S/a.bin"
head -c 30000 /dev/urandom > "$S/v.bin"
gen_log "$S/w.log" 40000 1
cp "$S"/* "$K/"
write_agent_config dev1 "$S" 'batch:
  max_files: 10
  max_wait: 200ms
rescan_interval: 1s'
sed -i 's|^  - path: .*|&\n    settle: 100ms\n    after_ship: delete|' "$T/dev1.yaml"

# wait_gone FILE...: until none of the files is in the source
wait_gone() {
    i=0
    for f in "$@"; do
        while [ -e "$S/$f" ]; do
            i=$((i + 1)); [ $i -gt 400 ] && { tail -20 "$T/dev1.err"; fail "$f was not shipped and deleted"; }
            sleep 0.05
        done
    done
}
# never_lost FILE: the file is in the source or landed byte-identical, never neither
never_lost() {
    [ -e "$S/$1" ] || cmp -s "$K/$1" "$(landed_root dev1)/data/$1" ||
        { cat "$T/dev1.err"; fail "$1 was deleted from the source and did not land"; }
}
stop_agent() {
    kill "$AGENT_PID" 2>/dev/null || true
    wait "$AGENT_PID" 2>/dev/null || true
    AGENT_PID=""
}

# 1. unreadable while its batch is built
FSFAULT_OPEN_NAME=v.bin FSFAULT_LOG="$T/fail1.log" LD_PRELOAD="$FSFAULT" \
    "$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
wait_gone a.bin w.log
never_lost v.bin
[ "$(wc -l < "$T/fail1.log" 2>/dev/null)" = 1 ] || fail "the open of v.bin did not fail once"
grep -q 'v.bin.*\(unreadable\|Input/output error\)' "$T/dev1.err" || { cat "$T/dev1.err"; fail "the agent did not say v.bin was unreadable"; }
wait_gone v.bin
same_tree "$K" "$(landed_root dev1)/data"
pass "a file unreadable while its batch was built stays in the source, ships in a later batch, then goes"
stop_agent

# 2. withdrawn from a batch whose after-ship action is deferred
# no rescan within the test: only the deferred action's retries run while v2.bin is away
sed -i 's|^rescan_interval: .*|rescan_interval: 60s|' "$T/dev1.yaml"
head -c 4000000 /dev/urandom > "$S/v2.bin" # large: read again at send time (small files are sent from memory)
head -c 20000 /dev/urandom > "$S/held.bin"
cp "$S/v2.bin" "$S/held.bin" "$K/"
sleep 30 < "$S/held.bin" &                 # holds held.bin open: its deletion waits, and the batch's with it
HOLD_PID=$!
# every open after the build's (the readers that read it again to send it) finds ENOENT
FSFAULT_OPEN_NAME=v2.bin FSFAULT_OPEN_NTH=2 FSFAULT_OPEN_COUNT=1000000 FSFAULT_OPEN_ERRNO=2 FSFAULT_LOG="$T/fail2.log" LD_PRELOAD="$FSFAULT" \
    "$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
i=0
until grep -q 'after_ship delete of .*held.bin deferred' "$T/dev1.err"; do
    i=$((i + 1)); [ $i -gt 400 ] && { cat "$T/dev1.err"; kill "$HOLD_PID"; fail "the deletion of held.bin was not deferred"; }
    sleep 0.05
done
[ -s "$T/fail2.log" ] || { kill "$HOLD_PID"; fail "the send-time open of v2.bin did not fail"; }
grep -q 'v2.bin vanished while it was being shipped: withdrawn' "$T/dev1.err" || { cat "$T/dev1.err"; kill "$HOLD_PID"; fail "v2.bin was not withdrawn"; }
sleep 2.5 # the deferred action is tried again every second, from the journal's record of the batch
[ -e "$S/v2.bin" ] || { cat "$T/dev1.err"; kill "$HOLD_PID"; fail "v2.bin, withdrawn, was deleted by the batch's deferred action"; }
kill "$HOLD_PID" 2>/dev/null || true
wait "$HOLD_PID" 2>/dev/null || true
wait_gone held.bin
stop_agent
# a restart's walk finds v2.bin (the agent took it for gone), ships it, and only then deletes it
"$AGENT" --config "$T/dev1.yaml" > "$T/dev1.out" 2> "$T/dev1.err" &
AGENT_PID=$!
wait_gone v2.bin
same_tree "$K" "$(landed_root dev1)/data"
pass "a file withdrawn from a batch whose after-ship action waited stays in the source, ships later, then goes"
stop_agent
