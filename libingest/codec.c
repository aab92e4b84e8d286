/*
 * Per-chunk compression: a 12-byte header then a raw payload or one zstd
 * frame, optionally made with a trained dictionary (docs/compression.md).
 *
 * zstd's contexts and dictionaries allocate through the codec's ingest_ctx
 * (ZSTD_customMem, which needs ZSTD_STATIC_LINKING_ONLY; the functions used
 * have been exported by libzstd.so since 1.3 and are stable in practice).
 * Dictionary training (ZDICT) allocates with zstd's own malloc: it has no
 * custom allocator.
 */
#define ZSTD_STATIC_LINKING_ONLY
#include "ingest/codec.h"

#include "internal.h"
#include "codec_int.h"

#include <sodium.h>
#include <string.h>
#include <zdict.h>
#include <zstd.h>
#include <zstd_errors.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

/* Dictionaries one codec can hold; loading one more fails. */
#define CODEC_MAX_DICTS 64
/*
 * Size hint for the parameters of a compression dictionary: chunks are
 * 16-256 KiB (FastCDC), so the tables are sized for one zstd block rather
 * than for an unknown, possibly huge, input.
 */
#define CODEC_CDICT_SRC_HINT (128u * 1024u)
/* zstd reserves dictionary ids below 32768 and from 2^31 up. */
#define DICT_ID_MIN 32768u
#define DICT_ID_END 0x80000000u
/* ZDICT_DICTSIZE_MIN, which zdict.h keeps in its static-only section. */
#define DICT_MIN_BYTES 256u
/* ingest_dict_train_parts: a part gets a content of its own from this many samples and bytes of share. */
#define DICT_PART_SAMPLES_MIN 8u
#define DICT_PART_MIN_BYTES 1024u

/*
 * The prepared dictionaries live in workspaces we allocate ourselves
 * (ZSTD_initStatic*Dict): zstd 1.5.4's ZSTD_createCDict_advanced crashes
 * when its allocation fails, and this way an allocation failure
 * (INGEST_ENOMEM) is never confused with a malformed dictionary.
 */
struct dict_entry {
    uint32_t id;
    uint8_t hash[INGEST_DICT_HASH_BYTES]; /* of its bytes: an id names one dictionary in a codec */
    void *cws, *dws; /* workspaces of cdict and ddict */
    const ZSTD_CDict *cdict;
    const ZSTD_DDict *ddict;
};

struct ingest_codec_s {
    ingest_ctx *ctx;
    int level;
    unsigned filters;  /* INGEST_CODEC_FILTER_* the peer decodes (encode_adaptive may use) */
    uint8_t *scratch;  /* filtered input (encode) or filtered output (decode) */
    uint8_t *scratch2; /* a second encoding while probing */
    size_t scratch_cap, scratch2_cap;
    ZSTD_customMem mem;
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    const struct dict_entry *cur; /* compression dictionary, or NULL */
    const ZSTD_DDict *last_ddict; /* the dictionary of the last decode that used one (see warm_dctx) */
    unsigned ndicts;
    struct dict_entry dicts[CODEC_MAX_DICTS];
};

struct header {
    unsigned method;
    unsigned filter;
    uint32_t dict_id;
    uint32_t raw_len;
};

static void *zstd_alloc(void *opaque, size_t size) { return ingest__malloc(opaque, size); }
static void zstd_free(void *opaque, void *ptr) { ingest__free(opaque, ptr); }

/* A zstd error as an INGEST_E* code; `bad` is the code for bad input. */
static int zstd_fail(ingest_ctx *ctx, size_t r, int bad, const char *what)
{
    const int code = ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? INGEST_ENOMEM : bad;
    return ingest__fail(ctx, code, "codec: %s: %s", what, ZSTD_getErrorName(r));
}

int ingest_codec_create(ingest_ctx *ctx, int level, ingest_codec **out)
{
    ingest_codec *c = NULL;
    int rc;

    if (out == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "codec: no output handle");
    *out = NULL;
    if (ctx == NULL)
        return INGEST_EINVAL;
    if (level < ZSTD_minCLevel() || level > ZSTD_maxCLevel())
        return ingest__fail(ctx, INGEST_EINVAL, "codec: level %d outside zstd's range %d..%d", level,
                            ZSTD_minCLevel(), ZSTD_maxCLevel());
    c = ingest__calloc(ctx, 1, sizeof(*c));
    if (c == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "codec: out of memory");
    c->ctx = ctx;
    c->level = level == 0 ? ZSTD_CLEVEL_DEFAULT : level;
    c->mem.customAlloc = zstd_alloc;
    c->mem.customFree = zstd_free;
    c->mem.opaque = ctx;
    c->cctx = ZSTD_createCCtx_advanced(c->mem);
    c->dctx = ZSTD_createDCtx_advanced(c->mem);
    if (c->cctx == NULL || c->dctx == NULL) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "codec: out of memory for zstd contexts");
        goto fail;
    }
    *out = c;
    return 0;
fail:
    ingest_codec_destroy(c);
    return rc;
}

