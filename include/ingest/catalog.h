/*
 * The catalog of landed files: what the batch manifests under
 * {bronze}/_manifests/ say landed, kept compact and sorted so that a job
 * lists a million files without walking the bronze tree or reading a
 * million JSON lines; an incremental feed of what landed after a cursor;
 * and verification of landed bytes against their manifests.
 *
 * The catalog is a cache of the manifests, in an LMDB environment of its
 * own, {bronze}/_manifests/.catalog/ (layout: docs/catalog.md).  It catches
 * up from the manifests by itself: ingest_catalog_catch_up() adds every
 * manifest it does not hold yet (a directory of manifests unchanged since
 * the last catch-up is not read again), and a missing or unreadable catalog
 * is made again from all of them.  Each manifest is added in one LMDB
 * transaction together with its mark, so several processes (the receiver,
 * any number of ingestctl) may catch up at the same time and each batch is
 * added exactly once.
 *
 * THREAD SAFETY: a catalog handle may be shared by threads (calls are
 * serialised by a lock inside the handle); its context's error detail is
 * then only meaningful to a thread that knows no other thread failed
 * meanwhile: the catalog also logs its failures through the context.  One
 * process must not open the same catalog twice (LMDB's rule).  Callbacks
 * run with the lock held and must not call the catalog.
 *
 * Untrusted input: manifests are read with the manifest reader (bounded,
 * docs/manifest.md); the catalog's own records are checked as they are
 * decoded (bounds before use, INGEST_ECORRUPT with the record named), and
 * cursor and time strings are bounded and refused with a message saying
 * what is wrong and where.
 */
#ifndef INGEST_CATALOG_H
#define INGEST_CATALOG_H

#include "ingest/common.h"
#include "ingest/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Format of the catalog's tables (docs/catalog.md); another is remade. */
#define INGEST_CATALOG_FORMAT 1
/* A cursor string is at most this many bytes ("c1-" 16 hex "-" decimal). */
#define INGEST_CATALOG_CURSOR_MAX 48

/* ingest_catalog_open flags */
#define INGEST_CATALOG_RDONLY 0x1u /* no writes: catch_up and add fail INGEST_EINVAL; a missing catalog is INGEST_ENOTFOUND */
#define INGEST_CATALOG_NOSYNC 0x2u /* commits are not synced (tests, benchmarks): a power cut may lose them */
/* bronze_root must hold _manifests/ already (a tree a receiver landed into): else INGEST_ENOTFOUND, and
 * nothing is made there (a tool pointed at the wrong directory, or at an unmounted one, says so) */
#define INGEST_CATALOG_EXISTING 0x4u

typedef struct ingest_catalog_s ingest_catalog;

/*
 * Open (creating it when absent, unless RDONLY) the catalog of the bronze
 * tree bronze_root.  A catalog that LMDB cannot open, or of another
 * format, is removed and made again (empty: the next catch-up fills it;
 * its feed cursors are then refused, see ingest_catalog_feed), with a
 * warning in the log.  0, INGEST_ENOTFOUND (RDONLY, no catalog),
 * INGEST_EIO, INGEST_ENOMEM.
 */
INGEST_API int ingest_catalog_open(ingest_ctx *ctx, const char *bronze_root, unsigned flags,
                                   ingest_catalog **out) INGEST_WUR;
/* Close; NULL accepted. */
INGEST_API void ingest_catalog_close(ingest_catalog *cat);

typedef struct ingest_catalog_stats {
    uint64_t batches;   /* batches added (catch_up) or held (info) */
    uint64_t files;     /* file records added / held */
    uint64_t bad;       /* manifests skipped: malformed, or not where their header says */
    uint64_t dirs_read; /* manifest directories read (the others were unchanged) */
    uint64_t bytes;     /* info: size of the catalog's data file */
} ingest_catalog_stats;

/*
 * Add every manifest under {bronze}/_manifests/{device}/ that the catalog
 * does not hold.  A malformed manifest, or one whose header names another
 * device or batch than its path, is logged, counted in bad and skipped (and
 * read again at the next catch-up).  stats may be NULL.  0, or < 0 when the
 * catalog could not be written (what was added before stays).
 */
