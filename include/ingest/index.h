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

/* ingest_store_opts.flags */
#define INGEST_STORE_NOCREATE 0x1u /* fail with INGEST_ENOTFOUND when there is no store */
#define INGEST_STORE_RDONLY 0x2u   /* read only (implies NOCREATE); writes fail INGEST_EINVAL */
#define INGEST_STORE_NOSYNC 0x4u   /* commits are not synced: a power cut may lose them (tests, scratch) */

typedef struct ingest_store_opts {
    uint64_t map_size;        /* LMDB map size in bytes; 0: 64 GiB */
    unsigned txn_max_writes;  /* writes per transaction; 0: 1000 */
    unsigned flags;           /* INGEST_STORE_* */
    /*
     * 0: every write is durable at ingest_store_commit.  N > 0: writes to
     * the tables the core's index defers (see ingest_store_flush) wait in
     * memory until N keys are waiting or ingest_store_flush is called.
     */
    unsigned defer_max_writes;
} ingest_store_opts;

/*
 * A store is one handle for one thread at a time (the caller serialises
 * calls); several processes may open the same directory (LMDB locking).
 */
typedef struct ingest_store_s ingest_store;

/*
 * Open (creating when absent, directory included) the store in directory
 * dir; opts may be NULL.  Returns 0, INGEST_ECORRUPT when the environment
 * cannot be opened as an LMDB store or its meta record is missing or bad
 * (detail in ctx), INGEST_EVERSION when its format is not
 * INGEST_STORE_FORMAT, INGEST_ENOTFOUND with NOCREATE/RDONLY and no store.
 * A store that is corrupt is remade by ingest_store_wipe() then
 * ingest_store_open(); the core's index is then refilled with
 * ingest_index_rebuild() (see docs/storage.md).
 */
INGEST_API int ingest_store_open(ingest_ctx *ctx, const char *dir, const ingest_store_opts *opts,
                                 ingest_store **out) INGEST_WUR;
/* Commit what is pending and close; NULL accepted. */
INGEST_API void ingest_store_close(ingest_store *st);
/*
 * Commit the open write transaction, if any (durable on return).  When a
 * write fails, the open transaction is discarded: writes since the last
 * commit are lost, as in a crash.
 */
INGEST_API int ingest_store_commit(ingest_store *st);
/*
 * Deferred writes (a store opened with defer_max_writes > 0): the core's
 * chunk index, landed files and batch marks are a cache of the manifests,
 * so their writes wait in memory and reach the disk together, in key
 * order, instead of at every commit.  flush commits the open transaction
 * and writes every deferred write, durably.  A crash loses the writes not
 * flushed; ingest_index_catch_up() puts them back from the manifests.
 * ingest_store_deferred: keys waiting, and the age of the oldest write in
 * seconds (age_seconds may be NULL).
 */
INGEST_API int ingest_store_flush(ingest_store *st);
INGEST_API size_t ingest_store_deferred(const ingest_store *st, double *age_seconds);
/* Remove the store's files (data.mdb, lock.mdb) in dir; absent files are fine. */
INGEST_API int ingest_store_wipe(ingest_ctx *ctx, const char *dir);

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

/*
 * The chunk index of store st, for landed files under bronze_root (NULL:
 * unknown; then file_path fails INGEST_EINVAL, check skips the files on
 * disk and rebuild fails).  INGEST_ECORRUPT when the index records of the
 * store are missing or bad, INGEST_EVERSION for another index format.
 */
INGEST_API int ingest_index_open(ingest_store *st, const char *bronze_root, ingest_index **out) INGEST_WUR;
INGEST_API void ingest_index_close(ingest_index *idx);
/*
 * 1 when the index must be rebuilt before use: a new store (never built),
 * or a rebuild that was interrupted; 0 when it is complete.  Startup
 * sequence for the core: ingest_store_open (on ECORRUPT/EVERSION:
 * ingest_store_wipe and open again), ingest_index_open, then
 * ingest_index_rebuild when this returns 1.
 */
INGEST_API int ingest_index_rebuild_needed(ingest_index *idx);

/*
 * Dedup scope: whose landed chunks count as known to a batch (docs/storage.md,
 * docs/operations.md).  FLEET: any device's, so a device learns from the
 * want list whether any device landed a chunk.  DEVICE: only the chunks
 * the batch's own device landed; entries are keyed by device name and id,
 * so another device's content is always wanted, and the answer says
 * nothing across devices (at the price of cross-device dedup).
 */
enum { INGEST_DEDUP_FLEET = 0, INGEST_DEDUP_DEVICE = 1 };

/* The index's dedup scope (its format says it; a new index is FLEET), or INGEST_EINVAL. */
INGEST_API int ingest_index_scope(const ingest_index *idx);
/*
 * Make scope (INGEST_DEDUP_*) the index's.  Returns 0 when it already is
 * (nothing written); 1 when it was the other one: the index is marked as
 * being rebuilt, then the chunk entries (keyed for the other scope) are
 * dropped and the new scope recorded, durably, so keys of the two scopes
 * never mix in a complete index; the caller then runs
 * ingest_index_rebuild() (ingest_index_rebuild_needed() says 1 until one
 * completes, after a crash too).  INGEST_EINVAL for another value or a
 * read-only store.
 */
INGEST_API int ingest_index_set_scope(ingest_index *idx, int scope);

/* Record a landed file (path relative to the bronze root); *file_no set. */
INGEST_API int ingest_index_add_file(ingest_index *idx, const char *relpath,
                                     const ingest_file_identity *ident, uint64_t *file_no);
/*
 * Record that chunk id, landed by device, lives at [offset, offset+length)
 * of file_no.  device names the landing device (1 to 128 bytes): required
 * in device scope (INGEST_EINVAL without it), ignored in fleet scope.
 */