void ingest_codec_destroy(ingest_codec *c)
{
    if (c == NULL)
        return;
    for (unsigned i = 0; i < c->ndicts; i++) {
        ingest__free(c->ctx, c->dicts[i].cws);
        ingest__free(c->ctx, c->dicts[i].dws);
    }
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    ingest__free(c->ctx, c->scratch);
    ingest__free(c->ctx, c->scratch2);
    ingest__free(c->ctx, c);
}

/* Make *buf hold at least n bytes (grown to the largest chunk seen). */
static int scratch_reserve(ingest_codec *c, uint8_t **buf, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    uint8_t *p = ingest__malloc(c->ctx, n);
    if (p == NULL)
        return ingest__fail(c->ctx, INGEST_ENOMEM, "codec: out of memory (%zu bytes of scratch)", n);
    ingest__free(c->ctx, *buf);
    *buf = p;
    *cap = n;
    return 0;
}

/*
 * shuffle2: the even bytes of the chunk, then the odd ones (a 16-bit
 * sample's low bytes, then its high bytes); an odd last byte stays last.
 * Slowly varying int16 signals compress about 1.6x better so.
 */
/*
 * shuffle2 and its inverse run over every byte of a filtered chunk, so they
 * go 16 pairs at a time where the target has vectors (SSE2 is part of
 * x86-64; NEON of aarch64), then pair by pair for the rest.
 */
static void shuffle2(const uint8_t *src, size_t n, uint8_t *dst)
{
    const size_t h = n / 2;
    uint8_t *lo = dst, *hi = dst + h;
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i low = _mm_set1_epi16(0x00ff);
    for (; i + 16 <= h; i += 16) {
        const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i));
        const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i + 16));
        _mm_storeu_si128((__m128i *)(void *)(lo + i),
                         _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low)));
        _mm_storeu_si128((__m128i *)(void *)(hi + i), _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
    }
#elif defined(__ARM_NEON)
    for (; i + 16 <= h; i += 16) {
        const uint8x16x2_t v = vld2q_u8(src + 2 * i);
        vst1q_u8(lo + i, v.val[0]);
        vst1q_u8(hi + i, v.val[1]);
    }
#endif
    for (; i < h; i++) {
        lo[i] = src[2 * i];
        hi[i] = src[2 * i + 1];
    }
    if (n & 1)
        dst[n - 1] = src[n - 1];
}

static void unshuffle2(const uint8_t *src, size_t n, uint8_t *dst)
{
    const size_t h = n / 2;
    const uint8_t *lo = src, *hi = src + h;
    size_t i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= h; i += 16) {
        const __m128i l = _mm_loadu_si128((const __m128i *)(const void *)(lo + i));
        const __m128i u = _mm_loadu_si128((const __m128i *)(const void *)(hi + i));
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i), _mm_unpacklo_epi8(l, u));
        _mm_storeu_si128((__m128i *)(void *)(dst + 2 * i + 16), _mm_unpackhi_epi8(l, u));
    }
#elif defined(__ARM_NEON)
    for (; i + 16 <= h; i += 16) {
        uint8x16x2_t v;
        v.val[0] = vld1q_u8(lo + i);
        v.val[1] = vld1q_u8(hi + i);
        vst2q_u8(dst + 2 * i, v);
    }
#endif
    for (; i < h; i++) {
        dst[2 * i] = lo[i];
        dst[2 * i + 1] = hi[i];
    }
    if (n & 1)
        dst[n - 1] = src[n - 1];
}

int ingest_codec_set_filters(ingest_codec *c, unsigned filters)
{
    if (c == NULL)
        return INGEST_EINVAL;
    if ((filters & ~INGEST_CODEC_FILTERS_ALL) != 0)
        return ingest__fail(c->ctx, INGEST_EINVAL, "codec: unknown filters 0x%x", filters);
    c->filters = filters;
    return 0;
}

size_t ingest_codec_bound(size_t n)
{
    /* A chunk that does not shrink is stored raw, so this is exact. */
    return n > SIZE_MAX - INGEST_CODEC_HEADER ? SIZE_MAX : n + INGEST_CODEC_HEADER;
}

static struct dict_entry *find_dict(ingest_codec *c, uint32_t id)
{
    for (unsigned i = 0; i < c->ndicts; i++)
        if (c->dicts[i].id == id)
            return &c->dicts[i];
    return NULL;
}

/*
 * Load a dictionary: by copy and for both directions, or (decode_ref) by
 * reference and for decompression only, which costs only the entropy
 * tables (the receiver holds one per connection and dictionary).
 */
