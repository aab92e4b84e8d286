/*
 * The core's landing engine: turns a device's batch (manifest + wanted
 * chunks) into files in the bronze tree, written once and sequentially,
 * durable before the batch may be acknowledged.  No networking here: the
 * receiver feeds it.  Details and on-disk effects: docs/landing.md.
 *
 * Use, for one batch:
 *
 *   ingest_lander_begin()        parse and validate the manifest; 1 = the
 *                                batch was landed before (ack at once);
 *                                or in two phases: ingest_lander_parse()
 *                                (no lock) then ingest_lander_lookup()
 *   ingest_lander_wants()        chunk indexes to request from the device
 *   ingest_lander_put_chunk()    for each chunk received (any order)
 *   ingest_lander_rewants()      after each put/advance: more chunks to
 *                                request (known chunks found stale)
 *   ingest_lander_commit()       0: durable, ack now; INGEST_EBUSY: chunks
 *                                are still awaited (see rewants)
 *   ingest_lander_batch_destroy()
 *
 * or, to make a batch durable while the next one is received, commit in
 * two phases: ingest_lander_commit_prepare() (the part that can still ask
 * the device for chunks) then ingest_lander_commit_finish() (the durable
 * part, which drops the caller's lock around its disk waits).
 *
 * A chunk index is the position of a chunk in the batch's chunk list: the
 * chunks of every file, files in manifest order, numbered from 0.
 *
 * Failures.  Any failure of put_chunk, put_verified, advance, commit,
 * commit_prepare or commit_finish other than INGEST_EBUSY (and the
 * INGEST_EINVAL of a call the batch's state does not allow) aborts the
 * batch: its temporary files are removed, nothing new is visible under a
 * final name (see docs/landing.md for the one exception, a failure once
 * commit has started renaming), and every later call on the batch fails
 * with INGEST_EINVAL.  The detail is in the context's errmsg.
 *
 * Untrusted input: the manifest and the chunks come from a device.  Every
 * count and length is bounded before allocation, every path is checked
 * (relative, no "." or ".." or empty component, no NUL, no escape from the
 * bronze root, including through a symlink already in the bronze tree),
 * and every chunk is verified against its id before its bytes are used.
 *
 * THREAD SAFETY: a lander and its batch are used by one thread at a time,
 * one batch at a time per lander.  The store and index given to a lander
 * may be shared by several landers (each created with its own ingest_ctx
 * and codec) when every use of them is serialised by one lock, in one of
 * two ways:
 *   - the lander's own lock (ingest_lander_set_lock, what the core does):
 *     the lander takes it itself, only around its work on the store and
 *     index; callers hold no lock, and landers of different devices write,
 *     copy, hash and sync their files in parallel.
 *   - the caller's lock: held around every call that can touch them
 *     (begin, lookup, put_chunk, put_verified, advance, commit,
 *     commit_prepare, and commit_finish, which is called with the lock held
 *     and releases it itself around its disk waits).
 * ingest_lander_parse and the other calls (wants, rewants, chunk_expect,
 * awaited, batch_name/_chunks, batch_stats, abort, batch_destroy,
 * lander_destroy) touch only the lander, the batch and its files, not the
 * store or index.
 *
 * Pipelining.  A PREPARED batch may be finished on another thread than
 * the one that landed it, while the owner lands the NEXT batch on a SECOND
 * lander (its own ingest_ctx) over the same store and index: finish
 * touches only its batch, its lander (and that lander's ctx, which nobody
 * else may use meanwhile) and, under the lock, the store and index.  The library keeps no other shared state (no statics beyond
 * one-time initialisation).  The lander never leaves a store write
 * transaction open when it returns or releases the lock: LMDB ties a write
 * transaction to its thread (see docs/landing.md).  Other users of the
 * store under the same lock must likewise commit their writes before
 * releasing it.
 */
#ifndef INGEST_LANDER_H
#define INGEST_LANDER_H

