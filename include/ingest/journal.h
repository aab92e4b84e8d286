/*
 * The edge's batch journal: what the agent promised to ship and how far it
 * got, in the agent's LMDB store (the same store as the file table and the
 * have-cache), so a kill -9 or a power cut loses nothing and ships nothing
 * twice after its ack was recorded.
 *
 * A batch goes PENDING (its files chosen and recorded, with the size,
 * mtime, ctime and inode to ship) -> SENT (its manifest went out: the core may
 * hold it) -> ACKED (the core made it durable), one committed transaction
 * per change.  The ACKED change writes, in that same transaction, every
 * file's shipped state into the file table (ingest_filetable), so after a
 * restart a file is either in an unacked batch (shipped again under the
 * same batch id: the core acks a replay as a duplicate) or recorded as
 * shipped (never shipped again while unchanged).  An ACKED record stays
 * until ingest_journal_remove (after the after-ship action ran), so an
 * interrupted after-ship action is redone after a restart.
 *
 * While a batch is in the journal its files are "in flight"
 * (ingest_journal_inflight): discovery passes them over.
 *
 * The journal also holds the stability table used by discovery: the first
 * size and mtime seen of a file not yet shipped, and when, so a file is
 * taken only after it stayed unchanged for a settle time (or was renamed
 * into the tree).  Keys are manifest paths, so one directory's entries are
 * adjacent; nothing is held in RAM per file.
 *
 * Tables and value formats: docs/storage.md ("Edge: batch journal").
 *
 * THREAD SAFETY: as the store: one thread at a time.
 */
#ifndef INGEST_JOURNAL_H
#define INGEST_JOURNAL_H

#include "ingest/common.h"
#include "ingest/index.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_JOURNAL_MAX_FILES 1000000u /* files in one journaled batch */
#define INGEST_JOURNAL_ID_MAX 127         /* bytes of a batch id */

enum { INGEST_JOURNAL_PENDING = 1, INGEST_JOURNAL_SENT = 2, INGEST_JOURNAL_ACKED = 3 };

typedef struct ingest_journal_file {
    const char *path; /* manifest path "{source}/{relative path}" */
    uint64_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;
    uint64_t ino;     /* inode number; 0: unknown (records journaled before it was kept) */
} ingest_journal_file;

/* A batch as read back (ingest_journal_get); free with ingest_journal_batch_free. */
typedef struct ingest_journal_batch {
    uint64_t seq;
    int state;         /* INGEST_JOURNAL_* */
    const char *id;    /* the batch id */
    int64_t created_ns; /* wall clock when it was journaled */
    uint64_t bytes;    /* sum of file sizes */
    size_t nfiles;
    const ingest_journal_file *files;
} ingest_journal_batch;

typedef struct ingest_journal_s ingest_journal;

/* Open the journal's tables in st; ft is the file table the ACKED change writes. */
INGEST_API int ingest_journal_open(ingest_store *st, ingest_filetable *ft, ingest_journal **out) INGEST_WUR;
INGEST_API void ingest_journal_close(ingest_journal *j);

/*
 * Record batch seq (PENDING) with its files and mark them in flight; one
 * transaction, committed on return.  A PENDING record with the same seq is
 * replaced (its files chosen again); INGEST_EEXIST when seq is SENT or
 * ACKED; INGEST_EINVAL for n == 0, n > INGEST_JOURNAL_MAX_FILES or a bad id.
 */
INGEST_API int ingest_journal_add(ingest_journal *j, uint64_t seq, const char *id, const ingest_journal_file *files,
                                  size_t n) INGEST_WUR;

/*
 * The same in state SENT at once: ingest_journal_add then
 * ingest_journal_set_state(SENT) in one transaction (the --once agent
 * journals a batch just before its manifest goes out).
 */
INGEST_API int ingest_journal_add_sent(ingest_journal *j, uint64_t seq, const char *id,
                                       const ingest_journal_file *files, size_t n) INGEST_WUR;

/*
 * Batch seq (PENDING or SENT) back to PENDING under a new id, its files
 * and their in-flight marks kept; one transaction.  For a batch the core
 * answered INGEST_EBATCHID (its id was landed before with other data):
 * it goes again under id.  INGEST_ENOTFOUND, INGEST_EINVAL (ACKED, or a
 * bad id).
 */
INGEST_API int ingest_journal_renew(ingest_journal *j, uint64_t seq, const char *id) INGEST_WUR;

