/*
 * FastCDC chunker and the chunk+hash pipeline.
 *
 * A plain byte-at-a-time reference implementation, written from the
 * definition in docs/chunking.md (its own gear table from the documented
 * generator), must find exactly the boundaries of the unrolled library
 * loop.  Golden chunk lists (tests/unit/golden/) pin the format; regenerate
 * them only on a deliberate format change with INGEST_GOLDEN_UPDATE=1.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ingest/chunker.h"
#include "ingest/chunkhash.h"
#include "ingest/hash.h"
#include "internal.h"

/* ---- helpers ---------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The documented test buffer: splitmix64 outputs from seed, little-endian. */
static uint8_t *gen_buffer(uint64_t seed, size_t len)
{
    uint8_t *b = malloc(len ? len : 1);
    assert_non_null(b);
    uint64_t s = seed;
    for (size_t i = 0; i < len; i += 8) {
        const uint64_t v = splitmix64(&s);
        for (size_t k = 0; k < 8 && i + k < len; k++)
            b[i + k] = (uint8_t)(v >> (8 * k));
    }
    return b;
}

#define GOLDEN_SEED UINT64_C(0x676f6c64656e3031) /* "golden01" */

static int quick(void) { return getenv("INGEST_TEST_QUICK") != NULL; }

typedef struct clist {
    uint64_t *len;
    size_t n, cap;
} clist;

static void clist_push(clist *l, uint64_t len)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->len = realloc(l->len, l->cap * sizeof(*l->len));
        assert_non_null(l->len);
    }
    l->len[l->n++] = len;
}

/* Reference: the definition, one byte at a time. */
static void ref_chunk(const uint8_t *d, size_t n, const ingest_chunk_params *p, clist *out)
{
    uint64_t gear[256], s = UINT64_C(0x6368756e6b657231);
    for (int i = 0; i < 256; i++)
        gear[i] = splitmix64(&s);
    unsigned bits = 0;
    while ((1u << bits) < p->avg)
        bits++;
    const uint64_t ms = ~UINT64_C(0) << (64 - (bits + 2)), ml = ~UINT64_C(0) << (64 - (bits - 2));
    size_t start = 0;
    while (start < n) {
        size_t len = n - start;
        if (len > p->max)
            len = p->max;
        uint64_t fp = 0;
        for (size_t i = p->min; i < len; i++) {
            fp = (fp << 1) + gear[d[start + i]];
            if ((fp & (i < p->avg ? ms : ml)) == 0) {
                len = i + 1;
                break;
            }
        }
        clist_push(out, len);
        start += len;
    }
}

/* Library chunker, fed in pieces: piece == 0 means random sizes in [1, 3*avg]. */
static void lib_chunk(const uint8_t *d, size_t n, const ingest_chunk_params *p, size_t piece, uint64_t seed,
                      clist *out)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_chunker *c = NULL;
    assert_int_equal(ingest_chunker_create(ctx, p, &c), 0);
    uint64_t rs = seed, cur = 0;
    size_t pos = 0;
    while (pos < n) {
        size_t k = piece ? piece : 1 + (size_t)(splitmix64(&rs) % (3 * (uint64_t)p->avg));
        if (!piece && splitmix64(&rs) % 4 == 0)
            k = 1 + (size_t)(splitmix64(&rs) % 3); /* plenty of tiny pieces */
        if (k > n - pos)
            k = n - pos;
        size_t off = 0;
        while (off < k) {
            size_t used = 0;
            if (ingest_chunker_scan(c, d + pos + off, k - off, &used)) {
                clist_push(out, cur + used);
                cur = 0;
            } else {
                assert_int_equal(used, k - off);
                cur += used;
            }
            off += used;
        }
        pos += k;
    }
    const uint64_t last = ingest_chunker_finish(c);
    assert_int_equal(last, cur);
    if (last)
        clist_push(out, last);
    ingest_chunker_destroy(c);
    ingest_ctx_destroy(ctx);
}

