#!/bin/sh
# run-tests: alone: it installs and purges the packages system-wide
# The Debian packages, end to end, on this machine (root only):
#   1. make them (packaging/deb/build.sh: dpkg-buildpackage, debhelper 13)
#      and install them with dpkg -i: users, state directories, keys made
#      (mode and group checked), conffiles registered;
#   2. --check-config of both installed programs on the installed default
#      configs; systemd-analyze verify and security --offline of the units;
#   3. a second dpkg -i leaves every key byte-identical;
#   4. the receiver and the agent run as their service users from their
#      units' ExecStartPre/ExecStart lines (no systemd: setpriv), send
#      READY=1 to NOTIFY_SOCKET, ship a small tree over loopback (landed
#      byte-identical, owned by ingest-receiver) and take SIGHUP (ExecReload);
#   5. dpkg -r keeps keys and state; dpkg --purge removes every file the
#      packages and their scripts made, except what purge documents it
#      leaves: a bronze root that holds landed files, and the users.
# Skipped, saying why, when not root, under a sanitizer build (the packages
# are built without), or when any of the packages' paths is already on the
# machine (a real installation is never touched).
. "$(dirname "$0")/lib.sh"
top=$(cd "$(dirname "$0")/../.." && pwd)
PKGS="ingest-agent ingest-receiver ingestctl libingest0 libingest-dev"
skip() { echo "skip: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "not root: installing packages needs root (run make check as root)"
nm "$AGENT" 2>/dev/null | grep -qE '__(asan|tsan)_init' && skip "sanitizer build: the packages are built without sanitizers; the plain make check runs this test"
for p in $PKGS; do
    case $(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true) in
        ""|not-installed) ;;
        *) skip "package $p is already on this machine; not touching it" ;;
    esac
done
for d in /etc/ingest /var/lib/ingest-agent /var/lib/ingest-receiver /srv/bronze; do
    [ ! -e "$d" ] || skip "$d exists; not touching a real installation"
done
if ! command -v dpkg-buildpackage >/dev/null 2>&1 || ! command -v dh >/dev/null 2>&1 || ! command -v setpriv >/dev/null 2>&1; then
    sh "$top/packaging/install-deps.sh" deb || skip "dpkg-buildpackage or debhelper missing and could not be installed"
fi

RPID=""; APID=""; SOCAT_PID=""
pkg_cleanup() {
    for p in $APID $RPID $SOCAT_PID; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    dpkg --purge $PKGS > /dev/null 2>&1 || true
    rm -rf /srv/bronze
    cleanup
}
trap pkg_cleanup EXIT
chmod 0755 "$T"   # the service users read the sources and reach the notify socket below it

# What exists before, among paths with "ingest" in their name (plus /srv/bronze).
snapshot() {
    find /etc /usr /lib /var /srv /opt -xdev \( -path /var/lib/dpkg -o -path /var/cache -o -path /var/log \
        -o -path /var/tmp -o -path /var/lib/apt \) -prune -o \( -name '*ingest*' -o -path /srv/bronze \) -print \
        2>/dev/null | sort
}
snapshot > "$T/before.list"

# 1. build and install
sh "$top/packaging/deb/build.sh" "$T/deb" > "$T/build.out" 2>&1 || { cat "$T/build.out"; fail "the packages did not build"; }
debs=""
for p in $PKGS; do debs="$debs $(ls "$T/deb/${p}_"*.deb)"; done
dpkg -i $debs > "$T/install.out" 2>&1 || { cat "$T/install.out"; fail "dpkg -i failed"; }
grep -q 'public key is /etc/ingest/device.pub' "$T/install.out" || { cat "$T/install.out"; fail "the agent's first install does not say where its public key is"; }
grep -q '/etc/ingest/receiver.pub' "$T/install.out" || fail "the receiver's first install does not say where its public key is"
for u in ingest-agent ingest-receiver; do
    id "$u" > /dev/null 2>&1 || fail "no user $u"
    id -nG "$u" | grep -qw ingest || fail "$u is not in the group ingest"
    [ "$(stat -c %U:%a "/var/lib/$u")" = "$u:750" ] || fail "/var/lib/$u: $(stat -c %U:%a "/var/lib/$u")"
