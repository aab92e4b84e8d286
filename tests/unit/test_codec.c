/* Unit tests for the chunk codec: formats, levels, dictionaries, hostile input, allocation failure. */
#define ZSTD_STATIC_LINKING_ONLY
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zstd.h>
#include <zdict.h>
#include <sodium.h>

#include "ingest.h"
#include "support/testkit.h"
#include "ingest/codec.h"

/* ---- helpers ----------------------------------------------------------- */

/* Telemetry CSV of exactly n bytes: similar across seeds, never equal. */
static void gen_csv(uint8_t *p, size_t n, uint64_t seed)
{
    static const char *const metrics[] = { "temp_c", "humidity_pct", "pressure_hpa", "vibration_rms",
                                           "battery_v" };
    static const char *const states[] = { "ok", "ok", "ok", "warn", "ok", "degraded" };
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    size_t len = 0;
    unsigned t = (unsigned)(seed % 100000u);
    while (len < n) {
        char line[160];
        const uint64_t r = rng_next(&s);
        const int k = snprintf(line, sizeof(line), "2024-05-%02u T%02u:%02u:%02u.%03uZ,site-%02u/sensor-%03u,%s,%u.%02u,%s\n",
                               1 + (unsigned)(seed % 28), (t / 3600) % 24, (t / 60) % 60, t % 60,
                               (unsigned)(r % 1000), (unsigned)(seed % 7), (unsigned)((r >> 10) % 40),
                               metrics[(r >> 20) % 5], (unsigned)((r >> 24) % 100), (unsigned)((r >> 32) % 100),
                               states[(r >> 40) % 6]);
        t += 1 + (unsigned)((r >> 48) % 3);
        const size_t take = (size_t)k < n - len ? (size_t)k : n - len;
        memcpy(p + len, line, take);
        len += take;
    }
}

static const uint8_t test_key[INGEST_KEY_BYTES] = {
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f,
};

/* Encode, check header fields, decode with the id check, compare. */
static size_t round_trip(ingest_codec *enc, ingest_codec *dec, const uint8_t *src, size_t n, int want_method)
{
    uint8_t *z = malloc(ingest_codec_bound(n));
    uint8_t *back = malloc(n + 1);
    size_t zlen = 0, blen = 1234;
    uint8_t id[INGEST_ID_BYTES];
    uint32_t raw = 0;
    assert_non_null(z);
    assert_non_null(back);
    assert_int_equal(ingest_codec_encode(enc, src, n, z, ingest_codec_bound(n), &zlen), 0);
    assert_true(zlen >= INGEST_CODEC_HEADER && zlen <= ingest_codec_bound(n));
    assert_int_equal(z[0], INGEST_CODEC_FORMAT);
    if (want_method >= 0)
        assert_int_equal(z[1], want_method);
    if (z[1] == INGEST_CODEC_METHOD_RAW)
        assert_int_equal(zlen, INGEST_CODEC_HEADER + n);
    else
        assert_true(zlen < INGEST_CODEC_HEADER + n);
    assert_int_equal(ingest_codec_raw_size(z, zlen, &raw), 0);
    assert_int_equal(raw, n);
    ingest_chunk_id(test_key, src, n, id);
    assert_int_equal(ingest_codec_decode(dec, z, zlen, back, n + 1, &blen, test_key, id), 0);
    assert_int_equal(blen, n);
    if (n > 0)
        assert_memory_equal(back, src, n);
    free(z);
    free(back);
    return zlen;
}

/* ---- tests ------------------------------------------------------------- */

static void test_levels_round_trip(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    const int levels[] = { ZSTD_minCLevel(), -50, -5, -1, 0, 1, 3, 9, 19, ZSTD_maxCLevel() };
    const size_t n = 32 * 1024;
    uint8_t *csv = malloc(n);
    size_t sizes[sizeof(levels) / sizeof(levels[0])];
    assert_non_null(csv);
    gen_csv(csv, n, 42);
    for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
        ingest_codec *c = NULL;
        assert_int_equal(ingest_codec_create(ctx, levels[i], &c), 0);
        /* At the very fastest level zstd may not shrink the chunk at all. */
        sizes[i] = round_trip(c, c, csv, n, i == 0 ? -1 : INGEST_CODEC_METHOD_ZSTD);
        /* The context is reused: a second chunk through the same codec. */
        round_trip(c, c, csv + 100, n - 100, i == 0 ? -1 : INGEST_CODEC_METHOD_ZSTD);
        ingest_codec_destroy(c);
    }
    /* Level 1 compresses telemetry CSV well; the maximum beats the minimum. */
    assert_true(sizes[5] * 3 < n);
    assert_true(sizes[9] < sizes[0]);
    assert_true(sizes[8] <= sizes[5]);
    free(csv);
    ingest_ctx_destroy(ctx);
}

static void test_bad_levels(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    ingest_codec *c = (ingest_codec *)&f;
    assert_int_equal(ingest_codec_create(ctx, ZSTD_maxCLevel() + 1, &c), INGEST_EINVAL);
    assert_null(c);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "level"));
    assert_int_equal(ingest_codec_create(ctx, ZSTD_minCLevel() - 1, &c), INGEST_EINVAL);
    assert_int_equal(ingest_codec_create(ctx, 3, NULL), INGEST_EINVAL);
    assert_int_equal(f.count, 1); /* only the context itself */
    ingest_codec_destroy(NULL);
    ingest_ctx_destroy(ctx);
}

static void test_incompressible_stored_raw(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    ingest_codec *c = NULL;
    const size_t sizes[] = { 1, 7, 100, 4096, 65536 + 3 };
    assert_int_equal(ingest_codec_create(ctx, 19, &c), 0);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint8_t *r = malloc(sizes[i]);
        assert_non_null(r);
        gen_random(r, sizes[i], i + 1);
        assert_int_equal(round_trip(c, c, r, sizes[i], INGEST_CODEC_METHOD_RAW), INGEST_CODEC_HEADER + sizes[i]);
        free(r);
    }
    /* Tiny but compressible input is still stored raw: a frame costs more. */
    assert_int_equal(round_trip(c, c, (const uint8_t *)"aaaaaaaa", 8, INGEST_CODEC_METHOD_RAW), 20);
    ingest_codec_destroy(c);
    ingest_ctx_destroy(ctx);
}

static void test_empty_chunk(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    ingest_codec *c = NULL;
    uint8_t z[INGEST_CODEC_HEADER];
    const uint8_t want[INGEST_CODEC_HEADER] = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    size_t zlen = 99, blen = 99;
    assert_int_equal(ingest_codec_create(ctx, 3, &c), 0);
    assert_int_equal(ingest_codec_bound(0), INGEST_CODEC_HEADER);
    assert_int_equal(ingest_codec_encode(c, NULL, 0, z, sizeof(z), &zlen), 0);
    assert_int_equal(zlen, INGEST_CODEC_HEADER);
    assert_memory_equal(z, want, sizeof(want));
    assert_int_equal(ingest_codec_decode(c, z, zlen, NULL, 0, &blen, NULL, NULL), 0);
    assert_int_equal(blen, 0);
    round_trip(c, c, (const uint8_t *)"", 0, INGEST_CODEC_METHOD_RAW);
    ingest_codec_destroy(c);
    ingest_ctx_destroy(ctx);
}

static void test_capacity_checks(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    ingest_codec *c = NULL;
    uint8_t src[2000], z[2100], back[2000];
    size_t zlen = 0, blen = 7;
    gen_csv(src, sizeof(src), 3);
    assert_int_equal(ingest_codec_create(ctx, 1, &c), 0);
    assert_int_equal(ingest_codec_encode(c, src, sizeof(src), z, ingest_codec_bound(sizeof(src)) - 1, &zlen),
                     INGEST_EINVAL);
    assert_int_equal(zlen, 0);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "bound"));
    assert_int_equal(ingest_codec_encode(c, src, INGEST_CODEC_MAX_RAW + 1u, z, SIZE_MAX, &zlen), INGEST_ETOOBIG);
    assert_int_equal(ingest_codec_encode(c, src, sizeof(src), z, sizeof(z), &zlen), 0);
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back) - 1, &blen, NULL, NULL), INGEST_ETOOBIG);
    assert_int_equal(blen, 0);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "capacity"));
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, NULL, NULL), 0);
    assert_int_equal(blen, sizeof(src));
    assert_memory_equal(back, src, sizeof(src));
    ingest_codec_destroy(c);
    ingest_ctx_destroy(ctx);
}