static void assert_clist_equal(const clist *a, const clist *b)
{
    assert_int_equal(a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        if (a->len[i] != b->len[i])
            fail_msg("chunk %zu: length %llu != %llu", i, (unsigned long long)a->len[i],
                     (unsigned long long)b->len[i]);
}

static const ingest_chunk_params P_DEFAULT = { 16384, 65536, 262144 };
static const ingest_chunk_params P_SMALL = { 256, 1024, 4096 };
static const ingest_chunk_params P_TINY = { 64, 128, 256 };

/* ---- parameters ------------------------------------------------------- */

static void expect_bad(uint32_t min, uint32_t avg, uint32_t max, const char *msg)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    const ingest_chunk_params p = { min, avg, max };
    assert_int_equal(ingest_chunk_params_check(ctx, &p), INGEST_EINVAL);
    if (strstr(ingest_ctx_errmsg(ctx), msg) == NULL)
        fail_msg("%u/%u/%u: message '%s' lacks '%s'", min, avg, max, ingest_ctx_errmsg(ctx), msg);
    ingest_chunker *c = (ingest_chunker *)&p; /* must be reset to NULL */
    assert_int_equal(ingest_chunker_create(ctx, &p, &c), INGEST_EINVAL);
    assert_null(c);
    ingest_ctx_destroy(ctx);
}

static void test_params(void **state)
{
    (void)state;
    ingest_chunk_params p;
    ingest_chunk_params_default(&p);
    assert_int_equal(p.min, 16384);
    assert_int_equal(p.avg, 65536);
    assert_int_equal(p.max, 262144);
    assert_int_equal(ingest_chunk_params_check(NULL, &p), 0);
    assert_int_equal(ingest_chunk_params_check(NULL, &P_TINY), 0);
    const ingest_chunk_params hi = { 1u << 20, 1u << 25, INGEST_CHUNK_MAX_HIGHEST };
    assert_int_equal(ingest_chunk_params_check(NULL, &hi), 0);
    expect_bad(63, 128, 256, "min 63 below");
    expect_bad(1024, 4096, INGEST_CHUNK_MAX_HIGHEST + 1, "above the highest");
    expect_bad(4096, 4096, 8192, "min < avg < max");
    expect_bad(1024, 8192, 8192, "min < avg < max");
    expect_bad(1024, 8192, 4096, "min < avg < max");
    expect_bad(1024, 3000, 8192, "not a power of two");
    expect_bad(0, 0, 0, "below");
    assert_int_equal(ingest_chunk_params_check(NULL, NULL), INGEST_EINVAL);
    ingest_chunker_destroy(NULL);
}

/* ---- boundaries ------------------------------------------------------- */

static void check_ref_vs_lib(const ingest_chunk_params *p, size_t n, uint64_t seed)
{
    uint8_t *d = gen_buffer(seed, n);
    clist r = { 0 }, l = { 0 };
    ref_chunk(d, n, p, &r);
    lib_chunk(d, n, p, n, 0, &l);
    assert_true(r.n > 2);
    assert_clist_equal(&r, &l);
    free(r.len);
    free(l.len);
    free(d);
}

static void test_reference_equals_fast(void **state)
{
    (void)state;
    const size_t big = quick() ? (2u << 20) : (12u << 20);
    check_ref_vs_lib(&P_DEFAULT, big, 1);
    check_ref_vs_lib(&P_SMALL, big / 4, 2);
    check_ref_vs_lib(&P_TINY, 1u << 20, 3);
    const ingest_chunk_params odd = { 100, 512, 700 }; /* min, max not multiples of 4 */
    check_ref_vs_lib(&odd, 1u << 20, 4);
    /* Low-entropy data: long runs of one byte reach max. */
    const size_t n = 3u << 20;
    uint8_t *d = calloc(1, n);
    assert_non_null(d);
    for (size_t i = n / 2; i < n; i++)
        d[i] = (uint8_t)(i / 1000);
    clist r = { 0 }, l = { 0 };
    ref_chunk(d, n, &P_DEFAULT, &r);
    lib_chunk(d, n, &P_DEFAULT, 0, 5, &l);
    assert_clist_equal(&r, &l);
    assert_int_equal(r.len[0], P_DEFAULT.max);
    free(r.len);
    free(l.len);
    free(d);
}

