/*
 * The edge side of the protocol (docs/protocol.md): ship batches the
 * sender built (sender.h) to the core over a link (link.h).
 *
 *   ingest_edge_create(ctx, &opts, &e);
 *   per connection, after the transport's handshake:
 *       ingest_edge_attach(e, link);            features agreed: pipelining, pack, filters
 *       ingest_edge_landing_rules(e, &rules);   the receiver's layout and limits (landing feature)
 *       ingest_edge_offer_dict(e);              if opts named a dictionary
 *       per batch:
 *           ingest_edge_send_manifest(e, b);
 *           ingest_edge_finish_batch(e, b, t0);  WANTs served, COMMIT, ACK (or RECEIVED)
 *       ingest_edge_wait_pending(e);            the last pipelined batches' ACKs
 *       ingest_edge_detach(e);                  before the link goes
 *   ingest_edge_destroy(e);
 *
 * Wanted chunks are re-read, re-checked and compressed by an encoder
 * thread a few units ahead of the sending thread (with the pack feature,
 * small chunks travel in groups).  A file that changed since its batch was
 * built abandons the batch (the core is told; the caller ships the files
 * again later).  With the pipeline feature, a batch the core answered
 * RECEIVED is held as pending: its ACK is read while the next ones ship
 * (at most INGEST_EDGE_PENDING_MAX batches wait so).
 *
 * THREAD SAFETY: an edge, its link while attached and the batches it is
 * given belong to one thread at a time; the edge's encoder thread only
 * reads the batch being shipped, with the codec given in opts (which
 * nobody else may use meanwhile).  A batch's sender may have a context of
 * its own (another thread building the next batch meanwhile): the edge
 * reports a failed read of the batch with that context's message.
 */
#ifndef INGEST_EDGE_H
#define INGEST_EDGE_H

#include "ingest/codec.h"
#include "ingest/common.h"
#include "ingest/link.h"
#include "ingest/sender.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_EDGE_MANIFEST_PART_MAX (1024u * 1024u) /* bytes of manifest per MANIFEST_PART */
#define INGEST_EDGE_ACK_TIMEOUT_MS 600000              /* a WANT, RECEIVED or ACK takes at most this */
#define INGEST_EDGE_REPLY_TIMEOUT_MS 15000             /* an answer to a dictionary offer */
#define INGEST_EDGE_QUIET_WARN_MS 60000                /* an answer awaited this long is warned of (sliced links) */
#define INGEST_EDGE_FRAME_OVERHEAD 28 /* bytes a tcp frame adds: length prefix, header, AEAD tag */

/* What went over the link, and what came of it (cumulative). */
typedef struct ingest_edge_stats {
    uint64_t wire_out, wire_in;  /* bytes of messages, with INGEST_EDGE_FRAME_OVERHEAD each */
    uint64_t chunks_sent, chunk_bytes_raw, chunk_bytes_sent, groups_sent;
    uint64_t batches_acked, batches_failed, batches_abandoned;
    uint64_t files, bytes, chunks, chunks_dedup; /* of acknowledged batches (refused files included) */
    uint64_t files_refused; /* files of acknowledged batches the core refused alone (FILE_REFUSED) */
    /* files that vanished while their batch was being shipped, withdrawn from it (FILE_WITHDRAWN); the
     * rest of their batch landed.  Not among files_refused. */
    uint64_t files_withdrawn;
    /* wall seconds: waiting for the WANT after a manifest, sending chunks
     * (read, compress, encrypt, write), waiting for the ACK after COMMIT */
    double wait_want_s, send_s, wait_ack_s;
    /* chunks sent as CHUNK_DELTA (among chunks_sent; their map and literal bytes in chunk_bytes_sent) */
    uint64_t chunks_delta;
    /* batches the core answered INGEST_EBATCHID: it landed their id before with other data (the device's
     * batch numbers went back: its state restored from an older copy).  Among batches_abandoned (their
     * files go again); the caller must make its next batch ids from a new prefix. */
    uint64_t batches_id_taken;
    /* the INGEST_E* code of the last batch refused whole (among batches_failed; 0: none yet) */
    int last_refusal;
} ingest_edge_stats;

typedef struct ingest_edge_opts {
    ingest_codec *codec;   /* chunks are compressed with it (its filters are set on attach); borrowed */
    size_t chunk_cap;      /* bytes of an encoded chunk at most (ingest_sender_chunk_bound) */
    /* compression.dictionary, offered on attach (NULL: none); bytes borrowed */
    const uint8_t *dict;
    size_t dict_len;
    const char *dict_name; /* for the log line when it cannot be used */
    ingest_edge_stats *stats; /* kept up here (NULL: the edge's own, ingest_edge_stats_get) */
    int reply_timeout_ms;  /* a WANT, RECEIVED or ACK waited for at most this (0: INGEST_EDGE_ACK_TIMEOUT_MS) */
    /* Hooks, each optional; userdata is theirs. */
    void *userdata;
    /* Before a message of bytes is sent: wait what a throttle says; < 0 ends the batch (that code). */
    int (*before_send)(void *userdata, uint64_t bytes);
    /* After each unit of chunks sent, and after each ACK (progress, metrics, status). */
    void (*on_progress)(void *userdata);
    /* A batch was acknowledged as landed (or landed before): record it.
     * sent: chunks sent for it; t0: the caller's time of its building. */
    void (*on_acked)(void *userdata, ingest_sender_batch *b, uint32_t sent, double t0);
    /* 1 when the caller is stopping: shipping ends at the next chunk (INGEST_ECLOSED). */
    int (*stopping)(void *userdata);
    /* Log lines (batch refused, file changed, dictionary not used). */
    ingest_log_fn log;
    void *log_userdata;
    int log_level;
    /* Tests only (NULL otherwise): after a batch's manifest is sent, while this file exists, wait
     * (at most a minute) before reading the WANT; "{it}.paused" is made while waiting. */
    const char *test_pause_file;
    /* Encoder threads re-reading and compressing wanted chunks (compression.encoders);
     * 0: the online CPUs, 1 to 3; at most 4.  Added last: callers that zero the struct get 0. */
    unsigned encoders;
    /* batch.push_max: with INGEST_SESSION_FEATURE_PUSH agreed, files of at most this many bytes are
     * pushed (listed without chunk ids: docs/protocol.md "Pushed chunks"); 0: never.  Added last. */
    uint32_t push_max;
    /* With push_max: 1 when a path was never shipped by this device (the agent's file table; optional,
     * NULL: every small file is): only such files are pushed, a file shipped again keeps its ids.  Added last. */
    int (*fresh)(void *userdata, const char *path);
    /* On a link whose receive is sliced (Kafka's), an answer awaited this long is warned of once per wait,
     * with the link's word on what the silence may mean (0: INGEST_EDGE_QUIET_WARN_MS).  Added last. */
    int quiet_warn_ms;
} ingest_edge_opts;