/* Samples for training: small CSV files of varying length. */
#define NSAMPLES 400
static uint8_t *make_samples(size_t sizes[NSAMPLES], size_t *total)
{
    size_t t = 0;
    for (unsigned i = 0; i < NSAMPLES; i++) {
        sizes[i] = 300 + (i * 37) % 900;
        t += sizes[i];
    }
    uint8_t *s = malloc(t);
    assert_non_null(s);
    size_t off = 0;
    for (unsigned i = 0; i < NSAMPLES; i++) {
        gen_csv(s + off, sizes[i], 1000 + i);
        off += sizes[i];
    }
    *total = t;
    return s;
}

static void test_dict_round_trip(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    size_t sizes[NSAMPLES], total = 0;
    uint8_t *samples = make_samples(sizes, &total);
    void *dict = NULL, *dict2 = NULL;
    size_t dlen = 0, dlen2 = 0;
    uint32_t id = 0, id2 = 0, got = 0;

    assert_int_equal(ingest_dict_train(ctx, samples, sizes, NSAMPLES, 8192, &dict, &dlen, &id), 0);
    assert_true(dlen > 256 && dlen <= 8192);
    assert_true(id >= 32768u && id < 0x80000000u);
    assert_int_equal(ingest_dict_id(dict, dlen), id);
    assert_int_equal(ingest_dict_id(dict, 7), 0);
    assert_int_equal(ingest_dict_id("not a dictionary", 16), 0);
    /* Deterministic: the same samples give the same dictionary and id. */
    assert_int_equal(ingest_dict_train(ctx, samples, sizes, NSAMPLES, 8192, &dict2, &dlen2, &id2), 0);
    assert_int_equal(id2, id);
    assert_int_equal(dlen2, dlen);
    assert_memory_equal(dict2, dict, dlen);
    ingest_buf_free(ctx, dict2);

    ingest_codec *enc = NULL, *dec = NULL, *nodict = NULL;
    assert_int_equal(ingest_codec_create(ctx, 3, &enc), 0);
    assert_int_equal(ingest_codec_create(ctx, 3, &dec), 0);
    assert_int_equal(ingest_codec_create(ctx, 3, &nodict), 0);
    assert_int_equal(ingest_codec_use_dict(enc, id), INGEST_ENOTFOUND);
    assert_int_equal(ingest_codec_add_dict(enc, dict, dlen, &got), 0);
    assert_int_equal(got, id);
    assert_int_equal(ingest_codec_add_dict(enc, dict, dlen, &got), 0); /* no-op */
    assert_int_equal(got, id);
    assert_int_equal(ingest_codec_add_dict(dec, dict, dlen, NULL), 0);
    {
        /* Other bytes under the same id (its last content byte changed): refused, not taken for the one loaded
         * (it would decode chunks of the other one into wrong bytes); loaded once that one is removed. */
        uint8_t *other = malloc(dlen);
        assert_non_null(other);
        memcpy(other, dict, dlen);
        other[dlen - 1] ^= 0x55;
        assert_int_equal(ingest_dict_id(other, dlen), id);
        assert_int_equal(ingest_codec_add_dict(dec, other, dlen, &got), INGEST_EMISMATCH);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "is loaded already, with other bytes"));
        assert_int_equal(ingest_codec_add_dict_decode_ref(dec, other, dlen, &got), INGEST_EMISMATCH);
        ingest_codec *tmp = NULL;
        assert_int_equal(ingest_codec_create(ctx, 3, &tmp), 0);
        assert_int_equal(ingest_codec_add_dict(tmp, dict, dlen, NULL), 0);
        assert_int_equal(ingest_codec_remove_dict(tmp, id), 0);
        assert_int_equal(ingest_codec_add_dict(tmp, other, dlen, &got), 0);
        assert_int_equal(got, id);
        ingest_codec_destroy(tmp);
        free(other);
    }

    /* A new small sample, unlike any trained on. */
    uint8_t sample[700];
    gen_csv(sample, sizeof(sample), 99999);
    const size_t plain = round_trip(enc, dec, sample, sizeof(sample), -1);
    assert_int_equal(ingest_codec_use_dict(enc, id), 0);
    const size_t with = round_trip(enc, dec, sample, sizeof(sample), INGEST_CODEC_METHOD_ZSTD_DICT);
    assert_true(with < plain);
    assert_true(with * 2 < sizeof(sample));

    /* The chunk names its dictionary; a codec without it refuses. */
    uint8_t z[sizeof(sample) + INGEST_CODEC_HEADER], back[sizeof(sample)];
    size_t zlen = 0, blen = 5;
    char want[32];
    assert_int_equal(ingest_codec_encode(enc, sample, sizeof(sample), z, sizeof(z), &zlen), 0);
    assert_int_equal(z[1], INGEST_CODEC_METHOD_ZSTD_DICT);
    assert_int_equal(z[4] | z[5] << 8 | z[6] << 16 | (uint32_t)z[7] << 24, id);
    assert_int_equal(ingest_codec_decode(nodict, z, zlen, back, sizeof(back), &blen, NULL, NULL), INGEST_ENOTFOUND);
    assert_int_equal(blen, 0);
    snprintf(want, sizeof(want), "%u", id);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), want));

    /* Back to no dictionary. */
    assert_int_equal(ingest_codec_use_dict(enc, 0), 0);
    round_trip(enc, nodict, sample, sizeof(sample), INGEST_CODEC_METHOD_ZSTD);

    /* Bad dictionaries. */
    assert_int_equal(ingest_codec_add_dict(nodict, "nonsense bytes", 14, &got), INGEST_EINVAL);
    assert_int_equal(got, 0);
    assert_int_equal(ingest_codec_add_dict(nodict, dict, 12, &got), INGEST_ECORRUPT);
    assert_int_equal(ingest_codec_add_dict(nodict, dict, INGEST_DICT_MAX_BYTES + 1u, &got), INGEST_ETOOBIG);

    ingest_codec_destroy(enc);
    ingest_codec_destroy(dec);
    ingest_codec_destroy(nodict);
    ingest_buf_free(ctx, dict);
    free(samples);
    ingest_ctx_destroy(ctx);
}

/* Syslog-like lines of exactly n bytes: nothing like gen_csv's. */
static void gen_log(uint8_t *p, size_t n, uint64_t seed)
{
    static const char *const prog[] = { "modbusd", "canbridge", "ntpsync", "watchdog", "uplink" };
    static const char *const msg[] = { "retry scheduled after timeout", "register block read complete",
                                       "link quality degraded on channel", "clock offset corrected by" };
    uint64_t s = seed * 0xD1B54A32D192ED03ull + 3;
    size_t len = 0;
    while (len < n) {
        char line[160];
        const uint64_t r = rng_next(&s);
        const int k = snprintf(line, sizeof(line), "<%u>Nov %2u %02u:%02u:%02u gw%03u %s[%u]: %s %u (seq 0x%08x)\n",
                               8 + (unsigned)(r % 16), 1 + (unsigned)((r >> 8) % 30), (unsigned)((r >> 16) % 24),
                               (unsigned)((r >> 24) % 60), (unsigned)((r >> 30) % 60), (unsigned)((r >> 36) % 200),
                               prog[(r >> 44) % 5], 100 + (unsigned)((r >> 47) % 9000), msg[(r >> 58) % 4],
                               (unsigned)((r >> 20) % 977), (unsigned)(r >> 32));
        const size_t take = (size_t)k < n - len ? (size_t)k : n - len;
        memcpy(p + len, line, take);
        len += take;
    }
}

/* Bytes of sample files of a kind (0 CSV, 1 logs), each encoded alone, with dictionary id (0: none). */
static uint64_t kind_bytes(ingest_codec *c, uint32_t id, int kind)
{
    uint64_t total = 0;
    uint8_t raw[1200], enc[1400], back[1200];
    assert_int_equal(ingest_codec_use_dict(c, id), 0);
    for (unsigned i = 0; i < 60; i++) {
        const size_t n = 400 + (i * 53) % 700;
        (kind ? gen_log : gen_csv)(raw, n, 90000 + i);
        size_t len = 0, got = 0;
        assert_int_equal(ingest_codec_encode(c, raw, n, enc, sizeof(enc), &len), 0);
        assert_int_equal(ingest_codec_decode(c, enc, len, back, sizeof(back), &got, NULL, NULL), 0);
        assert_int_equal(got, n);
        assert_memory_equal(back, raw, n);
        total += len;
    }
    return total;
}

