/*
 * Shipping batches over a link (include/ingest/edge.h): the protocol's
 * edge side.  BATCH_BEGIN, the manifest (compressed with the pack
 * feature) and MANIFEST_END; then the core's WANTs are served, chunk by
 * chunk or in groups of small chunks, by an encoder thread that re-reads
 * and compresses a few units ahead of the sending thread; BATCH_COMMIT;
 * and the ACK, or with the pipeline feature RECEIVED now and the ACK while
 * the next batch ships.
 *
 * The edge side includes the shared helpers and the transport seam, never
 * the core side.  It runs a thread of its own; every allocation is made on
 * the caller's thread, through the context given at create.
 */
#include "../internal.h"
#include "../pathpolicy.h"
#include "ingest/edge.h"
#include "ingest/session.h"
#include "sender_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct encoder encoder;

/* Bytes of the block map of the largest CHUNK_DELTA. */
#define DELTA_MAP_MAX (INGEST_WIRE_DELTA_MAX_BLOCKS / 8u)

struct ingest_edge {
    ingest_edge_opts o;
    ingest_ctx *ctx;
    ingest_edge_stats own, *st;
    ingest_link *link;
    int reply_ms;
    uint32_t dict_id;
    uint8_t dict_hash[INGEST_DICT_HASH_BYTES];
    int dict_said; /* why it could not be used was logged (once) */
    int pipeline, pack;
    int runs; /* the runs feature: WANTs may come as runs, consecutive groups go as CHUNK_RUN */
    uint32_t *wexp; /* a WANT of runs, expanded to its indexes (at most the batch's chunks) */
    size_t wexp_cap;
    ingest_codec *mcodec; /* the manifest's (pack) */
    uint8_t *mbuf;
    /* batches answered RECEIVED, their ACKs to come, oldest first (at most INGEST_EDGE_PENDING_MAX) */
    struct {
        ingest_sender_batch *b;
        uint32_t sent;
        double t0;
    } pending[INGEST_EDGE_PENDING_MAX];
    unsigned npending;
    unsigned pending_refused;
    ingest_sender_batch *cur; /* the batch being shipped (finish_batch), for its FILE_REFUSED */
    int landing_taken;        /* this link's LANDING was read */
    ingest_wire_landing landing;
    unsigned withdrawn;       /* files of cur withdrawn so far (FILE_WITHDRAWN) */
    encoder *enc;
    uint8_t *chunkbuf;
    uint8_t *dmap; /* send_each's block map of a CHUNK_DELTA */
    /*
     * The DELTA_BASEs of the batch being shipped (delta feature), for its
     * first WANTs only (a chunk asked again is sent whole): chunk indexes
     * ascending, their predecessor's length and where its block hashes
     * are in dpool; dkey the batch's key.
     */
    struct delta_base {
        uint32_t idx, base_len;
        size_t at;
    } *dbase;
    size_t ndbase, dbase_cap;
    int dbase_closed; /* the batch's first WANTs were served: a DELTA_BASE now is a protocol error */
    uint8_t *dpool;
    size_t dpool_len, dpool_cap;
    uint8_t dkey[INGEST_WIRE_DELTA_KEY_BYTES];
};

static void edge_log(ingest_edge *a, int level, const char *fmt, ...) INGEST__PRINTF(3, 4);
static void edge_log(ingest_edge *a, int level, const char *fmt, ...)
{
    if (a->o.log == NULL || level > a->o.log_level)
        return;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    a->o.log(a->o.log_userdata, level, msg);
}

/* Text a peer or a file name controls, escaped for a log line (4 buffers used in turn, per thread). */
static const char *edge_esc(const char *text)
{
    static _Thread_local char slot[4][2048];
    static _Thread_local unsigned next;
    return ingest_escape(slot[next++ % 4], sizeof(slot[0]), text);
}

static double edge_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int edge_stopping(ingest_edge *a)
{
    return a->o.stopping != NULL && a->o.stopping(a->o.userdata);
}

static int edge_before_send(ingest_edge *a, uint64_t bytes)
{
    return a->o.before_send != NULL ? a->o.before_send(a->o.userdata, bytes) : 0;
}

static void edge_progress(ingest_edge *a)
{
    if (a->o.on_progress != NULL)
        a->o.on_progress(a->o.userdata);
}

static void encoder_stop(ingest_edge *a);
static void drop_pending(ingest_edge *a);

int ingest_edge_create(ingest_ctx *ctx, const ingest_edge_opts *opts, ingest_edge **out)
{
    *out = NULL;
    if (opts == NULL || opts->codec == NULL || opts->chunk_cap == 0)
        return ingest__fail(ctx, INGEST_EINVAL, "edge: a codec and a chunk bound are required");
    if (opts->dict != NULL && (opts->dict_len == 0 || opts->dict_len > INGEST_WIRE_DICT_MAX))
        return ingest__fail(ctx, INGEST_EINVAL, "edge: a dictionary of 1..%u bytes", INGEST_WIRE_DICT_MAX);
    ingest_edge *a = ingest__calloc(ctx, 1, sizeof(*a));
    if (a == NULL || (a->chunkbuf = ingest__malloc(ctx, opts->chunk_cap)) == NULL ||
        (a->dmap = ingest__malloc(ctx, DELTA_MAP_MAX)) == NULL) {
        if (a != NULL)
            ingest__free(ctx, a->chunkbuf);
        ingest__free(ctx, a);
        return ingest__fail(ctx, INGEST_ENOMEM, "edge: out of memory");
    }
    a->o = *opts;
    a->ctx = ctx;
    a->st = opts->stats != NULL ? opts->stats : &a->own;
    a->reply_ms = opts->reply_timeout_ms > 0 ? opts->reply_timeout_ms : (int)INGEST_EDGE_ACK_TIMEOUT_MS;
    if (opts->dict != NULL) {
        a->dict_id = ingest_dict_id(opts->dict, opts->dict_len);
        ingest_dict_hash(opts->dict, opts->dict_len, a->dict_hash);
    }
    *out = a;
    return 0;
}

void ingest_edge_destroy(ingest_edge *a)
{
    if (a == NULL)
        return;
    encoder_stop(a);
    drop_pending(a);
    ingest_codec_destroy(a->mcodec);
    ingest__free(a->ctx, a->mbuf);
    ingest__free(a->ctx, a->chunkbuf);
    ingest__free(a->ctx, a->wexp);
    ingest__free(a->ctx, a->dmap);
    ingest__free(a->ctx, a->dbase);
    ingest__free(a->ctx, a->dpool);
    ingest__free(a->ctx, a);
}

int ingest_edge_attach(ingest_edge *a, ingest_link *link)
{
    drop_pending(a); /* a batch received on an earlier link was not acknowledged: it is shipped again */
    if (a->o.chunk_cap > link->peer_max_payload || link->peer_max_payload - a->o.chunk_cap < 4)
        /* a chunk goes whole in one CHUNK (its index, then the chunk): one that does not fit would fail its
         * batch every time it is shipped */
        return ingest__fail(a->ctx, INGEST_EINVAL,
                            "chunks of up to %zu bytes encoded (the chunker's largest chunk, chunking.max) do not "
                            "fit the %zu bytes the other end takes per message",
                            a->o.chunk_cap, link->peer_max_payload);
    a->link = link;
    a->landing_taken = 0;
    a->pipeline = (link->features & INGEST_SESSION_FEATURE_PIPELINE) != 0;
    a->pack = (link->features & INGEST_SESSION_FEATURE_PACK) != 0;
    a->runs = a->pack && (link->features & INGEST_SESSION_FEATURE_RUNS) != 0;
    if (a->pack && a->mcodec == NULL) {
        /* The manifest's own codec and buffer.  Level 1: on the bench profiles' manifests (mostly hex
         * ids and repeated keys) it came out smaller than level 3 and costs less CPU (docs/compression.md). */
        if (ingest_codec_create(a->ctx, 1, &a->mcodec) < 0 ||
            (a->mbuf = ingest__malloc(a->ctx, ingest_codec_bound(INGEST_EDGE_MANIFEST_PART_MAX))) == NULL)
            return ingest__fail(a->ctx, INGEST_ENOMEM, "out of memory for the manifest's compression");
    }
    /* no chunk is being encoded while attaching: batches restart on a new link */
    const unsigned filters = (link->features & INGEST_SESSION_FEATURE_SHUFFLE2) ? INGEST_CODEC_FILTER_SHUFFLE2 : 0u;
    return ingest_codec_set_filters(a->o.codec, filters);
}

void ingest_edge_detach(ingest_edge *a)
{
    drop_pending(a);
    a->link = NULL;
}

unsigned ingest_edge_features(const ingest_edge *a)
{
    return a->link != NULL ? a->link->features : 0u;
}

ingest_sender_batch *ingest_edge_pending(const ingest_edge *a)
{
    return ingest_edge_pending_at(a, 0);
}

ingest_sender_batch *ingest_edge_pending_at(const ingest_edge *a, unsigned i)
{
    return i < a->npending ? a->pending[i].b : NULL;
}

void ingest_edge_stats_get(const ingest_edge *a, ingest_edge_stats *st)
{
    *st = *a->st;
}

static int send_msg(ingest_edge *a, ingest_wire_msg *m, size_t extra)
{
    const int rc = ingest_link_send(a->link, m);
    if (rc < 0) {
        /* (a stop may have shut the connection down under the send: not a failure) */
        edge_log(a, edge_stopping(a) ? INGEST_LOG_INFO : INGEST_LOG_ERROR, "send %s: %s: %s",
                 ingest_wire_type_name(m->type), ingest_strerror(rc), ingest_link_send_errmsg(a->link));
        return rc;
    }
    a->st->wire_out += ingest_wire_encoded_size(m) + INGEST_EDGE_FRAME_OVERHEAD + extra;
    return 0;
}

