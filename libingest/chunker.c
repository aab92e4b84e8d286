/*
 * FastCDC with normalized chunking (level 2), streaming.
 *
 * Storage format INGEST_CHUNKER_FORMAT 1, see docs/chunking.md:
 *   gear[i]  = i-th output (i = 0..255) of splitmix64 seeded with GEAR_SEED
 *   fp       = (fp << 1) + gear[byte]          (64-bit, wraps)
 *   the first `min` bytes of a chunk are not hashed; fp = 0 at position min
 *   after hashing the byte at position p (0-based in the chunk):
 *     cut after it (chunk length p + 1) if (fp & MASK) == 0,
 *     MASK = mask_s for p < avg, mask_l for p >= avg
 *   mask_s = the top log2(avg)+2 bits, mask_l = the top log2(avg)-2 bits
 *   forced cut at length max.
 * The masks take the high bits of fp: those depend on the last 64 bytes,
 * so the effective window is the full 64 bytes.
 */
#include "internal.h"
#include "ingest/chunker.h"

#include <pthread.h>
#include <string.h>

#define GEAR_SEED UINT64_C(0x6368756e6b657231) /* "chunker1" */

static uint64_t gear[256];
static pthread_once_t gear_once = PTHREAD_ONCE_INIT;

static void gear_init(void)
{
    uint64_t s = GEAR_SEED;
    for (int i = 0; i < 256; i++) {
        s += UINT64_C(0x9E3779B97F4A7C15);
        uint64_t z = s;
        z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
        gear[i] = z ^ (z >> 31);
    }
}

struct ingest_chunker_s {
    ingest_ctx *ctx;
    ingest_chunk_params p;
    uint64_t mask_s; /* before avg: harder to cut */
    uint64_t mask_l; /* from avg on: easier to cut */
    uint64_t pos;    /* bytes of the current chunk seen so far (< max) */
    uint64_t fp;     /* rolling hash; 0 until position min */
};

void ingest_chunk_params_default(ingest_chunk_params *p)
{
    p->min = INGEST_CHUNK_MIN_DEFAULT;
    p->avg = INGEST_CHUNK_AVG_DEFAULT;
    p->max = INGEST_CHUNK_MAX_DEFAULT;
}

int ingest_chunk_params_check(ingest_ctx *ctx, const ingest_chunk_params *p)
{
    if (p == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "chunk params: NULL");
    if (p->min < INGEST_CHUNK_MIN_LOWEST)
        return ingest__fail(ctx, INGEST_EINVAL, "chunk params: min %u below the lowest allowed %u", p->min,
                            INGEST_CHUNK_MIN_LOWEST);
    if (p->max > INGEST_CHUNK_MAX_HIGHEST)
        return ingest__fail(ctx, INGEST_EINVAL, "chunk params: max %u above the highest allowed %u", p->max,
                            INGEST_CHUNK_MAX_HIGHEST);
    if (!(p->min < p->avg && p->avg < p->max))
        return ingest__fail(ctx, INGEST_EINVAL, "chunk params: need min < avg < max, got %u/%u/%u", p->min, p->avg,
                            p->max);
    if ((p->avg & (p->avg - 1)) != 0)
        return ingest__fail(ctx, INGEST_EINVAL, "chunk params: avg %u is not a power of two", p->avg);
    return 0;
}

static unsigned log2u(uint32_t v)
{
    unsigned b = 0;
    while (v > 1) {
        v >>= 1;
        b++;
    }
    return b;
}

int ingest_chunker_create(ingest_ctx *ctx, const ingest_chunk_params *p, ingest_chunker **out)
{
    ingest_chunk_params dp;
    *out = NULL;
    if (p == NULL) {
        ingest_chunk_params_default(&dp);
        p = &dp;
    }
    INGEST__FORWARD(ingest_chunk_params_check(ctx, p));
    pthread_once(&gear_once, gear_init);
    ingest_chunker *c = ingest__calloc(ctx, 1, sizeof(*c));
    if (c == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "chunker: out of memory");
    c->ctx = ctx;
    c->p = *p;
    const unsigned bits = log2u(p->avg); /* 7..25 given the bounds */
    c->mask_s = ~UINT64_C(0) << (64 - (bits + 2));
    c->mask_l = ~UINT64_C(0) << (64 - (bits - 2));
    *out = c;
    return 0;
}

