/*
 * Fuzz target for the chunk codec.  The input is decoded as an encoded
 * chunk by a codec holding a dictionary, with and without the id check;
 * then it is encoded as raw data, with and without the dictionary, and
 * with the adaptive encoder (shuffle2 allowed, forced on, forced to store),
 * and must decode back to itself.  Any inconsistency aborts.
 *
 * The dictionary is trained at start-up from generated telemetry samples;
 * training is deterministic, so its id (and the seeds made with it in
 * corpus/codec/) stay valid.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest.h"

#define OUT_CAP (256u * 1024u)
#define NSAMPLES 200

static ingest_ctx *fz_ctx;
static ingest_codec *fz_codec;
static uint32_t fz_dict_id;
static uint8_t fz_out[OUT_CAP], fz_out2[OUT_CAP], fz_enc[OUT_CAP + INGEST_CODEC_HEADER];

static const uint8_t fz_key[INGEST_KEY_BYTES] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                                  17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32 };

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "fuzz_codec: %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
                    ingest_ctx_errmsg(fz_ctx));                                       \
            abort();                                                                  \
        }                                                                             \
    } while (0)

static void fz_gen_sample(char *p, size_t n, unsigned seed)
{
    size_t len = 0;
    unsigned s = seed * 2654435761u + 1;
    while (len < n) {
        char line[96];
        s = s * 1103515245u + 12345u;
        const int k = snprintf(line, sizeof(line), "2024-05-01T10:%02u:%02u.%03uZ,sensor-%02u,temp_c,%u.%u,ok\n",
                               (s >> 8) % 60, (s >> 14) % 60, (s >> 4) % 1000, (s >> 20) % 32, (s >> 16) % 40,
                               (s >> 12) % 10);
        const size_t take = (size_t)k < n - len ? (size_t)k : n - len;
        memcpy(p + len, line, take);
        len += take;
    }
}

static void fz_setup(void)
{
    if (fz_codec != NULL)
        return;
    size_t sizes[NSAMPLES], total = 0;
    for (unsigned i = 0; i < NSAMPLES; i++) {
        sizes[i] = 200 + (i * 53) % 600;
        total += sizes[i];
    }
    char *samples = malloc(total);
    CHECK(samples != NULL);
    for (size_t i = 0, off = 0; i < NSAMPLES; off += sizes[i], i++)
        fz_gen_sample(samples + off, sizes[i], (unsigned)i);
    fz_ctx = ingest_ctx_create(NULL);
    CHECK(fz_ctx != NULL);
    void *dict = NULL;
    size_t dlen = 0;
    CHECK(ingest_dict_train(fz_ctx, samples, sizes, NSAMPLES, 2048, &dict, &dlen, &fz_dict_id) == 0);
    free(samples);
    CHECK(ingest_codec_create(fz_ctx, 3, &fz_codec) == 0);
    CHECK(ingest_codec_add_dict(fz_codec, dict, dlen, NULL) == 0);
    ingest_buf_free(fz_ctx, dict);
}

static void fz_decode(const uint8_t *data, size_t size)
{
    size_t n = 1, n2 = 1;
    uint32_t raw = 0;
    uint8_t id[INGEST_ID_BYTES];

    const int rc = ingest_codec_decode(fz_codec, data, size, fz_out, OUT_CAP, &n, NULL, NULL);
    const int hrc = ingest_codec_raw_size(data, size, &raw);
    if (rc != 0) {
        CHECK(rc < 0 && n == 0);
        /* With the id check, any id: still an error (a malformed chunk stays malformed). */
        memset(id, 0, sizeof(id));
        CHECK(ingest_codec_decode(fz_codec, data, size, fz_out2, OUT_CAP, &n2, fz_key, id) < 0);
        return;
    }
    CHECK(hrc == 0 && raw == n && n <= OUT_CAP);
    ingest_chunk_id(fz_key, fz_out, n, id);
    CHECK(ingest_codec_decode(fz_codec, data, size, fz_out2, OUT_CAP, &n2, fz_key, id) == 0);
    CHECK(n2 == n && memcmp(fz_out, fz_out2, n) == 0);
    id[0] ^= 1;
    CHECK(ingest_codec_decode(fz_codec, data, size, fz_out2, OUT_CAP, &n2, fz_key, id) == INGEST_EMISMATCH);
    CHECK(n2 == 0);
}

static void fz_round_trip(const uint8_t *data, size_t size, uint32_t dict_id)
{
    size_t zlen = 0, n = 0;
    uint8_t id[INGEST_ID_BYTES];

    if (size > OUT_CAP)
        size = OUT_CAP;
    CHECK(ingest_codec_use_dict(fz_codec, dict_id) == 0);
    CHECK(ingest_codec_encode(fz_codec, data, size, fz_enc, sizeof(fz_enc), &zlen) == 0);
    CHECK(zlen <= ingest_codec_bound(size));
    ingest_chunk_id(fz_key, data, size, id);
    CHECK(ingest_codec_decode(fz_codec, fz_enc, zlen, fz_out, OUT_CAP, &n, fz_key, id) == 0);
    CHECK(n == size && (size == 0 || memcmp(fz_out, data, size) == 0));
}

/* Adaptive encoding from each starting policy: the result decodes back. */
static void fz_adaptive(const uint8_t *data, size_t size)
{
    size_t zlen = 0, n = 0;
    uint8_t id[INGEST_ID_BYTES];
    if (size > OUT_CAP)
        size = OUT_CAP;
    CHECK(ingest_codec_use_dict(fz_codec, 0) == 0);
    CHECK(ingest_codec_set_filters(fz_codec, INGEST_CODEC_FILTER_SHUFFLE2) == 0);
    ingest_chunk_id(fz_key, data, size, id);
    for (unsigned mode = INGEST_CODEC_HINT_PROBE; mode <= INGEST_CODEC_HINT_STORE; mode++) {
        ingest_codec_hint h = { mode, mode == INGEST_CODEC_HINT_PROBE ? 0u : 1u };
        CHECK(ingest_codec_encode_adaptive(fz_codec, data, size, fz_enc, sizeof(fz_enc), &zlen, &h) == 0);
        CHECK(zlen <= ingest_codec_bound(size));
        CHECK(fz_enc[2] == INGEST_CODEC_FILTER_NONE || fz_enc[1] != INGEST_CODEC_METHOD_RAW);
        CHECK(ingest_codec_decode(fz_codec, fz_enc, zlen, fz_out, OUT_CAP, &n, fz_key, id) == 0);
        CHECK(n == size && (size == 0 || memcmp(fz_out, data, size) == 0));
    }
    CHECK(ingest_codec_set_filters(fz_codec, 0) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_setup();
    fz_decode(data, size);
    fz_round_trip(data, size, 0);
    fz_round_trip(data, size, fz_dict_id);
    fz_adaptive(data, size);
    return 0;
}