/* The message of the last failed call on batch b (its sender's context: not necessarily the edge's). */
static const char *batch_errmsg(ingest_sender_batch *b)
{
    return ingest_ctx_errmsg(ingest__sender_batch_reader(b)->ctx);
}

/*
 * FILE_REFUSED: the core does not land one file of the batch being shipped
 * or of a pending one (it comes before that batch's ACK); it is kept with
 * the batch, and batch_acked reports it.
 */
static int take_refusal(ingest_edge *a, const ingest_wire_file_refused *r)
{
    ingest_sender_batch *b = NULL;
    for (unsigned i = 0; i < a->npending && b == NULL; i++)
        if (strcmp(ingest_sender_batch_id(a->pending[i].b), r->batch_id) == 0)
            b = a->pending[i].b;
    if (b == NULL && a->cur != NULL && strcmp(ingest_sender_batch_id(a->cur), r->batch_id) == 0)
        b = a->cur;
    if (!(a->link->features & INGEST_SESSION_FEATURE_REFUSE) || b == NULL) {
        edge_log(a, INGEST_LOG_ERROR, "unexpected FILE_REFUSED for batch %s%s", r->batch_id,
                 (a->link->features & INGEST_SESSION_FEATURE_REFUSE) ? ", which is not open"
                                                                    : " (per-file refusal was not agreed)");
        return INGEST_EPROTO;
    }
    ingest_sender_file_info fi;
    if (ingest_sender_batch_file(b, r->file_index, &fi) == 0 && ingest_edge_file_withdrawn(&fi))
        return 0; /* the answer to our FILE_WITHDRAWN: recorded when it was sent */
    const int rc = ingest_sender_batch_refuse(b, r->file_index, r->code, r->message);
    if (rc < 0)
        edge_log(a, INGEST_LOG_ERROR, "FILE_REFUSED for batch %s: %s", r->batch_id, batch_errmsg(b));
    return rc == INGEST_ENOMEM ? rc : rc < 0 ? INGEST_EPROTO : 0;
}

/*
 * Wait up to timeout_ms for a message, in slices of EDGE_STOP_SLICE_MS when the owner can ask the edge to
 * stop and the link's receive can time out without cutting a message (Kafka's: recv_sliceable), so that a
 * stop (SIGTERM) is noticed while the core is silent: INGEST_ECLOSED EDGE_STOP_GRACE_S after it, with
 * nothing lost (the batch stays in the owner's journal).  A TCP link waits in one piece: the agent shuts
 * its socket down as long after a stop.
 */
#define EDGE_STOP_SLICE_MS 250
#define EDGE_STOP_GRACE_S 3.0
static int link_recv(ingest_edge *a, ingest_wire_msg *m, int timeout_ms)
{
    if (a->o.stopping == NULL || !a->link->recv_sliceable || timeout_ms <= EDGE_STOP_SLICE_MS)
        return ingest_link_recv(a->link, m, timeout_ms);
    const double start = edge_now(), end = start + timeout_ms / 1e3;
    const double warn_s = (a->o.quiet_warn_ms > 0 ? a->o.quiet_warn_ms : INGEST_EDGE_QUIET_WARN_MS) / 1e3;
    double stop_seen = 0;
    bool warned = false;
    for (;;) {
        const double left = (end - edge_now()) * 1e3;
        const int slice = left > EDGE_STOP_SLICE_MS ? EDGE_STOP_SLICE_MS : left > 1 ? (int)left : 1;
        const int rc = ingest_link_recv(a->link, m, slice);
        if (rc != INGEST_ETIMEDOUT || slice < EDGE_STOP_SLICE_MS) /* (the last slice: the timeout stands) */
            return rc;
        if (!warned && edge_now() - start >= warn_s && warn_s * 1e3 < timeout_ms) {
            /* a silent core is told apart from a slow one only by the timeout: say early what it may be */
            warned = true;
            edge_log(a, INGEST_LOG_WARN, "no answer from the core for %.0f s%s%s; still waiting, %.0f s at most in all",
                     edge_now() - start, a->link->silence[0] ? ": " : "", a->link->silence, timeout_ms / 1e3);
        }
        /* a stop gives the core EDGE_STOP_GRACE_S to answer (an ACK of a batch it landed is worth having) */
        if (edge_stopping(a) && stop_seen == 0)
            stop_seen = edge_now();
        if (stop_seen > 0 && edge_now() - stop_seen >= EDGE_STOP_GRACE_S)
            return INGEST_ECLOSED;
    }
}

static int recv_msg(ingest_edge *a, ingest_wire_msg *m, int timeout_ms)
{
    int rc;
    for (;;) {
        rc = link_recv(a, m, timeout_ms);
        if (rc < 0)
            break;
        a->st->wire_in += ingest_wire_encoded_size(m) + INGEST_EDGE_FRAME_OVERHEAD;
        if (m->type == INGEST_MSG_LANDING && (a->link->features & INGEST_SESSION_FEATURE_LANDING) && !a->landing_taken) {
            /* an embedder that did not ask for the rules (ingest_edge_landing_rules) */
            a->landing = m->u.landing;
            a->landing_taken = 1;
            continue;
        }
        if (m->type != INGEST_MSG_FILE_REFUSED)
            break;
        if ((rc = take_refusal(a, &m->u.refused)) < 0)
            return rc;
    }
    if (rc < 0) {
        if (edge_stopping(a)) /* (the wait given up, or the owner shut the connection down) */
            edge_log(a, INGEST_LOG_INFO, "stopping: no longer waiting for the core's answer (the batch is shipped "
                     "again)");
        else if (rc == INGEST_ETIMEDOUT)
            edge_log(a, INGEST_LOG_ERROR, "receive: no answer from the core within %d ms", timeout_ms);
        else
            edge_log(a, INGEST_LOG_ERROR, "receive: %s: %s", ingest_strerror(rc), ingest_link_recv_errmsg(a->link));
        return rc;
    }
    if (m->type == INGEST_MSG_ERROR) {
        edge_log(a, INGEST_LOG_ERROR, "receiver reported: %s: %s", ingest_strerror(m->u.error.code),
                 edge_esc(m->u.error.message));
        return m->u.error.code < 0 ? m->u.error.code : INGEST_EPROTO;
    }
    return 0;
}

int ingest_edge_send_manifest(ingest_edge *a, ingest_sender_batch *b)
{
    const void *mp;
    size_t mlen;
    const uint32_t push = a->pack && (a->link->features & INGEST_SESSION_FEATURE_PUSH) ? a->o.push_max : 0u;
    int rc = ingest_sender_batch_manifest_push(b, a->pack ? INGEST_SENDER_MANIFEST_NO_HASH : 0u, push, a->o.fresh,
                                               a->o.userdata, &mp, &mlen);
    if (rc < 0)
        return rc;
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_BATCH_BEGIN;
    snprintf(m.u.begin.batch_id, sizeof(m.u.begin.batch_id), "%s", ingest_sender_batch_id(b));
    m.u.begin.file_count = (uint32_t)bs.files;
    m.u.begin.chunk_count = (uint32_t)bs.chunks;
    m.u.begin.total_bytes = bs.bytes;

    if ((rc = send_msg(a, &m, 0)) < 0)
        return rc;
    uint32_t parts = 0;
    for (size_t off = 0; off < mlen; off += INGEST_EDGE_MANIFEST_PART_MAX, parts++) {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_MANIFEST_PART;
        m.u.manifest_part.data = (const uint8_t *)mp + off;
        m.u.manifest_part.len = mlen - off < INGEST_EDGE_MANIFEST_PART_MAX ? mlen - off : INGEST_EDGE_MANIFEST_PART_MAX;
        if (a->pack) {
            /* pack feature: each part travels as an encoded chunk (chunk ids are hex: zstd halves them) */
            size_t n = 0;
            if ((rc = ingest_codec_encode(a->mcodec, m.u.manifest_part.data, m.u.manifest_part.len, a->mbuf,
                                          ingest_codec_bound(INGEST_EDGE_MANIFEST_PART_MAX), &n)) < 0) {
                edge_log(a, INGEST_LOG_ERROR, "batch %s: compressing its manifest: %s", ingest_sender_batch_id(b),
                         ingest_ctx_errmsg(a->ctx));
                return rc;
            }
            m.u.manifest_part.data = a->mbuf;
            m.u.manifest_part.len = n;
        }
        if ((rc = send_msg(a, &m, 0)) < 0)
            return rc;
    }
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_MANIFEST_END;
    m.u.manifest_end.part_count = parts;
    m.u.manifest_end.manifest_bytes = mlen;
    return send_msg(a, &m, 0);
}

/* ---- delta chunks (INGEST_SESSION_FEATURE_DELTA) --------------------------- */

/* block hashes kept per batch, at most: twice the receiver's budget (INGEST_CORE_DELTA_HASH_BUDGET) */
#define INGEST_EDGE_DELTA_HASH_MAX (16u * 1024u * 1024u)

/*
 * Keep a DELTA_BASE of the open batch b: the chunk's predecessor as the
 * receiver holds it.  Bounded by the manifest: one per chunk, ascending,
 * at most as long as the chunk, so the hashes kept are at most 1/128 of
 * the batch's bytes, and never more than INGEST_EDGE_DELTA_HASH_MAX: a
 * base past that is not kept (its chunk goes whole).
 */
