#!/bin/sh
# Build the Debian packages (make deb): a staging copy of the tree under
# OUTDIR/ingest-VERSION, with packaging/deb/debian as its debian/ and the
# systemd units and sysusers.d files of packaging/systemd beside them, then
# dpkg-buildpackage -b.  The .deb files land in OUTDIR.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
deb="$top/packaging/deb/debian"
version=$(sed -n '1s/^ingest (\([^)]*\)).*/\1/p' "$deb/changelog")
code=$(sed -n 's/^#define INGEST_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' "$top/include/ingest/common.h" | paste -sd.)
[ "$version" = "$code" ] || { echo "build.sh: debian/changelog says $version, include/ingest/common.h $code" >&2; exit 1; }
src="$out/ingest-$version"
rm -rf "$src" "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
mkdir -p "$src"
(cd "$top" && tar cf - Makefile libingest.pc.in README.md agent libingest include conf docs) | (cd "$src" && tar xf -)
cp -R "$deb" "$src/debian"
for p in ingest-agent ingest-receiver; do
    cp "$top/packaging/systemd/$p.service" "$src/debian/$p.service"
    cp "$top/packaging/systemd/$p.sysusers" "$src/debian/$p.sysusers"
done
echo "deb: building $version in $src (log: $out/build.log)"
(cd "$src" && dpkg-buildpackage -b -us -uc -j"${JOBS:-2}") > "$out/build.log" 2>&1 || {
    tail -40 "$out/build.log" >&2; echo "deb: dpkg-buildpackage failed; see $out/build.log" >&2; exit 1; }
rm -rf "$src"
ls "$out"/*.deb
