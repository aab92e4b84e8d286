/*
 * The core side of the protocol (docs/protocol.md): serve one device over
 * a link (link.h) at a time per device: receive its batches' manifests,
 * ask for the chunks the core does not hold, verify and land what comes
 * through the lander (lander.h), make each batch durable, then acknowledge
 * it.  What a receiver program adds around it is the transport's side:
 * listening, admission, the handshake, and its configuration, signals,
 * logs and metrics.
 *
 *   ingest_core_create(ctx, &opts, &core);
 *   per authenticated connection, in a thread of its own:
 *       ingest_core_serve(core, link, device_id);
 *   ingest_core_stop(core);            ends waits for a device's slot
 *   ingest_core_destroy(core);         after every serve returned
 *
 * Each served link uses two threads of the library's own: a reader that
 * receives, decodes and verifies chunks ahead of the landing (bounded by
 * INGEST_CORE_READQ_MAX bytes), and, with the pipeline feature, a
 * committer that makes batches durable and acknowledges them, in order,
 * while the next one arrives (at most two wait for it: docs/protocol.md,
 * "Pipelined batches").  The store, the chunk index and the landers share one
 * LMDB environment, guarded by the core's land lock (ingest_core_lock):
 * the landers take it themselves only around their short steps on the
 * store and index (lookups, versions with renames, index updates and
 * store commits; ingest_lander_set_lock), so devices parse, write, hash
 * and sync in parallel; waits on the link never hold it.
 *
 * THREAD SAFETY: ingest_core_serve may run in any number of threads at
 * once (one per link); ingest_core_lock, _stop and _stats from any thread.
 * Every allocation of the core, its links and their threads goes through
 * the context given to ingest_core_create (which must outlive the core):
 * with a custom allocator, that allocator must be thread-safe.
 * The opts' store, index and metrics are shared by them: use the store
 * and index elsewhere only under ingest_core_lock.
 */
#ifndef INGEST_CORE_H
#define INGEST_CORE_H

#include "ingest/common.h"
#include "ingest/catalog.h"
#include "ingest/codec.h"
#include "ingest/hash.h"
#include "ingest/index.h"
#include "ingest/kafka.h"
#include "ingest/link.h"
#include "ingest/metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes a link's reader holds ahead of the landing (8 chunks of the default
 * chunking.max; one larger chunk is always taken): the landing is the
 * slower stage, so a deeper queue only holds memory.  16 MiB before: a shipping device cost the receiver ~15 MiB. */
#define INGEST_CORE_READQ_MAX (2u * 1024u * 1024u)
#define INGEST_CORE_MANIFEST_MAX (64u * 1024u * 1024u) /* bytes of one batch manifest (~800k chunks) */
#define INGEST_CORE_DEVICE_WAIT_S 30 /* a device's new link waits this long for the one it replaces to end */
#define INGEST_CORE_QUEUE_BUDGET_DEFAULT (64u * 1024u * 1024u) /* bytes queued by all readers together */
#define INGEST_CORE_SESSION_DICTS_MAX 8 /* dictionaries one link may offer */
/*
 * Stack size of the threads the core starts (a link's reader and
 * committer), and the least a thread calling ingest_core_serve should have
 * (the receiver gives its connection threads ingest_core_thread_stack()).
 * The deepest use measured was under 64 KiB (bench/stack-depth.sh: a
 * receiver under `ulimit -s 64` lands what 1, 10 and 100 devices ship;
 * under 48 KiB it crashes; docs/architecture.md, "Connection model"):
 * 256 KiB is four times that.  The default of 8 MiB is address space only,
 * but 2 x 8 MiB per session is 16 GiB of it for 1,000 devices.
 */
#define INGEST_CORE_THREAD_STACK (256u * 1024u)

typedef struct ingest_core ingest_core;
typedef struct ingest_dictstore ingest_dictstore;

/*
 * Counters the core keeps up (every one may be NULL), labelled as
 * docs/operations.md lists: by device, except stage (verify, land,
 * commit), errors (protocol, chunk, commit, session) and dicts (held,
 * received, refused).
 */
typedef struct ingest_core_metrics {
    ingest_metric *conns, *landed, *failed, *files, *bytes, *chunks_new, *chunks_known, *rewanted, *wire, *written,
        *latency, *stage, *errors, *dicts;
    ingest_metric *files_refused; /* files refused one by one (FILE_REFUSED), by device */
} ingest_core_metrics;