/*
 * The dictionary docs/compression.md describes, made here with ZDICT and libsodium directly (an
 * independent reference): contents trained from each group of samples (cap bytes each), one after the
 * other, finalized over all the samples with the id BLAKE2b-256 of the contents gives.  Returns its length.
 */
static size_t ref_dict(uint8_t *out, size_t max, const uint8_t *smp, const size_t *sizes, unsigned nsamples,
                       const unsigned *first, const unsigned *count, const size_t *cap, unsigned ngroups)
{
    uint8_t content[8192], tmp[8192];
    size_t clen = 0;
    for (unsigned g = 0; g < ngroups; g++) {
        size_t off = 0;
        for (unsigned i = 0; i < first[g]; i++)
            off += sizes[i];
        const size_t r = ZDICT_trainFromBuffer(tmp, cap[g], smp + off, sizes + first[g], count[g]);
        assert_false(ZDICT_isError(r));
        const size_t hdr = ZDICT_getDictHeaderSize(tmp, r);
        assert_false(ZDICT_isError(hdr));
        memcpy(content + clen, tmp + hdr, r - hdr);
        clen += r - hdr;
    }
    uint8_t h[crypto_generichash_BYTES];
    crypto_generichash(h, sizeof(h), content, clen, NULL, 0);
    ZDICT_params_t p;
    memset(&p, 0, sizeof(p));
    p.compressionLevel = 1;
    p.dictID = 32768u + ((uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24) %
                            (0x80000000u - 32768u);
    const size_t r = ZDICT_finalizeDictionary(out, max, content, clen, smp, sizes, nsamples, p);
    assert_false(ZDICT_isError(r));
    return r;
}

/*
 * ingest_dict_train_parts: a part per kind of samples (CSV, then logs); one part is ingest_dict_train's
 * dictionary byte for byte; the same samples give the same dictionary; it serves both kinds (round trips,
 * smaller than without it); a part of too few samples gets no content of its own; argument errors.
 */
static void test_dict_train_parts(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    enum { PER = 300 };
    size_t sizes[2 * PER], total = 0;
    for (unsigned i = 0; i < 2 * PER; i++) {
        sizes[i] = 300 + (i * 37) % 900;
        total += sizes[i];
    }
    uint8_t *smp = malloc(total);
    assert_non_null(smp);
    size_t off = 0;
    for (unsigned i = 0; i < 2 * PER; off += sizes[i], i++)
        (i < PER ? gen_csv : gen_log)(smp + off, sizes[i], 1000 + i);
    void *d1 = NULL, *d2 = NULL, *d3 = NULL;
    size_t l1 = 0, l2 = 0, l3 = 0;
    uint32_t id1 = 0, id2 = 0, id3 = 0;
    uint8_t ref[8192];
    /* one part: ingest_dict_train's dictionary, and both the reference's (one content from all) */
    const unsigned all[1] = { 2 * PER };
    assert_int_equal(ingest_dict_train_parts(ctx, smp, sizes, 2 * PER, all, 1, 8192, &d1, &l1, &id1), 0);
    assert_int_equal(ingest_dict_train(ctx, smp, sizes, 2 * PER, 8192, &d2, &l2, &id2), 0);
    assert_int_equal(l1, l2);
    assert_memory_equal(d1, d2, l1);
    assert_int_equal(id1, id2);
    {
        const unsigned f0[1] = { 0 }, c0[1] = { 2 * PER };
        const size_t cap0[1] = { 8192 };
        const size_t rl = ref_dict(ref, sizeof(ref), smp, sizes, 2 * PER, f0, c0, cap0, 1);
        assert_int_equal(rl, l2);
        assert_memory_equal(ref, d2, rl);
    }
    ingest_buf_free(ctx, d1);
    ingest_buf_free(ctx, d2);
    /* two parts: deterministic, in zstd's private id range, within the size */
    const unsigned two[2] = { PER, PER };
    assert_int_equal(ingest_dict_train_parts(ctx, smp, sizes, 2 * PER, two, 2, 8192, &d1, &l1, &id1), 0);
    assert_int_equal(ingest_dict_train_parts(ctx, smp, sizes, 2 * PER, two, 2, 8192, &d2, &l2, &id2), 0);
    assert_int_equal(l1, l2);
    assert_memory_equal(d1, d2, l1);
    assert_int_equal(id1, id2);
    assert_int_equal(ingest_dict_id(d1, l1), id1);
    {
        /* the reference: CSV's content of half the size, then the logs' (equal counts: the later part last) */
        const unsigned f2[2] = { 0, PER }, c2[2] = { PER, PER };
        const size_t cap2[2] = { 4096, 4096 };
        const size_t rl = ref_dict(ref, sizeof(ref), smp, sizes, 2 * PER, f2, c2, cap2, 2);
        assert_int_equal(rl, l1);
        assert_memory_equal(ref, d1, rl);
    }
    /* it serves both kinds: each file alone, at least 10% smaller with it */
    ingest_codec *c = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &c), 0);
    assert_int_equal(ingest_codec_add_dict(c, d1, l1, NULL), 0);
    for (int kind = 0; kind < 2; kind++) {
        const uint64_t plain = kind_bytes(c, 0, kind), with = kind_bytes(c, id1, kind);
        if (with * 10 > plain * 9)
            fail_msg("kind %d: %llu bytes with the dictionary, %llu without", kind, (unsigned long long)with,
                     (unsigned long long)plain);
    }
    ingest_codec_destroy(c);
    /* a part of 4 samples gets no content of its own, and one part left is trained as all the samples at once */
    const unsigned few[2] = { 4, PER };
    const size_t few_len = sizes[0] + sizes[1] + sizes[2] + sizes[3];
    size_t sz[PER + 4];
    memcpy(sz, sizes, 4 * sizeof(size_t));
    memcpy(sz + 4, sizes + PER, PER * sizeof(size_t));
    uint8_t *smp2 = malloc(total);
    assert_non_null(smp2);
    size_t logs_off = 0;
    for (unsigned i = 0; i < PER; i++)
        logs_off += sizes[i];
    memcpy(smp2, smp, few_len);
    memcpy(smp2 + few_len, smp + logs_off, total - logs_off);
    assert_int_equal(ingest_dict_train_parts(ctx, smp2, sz, PER + 4, few, 2, 8192, &d3, &l3, &id3), 0);
    {
        void *d4 = NULL;
        size_t l4 = 0;
        uint32_t id4 = 0;
        assert_int_equal(ingest_dict_train(ctx, smp2, sz, PER + 4, 8192, &d4, &l4, &id4), 0);
        assert_int_equal(l3, l4);
        assert_memory_equal(d3, d4, l3);
        ingest_buf_free(ctx, d4);
    }
    ingest_buf_free(ctx, d3);
    d3 = NULL;
    /* errors: no part, too many, counts that do not add up; parts too small for a content of their own are
     * trained as one, failing as ingest_dict_train does */
    const unsigned bad[2] = { PER, PER - 1 };
    const unsigned tiny[2] = { 3, 4 };
    unsigned many[INGEST_DICT_PARTS_MAX + 1];
    for (unsigned i = 0; i <= INGEST_DICT_PARTS_MAX; i++)
        many[i] = i == 0 ? 2 * PER - INGEST_DICT_PARTS_MAX : 1;
    assert_int_equal(ingest_dict_train_parts(ctx, smp, sizes, 2 * PER, two, 0, 8192, &d3, &l3, &id3), INGEST_EINVAL);
    assert_int_equal(ingest_dict_train_parts(ctx, smp, sizes, 2 * PER, NULL, 2, 8192, &d3, &l3, &id3), INGEST_EINVAL);
    assert_int_equal(ingest_dict_train_parts(ctx, smp, sizes, 2 * PER, many, INGEST_DICT_PARTS_MAX + 1, 8192, &d3, &l3,
                                             &id3), INGEST_EINVAL);
    assert_int_equal(ingest_dict_train_parts(ctx, smp, sizes, 2 * PER, bad, 2, 8192, &d3, &l3, &id3), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "parts count"));
    {
        void *d4 = NULL;
        size_t l4 = 0;
        uint32_t id4 = 0;
        const int r3 = ingest_dict_train_parts(ctx, smp, sizes, 7, tiny, 2, 8192, &d3, &l3, &id3);
        assert_int_equal(r3, ingest_dict_train(ctx, smp, sizes, 7, 8192, &d4, &l4, &id4));
        assert_int_equal(l3, l4);
        if (r3 == 0)
            assert_memory_equal(d3, d4, l3);
        ingest_buf_free(ctx, d3);
        ingest_buf_free(ctx, d4);
        d3 = NULL;
    }
    ingest_buf_free(ctx, d1);
    ingest_buf_free(ctx, d2);
    free(smp);
    free(smp2);
    ingest_ctx_destroy(ctx);
}

