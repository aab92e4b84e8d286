#!/usr/bin/env bash
# bench/scan.sh [BUILD]: the discovery benchmark (make bench-scan).
#
# Generates a tree of FILES empty files (ingestctl bench gen --profile
# empty) on a fresh loop-mounted ext4 when run as root (a directory under
# BENCH_DIR otherwise), then, RUNS times, `ingestctl bench scan TREE` (the
# sender's walk, time to the first batch, and `find TREE -type f | wc -l`
# in the same run), and once the real daemon: `ingest-agent` on TREE with a
# long settle and no core to reach, timed to the end of its first walk
# (which also journals every file as seen) with its peak private memory.
# Prints the medians as a small markdown table, with the raw lines, and
# writes it to SCAN_RESULTS (bench/results-scan.md; empty: stdout only).
# See bench/README.md.
#
# Environment: FILES (1000000), RUNS (3), BENCH_DIR (/tmp), LOOP (auto|0),
# SCAN_RESULTS, KEEP=1 keeps the work dir.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${1:-${BUILD:-build}}
case $BUILD in /*) ;; *) BUILD=$TOP/$BUILD ;; esac
FILES=${FILES:-1000000}
RUNS=${RUNS:-3}
LOOP=${LOOP:-auto}
CTL=$BUILD/ingestctl
AGENT=$BUILD/ingest-agent
SCAN_RESULTS=${SCAN_RESULTS-$HERE/results-scan.md}

die() { echo "bench-scan: $*" >&2; exit 1; }
say() { echo "bench-scan: $*" >&2; }
for p in "$CTL" "$AGENT"; do [ -x "$p" ] || die "$p not built (make BUILD=$BUILD all)"; done
case $RUNS in ''|*[!0-9]*|0) die "RUNS must be a positive integer" ;; esac
case $FILES in ''|*[!0-9]*|0) die "FILES must be a positive integer" ;; esac

W=$(mktemp -d "${BENCH_DIR:-/tmp}/ingest-scan.XXXXXX")
MNT=
APID=
cleanup() {
    trap - INT TERM
    [ -n "$APID" ] && kill "$APID" 2>/dev/null && wait "$APID" 2>/dev/null
    [ -n "$MNT" ] && { umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true; }
    if [ "${KEEP:-0}" = 1 ]; then say "work dir kept: $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$LOOP" != 0 ] && [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null; then
    # one inode per file plus room; 2 GiB of image (sparse) is plenty for empty files
    truncate -s 2G "$W/img"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 -N $((FILES + FILES / 10 + 10000)) "$W/img" >/dev/null
    mkdir "$W/mnt"
    mount -o loop "$W/img" "$W/mnt"
    MNT=$W/mnt
    TREE=$MNT/tree
    FS_KIND="a fresh loop-mounted ext4, image on $(df --output=target "$W" | tail -1)"
else
    TREE=$W/tree
    FS_KIND="a directory under $W (not root: no loop mount)"
fi

say "generating $FILES empty files in $TREE"
"$CTL" bench gen --profile empty --files "$FILES" "$TREE" >/dev/null
sync

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

: >"$W/scan.jsonl"
for r in $(seq 1 "$RUNS"); do
    "$CTL" bench scan "$TREE" | tee -a "$W/scan.jsonl" >&2 || die "bench scan failed (run $r)"
done

# The real daemon: nothing is stable for an hour, no core answers, so its
# first walk is discovery alone (every file stat'ed, looked up in the file
# table and journal, and journaled as seen).
"$CTL" keygen "$W/dev" >/dev/null
"$CTL" keygen "$W/core" >/dev/null
"$CTL" keygen --dedup "$W/dedup.key" >/dev/null
cat >"$W/agent.yaml" <<EOF
device:
  id: bench-scan
  key: $W/dev.key
core:
  address: 127.0.0.1:1
  receiver_key: $W/core.pub
dedup_key: $W/dedup.key
sources:
  - path: $TREE
    settle: 1h
state_dir: $W/state
rescan_interval: 1h
status:
  socket: $W/agent.sock
EOF
mkdir -p "$W/state"
"$AGENT" --config "$W/agent.yaml" 2>"$W/agent.log" &
APID=$!
peak_anon=0
peak_rss=0
walk=
while kill -0 "$APID" 2>/dev/null; do
    if [ -r "/proc/$APID/status" ]; then
        a=$(awk '/^RssAnon:/ { print $2 }' "/proc/$APID/status" 2>/dev/null || echo 0)
        h=$(awk '/^VmHWM:/ { print $2 }' "/proc/$APID/status" 2>/dev/null || echo 0)
        [ "${a:-0}" -gt "$peak_anon" ] && peak_anon=$a
        [ "${h:-0}" -gt "$peak_rss" ] && peak_rss=$h
    fi
    walk=$(sed -n 's/.*walk 1: \([0-9]*\) files seen in \([0-9.]*\) s.*/\1 \2/p' "$W/agent.log")
    [ -n "$walk" ] && break
    sleep 0.05
done
[ -n "$walk" ] || { cat "$W/agent.log" >&2; die "the agent ended before its first walk did"; }
kill "$APID"
wait "$APID" || true
APID=
set -- $walk
agent_files=$1
agent_s=$2
[ "$agent_files" = "$FILES" ] || die "the agent's walk saw $agent_files files, not $FILES"

scan_s=$(field scan_seconds <"$W/scan.jsonl" | median)
first_s=$(field first_batch_seconds <"$W/scan.jsonl" | median)
find_s=$(field find_seconds <"$W/scan.jsonl" | median)
ratios=$(field scan_vs_find <"$W/scan.jsonl" | sort -g | tr '\n' ' ')
ratio=$(field scan_vs_find <"$W/scan.jsonl" | median)
anon=$(field peak_rss_anon_kib <"$W/scan.jsonl" | sort -g | tail -1)
rss=$(field peak_rss_kib <"$W/scan.jsonl" | sort -g | tail -1)
agent_ratio=$(awk -v a="$agent_s" -v f="$find_s" 'BEGIN { printf "%.2f", (f > 0 ? a / f : 0) }')

out=$(cat <<EOF
# Discovery benchmark

Discovery of $FILES empty files on $FS_KIND; $(nproc) CPUs, $(date -u +%Y-%m-%d); medians of $RUNS runs (\`bash bench/scan.sh\`).

| measure | seconds | vs find | peak RssAnon | peak RSS |
|---|---|---|---|---|
| \`find TREE -type f \| wc -l\` | $find_s | 1.00 | - | - |
| sender walk (\`ingestctl bench scan\`) | $scan_s | $ratio (runs: $ratios) | $anon KiB | $rss KiB |
| time to the first batch of 1,000 files | $first_s | - | - | - |
| ingest-agent's first walk (+ journal of every file) | $agent_s | $agent_ratio | $peak_anon KiB | $peak_rss KiB |

Peak RSS counts mapped LMDB pages (reclaimable page cache); RssAnon is the
private memory. The agent's figures are sampled every 50 ms.

Raw \`ingestctl bench scan\` lines (WORK: the work dir):

\`\`\`
$(sed "s|\"dir\":\"$W/|\"dir\":\"WORK/|" "$W/scan.jsonl")
\`\`\`
EOF
)
echo "$out"
[ -n "${SCAN_RESULTS:-}" ] && echo "$out" >"$SCAN_RESULTS"
exit 0
