/*
 * Content-defined chunking: FastCDC with normalized chunking.
 *
 * A chunker finds chunk boundaries in a byte stream fed in pieces of any
 * size; the boundaries depend only on the bytes, never on how they were
 * split into pieces.  It holds no data: the caller keeps the bytes of the
 * current chunk (up to params.max) and hashes/compresses them itself.
 *
 * The gear table, the masks and the parameters are part of the storage
 * format (docs/chunking.md): changing any of them changes every chunk id.
 * INGEST_CHUNKER_FORMAT names the version of that definition.
 */
#ifndef INGEST_CHUNKER_H
#define INGEST_CHUNKER_H

#include "ingest/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_CHUNKER_FORMAT 1

#define INGEST_CHUNK_MIN_DEFAULT (16u * 1024u)
#define INGEST_CHUNK_AVG_DEFAULT (64u * 1024u)
#define INGEST_CHUNK_MAX_DEFAULT (256u * 1024u)
/* Bounds on the parameters (validated by ingest_chunk_params_check). */
#define INGEST_CHUNK_MIN_LOWEST 64u
#define INGEST_CHUNK_MAX_HIGHEST (64u * 1024u * 1024u)

typedef struct ingest_chunk_params {
    uint32_t min; /* no cut before min bytes; the first min bytes are not hashed */
    uint32_t avg; /* power of two; the normalization point */
    uint32_t max; /* forced cut at max bytes */
} ingest_chunk_params;

/* Fill p with the defaults (16/64/256 KiB). */
INGEST_API void ingest_chunk_params_default(ingest_chunk_params *p);
/*
 * Check min < avg < max, avg a power of two, min >= INGEST_CHUNK_MIN_LOWEST,
 * max <= INGEST_CHUNK_MAX_HIGHEST.  Returns 0 or INGEST_EINVAL with a reason
 * in the context (ctx may be NULL).
 */
INGEST_API int ingest_chunk_params_check(ingest_ctx *ctx, const ingest_chunk_params *p);

typedef struct ingest_chunker_s ingest_chunker;

/* Create a chunker; p NULL means the defaults.  *out is NULL on failure. */
INGEST_API int ingest_chunker_create(ingest_ctx *ctx, const ingest_chunk_params *p,
                                     ingest_chunker **out) INGEST_WUR;
INGEST_API void ingest_chunker_destroy(ingest_chunker *c);
/* Start a new stream (a new file). */
INGEST_API void ingest_chunker_reset(ingest_chunker *c);

/*
 * Scan data[0, len).  Returns 1 when a boundary was found: the current
 * chunk ends after the first *used bytes of data (the caller then starts the
 * next chunk with data + *used).  Returns 0 when no boundary was found in
 * the piece: *used == len and the chunk continues in the next piece.
 */
INGEST_API int ingest_chunker_scan(ingest_chunker *c, const uint8_t *data, size_t len, size_t *used);

/*
 * Length of the pending bytes of the current (final) chunk at the end of a
 * stream; 0 when the stream ended on a boundary (an empty file has no
 * chunk).  Resets the chunker for the next stream.
 */
INGEST_API uint64_t ingest_chunker_finish(ingest_chunker *c);

#ifdef __cplusplus
}
#endif
#endif