done
check_key() { # check_key FILE OWNER:GROUP MODE
    [ "$(stat -c %U:%G "$1")" = "$2" ] && [ "$(stat -c %a "$1")" = "$3" ] || fail "$1 is $(stat -c %U:%G:%a "$1"), want $2:$3"
}
check_key /etc/ingest/receiver.key root:ingest-receiver 640
check_key /etc/ingest/device.key root:ingest-agent 640
check_key /etc/ingest/dedup.key root:ingest 640
[ -s /etc/ingest/receiver.pub ] && [ -s /etc/ingest/device.pub ] || fail "public keys missing"
dpkg-query -W -f='${Conffiles}\n' ingest-agent | grep -q '/etc/ingest/agent.yaml' || fail "agent.yaml is not a conffile"
dpkg-query -W -f='${Conffiles}\n' ingest-receiver | grep -q '/etc/ingest/receiver.yaml' || fail "receiver.yaml is not a conffile"
for f in /usr/share/man/man8/ingest-agent.8.gz /usr/share/man/man8/ingest-receiver.8.gz /usr/share/man/man1/ingestctl.1.gz \
         /usr/share/man/man5/ingest.yaml.5.gz /usr/lib/sysusers.d/ingest-agent.conf /usr/lib/sysusers.d/ingest-receiver.conf \
         /usr/include/ingest.h /usr/lib/*/libingest.a /usr/lib/*/pkgconfig/libingest.pc /usr/lib/*/libingest.so.0; do
    [ -e "$f" ] || fail "not installed: $f"
done
pass "dpkg -i: users, state directories, keys (root:GROUP 0640), conffiles, man pages, library"

# 2. the installed programs on the installed default configs; the units
/usr/bin/ingest-agent --config /etc/ingest/agent.yaml --check-config || fail "installed agent.yaml does not check"
/usr/bin/ingest-receiver --config /etc/ingest/receiver.yaml --check-config || fail "installed receiver.yaml does not check"
pass "--check-config of both installed programs on the installed default configs"
UNITDIR=/lib/systemd/system
if command -v systemd-analyze > /dev/null 2>&1; then
    out=$(systemd-analyze verify "$UNITDIR/ingest-agent.service" "$UNITDIR/ingest-receiver.service" 2>&1) || fail "systemd-analyze verify: $out"
    [ -z "$out" ] || fail "systemd-analyze verify says: $out"
    for u in ingest-agent ingest-receiver; do
        e=$(systemd-analyze security --offline=true "$UNITDIR/$u.service" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
        [ -n "$e" ] || fail "no exposure figure for $u"
        awk -v e="$e" 'BEGIN { exit !(e <= 2.0) }' || fail "$u.service: exposure $e, more than 2.0"
        pass "$u.service: systemd-analyze security --offline exposure $e"
    done
    pass "systemd-analyze verify: both units clean"
else
    echo "note: systemd-analyze is not installed; units not analysed"
fi

# 3. a second installation never touches a key
sha256sum /etc/ingest/*.key /etc/ingest/*.pub > "$T/keys.sum"
dpkg -i $debs > "$T/reinstall.out" 2>&1 || { cat "$T/reinstall.out"; fail "second dpkg -i failed"; }
sha256sum -c --quiet "$T/keys.sum" || fail "a key changed on reinstallation"
check_key /etc/ingest/receiver.key root:ingest-receiver 640
pass "reinstallation keeps every key as it was"

# 4. run the units' commands by hand, as their users
command -v socat > /dev/null 2>&1 || fail "socat is needed (make deps installs it)"
mkdir -m 0755 "$T/run"
listen_notify() { # listen_notify FILE: collect NOTIFY_SOCKET datagrams into FILE
    rm -f "$T/run/notify"
    socat -u UNIX-RECV:"$T/run/notify" OPEN:"$1",creat,append &
    SOCAT_PID=$!
    i=0
    while [ ! -S "$T/run/notify" ]; do i=$((i + 1)); [ $i -gt 100 ] && fail "socat did not bind"; sleep 0.05; done
    chmod 0666 "$T/run/notify"
}
stop_notify() { kill "$SOCAT_PID" 2>/dev/null; wait "$SOCAT_PID" 2>/dev/null || true; SOCAT_PID=""; }
unit_line() { sed -n "s/^$2=//p" "$UNITDIR/$1.service"; }
# as_user USER: the command prefix for the unit's User=, Group= and
# SupplementaryGroups= (setpriv execs the command: $! is the program's pid)
as_user() { echo "setpriv --reuid=$1 --regid=$1 --init-groups --no-new-privs --"; }
wait_for() { # wait_for FILE PATTERN WHAT
    i=0
    while ! grep -q -- "$2" "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 300 ] && { tail -20 "$T/receiver.log" "$T/agent.log" 2>/dev/null || true; fail "$3"; }; sleep 0.05
    done
}
printf 'listen: 127.0.0.1:0\n' >> /etc/ingest/receiver.yaml
echo "gw-test $(cat /etc/ingest/device.pub)" >> /etc/ingest/authorized_devices
$(as_user ingest-receiver) $(unit_line ingest-receiver ExecStartPre) > /dev/null || fail "receiver ExecStartPre failed"
listen_notify "$T/receiver.notify"
NOTIFY_SOCKET="$T/run/notify" $(as_user ingest-receiver) $(unit_line ingest-receiver ExecStart) > "$T/receiver.log" 2>&1 &
RPID=$!
wait_for "$T/receiver.notify" READY=1 "the installed receiver sent no READY=1"
stop_notify
addr=$(sed -n 's/.*listening on \(127\.0\.0\.1:[0-9]*\);.*/\1/p' "$T/receiver.log")
[ -n "$addr" ] || fail "no listening address in the receiver's log"
pass "receiver runs as ingest-receiver from its ExecStart line, READY=1 sent, listening on $addr"

