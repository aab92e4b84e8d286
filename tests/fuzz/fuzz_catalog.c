/*
 * Fuzz target: the catalog's decoders (libingest/catalog_fmt.c,
 * docs/catalog.md).  Byte 0 modulo 4 selects what the rest is:
 *   0  a block of file records: decoded to the end or to an error; every
 *      record decoded is written again with the block writer, and that
 *      block must decode to the same records (a fixed point);
 *   1  a batch record of the feed table, decoded to the end or an error;
 *   2  a cursor string (cut at the first NUL and at 64 bytes): accepted
 *      ones must print back to themselves;
 *   3  a time argument (same cut): refused ones must leave a message.
 * Any bound the decoders promise (lengths, NUL-free strings, increasing
 * keys) is checked; a failure aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog_fmt.h"
#include "ingest/catalog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_catalog: %s\n", what);
        abort();
    }
}

#define RECS_MAX 4096

typedef struct saved {
    char *landed, *path;
    ingest__catrec r;
} saved;

static void fuzz_block(ingest_ctx *ctx, const uint8_t *d, size_t n)
{
    static ingest__catblock_r r1, r2;
    saved *s = calloc(RECS_MAX, sizeof(*s));
    if (s == NULL)
        return;
    size_t ns = 0;
    ingest__catrec rec;
    int rc = ingest__catblock_r_reset(&r1, d, n);
    if (rc == 0) {
        while ((rc = ingest__catblock_r_next(&r1, &rec)) > 0) {
            check(rec.landed_len >= 1 && rec.landed_len <= INGEST__CAT_PATH_MAX, "landed length out of bounds");
            check(strlen(rec.landed) == rec.landed_len && strlen(rec.path) == rec.path_len, "NUL inside a path");
            check(rec.version >= 1 && rec.batch_no >= 1, "version or batch number 0");
            if (ns > 0)
                check(ingest__cat_cmp(s[ns - 1].r.landed, s[ns - 1].r.landed_len, s[ns - 1].r.version, rec.landed,
                                      rec.landed_len, rec.version) < 0,
                      "records out of order accepted");
            if (ns < RECS_MAX) {
                s[ns].landed = strdup(rec.landed);
                s[ns].path = strdup(rec.path);
                if (s[ns].landed == NULL || s[ns].path == NULL)
                    break;
                s[ns].r = rec;
                s[ns].r.landed = s[ns].landed;
                s[ns].r.path = s[ns].path;
                ns++;
            }
        }
    }
    if (rc < 0)
        check(r1.err != NULL && r1.err_off <= n, "error without a message or past the input");
    if (rc == 0 && ns > 0 && ns < RECS_MAX) {
        /* a valid block: written again, it must read back the same */
        ingest__catblock_w w;
        ingest__catblock_w_init(&w, ctx);
        for (size_t i = 0; i < ns; i++)
            check(ingest__catblock_w_add(&w, &s[i].r) == 0, "writer refused a decoded record");
        size_t len;
        const uint8_t *v = ingest__catblock_w_finish(&w, &len);
        check(ingest__catblock_r_reset(&r2, v, len) == 0, "rewritten block refused");
        for (size_t i = 0; i < ns; i++) {
            check(ingest__catblock_r_next(&r2, &rec) == 1, "rewritten block shorter");
            const ingest__catrec *a = &s[i].r;
            check(rec.landed_len == a->landed_len && memcmp(rec.landed, a->landed, a->landed_len) == 0 &&
                      rec.path_len == a->path_len && memcmp(rec.path, a->path, a->path_len) == 0 &&
                      rec.version == a->version && rec.batch_no == a->batch_no && rec.size == a->size &&
                      rec.mtime_ns == a->mtime_ns && rec.mode == a->mode &&
                      memcmp(rec.hash, a->hash, INGEST_ID_BYTES) == 0,
                  "rewritten record differs");
        }
        check(ingest__catblock_r_next(&r2, &rec) == 0, "rewritten block longer");
        ingest__catblock_w_free(&w);
    }
    for (size_t i = 0; i < ns; i++) {
        free(s[i].landed);
        free(s[i].path);
    }
    free(s);
}

static void fuzz_feed(const uint8_t *d, size_t n)
{
    static ingest__catfeed_r r;
    int rc = ingest__catfeed_r_begin(&r, d, n);
    uint64_t k = 0;
    if (rc == 0) {
        check(strlen(r.device) >= 1 && strlen(r.batch) >= 1, "empty name accepted");
        while ((rc = ingest__catfeed_r_next(&r)) > 0) {
            check(r.landed_len >= 1 && strlen(r.landed) == r.landed_len && r.version >= 1, "bad file accepted");
            k++;
        }
        if (rc == 0)
            check(k == r.nfiles, "file count differs from the header");
    }
    if (rc < 0)
        check(r.err != NULL && r.err_off <= n, "error without a message or past the input");
}

static void text_of(const uint8_t *d, size_t n, char *out, size_t cap)
{
    size_t m = n < cap - 1 ? n : cap - 1;
    memcpy(out, d, m);
    out[m] = '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 0;
    const uint8_t *d = data + 1;
    const size_t n = size - 1;
    char text[65];
    switch (data[0] % 4) {
    case 0: fuzz_block(ctx, d, n); break;
    case 1: fuzz_feed(d, n); break;
    case 2: {
        text_of(d, n, text, sizeof(text));
        uint64_t id = 1, b = 1;
        if (ingest_catalog_cursor_parse(ctx, text, &id, &b) == 0) {
            char again[INGEST_CATALOG_CURSOR_MAX];
            ingest__cat_cursor_format(id, b, again, sizeof(again));
            check(strcasecmp(again, text) == 0, "cursor does not print back to itself");
        } else {
            check(ingest_ctx_errmsg(ctx)[0] != '\0' && id == 0 && b == 0, "cursor refused without a message");
        }
        break;
    }
    default: {
        text_of(d, n, text, sizeof(text));
        int64_t t = 1;
        if (ingest_parse_time(ctx, text, 1795000000ll * 1000000000, &t) != 0)
            check(ingest_ctx_errmsg(ctx)[0] != '\0' && t == 0, "time refused without a message");
        break;
    }
    }
    ingest_ctx_destroy(ctx);
    return 0;
}