/*
 * Move batch seq forward to SENT or ACKED (committed on return).  ACKED
 * also records every file of the batch in the file table, with the state
 * given in files[] (the versions the core acknowledged; NULL: those of the
 * journal), clears their in-flight marks and their stability records.
 * INGEST_ENOTFOUND when there is no such batch; INGEST_EINVAL for a move
 * backwards.
 */
INGEST_API int ingest_journal_set_state(ingest_journal *j, uint64_t seq, int state,
                                        const ingest_journal_file *files, size_t n) INGEST_WUR;

/* Forget batch seq: delete its record and its files' in-flight marks (committed). */
INGEST_API int ingest_journal_remove(ingest_journal *j, uint64_t seq) INGEST_WUR;

/* Batch seq into *out (ENOTFOUND, ECORRUPT for a malformed record). */
INGEST_API int ingest_journal_get(ingest_journal *j, uint64_t seq, ingest_journal_batch **out) INGEST_WUR;
INGEST_API void ingest_journal_batch_free(ingest_journal *j, ingest_journal_batch *b);

/* The smallest journaled seq > after: 1 with *seq, 0 when none, < 0 on error. */
INGEST_API int ingest_journal_next(ingest_journal *j, uint64_t after, uint64_t *seq);

/* Batches, files and bytes journaled and not yet ACKED (the queue). */
INGEST_API int ingest_journal_queued(ingest_journal *j, uint64_t *batches, uint64_t *files, uint64_t *bytes);

/* 1 when path is in a journaled batch (*seq: which; may be NULL), 0 when not, < 0 on error. */
INGEST_API int ingest_journal_inflight(ingest_journal *j, const char *path, uint64_t *seq);

/*
 * Stability: 1 when path has had this size and mtime since at least
 * settle_ns before now_ns (or was marked renamed with them), 0 when not yet
 * (the record is made or restarted; *wait_ns, if not NULL, gets the time
 * left).  Times are wall-clock nanoseconds, so records survive restarts;
 * a now_ns before the record's time (the clock went back) restarts it.
 */
INGEST_API int ingest_journal_stable(ingest_journal *j, const char *path, uint64_t size, int64_t mtime_ns,
                                     int64_t now_ns, int64_t settle_ns, int64_t *wait_ns);
/* Path was renamed into the tree with this size and mtime: stable at once while they hold. */
INGEST_API int ingest_journal_mark_renamed(ingest_journal *j, const char *path, uint64_t size, int64_t mtime_ns,
                                           int64_t now_ns);
/*
 * Files passed over by a filter: remember (path, size, mtime, ctime) with
 * the reason (1..15) and rules, a fingerprint of the filter settings that
 * decided (never 0), so a rescan does not count the same version again.
 * ingest_journal_skipped returns the recorded reason when size, mtime,
 * ctime and rules still match, 0 otherwise: a file rewritten with its
 * mtime put back (ctime moved) and one under changed filter settings are
 * judged again.
 */
INGEST_API int ingest_journal_mark_skipped(ingest_journal *j, const char *path, uint64_t size, int64_t mtime_ns,
                                           int64_t ctime_ns, uint32_t rules, int reason, int64_t now_ns);
INGEST_API int ingest_journal_skipped(ingest_journal *j, const char *path, uint64_t size, int64_t mtime_ns,
                                      int64_t ctime_ns, uint32_t rules);
/* Drop path's stability record (0 or ENOTFOUND is not an error: returns 0). */
INGEST_API int ingest_journal_forget_seen(ingest_journal *j, const char *path);
/*
 * Drop the stability and filter records of files that no longer exist:
 * those whose manifest path gone(ud, path) answers 1 for (0 keeps a
 * record, < 0 stops with that code).  A file gone is not taken anyway; if
 * it comes back it settles (or is filtered) afresh.  Records of paths over
 * 440 bytes (hashed keys) are kept.  Committed; *removed (may be NULL)
 * gets how many went.  requires v0.1+ (unstable).
 */
INGEST_API int ingest_journal_prune_seen(ingest_journal *j, int (*gone)(void *ud, const char *path), void *ud,
                                         uint64_t *removed);
/* Stability and filter records held (0 on error). */
INGEST_API uint64_t ingest_journal_seen_count(ingest_journal *j);
/* Commit the stability records written so far (they are not worth a commit each). */
INGEST_API int ingest_journal_flush(ingest_journal *j);

#ifdef __cplusplus
}
#endif
#endif
