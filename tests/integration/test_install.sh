#!/bin/sh
# run-tests: alone: make install and uninstall run in the tree the other suites run from
# make install into a staging root, then build and run an embedder program
# against the installed header, pkg-config file and shared library, and
# check that make uninstall removes everything.
. "$(dirname "$0")/lib.sh"
top=$(cd "$(dirname "$0")/../.." && pwd)
root="$T/root"
# The build's own sanitizer, so that a source changed since it was built is rebuilt as the rest of it was
san_var=""
nm "$AGENT" 2>/dev/null | grep -q __asan_init && san_var="SANITIZE=1"
tsan_build && san_var="SANITIZE=thread"
make -s -C "$top" BUILD="$BUILD" $san_var install PREFIX=/usr DESTDIR="$root" > "$T/install.log" 2>&1 || { cat "$T/install.log"; fail "make install"; }
for f in usr/bin/ingest-agent usr/bin/ingest-receiver usr/bin/ingestctl usr/include/ingest.h \
         usr/include/ingest/common.h usr/lib/libingest.a usr/lib/libingest.so.0 usr/lib/pkgconfig/libingest.pc \
         usr/share/man/man8/ingest-agent.8 usr/share/man/man8/ingest-receiver.8 usr/share/man/man1/ingestctl.1 \
         usr/share/man/man5/ingest.yaml.5; do
    [ -e "$root/$f" ] || fail "not installed: $f"
done
grep -q '^prefix=/usr$' "$root/usr/lib/pkgconfig/libingest.pc" || fail "libingest.pc does not say prefix=/usr"
[ "$(readlink "$root/usr/lib/libingest.so.0")" = libingest.so.0.1.0 ] || fail "soname link"
cat > "$T/embed.c" <<'EOT'
#include <ingest.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    if (ingest_version_number() != INGEST_VERSION_NUMBER) return 1;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_chunker *c = NULL;
    if (ctx == NULL || ingest_chunker_create(ctx, NULL, &c) != 0) return 1;
    static unsigned char buf[1 << 20];
    for (size_t i = 0; i < sizeof(buf); i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    size_t used = 0, off = 0, n = 0;
    while (off < sizeof(buf) && ingest_chunker_scan(c, buf + off, sizeof(buf) - off, &used) == 1) { off += used; n++; }
    if (ingest_chunker_finish(c) > 0) n++;
    printf("%s %zu chunks\n", ingest_version_string(), n);
    ingest_chunker_destroy(c);
    ingest_ctx_destroy(ctx);
    return n > 0 ? 0 : 1;
}
EOT
# A sanitizer build of the library needs the embedder built with the same runtime.
san=""
nm -D "$root/usr/lib/libingest.so.0" 2>/dev/null | grep -q __asan_ && san="-fsanitize=address,undefined"
nm -D "$root/usr/lib/libingest.so.0" 2>/dev/null | grep -q __tsan_ && san="-fsanitize=thread"
PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_PATH="$root/usr/lib/pkgconfig" \
    cc -std=c11 -Wall -Werror $san -o "$T/embed" "$T/embed.c" $(PKG_CONFIG_SYSROOT_DIR="$root" PKG_CONFIG_PATH="$root/usr/lib/pkgconfig" pkg-config --cflags --libs libingest) \
    || fail "embedder does not build against the installed library"
out=$(LD_LIBRARY_PATH="$root/usr/lib" "$T/embed") || fail "embedder failed"
echo "$out" | grep -q '^0\.1\.0 [0-9][0-9]* chunks$' || fail "unexpected output: $out"
ldd "$T/embed" | grep -q libingest.so.0 || fail "embedder is not linked to the shared library"
pass "embedder builds and runs against the installed library ($out)"
make -s -C "$top" BUILD="$BUILD" $san_var uninstall PREFIX=/usr DESTDIR="$root" > /dev/null 2>&1 || fail "make uninstall"
left=$(find "$root" -type f -o -type l | wc -l)
[ "$left" -eq 0 ] || fail "uninstall left $left files"
pass "uninstall removes everything"
