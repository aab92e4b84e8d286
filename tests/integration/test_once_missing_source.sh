#!/bin/sh
# `ingest-agent --once` with a source that is not there (a typo, a disk not
# mounted) or is a file: each is named with its path, the other sources
# ship, and the run exits 1 (it used to exit 0 with a warning that named
# the source only, so a cron job never heard of it); once every source is
# there, it exits 0.  And --all without --once is a usage error.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
mkdir -p "$S"
gen_log "$S/a.log" 3000 1
printf 'not a directory\n' > "$T/src/afile"
write_agent_config dev1 "$S"
sed -i "s|^  - path: .*|&\n  - path: $T/src/late\n  - path: $T/src/afile|" "$T/dev1.yaml"
rc=0
"$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" || rc=$?
[ "$rc" = 1 ] || { cat "$T/dev1.err"; fail "--once with a missing source exited $rc, not 1"; }
grep -q "error.*source late: $T/src/late does not exist" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the missing source is not named with its path"; }
grep -q "error.*source afile: $T/src/afile is not a directory" "$T/dev1.err" || { cat "$T/dev1.err"; fail "the source that is a file is not named"; }
grep -q "2 directories could not be walked" "$T/dev1.err" || { cat "$T/dev1.err"; fail "no closing line for the directories not walked"; }
cmp "$S/a.log" "$T/bronze/dev1/data/a.log" || fail "the source that is there did not ship"
pass "--once names a missing source and one that is a file with their paths, ships the others and exits 1"

rm "$T/src/afile"
mkdir -p "$T/src/late" "$T/src/afile"
gen_log "$T/src/late/b.log" 2000 2
ship dev1
cmp "$T/src/late/b.log" "$T/bronze/dev1/late/b.log" || fail "late/b.log did not land"
pass "once every source is there, --once exits 0"

# --all means something only with --once: without it, a usage error rather than a daemon that ignores it
rc=0
"$AGENT" --config "$T/dev1.yaml" --all > "$T/all.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$T/all.out"; fail "--all without --once exited $rc, not 2"; }
grep -q "\-\-all goes with \-\-once" "$T/all.out" || { cat "$T/all.out"; fail "the refusal of --all does not say why"; }
pass "--all without --once is a usage error"