static void test_dict_train_errors(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    void *dict = (void *)&f;
    size_t dlen = 9, sizes[4] = { 10, 10, 10, 10 };
    uint32_t id = 9;
    const char same[40] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    assert_int_equal(ingest_dict_train(ctx, same, sizes, 0, 4096, &dict, &dlen, &id), INGEST_EINVAL);
    assert_null(dict);
    assert_int_equal(dlen, 0);
    assert_int_equal(id, 0);
    assert_int_equal(ingest_dict_train(ctx, same, sizes, 4, 100, &dict, &dlen, &id), INGEST_EINVAL);
    assert_int_equal(ingest_dict_train(ctx, same, sizes, 4, INGEST_DICT_MAX_BYTES + 1u, &dict, &dlen, &id),
                     INGEST_EINVAL);
    /* Four identical 10-byte samples: ZDICT refuses, nothing leaks. */
    assert_int_equal(ingest_dict_train(ctx, same, sizes, 4, 4096, &dict, &dlen, &id), INGEST_EINVAL);
    assert_null(dict);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "dict"));
    ingest_buf_free(ctx, NULL);
    ingest_ctx_destroy(ctx);
}

/* Valid encoded chunks of each method, for the hostile-input tests. */
struct chunks {
    ingest_ctx *ctx;
    ingest_codec *c;
    void *dict;
    size_t dlen;
    uint8_t csv[3000];
    uint8_t rnd[600];
    uint8_t z[3][3100];
    size_t zlen[3];
    const uint8_t *raw[3];
    size_t rawlen[3];
};

static void chunks_make(struct chunks *k, struct failing *f)
{
    size_t sizes[NSAMPLES], total;
    uint8_t *samples = make_samples(sizes, &total);
    uint32_t id;
    memset(k, 0, sizeof(*k));
    k->ctx = make_ctx(f);
    assert_int_equal(ingest_dict_train(k->ctx, samples, sizes, NSAMPLES, 4096, &k->dict, &k->dlen, &id), 0);
    free(samples);
    assert_int_equal(ingest_codec_create(k->ctx, 3, &k->c), 0);
    assert_int_equal(ingest_codec_add_dict(k->c, k->dict, k->dlen, NULL), 0);
    gen_csv(k->csv, sizeof(k->csv), 5);
    gen_random(k->rnd, sizeof(k->rnd), 5);
    const uint8_t *src[3] = { k->rnd, k->csv, k->csv };
    const size_t n[3] = { sizeof(k->rnd), sizeof(k->csv), sizeof(k->csv) };
    for (int m = 0; m < 3; m++) {
        assert_int_equal(ingest_codec_use_dict(k->c, m == 2 ? id : 0), 0);
        assert_int_equal(ingest_codec_encode(k->c, src[m], n[m], k->z[m], sizeof(k->z[m]), &k->zlen[m]), 0);
        assert_int_equal(k->z[m][1], m);
        k->raw[m] = src[m];
        k->rawlen[m] = n[m];
    }
}

static void chunks_free(struct chunks *k)
{
    ingest_codec_destroy(k->c);
    ingest_buf_free(k->ctx, k->dict);
    ingest_ctx_destroy(k->ctx);
}

static void test_truncated(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    struct chunks *k = malloc(sizeof(*k));
    uint8_t back[3000];
    assert_non_null(k);
    chunks_make(k, &f);
    for (int m = 0; m < 3; m++) {
        for (size_t len = 0; len < k->zlen[m]; len++) {
            /* A fresh copy of exactly len bytes, so ASan sees any overread. */
            uint8_t *t = malloc(len + 1);
            size_t blen = 77;
            uint32_t raw = 0;
            assert_non_null(t);
            memcpy(t, k->z[m], len);
            const int rc = ingest_codec_decode(k->c, len ? t : NULL, len, back, sizeof(back), &blen, NULL, NULL);
            if (rc >= 0)
                fail_msg("method %d truncated to %zu of %zu bytes decoded", m, len, k->zlen[m]);
            assert_int_equal(blen, 0);
            if (len < INGEST_CODEC_HEADER) {
                assert_int_equal(rc, INGEST_ECORRUPT);
                assert_int_equal(ingest_codec_raw_size(t, len, &raw), INGEST_ECORRUPT);
            } else {
                assert_int_equal(ingest_codec_raw_size(t, len, &raw), 0);
                assert_int_equal(raw, k->rawlen[m]);
            }
            free(t);
        }
    }
    chunks_free(k);
    free(k);
}

static void test_flipped_bytes(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    struct chunks *k = malloc(sizeof(*k));
    uint8_t back[3000], id[3][INGEST_ID_BYTES];
    unsigned tried = 0, rejected_checked = 0, decoded_unchecked = 0;
    assert_non_null(k);
    chunks_make(k, &f);
    for (int m = 0; m < 3; m++)
        ingest_chunk_id(test_key, k->raw[m], k->rawlen[m], id[m]);
    const uint8_t masks[] = { 0x01, 0x80, 0xff, 0x10 };
    for (int m = 0; m < 3; m++) {
        /* Raw payloads are all data: flipping the first 64 bytes is plenty. */
        const size_t end = m == 0 ? INGEST_CODEC_HEADER + 64 : k->zlen[m];
        for (size_t pos = 0; pos < end; pos++) {
            for (size_t b = 0; b < sizeof(masks); b++) {
                uint8_t t[3100];
                size_t blen = 0;
                memcpy(t, k->z[m], k->zlen[m]);
                t[pos] ^= masks[b];
                tried++;
                int rc = ingest_codec_decode(k->c, t, k->zlen[m], back, sizeof(back), &blen, NULL, NULL);
                if (rc == 0) {
                    decoded_unchecked++;
                    assert_true(blen <= sizeof(back));
                } else {
                    assert_true(rc < 0);
                    assert_int_equal(blen, 0);
                }
                rc = ingest_codec_decode(k->c, t, k->zlen[m], back, sizeof(back), &blen, test_key, id[m]);
                if (rc == 0) {
                    /* Only a flip that changes nothing decoded may pass the id check. */
                    assert_int_equal(blen, k->rawlen[m]);
                    assert_memory_equal(back, k->raw[m], blen);
                } else {
                    rejected_checked++;
                    assert_true(rc < 0);
                }
            }
        }
    }
    /* A raw payload flip decodes unchecked and is caught by the id check. */
    assert_true(decoded_unchecked > 0);
    assert_true(rejected_checked * 10 > tried * 9);
    chunks_free(k);
    free(k);
}

