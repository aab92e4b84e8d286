#!/bin/sh
# --ready-file is written safely: a new temporary file in its directory
# (O_EXCL | O_NOFOLLOW), then renamed over it.
#   1. a symlink planted at the temporary name the receiver used to take
#      (FILE.tmp.PID: the PID is the shell's, which execs the receiver) is
#      neither followed nor truncated: its target keeps its bytes, and the
#      ready file is a regular file holding the address;
#   2. a ready file that is a symlink is refused: the receiver says so,
#      names it and stops with status 1; the link's target is untouched.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config
mkdir -p "$T/run"
printf 'precious\n' > "$T/victim"

sh -c 'ln -s "$1/victim" "$1/run/ready.tmp.$$"; exec "$2" --config "$1/receiver.yaml" --ready-file "$1/run/ready"' \
    sh "$T" "$RECEIVER" >> "$T/receiver.log" 2>&1 &
RECV_PID=$!
i=0
while [ ! -s "$T/run/ready" ]; do
    i=$((i + 1))
    [ $i -gt 200 ] && { cat "$T/receiver.log"; fail "receiver did not start"; }
    kill -0 "$RECV_PID" 2>/dev/null || { cat "$T/receiver.log"; fail "receiver exited"; }
    sleep 0.05
done
[ "$(cat "$T/victim")" = precious ] || fail "the symlink at the temporary name was followed: victim now '$(cat "$T/victim")'"
[ -f "$T/run/ready" ] && [ ! -L "$T/run/ready" ] || fail "the ready file is not a regular file"
grep -q '^127\.0\.0\.1:[0-9][0-9]*$' "$T/run/ready" || fail "the ready file holds '$(cat "$T/run/ready")'"
stop_receiver
pass "a symlink planted at the temporary name is neither followed nor truncated"

rm -f "$T/run/"*
ln -s "$T/victim" "$T/run/ready"
rc=0
timeout 20 "$RECEIVER" --config "$T/receiver.yaml" --ready-file "$T/run/ready" > "$T/refused.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$T/refused.log"; fail "receiver with a symlink as its ready file: exit $rc, expected 1"; }
grep -q -- "--ready-file $T/run/ready: a symbolic link: refusing" "$T/refused.log" \
    || { cat "$T/refused.log"; fail "no refusal naming the ready file"; }
[ "$(cat "$T/victim")" = precious ] || fail "the ready file's link target was written"
[ -L "$T/run/ready" ] || fail "the symlink was replaced"
[ -z "$(ls "$T/run" | grep -v '^ready$')" ] || fail "temporary files left: $(ls "$T/run")"
pass "a ready file that is a symlink is refused, nothing written through it"
