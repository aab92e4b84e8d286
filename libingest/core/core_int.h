/*
 * Inside the core side (include/ingest/core.h): the core's shared state,
 * and the reader thread each served link has.  The core side includes the
 * shared helpers and the transport seam, never the edge side.
 *
 * Memory: the core runs threads of its own, and every one of them
 * allocates through the context given at create (core->ctx): its
 * allocator must be thread-safe (the default is); nothing else of that
 * context is used off the caller's thread.
 */
#ifndef INGEST_CORE_INT_H
#define INGEST_CORE_INT_H

#include "../internal.h"
#include "../pathpolicy.h"
#include "ingest/codec.h"
#include "ingest/core.h"
#include "ingest/lander.h"
#include "ingest/link.h"
#include "ingest/wire.h"
#include "lander_hook.h"
#include "lander_syncs.h"

#include <pthread.h>
#include <stdatomic.h>

struct ingest_core {
    ingest_ctx *ctx; /* every allocation of the core and its links (a thread-safe allocator) */
    ingest_core_opts o;
    ingest_core_metrics m; /* all NULL when opts gave none */
    char *bronze, *layout;
    uint8_t dedup[INGEST_KEY_BYTES];
    /* The land lock: serialises the shared store and index (one LMDB
     * write transaction at a time, the store's read handle and deferred
     * writes) and the path versions with the renames they order.  The
     * landers take it themselves, around those short steps only
     * (ingest_lander_set_lock); ingest_core_lock gives it to other users
     * of the store (the receiver's index flush). */
    pthread_mutex_t land_lock;
    ingest__syncs syncs; /* the syncfs calls of every lander on the bronze filesystem (lander_syncs.h) */
    ingest__lander_hook_fn land_hook; /* tests: set on every lander (lander_hook.h), or NULL */
    void *land_hook_ud;
    atomic_int stopping;
    /* Devices with a link being served: one link per device at a time, so
     * a batch replayed on a new link never meets the old link still landing
     * or finishing it (same temporary names).  A new authenticated link of
     * a device replaces its old one (core_device_claim). */
    pthread_mutex_t dev_lock;
    pthread_cond_t dev_cond;
    struct active_dev {
        char id[INGEST_DEVICE_ID_MAX + 1];
        ingest_link *link; /* valid while the entry is (under dev_lock) */
    } *active;
    size_t nactive, capactive;
    /* Bytes queued by every link's reader (decoded chunks waiting to land),
     * bounded by opts.queue_budget: a reader with something queued waits
     * while the sum is over it (budget_lock, budget_cond). */
    pthread_mutex_t budget_lock;
    pthread_cond_t budget_cond;
    size_t queued;
    unsigned budget_waiters;
    atomic_ullong batches_landed, batches_failed, chunks_received, bytes_received;
    atomic_uint links;
};

/* A log line through opts.log, when level is on. */
void core_log(ingest_core *s, int level, const char *fmt, ...) INGEST__PRINTF(3, 4);
/* Monotonic seconds. */
double core_now(void);
/* pthread_create with a stack of ingest_core_thread_stack() (core.h says why), the thread named name
 * (at most 15 bytes, docs/architecture.md "Threads"): 0, or an errno value. */
int core_thread_start(pthread_t *t, void *(*fn)(void *), void *arg, const char *name);
/*
 * Claim device for link: when another link serves it, that link is shut
 * down (a new authenticated session replaces a stale one, e.g. after a
 * NAT dropped the old connection) and this waits, at most
 * INGEST_CORE_DEVICE_WAIT_S, for it to finish its step and let go.  0, or
 * -1 (stopping, or the old link did not end in time).
 */
int core_device_claim(ingest_core *s, const char *device, ingest_link *link);
void core_device_release(ingest_core *s, const char *device);

/* ---- the reader thread of a link (reader.c) ------------------------------ */

/*
 * Each link has two threads: the reader receives messages, and decodes and
 * verifies each CHUNK against the id the manifest gives it (the costly
 * part: decompression and the chunk ids); the serving thread lands what
 * the reader queues and sends the replies.  The queue is bounded by bytes,
 * so a fast device cannot make the core buffer more than
 * INGEST_CORE_READQ_MAX per link.
 */
typedef struct qitem {
    struct qitem *next;
    ingest_wire_msg m;  /* the message; for MANIFEST_PART and CHUNK the bytes are in data */
    int rc;             /* < 0: the receive failed (m unused) */
    int verified;       /* CHUNK: data holds the decoded chunk, verified against id */
    uint8_t id[INGEST_ID_BYTES]; /* CHUNK, verified: the id it was checked against */
    uint64_t gen;       /* CHUNK: the batch generation published when it arrived (0: none) */
    int last;           /* the reader's end marker: nothing follows */
    size_t enc_len;     /* CHUNK: encoded size as received */
    size_t len;         /* bytes in data */
    size_t cap;         /* bytes data has room for (an item is used again: core_readq_recycle) */
    char why[512];      /* the receive failure's detail ("" unless set) */
    uint8_t data[];
} qitem;