#include "ingest/common.h"
#include "ingest/codec.h"
#include "ingest/hash.h"
#include "ingest/index.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default layout of landed paths under the bronze root. */
#define INGEST_LANDER_LAYOUT_DEFAULT "{device}/{yyyy}/{mm}/{dd}/{path}"
/* Default bounds of one batch (see ingest_lander_set_limits). */
#define INGEST_LANDER_MAX_FILES_DEFAULT 1000000u
#define INGEST_LANDER_MAX_CHUNKS_DEFAULT (4u * 1024u * 1024u)
/* Hard ceilings of those bounds. */
#define INGEST_LANDER_MAX_FILES_LIMIT (16u * 1024u * 1024u)
#define INGEST_LANDER_MAX_CHUNKS_LIMIT (64u * 1024u * 1024u)

/*
 * A file whose manifest mode is a symlink (S_ISLNK) lands as a symlink: its
 * bytes (the target, 1..INGEST_LANDER_LINK_MAX of them, no NUL) are received
 * and verified like a file's, then at commit a symlink with that target
 * replaces the temporary file and is renamed over the final name.  The
 * target is data: the core never follows or resolves it, and never indexes
 * a symlink as a source of known chunks.  Other sizes refuse the file alone.
 */
#define INGEST_LANDER_LINK_MAX 4095

/* ingest_lander_begin: the batch was landed before; ack without landing. */
#define INGEST_LANDER_ALREADY 1

typedef struct ingest_lander_s ingest_lander;
typedef struct ingest_lander_batch_s ingest_lander_batch;

/*
 * The lock that serialises the store and index: unlock(ud) releases it,
 * lock(ud) takes it.  Both set.  Given to commit_finish (the caller's lock,
 * held around the calls) or to ingest_lander_set_lock (the lander's own).
 */
typedef struct ingest_lander_lock {
    void (*unlock)(void *ud);
    void (*lock)(void *ud);
    void *ud;
} ingest_lander_lock;

/*
 * Create a lander writing under bronze_root (an existing directory).
 *   st, idx   the core's store and its chunk index (idx opened on st with
 *             the same bronze_root); the lander keeps its per-path version
 *             counters in a table of st ("lander_versions").
 *   layout    landed path template, NULL for INGEST_LANDER_LAYOUT_DEFAULT.
 *             Placeholders: {device} {path} {yyyy} {mm} {dd} {batch}; the
 *             date is the file's mtime in UTC.  {path} is required; the
 *             template must be relative, without "." / ".." components.
 *   key       the fleet's dedup key (chunk ids and file hashes), copied.
 *   codec     decoder of received chunks (dictionaries registered by the
 *             caller); borrowed, must outlive the lander.
 * INGEST_EINVAL for a bad layout or a bronze_root that is not a directory.
 */
INGEST_API int ingest_lander_create(ingest_ctx *ctx, ingest_store *st, ingest_index *idx,
                                    const char *bronze_root, const char *layout,
                                    const uint8_t key[INGEST_KEY_BYTES], ingest_codec *codec,
                                    ingest_lander **out) INGEST_WUR;
/*
 * After a crash (kill, power cut) of a process that landed into
 * bronze_root: put back the landed versions its unfinished batches had
 * replaced (as ingest_lander_sweep_appends does), then remove what those
 * batches left, never following a symlink: temporary files (their names hold the tree's random tag, kept in
 * _manifests/.tmp-tag, which no device can know) and temporary manifests
 * (exactly _manifests/{device}/.{batch}.jsonl.tmp).  A file a device
 * landed is never removed, whatever its name.  Walks the whole tree with
 * heap memory only.  *removed and *failed (may be NULL) count files (and
 * unreadable directories); each failure is logged at warn level.  Run it
 * with no lander of the tree at work.  0, or < 0 when the walk could not
 * start (the root, or a malformed tag file).
 */
INGEST_API int ingest_lander_sweep(ingest_ctx *ctx, const char *bronze_root, uint64_t *removed,
                                   uint64_t *failed);