static int add_dict(ingest_codec *c, const void *dict, size_t len, int decode_ref, uint32_t *dict_id)
{
    struct dict_entry e = { 0, { 0 }, NULL, NULL, NULL, NULL };
    int rc;

    if (dict_id != NULL)
        *dict_id = 0;
    if (c == NULL || (dict == NULL && len > 0))
        return INGEST_EINVAL;
    if (len > INGEST_DICT_MAX_BYTES)
        return ingest__fail(c->ctx, INGEST_ETOOBIG, "codec: dictionary of %zu bytes exceeds %u", len,
                            INGEST_DICT_MAX_BYTES);
    e.id = ZDICT_getDictID(dict, len);
    if (e.id == 0)
        return ingest__fail(c->ctx, INGEST_EINVAL,
                            "codec: %zu bytes are not a zstd dictionary (bad magic or id 0)", len);
    ingest_dict_hash(dict, len, e.hash);
    const struct dict_entry *had = find_dict(c, e.id);
    if (had != NULL && memcmp(had->hash, e.hash, sizeof(e.hash)) != 0)
        return ingest__fail(c->ctx, INGEST_EMISMATCH,
                            "codec: dictionary id %u is loaded already, with other bytes (remove it first)", e.id);
    if (had != NULL)
        goto done;
    if (c->ndicts == CODEC_MAX_DICTS)
        return ingest__fail(c->ctx, INGEST_ENOSPC, "codec: dictionary %u: table full (%u loaded)",
                            e.id, CODEC_MAX_DICTS);
    const ZSTD_dictLoadMethod_e how = decode_ref ? ZSTD_dlm_byRef : ZSTD_dlm_byCopy;
    const size_t dsize = ZSTD_estimateDDictSize(len, how);
    const ZSTD_compressionParameters cp = ZSTD_getCParams(c->level, CODEC_CDICT_SRC_HINT, len);
    const size_t csize = decode_ref ? 0 : ZSTD_estimateCDictSize_advanced(len, cp, ZSTD_dlm_byCopy);
    e.dws = ingest__malloc(c->ctx, dsize);
    e.cws = decode_ref ? NULL : ingest__malloc(c->ctx, csize);
    if (e.dws == NULL || (!decode_ref && e.cws == NULL)) {
        rc = ingest__fail(c->ctx, INGEST_ENOMEM, "codec: dictionary %u: out of memory (%zu + %zu bytes)", e.id,
                          dsize, csize);
        goto fail;
    }
    /* Parse as a full dictionary: malformed entropy tables fail here. */
    e.ddict = ZSTD_initStaticDDict(e.dws, dsize, dict, len, how, ZSTD_dct_fullDict);
    if (e.ddict == NULL) {
        rc = ingest__fail(c->ctx, INGEST_ECORRUPT, "codec: dictionary %u: malformed tables", e.id);
        goto fail;
    }
    if (!decode_ref) {
        e.cdict = ZSTD_initStaticCDict(e.cws, csize, dict, len, ZSTD_dlm_byCopy, ZSTD_dct_fullDict, cp);
        if (e.cdict == NULL) {
            rc = ingest__fail(c->ctx, INGEST_ECORRUPT, "codec: dictionary %u: cannot prepare for compression",
                              e.id);
            goto fail;
        }
    }
    c->dicts[c->ndicts++] = e;
done:
    if (dict_id != NULL)
        *dict_id = e.id;
    return 0;
fail:
    ingest__free(c->ctx, e.dws);
    ingest__free(c->ctx, e.cws);
    return rc;
}

int ingest_codec_add_dict(ingest_codec *c, const void *dict, size_t len, uint32_t *dict_id)
{
    return add_dict(c, dict, len, 0, dict_id);
}

int ingest_codec_add_dict_decode_ref(ingest_codec *c, const void *dict, size_t len, uint32_t *dict_id)
{
    return add_dict(c, dict, len, 1, dict_id);
}

int ingest_codec_use_dict(ingest_codec *c, uint32_t dict_id)
{
    if (c == NULL)
        return INGEST_EINVAL;
    if (dict_id == 0) {
        c->cur = NULL;
        return 0;
    }
    const struct dict_entry *e = find_dict(c, dict_id);
    if (e == NULL)
        return ingest__fail(c->ctx, INGEST_ENOTFOUND, "codec: dictionary %u is not loaded", dict_id);
    if (e->cdict == NULL)
        return ingest__fail(c->ctx, INGEST_EINVAL, "codec: dictionary %u was loaded for decoding only", dict_id);
    c->cur = e;
    return 0;
}

static void warm_dctx(ingest_codec *c, const ZSTD_DDict *ddict);

int ingest_codec_remove_dict(ingest_codec *c, uint32_t dict_id)
{
    if (c == NULL || dict_id == 0)
        return INGEST_EINVAL;
    struct dict_entry *e = find_dict(c, dict_id);
    if (e == NULL)
        return ingest__fail(c->ctx, INGEST_ENOTFOUND, "codec: dictionary %u is not loaded", dict_id);
    if (c->last_ddict == e->ddict)
        warm_dctx(c, NULL); /* while its tables are still there: the next decode finds the context as after one */
    if (c->cur == e)
        c->cur = NULL;
    ingest__free(c->ctx, e->cws);
    ingest__free(c->ctx, e->dws);
    struct dict_entry *last = &c->dicts[c->ndicts - 1];
    if (e != last) {
        *e = *last;
        if (c->cur == last)
            c->cur = e;
    }
    c->ndicts--;
    return 0;
}

static void put_header(uint8_t *p, unsigned method, unsigned filter, uint32_t dict_id, uint32_t raw_len)
{
    p[0] = INGEST_CODEC_FORMAT;
    p[1] = (uint8_t)method;
    p[2] = (uint8_t)filter;
    p[3] = 0;
    ingest__put_u32(p + 4, dict_id);
    ingest__put_u32(p + 8, raw_len);
}

/*
 * Encode src[0,n) into d with the given filter; a frame that would not
 * shrink the chunk stops at n - 1 bytes (dstSize_tooSmall) and the chunk is
 * stored raw, unfiltered.  Arguments already checked.
 */
