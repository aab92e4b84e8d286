#!/bin/sh
# Directories of bronze removed at the worst moment, as a job that tidies a
# landing zone (removing its empty directories) would by chance: the
# receiver runs with the snatcher layer (tests/tools/dirsnatch/), which
# removes the directory a file is about to be created in (every third
# create) and a directory just made (every third mkdir), when empty.  The
# receiver makes the directory again and lands (docs/landing.md, "A
# directory removed under a batch"): every ship lands every file once,
# byte-identical, at the first try (no batch shipped again), the receiver
# logs no error, no temporary file is left.  Ships of many small files (the
# small-file helper's creates, staged directories) and of few (directories
# made under their final names), into directories there before (empty) and
# new ones.  Before, such a batch failed with ENOENT and was shipped again.
. "$(dirname "$0")/lib.sh"
[ -f "$BUILD/tools/dirsnatch.so" ] || fail "the snatcher layer is not built ($BUILD/tools/dirsnatch.so)"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
SNATCHED="$T/snatched.log"
W="$T/receiver-snatch"
cat > "$W" <<EOT
#!/bin/sh
DIRSNATCH_ROOT='$(cd "$T/bronze" && pwd -P)' DIRSNATCH_LOG='$SNATCHED' LD_PRELOAD='$BUILD/tools/dirsnatch.so' \\
ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}verify_asan_link_order=0" exec '$RECEIVER' "\$@"
EOT
chmod +x "$W"
RECEIVER="$W"
start_receiver
S="$T/src/data"
mkdir -p "$S"
write_agent_config dev1 "$S"
total=0
for r in 0 1 2 3; do
    # rounds 0 and 2: 40 directories of 12 events (batches of 480 files); 1 and 3: 4 of 2 (8 files)
    nd=40 ne=12
    [ $((r % 2)) = 1 ] && nd=4 ne=2
    d=0
    while [ $d -lt $nd ]; do
        gen_events "$S/r$r/d$d" $ne
        [ $r -ge 2 ] && mkdir -p "$T/bronze/dev1/data/r$r/d$d" # there before, empty
        d=$((d + 1))
    done
    ship dev1 > /dev/null
    want=$((nd * ne))
    total=$((total + want))
    [ "$(field dev1 files)" = $want ] || { cat "$T/dev1.out"; fail "round $r: $(field dev1 files) files shipped, want $want"; }
    [ "$(field dev1 files_refused)" = 0 ] && [ "$(field dev1 batches_replayed)" = 0 ] ||
        { cat "$T/dev1.out"; fail "round $r: files refused or batches shipped again"; }
done
same_tree "$S" "$(landed_root dev1)/data"
n=$(find "$(landed_root dev1)/data" -type f | wc -l)
[ "$n" = "$total" ] || fail "$n files landed, want $total"
[ "$(count_tmp "$T/bronze")" = 0 ] || fail "temporary files left in bronze"
if grep -E 'error|failed|refused' "$T/receiver.log" > "$T/bad.log"; then
    cat "$T/bad.log"; fail "the receiver logged errors"
fi
if grep -E 'error|refused|again' "$T/dev1.err" > "$T/abad.log"; then
    cat "$T/abad.log"; fail "the agent logged errors or retries"
fi
creates=$(grep -c '^create ' "$SNATCHED" || true)
mkdirs=$(grep -c '^mkdir ' "$SNATCHED" || true)
[ "$creates" -gt 0 ] || fail "no directory was removed before a create (the race was not met)"
[ "$mkdirs" -gt 0 ] || fail "no directory was removed right after it was made (the race was not met)"
remade=$(grep -o '[0-9]* directories made again' "$T/receiver.log" | awk '{ s += $1 } END { print s + 0 }')
[ "$remade" -gt 0 ] || fail "no directory was made again (the receiver's landed lines count none)"
pass "$total small files in 4 ships, directories removed $creates times before a create and $mkdirs times right after a mkdir: all landed once, byte-identical, no batch failed ($remade made again)"