/*
 * Only the intents left unfinished (a crash, or an undo that failed).
 * First the replaced versions (_manifests/.replace, docs/landing.md
 * "Replaced versions"): where a batch that did not land put a new version
 * over a landed one, the landed one is put back (logged), and the backups
 * and intents go.  Then the appends in place (_manifests/.append): each
 * file is cut back to its landed length unless its batch landed, and its
 * intent goes.  Cheap (two directories); run it at every start with no
 * lander of the tree at work.  *cut counts files cut back, *left append
 * intents that stay (their cut-back failed, logged): while any stay,
 * appending in place must stay off.  0, or < 0 when the root or those
 * directories cannot be opened.
 */
INGEST_API int ingest_lander_sweep_appends(ingest_ctx *ctx, const char *bronze_root, uint64_t *cut,
                                           uint64_t *left);
/* Destroy a lander (its batch must be destroyed first); NULL accepted. */
INGEST_API void ingest_lander_destroy(ingest_lander *l);

/*
 * Let the lander take the lock of the store and index itself (lk copied;
 * NULL: back to the caller's lock), only around its short work on them:
 * the replay check and index lookups of ingest_lander_lookup, the lookups
 * and forgets of known chunks while landing, and in commit the versions
 * together with the renames, then the index, the batch mark and the store
 * commit.  Everything else (parsing, path checks, writing, copying and
 * hashing chunks, spilling, every fsync) runs unlocked, so landers of
 * different devices land in parallel.  With a lock set, call the lander
 * WITHOUT holding it (it is not recursive) and pass NULL to commit_finish;
 * the store write transaction is committed before each release.  Set it
 * before the first batch.
 */
INGEST_API int ingest_lander_set_lock(ingest_lander *l, const ingest_lander_lock *lk);

/*
 * Bounds of one batch: at most max_files files and max_chunks chunks
 * (0 keeps the current value).  Memory of a batch is about 49 bytes per
 * chunk plus the paths of its files, so the default 4M chunks is ~200 MB at
 * worst.  INGEST_EINVAL past the *_LIMIT ceilings.
 */
INGEST_API int ingest_lander_set_limits(ingest_lander *l, uint32_t max_files, uint32_t max_chunks);

/*
 * Write the temporary files of files of 4 KiB or more with O_DIRECT
 * (default off): chunks gather in a 256 KiB aligned buffer written whole,
 * the last block padded and the file truncated to its size, so the data
 * does not pass through the page cache.  Where the filesystem refuses
 * O_DIRECT (EINVAL) the file is written through the cache as usual.
 */
INGEST_API int ingest_lander_set_direct_io(ingest_lander *l, int on);

/*
 * Land a growing file in place (default off; the receiver's
 * append_in_place): a new version of a path whose first chunks are the
 * landed version's own, at the same offsets, and whose bytes up to the
 * landed version's size are the same, is appended to the landed file
 * instead of being written whole to a temporary file and renamed.  Before
 * the first byte is appended an intent naming the landed length is made
 * durable under _manifests/.append; ingest_lander_sweep() cuts a file back
 * to that length when its batch's manifest was never written (a crash),
 * and a failed batch cuts it back at once.  Readers see the file grow
 * (docs/landing.md, "Appending in place").
 */
INGEST_API int ingest_lander_set_append(ingest_lander *l, int on);

/*
 * Chunks in flight (docs/landing.md): with on, a chunk this lander's batch
 * needs that another lander of the same index is receiving right now (a
 * batch that looked it up earlier and has not landed yet) is not asked for;
 * it is copied once that batch has landed it.  At commit a batch whose
 * landing waits for such a chunk waits at most wait_ms for it, then asks
 * its device for every one still missing (INGEST_EBUSY and re-wants, as for
 * stale known chunks), so a stalled or failed peer costs one round trip,
 * never the batch.  Needs the lander's own lock (ingest_lander_set_lock;
 * INGEST_EINVAL without it); off by default.  A transport that sends every
 * chunk whatever was asked (Kafka) should leave it off.
 */
