/*
 * Kafka links (docs/kafka.md): the protocol's conversation (wire.h) carried
 * as sealed records (krecord.h) through a record bus, so that the edge's
 * shipping (edge.h) and the core's serving (core.h) run unchanged over
 * Kafka.  A bus is whatever publishes a record: the librdkafka producer
 * (kafka.h), or, in tests, a function that hands records to the other side.
 *
 * The edge link publishes every message a device sends (BATCH_BEGIN, the
 * manifest, chunks, BATCH_COMMIT) as records keyed by the device, and
 * answers the edge itself in place of the core:
 *   - the WANT after a manifest names the chunks the have-cache does not
 *     hold (opts.have): there is no round trip to the core;
 *   - RECEIVED (pipeline) once the producer's delivery reports confirmed
 *     every record of the batch (ingest_klink_delivered), never at enqueue;
 *   - the ACK when the core's reply came (ingest_klink_edge_reply): LANDED
 *     gives its status; NEEDED (the core lacks chunks the have-cache said it
 *     held) gives INGEST_ESTALE, after the chunks the core named are taken
 *     out of the have-cache (opts.unheld) and the batch's others put in
 *     (opts.held), so the batch shipped again sends exactly what is needed;
 *     batches committed before an answered one and never answered themselves
 *     (their records were lost) get INGEST_ESTALE too, first, as the core
 *     answers a device's batches in order.
 *
 * The core link (one per device) takes the device's opened records in
 * partition order (ingest_klink_core_feed) and gives the core the messages
 * they carry, filtered by what the core asked for: a chunk the core did
 * not want (it holds it) is dropped; when the batch's commit comes and a
 * wanted chunk never came, the batch is given up and the device is told
 * which chunks the core needs (NEEDED).  The core's ACK goes back as a
 * LANDED reply.  Records of a batch whose beginning this link never saw
 * (a redelivery that starts inside a batch already landed) are dropped.
 *
 * THREAD SAFETY: as link.h: sends from any thread, one receiving thread;
 * ingest_klink_delivered, _edge_reply and _core_feed from any thread.
 */
#ifndef INGEST_KLINK_H
#define INGEST_KLINK_H

#include "ingest/common.h"
#include "ingest/hash.h"
#include "ingest/krecord.h"
#include "ingest/link.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a link publishes its records. */
typedef struct ingest_kbus {
    /*
     * Publish rec[0, len) keyed by key (copied before it returns; it may
     * wait while the bus is full).  token comes back with the record's
     * delivery report (ingest_klink_delivered).  0, or an INGEST_E* code
     * with the reason in why (the link fails).
     */
    int (*produce)(void *ud, const char *key, const uint8_t *rec, size_t len, uint64_t token, char *why,
                   size_t whycap);
    void *ud;
} ingest_kbus;

/* Counters of a link (cumulative). */
typedef struct ingest_klink_stats {
    uint64_t records, record_bytes;     /* published */
    uint64_t replies, replies_ignored;  /* edge: replies taken; not for a batch of this link */
    uint64_t chunks_dropped;            /* core: chunk messages the core did not want */
    uint64_t orphans;                   /* core: records of a batch whose beginning was not seen */
    uint64_t batches_needed;            /* NEEDED replies: sent (core), received (edge) */
    uint64_t batches_lost;              /* edge: batches never answered, found lost by a later answer */
} ingest_klink_stats;

typedef struct ingest_klink_edge_opts {
    const char *device;
    const ingest_krec_keys *keys; /* copied */
    ingest_kbus bus;
    unsigned features;     /* INGEST_SESSION_FEATURE_PIPELINE or 0 (PACK and SHUFFLE2 are always on over Kafka) */
    size_t record_max;     /* bytes of a sealed record (0: INGEST_KREC_MAX) */
    /* The have-cache: 1 when the core is known to hold the chunk (NULL: never). */
    int (*have)(void *ud, const uint8_t id[INGEST_ID_BYTES]);
    /* A NEEDED reply: the core holds id / does not hold id (each may be NULL). */
    void (*held)(void *ud, const uint8_t id[INGEST_ID_BYTES]);
    void (*unheld)(void *ud, const uint8_t id[INGEST_ID_BYTES]);
    void *ud;
} ingest_klink_edge_opts;