static void test_header_errors(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    struct chunks *k = malloc(sizeof(*k));
    uint8_t t[3200], back[3000];
    size_t blen = 0;
    uint32_t raw = 0;
    assert_non_null(k);
    chunks_make(k, &f);
    ingest_ctx *ctx = k->ctx;
    const size_t zl = k->zlen[1];

#define DECODE(buf, len) ingest_codec_decode(k->c, (buf), (len), back, sizeof(back), &blen, NULL, NULL)
    for (int m = 0; m < 3; m++) {
        memcpy(t, k->z[m], k->zlen[m]);
        t[0] = 2;
        assert_int_equal(DECODE(t, k->zlen[m]), INGEST_EVERSION);
        assert_int_equal(ingest_codec_raw_size(t, k->zlen[m], &raw), INGEST_EVERSION);
        t[0] = 0;
        assert_int_equal(DECODE(t, k->zlen[m]), INGEST_EVERSION);
        assert_non_null(strstr(ingest_ctx_errmsg(ctx), "version"));
    }
    /* Declared raw length over the bound, before any work. */
    memcpy(t, k->z[1], zl);
    t[8] = 0x01, t[9] = 0x00, t[10] = 0x00, t[11] = 0x04; /* 64 MiB + 1 */
    assert_int_equal(DECODE(t, zl), INGEST_ETOOBIG);
    assert_int_equal(ingest_codec_raw_size(t, zl, &raw), INGEST_ETOOBIG);
    assert_int_equal(raw, 0);
    t[8] = t[9] = t[10] = t[11] = 0xff;
    assert_int_equal(DECODE(t, zl), INGEST_ETOOBIG);
    t[8] = 0x00, t[11] = 0x04; /* exactly the bound: accepted by the header, too big for cap */
    t[9] = t[10] = 0;
    assert_int_equal(ingest_codec_raw_size(t, zl, &raw), 0);
    assert_int_equal(raw, INGEST_CODEC_MAX_RAW);
    assert_int_equal(DECODE(t, zl), INGEST_ETOOBIG);
    /* Raw length disagreeing with the frame's content size. */
    memcpy(t, k->z[1], zl);
    t[8] ^= 0x10; /* 3000 -> 2984 */
    assert_int_equal(DECODE(t, zl), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "declares"));
    /* Reserved bytes, unknown method, dictionary id with the wrong method. */
    memcpy(t, k->z[1], zl);
    t[3] = 1;
    assert_int_equal(DECODE(t, zl), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "reserved"));
    memcpy(t, k->z[1], zl);
    t[1] = 3;
    assert_int_equal(DECODE(t, zl), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "method"));
    memcpy(t, k->z[1], zl);
    t[4] = 7;
    assert_int_equal(DECODE(t, zl), INGEST_ECORRUPT);
    memcpy(t, k->z[2], k->zlen[2]);
    t[4] = t[5] = t[6] = t[7] = 0;
    assert_int_equal(DECODE(t, k->zlen[2]), INGEST_ECORRUPT);
    /* A dictionary frame relabelled as plain zstd. */
    memcpy(t, k->z[2], k->zlen[2]);
    t[1] = INGEST_CODEC_METHOD_ZSTD;
    t[4] = t[5] = t[6] = t[7] = 0;
    assert_int_equal(DECODE(t, k->zlen[2]), INGEST_ECORRUPT);
    /* A frame naming another dictionary than the header (which is loaded). */
    const uint32_t did = ingest_dict_id(k->dict, k->dlen);
    assert_int_equal(ZSTD_getDictID_fromFrame(k->z[2] + INGEST_CODEC_HEADER, k->zlen[2] - INGEST_CODEC_HEADER),
                     did);
    uint8_t *other = malloc(k->dlen);
    assert_non_null(other);
    memcpy(other, k->dict, k->dlen);
    other[4] = 0x40, other[5] = 0x9c, other[6] = other[7] = 0; /* id 40000 */
    assert_int_equal(ingest_codec_add_dict(k->c, other, k->dlen, &raw), 0);
    assert_int_equal(raw, 40000);
    free(other);
    memcpy(t, k->z[2], k->zlen[2]);
    t[4] = 0x40, t[5] = 0x9c, t[6] = t[7] = 0;
    assert_int_equal(DECODE(t, k->zlen[2]), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "names dictionary"));
    /* Same, with a dictionary the codec does not hold. */
    t[4] = 0x41;
    assert_int_equal(DECODE(t, k->zlen[2]), INGEST_ENOTFOUND);
    /* Trailing bytes after the frame; a second frame appended. */
    memcpy(t, k->z[1], zl);
    t[zl] = 0;
    assert_int_equal(DECODE(t, zl + 1), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "after the zstd frame"));
    memcpy(t + zl, k->z[1] + INGEST_CODEC_HEADER, zl - INGEST_CODEC_HEADER);
    assert_int_equal(DECODE(t, 2 * zl - INGEST_CODEC_HEADER), INGEST_ECORRUPT);
    /* Raw payload longer or shorter than declared. */
    memcpy(t, k->z[0], k->zlen[0]);
    assert_int_equal(DECODE(t, k->zlen[0] + 1), INGEST_ECORRUPT);
    assert_int_equal(DECODE(t, k->zlen[0] - 1), INGEST_ECORRUPT);
    /* Empty chunk claiming zstd. */
    const uint8_t empty_zstd[INGEST_CODEC_HEADER] = { 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    assert_int_equal(DECODE(empty_zstd, sizeof(empty_zstd)), INGEST_ECORRUPT);
    assert_int_equal(ingest_codec_raw_size(k->z[1], zl, NULL), INGEST_EINVAL);
#undef DECODE
    chunks_free(k);
    free(k);
}

/* Frames without a content size: the decoded length itself is checked. */
static void test_frame_without_size(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    ingest_codec *c = NULL;
    uint8_t src[2000], t[2100], back[2100];
    size_t blen = 0;
    gen_csv(src, sizeof(src), 11);
    ZSTD_CCtx *z = ZSTD_createCCtx();
    assert_non_null(z);
    assert_int_equal(ZSTD_CCtx_setParameter(z, ZSTD_c_contentSizeFlag, 0), 0);
    const size_t r = ZSTD_compress2(z, t + INGEST_CODEC_HEADER, sizeof(t) - INGEST_CODEC_HEADER, src, sizeof(src));
    assert_false(ZSTD_isError(r));
    ZSTD_freeCCtx(z);
    assert_int_equal(ingest_codec_create(ctx, 3, &c), 0);
    const size_t n = INGEST_CODEC_HEADER + r;
    const uint32_t lens[] = { sizeof(src), sizeof(src) - 1, sizeof(src) + 1, 1 };
    const int want[] = { 0, INGEST_ECORRUPT, INGEST_ECORRUPT, INGEST_ECORRUPT };
    for (size_t i = 0; i < 4; i++) {
        t[0] = 1, t[1] = 1, t[2] = t[3] = 0, t[4] = t[5] = t[6] = t[7] = 0;
        t[8] = (uint8_t)lens[i], t[9] = (uint8_t)(lens[i] >> 8), t[10] = t[11] = 0;
        assert_int_equal(ingest_codec_decode(c, t, n, back, sizeof(back), &blen, NULL, NULL), want[i]);
    }
    t[8] = (uint8_t)sizeof(src), t[9] = (uint8_t)(sizeof(src) >> 8);
    assert_int_equal(ingest_codec_decode(c, t, n, back, sizeof(back), &blen, NULL, NULL), 0);
    assert_int_equal(blen, sizeof(src));
    assert_memory_equal(back, src, sizeof(src));
    ingest_codec_destroy(c);
    ingest_ctx_destroy(ctx);
}

static void test_id_mismatch(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    ingest_codec *c = NULL;
    uint8_t src[5000], z[5100], back[5000], id[INGEST_ID_BYTES], other_key[INGEST_KEY_BYTES];
    size_t zlen = 0, blen = 0;
    gen_csv(src, sizeof(src), 21);
    ingest_chunk_id(test_key, src, sizeof(src), id);
    assert_int_equal(ingest_codec_create(ctx, 1, &c), 0);
    assert_int_equal(ingest_codec_encode(c, src, sizeof(src), z, sizeof(z), &zlen), 0);
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, test_key, id), 0);
    assert_int_equal(blen, sizeof(src));
    id[31] ^= 1;
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, test_key, id), INGEST_EMISMATCH);
    assert_int_equal(blen, 0);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "id"));
    /* No key or no id: no check. */
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, NULL, id), 0);
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, test_key, NULL), 0);
    /* The right id under another key is a mismatch too. */
    id[31] ^= 1;
    memcpy(other_key, test_key, sizeof(other_key));
    other_key[0] ^= 0x40;
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, other_key, id), INGEST_EMISMATCH);
    /* Empty chunk: the id of zero bytes. */
    uint8_t eid[INGEST_ID_BYTES];
    ingest_chunk_id(test_key, NULL, 0, eid);
    assert_int_equal(ingest_codec_encode(c, NULL, 0, z, sizeof(z), &zlen), 0);
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, test_key, eid), 0);
    assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, test_key, id), INGEST_EMISMATCH);
    ingest_codec_destroy(c);
    ingest_ctx_destroy(ctx);
}

/* ---- shuffle2 and adaptive encoding ------------------------------------- */

/* A slowly varying int16 signal (little-endian samples), n bytes. */
static void gen_signal(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 3;
    int v = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        v += (int)(rng_next(&s) % 41) - 20;
        if (v > 30000 || v < -30000)
            v /= 2;
        p[i] = (uint8_t)(v & 0xff);
        p[i + 1] = (uint8_t)((unsigned)v >> 8);
    }
    if (n & 1)
        p[n - 1] = 0x5a;
}