INGEST_API int ingest_lander_set_share_inflight(ingest_lander *l, int on, int wait_ms);

/*
 * Expand the layout for one file: device, batch, relpath (checked as a
 * manifest path) and mtime (ns since the epoch, UTC).  out gets a path
 * relative to the bronze root.  INGEST_EINVAL for a bad path (detail names
 * it), INGEST_ETOOBIG when it does not fit in cap.
 */
INGEST_API int ingest_lander_landed_path(ingest_lander *l, const char *device, const char *batch,
                                         const char *relpath, int64_t mtime_ns, char *out, size_t cap);

/*
 * begin in two phases, so that the costly part holds no lock.
 *
 * ingest_lander_parse: everything begin checks that needs no shared state:
 * the manifest parsed and bounded (as begin, below), the landed paths
 * made and checked against the bronze tree (distinct, no symlink or
 * non-directory on the way), duplicate chunks within the batch found.  It
 * touches neither the store nor the index: call it without any lock (with
 * the caller's lock model too).  Returns 0 with *out set to a PARSED batch,
 * on which only ingest_lander_lookup, _batch_name and _batch_destroy may
 * be called; the lander is busy with it until it is destroyed.  Codes as
 * ingest_lander_begin's, *out NULL.
 *
 * ingest_lander_lookup: the part that reads the index, under the lock of
 * the store and index (the caller's, or the lander's own, which it takes
 * itself): was (device, batch) landed before (INGEST_LANDER_ALREADY: a
 * replay of the same batch, ack it; INGEST_EBATCHID: the id was used for
 * other data: the device must ship it under a new id), and which chunks the index holds (the want list).  0: the
 * batch is landing (as after begin).  On any other return the batch can
 * only be destroyed.  A replay is recognised only once its manifest parses
 * under the current limits.
 */
INGEST_API int ingest_lander_parse(ingest_lander *l, const char *device, const void *manifest, size_t len,
                                   ingest_lander_batch **out) INGEST_WUR;
/*
 * As ingest_lander_parse, with flags.  INGEST_LANDER_PARSE_PUSH: the
 * manifest may list chunks without their id (pushed, [length]: the session
 * agreed INGEST_SESSION_FEATURE_PUSH; docs/protocol.md "Pushed chunks").
 * A pushed chunk is wanted without a lookup; its id is taken from its bytes
 * when it arrives (ingest_lander_put_chunk computes it; put_verified takes
 * the caller's), and a file with pushed chunks and no "hash" gets its hash
 * when it has landed.  A replay of a landed batch with pushed chunks is
 * recognised by the header's "digest" (ingest_manifest_digest_*); without
 * one it is INGEST_EBATCHID.
 */
#define INGEST_LANDER_PARSE_PUSH 0x1u
INGEST_API int ingest_lander_parse_ex(ingest_lander *l, const char *device, const void *manifest, size_t len,
                                      unsigned flags, ingest_lander_batch **out) INGEST_WUR;
INGEST_API int ingest_lander_lookup(ingest_lander_batch *b) INGEST_WUR;

/*
 * Start landing the batch of manifest (JSON-lines bytes, parsed while
 * begin runs; not kept) from device (the authenticated peer: the
 * manifest's header must name the same device).  Validates all of it
 * before anything is written: INGEST_ECORRUPT for a malformed manifest,
 * INGEST_EPROTO for a header naming another device, INGEST_ETOOBIG past the
 * limits, INGEST_EMISMATCH when the chunk lengths of a file do not add up
 * to its size, INGEST_EINVAL for a refused path (detail names the file).
 * Returns 0 with *out set, or INGEST_LANDER_ALREADY with *out NULL when
 * (device, batch) was landed before (a replay: ack it, nothing to do).
 * Equals ingest_lander_parse then ingest_lander_lookup (the batch
 * destroyed unless 0), with the caller's lock held around it all, or, with
 * the lander's own lock, taken only for the lookup.
 */
INGEST_API int ingest_lander_begin(ingest_lander *l, const char *device, const void *manifest, size_t len,
                                   ingest_lander_batch **out) INGEST_WUR;