#define INGEST_CORE_PEER_WAIT_DEFAULT_MS 2000

typedef struct ingest_core_opts {
    ingest_store *store;  /* of index; shared, used under the land lock */
    ingest_index *index;
    ingest_dictstore *dicts; /* dictionaries devices sent; NULL: none are kept (each session asks for and
                              * uses the ones offered to it, and drops them at its end) */
    ingest_catalog *catalog; /* each batch is added once durable (catalog.h); NULL: none */
    const char *bronze;   /* root of the landed tree */
    const char *layout;   /* lander layout template (lander.h); NULL: the default */
    const uint8_t *dedup_key; /* INGEST_KEY_BYTES */
    int direct_io;        /* lander direct I/O (lander.h) */
    int append_in_place;  /* lander appends growing files in place (ingest_lander_set_append) */
    int idle_timeout_ms;  /* a link silent this long is closed; 0: never */
    unsigned features;    /* INGEST_SESSION_FEATURE_* the core supports (what it offered in handshakes) */
    /* Bytes of decoded chunks all links' readers may hold ahead of the
     * landing together (0: INGEST_CORE_QUEUE_BUDGET_DEFAULT); past it a
     * reader waits (back-pressure on its device) until landing drains some,
     * but a reader with nothing queued always takes one message, so every
     * link moves. */
    size_t queue_budget;
    /* Chunks in flight (docs/landing.md): a chunk another device's batch is
     * receiving is not asked for again; the batch that needs it copies it
     * once that batch landed, waiting at its commit at most this long
     * (0: INGEST_CORE_PEER_WAIT_DEFAULT_MS; negative: no sharing).  Never
     * over a link whose device sends every chunk anyway (sends_unwanted). */
    int peer_wait_ms;
    /* Tests only: hold each "landed" ACK this long after its batch is durable,
     * so a test can kill the device inside the window where a batch has
     * landed and is not acknowledged yet (the receiver takes it from the
     * environment variable INGEST_TEST_ACK_DELAY_MS).  0: none. */
    int test_ack_delay_ms;
    /* Tests only: pause this long in each batch's commit once its files are
     * renamed into place and before its manifest is written (docs/landing.md,
     * "Replaced versions"), so a test can kill the receiver there (the
     * receiver takes it from INGEST_TEST_PLACED_PAUSE_MS).  0: none. */
    int test_placed_pause_ms;
    /* Log lines (device connected, batch landed, why a batch failed) at
     * most at log_level; the library's own detail goes to contexts at
     * lib_log_level.  log may be NULL. */
    ingest_log_fn log;
    void *log_userdata;
    int log_level, lib_log_level;
    const ingest_core_metrics *metrics; /* copied; NULL: none */
} ingest_core_opts;

typedef struct ingest_core_stats {
    uint64_t batches_landed, batches_failed, chunks_received, bytes_received;
    unsigned links; /* links being served now */
} ingest_core_stats;

INGEST_API int ingest_core_create(ingest_ctx *ctx, const ingest_core_opts *opts, ingest_core **out) INGEST_WUR;
/* After every ingest_core_serve returned.  NULL is accepted. */
INGEST_API void ingest_core_destroy(ingest_core *core);

/*
 * Serve the authenticated device device_id over link until the link ends,
 * the device misbehaves (told with an ERROR, then the link is shut down)
 * or the link stays silent past idle_timeout_ms.  A batch is acknowledged
 * only once durable; a batch cut off is simply sent again later (batch
 * ids make that a no-op when it had landed).  One link per device at a
 * time: an authenticated new link of a device replaces its old one (which
 * is shut down; its batch in flight is re-sent by the device).  Returns 0
 * when the device closed between batches (or was idle), or
 * the INGEST_E* code of why the link ended (logged).  The link is the
 * caller's to destroy afterwards.
 */
INGEST_API int ingest_core_serve(ingest_core *core, ingest_link *link, const char *device_id);

/* End waits of ingest_core_serve for a device's slot (a stop is under way). */
INGEST_API void ingest_core_stop(ingest_core *core);
INGEST_API void ingest_core_stats_get(ingest_core *core, ingest_core_stats *st);

