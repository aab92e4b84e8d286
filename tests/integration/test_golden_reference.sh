#!/bin/sh
# The golden chunk lists and ids (tests/unit/golden/, which test_chunker and
# test_hash hold the library to) agree with the independent Python
# implementation of docs/chunking.md, tests/reference/chunk_ids.py (hmac +
# hashlib, a FastCDC byte loop).  Without python3 there is nothing to run.
. "$(dirname "$0")/lib.sh"
TOP=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v python3 > /dev/null; then
    pass "python3 not installed: reference check skipped"
    exit 0
fi
python3 "$TOP/tests/reference/chunk_ids.py" "$TOP/tests/unit/golden" || fail "golden files disagree with the reference"
pass "golden files agree with the independent reference"
