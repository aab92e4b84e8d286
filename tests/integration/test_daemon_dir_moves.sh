#!/bin/sh
# Directories moved out of a source while the daemon watches it:
#   - their watches go (they leaked: watches ran out after enough moves,
#     the daemon fell back to rescans for good, and a stale watch mapped
#     events of the tree outside to paths inside);
#   - a directory made in the place of one moved out, then the old one
#     moved back under another name: the new one's files land from their
#     own events (the rename of the old one renamed the new one's watch too,
#     and its files waited for the next rescan, an hour here);
#   - moves read in one go (out and back, a directory flattened, one brought
#     back inside another) keep the watches of what is still in the sources.
. "$(dirname "$0")/lib.sh"
setup_keys
write_receiver_config 'layout: "{device}/{path}"'
start_receiver
S="$T/src/data"
O="$T/outside"
mkdir -p "$S" "$O"
write_agent_config dev1 "$S" 'batch:
  max_wait: 100ms
rescan_interval: 1h'
sed -i "s|^  - path: .*|&\n    settle: 200ms|" "$T/dev1.yaml"
start_daemon dev1
# watches: the daemon's inotify watches (its fdinfo)
watches() { cat /proc/"$DAEMON_PID"/fdinfo/* 2>/dev/null | grep -c "^inotify wd:" || true; }
# landed FILE: wait until data/FILE landed equal to its source copy in $T/expect/FILE
landed() { wait_same "$T/expect/$1" "$T/bronze/dev1/data/$1" 200 "$T/dev1.err" "data/$1 did not land within 10 s"; }
mkdir -p "$T/expect"
for k in $(seq 1 20); do mkdir -p "$S/day$k/sub"; done
i=0
while [ "$(watches)" -lt 41 ]; do
    i=$((i + 1)); [ $i -gt 200 ] && fail "the 40 new directories were not watched: $(watches) watches"
    sleep 0.05
done
for k in $(seq 1 20); do mv "$S/day$k" "$O/"; done
i=0
while [ "$(watches)" -gt 1 ]; do
    i=$((i + 1)); [ $i -gt 100 ] && fail "$(watches) watches left after 40 directories moved out of the source"
    sleep 0.05
done
pass "40 directories moved out of the source: their watches went"

mkdir "$S/d1"
sleep 0.3
printf 'one\n' > "$S/d1/a.txt"
mkdir -p "$T/expect/d1" "$T/expect/d2"
cp "$S/d1/a.txt" "$T/expect/d1/a.txt"
landed d1/a.txt
mv "$S/d1" "$O/d1"
mkdir "$S/d1"
mv "$O/d1" "$S/d2"
sleep 0.5
printf 'late\n' > "$S/d1/late.txt"
printf 'b\n' > "$S/d2/b.txt"
cp "$S/d1/late.txt" "$T/expect/d1/late.txt"
cp "$S/d2/b.txt" "$T/expect/d2/b.txt"
landed d1/late.txt
landed d2/b.txt
pass "a directory made where one was moved out, the old one moved back as another: both ship from their events"

# moves the daemon reads in one go (stopped meanwhile): a directory moved out and back under its name, a
# directory flattened into its parent's name, one moved out and then brought back inside another: each keeps
# (or gets) its watches, and files written in it later land from their own events
mkdir -p "$S/e1" "$S/b/a/sub" "$S/m/inner" "$O/x"
sleep 0.5
kill -STOP "$DAEMON_PID"
mv "$S/e1" "$O/e1"
mv "$O/e1" "$S/e1"
mv "$S/b/a" "$S/a"
rmdir "$S/b"
mv "$S/a" "$S/b"
mv "$S/m" "$O/x/m"
mv "$O/x" "$S/p"
kill -CONT "$DAEMON_PID"
sleep 1
mkdir -p "$T/expect/e1" "$T/expect/b/sub" "$T/expect/p/m/inner"
for f in e1/one.txt b/sub/two.txt p/m/inner/three.txt; do
    printf '%s\n' "$f" > "$S/$f"
    cp "$S/$f" "$T/expect/$f"
done
for f in e1/one.txt b/sub/two.txt p/m/inner/three.txt; do landed "$f"; done
# renamed within the source, then moved out of it, in one read: its watches (and its subdirectory's) go
w0=$(($(watches) + 2))
mkdir -p "$S/r1/rsub"
i=0
while [ "$(watches)" -lt "$w0" ]; do
    i=$((i + 1)); [ $i -gt 100 ] && fail "r1 and r1/rsub were not watched"
    sleep 0.05
done
kill -STOP "$DAEMON_PID"
mv "$S/r1" "$S/r2"
mv "$S/r2" "$O/r2"
kill -CONT "$DAEMON_PID"
i=0
while [ "$(watches)" -gt $((w0 - 2)) ]; do
    i=$((i + 1)); [ $i -gt 100 ] && fail "$(watches) watches (of $w0) after a directory renamed and moved out in one read"
    sleep 0.05
done
kill "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
pass "moved out and back, flattened, brought back inside another, in one read: their files ship from their events; renamed then moved out: its watches go"