static void test_split_independent(void **state)
{
    (void)state;
    const ingest_chunk_params *ps[] = { &P_DEFAULT, &P_SMALL, &P_TINY };
    for (size_t k = 0; k < 3; k++) {
        const size_t n = k == 0 ? (quick() ? (1u << 20) : (4u << 20)) : (512u << 10);
        uint8_t *d = gen_buffer(100 + k, n);
        clist whole = { 0 }, rnd = { 0 }, ones = { 0 }, sevens = { 0 };
        lib_chunk(d, n, ps[k], n, 0, &whole);
        lib_chunk(d, n, ps[k], 0, 7 + k, &rnd);
        lib_chunk(d, n, ps[k], 7, 0, &sevens);
        lib_chunk(d, k == 0 ? n / 2 : n, ps[k], 1, 0, &ones);
        assert_clist_equal(&whole, &rnd);
        assert_clist_equal(&whole, &sevens);
        if (k != 0) {
            assert_clist_equal(&whole, &ones);
        } else { /* 1-byte pieces over the first half: same full chunks */
            assert_true(ones.n >= 2);
            for (size_t i = 0; i + 1 < ones.n; i++)
                assert_int_equal(ones.len[i], whole.len[i]);
        }
        free(whole.len);
        free(rnd.len);
        free(ones.len);
        free(sevens.len);
        free(d);
    }
}

static void test_min_max_respected(void **state)
{
    (void)state;
    const ingest_chunk_params *ps[] = { &P_DEFAULT, &P_SMALL, &P_TINY };
    for (size_t k = 0; k < 3; k++) {
        const size_t n = (4u << 20) + 12345;
        uint8_t *d = gen_buffer(200 + k, n);
        clist l = { 0 };
        lib_chunk(d, n, ps[k], 0, 1, &l);
        uint64_t sum = 0;
        size_t below_avg = 0;
        for (size_t i = 0; i < l.n; i++) {
            assert_true(l.len[i] <= ps[k]->max);
            if (i + 1 < l.n)
                assert_true(l.len[i] >= ps[k]->min);
            else
                assert_true(l.len[i] >= 1);
            below_avg += l.len[i] < ps[k]->avg;
            sum += l.len[i];
        }
        assert_int_equal(sum, n);
        /* Normalized chunking: the mean lands near avg (within a factor 1.5). */
        const double mean = (double)n / (double)l.n;
        assert_true(mean > ps[k]->avg / 1.5 && mean < ps[k]->avg * 1.5);
        assert_true(below_avg > 0 && below_avg < l.n);
        free(l.len);
        free(d);
    }
}

static void test_empty_and_short(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_chunker *c = NULL;
    assert_int_equal(ingest_chunker_create(ctx, NULL, &c), 0);
    size_t used = 99;
    assert_int_equal(ingest_chunker_finish(c), 0); /* empty stream: no chunk */
    assert_int_equal(ingest_chunker_scan(c, (const uint8_t *)"", 0, &used), 0);
    assert_int_equal(used, 0);
    assert_int_equal(ingest_chunker_finish(c), 0);
    uint8_t *d = gen_buffer(9, INGEST_CHUNK_MIN_DEFAULT);
    /* Shorter than min: one chunk. */
    assert_int_equal(ingest_chunker_scan(c, d, 1000, &used), 0);
    assert_int_equal(used, 1000);
    assert_int_equal(ingest_chunker_finish(c), 1000);
    /* Exactly min: one chunk, and the chunker was reset by finish. */
    assert_int_equal(ingest_chunker_scan(c, d, INGEST_CHUNK_MIN_DEFAULT, &used), 0);
    assert_int_equal(ingest_chunker_finish(c), INGEST_CHUNK_MIN_DEFAULT);
    /* reset drops the pending state. */
    assert_int_equal(ingest_chunker_scan(c, d, 500, &used), 0);
    ingest_chunker_reset(c);
    assert_int_equal(ingest_chunker_finish(c), 0);
    free(d);
    /* Zeros never match before max: forced cuts at max exactly. */
    uint8_t *z = calloc(1, 3 * (size_t)INGEST_CHUNK_MAX_DEFAULT);
    assert_non_null(z);
    assert_int_equal(ingest_chunker_scan(c, z, 3 * (size_t)INGEST_CHUNK_MAX_DEFAULT, &used), 1);
    assert_int_equal(used, INGEST_CHUNK_MAX_DEFAULT);
    free(z);
    ingest_chunker_destroy(c);
    ingest_ctx_destroy(ctx);
}

/* ---- stability under edits ------------------------------------------- */

typedef struct idlist {
    uint8_t (*id)[INGEST_ID_BYTES];
    uint64_t *off, *len;
    size_t n;
} idlist;

