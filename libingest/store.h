/*
 * Internal: the LMDB wrapper under every durable table (core chunk index,
 * edge have-cache, edge file table, batch journal).  One environment per
 * state directory, named databases ("tables"), at most one write
 * transaction open at a time, capped at txn_max_writes writes and committed
 * automatically past that cap, and short read transactions (MDB_NOTLS, one
 * reusable read handle).  Formats of the tables: docs/storage.md.
 *
 * Transactions.  Every put/del joins the open write transaction (opening
 * one when none is open).  A logical operation made of several writes that
 * must land together calls ingest__store_write_begin(st, n) first: it
 * commits the open transaction when fewer than n writes are left in it, so
 * the n writes that follow share one transaction.  A write that fails
 * aborts the open transaction (LMDB leaves it unusable): everything since
 * the last commit is lost, as in a crash.
 *
 * Reads see the open write transaction's writes.  Values are copied out
 * (get) or passed to a callback valid only during the call (iter).
 */
#ifndef INGEST_STORE_H
#define INGEST_STORE_H

#include "ingest/index.h"
#include "internal.h"

typedef unsigned ingest__dbi;

/* The lander's table of landed path -> last version (u64 LE); the index
 * opens it too, to defer its writes with its own and to catch it up. */
#define INGEST__VERSIONS_TABLE "lander_versions"

/* Key of the meta table's format record: u32 LE, INGEST_STORE_FORMAT. */
#define INGEST__META_FORMAT "format"

ingest_ctx *ingest__store_ctx(const ingest_store *st);
bool ingest__store_readonly(const ingest_store *st);
/* 1 when this open created the environment (it was absent or empty). */
bool ingest__store_created(const ingest_store *st);

/*
 * Open (creating unless read-only) the named table; INGEST_ECORRUPT if it is
 * absent from a read-only store.  Commits the open write transaction first
 * (a table handle is made in a transaction of its own): open tables once,
 * when a module opens, not in the middle of a batch.
 */
int ingest__store_db(ingest_store *st, const char *name, ingest__dbi *out);

/*
 * Turn commit syncing off (bulk work that is redone after a crash, such as
 * a rebuild) and back on; turning it on syncs what was committed.  No-op
 * for a store opened NOSYNC or read-only.
 */
int ingest__store_set_sync(ingest_store *st, bool sync);

/*
 * Make table db deferred when the store was opened with
 * opts.defer_max_writes > 0 (a no-op otherwise): its puts and deletions
 * stay in memory, where gets see them, and reach LMDB at
 * ingest_store_flush() (or at a commit that finds defer_max_writes keys
 * waiting), in key order, DEFER_TXN_WRITES writes per transaction.  A
 * crash loses them: only tables that can be refilled (the core's index,
 * from the manifests) may be deferred.  Count, iteration and drop of a
 * deferred table flush first.  Call before any write is pending.
 */
int ingest__store_defer(ingest_store *st, ingest__dbi db);

/* Make room for n writes in one transaction (see above). */
int ingest__store_write_begin(ingest_store *st, unsigned n);
int ingest__store_put(ingest_store *st, ingest__dbi db, const void *key, size_t klen, const void *val,
                      size_t vlen);
/* 0, or INGEST_ENOTFOUND when absent (the transaction stays usable). */
int ingest__store_del(ingest_store *st, ingest__dbi db, const void *key, size_t klen);
/* Empty a table. */
int ingest__store_drop(ingest_store *st, ingest__dbi db);
/* Discard the open write transaction. */
void ingest__store_abort(ingest_store *st);

/*
 * Copy the value of key into buf (at most cap bytes); *vlen gets the full
 * stored length, which may exceed cap.  0 or INGEST_ENOTFOUND.
 */
int ingest__store_get(ingest_store *st, ingest__dbi db, const void *key, size_t klen, void *buf, size_t cap,
                      size_t *vlen);
int ingest__store_count(ingest_store *st, ingest__dbi db, uint64_t *n);

/*
 * Iterate in key order (reverse: descending) from the first key >= from
 * (reverse: <= from); from NULL: from the start (end).  The callback
 * returns 0 to go on, > 0 to stop (iter returns 0), < 0 to fail (iter
 * returns it).  Inside the callback ingest__store_get and _count may be
 * called (same transaction); writes may not.
 */
typedef int (*ingest__store_iter_fn)(void *ud, const uint8_t *key, size_t klen, const uint8_t *val,
                                     size_t vlen);
int ingest__store_iter(ingest_store *st, ingest__dbi db, const void *from, size_t fromlen, bool reverse,
                       ingest__store_iter_fn fn, void *ud);

/* Big-endian u64 keys iterate in numeric order. */
static inline void ingest__put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}
static inline uint64_t ingest__get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

/*
 * A path as a store key (the edge's file table and journal).  LMDB bounds
 * key length (511 bytes in Debian's build); a longer path is keyed by its
 * first 400 bytes, a 0xff marker and the BLAKE2b-256 of the whole path,
 * which keeps directory neighbours adjacent.  key holds
 * INGEST__PATH_KEY_MAX bytes; returns the key's length.
 */
#define INGEST__PATH_KEY_MAX 512
size_t ingest__path_key(const char *path, uint8_t key[INGEST__PATH_KEY_MAX]);
/*
 * Delete the records of table db (keyed by ingest__path_key) whose path
 * gone(ud, path) says no longer exists (1; 0 keeps it, < 0 fails).  A
 * hashed key (a path over 440 bytes) cannot be turned back into its path:
 * kept.  Deletions are committed in rounds of up to 256; *removed (may be
 * NULL) gets how many went.  0 or < 0.
 */
int ingest__store_prune_paths(ingest_store *st, ingest__dbi db, int (*gone)(void *ud, const char *path), void *ud,
                              uint64_t *removed);
/*
 * A landed path as a key of the lander's version counters: the path itself
 * up to LMDB's bound (511 bytes; the keys written before long paths were
 * taken), the same hashed form as ingest__path_key past it.
 */
size_t ingest__landed_key(const char *path, uint8_t key[INGEST__PATH_KEY_MAX]);

#endif
