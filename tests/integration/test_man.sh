#!/bin/sh
# The man pages: each renders with groff -ww (every warning on) and with
# man -l without a word on stderr; ingest.yaml(5) lists every key of both
# programs' tables (as --help-config does), so a new key cannot miss the
# page; each program's page names every option its --help lists.
. "$(dirname "$0")/lib.sh"
MAN="$BUILD/man"
for p in ingest-agent.8 ingest-receiver.8 ingestctl.1 ingest.yaml.5; do
    [ -s "$MAN/$p" ] || fail "$MAN/$p was not built (make man)"
    LC_ALL=C.UTF-8 groff -ww -man -Tutf8 -z "$MAN/$p" 2> "$T/groff.err" || fail "groff failed on $p"
    [ ! -s "$T/groff.err" ] || { cat "$T/groff.err"; fail "groff -ww warns on $p"; }
    LC_ALL=C.UTF-8 MANWIDTH=80 MANROFFOPT=-ww man -l "$MAN/$p" > "$T/page.txt" 2> "$T/man.err" || fail "man -l failed on $p"
    [ ! -s "$T/man.err" ] || { cat "$T/man.err"; fail "man -l warns on $p"; }
    [ "$(wc -l < "$T/page.txt")" -gt 30 ] || fail "$p renders to almost nothing"
done
pass "4 pages render with groff -ww and man -l, no warnings"

# every key of the tables, in the key list of ingest.yaml(5)
n=0
for prog in "$AGENT" "$RECEIVER"; do
    "$prog" --help-config | sed -n 's/^  \([a-z_.[]*[]a-z_.]*\) .*/\1/p' > "$T/keys"
    [ -s "$T/keys" ] || fail "no keys from $prog --help-config"
    while read -r k; do
        roffk=$(printf '%s' "$k" | sed 's/-/\\-/g')
        grep -qxF ".B $roffk" "$MAN/ingest.yaml.5" || fail "key $k of $(basename "$prog") is not in ingest.yaml(5)"
        n=$((n + 1))
    done < "$T/keys"
done
[ "$n" -gt 50 ] || fail "only $n keys found"
pass "ingest.yaml(5) lists all $n keys of the two tables"

# every --option of each program's --help, in its page
for prog in ingest-agent ingest-receiver; do
    "$BUILD/$prog" --help | grep -o -- '--[a-z-]*' | sort -u > "$T/opts"
    for o in $(cat "$T/opts"); do
        ro=$(printf '%s' "$o" | sed 's/-/\\-/g')
        grep -qF -- "$ro" "$MAN/$prog.8" || fail "$prog --help lists $o, its man page does not"
    done
done
"$CTL" --help 2>&1 | sed -n 's/^  ingestctl \([a-z]*\).*/\1/p' | sort -u > "$T/cmds"
for c in $(cat "$T/cmds"); do grep -q "^\.B.* $c\b\|^\.B $c\b\|^\.BI $c\b\|^\.B ingestctl $c" "$MAN/ingestctl.1" || fail "ingestctl $c is not in ingestctl(1)"; done
pass "each program's options and ingestctl's commands are in their pages"