typedef struct readq {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    qitem *head, *tail;
    size_t bytes;
    int quit, ended;
    int push_waiting, pop_waiting; /* threads waiting for room, for an item (woken only then) */
    ingest_lander_batch *batch; /* the open batch, for the expected chunk ids */
    uint64_t gen;               /* its generation: counts publications, 0 while none is open */
    ingest_link *link;
    int idle_ms;
    ingest_codec *codec;        /* the reader's own decoder */
    ingest_ctx *ctx;            /* codec's */
    int pack;                   /* the pack feature was agreed */
    int runs;                   /* the runs feature was agreed (CHUNK_RUN) */
    /* CHUNK_GROUP scratch, held only while the reader handles one group (read_group): the decoded
     * bytes, and the expected ids and lengths */
    uint8_t *gbuf, *gids;
    uint32_t *glens;
    int decoding;               /* the reader is decoding with codec (dictionaries are added only when not) */
    int decoding_waiting;       /* threads waiting for decoding to end (dict_load; woken only then) */
    const uint8_t *key;
    ingest_metric *stage;       /* verify seconds */
    ingest_core *core;          /* its queue budget */
    /* Items the serving thread is done with, for the reader to fill again (core_readq_recycle). */
    qitem *spare;
    size_t nspare, spare_bytes;
} readq;

void *core_reader_main(void *arg);
qitem *core_readq_pop(readq *q);
/*
 * Done with it (NULL: nothing): kept for the reader's next items while few
 * are kept, else freed.  An item allocated by the reader and freed by the
 * serving thread, once per chunk, went back to the allocator's heap, which
 * gave its pages back to the system: the next item faulted fresh zeroed
 * pages in, and both threads took the allocator's lock for every chunk.
 */
void core_readq_recycle(readq *q, qitem *it);
/* Free the kept items (the reader has stopped). */
void core_readq_free_spares(readq *q);
/* Publish (or withdraw, with NULL) the open batch to the reader; returns the generation its chunks carry. */
uint64_t core_readq_set_batch(readq *q, ingest_lander_batch *b);

/* ---- delta chunks (delta.c) ---------------------------------------------- */

/* Predecessors shorter than this get no DELTA_BASE (too little to gain). */
#define INGEST_CORE_DELTA_MIN_BASE (4u * INGEST_WIRE_DELTA_BLOCK)
/* block hashes described per batch, at most (1/128 of the predecessor bytes: 8 MiB covers 1 GiB) */
#define INGEST_CORE_DELTA_HASH_BUDGET (8u * 1024u * 1024u)

/* The DELTA_BASEs of a link's open batch. */
typedef struct core_delta {
    ingest_ctx *ctx;  /* the allocator */
    uint8_t key[INGEST_WIRE_DELTA_KEY_BYTES]; /* the batch's, random */
    uint32_t *idx;    /* chunk indexes given a DELTA_BASE, ascending; high bit: no CHUNK_DELTA came yet */
    uint32_t *blen;   /* their predecessor's length */
    size_t n, icap, bcap;
    uint8_t *buf, *lit, *hashes; /* scratch: a predecessor or rebuilt chunk, literal blocks, block hashes */
    size_t bufcap, lcap, hcap;
    uint64_t sent, rebuilt, stale; /* this batch: DELTA_BASEs, delta chunks landed, delta chunks asked again */
} core_delta;

/*
 * Send a DELTA_BASE for each of the wanted chunks (ascending) whose file has
 * a landed previous version reaching its offset, with a new random key.
 * 0, or < 0 (why says what) when the link or memory failed.
 */
int core_delta_bases(core_delta *d, ingest_link *lk, ingest_lander_batch *b, const uint32_t *wants, size_t n,
                     char *why, size_t cap);
/*
 * A CHUNK_DELTA (received: its payload's size): rebuilt, verified and put
 * into b: 0; 1 when the rebuilt chunk is not the manifest's (its
 * predecessor changed): nothing landed, ask for it whole; < 0 with why
 * (INGEST_EPROTO not given a base or answered twice, INGEST_ECORRUPT a
 * malformed delta, or the lander's failure).
 */
int core_delta_land(core_delta *d, ingest_lander_batch *b, ingest_codec *codec, const uint8_t key[INGEST_KEY_BYTES],
                    const ingest_wire_chunk_delta *x, size_t received, char *why, size_t cap);
void core_delta_free(core_delta *d);

#endif
