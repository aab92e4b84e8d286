# shellcheck shell=bash
# bench/lib.sh: what the A/B and fleet drivers share (ship-ab.sh, fleet-ab.sh,
# fleet-scale.sh).  Sourced by bash; the caller sets W (its work directory),
# MP (the mount point, under W), LOOP (auto|0), IMG_SIZE and, before
# fresh_dir, use_loop (1 when loop_ok said yes).
# shellcheck disable=SC2154 # W, MP, LOOP, IMG_SIZE, use_loop: the caller's
# shellcheck disable=SC2120 # median's DIGITS is optional

# loop_ok: 0 when each run can have a loop-mounted ext4 (LOOP not 0, root, mkfs.ext4 there)
loop_ok() { [ "$LOOP" != 0 ] && [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null; }

# fresh_dir [DIR...]: a fresh filesystem at $MP for one run (an ext4 of IMG_SIZE on a loop
# device when use_loop is 1, else an empty directory), with the directories DIR made in it
fresh_dir() {
    umount "$MP" 2>/dev/null || true
    rm -rf "$MP" "$W/img"
    mkdir -p "$MP"
    if [ "$use_loop" = 1 ]; then
        truncate -s "$IMG_SIZE" "$W/img"
        mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$W/img" >/dev/null
        mount -o loop "$W/img" "$MP"
    fi
    local d
    for d in "$@"; do mkdir -p "$MP/$d"; done
}

# median [DIGITS] < numbers: their median (the mean of the middle two, with DIGITS decimals,
# 3 by default, when their count is even); n/a when there are none
median() {
    sort -g | awk -v d="${1:-3}" '{ v[NR] = $1 }
        END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.*f\n", d, (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# fleet_field NAME JSON: a top-level number of `ingestctl bench fleet`'s JSON (the part before
# per_device, where the same names recur)
fleet_field() { sed -e 's/,"per_device":.*//' -e "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/" <<<"$2"; }