static void ids_of(const uint8_t *d, size_t n, const ingest_chunk_params *p, idlist *out)
{
    clist l = { 0 };
    lib_chunk(d, n, p, n, 0, &l);
    out->n = l.n;
    out->id = malloc((l.n + 1) * INGEST_ID_BYTES);
    out->off = malloc((l.n + 1) * sizeof(uint64_t));
    assert_non_null(out->id);
    assert_non_null(out->off);
    uint64_t off = 0;
    for (size_t i = 0; i < l.n; i++) {
        ingest_chunk_id(ingest_default_dedup_key(), d + off, l.len[i], out->id[i]);
        out->off[i] = off;
        off += l.len[i];
    }
    out->len = l.len;
}

static void idlist_free(idlist *l)
{
    free(l->id);
    free(l->off);
    free(l->len);
}

static void test_insert_keeps_ids(void **state)
{
    (void)state;
    const size_t n = quick() ? (4u << 20) : (16u << 20);
    uint8_t *a = gen_buffer(300, n);
    uint8_t *b = malloc(n + 10);
    assert_non_null(b);
    memcpy(b, a, n / 2);
    memcpy(b + n / 2, "0123456789", 10);
    memcpy(b + n / 2 + 10, a + n / 2, n - n / 2);
    idlist x, y;
    ids_of(a, n, &P_DEFAULT, &x);
    ids_of(b, n + 10, &P_DEFAULT, &y);
    size_t same = 0;
    for (size_t i = 0; i < x.n; i++)
        for (size_t j = 0; j < y.n; j++)
            if (memcmp(x.id[i], y.id[j], INGEST_ID_BYTES) == 0) {
                same++;
                break;
            }
    assert_true(x.n > 50);
    if (same * 100 < x.n * 95)
        fail_msg("only %zu of %zu chunk ids unchanged", same, x.n);
    assert_true(same < x.n); /* the chunk holding the insert did change */
    idlist_free(&x);
    idlist_free(&y);
    free(a);
    free(b);
}

static void test_append_keeps_prefix(void **state)
{
    (void)state;
    const size_t n = 3u << 20, extra = 700000;
    uint8_t *d = gen_buffer(400, n + extra);
    idlist x, y;
    ids_of(d, n, &P_DEFAULT, &x);
    ids_of(d, n + extra, &P_DEFAULT, &y);
    assert_true(x.n > 10 && y.n > x.n);
    for (size_t i = 0; i + 1 < x.n; i++) {
        assert_int_equal(x.off[i], y.off[i]);
        assert_int_equal(x.len[i], y.len[i]);
        assert_memory_equal(x.id[i], y.id[i], INGEST_ID_BYTES);
    }
    idlist_free(&x);
    idlist_free(&y);
    free(d);
}

/* ---- golden chunk lists ---------------------------------------------- */

static char *golden_path(const char *name)
{
    static char buf[1024];
    const char *dir = getenv("INGEST_GOLDEN_DIR");
    if (dir != NULL) {
        snprintf(buf, sizeof(buf), "%s/%s", dir, name);
    } else {
        const char *f = __FILE__, *slash = strrchr(f, '/');
        const int dl = slash ? (int)(slash - f) : 1;
        snprintf(buf, sizeof(buf), "%.*s/golden/%s", dl, slash ? f : ".", name);
    }
    return buf;
}

/* Render the chunk list as `ingestctl chunk` prints it. */
static char *render_chunks(const uint8_t *d, size_t n, const ingest_chunk_params *p, size_t *out_len)
{
    idlist l;
    ids_of(d, n, p, &l);
    const size_t cap = l.n * 100 + 1;
    char *s = malloc(cap);
    assert_non_null(s);
    size_t w = 0;
    for (size_t i = 0; i < l.n; i++) {
        char hex[2 * INGEST_ID_BYTES + 1];
        ingest_to_hex(l.id[i], INGEST_ID_BYTES, hex);
        w += (size_t)snprintf(s + w, cap - w, "%llu %llu %s\n", (unsigned long long)l.off[i],
                              (unsigned long long)l.len[i], hex);
    }
    idlist_free(&l);
    *out_len = w;
    return s;
}

static void compare_golden(const char *name, const char *got, size_t n)
{
    const char *path = golden_path(name);
    if (getenv("INGEST_GOLDEN_UPDATE") != NULL) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(got, 1, n, f), n);
        assert_int_equal(fclose(f), 0);
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("golden file %s missing (run from the source tree or set INGEST_GOLDEN_DIR)", path);
    char *want = malloc(n + 2);
    assert_non_null(want);
    const size_t r = fread(want, 1, n + 1, f);
    fclose(f);
    if (r != n || memcmp(want, got, n) != 0) {
        size_t i = 0;
        while (i < n && i < r && want[i] == got[i])
            i++;
        fail_msg("%s: differs at byte %zu (golden %zu bytes, got %zu)", path, i, r, n);
    }
    free(want);
}

