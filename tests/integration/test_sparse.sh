#!/bin/sh
# Sparse files land sparse (docs/landing.md, "Holes"):
#   - a 1 GiB sparse file with 5 MiB of data at four offsets (one of them
#     not block-aligned, two the same bytes) and a hole at its end lands byte-identical with at
#     most 1% of its size allocated: received and repeated (dup) zero chunks,
#     written with O_DIRECT (the receiver's default);
#   - a second device ships the same tree: its zero chunks are known chunks
#     (copied from dev1's landed file), landed with ordinary writes
#     (direct_io: false), and its copy is sparse too;
#   - a file with real (allocated) zeros in the middle lands identical.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/sp"
mkdir -p "$S"
truncate -s 1G "$S/sparse.img"
head -c 4096 /dev/urandom | dd of="$S/sparse.img" conv=notrunc status=none
head -c 1048576 /dev/urandom | dd of="$S/sparse.img" bs=1M oflag=seek_bytes seek=300000001 conv=notrunc status=none
head -c 2097152 /dev/urandom > "$T/r2"
dd if="$T/r2" of="$S/sparse.img" bs=1M seek=700 conv=notrunc status=none
# the same 2 MiB again further on: its inner chunks repeat, read back from the file being written across the holes
dd if="$T/r2" of="$S/sparse.img" bs=1M seek=900 conv=notrunc status=none
[ "$(stat -c %s "$S/sparse.img")" -eq 1073741824 ] || fail "the source is not 1 GiB"
{ head -c 1048576 /dev/urandom; head -c 4194304 /dev/zero; head -c 1048576 /dev/urandom; } > "$S/zeros.bin"
printf 'an ordinary file\n' > "$S/small.txt"

limit=$((1073741824 / 100))
# alloc FILE: bytes allocated to FILE (blocks of 512 bytes, as stat counts them)
alloc() { echo $(($(stat -c %b "$1") * 512)); }

write_agent_config dev1 "$S"
ship dev1
[ "$(field dev1 files)" -eq 3 ] || fail "shipped $(field dev1 files) files, expected 3"
L1="$(landed_root dev1)/sp"
for f in sparse.img zeros.bin small.txt; do cmp "$S/$f" "$L1/$f" || fail "$f landed different bytes"; done
a=$(alloc "$L1/sparse.img")
echo "dev1: sparse.img: $(stat -c %s "$L1/sparse.img") bytes, $a allocated (limit $limit)"
[ "$a" -le "$limit" ] || fail "the 1 GiB sparse file landed with $a bytes allocated (more than 1%: $limit)"
echo "dev1: zeros.bin: $(stat -c %s "$L1/zeros.bin") bytes, $(alloc "$L1/zeros.bin") allocated"
pass "a 1 GiB sparse file lands byte-identical with $a bytes allocated; a file with zeros in its middle lands identical"

stop_receiver
write_receiver_config 'layout: "{device}/{path}"
direct_io: false'
start_receiver
# (ids listed for every file, batch.push_max 0: dev2's small files would otherwise be pushed, whatever the core holds)
write_agent_config dev2 "$S" 'batch: {push_max: 0}'
ship dev2
[ "$(field dev2 chunks_new)" -eq 0 ] || fail "dev2 sent $(field dev2 chunks_new) chunks; the core held all of them"
L2="$(landed_root dev2)/sp"
for f in sparse.img zeros.bin small.txt; do cmp "$S/$f" "$L2/$f" || fail "dev2: $f landed different bytes"; done
a=$(alloc "$L2/sparse.img")
echo "dev2: sparse.img: $a bytes allocated"
[ "$a" -le "$limit" ] || fail "the sparse file copied from known chunks landed with $a bytes allocated"
pass "copied from known chunks without O_DIRECT, the sparse file lands identical and sparse ($a bytes allocated)"
