/*
 * The chunk+hash pipeline: content-defined chunking (ingest_chunker) and
 * chunk ids (ingest_chunk_id) on two threads.
 *
 * The thread that calls ingest_chunkhash_update/_fd/_buffer/_finish (the
 * "caller") finds the boundaries; one hasher thread, owned by the
 * pipeline, hashes finished chunks taken from a bounded queue.  When the
 * queue holds `depth` chunks waiting, the caller hashes the oldest one
 * itself, so both cores work and the queue never grows.  The ids are the
 * same as ingest_chunk_id() over the chunks that a lone ingest_chunker
 * finds (the serial path): threading changes the speed, never the result.
 *
 * Results come back through a callback, in stream order, always on the
 * caller's thread, from inside the call that fed the bytes (or from
 * ingest_chunkhash_finish for the last chunks).  The callback's `data`
 * points at the chunk's bytes and is valid only until the callback returns.
 *
 * Memory is bounded and allocated once at create: a ring of
 * 2*max + min(16*avg, 16 MiB) bytes (1.5 MiB with the defaults; update and
 * fd modes copy or read into it, buffer mode uses the caller's bytes in
 * place) and a queue of at most 64 chunks.
 * A file is never held whole.
 *
 * THREAD SAFETY: one pipeline is used by one caller thread at a time.
 * Distinct pipelines are independent.
 *
 * ERRORS: a non-zero value returned by the callback stops the stream: the
 * feeding call returns it (it should be negative: an INGEST_E* code or
 * the caller's own), the remaining chunks of the stream are dropped and
 * the pipeline is ready for a new stream.
 */
#ifndef INGEST_CHUNKHASH_H
#define INGEST_CHUNKHASH_H

#include "ingest/chunker.h"
#include "ingest/common.h"
#include "ingest/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ingest_chunk_info {
    uint64_t offset;             /* of the chunk in its stream */
    uint32_t len;                /* 1..params.max */
    uint8_t id[INGEST_ID_BYTES]; /* HMAC-SHA256 of the bytes (ingest_chunk_id) */
    const uint8_t *data;         /* the chunk's bytes, valid during the callback */
} ingest_chunk_info;

/* Return 0 to continue, non-zero (negative) to stop the stream. */
typedef int (*ingest_chunk_cb)(void *userdata, const ingest_chunk_info *chunk);

typedef struct ingest_chunkhash_s ingest_chunkhash;

typedef struct ingest_chunkhash_opts {
    const ingest_chunk_params *params; /* NULL: defaults */
    const uint8_t *key;                /* INGEST_KEY_BYTES, copied; NULL: the default dedup key */
    unsigned depth;                    /* chunks queued for the hasher before the caller helps; 0: 4 */
    int threads;                       /* 2 (default when 0): with a hasher thread; 1: all on the caller */
} ingest_chunkhash_opts;

/*
 * Create a pipeline (opts NULL: defaults).  cb is called for every chunk.
 * Starts the hasher thread.  *out is NULL on failure (INGEST_EINVAL for bad
 * params, INGEST_ENOMEM, INGEST_EIO when the thread cannot start).
 */
INGEST_API int ingest_chunkhash_create(ingest_ctx *ctx, const ingest_chunkhash_opts *opts, ingest_chunk_cb cb,
                                       void *userdata, ingest_chunkhash **out) INGEST_WUR;
/* Stop the hasher thread and free everything; NULL is accepted. */
INGEST_API void ingest_chunkhash_destroy(ingest_chunkhash *ch);

/*
 * Feed the next len bytes of the current stream (copied; data may be
 * reused when the call returns).  Calls cb for the chunks completed so far
 * (possibly none).  Returns 0 or the callback's non-zero value.
 */
INGEST_API int ingest_chunkhash_update(ingest_chunkhash *ch, const void *data, size_t len);

/*
 * End the current stream: the last (short) chunk is cut and every
 * remaining chunk is delivered before this returns.  The next update
 * starts a new stream at offset 0.
 */
INGEST_API int ingest_chunkhash_finish(ingest_chunkhash *ch);

/*
 * A whole stream from a file descriptor, read into the ring (no extra
 * copy) until end of file, then finished.  Returns 0, INGEST_EIO (detail in
 * ctx) or the callback's value.  The fd is not closed.
 */
INGEST_API int ingest_chunkhash_fd(ingest_chunkhash *ch, int fd);

/*
 * A whole stream already in memory: chunked and hashed in place (chunk
 * data pointers point into data), then finished.
 */
INGEST_API int ingest_chunkhash_buffer(ingest_chunkhash *ch, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
