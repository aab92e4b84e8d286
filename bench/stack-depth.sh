#!/bin/bash
# How deep the receiver's thread stacks go (issue 14, docs/architecture.md
# "Connection model"): bench/fleet-idle.sh with the receiver under
# `ulimit -s N` for each N in SIZES (KiB; default "32 48 64 96"): the core
# gives its threads the soft stack limit when it is below
# INGEST_CORE_THREAD_STACK (ingest_core_thread_stack()), so a size that is
# too small crashes the receiver while sessions handshake or land.  Each
# probe holds IDLE (20) idle sessions and ships PHASE_MIB (16) MiB with 1,
# 10 and 100 devices, every file checked.
#
#   bash bench/stack-depth.sh BUILD
set -u
BUILD=${1:?usage: bench/stack-depth.sh BUILD}
SIZES=${SIZES:-32 48 64 96}
IDLE=${IDLE:-20}
PHASE_MIB=${PHASE_MIB:-16}
HERE=$(cd "$(dirname "$0")" && pwd)
echo "## Receiver thread stacks: fleet-idle with the receiver under \`ulimit -s N\`"
echo
echo "Command: \`SIZES=\"$SIZES\" IDLE=$IDLE PHASE_MIB=$PHASE_MIB bash bench/stack-depth.sh BUILD\`"
echo "(each probe: \`RECEIVER_STACK_KIB=N bash bench/fleet-idle.sh BUILD $IDLE $PHASE_MIB\`)."
echo
echo "| ulimit -s KiB | result |"
echo "|---|---|"
for n in $SIZES; do
    out=$(RECEIVER_STACK_KIB=$n bash "$HERE/fleet-idle.sh" "$BUILD" "$IDLE" "$PHASE_MIB" 2>&1)
    rc=$?
    rows=$(grep -c '| yes |' <<<"$out")
    segv=""
    grep -q "Segmentation fault" <<<"$out" && segv=" (SIGSEGV)"
    if [ $rc = 0 ] && [ "$rows" = 3 ]; then
        res="ok: $IDLE idle sessions held, every file of the 1, 10 and 100 shipping devices landed"
    elif grep -q "did not start" <<<"$out"; then
        res="failed at start$segv"
    elif grep -q "failed at d" <<<"$out"; then
        res="failed while the idle sessions handshook$segv"
    else
        res="failed while landing$segv ($rows of 3 phases landed)"
    fi
    echo "| $n | $res |"
done