INGEST_API int ingest_index_add_chunk_for(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES],
                                          const ingest_chunk_loc *loc);
/*
 * Where chunk id lives, as device sees it, without checking the file: 0 or
 * INGEST_ENOTFOUND.  In device scope only what device itself landed is
 * found; device as for ingest_index_add_chunk_for.
 */
INGEST_API int ingest_index_find_for(ingest_index *idx, const char *device, const uint8_t id[INGEST_ID_BYTES],
                                     ingest_chunk_loc *loc);
/* Drop device's entry of chunk id (found stale); device as above. */
INGEST_API int ingest_index_forget_chunk_for(ingest_index *idx, const char *device,
                                             const uint8_t id[INGEST_ID_BYTES]);
/* The same without a device: fleet scope only (INGEST_EINVAL in device scope). */
INGEST_API int ingest_index_add_chunk(ingest_index *idx, const uint8_t id[INGEST_ID_BYTES],
                                      const ingest_chunk_loc *loc);
INGEST_API int ingest_index_find(ingest_index *idx, const uint8_t id[INGEST_ID_BYTES], ingest_chunk_loc *loc);
/*
 * The absolute path of file_no, after checking that the file on disk still
 * has its recorded identity: 0, INGEST_ENOTFOUND (no such number), or
 * INGEST_ESTALE (missing or changed downstream).
 */
INGEST_API int ingest_index_file_path(ingest_index *idx, uint64_t file_no, char *path, size_t cap);
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

/*
 * After a crash of a process whose store deferred the index's writes (see
 * ingest_store_flush): add what the manifests of batches not marked landed
 * say (their files, chunks and marks), as the rebuild would, and flush.
 * stats counts what was added (batches, files, chunks) and left out (stale,
 * bad).  Cheap when nothing is missing: one lookup per manifest.
 */
INGEST_API int ingest_index_catch_up(ingest_index *idx, ingest_index_stats *stats);

/* ---- edge: cache of chunk ids the core holds ---- */

typedef struct ingest_havecache_s ingest_havecache;

INGEST_API int ingest_havecache_open(ingest_store *st, uint64_t max_entries, ingest_havecache **out) INGEST_WUR;
INGEST_API void ingest_havecache_close(ingest_havecache *hc);
/* 1 when the core is known to hold id, 0 when not known, < 0 on error. */
INGEST_API int ingest_havecache_has(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES]);
/* Remember id (refreshing its age); prunes the oldest past max_entries. */
INGEST_API int ingest_havecache_add(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES]);
/* Forget id (the core said it does not hold it): 1 removed, 0 not there, or < 0. */
INGEST_API int ingest_havecache_del(ingest_havecache *hc, const uint8_t id[INGEST_ID_BYTES]);
INGEST_API uint64_t ingest_havecache_count(ingest_havecache *hc);

/* ---- edge: file table (what was acknowledged, per manifest path) ---- */

/*
 * The state of a file when its batch was acknowledged.  A file whose
 * current size, mtime and ctime equal its record is unchanged and is not
 * shipped again.  Keys are manifest paths, so one directory's entries are
 * adjacent; the table lives on disk, not in RAM.
 */
typedef struct ingest_file_state {
    uint64_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;
    uint64_t dev;
    uint64_t ino;
} ingest_file_state;

/*
 * dev of a file table entry whose version the core refused (FILE_REFUSED):
 * it counts as shipped (not sent again until it changes), but nothing that
 * acts on landed files (the agent's after_ship) may touch it.
 */
#define INGEST_FILE_STATE_REFUSED UINT64_MAX

typedef struct ingest_filetable_s ingest_filetable;

INGEST_API int ingest_filetable_open(ingest_store *st, ingest_filetable **out) INGEST_WUR;
INGEST_API void ingest_filetable_close(ingest_filetable *ft);
/* 0 with *out, INGEST_ENOTFOUND, or INGEST_ECORRUPT for a malformed record. */
INGEST_API int ingest_filetable_get(ingest_filetable *ft, const char *path, ingest_file_state *out);
/* Record (replace) path's state; durable at the next ingest_store_commit. */
INGEST_API int ingest_filetable_put(ingest_filetable *ft, const char *path, const ingest_file_state *state);
INGEST_API int ingest_filetable_del(ingest_filetable *ft, const char *path);
/*
 * The whole-file hash (as in the manifest) of the version recorded for
 * path: set_hash adds it to the record (INGEST_ENOTFOUND without one; a
 * later ingest_filetable_put drops it), get_hash reads it (INGEST_ENOTFOUND
 * when there is no record or it has no hash).  requires v0.1+ (unstable).
 */
INGEST_API int ingest_filetable_set_hash(ingest_filetable *ft, const char *path, const uint8_t hash[INGEST_ID_BYTES]);
INGEST_API int ingest_filetable_get_hash(ingest_filetable *ft, const char *path, uint8_t hash[INGEST_ID_BYTES]);
INGEST_API uint64_t ingest_filetable_count(ingest_filetable *ft);
/*
 * Drop the records of files that no longer exist: those whose path
 * gone(ud, path) answers 1 for (0 keeps a record, < 0 stops with that
 * code).  A file that comes back is then a new file (shipped once it
 * settled).  Records of paths over 440 bytes (hashed keys) are kept.
 * Committed; *removed (may be NULL) gets how many went.  requires v0.1+
 * (unstable).
 */
INGEST_API int ingest_filetable_prune(ingest_filetable *ft, int (*gone)(void *ud, const char *path), void *ud,
                                      uint64_t *removed);

#ifdef __cplusplus
}
#endif
#endif
