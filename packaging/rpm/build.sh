#!/bin/sh
# Build the RPM packages (make rpm) into OUTDIR/RPMS: the source tarball
# from this tree, rpmbuild -bb --nodeps with packaging/rpm/ingest.spec, then
# the file list of every package checked against packaging/rpm/files.expected
# (LIBDIR there stands for rpm's %{_libdir}, and include/ingest/*.h for the
# public headers, which grow).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
spec="$top/packaging/rpm/ingest.spec"
version=$(sed -n 's/^Version: *//p' "$spec")
code=$(sed -n 's/^#define INGEST_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$top/include/ingest/common.h" | paste -sd.)
[ "$version" = "$code" ] || { echo "build.sh: ingest.spec says $version, include/ingest/common.h $code" >&2; exit 1; }
rm -rf "$out/BUILD" "$out/BUILDROOT" "$out/RPMS" "$out/SOURCES" "$out/SRPMS"
mkdir -p "$out/SOURCES" "$out/stage/ingest-$version"
(cd "$top" && tar cf - Makefile libingest.pc.in README.md agent libingest include conf docs packaging/systemd) |
    (cd "$out/stage/ingest-$version" && tar xf -)
tar -C "$out/stage" -czf "$out/SOURCES/ingest-$version.tar.gz" "ingest-$version"
rm -rf "$out/stage"
echo "rpm: building $version (log: $out/build.log)"
rpmbuild -bb --nodeps --define "_topdir $out" "$spec" > "$out/build.log" 2>&1 || {
    tail -40 "$out/build.log" >&2; echo "rpm: rpmbuild failed; see $out/build.log" >&2; exit 1; }
libdir=$(rpm --eval '%{_libdir}')
for r in "$out"/RPMS/*/*.rpm; do
    n=$(rpm -qp --qf '%{NAME}' "$r" 2>/dev/null)
    rpm -qlp "$r" 2>/dev/null | sed "s|^$libdir/|LIBDIR/|" | sed "s|^|$n |"
done | sed 's|^\(libingest-devel /usr/include/ingest/\).*\.h$|\1*.h|' | sort -u > "$out/files.list"
if ! diff -u "$top/packaging/rpm/files.expected" "$out/files.list"; then
    echo "rpm: the packages' files differ from packaging/rpm/files.expected (above)" >&2
    exit 1
fi
echo "rpm: file lists as expected ($(wc -l < "$out/files.list") files)"
ls "$out"/RPMS/*/*.rpm