INGEST_API int ingest_klink_edge_create(ingest_ctx *ctx, const ingest_klink_edge_opts *o, ingest_link **out) INGEST_WUR;
/*
 * The delivery report of a record the edge link published with token: ok,
 * or not (why: the producer's reason; the link then fails, and the batch is
 * shipped again on a new link).
 */
INGEST_API void ingest_klink_delivered(ingest_link *l, uint64_t token, int ok, const char *why);
/*
 * A record from the reply topic: 0 taken, 1 not for this link (another
 * device, or a batch this link has no longer: a late duplicate), or < 0
 * when it cannot be opened or parsed (the detail names why; it is
 * dropped).
 */
INGEST_API int ingest_klink_edge_reply(ingest_link *l, const uint8_t *rec, size_t len);

typedef struct ingest_klink_core_opts {
    const char *device;
    const ingest_krec_keys *keys; /* copied; replies are sealed with keys->seal */
    ingest_kbus bus;              /* the reply topic */
    size_t queue_max;             /* bytes of records queued ahead of the core (0: 8 MiB) */
    /* A batch whose BATCH_BEGIN record was fed with begin_token is over:
     * landed, refused, given up (a reply was published), or cut off (may be NULL). */
    void (*batch_done)(void *ud, uint64_t begin_token);
    /* Before a NEEDED reply: let the core learn what its peers landed (may be NULL). */
    void (*before_needed)(void *ud);
    void *ud;
    /* Tests only (tests/integration/test_kafka_stall.sh): while this file exists, the serve takes no
     * queued record, as a device whose landing is slow.  NULL outside tests. */
    const char *test_pause_file;
} ingest_klink_core_opts;

INGEST_API int ingest_klink_core_create(ingest_ctx *ctx, const ingest_klink_core_opts *o, ingest_link **out) INGEST_WUR;
/*
 * Queue a device-to-core record, opened (h, and its decoded body b of type
 * MANIFEST, CHUNK or END; copied), with the token that ingest_klink_core_opts.batch_done
 * gives back when it began a batch.  Waits while queue_max bytes are
 * queued.  0, or INGEST_ECLOSED when the link was shut down or retired
 * (ingest_klink_core_rearm): make a new one.
 */
INGEST_API int ingest_klink_core_feed(ingest_link *l, const ingest_krec_hdr *h, const ingest_krec_body *b,
                                      uint64_t token);
/*
 * Like ingest_klink_core_feed, but never waits: INGEST_EBUSY (nothing
 * queued) when queue_max bytes would be passed.  A consumer that reads
 * many devices offers, and when a device's queue is full it stops reading
 * that device's partition rather than everyone's (ingest_klink_core_room).
 */
INGEST_API int ingest_klink_core_offer(ingest_link *l, const ingest_krec_hdr *h, const ingest_krec_body *b,
                                       uint64_t token);
/*
 * 1 when a record of len bytes offered now would be taken and at most
 * half the queue is used (so a paused reader resumes for more than one
 * record, and a record near the queue's size still goes in before the
 * queue is empty), or when the link is shut down or retired (an offer
 * fails at once then); else 0.
 */
INGEST_API int ingest_klink_core_room(ingest_link *l, size_t len);
/*
 * After ingest_core_serve returned on l: 1 when records wait (the link is
 * made ready for the next serve; a batch that was cut off is done), 0 when
 * none do (the link is retired: feeds fail from now on).
 */
INGEST_API int ingest_klink_core_rearm(ingest_link *l);
/* End the link for good (its serve returns; rearm says 0): what its owner calls, where a serve's own
 * end only shuts it down until the next rearm. */
INGEST_API void ingest_klink_core_stop(ingest_link *l);
/* End the link for good and drop the records queued on it (a device revoked or given a new key): a
 * batch fed in part is over (batch_done), the device ships it again. */
INGEST_API void ingest_klink_core_drop(ingest_link *l);

INGEST_API void ingest_klink_stats_get(ingest_link *l, ingest_klink_stats *st);

#ifdef __cplusplus
}
#endif
#endif
