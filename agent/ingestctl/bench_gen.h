/*
 * Helpers shared by the profiles of `ingestctl bench gen` (bench_gen.c: the
 * default and empty profiles and the command line; bench_gen_gateway.c: the
 * gateway and small profiles): the splitmix64 generator every byte comes
 * from, a buffered file writer, and a text builder that formats numbers
 * without printf so a tree of a GiB takes seconds, not minutes.
 *
 * Single-threaded: the writer is one static buffer.
 */
#ifndef INGESTCTL_BENCH_GEN_H
#define INGESTCTL_BENCH_GEN_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64: the same seed always gives the same stream. */
typedef struct {
    uint64_t s;
} bgen_rng;

static inline uint64_t bgen_next(bgen_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (a modulo: the bias is irrelevant here); 0 when n is 0. */
static inline uint64_t bgen_below(bgen_rng *r, uint64_t n) { return n ? bgen_next(r) % n : 0; }

/* A seed for one file: the same (seed, kind, index, generation) gives the
 * same stream whatever was generated before it. */
static inline uint64_t bgen_seed(uint64_t seed, uint64_t kind, uint64_t index, uint64_t gen)
{
    bgen_rng r = { seed ^ (kind << 56) };
    r.s ^= bgen_next(&r) + index * 0x2545f4914f6cdd1dull;
    r.s ^= bgen_next(&r) + gen * 0x9e3779b97f4a7c15ull;
    return bgen_next(&r);
}

/* mkdir -p; 0 or -1 with errno set. */
int bgen_mkdirs(const char *path);

/*
 * The buffered writer: open DIR/NAME (DIR made first; truncated, or
 * appended to), put bytes, close.  Open and close say why they failed on
 * stderr and return -1; put remembers a write error for close.
 */
int bgen_open(const char *dir, const char *name, int append);
void bgen_put(const void *p, size_t n);
int bgen_close(void);

/*
 * Text builder: a line or a small file in a fixed buffer.  Appends past the
 * end are dropped and counted in `over`, so callers size the buffer for
 * their longest record and check over == 0 in debug builds.
 */
typedef struct {
    size_t len;
    size_t over;
    char buf[16384];
} bgen_text;

void bgen_reset(bgen_text *t);
void bgen_mem(bgen_text *t, const void *p, size_t n);
void bgen_str(bgen_text *t, const char *s);
void bgen_ch(bgen_text *t, char c);
void bgen_u64(bgen_text *t, uint64_t v);
void bgen_i64(bgen_text *t, int64_t v);
/* v / 10^decimals with exactly `decimals` digits after the point (0: none). */
void bgen_fix(bgen_text *t, int64_t v, unsigned decimals);
/* v in `digits` lower-case hex digits (the low ones), zero-padded. */
void bgen_hex(bgen_text *t, uint64_t v, unsigned digits);
/* v zero-padded to `width` decimal digits. */
void bgen_pad(bgen_text *t, uint64_t v, unsigned width);
/* Milliseconds since the epoch as 2026-09-21T10:15:03.123Z, or without the
 * fraction (2026-09-21T10:15:03Z) when with_ms is 0. */
void bgen_iso(bgen_text *t, uint64_t ms, int with_ms);
/* Days since the epoch as 2026-09-21. */
void bgen_date(bgen_text *t, uint64_t days);

#endif