INGEST_API int ingest_catalog_catch_up(ingest_catalog *cat, ingest_catalog_stats *stats);
/*
 * Add the manifest of one batch, {bronze}/_manifests/{device}/{batch}.jsonl
 * (the receiver, once the manifest is durable).  1 added, 0 held already,
 * < 0 on failure (a malformed manifest: INGEST_ECORRUPT).
 */
INGEST_API int ingest_catalog_add_batch(ingest_catalog *cat, const char *device, const char *batch);
/*
 * The adder: a thread of the catalog's own that adds the batches queued by
 * ingest_catalog_add_batch_later, in order, so that whoever lands a batch
 * (the receiver's committer) does not wait for the catalog's commit.  Not
 * for a read-only catalog.  ingest_catalog_close adds what is still queued,
 * then ends it.  0, or < 0 (no thread: batches are then added at once).
 */
INGEST_API int ingest_catalog_start_adder(ingest_catalog *cat);
/*
 * Queue one batch for the adder (at most 64 wait; past that the caller
 * waits for room): 2 queued; a failure to add it later is logged, and the
 * next catch-up adds it (its manifest is there).  Without an adder, as
 * ingest_catalog_add_batch.  INGEST_EINVAL for a bad device or batch name.
 */
INGEST_API int ingest_catalog_add_batch_later(ingest_catalog *cat, const char *device, const char *batch);
/* Wait until the adder added every queued batch (nothing to wait for without one). */
INGEST_API void ingest_catalog_drain(ingest_catalog *cat);
/* What the catalog holds (batches, files, bytes); never reads manifests. */
INGEST_API int ingest_catalog_info(ingest_catalog *cat, ingest_catalog_stats *stats);

/*
 * One landed file.  Strings are valid during the callback only.  path and
 * landed may hold any byte but NUL (see docs/manifest.md, "Paths").
 */
typedef struct ingest_catalog_entry {
    const char *device;  /* NULL when the listing did not need it (see ingest_catalog_list) */
    const char *batch;   /* idem */
    const char *path;    /* relative path at the device */
    const char *landed;  /* relative to the bronze root */
    size_t path_len, landed_len;
    uint64_t size;
    int64_t mtime_ns;
    uint32_t mode;
    uint64_t version;    /* of the landed path, from 1 */
    uint8_t hash[INGEST_ID_BYTES]; /* whole-file hash, as in the manifest */
    int64_t landed_ns;   /* when its batch landed (the manifest header's created_ns); 0 when not needed */
    uint64_t batch_no;   /* the batch's place in the feed, from 1 */
    int replaced;        /* a later version of the landed path landed: this one is no longer on disk */
} ingest_catalog_entry;

/* ingest_catalog_filter.flags */
#define INGEST_CATALOG_ALL_VERSIONS 0x1u /* list replaced versions too (marked replaced) */
#define INGEST_CATALOG_NO_BATCH 0x2u     /* the callback needs no device, batch or landed_ns */

typedef struct ingest_catalog_filter {
    const char *device;   /* NULL: all */
    const char *prefix;   /* of the landed path; NULL or "": all */
    int64_t since_ns;     /* landed at or after; 0: no bound */
    int64_t until_ns;     /* landed before; 0: no bound */
    unsigned flags;       /* INGEST_CATALOG_ALL_VERSIONS, INGEST_CATALOG_NO_BATCH */
} ingest_catalog_filter;

/* Return 0 to go on, > 0 to stop (the call returns 0), < 0 to fail with it. */
typedef int (*ingest_catalog_fn)(void *ud, const ingest_catalog_entry *e);

/*
 * Every file the catalog holds that passes filter f (NULL: all), in
 * landed-path order (versions ascending), current versions only unless
 * INGEST_CATALOG_ALL_VERSIONS.  Reads only the catalog (one LMDB read
 * snapshot).  Does not catch up: call ingest_catalog_catch_up first to
 * include manifests landed since.  With INGEST_CATALOG_NO_BATCH and no
 * device/time bounds the batch records are not read at all.
 */
INGEST_API int ingest_catalog_list(ingest_catalog *cat, const ingest_catalog_filter *f, ingest_catalog_fn fn,
                                   void *ud);