/* The stack size the core gives its threads: INGEST_CORE_THREAD_STACK, or
 * the soft stack limit (RLIMIT_STACK, `ulimit -s`) when that is lower, so
 * the depth the core needs can be probed (bench/stack-depth.sh); never
 * below PTHREAD_STACK_MIN. */
INGEST_API size_t ingest_core_thread_stack(void);
/* The land lock: hold it to use the store or index outside the core (an index flush). */
INGEST_API void ingest_core_lock(ingest_core *core);
/* 0 when taken, else INGEST_EBUSY. */
INGEST_API int ingest_core_trylock(ingest_core *core);
INGEST_API void ingest_core_unlock(ingest_core *core);

/* ---- Kafka: the receivers' consumer group (docs/kafka.md) ---------------- */
/*
 * A member of the receivers' consumer group on kc.topic: each device's
 * records (in its partition's order) are opened with the keys of the
 * device and the core, and served by ingest_core_serve over a Kafka core
 * link (klink.h) per device, in a thread of its own while records come;
 * replies go to the reply topic.  A partition's offset is committed (by
 * hand, after the replies are flushed) up to the first record of the
 * oldest batch not yet landed or given up, so a redelivery after a crash
 * or a rebalance starts with that batch's beginning (landed batches come
 * again and are answered as already landed).  Records that cannot be
 * opened, from devices not authorized, or malformed, are dropped with a
 * log line and a count; they never stop a partition.
 *
 *   ingest_core_kafka_create(core, &opts, &k);
 *   ingest_core_kafka_run(k);        in a thread: until ingest_core_kafka_stop
 *   ingest_core_kafka_destroy(k);
 */
typedef struct ingest_core_kafka ingest_core_kafka;

typedef struct ingest_core_kafka_opts {
    ingest_kafka_conf kc;
    const ingest_secret_key *key; /* the core's (every receiver of the fleet holds it) */
    /* A device's public key: 0, or < 0 when it is not authorized (called from the consumer's thread). */
    int (*device_key)(void *ud, const char *device, uint8_t pk[INGEST_PUBKEY_BYTES]);
    void *ud;
    size_t queue_max;       /* bytes of records queued per device ahead of its serve (0: 8 MiB) */
    ingest_metric *records; /* records by outcome: ok, forged, unknown_device, malformed (may be NULL) */
    ingest_metric *pauses;  /* partitions paused, by the device whose serve was behind (may be NULL) */
    ingest_metric *replies; /* replies not delivered at first, by outcome: again (kept, published again), given_up
                             * (refused for good, or too many waiting) (may be NULL) */
    /* Tests only: "DEVICE:PATH", that device's serve ("*": every device's) takes no record while PATH exists
     * (ingest_klink_core_opts.test_pause_file; kept by reference).  NULL outside tests. */
    const char *test_serve_pause;
} ingest_core_kafka_opts;

typedef struct ingest_core_kafka_stats {
    uint64_t records, bytes;                  /* consumed */
    uint64_t forged, unknown_device, malformed; /* dropped */
    uint64_t batches_begun, batches_done;     /* BATCH_BEGIN records fed; batches over (landed, refused, given up) */
    uint64_t commits, rebalances;
    uint64_t pauses;                          /* partitions paused for a device whose serve was behind */
    uint64_t replies_again, replies_given_up; /* replies not delivered: published again; given up */
    unsigned sessions;                        /* devices served now */
} ingest_core_kafka_stats;

/* The core must outlive it.  INGEST_EINVAL names a bad property or missing option. */
INGEST_API int ingest_core_kafka_create(ingest_core *core, const ingest_core_kafka_opts *opts,
                                        ingest_core_kafka **out) INGEST_WUR;
/* Consume until ingest_core_kafka_stop: 0, or < 0 when the group could not be joined. */
INGEST_API int ingest_core_kafka_run(ingest_core_kafka *k);
/* From any thread (a signal handler must not): run ends its batches' serves, commits and returns. */
INGEST_API void ingest_core_kafka_stop(ingest_core_kafka *k);
/* From any thread (a signal handler must not): device_key's answers changed (authorized devices re-read);
 * the serves of devices revoked or given a new key end at the consumer's next pass (within ~0.1 s), their
 * queued records dropped (a batch fed in part is shipped again), not only when their next record comes. */
INGEST_API void ingest_core_kafka_recheck(ingest_core_kafka *k);
INGEST_API void ingest_core_kafka_destroy(ingest_core_kafka *k);
INGEST_API void ingest_core_kafka_stats_get(ingest_core_kafka *k, ingest_core_kafka_stats *st);