/* The batch's name (from the manifest header) and chunk count. */
INGEST_API const char *ingest_lander_batch_name(const ingest_lander_batch *b);
INGEST_API uint32_t ingest_lander_batch_chunks(const ingest_lander_batch *b);

/*
 * The chunks to request, as ascending chunk indexes (valid until the batch
 * is destroyed): every chunk the index does not hold in a valid landed
 * file, each distinct id once (its first occurrence).
 */
INGEST_API void ingest_lander_wants(const ingest_lander_batch *b, const uint32_t **idx, size_t *n);

/*
 * Chunks to request in addition, found since the previous call: known
 * chunks whose landed copy turned out missing, changed or not matching its
 * id while landing (they are also dropped from the index).  *n is 0 when
 * there are none.  Valid until the next call on the batch.
 */
INGEST_API void ingest_lander_rewants(ingest_lander_batch *b, const uint32_t **idx, size_t *n);

/*
 * A received chunk: encoded (codec format), for chunk index i of the
 * batch.  It is decoded and its id recomputed: INGEST_EMISMATCH when it is
 * not the manifest's id for i; INGEST_EPROTO when i was not requested or
 * was received already.  Chunks may arrive in any order; those the landing
 * cannot use yet wait in an unnamed spill file, never in memory.  Lands
 * (writes) whatever can be landed after it.
 */
INGEST_API int ingest_lander_put_chunk(ingest_lander_batch *b, uint32_t i, const void *encoded, size_t len);

/*
 * For receivers that decode and verify chunks on another thread: the id
 * and length the manifest gives chunk i (INGEST_EINVAL past the end).  It
 * only reads what ingest_lander_begin fixed, so another thread may call it
 * while the owner works on the batch, as long as the batch is not
 * destroyed meanwhile.
 */
INGEST_API int ingest_lander_chunk_expect(const ingest_lander_batch *b, uint32_t i, uint8_t id[INGEST_ID_BYTES],
                                          uint32_t *len);
/*
 * 1 when chunk i was pushed (listed without an id: chunk_expect gives an
 * all-zero id for it, and the caller verifies nothing but computes its id,
 * ingest_chunk_id, to pass to put_verified), 0 otherwise or past the end.
 * Fixed at parse: safe from another thread as chunk_expect is.
 */
INGEST_API int ingest_lander_chunk_pushed(const ingest_lander_batch *b, uint32_t i);
/*
 * Delta chunks (docs/compression.md): the predecessor of chunk i, the
 * bytes at the chunk's offset in the version of its file landed before
 * this batch (the regular file at its landed path), at most the chunk's
 * length.  0 with *base_len (1..the chunk's length) and, when out is not
 * NULL, those bytes in out[0, *base_len) (cap: at least the chunk's
 * length, else INGEST_EINVAL); 1 when it has none (nothing landed there,
 * the landed file not longer than the offset, a symlink, a refused file,
 * a read that came short).  Cheapest with ascending i.  Touches only the
 * batch and the bronze tree, never through a symlink; nothing it finds is
 * trusted: what is rebuilt from it is verified like any received chunk.
 */
INGEST_API int ingest_lander_chunk_base(ingest_lander_batch *b, uint32_t i, void *out, size_t cap,
                                        uint32_t *base_len);
/*
 * As ingest_lander_put_chunk, for a chunk the caller has already decoded
 * and verified: raw[0,len) MUST hash (ingest_chunk_id with the fleet key)
 * to id, the id it was checked against (from ingest_lander_chunk_expect).
 * The lander does not hash it again, but refuses it (INGEST_EMISMATCH, the
 * batch aborted) when id is not the manifest's id for chunk i of this
 * batch: a chunk checked against another batch's manifest (one the device
 * sent before the WANT that asked for it) never lands.  received is the
 * encoded size, for the statistics.
 */