/* adaptive encode of src with hint, decode with the id check; returns the encoded size, *filter and *method set */
static size_t adaptive_trip(ingest_codec *c, ingest_codec *dec, const uint8_t *src, size_t n, ingest_codec_hint *h,
                            unsigned *filter, unsigned *method)
{
    uint8_t *z = malloc(ingest_codec_bound(n));
    uint8_t *back = malloc(n);
    size_t zlen = 0, blen = 0;
    uint8_t id[INGEST_ID_BYTES];
    assert_non_null(z);
    assert_non_null(back);
    assert_int_equal(ingest_codec_encode_adaptive(c, src, n, z, ingest_codec_bound(n), &zlen, h), 0);
    *method = z[1];
    *filter = z[2];
    assert_int_equal(z[3], 0);
    ingest_chunk_id(test_key, src, n, id);
    assert_int_equal(ingest_codec_decode(dec, z, zlen, back, n, &blen, test_key, id), 0);
    assert_int_equal(blen, n);
    assert_memory_equal(back, src, n);
    free(z);
    free(back);
    return zlen;
}

/*
 * The shuffle2 layout itself (docs/compression.md): the even bytes, then the
 * odd ones, an odd length's last byte last.  A round trip alone would pass
 * with both directions wrong alike, so the filtered frame is decoded with
 * zstd alone and compared with a plain loop's layout; and a frame of that
 * layout made here decodes to the source.  Lengths below and around the
 * 32-byte steps of the vector code.
 */
static void test_shuffle2_layout(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_codec *c = NULL, *dec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &c), 0);
    assert_int_equal(ingest_codec_create(ctx, 1, &dec), 0);
    assert_int_equal(ingest_codec_set_filters(c, INGEST_CODEC_FILTER_SHUFFLE2), 0);
    assert_int_equal(ingest_codec_set_filters(dec, INGEST_CODEC_FILTER_SHUFFLE2), 0);
    /* short ones too (the plain loop alone, or one vector step and a tail): stored raw, they are
     * checked through the decode of a frame made here */
    static const size_t lens[] = { 1, 2, 3, 31, 32, 33, 63, 4096, 4097, 4127, 4128, 4129, 4160, 65535, 65536, 65537 };
    const size_t maxn = 65537;
    uint8_t *src = malloc(maxn), *ref = malloc(maxn), *out = malloc(maxn), *z = malloc(ingest_codec_bound(maxn));
    assert_non_null(src);
    assert_non_null(ref);
    assert_non_null(out);
    assert_non_null(z);
    unsigned checked = 0;
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const size_t n = lens[k];
        gen_signal(src, n, 50 + k);
        for (size_t i = 0; i < n / 2; i++) {
            ref[i] = src[2 * i];
            ref[n / 2 + i] = src[2 * i + 1];
        }
        if (n & 1)
            ref[n - 1] = src[n - 1];
        ingest_codec_hint h = { INGEST_CODEC_HINT_SHUFFLE2, 8 };
        size_t zlen = 0, olen = 0;
        assert_int_equal(ingest_codec_encode_adaptive(c, src, n, z, ingest_codec_bound(n), &zlen, &h), 0);
        if (z[1] == INGEST_CODEC_METHOD_ZSTD) {
            assert_int_equal(z[2], INGEST_CODEC_FILTER_SHUFFLE2);
            const size_t d = ZSTD_decompress(out, n, z + INGEST_CODEC_HEADER, zlen - INGEST_CODEC_HEADER);
            assert_false(ZSTD_isError(d));
            assert_int_equal(d, n);
            assert_memory_equal(out, ref, n);
            checked++;
        }
        /* a frame of the reference layout, made with zstd alone, decodes to the source */
        const size_t r = ZSTD_compress(z + INGEST_CODEC_HEADER, ingest_codec_bound(maxn) - INGEST_CODEC_HEADER, ref, n, 1);
        assert_false(ZSTD_isError(r));
        z[1] = INGEST_CODEC_METHOD_ZSTD;
        z[2] = INGEST_CODEC_FILTER_SHUFFLE2;
        assert_int_equal(ingest_codec_decode(dec, z, INGEST_CODEC_HEADER + r, out, n, &olen, NULL, NULL), 0);
        assert_int_equal(olen, n);
        assert_memory_equal(out, src, n);
    }
    assert_true(checked >= 6);
    free(src);
    free(ref);
    free(out);
    free(z);
    ingest_codec_destroy(c);
    ingest_codec_destroy(dec);
    ingest_ctx_destroy(ctx);
}

static void test_shuffle2_adaptive(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_codec *c = NULL, *dec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &c), 0);
    assert_int_equal(ingest_codec_create(ctx, 1, &dec), 0);
    const size_t n = 65537; /* odd: the last byte stays in place */
    uint8_t *sig = malloc(n), *csv = malloc(n), *rnd = malloc(n), *z = malloc(ingest_codec_bound(n));
    assert_non_null(sig);
    assert_non_null(csv);
    assert_non_null(rnd);
    assert_non_null(z);
    gen_signal(sig, n, 1);
    gen_csv(csv, n, 2);
    uint64_t s = 99;
    for (size_t i = 0; i < n; i++)
        rnd[i] = (uint8_t)rng_next(&s);
    unsigned filter, method;
    size_t plain = 0;
    assert_int_equal(ingest_codec_encode(c, sig, n, z, ingest_codec_bound(n), &plain), 0);
    assert_int_equal(z[2], INGEST_CODEC_FILTER_NONE);

    /* not allowed (the peer did not agree): never filtered, and the probe settles on zstd alone */
    ingest_codec_hint h = { 0, 0 };
    assert_int_equal(adaptive_trip(c, dec, sig, n, &h, &filter, &method), plain);
    assert_int_equal(filter, INGEST_CODEC_FILTER_NONE);
    assert_int_not_equal(h.mode, INGEST_CODEC_HINT_SHUFFLE2);

    /* allowed: the signal's first chunk is tried filtered, which wins by far, and the file keeps it */
    assert_int_equal(ingest_codec_set_filters(c, 0x80), INGEST_EINVAL);
    assert_int_equal(ingest_codec_set_filters(c, INGEST_CODEC_FILTER_SHUFFLE2), 0);
    memset(&h, 0, sizeof h);
    const size_t f1 = adaptive_trip(c, dec, sig, n, &h, &filter, &method);
    assert_int_equal(filter, INGEST_CODEC_FILTER_SHUFFLE2);
    assert_int_equal(method, INGEST_CODEC_METHOD_ZSTD);
    assert_int_equal(h.mode, INGEST_CODEC_HINT_SHUFFLE2);
    assert_true(f1 < plain * 9 / 10);
    for (int i = 0; i < 3; i++) {
        gen_signal(sig, n, 10 + (uint64_t)i);
        adaptive_trip(c, dec, sig, n, &h, &filter, &method);
        assert_int_equal(filter, INGEST_CODEC_FILTER_SHUFFLE2);
    }
    assert_int_equal(h.left, 64 - 3);
    /* a filtered chunk that does not shrink is stored raw and unfiltered */
    h.mode = INGEST_CODEC_HINT_SHUFFLE2;
    adaptive_trip(c, dec, rnd, n, &h, &filter, &method);
    assert_int_equal(method, INGEST_CODEC_METHOD_RAW);
    assert_int_equal(filter, INGEST_CODEC_FILTER_NONE);

    /* text compresses well alone: plain for good, never filtered */
    memset(&h, 0, sizeof h);
    adaptive_trip(c, dec, csv, n, &h, &filter, &method);
    assert_int_equal(h.mode, INGEST_CODEC_HINT_PLAIN);
    assert_int_equal(filter, INGEST_CODEC_FILTER_NONE);
    assert_int_equal(method, INGEST_CODEC_METHOD_ZSTD);

    /* random bytes: the probe stores them, then 64 chunks are stored without trying, then it probes again */
    memset(&h, 0, sizeof h);
    adaptive_trip(c, dec, rnd, n, &h, &filter, &method);
    assert_int_equal(h.mode, INGEST_CODEC_HINT_STORE);
    assert_int_equal(method, INGEST_CODEC_METHOD_RAW);
    for (int i = 0; i < 64; i++) {
        adaptive_trip(c, dec, csv, n, &h, &filter, &method); /* compressible, but stored: no probe yet */
        assert_int_equal(method, INGEST_CODEC_METHOD_RAW);
    }
    assert_int_equal(h.left, 0);
    adaptive_trip(c, dec, csv, n, &h, &filter, &method);
    assert_int_equal(method, INGEST_CODEC_METHOD_ZSTD);
    assert_int_equal(h.mode, INGEST_CODEC_HINT_PLAIN);
    /* small chunks are not tried filtered */
    memset(&h, 0, sizeof h);
    gen_signal(sig, 2000, 5);
    adaptive_trip(c, dec, sig, 2000, &h, &filter, &method);
    assert_int_equal(filter, INGEST_CODEC_FILTER_NONE);
    /* hint NULL is plain ingest_codec_encode */
    size_t zl = 0;
    gen_signal(sig, n, 1);
    assert_int_equal(ingest_codec_encode_adaptive(c, sig, n, z, ingest_codec_bound(n), &zl, NULL), 0);
    assert_int_equal(zl, plain);

    /* hostile headers: unknown filter, filter on a raw payload, reserved byte 3, raw length over cap */
    memset(&h, 0, sizeof h);
    assert_int_equal(ingest_codec_encode_adaptive(c, sig, n, z, ingest_codec_bound(n), &zl, &h), 0);
    assert_int_equal(z[2], INGEST_CODEC_FILTER_SHUFFLE2);
    uint8_t *back = malloc(n);
    size_t blen = 0;
    assert_non_null(back);
    z[2] = 2;
    assert_int_equal(ingest_codec_decode(dec, z, zl, back, n, &blen, NULL, NULL), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "unknown filter 2 at offset 2"));
    z[2] = 1;
    z[3] = 7;
    assert_int_equal(ingest_codec_decode(dec, z, zl, back, n, &blen, NULL, NULL), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "reserved byte at offset 3"));
    z[3] = 0;
    assert_int_equal(ingest_codec_decode(dec, z, zl, back, n - 1, &blen, NULL, NULL), INGEST_ETOOBIG);
    assert_int_equal(ingest_codec_encode(c, rnd, n, z, ingest_codec_bound(n), &zl), 0);
    assert_int_equal(z[1], INGEST_CODEC_METHOD_RAW);
    z[2] = 1;
    assert_int_equal(ingest_codec_decode(dec, z, zl, back, n, &blen, NULL, NULL), INGEST_ECORRUPT);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "on a raw payload"));
    free(back);
    free(sig);
    free(csv);
    free(rnd);
    free(z);
    ingest_codec_destroy(c);
    ingest_codec_destroy(dec);
    ingest_ctx_destroy(ctx);
}