static int encode_with(ingest_codec *c, const uint8_t *src, size_t n, uint8_t *d, size_t *out_len, unsigned filter)
{
    unsigned method = INGEST_CODEC_METHOD_RAW;
    uint32_t dict_id = 0;
    size_t payload = n;
    if (n > 0) {
        const uint8_t *in = src;
        if (filter == INGEST_CODEC_FILTER_SHUFFLE2) {
            INGEST__FORWARD(scratch_reserve(c, &c->scratch, &c->scratch_cap, n));
            shuffle2(src, n, c->scratch);
            in = c->scratch;
        }
        size_t r;
        if (c->cur != NULL)
            r = ZSTD_compress_usingCDict(c->cctx, d + INGEST_CODEC_HEADER, n - 1, in, n, c->cur->cdict);
        else
            r = ZSTD_compressCCtx(c->cctx, d + INGEST_CODEC_HEADER, n - 1, in, n, c->level);
        if (!ZSTD_isError(r)) {
            method = c->cur != NULL ? INGEST_CODEC_METHOD_ZSTD_DICT : INGEST_CODEC_METHOD_ZSTD;
            dict_id = c->cur != NULL ? c->cur->id : 0;
            payload = r;
        } else if (ZSTD_getErrorCode(r) != ZSTD_error_dstSize_tooSmall) {
            return zstd_fail(c->ctx, r, INGEST_EINVAL, "compress");
        }
    }
    if (method == INGEST_CODEC_METHOD_RAW) {
        filter = INGEST_CODEC_FILTER_NONE;
        if (n > 0)
            memcpy(d + INGEST_CODEC_HEADER, src, n);
    }
    put_header(d, method, filter, dict_id, (uint32_t)n);
    *out_len = INGEST_CODEC_HEADER + payload;
    return 0;
}

static int check_encode_args(ingest_codec *c, const void *src, size_t n, void *dst, size_t cap, size_t *out_len)
{
    if (out_len != NULL)
        *out_len = 0;
    if (c == NULL || out_len == NULL || dst == NULL || (src == NULL && n > 0))
        return ingest__fail(c ? c->ctx : NULL, INGEST_EINVAL, "codec: encode: NULL argument");
    if (n > INGEST_CODEC_MAX_RAW)
        return ingest__fail(c->ctx, INGEST_ETOOBIG, "codec: encode: chunk of %zu bytes exceeds %u", n,
                            INGEST_CODEC_MAX_RAW);
    if (cap < ingest_codec_bound(n))
        return ingest__fail(c->ctx, INGEST_EINVAL, "codec: encode: capacity %zu < bound %zu", cap,
                            ingest_codec_bound(n));
    return 0;
}

int ingest_codec_encode(ingest_codec *c, const void *src, size_t n, void *dst, size_t cap,
                        size_t *out_len)
{
    INGEST__FORWARD(check_encode_args(c, src, n, dst, cap, out_len));
    return encode_with(c, src, n, dst, out_len, INGEST_CODEC_FILTER_NONE);
}

/* Probing: the policy of a run of chunks from one encoding of its first. */
#define PROBE_PLAIN_KEEP 0.80   /* zstd alone saves 20%: keep it, no more probes */
#define PROBE_FILTER_GAIN 0.90  /* shuffle2 must beat zstd alone by 10% */
#define PROBE_STORE 0.97        /* saving under 3%: store the next chunks raw */
#define PROBE_FILTER_MIN 4096u  /* chunks shorter than this are not tried filtered */
#define PROBE_EVERY 64u         /* chunks between probes while filtering or storing */

int ingest_codec_encode_adaptive(ingest_codec *c, const void *src, size_t n, void *dst, size_t cap,
                                 size_t *out_len, ingest_codec_hint *hint)
{
    INGEST__FORWARD(check_encode_args(c, src, n, dst, cap, out_len));
    if (hint == NULL)
        return encode_with(c, src, n, dst, out_len, INGEST_CODEC_FILTER_NONE);
    if (hint->mode != INGEST_CODEC_HINT_PROBE && hint->left > 0) {
        hint->left--;
        if (hint->mode == INGEST_CODEC_HINT_PLAIN || (hint->mode == INGEST_CODEC_HINT_SHUFFLE2 &&
                                                      !(c->filters & INGEST_CODEC_FILTER_SHUFFLE2)))
            return encode_with(c, src, n, dst, out_len, INGEST_CODEC_FILTER_NONE);
        if (hint->mode == INGEST_CODEC_HINT_SHUFFLE2)
            return encode_with(c, src, n, dst, out_len, INGEST_CODEC_FILTER_SHUFFLE2);
        uint8_t *const d = dst; /* INGEST_CODEC_HINT_STORE */
        if (n > 0)
            memcpy(d + INGEST_CODEC_HEADER, src, n);
        put_header(d, INGEST_CODEC_METHOD_RAW, INGEST_CODEC_FILTER_NONE, 0, (uint32_t)n);
        *out_len = INGEST_CODEC_HEADER + n;
        return 0;
    }
    /* probe: zstd alone, then (when it saves little) shuffle2 as well */
    size_t plain = 0;
    INGEST__FORWARD(encode_with(c, src, n, dst, &plain, INGEST_CODEC_FILTER_NONE));
    *out_len = plain;
    const double raw = (double)(INGEST_CODEC_HEADER + n);
    hint->left = PROBE_EVERY;
    if ((double)plain <= PROBE_PLAIN_KEEP * raw) {
        hint->mode = INGEST_CODEC_HINT_PLAIN;
        hint->left = UINT32_MAX;
        return 0;
    }
    if ((c->filters & INGEST_CODEC_FILTER_SHUFFLE2) && n >= PROBE_FILTER_MIN) {
        size_t f = 0;
        INGEST__FORWARD(scratch_reserve(c, &c->scratch2, &c->scratch2_cap, ingest_codec_bound(n)));
        INGEST__FORWARD(encode_with(c, src, n, c->scratch2, &f, INGEST_CODEC_FILTER_SHUFFLE2));
        if ((double)f <= PROBE_FILTER_GAIN * (double)plain) {
            memcpy(dst, c->scratch2, f);
            *out_len = f;
            hint->mode = INGEST_CODEC_HINT_SHUFFLE2;
            return 0;
        }
    }
    hint->mode = (double)plain >= PROBE_STORE * raw ? INGEST_CODEC_HINT_STORE : INGEST_CODEC_HINT_PLAIN;
    return 0;
}