static void test_golden_chunks(void **state)
{
    (void)state;
    uint8_t *d = gen_buffer(GOLDEN_SEED, 1u << 20);
    size_t n;
    char *s = render_chunks(d, 1u << 20, &P_DEFAULT, &n);
    compare_golden("chunks-1MiB-default.txt", s, n);
    free(s);
    s = render_chunks(d, 1u << 20, &P_SMALL, &n);
    compare_golden("chunks-1MiB-256-1K-4K.txt", s, n);
    free(s);
    free(d);
}

/* ---- pipeline ---------------------------------------------------------- */

typedef struct sink {
    idlist want;
    size_t seen;
    uint64_t next_off;
    int stop_at; /* return an error at this chunk (-1: never) */
} sink;

static int sink_cb(void *ud, const ingest_chunk_info *ci)
{
    sink *s = ud;
    if (s->stop_at >= 0 && s->seen == (size_t)s->stop_at)
        return INGEST_EMISMATCH;
    if (s->seen >= s->want.n)
        fail_msg("extra chunk at offset %llu", (unsigned long long)ci->offset);
    assert_int_equal(ci->offset, s->next_off);
    assert_int_equal(ci->offset, s->want.off[s->seen]);
    assert_int_equal(ci->len, s->want.len[s->seen]);
    assert_memory_equal(ci->id, s->want.id[s->seen], INGEST_ID_BYTES);
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_id(ingest_default_dedup_key(), ci->data, ci->len, id);
    assert_memory_equal(id, ci->id, INGEST_ID_BYTES);
    s->next_off += ci->len;
    s->seen++;
    return 0;
}

static void sink_expect(sink *s, const uint8_t *d, size_t n, const ingest_chunk_params *p)
{
    idlist_free(&s->want);
    ids_of(d, n, p, &s->want);
    s->seen = 0;
    s->next_off = 0;
    s->stop_at = -1;
}

static void run_pipeline(const ingest_chunk_params *p, int threads, unsigned depth, size_t n, uint64_t seed)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    sink s = { 0 };
    ingest_chunkhash *ch = NULL;
    const ingest_chunkhash_opts o = { .params = p, .threads = threads, .depth = depth };
    assert_int_equal(ingest_chunkhash_create(ctx, &o, sink_cb, &s, &ch), 0);
    for (int stream = 0; stream < 3; stream++) {
        const size_t len = stream == 2 ? p->min / 2 : n - (size_t)stream * 777;
        uint8_t *d = gen_buffer(seed + (uint64_t)stream, len);
        /* update in random pieces */
        sink_expect(&s, d, len, p);
        uint64_t rs = seed;
        for (size_t pos = 0; pos < len;) {
            size_t k = 1 + (size_t)(splitmix64(&rs) % (2 * (uint64_t)p->max));
            if (splitmix64(&rs) % 5 == 0)
                k = 1;
            if (k > len - pos)
                k = len - pos;
            assert_int_equal(ingest_chunkhash_update(ch, d + pos, k), 0);
            pos += k;
        }
        assert_int_equal(ingest_chunkhash_finish(ch), 0);
        assert_int_equal(s.seen, s.want.n);
        /* buffer */
        sink_expect(&s, d, len, p);
        assert_int_equal(ingest_chunkhash_buffer(ch, d, len), 0);
        assert_int_equal(s.seen, s.want.n);
        /* fd */
        char tmpl[] = "/tmp/test_chunker_XXXXXX";
        const int fd = mkstemp(tmpl);
        assert_true(fd >= 0);
        unlink(tmpl);
        assert_int_equal(write(fd, d, len), (ssize_t)len);
        assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
        sink_expect(&s, d, len, p);
        assert_int_equal(ingest_chunkhash_fd(ch, fd), 0);
        assert_int_equal(s.seen, s.want.n);
        /* a callback error stops the stream; the next stream is clean */
        if (s.want.n > 3) {
            sink_expect(&s, d, len, p);
            s.stop_at = 2;
            assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
            assert_int_equal(ingest_chunkhash_fd(ch, fd), INGEST_EMISMATCH);
            assert_int_equal(s.seen, 2);
            sink_expect(&s, d, len, p);
            s.stop_at = 1;
            int rc = 0;
            for (size_t pos = 0; pos < len && rc == 0; pos += 1000)
                rc = ingest_chunkhash_update(ch, d + pos, len - pos < 1000 ? len - pos : 1000);
            if (rc == 0)
                rc = ingest_chunkhash_finish(ch);
            assert_int_equal(rc, INGEST_EMISMATCH);
            assert_int_equal(s.seen, 1);
        }
        close(fd);
        free(d);
    }
    /* empty stream: no chunk */
    sink_expect(&s, (const uint8_t *)"", 0, p);
    assert_int_equal(ingest_chunkhash_finish(ch), 0);
    assert_int_equal(ingest_chunkhash_buffer(ch, "", 0), 0);
    assert_int_equal(s.seen, 0);
    ingest_chunkhash_destroy(ch);
    idlist_free(&s.want);
    ingest_ctx_destroy(ctx);
}

