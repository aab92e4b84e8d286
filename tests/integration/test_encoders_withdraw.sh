#!/bin/sh
# compression.encoders and a file that vanishes while its batch is shipped
# (FILE_WITHDRAWN): with 1 and 3 encoder threads, a file in the middle of the
# batch, between files of many chunks (so that other encoders have units
# planned past it when its unit fails), goes between the manifest and the
# reading of its chunks (the INGEST_TEST_SHIP_PAUSE hook).  Asserted for each
# count: the file is withdrawn (one log line), the batch is not shipped
# again, the other files land byte for byte; and the chunk bytes sent are the
# same for 3 encoders as for 1 (the units after the withdrawn file are sent
# again by the shipping thread, encoded as one thread encodes them).
. "$(dirname "$0")/lib.sh"
setup_keys
S="$T/src/data"
mkdir -p "$S" "$T/keep"
gen_log "$S/a.log" 3000000 3
head -c 60000 /dev/urandom > "$T/m.bin"
# z.bin: a first chunk of random bytes (stored raw: the next 64 chunks are not probed), then text
head -c 300000 /dev/urandom > "$T/r"
first=$("$CTL" chunk "$T/r" | head -1 | cut -d' ' -f2)
head -c "$first" "$T/r" > "$S/z.bin"
gen_log "$S/z.bin" 5000000 9
rm "$T/r"
cp "$S/a.log" "$S/z.bin" "$T/keep/"
bytes1=""
for n in 1 3; do
    rm -rf "$T/bronze" "$T/rstate" "$T/astate-dev1" "$T/pause.paused"
    cp -p "$T/m.bin" "$S/m.bin"
    write_receiver_config 'layout: "{device}/{path}"'
    start_receiver
    write_agent_config dev1 "$S" "compression:
  encoders: $n"
    : > "$T/pause"
    INGEST_TEST_SHIP_PAUSE="$T/pause" "$AGENT" --config "$T/dev1.yaml" --once > "$T/dev1.out" 2> "$T/dev1.err" &
    pid=$!
    i=0
    while [ ! -e "$T/pause.paused" ]; do
        i=$((i + 1)); [ $i -gt 400 ] && { kill $pid; cat "$T/dev1.err"; fail "encoders $n: the agent never paused after a manifest"; }
        sleep 0.05
    done
    rm "$S/m.bin"
    rm "$T/pause"
    rc=0; wait $pid || rc=$?
    stop_receiver
    [ $rc = 0 ] || { cat "$T/dev1.err"; fail "encoders $n: the agent exited $rc"; }
    grep -q 'm.bin vanished while it was being shipped: withdrawn' "$T/dev1.err" ||
        { cat "$T/dev1.err"; fail "encoders $n: m.bin was not withdrawn"; }
    grep -q 'shipping them again' "$T/dev1.err" && { cat "$T/dev1.err"; fail "encoders $n: the batch was shipped again"; }
    same_tree "$T/keep" "$(landed_root dev1)/data"
    [ ! -e "$(landed_root dev1)/data/m.bin" ] || fail "encoders $n: the withdrawn file landed"
    b=$(field dev1 chunk_bytes)
    [ -n "$b" ] && [ "$b" -gt 0 ] || { cat "$T/dev1.out"; fail "encoders $n: no chunk_bytes in the summary"; }
    [ -z "$bytes1" ] && bytes1=$b
    [ "$b" = "$bytes1" ] || fail "encoders $n: $b bytes of chunks sent, one encoder sent $bytes1"
    pass "encoders $n: m.bin vanished mid-batch and was withdrawn, the rest landed once, byte for byte, $b chunk bytes as with one encoder"
done
