/*
 * Fuzz target: arbitrary bytes through the manifest reader, every record
 * read and touched.  Whatever the reader accepts is rewritten with the
 * writer (which must accept it), and the writer's output must read back and
 * rewrite to the same bytes.  Never crashes, never leaks.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ingest.h>

#include "ingest/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * Read data and rewrite it.  Returns 1 with a malloc'd copy of the
 * rewritten manifest in *out, 0 when the reader rejects data.
 */
static int rewrite(ingest_ctx *ctx, const uint8_t *data, size_t size, char **out, size_t *out_len)
{
    int ok = 0;
    ingest_manifest_reader *r = NULL;
    ingest_manifest_writer *w = NULL;
    ingest_manifest_rec file;
    char *path = NULL, *landed = NULL;
    ingest_manifest_chunk *chunks = NULL;
    uint64_t have = 0;
    *out = NULL;
    memset(&file, 0, sizeof(file));
    if (ingest_manifest_reader_mem(ctx, data, size, &r) != 0 || ingest_manifest_writer_create(ctx, &w) != 0)
        goto out;
    ingest_manifest_rec rec;
    int rc;
    while ((rc = ingest_manifest_reader_next(r, &rec)) == 1) {
        if (rec.type == INGEST_MREC_HEADER) {
            if (ingest_manifest_writer_add(w, &rec) != 0)
                abort(); /* the reader accepted what the writer refuses */
            continue;
        }
        if (rec.type == INGEST_MREC_FILE) {
            free(path);
            free(landed);
            free(chunks);
            file = rec;
            path = strdup(rec.path);
            landed = strdup(rec.landed);
            /* nchunks_total <= size was checked, but size may be huge: the
             * reader would fail later anyway, cap what we buffer. */
            chunks = rec.nchunks_total <= (1u << 20) ? calloc(rec.nchunks_total + 1, sizeof(*chunks)) : NULL;
            if (path == NULL || landed == NULL || chunks == NULL)
                goto out;
            file.path = path;
            file.landed = landed;
            file.chunks = chunks;
            file.nchunks = (uint32_t)rec.nchunks_total;
            have = 0;
        }
        if (have + rec.nchunks > file.nchunks)
            abort(); /* the reader let a chunk list overflow */
        if (rec.nchunks > 0)
            memcpy(chunks + have, rec.chunks, rec.nchunks * sizeof(*chunks));
        have += rec.nchunks;
        if (have == file.nchunks && ingest_manifest_writer_add(w, &file) != 0)
            abort();
    }
    if (rc != 0)
        goto out;
    if (ingest_manifest_writer_finish(w) != 0)
        abort();
    const void *p = ingest_manifest_writer_data(w, out_len);
    *out = malloc(*out_len + 1);
    if (*out == NULL)
        goto out;
    memcpy(*out, p, *out_len);
    ok = 1;
out:
    free(path);
    free(landed);
    free(chunks);
    ingest_manifest_writer_destroy(w);
    ingest_manifest_reader_close(r);
    return ok;
}

/*
 * The wire's reading (what a receiver that agreed to push does): hash and
 * ids optional.  Every record is touched; a pushed chunk reads with an
 * all-zero id and is counted.
 */
static void read_wire(ingest_ctx *ctx, const uint8_t *data, size_t size)
{
    ingest_manifest_reader *r = NULL;
    if (ingest_manifest_reader_mem(ctx, data, size, &r) != 0)
        return;
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL | INGEST_MANIFEST_READ_ID_OPTIONAL);
    ingest_manifest_rec rec;
    static const uint8_t zero[INGEST_ID_BYTES];
    while (ingest_manifest_reader_next(r, &rec) == 1) {
        uint32_t pushed = 0;
        for (uint32_t i = 0; i < rec.nchunks; i++) {
            if (rec.chunks[i].len == 0)
                abort(); /* a chunk of no bytes was accepted */
            pushed += memcmp(rec.chunks[i].id, zero, INGEST_ID_BYTES) == 0;
        }
        if (pushed < rec.npushed || rec.npushed > rec.nchunks)
            abort(); /* pushed chunks not counted as read */
    }
    ingest_manifest_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 0;
    char *a = NULL, *b = NULL;
    size_t alen = 0, blen = 0;
    if (rewrite(ctx, data, size, &a, &alen)) {
        /* The canonical form is a fixed point. */
        if (!rewrite(ctx, (const uint8_t *)a, alen, &b, &blen))
            abort();
        if (alen != blen || memcmp(a, b, alen) != 0)
            abort();
    }
    free(a);
    free(b);
    read_wire(ctx, data, size);
    ingest_ctx_destroy(ctx);
    return 0;
}