static void test_alloc_failure_create(void **state)
{
    (void)state;
    unsigned n, failures = 0;
    for (n = 2; n < 100; n++) { /* allocation 1 is the context itself */
        struct failing f = { 0, n, 0 };
        ingest_ctx *ctx = make_ctx(&f);
        ingest_codec *c = (ingest_codec *)&f;
        const int rc = ingest_codec_create(ctx, 3, &c);
        if (f.failed == 0) {
            assert_int_equal(rc, 0);
            ingest_codec_destroy(c);
            ingest_ctx_destroy(ctx);
            break;
        }
        assert_int_equal(rc, INGEST_ENOMEM);
        assert_null(c);
        failures++;
        ingest_ctx_destroy(ctx); /* cmocka fails the test on any leaked block */
    }
    /* The handle, the compression and the decompression contexts. */
    assert_true(failures >= 3);
    assert_true(n < 100);
}

/* Fail the Nth allocation made after create, through dictionary load, encode and decode. */
static void test_alloc_failure_ops(void **state)
{
    (void)state;
    size_t sizes[NSAMPLES], total, dlen;
    uint8_t *samples = make_samples(sizes, &total);
    void *dict;
    uint32_t id;
    struct failing f0 = { 0, 0, 0 };
    ingest_ctx *tctx = make_ctx(&f0);
    assert_int_equal(ingest_dict_train(tctx, samples, sizes, NSAMPLES, 4096, &dict, &dlen, &id), 0);
    free(samples);
    uint8_t src[4000], z[4100], back[4000];
    gen_csv(src, sizeof(src), 8);
    unsigned n, failures = 0;
    for (n = 1; n < 200; n++) {
        struct failing f = { 0, 0, 0 };
        ingest_ctx *ctx = make_ctx(&f);
        ingest_codec *c = NULL;
        size_t zlen = 0, blen = 0;
        int rc;
        assert_int_equal(ingest_codec_create(ctx, 3, &c), 0);
        f.count = 0;
        f.fail_at = n;
        rc = ingest_codec_add_dict(c, dict, dlen, NULL);
        if (rc == 0)
            rc = ingest_codec_use_dict(c, id);
        if (rc == 0)
            rc = ingest_codec_encode(c, src, sizeof(src), z, sizeof(z), &zlen);
        if (rc == 0)
            rc = ingest_codec_use_dict(c, 0);
        if (rc == 0)
            rc = ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, NULL, NULL);
        if (rc == 0)
            rc = ingest_codec_encode(c, src, sizeof(src), z, sizeof(z), &zlen);
        if (rc == 0)
            rc = ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, NULL, NULL);
        if (f.failed == 0) {
            assert_int_equal(rc, 0);
            assert_memory_equal(back, src, sizeof(src));
        } else {
            assert_int_equal(rc, INGEST_ENOMEM);
            failures++;
            /* The codec stays usable once memory is back. */
            f.fail_at = 0;
            assert_int_equal(ingest_codec_add_dict(c, dict, dlen, NULL), 0);
            assert_int_equal(ingest_codec_encode(c, src, sizeof(src), z, sizeof(z), &zlen), 0);
            assert_int_equal(ingest_codec_decode(c, z, zlen, back, sizeof(back), &blen, NULL, NULL), 0);
            assert_memory_equal(back, src, sizeof(src));
        }
        ingest_codec_destroy(c);
        ingest_ctx_destroy(ctx);
        if (f.failed == 0)
            break;
    }
    assert_true(failures >= 3);
    assert_true(n < 200);
    ingest_buf_free(tctx, dict);
    ingest_ctx_destroy(tctx);
}

static void test_alloc_failure_train(void **state)
{
    (void)state;
    size_t sizes[NSAMPLES], total, dlen = 3;
    uint8_t *samples = make_samples(sizes, &total);
    void *dict = NULL;
    uint32_t id = 5;
    struct failing f = { 0, 2, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    assert_int_equal(ingest_dict_train(ctx, samples, sizes, NSAMPLES, 4096, &dict, &dlen, &id), INGEST_ENOMEM);
    assert_null(dict);
    assert_int_equal(dlen, 0);
    assert_int_equal(id, 0);
    free(samples);
    ingest_ctx_destroy(ctx);
}

/* A dictionary loaded by reference for decoding only: decodes, never encodes, costs no copy. */
static void test_dict_decode_ref(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    size_t sizes[NSAMPLES], total = 0;
    uint8_t *samples = make_samples(sizes, &total);
    void *dict = NULL;
    size_t dlen = 0;
    uint32_t id = 0, got = 0;
    assert_int_equal(ingest_dict_train(ctx, samples, sizes, NSAMPLES, 4096, &dict, &dlen, &id), 0);
    ingest_codec *enc = NULL, *dec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &enc), 0);
    assert_int_equal(ingest_codec_create(ctx, 1, &dec), 0);
    assert_int_equal(ingest_codec_add_dict(enc, dict, dlen, NULL), 0);
    assert_int_equal(ingest_codec_use_dict(enc, id), 0);
    assert_int_equal(ingest_codec_add_dict_decode_ref(dec, dict, dlen, &got), 0);
    assert_int_equal(got, id);
    assert_int_equal(ingest_codec_use_dict(dec, id), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "decoding only"));
    uint8_t sample[700];
    gen_csv(sample, sizeof(sample), 4242);
    round_trip(enc, dec, sample, sizeof(sample), INGEST_CODEC_METHOD_ZSTD_DICT);
    /* Malformed tables are refused the same way; every allocation failure is ENOMEM, no leak. */
    ingest_codec *bad = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &bad), 0);
    assert_int_equal(ingest_codec_add_dict_decode_ref(bad, dict, 12, &got), INGEST_ECORRUPT);
    assert_int_equal(ingest_codec_add_dict_decode_ref(bad, "nonsense bytes", 14, &got), INGEST_EINVAL);
    f.fail_at = f.count + 1;
    assert_int_equal(ingest_codec_add_dict_decode_ref(bad, dict, dlen, &got), INGEST_ENOMEM);
    f.fail_at = 0;
    ingest_codec_destroy(bad);
    /* The dictionary's name: unkeyed BLAKE2b-256 of its bytes, deterministic, changed by any byte. */
    uint8_t h1[INGEST_DICT_HASH_BYTES], h2[INGEST_DICT_HASH_BYTES];
    ingest_dict_hash(dict, dlen, h1);
    ingest_dict_hash(dict, dlen, h2);
    assert_memory_equal(h1, h2, sizeof(h1));
    ((uint8_t *)dict)[dlen - 1] ^= 1;
    ingest_dict_hash(dict, dlen, h2);
    assert_memory_not_equal(h1, h2, sizeof(h1));
    ingest_codec_destroy(dec); /* before the bytes it refers to */
    ingest_codec_destroy(enc);
    ingest_buf_free(ctx, dict);
    free(samples);
    ingest_ctx_destroy(ctx);
}

