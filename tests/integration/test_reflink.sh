#!/bin/sh
# run-tests: alone: it loop-mounts an XFS image and counts the receiver's writes
# A new version of a large file with changes in place lands by sharing its
# unchanged ranges with the previous version (docs/landing.md, "Unchanged
# runs"): on a loop-mounted XFS with reflinks, a 256 MiB file with 8 ranges
# of 256 KiB changed (at unaligned offsets) lands byte-identical while the
# receiver writes (its /proc/PID/io write_bytes over the second ship) at most
# 1/16 of the file; the receiver logs the bytes it cloned.  The same ship
# onto the tests' own filesystem (ext4, no reflinks) lands identical by
# copying, and its write_bytes are printed beside.  The XFS part runs with
# direct I/O (the receiver's default) and without.
# Needs root, mkfs.xfs (xfsprogs) and loop devices: skipped, with the reason
# printed, without them.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "skip: test_reflink needs root (loop mount)"; exit 0; }
command -v mkfs.xfs >/dev/null 2>&1 || { echo "skip: test_reflink needs mkfs.xfs (xfsprogs)"; exit 0; }
M="$T/bronze"
MOUNTED=0
trap 'stop_receiver; [ $MOUNTED = 0 ] || umount "$M" || true; cleanup' EXIT
mkdir -p "$M"
truncate -s 2G "$T/xfs.img"
mkfs.xfs -q -f -m reflink=1 "$T/xfs.img" || { echo "skip: mkfs.xfs -m reflink=1 failed"; exit 0; }
mount -o loop "$T/xfs.img" "$M" || { echo "skip: cannot loop-mount an XFS image here"; exit 0; }
MOUNTED=1

setup_keys
S="$T/src/ck"
mkdir -p "$S"
size=$((256 * 1024 * 1024))
head -c $size /dev/urandom > "$S/model.ckpt"
printf 'small\n' > "$S/small.txt"
wbytes() { awk '/^write_bytes/ { print $2 }' "/proc/$RECV_PID/io"; }
# change8 FILE: 256 KiB of new bytes at 8 unaligned offsets
change8() {
    for k in 1 2 3 4 5 6 7 8; do
        head -c 262144 /dev/urandom | dd of="$1" bs=1M oflag=seek_bytes seek=$((k * 30 * 1048576 + k * 4099)) \
            conv=notrunc status=none
    done
}

run() { # run LABEL DEVICE: ship, change, ship again; leaves the second ship's write_bytes in $W
    write_agent_config "$2" "$S"
    ship "$2"
    cmp "$S/model.ckpt" "$(landed_root "$2")/ck/model.ckpt" || fail "$1: the first version landed different bytes"
    change8 "$S/model.ckpt"
    w0=$(wbytes)
    ship "$2"
    W=$(($(wbytes) - w0))
    cmp "$S/model.ckpt" "$(landed_root "$2")/ck/model.ckpt" || fail "$1: the changed version landed different bytes"
    echo "$1: second ship: receiver write_bytes=$W for a $size-byte file, chunks_new=$(field "$2" chunks_new)"
}

# XFS with reflinks
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
run xfs dev1
# cloned: the bytes the receiver's last landed batch cloned (its log line)
cloned() { grep " landed: " "$T/receiver.log" | tail -1 | sed -n 's/.* \([0-9]*\) cloned.*/\1/p'; }
cloned=$(cloned)
echo "xfs: cloned $cloned bytes in the second ship"
[ "${cloned:-0}" -ge $((size / 2)) ] || { tail -3 "$T/receiver.log"; fail "xfs: cloned ${cloned:-0} bytes, expected most of $size"; }
[ "$W" -le $((size / 16)) ] || fail "xfs: the receiver wrote $W bytes for 2 MiB changed in a $size-byte file (limit $((size / 16)))"
pass "xfs: 8 changed ranges in 256 MiB land identical, $W bytes written, $cloned cloned"
stop_receiver

# the same without direct I/O (the clone after buffered writes)
head -c $size /dev/urandom > "$S/model.ckpt"
write_receiver_config 'layout: "{device}/{path}"
direct_io: false'
start_receiver
run "xfs, direct_io: false" dev2
cloned=$(cloned)
[ "${cloned:-0}" -ge $((size / 2)) ] || fail "xfs, direct_io: false: cloned ${cloned:-0} bytes, expected most of $size"
[ "$W" -le $((size / 16)) ] || fail "xfs, direct_io: false: the receiver wrote $W bytes (limit $((size / 16)))"
pass "xfs, direct_io: false: lands identical, $W bytes written, $cloned cloned"
stop_receiver

# ext4 (the tests' filesystem): copies; reported beside
umount "$M"
MOUNTED=0
rm -rf "$M" "$T/rstate" "$T/xfs.img" "$T/astate-dev1"
head -c $size /dev/urandom > "$S/model.ckpt"
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
fs="the tests' filesystem ($(stat -f -c %T "$T"))"
run "$fs" dev1
pass "$fs: 8 changed ranges land identical, $W bytes written, $(cloned) cloned"
