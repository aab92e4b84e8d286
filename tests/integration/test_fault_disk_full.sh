#!/bin/sh
# Disk full at the core (issue 17, fault classes): the bronze tree on a
# 6 MiB tmpfs, five incompressible 2 MiB files shipped one per batch.
#   - Once bronze is full, the batch that does not fit fails as a whole with
#     a clear error naming the lack of space; the agent exits non-zero and
#     says not everything was acknowledged; every file under a final name
#     equals its source, no temporary file is left behind, and the receiver
#     goes on serving.
#   - With room back (the tmpfs grown), the next ship lands the rest: each
#     file once, byte-identical; what had landed is not sent again.
# Needs root (mount); skipped with the reason otherwise.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "skip: mounting a tmpfs for bronze needs root"; exit 0; }
mkdir -p "$T/bronze"
mount -t tmpfs -o size=6m ingest-test "$T/bronze" 2>/dev/null || { echo "skip: cannot mount a tmpfs here"; exit 0; }
trap 'stop_receiver; umount "$T/bronze" 2>/dev/null || umount -l "$T/bronze"; cleanup' EXIT
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
for i in 1 2 3 4 5; do head -c 2097152 /dev/urandom > "$S/f$i.bin"; done
write_agent_config dev1 "$S" 'batch:
  max_files: 1'
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" -ne 0 ] || { cat "$T/dev1.err"; fail "the agent exited 0 although bronze was full"; }
grep -qi "out of space\|no space left" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the agent does not say bronze is out of space"; }
grep -qi "out of space\|no space left" "$T/receiver.log" || { tail -20 "$T/receiver.log"; fail "the receiver does not say bronze is out of space"; }
landed=$(find "$(landed_root dev1)" -type f ! -name '*.ingest-tmp-*' 2>/dev/null | wc -l)
[ "$landed" -ge 1 ] && [ "$landed" -lt 5 ] || fail "$landed files landed; expected some but not all"
for f in "$(landed_root dev1)"/data/*; do
    cmp -s "$f" "$S/$(basename "$f")" || fail "$(basename "$f") under its final name differs from its source"
done
[ "$(count_tmp "$T/bronze")" -eq 0 ] || fail "temporary files left in bronze after the failed batch: $(count_tmp "$T/bronze")"
kill -0 "$RECV_PID" || fail "the receiver died"
pass "bronze full: the batch that does not fit fails whole with the reason; $landed files landed intact, nothing partial"

mount -o remount,size=64m "$T/bronze" || fail "cannot grow the tmpfs"
ship dev1
[ "$(field dev1 files)" -eq $((5 - landed)) ] || fail "the second ship sent $(field dev1 files) files, expected $((5 - landed))"
same_tree "$S" "$(landed_root dev1)/data"
[ "$(find "$(landed_root dev1)" -type f | wc -l)" -eq 5 ] || fail "not exactly 5 files in bronze"
[ "$(count_tmp "$T/bronze")" -eq 0 ] || fail "temporary files left"
pass "room back: the rest lands once, byte-identical; what had landed was not sent again"

# bronze read-only (remounted): the batch fails with the filesystem's reason, not another's ("out of memory")
pin_receiver_port
stop_receiver # (it holds files of bronze open for writing)
mount -o remount,ro "$T/bronze" || fail "cannot remount the tmpfs read-only"
start_receiver
head -c 300000 /dev/urandom > "$S/f6.bin"
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" -ne 0 ] || { cat "$T/dev1.err"; fail "the agent exited 0 although bronze was read-only"; }
grep -q "Read-only file system" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the agent does not say bronze is read-only"; }
! grep -q "out of memory" "$T/dev1.err" "$T/receiver.log" || { cat "$T/dev1.err"; fail "a read-only bronze was called out of memory"; }
stop_receiver
mount -o remount,rw "$T/bronze" || fail "cannot remount the tmpfs read-write"
start_receiver
ship dev1
same_tree "$S" "$(landed_root dev1)/data"
pass "bronze read-only: the batch fails naming it (not 'out of memory'); writable again, it lands"

# a restart with bronze full and its catalog gone (or behind): the catalog, whose files are mapped in
# memory, is not opened (a page first touched on a full filesystem is SIGBUS), the receiver runs and
# the chunk index is kept; with room back the next start makes the catalog again
stop_receiver
rm -rf "$T/bronze/_manifests/.catalog"
dd if=/dev/zero of="$T/bronze/filler" bs=64k 2>/dev/null || true
start_receiver
grep -q "catalog .* less than 1 MiB: not opened" "$T/receiver.log" || { tail -5 "$T/receiver.log"; fail "no word of the catalog not opened on a full bronze"; }
sleep 0.5
kill -0 "$RECV_PID" 2>/dev/null || { tail -5 "$T/receiver.log"; fail "the receiver died starting on a full bronze"; }
! grep -q "SIGBUS" "$T/receiver.log" || fail "SIGBUS starting on a full bronze"
[ ! -e "$T/rstate/sigbus" ] || fail "the chunk index was marked to be made again"
stop_receiver
rm "$T/bronze/filler"
start_receiver
grep -q "catalog of .* caught up" "$T/receiver.log" || { tail -5 "$T/receiver.log"; fail "the catalog was not made again with room back"; }
"$CTL" catalog --bronze "$T/bronze" --format paths > "$T/cat.out" || fail "ingestctl catalog failed"
[ "$(grep -c . "$T/cat.out")" -ge 6 ] || { cat "$T/cat.out"; fail "the catalog made again does not list the landed files"; }
# full again: ingestctl reads the catalog as it is (with a warning), it does not fail
stop_receiver
dd if=/dev/zero of="$T/bronze/filler" bs=64k 2>/dev/null || true
"$CTL" catalog --bronze "$T/bronze" --format paths > "$T/cat2.out" 2> "$T/cat2.err" ||
    { cat "$T/cat2.err"; fail "ingestctl catalog failed on a full bronze"; }
cmp -s "$T/cat.out" "$T/cat2.out" || fail "ingestctl catalog on a full bronze listed something else"
grep -q "reading it as it is" "$T/cat2.err" || { cat "$T/cat2.err"; fail "no warning that the catalog is read as it is"; }
rm "$T/bronze/filler"
pass "a start on a full bronze without its catalog: not opened, said, no SIGBUS; made again once there is room; ingestctl reads it as it is on a full bronze"