static void test_dict_table_full(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    ingest_codec *c = NULL;
    size_t sizes[NSAMPLES], total;
    uint8_t *samples = make_samples(sizes, &total);
    void *dict;
    size_t dlen;
    uint32_t id, ids[65];
    assert_int_equal(ingest_codec_create(ctx, 1, &c), 0);
    assert_int_equal(ingest_dict_train(ctx, samples, sizes, NSAMPLES, 2048, &dict, &dlen, &id), 0);
    /* Distinct ids by rewriting the id field (the tables stay valid). */
    uint8_t *d = dict;
    for (unsigned i = 0; i < 65; i++) {
        const uint32_t want = 40000u + i;
        d[4] = (uint8_t)want, d[5] = (uint8_t)(want >> 8), d[6] = (uint8_t)(want >> 16), d[7] = (uint8_t)(want >> 24);
        const int rc = ingest_codec_add_dict(c, dict, dlen, &ids[i]);
        if (i < 64) {
            assert_int_equal(rc, 0);
            assert_int_equal(ids[i], want);
        } else {
            assert_int_equal(rc, INGEST_ENOSPC);
        }
    }
    assert_int_equal(ingest_codec_use_dict(c, 40063u), 0);
    assert_int_equal(ingest_codec_use_dict(c, 40064u), INGEST_ENOTFOUND);
    ingest_codec_destroy(c);
    ingest_buf_free(ctx, dict);
    free(samples);
    ingest_ctx_destroy(ctx);
}

/* Unloading: the slot is free again, a dictionary in use falls back to none, decoding after one used it is right. */
static void test_dict_remove(void **state)
{
    (void)state;
    struct failing f = { 0, 0, 0 };
    ingest_ctx *ctx = make_ctx(&f);
    size_t sizes[NSAMPLES], total;
    uint8_t *samples = make_samples(sizes, &total);
    void *dict;
    size_t dlen;
    uint32_t id, got;
    ingest_codec *c = NULL, *dec = NULL;
    assert_int_equal(ingest_codec_create(ctx, 1, &c), 0);
    assert_int_equal(ingest_codec_create(ctx, 1, &dec), 0);
    assert_int_equal(ingest_dict_train(ctx, samples, sizes, NSAMPLES, 4096, &dict, &dlen, &id), 0);
    uint8_t *d = dict;
    /* 64 ids (rewriting the id field), the table full */
    for (unsigned i = 0; i < 64; i++) {
        const uint32_t want = 50000u + i;
        d[4] = (uint8_t)want, d[5] = (uint8_t)(want >> 8), d[6] = (uint8_t)(want >> 16), d[7] = (uint8_t)(want >> 24);
        assert_int_equal(ingest_codec_add_dict(c, dict, dlen, &got), 0);
        assert_int_equal(ingest_codec_add_dict(dec, dict, dlen, NULL), 0);
    }
    assert_int_equal(ingest_codec_add_dict(c, samples, 0, &got), INGEST_EINVAL);
    d[4] = 0x10, d[5] = 0x27, d[6] = 1, d[7] = 0; /* 75536: a 65th */
    assert_int_equal(ingest_codec_add_dict(c, dict, dlen, &got), INGEST_ENOSPC);
    uint8_t sample[700];
    gen_csv(sample, sizeof(sample), 4242);
    /* the last one in use; the first removed: the last moves into its slot and stays in use */
    assert_int_equal(ingest_codec_use_dict(c, 50063u), 0);
    assert_int_equal(ingest_codec_remove_dict(c, 50000u), 0);
    assert_int_equal(ingest_codec_remove_dict(c, 50000u), INGEST_ENOTFOUND);
    assert_int_equal(ingest_codec_use_dict(c, 50000u), INGEST_ENOTFOUND);
    round_trip(c, dec, sample, sizeof(sample), INGEST_CODEC_METHOD_ZSTD_DICT);
    uint8_t z[sizeof(sample) + INGEST_CODEC_HEADER];
    size_t zlen = 0;
    assert_int_equal(ingest_codec_encode(c, sample, sizeof(sample), z, sizeof(z), &zlen), 0);
    assert_int_equal(z[4] | z[5] << 8 | z[6] << 16 | (uint32_t)z[7] << 24, 50063u);
    /* the slot is free again */
    assert_int_equal(ingest_codec_add_dict(c, dict, dlen, &got), 0);
    assert_int_equal(got, 75536u);
    /* the one in use removed: no dictionary from now on */
    assert_int_equal(ingest_codec_remove_dict(c, 50063u), 0);
    round_trip(c, dec, sample, sizeof(sample), INGEST_CODEC_METHOD_ZSTD);
    assert_int_equal(ingest_codec_remove_dict(c, 0), INGEST_EINVAL);
    assert_int_equal(ingest_codec_remove_dict(NULL, 1), INGEST_EINVAL);
    /* a decoder whose last decode used the dictionary removed decodes on, with and without one */
    assert_int_equal(ingest_codec_use_dict(c, 50001u), 0);
    assert_int_equal(ingest_codec_encode(c, sample, sizeof(sample), z, sizeof(z), &zlen), 0);
    uint8_t back[sizeof(sample)], id1[INGEST_ID_BYTES];
    size_t blen = 0;
    ingest_chunk_id(test_key, sample, sizeof(sample), id1);
    assert_int_equal(ingest_codec_decode(dec, z, zlen, back, sizeof(back), &blen, test_key, id1), 0);
    assert_int_equal(ingest_codec_remove_dict(dec, 50001u), 0);
    assert_int_equal(ingest_codec_decode(dec, z, zlen, back, sizeof(back), &blen, test_key, id1), INGEST_ENOTFOUND);
    assert_int_equal(ingest_codec_use_dict(c, 50002u), 0);
    round_trip(c, dec, sample, sizeof(sample), INGEST_CODEC_METHOD_ZSTD_DICT);
    assert_int_equal(ingest_codec_use_dict(c, 0), 0);
    round_trip(c, dec, sample, sizeof(sample), INGEST_CODEC_METHOD_ZSTD);
    ingest_codec_destroy(c);
    ingest_codec_destroy(dec);
    ingest_buf_free(ctx, dict);
    free(samples);
    ingest_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels_round_trip),
        cmocka_unit_test(test_bad_levels),
        cmocka_unit_test(test_incompressible_stored_raw),
        cmocka_unit_test(test_empty_chunk),
        cmocka_unit_test(test_capacity_checks),
        cmocka_unit_test(test_dict_round_trip),
        cmocka_unit_test(test_dict_remove),
        cmocka_unit_test(test_dict_train_errors),
        cmocka_unit_test(test_dict_train_parts),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_flipped_bytes),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_frame_without_size),
        cmocka_unit_test(test_id_mismatch),
        cmocka_unit_test(test_shuffle2_layout),
        cmocka_unit_test(test_shuffle2_adaptive),
        cmocka_unit_test(test_alloc_failure_create),
        cmocka_unit_test(test_alloc_failure_ops),
        cmocka_unit_test(test_alloc_failure_train),
        cmocka_unit_test(test_dict_table_full),
        cmocka_unit_test(test_dict_decode_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
