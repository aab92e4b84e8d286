#!/bin/sh
# Symlinks as symlinks (issue 15, `sources[].symlinks`), with the real
# receiver and agent.  A source holds a regular file, a relative symlink to
# it, a symlink to /etc/passwd, one that climbs out of the source
# (../../../outside/secret) and one to a directory outside.
# 1. Default (skip): only the regular file ships; the 4 links are counted.
# 2. symlinks: ship: the 4 land as symlinks with byte-identical targets
#    (readlink), their manifest mode is S_IFLNK|0777; nothing outside bronze
#    is written or changed (the outside files, /etc/passwd).
# 3. A second ship sends nothing; `ingestctl verify` passes on the tree
#    (links checked by their target).
# 4. A changed target ships a new version (version 2, the new target).
# 5. ingest-receiver --rebuild-index leaves the links out of the chunk index
#    (never stat'ed through): `ingestctl index check` is clean.
# 6. A directory where a landed symlink is (dirlink/f) is refused, not written
#    through the link; a regular file replacing a link lands over it.
# 7. The daemon, with spool: copy and after_ship: delete: a link present at
#    start and one made while it runs (found by inotify: rescan_interval is
#    1h) land as symlinks; the regular file is deleted after its ack, the
#    links are left in the source.
# 8. A landed directory replaced by a symlink (say, by hand, to a copy outside
#    bronze): the core never resolves a landed path through it: verify names
#    the file under it missing, the index rebuild leaves it out.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
B="$T/bronze"
S="$T/src/sl"
O="$T/outside"
mkdir -p "$S/sub" "$O/dir"
printf 'regular a\n' > "$S/a.txt"
printf 'outside, never to be touched\n' > "$O/secret"
printf 'outside too\n' > "$O/dir/x"
ln -s a.txt "$S/rel"
ln -s /etc/passwd "$S/sub/abs"
ln -s ../../../outside/secret "$S/sub/up"
ln -s "$O/dir" "$S/dirlink"
outside_state() { (cd "$O" && find . -printf '%p %y %s %T@\n' | LC_ALL=C sort && find . -type f -exec sha256sum {} +) > "$1"; }
outside_state "$T/outside.before"
passwd_sum=$(sha256sum /etc/passwd)

# 1. the default: skipped and counted
write_agent_config dev1 "$S"
ship dev1
[ "$(field dev1 files)" = 1 ] || fail "default: shipped $(field dev1 files) files, expected the regular one"
[ "$(field dev1 skipped_symlinks)" = 4 ] || fail "default: skipped_symlinks=$(field dev1 skipped_symlinks), expected 4"
[ -z "$(find "$B/dev1" ! -type f ! -type d)" ] || fail "default: something not a regular file landed"
pass "symlinks: skip (the default): the regular file lands, the 4 symlinks are counted"

# 2. symlinks: ship
mkdir -p "$T/astate-dev2"
cat > "$T/dev2.yaml" <<EOT
device:
  id: dev2
  key: keys/dev2.key
core:
  address: $(cat "$T/receiver.addr")
  receiver_key: keys/receiver.pub
dedup_key: keys/fleet.dedup
sources:
  - path: $S
    symlinks: ship
state_dir: astate-dev2
EOT
ship dev2
[ "$(field dev2 files)" = 5 ] || fail "ship: shipped $(field dev2 files) files, expected 1 file and 4 symlinks"
[ "$(field dev2 skipped_symlinks)" = 0 ] || fail "ship: skipped_symlinks=$(field dev2 skipped_symlinks)"
L="$B/dev2/sl"
cmp -s "$S/a.txt" "$L/a.txt" || fail "a.txt differs"
for l in rel sub/abs sub/up dirlink; do
    [ -L "$L/$l" ] || fail "$l did not land as a symlink"
    [ "$(readlink "$L/$l")" = "$(readlink "$S/$l")" ] || fail "$l: target '$(readlink "$L/$l")', expected '$(readlink "$S/$l")'"