S="$T/src/data"
mkdir -p "$S/sub"
for i in 1 2 3 4 5; do gen_log "$S/f$i.log" $((i * 7000)) "$i"; done
head -c 300000 /dev/urandom > "$S/sub/blob.bin"
chmod -R a+rX "$T/src"
cat > /etc/ingest/agent.yaml <<EOT
device:
  id: gw-test
  key: device.key
core:
  address: $addr
  receiver_key: receiver.pub
dedup_key: dedup.key
sources:
  - path: $S
    settle: 200ms
state_dir: /var/lib/ingest-agent
batch:
  max_wait: 200ms
EOT
$(as_user ingest-agent) $(unit_line ingest-agent ExecStartPre) > /dev/null || fail "agent ExecStartPre failed"
listen_notify "$T/agent.notify"
NOTIFY_SOCKET="$T/run/notify" $(as_user ingest-agent) $(unit_line ingest-agent ExecStart) > "$T/agent.out" 2> "$T/agent.log" &
APID=$!
wait_for "$T/agent.notify" READY=1 "the installed agent sent no READY=1"
stop_notify
wait_for "$T/agent.log" "batch .* acked" "the agent acked no batch"
i=0
while [ "$(find /srv/bronze/gw-test -type f 2>/dev/null | wc -l)" -lt 6 ]; do
    i=$((i + 1)); [ $i -gt 300 ] && { tail -20 "$T/agent.log"; fail "not every file landed"; }; sleep 0.05
done
landed=$(dirname "$(find /srv/bronze/gw-test -name f1.log)")
same_tree "$S" "$landed"
[ -z "$(find /srv/bronze /var/lib/ingest-receiver ! -user ingest-receiver)" ] || fail "files not owned by ingest-receiver under /srv/bronze or its state"
[ -z "$(find /var/lib/ingest-agent ! -user ingest-agent)" ] || fail "files not owned by ingest-agent in its state"
/usr/bin/ingestctl status --config /etc/ingest/agent.yaml > "$T/status.out" || fail "ingestctl status of the installed agent"
pass "agent runs as ingest-agent from its ExecStart line, READY=1 sent; 6 files landed byte-identical under /srv/bronze"

# ExecReload is kill -HUP $MAINPID
reload() { sed -n 's/^ExecReload=//p' "$UNITDIR/$1.service" | sed "s/\$MAINPID/$2/"; }
$(reload ingest-receiver "$RPID")
wait_for "$T/receiver.log" "SIGHUP: authorized devices re-read" "the receiver did not re-read authorized_devices on ExecReload"
$(reload ingest-agent "$APID")
wait_for "$T/agent.log" "configuration reloaded" "the agent did not reload on ExecReload"
kill "$APID"; wait "$APID" || fail "the agent did not stop cleanly"; APID=""
kill "$RPID"; wait "$RPID" || fail "the receiver did not stop cleanly"; RPID=""
pass "ExecReload (SIGHUP) taken by both; both stop cleanly on SIGTERM"

# 5. remove keeps keys and state; purge removes them
dpkg -r $PKGS > "$T/remove.out" 2>&1 || { cat "$T/remove.out"; fail "dpkg -r failed"; }
sha256sum -c --quiet "$T/keys.sum" || fail "dpkg -r touched a key"
[ -d /var/lib/ingest-agent ] && [ -d /var/lib/ingest-receiver ] || fail "dpkg -r removed state"
[ -x /usr/bin/ingest-agent ] && fail "dpkg -r left the program"
dpkg --purge $PKGS > "$T/purge.out" 2>&1 || { cat "$T/purge.out"; fail "dpkg --purge failed"; }
snapshot > "$T/after.list"
# documented: a bronze root holding landed files stays
grep -v '^/srv/bronze' "$T/after.list" > "$T/after-nobronze.list" || true
grep -v '^/srv/bronze' "$T/before.list" > "$T/before-nobronze.list" || true
if ! cmp -s "$T/before-nobronze.list" "$T/after-nobronze.list"; then
    diff "$T/before-nobronze.list" "$T/after-nobronze.list" || true
    fail "purge left files behind (above)"
fi
[ -f "$landed/f1.log" ] || fail "purge removed landed data"
for u in ingest-agent ingest-receiver; do id "$u" > /dev/null 2>&1 || fail "purge removed user $u (documented to stay)"; done
pass "dpkg -r keeps keys and state; dpkg --purge leaves nothing but the landed data and the users"