/* (A pushed chunk takes id as its own: the caller computed it from raw.) */
INGEST_API int ingest_lander_put_verified(ingest_lander_batch *b, uint32_t i, const void *raw, size_t len,
                                          size_t received, const uint8_t id[INGEST_ID_BYTES]);

/*
 * Land whatever can be landed now (copies of known chunks included).
 * Returns the number of chunks still awaited (requested, not received yet),
 * or < 0 on failure.  put_chunk and commit call it; a receiver may call it
 * right after begin to find stale known chunks early.
 */
INGEST_API int ingest_lander_advance(ingest_lander_batch *b);

/* Chunks still awaited (requested and not received). */
INGEST_API uint32_t ingest_lander_awaited(const ingest_lander_batch *b);

/*
 * Make the batch durable: finish landing, sync the files, rename them over
 * their final names, sync their directories, write and sync the batch
 * manifest {bronze}/_manifests/{device}/{batch}.jsonl, update the chunk
 * index, mark the batch landed and commit the store.  0: durable, ack.
 * INGEST_EBUSY: chunks are still awaited (ask for ingest_lander_rewants,
 * put them, commit again); the batch is intact.  Other codes: the batch
 * failed and is aborted.  Equals ingest_lander_commit_prepare() then
 * ingest_lander_commit_finish(b, NULL), and may be called on a PREPARED
 * batch.
 */
INGEST_API int ingest_lander_commit(ingest_lander_batch *b);

/*
 * Phase 1 of commit: everything that can still ask the device for data.
 * Lands what it can (known chunks are copied and checked, so stale ones
 * are found here), then returns INGEST_EBUSY, the batch intact, while
 * chunks are awaited: take ingest_lander_rewants, put them, prepare again
 * (exactly as commit does).  0: every file is complete and verified under
 * its temporary name and the batch is PREPARED: it needs no more chunks,
 * its sources and chunk buffers are released, and it can only be finished
 * or destroyed (put_chunk, put_verified and advance on it: INGEST_EINVAL,
 * the batch untouched; prepare again: 0).  Other codes: the batch failed
 * and is aborted.  Call it under the caller's lock (none with the
 * lander's own).
 */
INGEST_API int ingest_lander_commit_prepare(ingest_lander_batch *b);

/*
 * Phase 2 of commit, the durable part, on a PREPARED batch: sync the
 * files, take the versions and rename, write and sync the manifest, sync
 * the directories, update the index, mark, commit the store.  0: durable,
 * ack.  Other codes: the batch failed and is aborted (files renamed so far
 * stay; see docs/landing.md); INGEST_EINVAL without aborting for a batch
 * that is not PREPARED or a lock missing a callback.
 *
 * Called with the caller's lock held (lk NULL: there is none) and returns
 * with it held, whatever the outcome.  Around every wait for the disk (the
 * fsync of the files or the first syncfs; then the manifest and the
 * directory fsyncs or the second syncfs) it calls lk->unlock(lk->ud)
 * before and lk->lock(lk->ud) after, and while unlocked it touches only
 * the batch, its files and its lander's ctx.  Under the lock it does all
 * its work on the store and index: reading and storing the path versions
 * together with the renames (and, given a lock, committing them before it
 * unlocks), then the index, the batch mark and the store commit.  So
 * another lander may land (begin, put, prepare, finish) meanwhile.
 * Versions are taken before the batch is durable: a batch that fails later
 * leaves a gap in its paths' version numbers.  A file whose path another
 * batch landed again in between is left out of the index (it was
 * replaced on disk); the batch still lands.
 *
 * With the lander's own lock (ingest_lander_set_lock) pass lk NULL and
 * hold no lock: it takes its lock for the versions and renames, and again
 * for the index, the mark and the store commit; INGEST_EINVAL (the batch
 * untouched) for a non-NULL lk then.
 */
INGEST_API int ingest_lander_commit_finish(ingest_lander_batch *b, const ingest_lander_lock *lk);

/* Remove the batch's temporary files; later calls fail.  No-op once committed. */
INGEST_API void ingest_lander_abort(ingest_lander_batch *b);
/* Free a batch (aborting it unless committed); NULL accepted. */
INGEST_API void ingest_lander_batch_destroy(ingest_lander_batch *b);

