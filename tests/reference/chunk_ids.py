#!/usr/bin/env python3
"""An independent implementation of docs/chunking.md (chunker format 1,
chunk id format 2), in plain Python: the splitmix64 gear table, FastCDC as
the page's byte loop, and ids as HMAC-SHA256 (Python's hmac and hashlib)
keyed with the default dedup key 00 01 .. 1f.  It shares no code with
libingest, so a golden file both agree on pins the format, not the code.

Usage: chunk_ids.py GOLDEN_DIR        compare the golden files, exit 1 on a difference
       chunk_ids.py --write GOLDEN_DIR  write them (only for a deliberate format change)
"""
import hashlib
import hmac
import os
import sys

M64 = (1 << 64) - 1
KEY = bytes(range(32))


def splitmix64(seed):
    state = seed
    while True:
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        yield z ^ (z >> 31)


def chunk_id(data):
    return hmac.new(KEY, data, hashlib.sha256).hexdigest()


GEAR = [v for v, _ in zip(splitmix64(0x6368756E6B657231), range(256))]  # "chunker1"


def golden_buffer():
    g = splitmix64(0x676F6C64656E3031)  # "golden01"
    return b"".join(next(g).to_bytes(8, "little") for _ in range((1 << 20) // 8))


def chunks(data, mn, avg, mx):
    b = avg.bit_length() - 1
    mask_s = (M64 << (64 - (b + 2))) & M64
    mask_l = (M64 << (64 - (b - 2))) & M64
    out, s, n = [], 0, len(data)
    while s < n:
        end = min(s + mx, n)
        cut = end
        fp = 0
        for p in range(mn, end - s):
            fp = ((fp << 1) + GEAR[data[s + p]]) & M64
            if fp & (mask_s if p < avg else mask_l) == 0:
                cut = s + p + 1
                break
        out.append((s, cut - s))
        s = cut
    return out


def chunk_list(data, mn, avg, mx):
    return "".join("%d %d %s\n" % (o, l, chunk_id(data[o:o + l])) for o, l in chunks(data, mn, avg, mx))


def main(argv):
    write = len(argv) > 1 and argv[1] == "--write"
    args = argv[2:] if write else argv[1:]
    if len(args) != 1:
        sys.stderr.write(__doc__)
        return 2
    gdir = args[0]
    big = golden_buffer()
    files = {
        "ids-default-key.txt": "".join("%s %s\n" % (name, chunk_id(d)) for name, d in (
            ("empty", b""), ("zero-byte", b"\0"), ("abc", b"abc"), ("bytes-00-ff", bytes(range(256))),
            ("golden-1MiB", big))),
        "chunks-1MiB-default.txt": chunk_list(big, 16384, 65536, 262144),
        "chunks-1MiB-256-1K-4K.txt": chunk_list(big, 256, 1024, 4096),
    }
    bad = 0
    for name, text in files.items():
        path = os.path.join(gdir, name)
        if write:
            with open(path, "w") as f:
                f.write(text)
            continue
        with open(path) as f:
            have = f.read()
        if have != text:
            a, b = have.splitlines(), text.splitlines()
            line = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            sys.stderr.write("%s: differs from the reference at line %d\n" % (path, line + 1))
            bad += 1
        else:
            print("%s: agrees with the reference (%d lines)" % (name, len(text.splitlines())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