static int take_delta_base(ingest_edge *a, ingest_sender_batch *b, const ingest_wire_delta_base *x)
{
    uint8_t id[INGEST_ID_BYTES];
    uint32_t len = 0;
    uint64_t off = 0;
    const char *why = NULL;
    if (!(a->link->features & INGEST_SESSION_FEATURE_DELTA))
        why = "the delta feature was not agreed";
    else if (a->dbase_closed)
        why = "after the batch's WANTs were served (predecessors come before them)";
    else if (ingest_sender_batch_chunk_info(b, x->index, id, &len, &off) != 0)
        why = "no such chunk";
    else if (x->base_len > len)
        why = "a predecessor longer than the chunk";
    else if (a->ndbase > 0 && x->index <= a->dbase[a->ndbase - 1].idx)
        why = "not after the previous one";
    if (why != NULL) {
        edge_log(a, INGEST_LOG_ERROR, "batch %s: DELTA_BASE of chunk %u (%u bytes): %s", ingest_sender_batch_id(b),
                 x->index, x->base_len, why);
        return INGEST_EPROTO;
    }
    const size_t hb = (size_t)INGEST_WIRE_DELTA_BLOCKS(x->base_len) * INGEST_WIRE_DELTA_HASH_BYTES;
    if (a->dpool_len + hb > INGEST_EDGE_DELTA_HASH_MAX)
        return 0; /* past what the edge keeps for a batch: that chunk is sent whole (the receiver allows less) */
    if (a->ndbase == a->dbase_cap) {
        const size_t cap = a->dbase_cap ? 2 * a->dbase_cap : 64;
        void *p = ingest__realloc(a->ctx, a->dbase, a->dbase_cap * sizeof(*a->dbase), cap * sizeof(*a->dbase));
        if (p == NULL)
            return ingest__fail(a->ctx, INGEST_ENOMEM, "edge: out of memory for delta bases");
        a->dbase = p;
        a->dbase_cap = cap;
    }
    if (a->dpool_len + hb > a->dpool_cap) {
        size_t cap = a->dpool_cap ? a->dpool_cap : 4096;
        while (cap < a->dpool_len + hb)
            cap *= 2;
        void *p = ingest__realloc(a->ctx, a->dpool, a->dpool_cap, cap);
        if (p == NULL)
            return ingest__fail(a->ctx, INGEST_ENOMEM, "edge: out of memory for delta bases");
        a->dpool = p;
        a->dpool_cap = cap;
    }
    if (a->ndbase == 0)
        memcpy(a->dkey, x->key, sizeof(a->dkey));
    memcpy(a->dpool + a->dpool_len, x->hashes, hb);
    a->dbase[a->ndbase].idx = x->index;
    a->dbase[a->ndbase].base_len = x->base_len;
    a->dbase[a->ndbase].at = a->dpool_len;
    a->ndbase++;
    a->dpool_len += hb;
    return 0;
}

