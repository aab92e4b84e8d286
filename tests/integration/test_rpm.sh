#!/bin/sh
# run-tests: alone: it may install rpm with apt-get, and builds with rpmbuild
# make rpm's recipe: packaging/rpm/build.sh builds the five RPMs with
# rpmbuild and checks their file lists against packaging/rpm/files.expected.
# rpmbuild comes from Debian's rpm package (installed when root); skipped,
# saying why, when it is missing and cannot be installed, and under a
# sanitizer build (the packages are built without).
. "$(dirname "$0")/lib.sh"
top=$(cd "$(dirname "$0")/../.." && pwd)
nm "$AGENT" 2>/dev/null | grep -qE '__(asan|tsan)_init' && { echo "skip: sanitizer build; the plain make check runs this test"; exit 0; }
if ! command -v rpmbuild > /dev/null 2>&1; then
    [ "$(id -u)" = 0 ] && sh "$top/packaging/install-deps.sh" rpm > /dev/null 2>&1
    command -v rpmbuild > /dev/null 2>&1 || { echo "skip: rpmbuild missing (apt-get install rpm, as root)"; exit 0; }
fi
sh "$top/packaging/rpm/build.sh" "$T/rpm" > "$T/rpm.out" 2>&1 || { cat "$T/rpm.out"; fail "packaging/rpm/build.sh"; }
grep -q 'file lists as expected' "$T/rpm.out" || fail "file lists not checked"
[ "$(ls "$T"/rpm/RPMS/*/*.rpm | wc -l)" = 5 ] || fail "not 5 packages"
r=$(ls "$T"/rpm/RPMS/*/ingest-agent-*.rpm)
rpm -qp --configfiles "$r" 2>/dev/null | grep -qx /etc/ingest/agent.yaml || fail "agent.yaml is not a config file of ingest-agent"
rpm -qp --scripts "$r" 2>/dev/null | grep -q 'keygen /etc/ingest/device' || fail "ingest-agent's %post makes no key"
pass "make rpm's recipe: 5 packages, file lists as packaging/rpm/files.expected"
