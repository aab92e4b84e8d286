#!/bin/sh
# ingestctl bench crypto, small: one JSON object with every keyed hash and
# AEAD figure, the OpenSSL HMAC-SHA256 variants agreeing with libsodium's
# (the command checks it and fails otherwise), AES-256-GCM records crossing
# between libsodium and OpenSSL; usage errors exit 2.
. "$(dirname "$0")/lib.sh"
"$CTL" bench crypto --size 2MiB --small 64KiB --runs 1 > "$T/out.json" 2> "$T/err" || { cat "$T/err"; fail "bench crypto failed"; }
cat "$T/out.json"
[ "$(wc -l < "$T/out.json")" -eq 1 ] || fail "expected one JSON line"
if command -v python3 > /dev/null; then
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
for k in ("hash_64k_mbps", "hash_1k_mbps"):
    for v in ("blake2b_sodium", "hmac_sha256_reinit", "hmac_sha256_dup", "sha256_prefix", "ingest_chunk_id"):
        assert d[k][v] > 0, (k, v)
for v in ("aes256gcm_openssl_seal", "aes256gcm_openssl_open", "xchacha_sodium_seal", "xchacha_sodium_open"):
    assert d["aead_64k_mbps"][v] > 0, v
assert d["bytes_64k"] == 2 << 20 and d["bytes_1k"] == 64 << 10' "$T/out.json" || fail "python3 rejects the JSON"
fi
grep -q '"ingest_chunk_id":' "$T/out.json" || fail "no ingest_chunk_id figure"
pass "bench crypto: one JSON object"
for bad in "--runs 0" "--size 1KiB" "--small 12" "--bogus 1" "--size"; do
    rc=0
    # shellcheck disable=SC2086
    "$CTL" bench crypto $bad > /dev/null 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "bench crypto $bad: exit $rc, want 2"
done
pass "bench crypto: usage errors exit 2"
