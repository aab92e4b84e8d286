/*
 * Durable state in LMDB: a store (one LMDB environment in a state
 * directory) and the tables kept in it.
 *
 * Core: the chunk index (chunk id -> landed-file number, offset, length) and
 * the landed-file table (number -> bronze-relative path and identity: dev,
 * inode, size, mtime), plus the table of landed batches.  All of it is a
 * cache that ingest_index_rebuild() remakes from the manifests.
 *
 * Edge: the have-cache, the chunk ids the core is known to hold, bounded to
 * max_entries (oldest pruned first).
 *
 * Writes are grouped in transactions of at most opts.txn_max_writes (about
 * a thousand) so private memory stays small; a crash loses at most the open
 * transaction.  Key layouts and value encodings: docs/storage.md.
 */
#ifndef INGEST_INDEX_H
#define INGEST_INDEX_H

#include "ingest/common.h"
#include "ingest/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_STORE_FORMAT 1

typedef struct ingest_store_opts {
    uint64_t map_size;        /* LMDB map size in bytes; 0: 64 GiB */
    unsigned txn_max_writes;  /* writes per transaction; 0: 1000 */
} ingest_store_opts;

typedef struct ingest_store_s ingest_store;

/* Open (creating when absent) the store in directory dir. */
INGEST_API int ingest_store_open(ingest_ctx *ctx, const char *dir, const ingest_store_opts *opts,
                                 ingest_store **out) INGEST_WUR;
/* Commit what is pending and close; NULL accepted. */
INGEST_API void ingest_store_close(ingest_store *st);
/* Commit the open write transaction, if any (durable on return). */
INGEST_API int ingest_store_commit(ingest_store *st);

/* ---- core: chunk index and landed files ---- */

typedef struct ingest_file_identity {
    uint64_t dev;
    uint64_t ino;
    uint64_t size;
    int64_t mtime_ns;
} ingest_file_identity;

typedef struct ingest_chunk_loc {
    uint64_t file_no;
    uint64_t offset;
    uint32_t length;
} ingest_chunk_loc;

typedef struct ingest_index_s ingest_index;

/* The chunk index of store st, for landed files under bronze_root. */
INGEST_API int ingest_index_open(ingest_store *st, const char *bronze_root, ingest_index **out) INGEST_WUR;
INGEST_API void ingest_index_close(ingest_index *idx);

/* Record a landed file (path relative to the bronze root); *file_no set. */
INGEST_API int ingest_index_add_file(ingest_index *idx, const char *relpath,
                                     const ingest_file_identity *ident, uint64_t *file_no);
/* Record that chunk id lives at [offset, offset+length) of file_no. */
INGEST_API int ingest_index_add_chunk(ingest_index *idx, const uint8_t id[INGEST_ID_BYTES],
                                      const ingest_chunk_loc *loc);
/* Where chunk id lives, without checking the file: 0 or INGEST_ENOTFOUND. */
INGEST_API int ingest_index_find(ingest_index *idx, const uint8_t id[INGEST_ID_BYTES], ingest_chunk_loc *loc);
/*
 * The absolute path of file_no, after checking that the file on disk still
 * has its recorded identity: 0, INGEST_ENOTFOUND (no such number), or
 * INGEST_ESTALE (missing or changed downstream).
 */
INGEST_API int ingest_index_file_path(ingest_index *idx, uint64_t file_no, char *path, size_t cap);
/* Drop chunk id (found stale). */
INGEST_API int ingest_index_forget_chunk(ingest_index *idx, const uint8_t id[INGEST_ID_BYTES]);

/* Landed batches, so a replayed batch is recognised: 1 landed, 0 not. */
INGEST_API int ingest_index_batch_landed(ingest_index *idx, const char *device, const char *batch);
INGEST_API int ingest_index_batch_mark(ingest_index *idx, const char *device, const char *batch);

typedef struct ingest_index_stats {
    uint64_t chunks, files, batches;
    uint64_t bad;   /* malformed entries */
    uint64_t stale; /* files missing or changed, and chunks pointing at them */
} ingest_index_stats;

/*
 * Walk every entry; report each malformed or stale one through cb (may be
 * NULL) with a one-line description.  Returns 0 (even when entries are bad:
 * look at stats) or an error reading the store.
 */
INGEST_API int ingest_index_check(ingest_index *idx, void (*cb)(void *ud, const char *problem), void *ud,
                                  ingest_index_stats *stats);

/*
 * Empty the index and rebuild it from {bronze_root}/_manifests/ (every
 * *.jsonl below it, in name order, later versions of a path replacing
 * earlier ones); a landed file missing or changed since is left out.
 */
INGEST_API int ingest_index_rebuild(ingest_index *idx, ingest_index_stats *stats);

/* ---- edge: cache of chunk ids the core holds ---- */

typedef struct ingest_havecache_s ingest_havecache;

INGEST_API int ingest_havecache_open(ingest_store *st, uint64_t max_entries, ingest_havecache **out) INGEST_WUR;
INGEST_API void ingest_havecache_close(ingest_havecache *hc);
/* 1 when the core is known to hold id, 0 when not known, < 0 on error. */
INGEST_API int ingest_havecache_has(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES]);
/* Remember id (refreshing its age); prunes the oldest past max_entries. */
INGEST_API int ingest_havecache_add(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES]);
INGEST_API uint64_t ingest_havecache_count(ingest_havecache *hc);

#ifdef __cplusplus
}
#endif
#endif
