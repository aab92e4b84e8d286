#!/bin/sh
# --once refuses a file at the edge (the receiver's landing rules, kept from
# the last run) while its builder thread goes on building more batches: the
# refusal is marked in the file table by the shipping thread, never by the
# builder (an LMDB write transaction belongs to the thread that began it;
# one begun by the builder and committed by the shipping thread left LMDB's
# writer lock owned by the builder, and the next transaction of the
# shipping thread could wait for it for ever).  Asserted: the run ends
# (bounded), exit status 3, the refused file counted once, the 40 other
# files of 8 batches land byte-identical, and a third run sends nothing.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{path}"
layout_shared: true'
start_receiver
mkdir -p "$T/a/data" "$T/b/_manifests" "$T/keep"
write_agent_config dev1 "$T/b/_manifests" 'batch:
  max_files: 5'
# two sources, the one whose files land under _manifests (refused) first
sed -i "s|^  - path: .*|&\n  - path: $T/a/data|" "$T/dev1.yaml"
# each run bounded: the old way hung
run() { rc=0; timeout -k 5 120 "$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
    [ "$rc" != 124 ] && [ "$rc" != 137 ] || { tail -5 "$T/dev1.err"; fail "the run did not end within 120 s (a deadlock)"; }; }
printf 'one\n' > "$T/a/data/first.txt"
run
[ "$rc" = 0 ] || { cat "$T/dev1.err"; fail "the first run exited $rc"; }
[ -f "$T/astate-dev1/landing" ] || fail "the agent did not keep the receiver's landing rules"
printf 'lands under _manifests\n' > "$T/b/_manifests/evil.txt"
for i in $(seq 1 40); do gen_log "$T/a/data/f$i.log" 50 "$i"; done
cp "$T/a/data/"*.log "$T/keep/"
run
[ "$rc" = 3 ] || { cat "$T/dev1.err"; fail "the agent exited $rc, expected 3 (a file refused at the edge)"; }
[ "$(field dev1 files_refused_edge)" = 1 ] || fail "files_refused_edge=$(field dev1 files_refused_edge), expected 1"
[ "$(field dev1 files)" = 40 ] || fail "files=$(field dev1 files), expected 40"
[ "$(field dev1 batches)" -ge 8 ] || fail "batches=$(field dev1 batches), expected 8 at least"
for f in "$T/keep/"*.log; do cmp -s "$f" "$T/bronze/data/$(basename "$f")" || fail "$(basename "$f") did not land byte-identical"; done
[ ! -e "$T/bronze/_manifests/evil.txt" ] || fail "the refused file landed"
run
[ "$(field dev1 files)" = 0 ] && [ "$(field dev1 files_refused_edge)" = 0 ] || fail "the third run sent or refused again: $(tail -1 "$T/dev1.out")"
pass "refused at the edge while 8 batches were built: the run ends, 40 files landed, the refusal marked once"