/* The DELTA_BASE of chunk idx, or NULL. */
static const struct delta_base *delta_base_of(const ingest_edge *a, uint32_t idx)
{
    size_t lo = 0, hi = a->ndbase;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (a->dbase[mid].idx == idx)
            return &a->dbase[mid];
        if (a->dbase[mid].idx < idx)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/*
 * Encode chunk idx into buf with reader r as a CHUNK_DELTA against its
 * predecessor, when the receiver described one and enough of it matches
 * (0: *nblocks > 0, map filled); 1 when it goes whole (a CHUNK), < 0 on
 * failure.  The adaptive hint is not used: a delta leaves it as it was.
 */
static int encode_delta(ingest_edge *a, ingest_sender_batch *b, ingest__sender_reader *r, uint32_t idx, uint8_t *buf,
                        uint8_t *map, size_t *n, uint32_t *nblocks)
{
    *nblocks = 0;
    const struct delta_base *d = delta_base_of(a, idx);
    if (d == NULL)
        return 1;
    const int rc = ingest__sender_batch_chunk_delta_r(b, r, idx, a->dkey, a->dpool + d->at, d->base_len, map,
                                                      DELTA_MAP_MAX, buf, a->o.chunk_cap, n, nblocks);
    if (rc < 0 || (rc == 0 && 8 + (*nblocks + 7) / 8 + *n <= a->link->peer_max_payload))
        return rc;
    *nblocks = 0;
    return 1;
}

/*
 * Encode chunk idx into buf: against its predecessor when the receiver
 * described one and enough of it matches (*nblocks > 0, map filled: a
 * CHUNK_DELTA), else whole (*nblocks 0: a CHUNK).  The shipping thread's
 * (send_each): the batch's own reader and hint.
 */
static int encode_chunk(ingest_edge *a, ingest_sender_batch *b, uint32_t idx, uint8_t *buf, uint8_t *map, size_t *n,
                        uint32_t *nblocks)
{
    const int rc = encode_delta(a, b, ingest__sender_batch_reader(b), idx, buf, map, n, nblocks);
    if (rc <= 0)
        return rc;
    return ingest_sender_batch_chunk(b, idx, buf, a->o.chunk_cap, n);
}

/*
 * The encoder threads: re-read and compress the wanted chunks of one WANT
 * frame into a ring of slots, a few units ahead of the shipping thread,
 * which encrypts and sends them in WANT order, so that the cores work on
 * a batch's chunks together (the builder thread chunks and hashes the
 * next batch).  A slot holds one unit: a chunk, or (with the pack
 * feature) a group of small chunks compressed together.  The units are
 * planned in WANT order under the lock (which chunks form each unit
 * depends only on their lengths), so the wire is the same whatever the
 * number of encoders (compression.encoders).  Each thread has its own
 * codec, open file and buffer (the first one uses the batch's own and
 * the agent's codec).  A file's single chunks are encoded adaptively
 * with one hint per file carried from chunk to chunk: a chunk whose hint
 * is being probed by another encoder waits for that probe (the hint
 * chain below), so the encodings are the one-thread ones; a chunk with a
 * predecessor at the receiver (a delta candidate) is planned as such a
 * probe too, since whether it goes whole, using the hint, is known only
 * once it is encoded.  The job stops at the first unit that fails (a file
 * that changed or vanished: INGEST_ESTALE) or when told to.
 *
 * Wake-ups: the shipping thread is woken only when the unit it waits for
 * is done, encoders waiting for room only once half of the ring is free
 * again, and every signal is sent after the lock is released.
 */
#define ENC_MAX 4 /* each costs ~2 MiB: 4 keeps the agent under its 32 MiB */

typedef struct enc_slot {
    uint8_t *buf;
    size_t n;
    int rc;
    int done;
    uint32_t pos, count; /* the WANT's positions [pos, pos + count) */
    uint32_t *idx;       /* their chunk indexes (INGEST_SENDER_GROUP_MAX_CHUNKS) */
    uint8_t *map;        /* a CHUNK_DELTA's block map (DELTA_MAP_MAX) */
    uint32_t nblocks;    /* > 0: the unit is chunk idx[0] as a CHUNK_DELTA of that many blocks */
    int single;          /* one chunk (perhaps a delta), encoded whole with hint */
    int publish;         /* hint is the chain's probe: give the result back */
    uint64_t hfile;      /* single: the file of its chunk (the hint's) */
    ingest_codec_hint hint;
    ingest_ctx *ectx;    /* where a failure's detail is */
} enc_slot;

typedef struct enc_thread {
    pthread_t thread;
    struct ingest_edge *a;
    unsigned no;
    int started;
    ingest_ctx *ctx;            /* own (threads 1..): errors */
    ingest_codec *codec;        /* own (threads 1..) */
    ingest__sender_reader rd;   /* own (threads 1..) */
} enc_thread;

struct encoder {
    pthread_mutex_t mu;
    pthread_cond_t work;  /* encoders wait here */
    pthread_cond_t ready; /* the shipping thread waits here */
    unsigned n, nslots;
    int quit;
    /* the job: chunks w->idx[0, count) of b */
    ingest_sender_batch *b;
    const ingest_wire_want *w;
    uint32_t count;
    uint32_t pos;                /* the next WANT position to plan */
    uint32_t claimed, consumed;  /* units; slots: i % nslots */
    int stop;                    /* the job ends early (a failure, or the shipping thread gave up) */
    int busy;                    /* a job is running */
    unsigned inside;             /* encoders encoding a slot (without the lock) */
    unsigned idle;               /* encoders waiting on work */
    int main_waiting;            /* the shipping thread waits on ready */
    /* the hint chain: the adaptive hint of file hfile after the last single chunk planned */
    uint64_t hfile;
    ingest_codec_hint hint;
    int hpending;                /* unit hticket probes: the hint is known when it is done */
    uint32_t hticket;
    enc_slot *slot;
    size_t slot_cap;             /* bytes of each slot's buf: a chunk's or a group's encoding */
    enc_thread thr[ENC_MAX];
};


/* Encoder threads: compression.encoders, or (0) the online CPUs, 1 to 3. */
static unsigned encoder_count(const ingest_edge *a)
{
    unsigned n = a->o.encoders;
    if (n == 0) {
        const long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c < 1 ? 1u : c > 3 ? 3u : (unsigned)c;
    }
    return n > ENC_MAX ? ENC_MAX : n;
}

/*
 * Under the lock: plan the unit that starts at WANT position e->pos into
 * sl: with the pack feature, the small chunks from there on as one group
 * (at most INGEST_WIRE_GROUP_MAX_RAW bytes, the most the wire allows,
 * whatever chunking.max is: zstd -1 on 1 MiB pieces of JSON events came
 * out 8% smaller than on 256 KiB pieces, docs/compression.md), else one
 * chunk.  It depends on chunk lengths only, so the frames are the same for
 * any number of encoders.  A single chunk takes its hint from the chain; 0
 * when it must wait for a probe of its file still running.
 */
static int plan_unit(ingest_edge *a, encoder *e, enc_slot *sl)
{
    ingest_sender_batch *b = e->b;
    const ingest_wire_want *w = e->w;
    const uint32_t pos = e->pos;
    uint32_t m = 0;
    size_t total = 0;
    while (pos + m < w->count && m < INGEST_SENDER_GROUP_MAX_CHUNKS) {
        const uint32_t idx = ingest_wire_want_index(w, pos + m);
        uint8_t id[INGEST_ID_BYTES];
        uint32_t len = 0;
        uint64_t off = 0;
        ingest_sender_batch_chunk_info(b, idx, id, &len, &off);
        /* a chunk with a predecessor at the receiver travels alone, perhaps as a delta */
        const int small = len <= INGEST_SENDER_GROUP_CHUNK_MAX && delta_base_of(a, idx) == NULL;
        if (m > 0 && (!small || total + len > INGEST_WIRE_GROUP_MAX_RAW))
            break;
        sl->idx[m++] = idx;
        total += len;
        if (!small || !a->pack)
            break;
    }
    uint32_t count = 1;
    if (m > 1) {
        const size_t k = ingest__sender_batch_group_take(b, sl->idx, m, INGEST_WIRE_GROUP_MAX_RAW);
        count = k >= 2 ? (uint32_t)k : 1u;
    }
    sl->single = count == 1;
    sl->publish = 0;
    if (sl->single) {
        uint64_t fi = UINT64_MAX;
        if (ingest_sender_batch_chunk_file(b, sl->idx[0], &fi) != 0)
            fi = UINT64_MAX; /* the encoding names the error */
        if (fi != e->hfile) {
            e->hfile = fi;
            memset(&e->hint, 0, sizeof(e->hint));
            e->hpending = 0;
        } else if (e->hpending) {
            return 0;
        }
        sl->hfile = fi;
        sl->hint = e->hint;
        if (ingest__codec_hint_settled(&e->hint) && delta_base_of(a, sl->idx[0]) == NULL) {
            e->hint.left--; /* what ingest_codec_encode_adaptive does with it */
        } else { /* a probe, or a delta that may go whole: the next chunk of the file waits for the result */
            e->hpending = 1;
            e->hticket = e->claimed;
            sl->publish = 1;
        }
    }
    sl->pos = pos;
    sl->count = count;
    sl->done = 0;
    sl->rc = 0;
    sl->n = 0;
    e->pos += count;
    return 1;
}

static int claimable(const encoder *e)
{
    return e->busy && !e->stop && e->pos < e->count && e->claimed - e->consumed < e->nslots;
}

static void encode_slot(enc_thread *t, ingest_sender_batch *b, enc_slot *sl)
{
    ingest_edge *a = t->a;
    ingest__sender_reader *rd = t->no == 0 ? ingest__sender_batch_reader(b) : &t->rd;
    size_t n = 0, taken = 1;
    int rc;
    sl->nblocks = 0;
    if (sl->single) {
        rc = encode_delta(a, b, rd, sl->idx[0], sl->buf, sl->map, &n, &sl->nblocks);
        if (rc > 0)
            rc = ingest__sender_batch_chunk_r(b, rd, sl->idx[0], sl->buf, a->o.chunk_cap, &n, &sl->hint);
    } else {
        rc = ingest__sender_batch_group_r(b, rd, sl->idx, sl->count, sl->buf, a->enc->slot_cap, &n, &taken);
    }
    sl->n = n;
    sl->rc = rc;
    sl->ectx = rd->ctx;
    if (rc < 0 && sl->count > 1 && taken < sl->count)
        sl->idx[0] = sl->idx[taken]; /* the chunk that failed, for the log */
    if (rc < 0)
        sl->count = 1;
}

static void *encoder_main(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-encode"); /* docs/architecture.md "Threads" */
    enc_thread *t = arg;
    encoder *e = t->a->enc;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        enc_slot *sl = NULL;
        uint32_t ticket = 0;
        while (!e->quit) {
            if (claimable(e)) {
                sl = &e->slot[e->claimed % e->nslots];
                if (plan_unit(t->a, e, sl)) {
                    ticket = e->claimed++;
                    break;
                }
                sl = NULL; /* a probe of the same file runs: its end wakes us */
            }
            e->idle++;
            pthread_cond_wait(&e->work, &e->mu);
            e->idle--;
        }
        if (e->quit)
            break;
        ingest_sender_batch *b = e->b;
        e->inside++;
        /* Another encoder may take the next unit now. */
        const int more = e->idle > 0 && claimable(e);
        pthread_mutex_unlock(&e->mu);
        if (more)
            pthread_cond_signal(&e->work);
        encode_slot(t, b, sl);
        pthread_mutex_lock(&e->mu);
        e->inside--;
        sl->done = 1;
        int wake_work = 0;
        if (sl->publish && e->hpending && e->hticket == ticket) {
            e->hint = sl->hint;
            e->hpending = 0;
            wake_work = e->idle > 0;
        }
        if (sl->rc < 0)
            e->stop = 1;
        const int wake_main = e->main_waiting && (ticket == e->consumed || e->stop);
        pthread_mutex_unlock(&e->mu);
        if (wake_work)
            pthread_cond_broadcast(&e->work);
        if (wake_main)
            pthread_cond_signal(&e->ready);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void encoder_free(ingest_edge *a, encoder *e)
{
    if (e->slot != NULL)
        for (unsigned i = 0; i < e->nslots; i++) {
            ingest__free(a->ctx, e->slot[i].buf);
            ingest__free(a->ctx, e->slot[i].idx);
            ingest__free(a->ctx, e->slot[i].map);
        }
    ingest__free(a->ctx, e->slot);
    for (unsigned i = 1; i < e->n; i++) {
        enc_thread *t = &e->thr[i];
        if (t->ctx == NULL)
            continue;
        ingest__sender_reader_free(&t->rd);
        ingest_codec_destroy(t->codec);
        ingest_ctx_destroy(t->ctx);
    }
    ingest__free(a->ctx, e);
}

static void encoder_join(encoder *e)
{
    pthread_mutex_lock(&e->mu);
    e->quit = 1;
    pthread_mutex_unlock(&e->mu);
    pthread_cond_broadcast(&e->work);
    for (unsigned i = 0; i < e->n; i++)
        if (e->thr[i].started)
            pthread_join(e->thr[i].thread, NULL);
}

static int encoder_start(ingest_edge *a)
{
    if (a->enc != NULL)
        return 0;
    encoder *e = ingest__calloc(a->ctx, 1, sizeof(*e));
    if (e == NULL)
        return INGEST_ENOMEM;
    e->n = encoder_count(a);
    e->nslots = 2 * e->n + 2;
    /* room for a chunk or a whole group stored raw; only the pages an encoding writes are touched */
    const size_t group_cap = ingest_codec_bound(INGEST_WIRE_GROUP_MAX_RAW);
    e->slot_cap = a->o.chunk_cap > group_cap ? a->o.chunk_cap : group_cap;
    e->slot = ingest__calloc(a->ctx, e->nslots, sizeof(*e->slot));
    int ok = e->slot != NULL;
    for (unsigned i = 0; ok && i < e->nslots; i++)
        ok = (e->slot[i].buf = ingest__malloc(a->ctx, e->slot_cap)) != NULL &&
             (e->slot[i].idx = ingest__malloc(a->ctx, INGEST_SENDER_GROUP_MAX_CHUNKS * sizeof(uint32_t))) != NULL &&
             (e->slot[i].map = ingest__malloc(a->ctx, DELTA_MAP_MAX)) != NULL;
    for (unsigned i = 1; ok && i < e->n; i++) {
        enc_thread *t = &e->thr[i];
        ok = (t->ctx = ingest_ctx_create(&a->ctx->alloc)) != NULL;
        if (ok) {
            t->ctx->log_cb = a->ctx->log_cb;
            t->ctx->log_ud = a->ctx->log_ud;
            t->ctx->log_level = a->ctx->log_level;
            ingest__sender_reader_init(&t->rd, NULL, t->ctx);
            ok = ingest_codec_create(t->ctx, 1, &t->codec) == 0;
            t->rd.codec = t->codec;
        }
    }
    if (!ok) {
        encoder_free(a, e);
        return INGEST_ENOMEM;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->ready, NULL);
    a->enc = e;
    for (unsigned i = 0; i < e->n; i++) {
        e->thr[i].a = a;
        e->thr[i].no = i;
        if (pthread_create(&e->thr[i].thread, NULL, encoder_main, &e->thr[i]) != 0) {
            if (i > 0)
                break; /* fewer encoders */
            a->enc = NULL;
            pthread_cond_destroy(&e->ready);
            pthread_cond_destroy(&e->work);
            pthread_mutex_destroy(&e->mu);
            encoder_free(a, e);
            return INGEST_ENOMEM;
        }
        e->thr[i].started = 1;
    }
    return 0;
}

static void encoder_stop(ingest_edge *a)
{
    encoder *e = a->enc;
    if (e == NULL)
        return;
    encoder_join(e);
    pthread_cond_destroy(&e->ready);
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->mu);
    encoder_free(a, e);
    a->enc = NULL;
}

/* Start a job: the chunks of w, of batch b. */
static void encoder_begin_job(ingest_edge *a, encoder *e, ingest_sender_batch *b, const ingest_wire_want *w)
{
    uint64_t *hfile = NULL;
    ingest_codec_hint *hint = NULL;
    ingest__sender_batch_hint(b, &hfile, &hint);
    for (unsigned i = 1; i < e->n; i++)
        ingest__codec_follow(e->thr[i].codec, a->o.codec);
    pthread_mutex_lock(&e->mu);
    e->b = b;
    e->w = w;
    e->count = w->count;
    e->pos = 0;
    e->claimed = e->consumed = 0;
    e->stop = 0;
    e->busy = 1;
    e->hfile = *hfile;
    e->hint = *hint;
    e->hpending = 0;
    pthread_mutex_unlock(&e->mu);
    pthread_cond_broadcast(&e->work);
}

/* End the job: no more units are planned, and the ones in progress are finished. */
static void encoder_end_job(encoder *e)
{
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    while (e->inside > 0) {
        e->main_waiting = 1;
        pthread_cond_wait(&e->ready, &e->mu);
        e->main_waiting = 0;
    }
    e->busy = 0;
    pthread_mutex_unlock(&e->mu);
    for (unsigned i = 1; i < e->n; i++)
        ingest__sender_reader_reset(&e->thr[i].rd);
}

/* Log which file changed (or vanished) under chunk idx: why is the sender's detail. */
static void log_stale(ingest_edge *a, ingest_sender_batch *b, uint32_t idx, const char *why)
{
    uint64_t fi = 0;
    ingest_sender_file_info info;
    memset(&info, 0, sizeof(info));
    if (ingest_sender_batch_chunk_file(b, idx, &fi) == 0)
        ingest_sender_batch_file(b, fi, &info);
    const int gone = why != NULL && strstr(why, "vanished") != NULL;
    edge_log(a, INGEST_LOG_WARN, "batch %s: %s %s while it was being shipped; the batch will be shipped again%s",
             ingest_sender_batch_id(b), info.path ? edge_esc(info.path) : "a file", gone ? "vanished" : "changed",
             gone ? " without it" : "");
}

/* ---- withdrawing a file that vanished (INGEST_SESSION_FEATURE_WITHDRAW) ---- */

/* Is chunk idx in a file withdrawn from b (or refused)? */
static int chunk_withdrawn(const ingest_sender_batch *b, uint32_t idx)
{
    uint64_t fi = 0;
    ingest_sender_file_info info;
    return ingest_sender_batch_chunk_file(b, idx, &fi) == 0 && ingest_sender_batch_file(b, fi, &info) == 0 &&
           info.refused != NULL;
}

static int id_cmp(const void *x, const void *y) { return memcmp(x, y, INGEST_ID_BYTES); }

/*
 * Are the chunks of file fi in no other file of b (by id)?  Only then may
 * it be withdrawn: the core lands a repeated chunk by copying it from the
 * file it comes first in, so a file whose bytes another file repeats
 * cannot go (nor one that repeats another's: kept simple).  0 also when
 * memory runs out (the batch is then shipped again, as without the feature).
 */
static int chunks_exclusive(ingest_edge *a, ingest_sender_batch *b, uint64_t fi)
{
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    size_t n = 0;
    for (uint64_t c = 0; c < bs.chunks; c++) {
        uint64_t f = 0;
        if (ingest_sender_batch_chunk_file(b, c, &f) == 0 && f == fi)
            n++;
    }
    if (n == 0)
        return 1;
    uint8_t *ids = ingest__malloc(a->ctx, n * INGEST_ID_BYTES);
    if (ids == NULL)
        return 0;
    size_t k = 0;
    for (uint64_t c = 0; c < bs.chunks && k < n; c++) {
        uint64_t f = 0;
        uint32_t len = 0;
        uint64_t off = 0;
        if (ingest_sender_batch_chunk_file(b, c, &f) == 0 && f == fi &&
            ingest_sender_batch_chunk_info(b, c, ids + k * INGEST_ID_BYTES, &len, &off) == 0)
            k++;
    }
    qsort(ids, k, INGEST_ID_BYTES, id_cmp);
    int alone = 1;
    for (uint64_t c = 0; c < bs.chunks && alone; c++) {
        uint64_t f = 0;
        uint32_t len = 0;
        uint64_t off = 0;
        uint8_t id[INGEST_ID_BYTES];
        if (ingest_sender_batch_chunk_file(b, c, &f) != 0 || f == fi ||
            ingest_sender_batch_chunk_info(b, c, id, &len, &off) != 0)
            continue;
        alone = bsearch(id, ids, k, INGEST_ID_BYTES, id_cmp) == NULL;
    }
    ingest__free(a->ctx, ids);
    return alone;
}

/*
 * Whether why (the sender's message for chunk idx) says that the chunk's
 * file vanished, not that it changed: its exact form names the file first,
 * so a path holding the word is never taken for it.
 */
static int chunk_vanished(ingest_sender_batch *b, uint32_t idx, const char *why)
{
    uint64_t fi = 0;
    ingest_sender_file_info info;
    char prefix[INGEST__ERRMSG_MAX];
    if (why == NULL || ingest_sender_batch_chunk_file(b, idx, &fi) != 0 || ingest_sender_batch_file(b, fi, &info) != 0)
        return 0;
    const int n = snprintf(prefix, sizeof prefix, "sender: %s: vanished since it was chunked", info.path);
    return n > 0 && (size_t)n < sizeof prefix && strncmp(why, prefix, (size_t)n) == 0;
}

/*
 * Chunk idx of b could not be read: why (the sender's detail) says its
 * file vanished.  With the feature agreed, and when no other file of the
 * batch shares its chunks, the file is withdrawn (FILE_WITHDRAWN; kept
 * with the batch as refused, with INGEST_EDGE_WITHDRAWN_REASON) and the
 * rest of the batch ships: 1.  0: it cannot be (the batch is abandoned
 * and shipped again, as before).  < 0: the connection failed.
 */
static int withdraw(ingest_edge *a, ingest_sender_batch *b, uint32_t idx, const char *why)
{
    const unsigned need = INGEST_SESSION_FEATURE_WITHDRAW | INGEST_SESSION_FEATURE_REFUSE;
    uint64_t fi = 0;
    ingest_sender_file_info info;
    if ((a->link->features & need) != need || !chunk_vanished(b, idx, why) ||
        ingest_sender_batch_chunk_file(b, idx, &fi) != 0 || ingest_sender_batch_file(b, fi, &info) != 0 ||
        fi > UINT32_MAX)
        return 0;
    if (info.refused != NULL)
        return 1; /* withdrawn already: its chunks are passed over */
    if (!chunks_exclusive(a, b, fi))
        return 0;
    int rc = ingest_sender_batch_refuse(b, fi, INGEST_ENOTFOUND, INGEST_EDGE_WITHDRAWN_REASON);
    if (rc < 0)
        return rc == INGEST_ENOMEM ? rc : 0;
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_FILE_WITHDRAWN;
    snprintf(m.u.withdrawn.batch_id, sizeof(m.u.withdrawn.batch_id), "%s", ingest_sender_batch_id(b));
    m.u.withdrawn.file_index = (uint32_t)fi;
    m.u.withdrawn.code = INGEST_ENOTFOUND;
    snprintf(m.u.withdrawn.message, sizeof(m.u.withdrawn.message), "%s", INGEST_EDGE_WITHDRAWN_REASON);
    if ((rc = send_msg(a, &m, 0)) < 0)
        return rc;
    a->withdrawn++;
    edge_log(a, INGEST_LOG_INFO, "batch %s: %s vanished while it was being shipped: withdrawn from the batch, the rest "
             "ships", ingest_sender_batch_id(b), edge_esc(info.path));
    return 1;
}


/* idx[0, count) are idx[0], idx[0] + 1, ...: a CHUNK_RUN says them. */
static int consecutive(const uint32_t *idx, uint32_t count)
{
    for (uint32_t i = 1; i < count; i++)
        if (idx[i] != idx[0] + i)
            return 0;
    return 1;
}
/*
 * Send one encoded unit (data[0, n)): chunk idx[0] alone (count 1, a
 * CHUNK, or with nblocks > 0 a CHUNK_DELTA with the block map map) or the
 * group of chunks idx[0, count) (a CHUNK_GROUP; idx is rewritten in place
 * as little-endian u32s for the wire).
 */
static int send_unit(ingest_edge *a, ingest_sender_batch *b, uint32_t *idx, uint32_t count, const uint8_t *data, size_t n,
                     const uint8_t *map, uint32_t nblocks, uint32_t *sent)
{
    uint64_t raw = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint8_t id[INGEST_ID_BYTES];
        uint32_t len = 0;
        uint64_t off = 0;
        ingest_sender_batch_chunk_info(b, idx[i], id, &len, &off);
        raw += len;
    }
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    if (count == 1 && nblocks > 0) {
        m.type = INGEST_MSG_CHUNK_DELTA;
        m.u.delta.index = idx[0];
        m.u.delta.nblocks = nblocks;
        m.u.delta.map = map;
        m.u.delta.data = data;
        m.u.delta.len = n;
        n += 8 + ((size_t)nblocks + 7) / 8; /* counted in chunk_bytes_sent: what replaces the chunk */
    } else if (count == 1) {
        m.type = INGEST_MSG_CHUNK;
        m.u.chunk.index = idx[0];
        m.u.chunk.data = data;
        m.u.chunk.len = n;
    } else if (a->runs && consecutive(idx, count)) {
        /* consecutive indexes (strictly increasing): the first and the count say them all */
        m.type = INGEST_MSG_CHUNK_RUN;
        m.u.group.count = count;
        m.u.group.first = idx[0];
        m.u.group.raw = NULL;
        m.u.group.data = data;
        m.u.group.len = n;
    } else {
        for (uint32_t i = 0; i < count; i++) {
            const uint32_t v = idx[i];
            uint8_t *p = (uint8_t *)&idx[i];
            p[0] = (uint8_t)v;
            p[1] = (uint8_t)(v >> 8);
            p[2] = (uint8_t)(v >> 16);
            p[3] = (uint8_t)(v >> 24);
        }
        m.type = INGEST_MSG_CHUNK_GROUP;
        m.u.group.count = count;
        m.u.group.raw = (const uint8_t *)idx;
        m.u.group.data = data;
        m.u.group.len = n;
    }
    int rc;
    if ((rc = edge_before_send(a, ingest_wire_encoded_size(&m) + INGEST_EDGE_FRAME_OVERHEAD)) < 0)
        return rc;
    if ((rc = send_msg(a, &m, 0)) < 0)
        return rc;
    a->st->chunks_sent += count;
    a->st->chunk_bytes_raw += raw;
    a->st->chunk_bytes_sent += n;
    a->st->groups_sent += count > 1;
    a->st->chunks_delta += nblocks > 0;
    *sent += count;
    edge_progress(a);
    return 0;
}