static int parse_header(ingest_ctx *ctx, const uint8_t *p, size_t n, struct header *h)
{
    if (p == NULL && n > 0)
        return ingest__fail(ctx, INGEST_EINVAL, "codec: NULL chunk");
    if (n < INGEST_CODEC_HEADER)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: chunk of %zu bytes is shorter than the %d-byte header",
                            n, INGEST_CODEC_HEADER);
    if (p[0] != INGEST_CODEC_FORMAT)
        return ingest__fail(ctx, INGEST_EVERSION, "codec: format version %u at offset 0 (expected %d)", p[0],
                            INGEST_CODEC_FORMAT);
    h->method = p[1];
    h->filter = p[2];
    h->dict_id = ingest__get_u32(p + 4);
    h->raw_len = ingest__get_u32(p + 8);
    if (h->method > INGEST_CODEC_METHOD_ZSTD_DICT)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: unknown method %u at offset 1", h->method);
    if (h->filter > INGEST_CODEC_FILTER_SHUFFLE2)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: unknown filter %u at offset 2", h->filter);
    if (p[3] != 0)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: reserved byte at offset 3 is 0x%02x, not zero", p[3]);
    if (h->filter != INGEST_CODEC_FILTER_NONE && h->method == INGEST_CODEC_METHOD_RAW)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: filter %u at offset 2 on a raw payload", h->filter);
    if ((h->method == INGEST_CODEC_METHOD_ZSTD_DICT) != (h->dict_id != 0))
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: dictionary id %u at offset 4 with method %u",
                            h->dict_id, h->method);
    if (h->raw_len > INGEST_CODEC_MAX_RAW)
        return ingest__fail(ctx, INGEST_ETOOBIG, "codec: raw length %u at offset 8 exceeds %u", h->raw_len,
                            INGEST_CODEC_MAX_RAW);
    if (h->raw_len == 0 && h->method != INGEST_CODEC_METHOD_RAW)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: empty chunk with method %u (must be raw)",
                            h->method);
    return 0;
}

int ingest_codec_raw_size(const void *src, size_t n, uint32_t *raw_len)
{
    struct header h;
    if (raw_len != NULL)
        *raw_len = 0;
    if (raw_len == NULL)
        return INGEST_EINVAL;
    INGEST__FORWARD(parse_header(NULL, src, n, &h));
    *raw_len = h.raw_len;
    return 0;
}

/* Check the zstd payload against the header before decoding anything. */
static int check_frame(ingest_ctx *ctx, const struct header *h, const uint8_t *z, size_t zn)
{
    const size_t fsize = ZSTD_findFrameCompressedSize(z, zn);
    if (ZSTD_isError(fsize))
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: zstd frame at offset %d: %s", INGEST_CODEC_HEADER,
                            ZSTD_getErrorName(fsize));
    if (fsize != zn)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: %zu bytes after the zstd frame ending at offset %zu",
                            zn - fsize, (size_t)INGEST_CODEC_HEADER + fsize);
    const unsigned long long csize = ZSTD_getFrameContentSize(z, zn);
    if (csize == ZSTD_CONTENTSIZE_ERROR)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: bad zstd frame header at offset %d",
                            INGEST_CODEC_HEADER);
    if (csize != ZSTD_CONTENTSIZE_UNKNOWN && csize != h->raw_len)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: zstd frame declares %llu bytes, header %u", csize,
                            h->raw_len);
    const unsigned fdict = ZSTD_getDictID_fromFrame(z, zn);
    if (fdict != 0 && fdict != h->dict_id)
        return ingest__fail(ctx, INGEST_ECORRUPT, "codec: zstd frame names dictionary %u, header %u", fdict,
                            h->dict_id);
    return 0;
}

