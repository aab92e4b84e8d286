/*
 * Chunk ids and file hashes: HMAC-SHA256 keyed with the fleet's dedup key
 * (chunk id format 2, docs/chunking.md).  Keyed, so ids seen on the wire or
 * in Kafka reveal nothing about content to outsiders, who lack the key.  Not
 * to a device: every device has the key and can compute the id of content
 * it guesses (docs/operations.md, "Dedup scope").
 */
#ifndef INGEST_HASH_H
#define INGEST_HASH_H

#include "ingest/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The definition of chunk ids and file hashes: 2 = HMAC-SHA256 (1 was keyed
 * BLAKE2b-256).  Part of the storage format, like INGEST_CHUNKER_FORMAT.
 */
#define INGEST_CHUNK_ID_FORMAT 2

#define INGEST_ID_BYTES 32
#define INGEST_KEY_BYTES 32

/*
 * The documented default dedup key, used by `ingestctl chunk` so runs are
 * comparable: the 32 bytes 0x00, 0x01, ..., 0x1f.  Never use it for a fleet.
 */
INGEST_API const uint8_t *ingest_default_dedup_key(void);

/*
 * id = HMAC-SHA256(key, data).  Thread-safe; never fails.  Each calling
 * thread keeps one keyed OpenSSL context (freed when the thread exits), so
 * a thread that keeps one key pays the key setup once.
 */
INGEST_API void ingest_chunk_id(const uint8_t key[INGEST_KEY_BYTES], const void *data, size_t len,
                                uint8_t id[INGEST_ID_BYTES]);

/*
 * Streaming HMAC-SHA256 (the same key and result as ingest_chunk_id).  The whole-file hash of a
 * manifest is this hash over the file's chunk ids in order (32 bytes each),
 * not over its bytes: the ids already cover the bytes, so each side hashes
 * the data once.  The state is a caller-owned, fixed-size object: no
 * allocation.  A state just initialised may be copied (memcpy) to start
 * other hashes with the same key without keying each again.
 */
typedef struct ingest_filehash {
    _Alignas(64) uint8_t opaque[384];
} ingest_filehash;

INGEST_API void ingest_filehash_init(ingest_filehash *h, const uint8_t key[INGEST_KEY_BYTES]);
INGEST_API void ingest_filehash_update(ingest_filehash *h, const void *data, size_t len);
INGEST_API void ingest_filehash_final(ingest_filehash *h, uint8_t out[INGEST_ID_BYTES]);

/*
 * Load a dedup key file: exactly 32 raw bytes, or 64 hex digits with an
 * optional trailing newline.  The file must be private, as a secret key file
 * (ingest_secret_key_load): one that group or others can access is refused
 * with INGEST_EINVAL and "chmod 600 PATH" in the detail.  Returns 0,
 * INGEST_ENOTFOUND, INGEST_EIO or INGEST_EINVAL (detail in ctx).
 */
INGEST_API int ingest_dedup_key_load(ingest_ctx *ctx, const char *path, uint8_t key[INGEST_KEY_BYTES]);

#ifdef __cplusplus
}
#endif
#endif