/*
 * Files refused one by one (docs/landing.md, "Refused files"): a file
 * whose landed path is refused (too long with the layout, a name the
 * bronze tree cannot take) or whose place in the bronze tree is blocked (a
 * symlink or non-directory on the way, a directory or special file at its
 * final name) is found by parse and refused alone; the rest of the batch
 * lands.  Its chunks are not asked for unless a file that lands repeats
 * one (then they are received, checked and kept in a scratch copy for it),
 * its bytes never reach a final name, and the batch manifest records it
 * with "refused" and the reason.  Count, then the k-th (0 ..
 * count-1, ascending file index): its index in the manifest, an INGEST_E*
 * code and the reason (valid with the batch).  A caller whose peer cannot
 * be told (no per-file refusal in its protocol) fails the batch instead.
 */
INGEST_API uint32_t ingest_lander_refused_count(const ingest_lander_batch *b);
INGEST_API int ingest_lander_refused(const ingest_lander_batch *b, uint32_t k, uint32_t *file_index, int *code,
                                     const char **reason);

/*
 * The index in b of the file with this path at the device (a manifest
 * record's "path"), or -1 when b lists none.  A replay may hold fewer files
 * than the batch that landed under its id (the others changed since), in
 * another order: the refusals of the landed batch are told about the
 * replay's own indexes (ingest_lander_lookup's INGEST_LANDER_ALREADY).
 */
INGEST_API int64_t ingest_lander_file_of_path(const ingest_lander_batch *b, const char *path);

/*
 * The device withdrew file i of active batch b after the WANT (protocol
 * FILE_WITHDRAWN: the file vanished at the edge before its chunks could be
 * read).  It does not land: it is refused with code and reason (listed by
 * ingest_lander_refused, recorded so in the manifest), its temporary file
 * (and a directory made for it alone) goes, and the chunks only it needs
 * are no longer awaited, so the batch commits without them.  0;
 * INGEST_EINVAL no such file, or refused already; INGEST_EBUSY it cannot
 * go: it was landed already, or another file of the batch repeats one of
 * its chunks (copies it from this file); then the batch stays as it was.
 */
INGEST_API int ingest_lander_withdraw(ingest_lander_batch *b, uint32_t i, int code, const char *reason);

typedef struct ingest_lander_stats {
    uint64_t files;          /* files of the batch */
    uint64_t bytes;          /* their total size */
    uint64_t chunks;         /* chunks of the batch */
    uint64_t chunks_new;     /* received from the device */
    uint64_t chunks_known;   /* copied (from earlier landed files or within the batch) */
    uint64_t chunks_rewanted;/* known chunks found stale and requested again */
    uint64_t chunks_spilled; /* received before they could be written */
    uint64_t bytes_received; /* encoded bytes received */
    uint64_t bytes_written;  /* bytes written under the bronze root (files + manifest) */
    uint64_t copies;         /* ranges copied from landed files */
    uint64_t syncs;          /* fsync calls */
    uint64_t bytes_sparse;   /* bytes of all-zero chunks left as holes (not written, not in bytes_written) */
    uint64_t chunks_peer;    /* chunks another batch was receiving at lookup, copied once it landed them (not asked
                              * for; in chunks_known too) */
    uint64_t bytes_cloned;   /* bytes of unchanged runs shared with the landed file they came from (FICLONERANGE,
                              * reflink filesystems): not written, not in bytes_written */
    uint64_t files_helped;   /* small files made by the batch's small-file helper thread (docs/landing.md) */
    uint64_t dirs_remade;    /* directories found removed before the batch made its first file there, made again
                              * (docs/landing.md, "A directory removed under a batch") */
} ingest_lander_stats;

INGEST_API void ingest_lander_batch_stats(const ingest_lander_batch *b, ingest_lander_stats *st);

#ifdef __cplusplus
}
#endif
#endif