/* ---- the dictionary store ---------------------------------------------- */

/*
 * The trained zstd dictionaries devices sent (docs/compression.md,
 * "Dictionaries"), kept in {dir}/{hash}.zdict, where {hash} is the 64 hex
 * digits of the dictionary's unkeyed BLAKE2b-256 (ingest_dict_hash).
 * Content-addressed, so a file is checked against its own name.  In memory
 * the store holds the dictionaries it loaded or received, within the
 * bounds: INGEST_DICTSTORE_MAX dictionaries and INGEST_DICTSTORE_MAX_BYTES
 * in all.  A lookup holds its entry (codecs load the bytes by reference)
 * until ingest_dictstore_release; when a new one needs room, the least
 * recently looked up that none holds is removed, its file too (a device
 * offering it again sends it again).  Every function may be called from
 * any thread.
 */
#define INGEST_DICTSTORE_MAX 64
#define INGEST_DICTSTORE_MAX_BYTES (64u * 1024u * 1024u)
/* Of those added since the store was opened, one device keeps at most this many (ingest_dictstore_add). */
#define INGEST_DICTSTORE_PER_DEVICE 8
/* Device names longer than this are cut to it when an add records its device. */
#define INGEST_DICTSTORE_OWNER_MAX 128

/*
 * Open (creating dir, mode 0700) and load the stored dictionaries, the
 * most recently used first (a file's mtime, set at each lookup) as far as
 * the bounds go, each on its own: a file that is not one (wrong size, bytes
 * not matching its name, no dictionary id, malformed tables) takes no room,
 * and it or one past the bounds is logged by name through ctx and skipped,
 * never deleted.  Temporary files a crash
 * left are removed.  ctx must outlive the store.
 */
INGEST_API int ingest_dictstore_open(ingest_ctx *ctx, const char *dir, ingest_dictstore **out) INGEST_WUR;
INGEST_API void ingest_dictstore_close(ingest_dictstore *ds);
INGEST_API unsigned ingest_dictstore_count(ingest_dictstore *ds);
/* The lookups not released yet (ingest_dictstore_find, ingest_dictstore_release), all entries together. */
INGEST_API unsigned ingest_dictstore_held(ingest_dictstore *ds);
/* Keep gauge (NULL: none) at ingest_dictstore_held, set under the store's lock at every lookup and release. */
INGEST_API void ingest_dictstore_set_held_metric(ingest_dictstore *ds, ingest_metric *gauge);
/*
 * The bytes of the dictionary named hash, of exactly len bytes, or NULL;
 * found, they stay valid (the entry held) until ingest_dictstore_release.
 * device is the one whose session looks it up (NULL: none): a dictionary
 * another device added leaves that device's share (ingest_dictstore_add)
 * once a second device uses it.
 */
INGEST_API const uint8_t *ingest_dictstore_find(ingest_dictstore *ds, const char *device,
                                                const uint8_t hash[INGEST_DICT_HASH_BYTES], size_t len);
/* Let go of bytes a lookup returned (NULL: nothing). */
INGEST_API void ingest_dictstore_release(ingest_dictstore *ds, const uint8_t *bytes);
/*
 * Keep a verified dictionary (bytes checked against hash by the caller)
 * that device sent (NULL: none): written durably (temporary file, fsync,
 * rename, fsync of the directory), then a copy held, room made as above,
 * and only once the file is written; nothing is removed when no room can
 * be made.  A device keeps at most INGEST_DICTSTORE_PER_DEVICE of the
 * dictionaries it added since the store was opened: past that, its own
 * least recently used one that no session holds goes first (or, all held,
 * the add is refused), so that a device offering new dictionaries over and
 * over cannot push the fleet's out; one that another device sent or looked
 * up too is no longer in its share.  0 (also when held already), or -1 with
 * the reason in why: the store is full of dictionaries sessions hold, the
 * device's share is, or the write failed (or a file could not be removed:
 * then what was removed before that stays removed).
 */
INGEST_API int ingest_dictstore_add(ingest_dictstore *ds, const char *device, const uint8_t hash[INGEST_DICT_HASH_BYTES],
                                    const uint8_t *bytes, size_t len, char *why, size_t whycap);

#ifdef __cplusplus
}
#endif
#endif