static void test_pipeline_equals_serial(void **state)
{
    (void)state;
    const size_t big = quick() ? (2u << 20) : (8u << 20);
    run_pipeline(&P_DEFAULT, 2, 0, big, 500);
    run_pipeline(&P_DEFAULT, 1, 0, big / 2, 510);
    run_pipeline(&P_SMALL, 2, 1, 1u << 20, 520);
    run_pipeline(&P_SMALL, 2, 32, 1u << 20, 530);
    run_pipeline(&P_TINY, 2, 2, 256u << 10, 540);
}

static int keep_id_cb(void *ud, const ingest_chunk_info *ci)
{
    uint8_t *got = ud;
    assert_int_equal(ci->offset, 0);
    assert_int_equal(ci->len, 5);
    assert_memory_equal(ci->data, "hello", 5);
    memcpy(got, ci->id, INGEST_ID_BYTES);
    got[INGEST_ID_BYTES]++;
    return 0;
}

static void test_pipeline_args(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_chunkhash *ch = (ingest_chunkhash *)ctx;
    sink s = { 0 };
    const ingest_chunk_params bad = { 10, 20, 30 };
    ingest_chunkhash_opts o = { .params = &bad };
    assert_int_equal(ingest_chunkhash_create(ctx, &o, sink_cb, &s, &ch), INGEST_EINVAL);
    assert_null(ch);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "min 10"));
    o = (ingest_chunkhash_opts){ .threads = 3 };
    assert_int_equal(ingest_chunkhash_create(ctx, &o, sink_cb, &s, &ch), INGEST_EINVAL);
    assert_int_equal(ingest_chunkhash_create(ctx, NULL, NULL, &s, &ch), INGEST_EINVAL);
    /* a keyed pipeline gives the keyed ids */
    uint8_t key[INGEST_KEY_BYTES];
    memset(key, 7, sizeof(key));
    o = (ingest_chunkhash_opts){ .key = key, .params = &P_SMALL };
    uint8_t got[INGEST_ID_BYTES + 1] = { 0 };
    assert_int_equal(ingest_chunkhash_create(ctx, &o, keep_id_cb, got, &ch), 0);
    assert_int_equal(ingest_chunkhash_update(ch, "hel", 3), 0);
    assert_int_equal(ingest_chunkhash_update(ch, "lo", 2), 0);
    assert_int_equal(got[INGEST_ID_BYTES], 0);
    assert_int_equal(ingest_chunkhash_finish(ch), 0);
    assert_int_equal(got[INGEST_ID_BYTES], 1);
    ingest_chunkhash_destroy(ch);
    uint8_t a[INGEST_ID_BYTES], b[INGEST_ID_BYTES];
    ingest_chunk_id(key, "hello", 5, a);
    ingest_chunk_id(ingest_default_dedup_key(), "hello", 5, b);
    assert_memory_equal(got, a, INGEST_ID_BYTES);
    assert_memory_not_equal(a, b, INGEST_ID_BYTES);
    ingest_chunkhash_destroy(NULL);
    ingest_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_reference_equals_fast),
        cmocka_unit_test(test_split_independent),
        cmocka_unit_test(test_min_max_respected),
        cmocka_unit_test(test_empty_and_short),
        cmocka_unit_test(test_insert_keeps_ids),
        cmocka_unit_test(test_append_keeps_prefix),
        cmocka_unit_test(test_golden_chunks),
        cmocka_unit_test(test_pipeline_equals_serial),
        cmocka_unit_test(test_pipeline_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