/*
 * Put dctx in the same state before every decode, so that one chunk always
 * decodes the same way whatever was decoded before.  zstd 1.5.4 remembers
 * whether the last frame used the same dictionary ("ddictIsCold") and
 * decodes the first compressed block of a frame with its prefetching
 * sequence decoder when it did not, else with the plain one; on a malformed
 * frame the two can disagree (fuzz_codec found one that decoded in a cold
 * context and was refused in a warm one).  Beginning with the frame's
 * dictionary makes the decode's own begin find it warm; a decode without
 * a dictionary after one with finds the flag cleared by two begins with
 * that dictionary.  Both are a few stores.
 */
static void warm_dctx(ingest_codec *c, const ZSTD_DDict *ddict)
{
    if (ddict != NULL) {
        (void)ZSTD_decompressBegin_usingDDict(c->dctx, ddict);
        c->last_ddict = ddict;
    } else if (c->last_ddict != NULL) {
        (void)ZSTD_decompressBegin_usingDDict(c->dctx, c->last_ddict);
        (void)ZSTD_decompressBegin_usingDDict(c->dctx, c->last_ddict);
        c->last_ddict = NULL;
    }
}

int ingest_codec_decode(ingest_codec *c, const void *src, size_t n, void *dst, size_t cap,
                        size_t *out_len, const uint8_t *key, const uint8_t *expect_id)
{
    const uint8_t *const p = src;
    struct header h;

    if (out_len != NULL)
        *out_len = 0;
    if (c == NULL || out_len == NULL)
        return ingest__fail(c ? c->ctx : NULL, INGEST_EINVAL, "codec: decode: NULL argument");
    INGEST__FORWARD(parse_header(c->ctx, p, n, &h));
    if (h.raw_len > cap || (dst == NULL && h.raw_len > 0))
        return ingest__fail(c->ctx, INGEST_ETOOBIG, "codec: raw length %u exceeds the capacity %zu", h.raw_len,
                            dst == NULL ? (size_t)0 : cap);
    const uint8_t *const z = p + INGEST_CODEC_HEADER;
    const size_t zn = n - INGEST_CODEC_HEADER;
    if (h.method == INGEST_CODEC_METHOD_RAW) {
        if (zn != h.raw_len)
            return ingest__fail(c->ctx, INGEST_ECORRUPT, "codec: raw payload of %zu bytes, header says %u", zn,
                                h.raw_len);
        if (zn > 0)
            memcpy(dst, z, zn);
    } else {
        const struct dict_entry *e = NULL;
        if (h.method == INGEST_CODEC_METHOD_ZSTD_DICT) {
            e = find_dict(c, h.dict_id);
            if (e == NULL)
                return ingest__fail(c->ctx, INGEST_ENOTFOUND, "codec: dictionary %u is not loaded", h.dict_id);
        }
        INGEST__FORWARD(check_frame(c->ctx, &h, z, zn));
        /* filtered: decode into scratch (at most raw_len <= cap bytes), then undo the filter into dst */
        uint8_t *out = dst;
        if (h.filter == INGEST_CODEC_FILTER_SHUFFLE2) {
            INGEST__FORWARD(scratch_reserve(c, &c->scratch, &c->scratch_cap, h.raw_len));
            out = c->scratch;
        }
        warm_dctx(c, e != NULL ? e->ddict : NULL);
        const size_t r = e != NULL ? ZSTD_decompress_usingDDict(c->dctx, out, h.raw_len, z, zn, e->ddict)
                                   : ZSTD_decompressDCtx(c->dctx, out, h.raw_len, z, zn);
        if (ZSTD_isError(r)) {
            if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall)
                return ingest__fail(c->ctx, INGEST_ECORRUPT, "codec: zstd frame decodes past %u bytes",
                                    h.raw_len);
            return zstd_fail(c->ctx, r, INGEST_ECORRUPT, "decompress");
        }
        if (r != h.raw_len)
            return ingest__fail(c->ctx, INGEST_ECORRUPT, "codec: zstd frame decodes to %zu bytes, header %u", r,
                                h.raw_len);
        if (h.filter == INGEST_CODEC_FILTER_SHUFFLE2)
            unshuffle2(out, h.raw_len, dst);
    }
    if (key != NULL && expect_id != NULL) {
        uint8_t id[INGEST_ID_BYTES];
        ingest_chunk_id(key, dst, h.raw_len, id);
        if (memcmp(id, expect_id, INGEST_ID_BYTES) != 0) {
            char got[2 * INGEST_ID_BYTES + 1];
            ingest_to_hex(id, 8, got);
            return ingest__fail(c->ctx, INGEST_EMISMATCH, "codec: decoded %u bytes have id %s..., not the expected one",
                                h.raw_len, got);
        }
    }
    *out_len = h.raw_len;
    return 0;
}

void ingest_dict_hash(const void *dict, size_t len, uint8_t hash[INGEST_DICT_HASH_BYTES])
{
    crypto_generichash(hash, INGEST_DICT_HASH_BYTES, dict, len, NULL, 0);
}

/* An id of a dictionary's own: from its content, in zstd's private range. */
static uint32_t derive_dict_id(const uint8_t *content, size_t len)
{
    uint8_t hash[crypto_generichash_BYTES];
    crypto_generichash(hash, sizeof(hash), content, len, NULL, 0);
    return DICT_ID_MIN + ingest__get_u32(hash) % (DICT_ID_END - DICT_ID_MIN);
}