/*
 * The feed: the files of the batches added after cursor (NULL or "": from
 * the start), at most max_batches batches (0: all), batch by batch in the
 * order the catalog added them, each batch's files in landed-path order;
 * filter f (NULL: all) narrows what is passed to fn (ALL_VERSIONS is
 * implied: a file replaced since it landed is passed, marked replaced).
 * Then next (at least INGEST_CATALOG_CURSOR_MAX bytes) receives the cursor
 * to pass next time.  A batch is added in one transaction with its number,
 * so reading from cursor to cursor passes every landed file exactly once,
 * whoever catches up and whenever the receiver restarts.
 * INGEST_EINVAL for a malformed cursor (detail says where);
 * INGEST_ESTALE for a cursor of another catalog (it was made again since:
 * start again from "" or list with --since).
 */
INGEST_API int ingest_catalog_feed(ingest_catalog *cat, const char *cursor, uint64_t max_batches,
                                   const ingest_catalog_filter *f, ingest_catalog_fn fn, void *ud, char *next,
                                   size_t next_cap);

/*
 * Parse a cursor: "c1-" 16 hex digits (the catalog's identity) "-" the
 * last batch number seen (decimal).  0, or INGEST_EINVAL with a detail
 * naming the byte at fault.
 */
INGEST_API int ingest_catalog_cursor_parse(ingest_ctx *ctx, const char *s, uint64_t *catalog_id,
                                           uint64_t *batch_no);

/*
 * A time argument, as Unix nanoseconds: "2026-11-22", "2026-11-22T10:30",
 * "2026-11-22T10:30:05.25Z" (also with a space instead of T, and an offset
 * "+01:00"; no zone means UTC), "@1795000000" (Unix seconds, optional
 * fraction), or "-90m" / "-36h" / "-7d" / "-30s" (before now_ns).  At most
 * 64 bytes.  0, or INGEST_EINVAL naming the byte at fault.
 */
INGEST_API int ingest_parse_time(ingest_ctx *ctx, const char *s, int64_t now_ns, int64_t *out_ns);

/* ---- verification --------------------------------------------------------- */

typedef struct ingest_catalog_verify_stats {
    uint64_t files, bytes;          /* checked */
    uint64_t ok, missing, changed, corrupt;
    uint64_t skipped;               /* no manifest to check against */
} ingest_catalog_verify_stats;

/* What verify found wrong with one file. */
enum {
    INGEST_VERIFY_MISSING = 1, /* no regular file at the landed path */
    INGEST_VERIFY_CHANGED = 2, /* its size differs from the manifest's (truncated, extended) */
    INGEST_VERIFY_CORRUPT = 3, /* same size, but its bytes do not hash to the manifest's chunk ids */
};

typedef struct ingest_catalog_verify_opts {
    const uint8_t *key;      /* the fleet's dedup key (chunk ids are keyed with it); required */
    unsigned threads;        /* 0: one per online CPU */
    const ingest_catalog_filter *filter; /* device and since/until; prefix too; NULL: all */
    /* A file found missing, changed or corrupt; detail says what (e.g. the
     * first chunk that does not match).  Called from the calling thread. */
    void (*problem)(void *ud, int what, const ingest_catalog_entry *e, const char *detail);
    /* Progress, from the calling thread, about every 200 ms: files and bytes checked, of the totals. */
    void (*progress)(void *ud, uint64_t files, uint64_t bytes, uint64_t total_files, uint64_t total_bytes);
    void *ud;
} ingest_catalog_verify_opts;

/*
 * Re-hash the current version of every landed file the catalog holds
 * (filtered) against its manifest: each chunk's id (keyed HMAC-SHA256 of
 * its bytes, chunk boundaries from the manifest) and the whole-file hash,
 * on opts->threads threads.  Files are read, never written.  0 (look at
 * stats: problems are not failures), or < 0 when it could not run.
 */
INGEST_API int ingest_catalog_verify(ingest_catalog *cat, const ingest_catalog_verify_opts *opts,
                                     ingest_catalog_verify_stats *stats);

/*
 * Make landers of this process add each batch to cat once its manifest is
 * durable (the receiver).  A failure to add is logged and does not fail
 * the batch: the next catch-up adds it.  cat must outlive the lander.
 * (Implemented with the lander; declared here to keep the catalog's API
 * in one header.)
 */
struct ingest_lander_s;
INGEST_API void ingest_lander_set_catalog(struct ingest_lander_s *l, ingest_catalog *cat);

#ifdef __cplusplus
}
#endif
#endif