/*
 * The reason a file withdrawn from its batch (FILE_WITHDRAWN, code
 * INGEST_ENOTFOUND) carries, in the batch manifest at the core and in the
 * FILE_REFUSED that answers it (ingest_sender_file_info.refused).
 */
#define INGEST_EDGE_WITHDRAWN_REASON INGEST_WIRE_WITHDRAWN_REASON /* wire.h */

/* 1 when fi is a file withdrawn from its batch (refused with INGEST_ENOTFOUND and that reason): it
 * never landed; 0 otherwise (landed, or refused by the core). */
INGEST_API int ingest_edge_file_withdrawn(const ingest_sender_file_info *fi);

typedef struct ingest_edge ingest_edge;

/* ctx (errors, every allocation, made on the caller's thread) must outlive the edge. */
INGEST_API int ingest_edge_create(ingest_ctx *ctx, const ingest_edge_opts *opts, ingest_edge **out) INGEST_WUR;
/* Ends the encoder thread; a pending batch is destroyed (not acknowledged: shipped again later).  NULL accepted. */
INGEST_API void ingest_edge_destroy(ingest_edge *e);

/* Use link (after its handshake) from now on; the agreed features decide pipelining and pack.  0 or < 0. */
INGEST_API int ingest_edge_attach(ingest_edge *e, ingest_link *link);
/* Stop using the link (a pending batch is dropped: it was not acknowledged). */
INGEST_API void ingest_edge_detach(ingest_edge *e);
/* Features of the attached link (0 when none). */
INGEST_API unsigned ingest_edge_features(const ingest_edge *e);

/*
 * After ingest_edge_attach, before anything else on the link: the
 * receiver's landing rules (LANDING, docs/protocol.md), for
 * ingest_sender_set_landing.  1 with *out (its layout checked against the
 * layout rule), 0 when the link did not agree the landing feature (older
 * receivers, Kafka), < 0 when the link failed or the receiver sent
 * something else (INGEST_EPROTO, logged).
 */
INGEST_API int ingest_edge_landing_rules(ingest_edge *e, ingest_wire_landing *out);

/*
 * Offer opts.dict (docs/protocol.md, "Dictionaries"), send it when asked,
 * and compress with it only when the core holds it; when it cannot be used
 * (no dict feature, refused) chunks are compressed without it and the
 * reason is logged once.  0, or < 0 when the link failed.
 */
INGEST_API int ingest_edge_offer_dict(ingest_edge *e);

/* Send BATCH_BEGIN, the manifest's parts and MANIFEST_END. */
INGEST_API int ingest_edge_send_manifest(ingest_edge *e, ingest_sender_batch *b);
/*
 * After ingest_edge_send_manifest: serve the WANTs, COMMIT, read the ACK.
 * Returns 0 acknowledged (on_acked ran), 1 abandoned (a file changed, or
 * the batch id was used before: ship its files again later), 2 refused by the core (logged), 3 received
 * (pipelined: b is now the edge's pending batch, destroyed by the edge once
 * its ACK came; the caller must not destroy it), < 0 the link failed (b is
 * the caller's; ship it again on a new link).  t0: when b began to be
 * built (for on_acked).
 */
INGEST_API int ingest_edge_finish_batch(ingest_edge *e, ingest_sender_batch *b, double t0);
/* Batches answered RECEIVED and awaiting their ACKs at most (pipeline feature; docs/protocol.md). */
#define INGEST_EDGE_PENDING_MAX 2
/* Read the pending batches' ACKs: 0 (none pending, or they came; a refusal is logged and counted in
 * batches_failed), or < 0. */
INGEST_API int ingest_edge_wait_pending(ingest_edge *e);
/* The oldest pending batch, or NULL. */
INGEST_API ingest_sender_batch *ingest_edge_pending(const ingest_edge *e);
/* Pending batch i (0 the oldest, up to INGEST_EDGE_PENDING_MAX - 1), or NULL. */
INGEST_API ingest_sender_batch *ingest_edge_pending_at(const ingest_edge *e, unsigned i);

INGEST_API void ingest_edge_stats_get(const ingest_edge *e, ingest_edge_stats *st);

#ifdef __cplusplus
}
#endif
#endif