/* The arguments of a training: 0, or the failure (said). */
static int train_args(ingest_ctx *ctx, const void *samples, const size_t *sample_sizes, unsigned nsamples,
                      size_t max_bytes, void **out, size_t *out_len, uint32_t *dict_id)
{
    if (out != NULL)
        *out = NULL;
    if (out_len != NULL)
        *out_len = 0;
    if (dict_id != NULL)
        *dict_id = 0;
    if (ctx == NULL || out == NULL || out_len == NULL || (nsamples > 0 && (samples == NULL || sample_sizes == NULL)))
        return ingest__fail(ctx, INGEST_EINVAL, "dict: train: NULL argument");
    if (nsamples == 0)
        return ingest__fail(ctx, INGEST_EINVAL, "dict: train: no samples");
    if (max_bytes < DICT_MIN_BYTES || max_bytes > INGEST_DICT_MAX_BYTES)
        return ingest__fail(ctx, INGEST_EINVAL, "dict: train: size %zu outside %u..%u", max_bytes,
                            DICT_MIN_BYTES, INGEST_DICT_MAX_BYTES);
    size_t total = 0;
    for (unsigned i = 0; i < nsamples; i++) {
        if (sample_sizes[i] > SIZE_MAX - total)
            return ingest__fail(ctx, INGEST_ETOOBIG, "dict: train: sample sizes overflow at sample %u", i);
        total += sample_sizes[i];
    }
    return 0;
}

/*
 * The content (a trained dictionary less its header) of up to cap bytes
 * from these samples, appended to buf at *len: 0; INGEST_EINVAL when ZDICT
 * failed (*err its reason), INGEST_ECORRUPT when what it made has no valid
 * header.
 */
static int train_content(uint8_t *buf, size_t *len, size_t cap, const void *samples, const size_t *sizes,
                         unsigned n, const char **err)
{
    const size_t r = ZDICT_trainFromBuffer(buf + *len, cap, samples, sizes, n);
    if (ZDICT_isError(r)) {
        *err = ZDICT_getErrorName(r);
        return INGEST_EINVAL;
    }
    const size_t hdr = ZDICT_getDictHeaderSize(buf + *len, r);
    if (ZDICT_isError(hdr) || hdr > r)
        return INGEST_ECORRUPT;
    memmove(buf + *len, buf + *len + hdr, r - hdr);
    *len += r - hdr;
    return 0;
}

/*
 * Finalize content[0,clen) (at the start of buf, max_bytes long) over all
 * the samples with an id derived from it, so the same samples always give
 * the same id and different dictionaries almost never share one (zstd's own
 * default is an XXH64 of the content, which we would rather not depend on).
 */
static int finalize(ingest_ctx *ctx, uint8_t *buf, size_t clen, size_t max_bytes, const void *samples,
                    const size_t *sample_sizes, unsigned nsamples, void **out, size_t *out_len, uint32_t *dict_id)
{
    ZDICT_params_t params;
    memset(&params, 0, sizeof(params));
    params.dictID = derive_dict_id(buf, clen);
    /* the entropy tables as level 1 uses them (compression.level's default; zdict.h advises the level in use):
     * 0.5-0.8 points more saved than zstd's default level 3 on bench/dict-mix.sh's kinds */
    params.compressionLevel = 1;
    const size_t r = ZDICT_finalizeDictionary(buf, max_bytes, buf, clen, samples, sample_sizes, nsamples, params);
    if (ZDICT_isError(r))
        return ingest__fail(ctx, INGEST_EINVAL, "dict: finalize: %s", ZDICT_getErrorName(r));
    if (ZDICT_getDictID(buf, r) != params.dictID)
        return ingest__fail(ctx, INGEST_ECORRUPT, "dict: finalized dictionary lost its id %u", params.dictID);
    *out = buf;
    *out_len = r;
    if (dict_id != NULL)
        *dict_id = params.dictID;
    return 0;
}

int ingest_dict_train(ingest_ctx *ctx, const void *samples, const size_t *sample_sizes, unsigned nsamples,
                      size_t max_bytes, void **out, size_t *out_len, uint32_t *dict_id)
{
    int rc = train_args(ctx, samples, sample_sizes, nsamples, max_bytes, out, out_len, dict_id);
    if (rc < 0)
        return rc;
    uint8_t *buf = ingest__malloc(ctx, max_bytes);
    if (buf == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "dict: train: out of memory for %zu bytes", max_bytes);
    size_t clen = 0;
    const char *err = "";
    rc = train_content(buf, &clen, max_bytes, samples, sample_sizes, nsamples, &err);
    if (rc == INGEST_EINVAL)
        rc = ingest__fail(ctx, INGEST_EINVAL, "dict: train: %s (%u samples)", err, nsamples);
    else if (rc < 0)
        rc = ingest__fail(ctx, rc, "dict: train: trained dictionary has no valid header");
    else
        rc = finalize(ctx, buf, clen, max_bytes, samples, sample_sizes, nsamples, out, out_len, dict_id);
    if (rc < 0)
        ingest__free(ctx, buf);
    return rc;
}