void ingest_chunker_destroy(ingest_chunker *c)
{
    if (c != NULL)
        ingest__free(c->ctx, c);
}

void ingest_chunker_reset(ingest_chunker *c)
{
    c->pos = 0;
    c->fp = 0;
}

#if defined(__GNUC__)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define UNLIKELY(x) (x)
#endif

/*
 * Hash p[0, n) into *fpp, testing mask after every byte.  Returns the
 * number of bytes up to and including the first byte whose hash matches
 * (then the chunk ends there), or 0 with *fpp updated when none matched.
 *
 * Unrolled by four so that the sums of gear values do not depend on the
 * running hash: fp_k = (fp << k) + S_k where S_k combines the next k gear
 * values.  The only serial dependency is one shift and one add per four
 * bytes; the four mask tests are independent.
 */
static inline size_t gear_run(const uint8_t *p, size_t n, uint64_t mask, uint64_t *fpp)
{
    uint64_t fp = *fpp;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const uint64_t g0 = gear[p[i]], g1 = gear[p[i + 1]], g2 = gear[p[i + 2]], g3 = gear[p[i + 3]];
        const uint64_t s2 = (g0 << 1) + g1;
        const uint64_t s3 = (s2 << 1) + g2;
        const uint64_t s4 = (s3 << 1) + g3;
        const uint64_t f1 = (fp << 1) + g0;
        const uint64_t f2 = (fp << 2) + s2;
        const uint64_t f3 = (fp << 3) + s3;
        const uint64_t f4 = (fp << 4) + s4;
        if (UNLIKELY(!(f1 & mask) | !(f2 & mask) | !(f3 & mask) | !(f4 & mask))) {
            if (!(f1 & mask))
                return i + 1;
            if (!(f2 & mask))
                return i + 2;
            if (!(f3 & mask))
                return i + 3;
            return i + 4;
        }
        fp = f4;
    }
    for (; i < n; i++) {
        fp = (fp << 1) + gear[p[i]];
        if (UNLIKELY(!(fp & mask)))
            return i + 1;
    }
    *fpp = fp;
    return 0;
}

int ingest_chunker_scan(ingest_chunker *c, const uint8_t *data, size_t len, size_t *used)
{
    const uint64_t min = c->p.min, avg = c->p.avg, max = c->p.max;
    uint64_t pos = c->pos;
    size_t i = 0;

    if (pos < min) { /* skipped: not hashed, no cut possible */
        const uint64_t skip = min - pos < len ? min - pos : len;
        pos += skip;
        i += (size_t)skip;
        if (pos < min)
            goto more;
    }
    if (pos < avg) {
        const size_t n = (size_t)(avg - pos < len - i ? avg - pos : len - i);
        const size_t k = gear_run(data + i, n, c->mask_s, &c->fp);
        if (k != 0) {
            i += k;
            goto cut;
        }
        pos += n;
        i += n;
        if (pos < avg)
            goto more;
    }
    {
        const size_t n = (size_t)(max - pos < len - i ? max - pos : len - i);
        const size_t k = gear_run(data + i, n, c->mask_l, &c->fp);
        if (k != 0) {
            i += k;
            goto cut;
        }
        pos += n;
        i += n;
        if (pos == max)
            goto cut;
    }
more:
    c->pos = pos;
    *used = len;
    return 0;
cut:
    c->pos = 0;
    c->fp = 0;
    *used = i;
    return 1;
}

uint64_t ingest_chunker_finish(ingest_chunker *c)
{
    const uint64_t n = c->pos;
    ingest_chunker_reset(c);
    return n;
}