done
nlink=$(cat "$B"/_manifests/dev2/*.jsonl | grep -c '"mode":41471')
[ "$nlink" = 4 ] || fail "$nlink manifest records with mode S_IFLNK|0777 (41471), expected 4"
[ "$(find "$B" -type l | wc -l)" = 4 ] || fail "$(find "$B" -type l | wc -l) symlinks under bronze, expected 4"
outside_state "$T/outside.after"
cmp -s "$T/outside.before" "$T/outside.after" || { diff "$T/outside.before" "$T/outside.after"; fail "something outside bronze changed"; }
[ "$(sha256sum /etc/passwd)" = "$passwd_sum" ] || fail "/etc/passwd changed"
pass "symlinks: ship: 4 symlinks land with the same targets (mode 41471 in the manifest); nothing outside bronze changed"

# 3. nothing to send again; verify
ship dev2
[ "$(field dev2 files)" = 0 ] || fail "second ship sent $(field dev2 files) files"
[ "$(field dev2 unchanged)" = 5 ] || fail "second ship: unchanged=$(field dev2 unchanged), expected 5"
"$CTL" verify --bronze "$B" --dedup-key "$T/keys/fleet.dedup" > "$T/verify.out" 2> "$T/verify.err" || {
    cat "$T/verify.out" "$T/verify.err"; fail "verify failed on the tree"; }
grep -q '"missing":0,"changed":0,"corrupt":0,"skipped":0' "$T/verify.out" || fail "verify: $(cat "$T/verify.out")"
files=$(sed 's/.*"files":\([0-9]*\).*/\1/' "$T/verify.out")
[ "$files" = 6 ] || fail "verify checked $files files, expected 6 (a.txt of dev1 and dev2, 4 symlinks)"
pass "a second ship sends nothing; ingestctl verify checks the 4 symlinks by their targets: clean"

# 4. a changed target is a new version
rm "$S/rel"
ln -s sub/../a.txt "$S/rel"
ship dev2
[ "$(field dev2 files)" = 1 ] || fail "changed target: shipped $(field dev2 files) files, expected 1"
[ "$(readlink "$L/rel")" = "sub/../a.txt" ] || fail "rel: target '$(readlink "$L/rel")' after the change"
grep -h '"path":"sl/rel"' "$B"/_manifests/dev2/*.jsonl | grep -q '"version":2' || fail "rel: no version 2 in the manifests"
"$CTL" verify --bronze "$B" --dedup-key "$T/keys/fleet.dedup" > "$T/verify.out" 2> "$T/verify.err" || {
    cat "$T/verify.out" "$T/verify.err"; fail "verify failed after the change"; }
pass "a changed target ships as version 2 of the link; verify still clean"

# 5. the index rebuild never follows them
stop_receiver
: > "$T/receiver.log"
RECV_ARGS=--rebuild-index start_receiver
wait_log "index rebuilt from the manifests"
"$CTL" index check "$T/rstate" --bronze "$B" > "$T/check.out" || { cat "$T/check.out"; fail "index check not clean after --rebuild-index"; }
grep -q "bad 0, stale 0" "$T/check.out" || fail "index check: $(cat "$T/check.out")"
grep -q "files 2," "$T/check.out" || fail "index check: $(cat "$T/check.out") (expected the 2 regular files only)"
pass "--rebuild-index indexes the 2 regular files, not the symlinks: $(tail -1 "$T/check.out")"

# 6. a directory where a symlink landed is refused; a file over a link replaces it
rm "$S/dirlink"
mkdir "$S/dirlink"
printf 'must not go through the link\n' > "$S/dirlink/f"
rm "$S/sub/abs"
printf 'now a regular file\n' > "$S/sub/abs"
write_agent_config dev1 "$S" # (the address changed with the restart)
sed -i 's/^  - path: .*/&\n    symlinks: ship/; s/dev1/dev2/g' "$T/dev1.yaml"
mv "$T/dev1.yaml" "$T/dev2.yaml"
rc=0
"$AGENT" --config "$T/dev2.yaml" --once > "$T/dev2.out" 2> "$T/dev2.err" || rc=$?
cat "$T/dev2.out"
[ "$rc" = 3 ] || { cat "$T/dev2.err"; fail "agent exit $rc, expected 3 (a file refused)"; }
[ "$(field dev2 files_refused)" = 1 ] || fail "files_refused=$(field dev2 files_refused), expected 1"
grep -q 'dirlink/f.*symlink' "$T/dev2.err" || { cat "$T/dev2.err"; fail "the refusal does not name the symlink on the way"; }
[ ! -L "$L/sub/abs" ] && cmp -s "$S/sub/abs" "$L/sub/abs" || fail "sub/abs did not land as a regular file over the link"
[ -L "$L/dirlink" ] || fail "the landed dirlink symlink is gone"
outside_state "$T/outside.after"
cmp -s "$T/outside.before" "$T/outside.after" || { diff "$T/outside.before" "$T/outside.after"; fail "something outside bronze changed"; }
[ "$(sha256sum /etc/passwd)" = "$passwd_sum" ] || fail "/etc/passwd changed"
pass "dirlink/f is refused (a symlink on the way), a regular file lands over a link; outside bronze unchanged"

# 7. the daemon: spool copy, after_ship delete, a link made while it runs
S2="$T/src/s2"
mkdir -p "$S2"
printf 'daemon file\n' > "$S2/a.txt"
ln -s a.txt "$S2/l"
cat > "$T/dev1d.yaml" <<EOT
device:
  id: dev1
  key: keys/dev1.key
core:
  address: $(cat "$T/receiver.addr")
  receiver_key: keys/receiver.pub
dedup_key: keys/fleet.dedup
sources:
  - path: $S2
    symlinks: ship
    settle: 0
    spool: copy
    after_ship: delete
state_dir: astate-dev1
rescan_interval: 1h
batch:
  max_wait: 200ms
EOT
"$AGENT" --config "$T/dev1d.yaml" > "$T/dev1d.out" 2> "$T/dev1d.err" &
AGENT_PID=$!
trap 'kill "$AGENT_PID" 2>/dev/null || true; cleanup' EXIT
D="$B/dev1/s2"
wait_for() { i=0; while ! eval "$1"; do i=$((i + 1)); [ $i -gt 300 ] && { cat "$T/dev1d.err"; fail "daemon: $2"; }; sleep 0.05; done; }
wait_for '[ -L "$D/l" ] && [ -f "$D/a.txt" ]' "the link present at start did not land"
[ "$(readlink "$D/l")" = a.txt ] || fail "daemon: l's target is '$(readlink "$D/l")'"
wait_for '[ ! -e "$S2/a.txt" ]' "a.txt was not deleted after its ack"
[ -L "$S2/l" ] || fail "daemon: after_ship touched the symlink"
ln -s /etc/shadow "$S2/n"
wait_for '[ -L "$D/n" ]' "the link made while it runs did not land (inotify)"
[ "$(readlink "$D/n")" = /etc/shadow ] || fail "daemon: n's target is '$(readlink "$D/n")'"
[ -L "$S2/n" ] || fail "daemon: after_ship touched the new symlink"
kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true
[ -z "$(find "$T/astate-dev1/spool" -mindepth 1 ! -type d 2>/dev/null)" ] || { find "$T/astate-dev1/spool"; fail "daemon: the spool was not emptied"; }
pass "the daemon ships links through the spool as links (one found by inotify); after_ship deletes the file, leaves the links"

# 8. a symlink on the way of landed paths is never resolved through
stop_receiver
mv "$L/sub" "$T/sub-moved"
ln -s "$T/sub-moved" "$L/sub"
rc=0
"$CTL" verify --bronze "$B" --dedup-key "$T/keys/fleet.dedup" > "$T/verify.out" 2> "$T/verify.err" || rc=$?
[ "$rc" = 1 ] || { cat "$T/verify.out" "$T/verify.err"; fail "verify exit $rc with a symlink on the way, expected 1"; }
grep -q '"problem":"missing","device":"dev2","landed":"dev2/sl/sub/abs".*symlink' "$T/verify.out" ||
    { cat "$T/verify.out"; fail "verify does not name sub/abs missing through the symlink"; }
: > "$T/receiver.log"
RECV_ARGS=--rebuild-index start_receiver
wait_log "index rebuilt from the manifests"
"$CTL" index check "$T/rstate" --bronze "$B" > "$T/check.out" || { cat "$T/check.out"; fail "index check after the rebuild"; }
grep -q "files 3," "$T/check.out" || fail "index check: $(cat "$T/check.out") (expected 3 files: sub/abs left out)"
pass "a symlink on the way: verify says sub/abs is missing, the index rebuild leaves it out"