/*
 * Send the chunks of w from its position `from` on, one CHUNK each,
 * passing over those of withdrawn files.  A chunk whose file changed since
 * it was chunked cannot be sent: *stale is set and the batch is abandoned;
 * one whose file vanished withdraws that file where it can (withdraw).
 */
static int send_each(ingest_edge *a, ingest_sender_batch *b, const ingest_wire_want *w, uint32_t from, uint32_t *sent,
                     int *stale)
{
    for (uint32_t i = from; i < w->count && !edge_stopping(a); i++) {
        uint32_t idx = ingest_wire_want_index(w, i);
        if (a->withdrawn > 0 && chunk_withdrawn(b, idx))
            continue;
        size_t n = 0;
        uint32_t nblocks = 0;
        int rc = encode_chunk(a, b, idx, a->chunkbuf, a->dmap, &n, &nblocks);
        if (rc == INGEST_ESTALE) {
            char why[INGEST_WIRE_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", batch_errmsg(b));
            const int wd = withdraw(a, b, idx, why);
            if (wd < 0)
                return wd;
            if (wd > 0)
                continue;
            log_stale(a, b, idx, why);
            *stale = 1;
            return 0;
        }
        if (rc < 0) {
            edge_log(a, INGEST_LOG_ERROR, "batch %s: chunk %u: %s", ingest_sender_batch_id(b), idx, batch_errmsg(b));
            return rc;
        }
        if ((rc = send_unit(a, b, &idx, 1, a->chunkbuf, n, a->dmap, nblocks, sent)) < 0)
            return rc;
    }
    return edge_stopping(a) ? INGEST_ECLOSED : 0;
}

/*
 * Send the chunks of one WANT frame.  With the encoder threads (more than
 * one chunk wanted) chunks are read and compressed there, a few ahead; else
 * here (send_each).  A unit an encoder could not read because a file
 * vanished is sent again from its first chunk on by send_each, which finds
 * the file and withdraws it (a unit may hold chunks of several files); the
 * units encoded past it are dropped.  Once a file of the batch was
 * withdrawn, its later WANTs are served by send_each too, which passes over
 * that file's chunks (the encoders would read them again, and send them
 * should its name be back).
 */
static int send_wanted(ingest_edge *a, ingest_sender_batch *b, const ingest_wire_want *w, uint32_t *sent, int *stale)
{
    const unsigned wd_feat = INGEST_SESSION_FEATURE_WITHDRAW | INGEST_SESSION_FEATURE_REFUSE;
    if (w->count > 1 && a->withdrawn == 0 && encoder_start(a) == 0) {
        encoder *e = a->enc;
        /* the batch's adaptive hint as the units sent leave it (the one-thread encoder's, whatever the
         * encoders planned past a failed unit): what send_each goes on from */
        uint64_t *hfile = NULL;
        ingest_codec_hint *hint = NULL;
        ingest__sender_batch_hint(b, &hfile, &hint);
        uint64_t cfile = *hfile;
        ingest_codec_hint chint = *hint;
        encoder_begin_job(a, e, b, w);
        int rc = 0, redo = 0;
        uint32_t redo_from = 0;
        pthread_mutex_lock(&e->mu);
        for (uint32_t u = 0; rc == 0 && !edge_stopping(a); u++) {
            enc_slot *sl = &e->slot[u % e->nslots];
            while (!(u < e->claimed && sl->done) && !(u >= e->claimed && (e->pos >= e->count || e->stop))) {
                e->main_waiting = 1;
                pthread_cond_wait(&e->ready, &e->mu);
                e->main_waiting = 0;
            }
            if (u >= e->claimed)
                break; /* every unit was sent, or one failed before this */
            pthread_mutex_unlock(&e->mu);
            if (sl->rc == INGEST_ESTALE && (a->link->features & wd_feat) == wd_feat &&
                chunk_vanished(b, sl->idx[0], ingest_ctx_errmsg(sl->ectx))) {
                redo = 1;
                redo_from = sl->pos; /* the unit's first WANT position: none of its chunks was sent */
            } else if (sl->rc == INGEST_ESTALE) {
                log_stale(a, b, sl->idx[0], ingest_ctx_errmsg(sl->ectx));
                *stale = 1;
            } else if (sl->rc < 0) {
                edge_log(a, INGEST_LOG_ERROR, "batch %s: chunk %u: %s", ingest_sender_batch_id(b), sl->idx[0],
                         ingest_ctx_errmsg(sl->ectx));
                rc = sl->rc;
            } else {
                if (sl->single && sl->nblocks == 0) { /* encoded whole with the file's hint (a delta leaves it) */
                    cfile = sl->hfile;
                    chint = sl->hint;
                }
                rc = send_unit(a, b, sl->idx, sl->count, sl->buf, sl->n, sl->map, sl->nblocks, sent);
            }
            pthread_mutex_lock(&e->mu);
            e->consumed++;
            /* Encoders waiting for room are woken once half of the ring is free. */
            const int wake = e->idle > 0 && claimable(e) && e->claimed - e->consumed <= e->nslots / 2;
            if (wake) {
                pthread_mutex_unlock(&e->mu);
                pthread_cond_broadcast(&e->work);
                pthread_mutex_lock(&e->mu);
            }
            if (*stale || redo)
                break;
        }
        pthread_mutex_unlock(&e->mu);
        encoder_end_job(e);
        *hfile = cfile;
        *hint = chint;
        if (rc < 0 || *stale)
            return rc;
        if (redo) {
            /* the units before it were sent, in the WANT's order; this one from its start */
            return send_each(a, b, w, redo_from, sent, stale);
        }
        return edge_stopping(a) ? INGEST_ECLOSED : 0;
    }
    return send_each(a, b, w, 0, sent, stale);
}

/*
 * A WANT of runs (the runs feature): its indexes into a->wexp, w then
 * naming them as a WANT of indexes.  The runs are ordered and disjoint (the
 * wire decoder checked); every index must be one of the batch's chunks, so
 * the buffer is at most the batch's chunk list.
 */
static int expand_runs(ingest_edge *a, ingest_sender_batch *b, ingest_wire_want *w)
{
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    if (!a->runs) {
        edge_log(a, INGEST_LOG_ERROR, "batch %s: a WANT of runs, but the runs feature was not agreed",
                 ingest_sender_batch_id(b));
        return INGEST_EPROTO;
    }
    uint64_t total = 0;
    for (uint32_t k = 0; k < w->count; k++) {
        uint32_t first, n;
        ingest_wire_want_run(w, k, &first, &n);
        if ((uint64_t)first + n > bs.chunks) {
            edge_log(a, INGEST_LOG_ERROR, "batch %s: WANT run %u asks for chunks %u..%llu, past the batch's %llu",
                     ingest_sender_batch_id(b), (unsigned)k, (unsigned)first, (unsigned long long)first + n - 1,
                     (unsigned long long)bs.chunks);
            return INGEST_EPROTO;
        }
        total += n;
    }
    if (total > a->wexp_cap) {
        uint32_t *p = ingest__realloc(a->ctx, a->wexp, a->wexp_cap * sizeof(*p), total * sizeof(*p));
        if (p == NULL)
            return ingest__fail(a->ctx, INGEST_ENOMEM, "out of memory for a WANT of %llu chunks",
                                (unsigned long long)total);
        a->wexp = p;
        a->wexp_cap = total;
    }
    size_t j = 0;
    for (uint32_t k = 0; k < w->count; k++) {
        uint32_t first, n;
        ingest_wire_want_run(w, k, &first, &n);
        for (uint32_t i = 0; i < n; i++)
            a->wexp[j++] = first + i;
    }
    w->idx = a->wexp;
    w->raw = NULL;
    w->count = (uint32_t)total;
    w->flags &= (uint8_t)~INGEST_WANT_RUNS;
    return 0;
}

/* Read WANT frames until one without MORE, sending the chunks of each. */
static int serve_wants(ingest_edge *a, ingest_sender_batch *b, ingest_wire_msg *first, uint32_t *sent, int *stale)
{
    ingest_wire_msg m = *first;
    for (;;) {
        if (m.type != INGEST_MSG_WANT || strcmp(m.u.want.batch_id, ingest_sender_batch_id(b)) != 0) {
            edge_log(a, INGEST_LOG_ERROR, "batch %s: unexpected %s from the receiver", ingest_sender_batch_id(b),
                     ingest_wire_type_name(m.type));
            return INGEST_EPROTO;
        }
        const int more = (m.u.want.flags & INGEST_WANT_MORE) != 0;
        int rc;
        if ((m.u.want.flags & INGEST_WANT_RUNS) && (rc = expand_runs(a, b, &m.u.want)) < 0)
            return rc;
        /* The WANT's index list lives in the session's receive buffer: send before the next receive. */
        rc = send_wanted(a, b, &m.u.want, sent, stale);
        if (rc < 0 || *stale || !more)
            return rc;
        if ((rc = recv_msg(a, &m, a->reply_ms)) < 0)
            return rc;
    }
}

/*
 * A failure while a batch was open.  The receiver re-derives every chunk
 * id; when it finds one that no longer matches (the file changed after the
 * agent's own checks) it says so in an ERROR frame and closes: then the
 * batch is abandoned and its files shipped again in a later pass (1).
 * Anything else stays a failure (rc).
 */
static int batch_failure(ingest_edge *a, ingest_sender_batch *b, int rc)
{
    if (rc != INGEST_EMISMATCH && rc != INGEST_EPROTO && !edge_stopping(a)) {
        ingest_wire_msg m;
        if (ingest_link_recv(a->link, &m, 2000) == 0 && m.type == INGEST_MSG_ERROR) {
            edge_log(a, INGEST_LOG_WARN, "receiver reported: %s: %s", ingest_strerror(m.u.error.code),
                     edge_esc(m.u.error.message));
            rc = m.u.error.code;
        }
    }
    if (rc != INGEST_EMISMATCH)
        return rc;
    edge_log(a, INGEST_LOG_WARN, "batch %s abandoned: a file changed while it was shipped; it will be shipped again",
             ingest_sender_batch_id(b));
    a->st->batches_abandoned++;
    return 1;
}

static int finish_batch_once(ingest_edge *a, ingest_sender_batch *b, double t0);

/* Tests (ingest_edge_opts.test_pause_file): wait, the manifest sent, while that file exists (at most a minute). */
static void test_pause(ingest_edge *a)
{
    const char *p = a->o.test_pause_file;
    if (p == NULL || access(p, F_OK) != 0)
        return;
    char mark[4096];
    snprintf(mark, sizeof(mark), "%s.paused", p);
    FILE *f = fopen(mark, "w");
    if (f != NULL)
        fclose(f);
    for (int i = 0; i < 6000 && access(p, F_OK) == 0; i++) {
        const struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    (void)unlink(mark);
}

/*
 * Ship one batch whose manifest was sent: serve the WANTs, commit, read the
 * ACK.  Returns 0 acked, 1 abandoned (a file changed; ship again later),
 * < 0 failure of the connection, 2 a batch the receiver refused, 3
 * received (pipelined: b is now pending, its ACK is read later; the
 * caller must not destroy it).
 */
int ingest_edge_finish_batch(ingest_edge *a, ingest_sender_batch *b, double t0)
{
    if (a->link == NULL)
        return ingest__fail(a->ctx, INGEST_ECLOSED, "no link attached");
    a->cur = b;
    a->withdrawn = 0;
    a->ndbase = 0;
    a->dpool_len = 0;
    a->dbase_closed = 0;
    test_pause(a);
    const int rc = finish_batch_once(a, b, t0);
    a->cur = NULL;
    return rc < 0 ? batch_failure(a, b, rc) : rc;
}

/*
 * Account for the ACK m of batch b (sent: chunks sent for it; t0: when its
 * building began): 0 landed (or landed before), 1 to be shipped again
 * (INGEST_ESTALE: the core lacks chunks it was thought to hold;
 * INGEST_EBATCHID: the id was used before, for other data), 2 refused
 * by the receiver.
 */
static int batch_acked(ingest_edge *a, ingest_sender_batch *b, const ingest_wire_msg *m, uint32_t sent, double t0)
{
    const char *id = ingest_sender_batch_id(b);
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    if (m->u.ack.status == INGEST_ESTALE) {
        /* the core lacks chunks it was thought to hold (Kafka's NEEDED, docs/kafka.md): ship it again */
        edge_log(a, INGEST_LOG_WARN, "batch %s not landed: %s", id, edge_esc(m->u.ack.message));
        a->st->batches_abandoned++;
        return 1;
    }
    if (m->u.ack.status == INGEST_EBATCHID) {
        /* the core landed this id before with other files: the device's batch numbers went back (its state
         * directory restored from an older copy).  Not a refusal of the files: they go again, under new ids
         * (the caller takes a new instance: batches_id_taken) */
        edge_log(a, INGEST_LOG_WARN, "batch %s not landed: the receiver landed this batch id before, with other data "
                 "(was this device's state directory restored from an older copy?); its files go again under a new "
                 "batch id", id);
        a->st->batches_abandoned++;
        a->st->batches_id_taken++;
        return 1;
    }
    if (m->u.ack.status < 0) {
        edge_log(a, INGEST_LOG_ERROR, "batch %s refused by the receiver: %s: %s", id, ingest_strerror(m->u.ack.status),
                 edge_esc(m->u.ack.message));
        a->st->batches_failed++;
        a->st->last_refusal = m->u.ack.status;
        return 2;
    }
    a->st->batches_acked++;
    uint64_t wchunks = 0; /* chunks of files withdrawn (FILE_WITHDRAWN) */
    if (bs.refused > 0) { /* landed now, or before (a replay: the core tells its refusals again) */
        /* each once, with the core's reason; the caller records them as shipped (not sent again until changed).
         * A file the edge withdrew (it vanished) was said when it was withdrawn and is counted apart. */
        uint64_t withdrawn = 0;
        for (uint64_t i = 0; i < bs.files; i++) {
            ingest_sender_file_info fi;
            if (ingest_sender_batch_file(b, i, &fi) != 0 || fi.refused == NULL)
                continue;
            if (ingest_edge_file_withdrawn(&fi)) {
                withdrawn++;
                for (uint64_t c = 0; c < bs.chunks; c++) { /* never sent, nor deduplicated */
                    uint64_t f = 0;
                    if (ingest_sender_batch_chunk_file(b, c, &f) == 0 && f == i)
                        wchunks++;
                }
                continue;
            }
            char shown[224]; /* a path may take 4 KiB: the reason must still fit the line */
            snprintf(shown, sizeof(shown), "%.200s%s", fi.path, strlen(fi.path) > 200 ? "..." : "");
            edge_log(a, INGEST_LOG_WARN, "file %s refused by the receiver (the rest of batch %s landed): %s",
                     edge_esc(shown), id, edge_esc(fi.refused));
        }
        a->st->files_refused += bs.refused - withdrawn;
        a->st->files_withdrawn += withdrawn;
    }
    a->st->files += bs.files;
    a->st->bytes += bs.bytes;
    a->st->chunks += bs.chunks;
    a->st->chunks_dedup += bs.chunks - sent - (wchunks < bs.chunks - sent ? wchunks : bs.chunks - sent);
    edge_log(a, INGEST_LOG_DEBUG, "batch %s acked (%s): %llu files, %llu chunks, %u sent", id,
             m->u.ack.status == INGEST_ACK_DUPLICATE ? "already landed" : "landed", (unsigned long long)bs.files,
             (unsigned long long)bs.chunks, sent);
    if (a->o.on_acked != NULL)
        a->o.on_acked(a->o.userdata, b, sent, t0);
    edge_progress(a);
    return 0;
}

/* m is an ACK: is it the oldest pending batch's (the receiver acks in order)? */
static int is_pending_ack(const ingest_edge *a, const ingest_wire_msg *m)
{
    return m->type == INGEST_MSG_ACK && a->npending > 0 &&
           strcmp(m->u.ack.batch_id, ingest_sender_batch_id(a->pending[0].b)) == 0;
}

/* The oldest pending batch's ACK m: account for it and let the batch go. */
static void pending_acked(ingest_edge *a, const ingest_wire_msg *m)
{
    ingest_sender_batch *p = a->pending[0].b;
    const uint32_t sent = a->pending[0].sent;
    const double t0 = a->pending[0].t0;
    a->npending--;
    memmove(&a->pending[0], &a->pending[1], a->npending * sizeof(a->pending[0]));
    a->pending[a->npending].b = NULL;
    if (batch_acked(a, p, m, sent, t0) == 2)
        a->pending_refused++;
    ingest_sender_batch_destroy(p);
}

/* Read ACKs of pending batches (nothing else may come before them) until at most keep are pending. */
static int wait_pending_until(ingest_edge *a, unsigned keep)
{
    while (a->npending > keep) {
        ingest_wire_msg m;
        const double t = edge_now();
        const int rc = recv_msg(a, &m, a->reply_ms);
        a->st->wait_ack_s += edge_now() - t;
        if (rc < 0)
            return rc;
        if (!is_pending_ack(a, &m)) {
            edge_log(a, INGEST_LOG_ERROR, "unexpected %s from the receiver while waiting for the ack of batch %s",
                     ingest_wire_type_name(m.type), ingest_sender_batch_id(a->pending[0].b));
            return INGEST_EPROTO;
        }
        pending_acked(a, &m);
    }
    return 0;
}

int ingest_edge_wait_pending(ingest_edge *a)
{
    return wait_pending_until(a, 0);
}

/* The pending batches were not acknowledged (the connection failed): they are simply shipped again later. */
static void drop_pending(ingest_edge *a)
{
    for (unsigned i = 0; i < a->npending; i++) {
        ingest_sender_batch_destroy(a->pending[i].b);
        a->pending[i].b = NULL;
    }
    a->npending = 0;
}

static int finish_batch_once(ingest_edge *a, ingest_sender_batch *b, double t0)
{
    ingest_wire_msg m;
    uint32_t sent = 0;
    double t = edge_now();
    int stale = 0, rc = recv_msg(a, &m, a->reply_ms);
    if (rc < 0)
        return rc;
    const char *id = ingest_sender_batch_id(b);
    for (;;) {
        const double now = edge_now();
        if (is_pending_ack(a, &m)) {
            /* the previous batch became durable while this one ships */
            a->st->wait_ack_s += now - t;
            pending_acked(a, &m);
            t = edge_now();
            if ((rc = recv_msg(a, &m, a->reply_ms)) < 0)
                return rc;
            continue;
        }
        if (m.type == INGEST_MSG_ACK) {
            a->st->wait_ack_s += now - t;
            break;
        }
        if (m.type == INGEST_MSG_DELTA_BASE) {
            /* before the WANT that asks for its chunk (the hashes are copied: the next receive reuses the buffer) */
            if ((rc = take_delta_base(a, b, &m.u.delta_base)) < 0 || (rc = recv_msg(a, &m, a->reply_ms)) < 0)
                return rc;
            continue;
        }
        if (m.type == INGEST_MSG_RECEIVED) {
            a->st->wait_ack_s += now - t;
            if (!a->pipeline || strcmp(m.u.received.batch_id, id) != 0) {
                edge_log(a, INGEST_LOG_ERROR, "unexpected RECEIVED for batch %s while %s was open%s",
                         m.u.received.batch_id, id, a->pipeline ? "" : " (pipelining was not agreed)");
                return INGEST_EPROTO;
            }
            /* Everything is in; its ACK comes while the next batches ship.  At most
             * INGEST_EDGE_PENDING_MAX wait: the oldest's ACK first when they are as many. */
            if ((rc = wait_pending_until(a, INGEST_EDGE_PENDING_MAX - 1)) < 0)
                return rc;
            ingest__sender_batch_sent(b); /* what it kept for sending is not needed while it waits */
            a->pending[a->npending].b = b;
            a->pending[a->npending].sent = sent;
            a->pending[a->npending].t0 = t0;
            a->npending++;
            return 3;
        }
        a->st->wait_want_s += now - t;
        rc = serve_wants(a, b, &m, &sent, &stale);
        a->ndbase = 0; /* a chunk asked again after the COMMIT is sent whole */
        a->dpool_len = 0;
        a->dbase_closed = 1;
        t = edge_now();
        a->st->send_s += t - now;
        if (rc < 0)
            return rc;
        if (stale) {
            /* The previous batches' ACKs first (the receiver is making them durable), then tell the
             * receiver, which drops this batch and closes; the caller reconnects. */
            if ((rc = ingest_edge_wait_pending(a)) < 0)
                return rc;
            memset(&m, 0, sizeof(m));
            m.type = INGEST_MSG_ERROR;
            m.u.error.code = INGEST_ESTALE;
            snprintf(m.u.error.message, sizeof(m.u.error.message), "batch %s abandoned: a file changed", id);
            send_msg(a, &m, 0);
            a->st->batches_abandoned++;
            return 1;
        }
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_BATCH_COMMIT;
        snprintf(m.u.commit.batch_id, sizeof(m.u.commit.batch_id), "%s", id);
        m.u.commit.chunks_sent = sent;
        if ((rc = send_msg(a, &m, 0)) < 0)
            return rc;
        if ((rc = recv_msg(a, &m, a->reply_ms)) < 0)
            return rc;
    }
    if (strcmp(m.u.ack.batch_id, id) != 0) {
        edge_log(a, INGEST_LOG_ERROR, "ack for batch %s while %s was open", m.u.ack.batch_id, id);
        return INGEST_EPROTO;
    }
    if ((rc = ingest_edge_wait_pending(a)) < 0) /* never: the receiver acks in order */
        return rc;
    return batch_acked(a, b, &m, sent, t0);
}

/*
 * After the handshake, before any batch: offer compression.dictionary to
 * the receiver (docs/protocol.md, "Dictionaries"), send it if asked, and
 * compress with it only when the receiver holds it.  When it cannot be
 * used (an older receiver, or refused) chunks are compressed without it,
 * and the agent says why once.  0, or < 0 when the session failed.
 */
int ingest_edge_file_withdrawn(const ingest_sender_file_info *fi)
{
    return fi != NULL && fi->refused != NULL && fi->refused_code == INGEST_ENOTFOUND &&
           strcmp(fi->refused, INGEST_EDGE_WITHDRAWN_REASON) == 0;
}

int ingest_edge_landing_rules(ingest_edge *a, ingest_wire_landing *out)
{
    if (a->link == NULL || !(a->link->features & INGEST_SESSION_FEATURE_LANDING))
        return 0;
    if (!a->landing_taken) {
        ingest_wire_msg m;
        const int rc = ingest_link_recv(a->link, &m, INGEST_EDGE_REPLY_TIMEOUT_MS);
        if (rc < 0) {
            edge_log(a, edge_stopping(a) ? INGEST_LOG_INFO : INGEST_LOG_ERROR, "receive: %s: %s", ingest_strerror(rc),
                     ingest_link_recv_errmsg(a->link));
            return rc;
        }
        a->st->wire_in += ingest_wire_encoded_size(&m) + INGEST_EDGE_FRAME_OVERHEAD;
        if (m.type == INGEST_MSG_ERROR) {
            edge_log(a, INGEST_LOG_ERROR, "receiver reported: %s: %s", ingest_strerror(m.u.error.code),
                     edge_esc(m.u.error.message));
            return m.u.error.code < 0 ? m.u.error.code : INGEST_EPROTO;
        }
        if (m.type != INGEST_MSG_LANDING) {
            edge_log(a, INGEST_LOG_ERROR, "the receiver's first message was %s, not LANDING (the landing feature was agreed)",
                     ingest_wire_type_name(m.type));
            return INGEST_EPROTO;
        }
        a->landing = m.u.landing;
        a->landing_taken = 1;
    }
    char why[200];
    if (ingest__path_check_layout(a->landing.layout, why, sizeof why) != 0) {
        edge_log(a, INGEST_LOG_ERROR, "the receiver's layout \"%s\" breaks the layout rule: %s",
                 edge_esc(a->landing.layout), why);
        return INGEST_EPROTO;
    }
    *out = a->landing;
    return 1;
}

int ingest_edge_offer_dict(ingest_edge *a)
{
    if (a->o.dict == NULL)
        return 0;
    char why[INGEST_WIRE_MESSAGE_MAX + 64] = "";
    ingest_wire_msg m;
    if (!(a->link->features & INGEST_SESSION_FEATURE_DICT)) {
        snprintf(why, sizeof(why), "the receiver does not take dictionaries (a version without the dict feature)");
    } else {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_DICT_OFFER;
        m.u.dict_offer.dict_id = a->dict_id;
        m.u.dict_offer.size = (uint32_t)a->o.dict_len;
        memcpy(m.u.dict_offer.hash, a->dict_hash, sizeof(m.u.dict_offer.hash));
        int rc = send_msg(a, &m, 0);
        if (rc == 0)
            rc = recv_msg(a, &m, INGEST_EDGE_REPLY_TIMEOUT_MS);
        if (rc < 0)
            return rc;
        if (m.type != INGEST_MSG_DICT_WANT || m.u.dict_want.dict_id != a->dict_id) {
            edge_log(a, INGEST_LOG_ERROR, "the receiver answered the offer of dictionary %u with %s", (unsigned)a->dict_id,
                     ingest_wire_type_name(m.type));
            return INGEST_EPROTO;
        }
        if (m.u.dict_want.answer == INGEST_DICT_REFUSED) {
            snprintf(why, sizeof(why), "the receiver refused it: %s", edge_esc(m.u.dict_want.message));
        } else if (m.u.dict_want.answer == INGEST_DICT_SEND) {
            /* In slices within the receiver's frame bound (at least 64 bytes: 8 of them the slice's head). */
            const size_t peer = a->link->peer_max_payload;
            const size_t slice = peer > 1024u * 1024u + 8u ? 1024u * 1024u : peer - 8u;
            for (size_t off = 0; off < a->o.dict_len; off += slice) {
                memset(&m, 0, sizeof(m));
                m.type = INGEST_MSG_DICT_DATA;
                m.u.dict_data.dict_id = a->dict_id;
                m.u.dict_data.offset = (uint32_t)off;
                m.u.dict_data.data = a->o.dict + off;
                m.u.dict_data.len = a->o.dict_len - off < slice ? a->o.dict_len - off : slice;
                if ((rc = send_msg(a, &m, 0)) < 0)
                    return rc;
            }
            edge_log(a, INGEST_LOG_INFO, "dictionary %u (%zu bytes) sent to the receiver", (unsigned)a->dict_id,
                     a->o.dict_len);
        }
    }
    if (why[0] != '\0') {
        if (!a->dict_said)
            edge_log(a, INGEST_LOG_WARN, "compression.dictionary %s is not used: %s; chunks are compressed without it",
                     a->o.dict_name ? a->o.dict_name : "the dictionary", why);
        a->dict_said = 1;
        return ingest_codec_use_dict(a->o.codec, 0);
    }
    return ingest_codec_use_dict(a->o.codec, a->dict_id);
}