int ingest_dict_train_parts(ingest_ctx *ctx, const void *samples, const size_t *sample_sizes, unsigned nsamples,
                            const unsigned *part_counts, unsigned nparts, size_t max_bytes, void **out,
                            size_t *out_len, uint32_t *dict_id)
{
    int rc = train_args(ctx, samples, sample_sizes, nsamples, max_bytes, out, out_len, dict_id);
    if (rc < 0)
        return rc;
    if (part_counts == NULL || nparts == 0 || nparts > INGEST_DICT_PARTS_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "dict: train: %u parts, not 1..%u", nparts, INGEST_DICT_PARTS_MAX);
    uint64_t sum = 0;
    for (unsigned i = 0; i < nparts; i++)
        sum += part_counts[i];
    if (sum != nsamples)
        return ingest__fail(ctx, INGEST_EINVAL, "dict: train: the parts count %llu samples, not %u",
                            (unsigned long long)sum, nsamples);
    /* Where each part's samples start. */
    size_t first[INGEST_DICT_PARTS_MAX], off[INGEST_DICT_PARTS_MAX];
    size_t at = 0, o = 0;
    for (unsigned i = 0; i < nparts; i++) {
        first[i] = at;
        off[i] = o;
        for (unsigned k = 0; k < part_counts[i]; k++)
            o += sample_sizes[at + k];
        at += part_counts[i];
    }
    /*
     * The parts that get a content of their own: of DICT_PART_SAMPLES_MIN samples or more, whose share of
     * max_bytes, in proportion to their samples among such parts (the many small files are where a
     * dictionary pays), is DICT_PART_MIN_BYTES or more (dropping one raises the others' shares: again until
     * none drops).  Trained from all the samples at once, ZDICT fills a dictionary with the segments of the
     * kind that repeats most and leaves another kind about as it would be without one; a part of its own
     * serves each.  Fewer than two such parts: trained from all the samples at once.
     */
    bool own[INGEST_DICT_PARTS_MAX];
    uint64_t counted = 0;
    for (unsigned i = 0; i < nparts; i++) {
        own[i] = part_counts[i] >= DICT_PART_SAMPLES_MIN;
        counted += own[i] ? part_counts[i] : 0;
    }
    for (bool dropped = true; dropped && counted > 0;) {
        dropped = false;
        for (unsigned i = 0; i < nparts; i++)
            if (own[i] && (double)max_bytes * part_counts[i] / (double)counted < DICT_PART_MIN_BYTES) {
                own[i] = false;
                counted -= part_counts[i];
                dropped = true;
            }
    }
    /* the part with the most samples last (nearest the data: the shortest offsets) */
    unsigned order[INGEST_DICT_PARTS_MAX], m = 0;
    for (unsigned i = 0; i < nparts; i++)
        if (own[i]) {
            unsigned j = m++;
            while (j > 0 && part_counts[order[j - 1]] > part_counts[i]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = i;
        }
    if (m < 2)
        return ingest_dict_train(ctx, samples, sample_sizes, nsamples, max_bytes, out, out_len, dict_id);
    uint8_t *buf = ingest__malloc(ctx, max_bytes);
    if (buf == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "dict: train: out of memory for %zu bytes", max_bytes);
    size_t clen = 0;
    unsigned made = 0;
    for (unsigned j = 0; j < m; j++) {
        const unsigned i = order[j];
        size_t share = (size_t)((double)max_bytes * part_counts[i] / (double)counted);
        if (share > max_bytes - clen)
            share = max_bytes - clen;
        const char *err = "";
        if (share >= DICT_PART_MIN_BYTES && train_content(buf, &clen, share, (const uint8_t *)samples + off[i],
                                                          sample_sizes + first[i], part_counts[i], &err) == 0)
            made++;
    }
    if (made == 0) { /* ZDICT found too little in every part: as one */
        ingest__free(ctx, buf);
        return ingest_dict_train(ctx, samples, sample_sizes, nsamples, max_bytes, out, out_len, dict_id);
    }
    rc = finalize(ctx, buf, clen, max_bytes, samples, sample_sizes, nsamples, out, out_len, dict_id);
    if (rc < 0)
        ingest__free(ctx, buf);
    return rc;
}

uint32_t ingest_dict_id(const void *dict, size_t len)
{
    if (dict == NULL)
        return 0;
    return ZDICT_getDictID(dict, len);
}

void ingest_buf_free(ingest_ctx *ctx, void *p)
{
    if (ctx != NULL)
        ingest__free(ctx, p);
}

/* ---- for the edge's encoder threads (edge/sender_int.h) ------------------ */

void ingest__codec_follow(ingest_codec *c, const ingest_codec *src)
{
    c->level = src->level;
    c->filters = src->filters;
    c->cur = src->cur; /* the CDict is only read while compressing: shared */
}

int ingest__codec_hint_settled(const ingest_codec_hint *h)
{
    return h->mode != INGEST_CODEC_HINT_PROBE && h->left > 0;
}

int ingest__codec_hint_take_store(ingest_codec_hint *h)
{
    if (h->mode != INGEST_CODEC_HINT_STORE || h->left == 0)
        return 0;
    h->left--;
    return 1;
}

void ingest__codec_put_raw(uint8_t *dst, size_t n)
{
    put_header(dst, INGEST_CODEC_METHOD_RAW, INGEST_CODEC_FILTER_NONE, 0, (uint32_t)n);
}
