/*
 * Kafka links (include/ingest/klink.h): the protocol's messages carried as
 * sealed records through a record bus.  The edge link answers the edge in
 * the core's place (WANT from the have-cache, RECEIVED from delivery
 * reports, ACK from the core's reply); the core link feeds the core the
 * records of one device, keeps only the chunks the core asked for, and
 * turns the core's answers into replies.
 */
#include "../internal.h"
#include "ingest/codec.h"
#include "ingest/klink.h"
#include "ingest/manifest.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KCORE_QUEUE_DEFAULT (8u * 1024u * 1024u)
#define KCORE_REPLY_MAX (256u * 1024u)

/* ---- shared ------------------------------------------------------------------- */

/* Both directions of a link share this part: the record buffers and their key. */
typedef struct kpub {
    ingest_ctx *ctx;          /* the allocator */
    ingest_ctx *sctx, *rctx;  /* details of the send / receive direction */
    ingest_kbus bus;
    char device[INGEST_DEVICE_ID_MAX + 1];
    ingest_krec_keys keys;
    size_t record_max;
    uint8_t *plain, *rec;     /* record_max bytes each */
    uint8_t *enc;             /* a message's encoded payload */
    size_t enccap;
    ingest_klink_stats st;
    pthread_mutex_t smu;      /* sends (and the buffers above) */
} kpub;

static int kpub_init(kpub *p, ingest_ctx *ctx, const char *device, const ingest_krec_keys *keys, ingest_kbus bus,
                     size_t record_max)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->smu, NULL);
    p->ctx = ctx;
    p->bus = bus;
    p->record_max = record_max ? record_max : INGEST_KREC_MAX;
    if (device == NULL || !ingest_wire_id_valid(device, strlen(device)) || keys == NULL || bus.produce == NULL ||
        p->record_max < 1024 || p->record_max > INGEST_KREC_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "kafka link: a device id, keys, a bus and a record bound of 1 KiB.."
                                               "%u are needed", INGEST_KREC_MAX);
    snprintf(p->device, sizeof(p->device), "%s", device);
    p->keys = *keys;
    if ((p->sctx = ingest_ctx_create(NULL)) == NULL || (p->rctx = ingest_ctx_create(NULL)) == NULL ||
        (p->plain = ingest__malloc(ctx, p->record_max)) == NULL || (p->rec = ingest__malloc(ctx, p->record_max)) == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "kafka link: out of memory");
    return 0;
}

static void kpub_fini(kpub *p)
{
    ingest_ctx_destroy(p->sctx);
    ingest_ctx_destroy(p->rctx);
    ingest__free(p->ctx, p->plain);
    ingest__free(p->ctx, p->rec);
    ingest__free(p->ctx, p->enc);
    ingest_krec_keys_wipe(&p->keys);
    pthread_mutex_destroy(&p->smu);
}

/* Seal body under h and publish it (caller holds smu); h->seq moves on. */
static int kpub_record(kpub *p, ingest_krec_hdr *h, const ingest_krec_body *b, const uint32_t *idx, uint64_t token)
{
    size_t n = 0, len = 0;
    int rc = ingest_krec_body_encode(p->sctx, b, idx, p->plain, p->record_max, &n);
    if (rc == 0)
        rc = ingest_krec_seal(p->sctx, p->keys.seal, h, p->plain, n, p->rec, p->record_max, &len);
    if (rc < 0)
        return rc;
    char why[256] = "";
    rc = p->bus.produce(p->bus.ud, p->device, p->rec, len, token, why, sizeof(why));
    if (rc < 0)
        return ingest__fail(p->sctx, rc, "kafka: record %u of batch %s not published: %s", h->seq, h->batch, why);
    h->seq++;
    p->st.records++;
    p->st.record_bytes += len;
    return 0;
}

/* Publish message m in as many records as it takes (caller holds smu). */
static int kpub_msg(kpub *p, ingest_krec_hdr *h, const ingest_wire_msg *m, uint64_t token)
{
    const size_t n = ingest_wire_encoded_size(m);
    if (n == 0)
        return ingest__fail(p->sctx, INGEST_EINVAL, "kafka link: %s cannot be encoded", ingest_wire_type_name(m->type));
    if (n > p->enccap) {
        uint8_t *e = ingest__realloc(p->ctx, p->enc, 0, n);
        if (e == NULL)
            return ingest__fail(p->sctx, INGEST_ENOMEM, "kafka link: out of memory for a message of %zu bytes", n);
        p->enc = e;
        p->enccap = n;
    }
    size_t len = 0;
    INGEST__FORWARD(ingest_wire_encode(p->sctx, m, p->enc, p->enccap, &len));
    ingest_krec_body b;
    memset(&b, 0, sizeof(b));
    b.type = (unsigned)ingest_krec_msg_type(m->type);
    h->type = b.type;
    const size_t over = ingest_krec_sealed_size(h, 12);
    if (b.type == 0 || over == 0 || over >= p->record_max)
        return ingest__fail(p->sctx, INGEST_EINVAL, "kafka link: %s does not travel in a record",
                            ingest_wire_type_name(m->type));
    const size_t piece = p->record_max - over;
    size_t off = 0;
    do {
        const size_t k = len - off < piece ? len - off : piece;
        b.u.msg.wtype = m->type;
        b.u.msg.offset = (uint32_t)off;
        b.u.msg.total = (uint32_t)len;
        b.u.msg.data = p->enc + off;
        b.u.msg.len = k;
        INGEST__FORWARD(kpub_record(p, h, &b, NULL, token));
        off += k;
    } while (off < len);
    return 0;
}

static int deadline_wait(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *until)
{
    if (until == NULL) {
        pthread_cond_wait(cv, mu);
        return 0;
    }
    return pthread_cond_timedwait(cv, mu, until) == ETIMEDOUT;
}

static const struct timespec *deadline(struct timespec *ts, int timeout_ms)
{
    if (timeout_ms < 0)
        return NULL;
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += timeout_ms / 1000;
    ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
    return ts;
}

/* ---- the edge link ---------------------------------------------------------------- */

typedef struct kbatch {
    struct kbatch *next;
    ingest_krec_hdr h;      /* batch id, next record number */
    uint64_t serial;        /* the token of its records */
    uint64_t nrec, ndelivered;
    int committed, received_sent;
    int answered;           /* the core replied before the commit was sent */
    int wants_out;          /* its WANT was given to the edge */
    int early;              /* answered before that: early_ack follows the WANT */
    ingest_wire_msg early_ack;
    uint8_t (*ids)[INGEST_ID_BYTES];
    uint32_t nids;
    uint8_t *mbuf;          /* the manifest's bytes, until MANIFEST_END */
    size_t mlen, mcap;
} kbatch;

typedef struct omsg {
    struct omsg *next;
    unsigned type;
    size_t len;
    uint8_t bytes[];
} omsg;

typedef struct kedge {
    ingest_link base;
    kpub p;
    ingest_klink_edge_opts o;
    ingest_codec *codec;     /* decodes packed manifest parts */
    pthread_mutex_t mu;      /* everything below */
    pthread_cond_t cv;
    kbatch *cur;             /* being sent */
    kbatch *wait;            /* committed, waiting for their reply, oldest first */
    uint64_t serial;
    omsg *head, *tail, *held;
    int down, failed;
    char why[320];
} kedge;

static void kbatch_free(ingest_ctx *ctx, kbatch *b)
{
    if (b == NULL)
        return;
    ingest__free(ctx, b->ids);
    ingest__free(ctx, b->mbuf);
    ingest__free(ctx, b);
}

/* Queue message m for the edge to receive (under mu). */
static int edge_put(kedge *e, const ingest_wire_msg *m)
{
    const size_t n = ingest_wire_encoded_size(m);
    omsg *o = n ? ingest__malloc(e->p.ctx, sizeof(*o) + n) : NULL;
    if (o == NULL)
        return ingest__fail(e->p.sctx, INGEST_ENOMEM, "kafka link: out of memory");
    if (ingest_wire_encode(e->p.sctx, m, o->bytes, n, &o->len) < 0) {
        ingest__free(e->p.ctx, o);
        return INGEST_EINVAL;
    }
    o->type = m->type;
    o->next = NULL;
    if (e->tail)
        e->tail->next = o;
    else
        e->head = o;
    e->tail = o;
    pthread_cond_broadcast(&e->cv);
    return 0;
}

static void edge_fail(kedge *e, const char *why)
{
    if (!e->failed)
        snprintf(e->why, sizeof(e->why), "%s", why);
    e->failed = 1;
    pthread_cond_broadcast(&e->cv);
}

/* RECEIVED for the batches whose records are all delivered, in order (under mu). */
static void edge_progress(kedge *e)
{
    if (!(e->base.features & INGEST_SESSION_FEATURE_PIPELINE))
        return;
    for (kbatch *b = e->wait; b != NULL; b = b->next) {
        if (b->received_sent)
            continue;
        if (b->ndelivered < b->nrec)
            return;
        ingest_wire_msg m;
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_RECEIVED;
        snprintf(m.u.received.batch_id, sizeof(m.u.received.batch_id), "%s", b->h.batch);
        if (edge_put(e, &m) < 0) {
            edge_fail(e, "out of memory");
            return;
        }
        b->received_sent = 1;
    }
}

void ingest_klink_delivered(ingest_link *l, uint64_t token, int ok, const char *why)
{
    kedge *e = (kedge *)l;
    pthread_mutex_lock(&e->mu);
    kbatch *b = e->cur != NULL && e->cur->serial == token ? e->cur : NULL;
    for (kbatch *w = e->wait; b == NULL && w != NULL; w = w->next)
        if (w->serial == token)
            b = w;
    if (b != NULL) {
        if (ok) {
            b->ndelivered++;
            edge_progress(e);
        } else {
            char msg[300];
            snprintf(msg, sizeof(msg), "a record of batch %s was not delivered: %s", b->h.batch, why ? why : "?");
            edge_fail(e, msg);
        }
    }
    pthread_mutex_unlock(&e->mu);
}

/* Sort key for finding each chunk id's first index in a batch. */
typedef struct idref {
    const uint8_t *id;
    uint32_t i;
} idref;

static int cmp_idref(const void *x, const void *y)
{
    const idref *a = x, *b = y;
    const int c = memcmp(a->id, b->id, INGEST_ID_BYTES);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

static int cmp_u32(const void *x, const void *y)
{
    const uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* Read the chunk ids of b's manifest into b->ids. */
static int edge_manifest_ids(kedge *e, kbatch *b)
{
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    uint32_t cap = 0;
    int rc = ingest_manifest_reader_mem(e->p.sctx, b->mbuf, b->mlen, &r);
    if (rc < 0)
        return rc;
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL);
    while ((rc = ingest_manifest_reader_next(r, &rec)) == 1) {
        if (rec.type == INGEST_MREC_HEADER)
            continue;
        if (b->nids + (uint64_t)rec.nchunks > UINT32_MAX - 1) {
            rc = ingest__fail(e->p.sctx, INGEST_ETOOBIG, "kafka link: too many chunks in batch %s", b->h.batch);
            break;
        }
        if (b->nids + rec.nchunks > cap) {
            uint32_t ncap = cap ? cap : 1024;
            while (ncap < b->nids + rec.nchunks)
                ncap *= 2;
            void *n = ingest__realloc(e->p.ctx, b->ids, (size_t)cap * INGEST_ID_BYTES, (size_t)ncap * INGEST_ID_BYTES);
            if (n == NULL) {
                rc = ingest__fail(e->p.sctx, INGEST_ENOMEM, "kafka link: out of memory");
                break;
            }
            b->ids = n;
            cap = ncap;
        }
        for (uint32_t k = 0; k < rec.nchunks; k++)
            memcpy(b->ids[b->nids++], rec.chunks[k].id, INGEST_ID_BYTES);
    }
    ingest_manifest_reader_close(r);
    ingest__free(e->p.ctx, b->mbuf);
    b->mbuf = NULL;
    b->mlen = b->mcap = 0;
    return rc < 0 ? rc : 0;
}

/* The WANT the core would send: the first index of every chunk id the have-cache lacks (under smu). */
static int edge_wants(kedge *e, kbatch *b)
{
    idref *refs = b->nids ? ingest__malloc(e->p.ctx, (size_t)b->nids * sizeof(*refs)) : NULL;
    uint32_t *w = b->nids ? ingest__malloc(e->p.ctx, (size_t)b->nids * sizeof(*w)) : NULL;
    if (b->nids && (refs == NULL || w == NULL)) {
        ingest__free(e->p.ctx, refs);
        ingest__free(e->p.ctx, w);
        return ingest__fail(e->p.sctx, INGEST_ENOMEM, "kafka link: out of memory");
    }
    for (uint32_t i = 0; i < b->nids; i++)
        refs[i] = (idref){ b->ids[i], i };
    if (b->nids > 1)
        qsort(refs, b->nids, sizeof(*refs), cmp_idref);
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->nids; i++) {
        if (i > 0 && memcmp(refs[i].id, refs[i - 1].id, INGEST_ID_BYTES) == 0)
            continue;
        if (e->o.have == NULL || e->o.have(e->o.ud, refs[i].id) != 1)
            w[n++] = refs[i].i;
    }
    ingest__free(e->p.ctx, refs);
    if (n > 1)
        qsort(w, n, sizeof(*w), cmp_u32);
    const uint32_t per = (INGEST_WIRE_MAX_PAYLOAD - 256) / 4;
    uint32_t off = 0;
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    do {
        const uint32_t k = n - off < per ? n - off : per;
        ingest_wire_msg m;
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_WANT;
        snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", b->h.batch);
        m.u.want.count = k;
        m.u.want.idx = w ? w + off : NULL;
        m.u.want.flags = off + k < n ? INGEST_WANT_MORE : 0;
        rc = edge_put(e, &m);
        off += k;
    } while (rc == 0 && off < n);
    b->wants_out = 1;
    if (rc == 0 && b->early)
        rc = edge_put(e, &b->early_ack); /* the answer that came first goes after the WANT it ends */
    pthread_mutex_unlock(&e->mu);
    ingest__free(e->p.ctx, w);
    return rc;
}

/* Keep a manifest part's bytes (decoded when packed) for the WANT. */
static int edge_keep_manifest(kedge *e, kbatch *b, const uint8_t *data, size_t len)
{
    size_t raw = len;
    if (e->base.features & INGEST_SESSION_FEATURE_PACK) {
        uint32_t r = 0;
        INGEST__FORWARD(ingest_codec_raw_size(data, len, &r));
        raw = r;
    }
    if (raw > INGEST_WIRE_MANIFEST_PART_MAX_RAW || b->mlen + raw > (size_t)1 << 30)
        return ingest__fail(e->p.sctx, INGEST_ETOOBIG, "kafka link: manifest of batch %s too large", b->h.batch);
    if (b->mlen + raw > b->mcap) {
        size_t cap = b->mcap ? b->mcap : 1 << 16;
        while (cap < b->mlen + raw)
            cap *= 2;
        uint8_t *n = ingest__realloc(e->p.ctx, b->mbuf, b->mcap, cap);
        if (n == NULL)
            return ingest__fail(e->p.sctx, INGEST_ENOMEM, "kafka link: out of memory");
        b->mbuf = n;
        b->mcap = cap;
    }
    if (e->base.features & INGEST_SESSION_FEATURE_PACK) {
        size_t got = 0;
        INGEST__FORWARD(ingest_codec_decode(e->codec, data, len, b->mbuf + b->mlen, raw, &got, NULL, NULL));
        raw = got;
    } else {
        memcpy(b->mbuf + b->mlen, data, len);
    }
    b->mlen += raw;
    return 0;
}

static int edge_send_locked(kedge *e, const ingest_wire_msg *m)
{
    kbatch *b = e->cur;
    switch (m->type) {
    case INGEST_MSG_BATCH_BEGIN: {
        kbatch *n = ingest__calloc(e->p.ctx, 1, sizeof(*n));
        if (n == NULL)
            return ingest__fail(e->p.sctx, INGEST_ENOMEM, "kafka link: out of memory");
        snprintf(n->h.device, sizeof(n->h.device), "%s", e->p.device);
        snprintf(n->h.batch, sizeof(n->h.batch), "%s", m->u.begin.batch_id);
        pthread_mutex_lock(&e->mu);
        n->serial = ++e->serial;
        kbatch *old = e->cur;
        e->cur = n;
        pthread_mutex_unlock(&e->mu);
        kbatch_free(e->p.ctx, old);
        b = n;
        break;
    }
    case INGEST_MSG_MANIFEST_PART:
        if (b == NULL)
            return ingest__fail(e->p.sctx, INGEST_EPROTO, "kafka link: MANIFEST_PART outside a batch");
        INGEST__FORWARD(edge_keep_manifest(e, b, m->u.manifest_part.data, m->u.manifest_part.len));
        break;
    case INGEST_MSG_MANIFEST_END:
    case INGEST_MSG_CHUNK:
    case INGEST_MSG_CHUNK_GROUP:
    case INGEST_MSG_BATCH_COMMIT:
        if (b == NULL)
            return ingest__fail(e->p.sctx, INGEST_EPROTO, "kafka link: %s outside a batch",
                                ingest_wire_type_name(m->type));
        break;
    case INGEST_MSG_ERROR:
        if (b == NULL)
            return 0; /* nothing open: the core has nothing to drop */
        break;
    case INGEST_MSG_PING: {
        ingest_wire_msg p = *m;
        p.type = INGEST_MSG_PONG;
        pthread_mutex_lock(&e->mu);
        const int rc = edge_put(e, &p);
        pthread_mutex_unlock(&e->mu);
        return rc;
    }
    default:
        return ingest__fail(e->p.sctx, INGEST_EPROTO, "kafka link: %s is not carried over Kafka",
                            ingest_wire_type_name(m->type));
    }
    INGEST__FORWARD(kpub_msg(&e->p, &b->h, m, b->serial));
    pthread_mutex_lock(&e->mu);
    b->nrec = b->h.seq;
    pthread_mutex_unlock(&e->mu);
    if (m->type == INGEST_MSG_MANIFEST_END) {
        INGEST__FORWARD(edge_manifest_ids(e, b));
        return edge_wants(e, b);
    }
    if (m->type == INGEST_MSG_BATCH_COMMIT || m->type == INGEST_MSG_ERROR) {
        pthread_mutex_lock(&e->mu);
        e->cur = NULL;
        if (m->type == INGEST_MSG_BATCH_COMMIT && !b->answered) {
            b->committed = 1;
            kbatch **t = &e->wait;
            while (*t != NULL)
                t = &(*t)->next;
            *t = b;
            b = NULL;
            edge_progress(e);
        }
        pthread_mutex_unlock(&e->mu);
        kbatch_free(e->p.ctx, b);
    }
    return 0;
}

static int edge_send(ingest_link *l, const ingest_wire_msg *m)
{
    kedge *e = (kedge *)l;
    pthread_mutex_lock(&e->p.smu);
    pthread_mutex_lock(&e->mu);
    const int down = e->down, failed = e->failed;
    pthread_mutex_unlock(&e->mu);
    int rc;
    if (down)
        rc = ingest__fail(e->p.sctx, INGEST_ECLOSED, "the link is closed");
    else if (failed)
        rc = ingest__fail(e->p.sctx, INGEST_EIO, "%s", e->why);
    else
        rc = edge_send_locked(e, m);
    pthread_mutex_unlock(&e->p.smu);
    return rc;
}

static int edge_recv(ingest_link *l, ingest_wire_msg *out, int timeout_ms)
{
    kedge *e = (kedge *)l;
    struct timespec ts;
    const struct timespec *until = deadline(&ts, timeout_ms);
    ingest__free(e->p.ctx, e->held);
    e->held = NULL;
    pthread_mutex_lock(&e->mu);
    int timed_out = 0;
    while (e->head == NULL && !e->down && !e->failed && !timed_out)
        timed_out = deadline_wait(&e->cv, &e->mu, until);
    omsg *o = e->head;
    if (o != NULL) {
        e->head = o->next;
        if (e->head == NULL)
            e->tail = NULL;
    }
    const int down = e->down, failed = e->failed;
    pthread_mutex_unlock(&e->mu);
    if (o == NULL) {
        if (down)
            return ingest__fail(e->p.rctx, INGEST_ECLOSED, "the link is closed");
        if (failed)
            return ingest__fail(e->p.rctx, INGEST_EIO, "%s", e->why);
        return ingest__fail(e->p.rctx, INGEST_ETIMEDOUT, "no answer from the core within %d ms", timeout_ms);
    }
    e->held = o;
    memset(out, 0, sizeof(*out));
    const int rc = ingest_wire_decode(e->p.rctx, o->type, o->bytes, o->len, out);
    out->type = (uint8_t)o->type;
    return rc;
}

int ingest_klink_edge_reply(ingest_link *l, const uint8_t *rec, size_t len)
{
    kedge *e = (kedge *)l;
    ingest_krec_hdr h;
    INGEST__FORWARD(ingest_krec_peek(e->p.rctx, rec, len, &h));
    if (strcmp(h.device, e->p.device) != 0)
        return 1;
    if (h.type != INGEST_KREC_LANDED && h.type != INGEST_KREC_NEEDED)
        return ingest__fail(e->p.rctx, INGEST_EPROTO, "reply of type %u", h.type);
    uint8_t *plain = ingest__malloc(e->p.ctx, len);
    if (plain == NULL)
        return ingest__fail(e->p.rctx, INGEST_ENOMEM, "out of memory");
    size_t n = 0;
    ingest_krec_body body;
    int rc = ingest_krec_open(e->p.rctx, e->p.keys.open, rec, len, &h, plain, len, &n);
    if (rc == 0)
        rc = ingest_krec_body_decode(e->p.rctx, h.type, plain, n, &body);
    if (rc < 0) {
        ingest__free(e->p.ctx, plain);
        return rc;
    }
    pthread_mutex_lock(&e->mu);
    kbatch *b = e->wait, *keep = NULL;
    while (b != NULL && strcmp(b->h.batch, h.batch) != 0)
        b = b->next;
    if (b == NULL && e->cur != NULL && !e->cur->answered && strcmp(e->cur->h.batch, h.batch) == 0) {
        /* answered while still being sent (landed before, refused, or given up): the edge reads the
         * answer after its commit; the batch stays the sender's until then */
        b = keep = e->cur;
        b->answered = 1;
    }
    if (b == NULL) {
        e->p.st.replies_ignored++;
        pthread_mutex_unlock(&e->mu);
        ingest__free(e->p.ctx, plain);
        return 1;
    }
    /* The core answers a device's batches in their order: the batches committed before this one that
     * it never answered never reached it (their records were lost on the way); they go again. */
    kbatch *older = NULL;
    if (keep == NULL) {
        if (e->wait != b) {
            older = e->wait;
            kbatch *t = older;
            while (t->next != b)
                t = t->next;
            t->next = NULL;
        }
        e->wait = b->next;
    } else {
        older = e->wait;
        e->wait = NULL;
    }
    for (kbatch *a = older, *an; a != NULL; a = an) {
        an = a->next;
        ingest_wire_msg lm;
        memset(&lm, 0, sizeof(lm));
        if ((e->base.features & INGEST_SESSION_FEATURE_PIPELINE) && !a->received_sent) {
            lm.type = INGEST_MSG_RECEIVED;
            snprintf(lm.u.received.batch_id, sizeof(lm.u.received.batch_id), "%s", a->h.batch);
            (void)edge_put(e, &lm);
            memset(&lm, 0, sizeof(lm));
        }
        lm.type = INGEST_MSG_ACK;
        snprintf(lm.u.ack.batch_id, sizeof(lm.u.ack.batch_id), "%s", a->h.batch);
        lm.u.ack.status = INGEST_ESTALE;
        snprintf(lm.u.ack.message, sizeof(lm.u.ack.message),
                 "its records never reached the core (batch %s after it was answered); shipping it again", b->h.batch);
        (void)edge_put(e, &lm);
        e->p.st.batches_lost++;
        kbatch_free(e->p.ctx, a);
    }
    e->p.st.replies++;
    if (keep == NULL && (e->base.features & INGEST_SESSION_FEATURE_PIPELINE) && !b->received_sent) {
        /* the reply came before the last delivery report: the records are in, whatever the report says */
        b->ndelivered = b->nrec;
        b->next = e->wait;
        e->wait = b;
        edge_progress(e);
        e->wait = b->next;
    }
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ACK;
    snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", b->h.batch);
    if (h.type == INGEST_KREC_LANDED) {
        m.u.ack.status = body.u.landed.status;
        snprintf(m.u.ack.message, sizeof(m.u.ack.message), "%s", body.u.landed.message);
        if (m.u.ack.status == INGEST_ESTALE && (keep == NULL || b->wants_out))
            for (uint32_t k = 0; e->o.unheld != NULL && k < b->nids; k++)
                e->o.unheld(e->o.ud, b->ids[k]); /* no list: the whole batch goes again */
    } else {
        /* The core lacks these: out of the have-cache; the batch's other chunks it holds. */
        e->p.st.batches_needed++;
        /* (the chunk list is still being read while the manifest goes out: then no id is touched) */
        uint8_t *need = keep == NULL || b->wants_out ? ingest__calloc(e->p.ctx, b->nids ? b->nids : 1, 1) : NULL;
        uint32_t named = 0;
        for (uint32_t i = 0; i < body.u.needed.count; i++) {
            const uint32_t k = ingest_krec_needed_index(&body, i);
            if (need != NULL && k < b->nids) {
                need[k] = 1;
                named++;
                if (e->o.unheld)
                    e->o.unheld(e->o.ud, b->ids[k]);
            }
        }
        for (uint32_t k = 0; need != NULL && k < b->nids; k++)
            if (!need[k] && e->o.held)
                e->o.held(e->o.ud, b->ids[k]);
        ingest__free(e->p.ctx, need);
        m.u.ack.status = INGEST_ESTALE;
        snprintf(m.u.ack.message, sizeof(m.u.ack.message),
                 "the core needs %u chunks of it that it was thought to hold; shipping it again", named);
    }
    if (keep != NULL && !keep->wants_out) {
        keep->early = 1; /* given after the WANT the edge is about to read */
        keep->early_ack = m;
        rc = 0;
    } else {
        rc = edge_put(e, &m);
    }
    pthread_mutex_unlock(&e->mu);
    if (keep == NULL)
        kbatch_free(e->p.ctx, b);
    ingest__free(e->p.ctx, plain);
    return rc;
}

static const char *edge_send_errmsg(ingest_link *l)
{
    return ingest_ctx_errmsg(((kedge *)l)->p.sctx);
}

static const char *edge_recv_errmsg(ingest_link *l)
{
    return ingest_ctx_errmsg(((kedge *)l)->p.rctx);
}

static void edge_shutdown(ingest_link *l)
{
    kedge *e = (kedge *)l;
    pthread_mutex_lock(&e->mu);
    e->down = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void edge_destroy(ingest_link *l)
{
    kedge *e = (kedge *)l;
    ingest_ctx *ctx = e->p.ctx;
    kbatch_free(ctx, e->cur);
    for (kbatch *b = e->wait, *n; b != NULL; b = n) {
        n = b->next;
        kbatch_free(ctx, b);
    }
    for (omsg *o = e->head, *n; o != NULL; o = n) {
        n = o->next;
        ingest__free(ctx, o);
    }
    ingest__free(ctx, e->held);
    ingest_codec_destroy(e->codec);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    kpub_fini(&e->p);
    ingest__free(ctx, e);
}

static const ingest_link_ops edge_ops = {
    "kafka", edge_send, edge_recv, edge_send_errmsg, edge_recv_errmsg, edge_shutdown, edge_destroy,
};

int ingest_klink_edge_create(ingest_ctx *ctx, const ingest_klink_edge_opts *o, ingest_link **out)
{
    *out = NULL;
    kedge *e = ingest__calloc(ctx, 1, sizeof(*e));
    if (e == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "kafka link: out of memory");
    int rc = kpub_init(&e->p, ctx, o->device, o->keys, o->bus, o->record_max);
    if (rc == 0 && ingest_codec_create(ctx, 1, &e->codec) < 0)
        rc = INGEST_ENOMEM;
    if (rc < 0) {
        ingest_codec_destroy(e->codec);
        kpub_fini(&e->p);
        ingest__free(ctx, e);
        return rc;
    }
    e->o = *o;
    e->o.device = e->p.device;
    e->o.keys = NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->base.ops = &edge_ops;
    /* No handshake agrees on features: over Kafka both ends always pack and shuffle (docs/kafka.md). */
    e->base.features = (o->features & INGEST_SESSION_FEATURE_PIPELINE) | INGEST_SESSION_FEATURE_PACK |
                       INGEST_SESSION_FEATURE_SHUFFLE2;
    e->base.peer_max_payload = INGEST_WIRE_MAX_PAYLOAD;
    e->base.recv_sliceable = 1;
    snprintf(e->base.peer, sizeof(e->base.peer), "kafka");
    snprintf(e->base.silence, sizeof(e->base.silence),
             "the receivers skip, unanswered, the records of a device they do not authorize: is device %s in "
             "their authorized_devices, with this device's public key? Else they are stopped or far behind",
             e->p.device);
    snprintf(e->base.detail, sizeof(e->base.detail), "sealed records, XChaCha20-Poly1305");
    *out = &e->base;
    return 0;
}

/* ---- the core link ---------------------------------------------------------------- */

typedef struct kitem {
    struct kitem *next;
    char batch[INGEST_WIRE_BATCH_ID_MAX + 1];
    uint32_t seq;
    unsigned wtype;
    uint32_t offset, total;
    uint64_t token;
    size_t len;
    uint8_t data[];
} kitem;

enum { KS_NONE, KS_MANIFEST, KS_WAIT_WANT, KS_CHUNKS, KS_COMMITTED, KS_DONE };
/* Why a batch is given up: KA_STALE and KA_NEEDED are answered (LANDED with INGEST_ESTALE, NEEDED);
 * KA_AGAIN is not: the device began the same batch again, waits for that copy's answer, and would take
 * one about the copy cut off (answered by batch id) for it. */
enum { KA_NONE, KA_STALE, KA_NEEDED, KA_AGAIN };

typedef struct kcore {
    ingest_link base;
    kpub p;
    ingest_klink_core_opts o;
    size_t queue_max;
    pthread_mutex_t mu; /* everything below but the reassembly */
    pthread_cond_t cv;
    kitem *head, *tail;
    size_t qbytes;
    int down, retired, stopped, dropped;
    /* the batch being fed to the core */
    char batch[INGEST_WIRE_BATCH_ID_MAX + 1];
    int state;
    uint32_t next_seq;
    uint64_t begin_token;
    uint32_t *want;          /* indexes the core asked for, ascending */
    uint8_t *got;            /* want[i] was given to the core */
    size_t nwant, capwant, ngot;
    int abort;               /* KA_*: end the serve at the next receive */
    char abort_why[320];
    int recv_closed, recv_rc;
    char orphan_told[INGEST_WIRE_BATCH_ID_MAX + 1]; /* the last batch told its beginning never came */
    int orphan_pending;                              /* ... and the telling is still to be done */
    /* reassembly of a message (the receiving thread only) */
    uint8_t *mb;
    size_t mlen, mcap;
    unsigned mtype;
    uint32_t mtotal;
    int in_msg;
} kcore;

static int want_find(const kcore *c, uint32_t idx)
{
    size_t lo = 0, hi = c->nwant;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (c->want[mid] < idx)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->nwant && c->want[lo] == idx ? (int)lo : -1;
}

/* Add idx to the wanted indexes (kept ascending; under mu). */
static int want_add(kcore *c, uint32_t idx)
{
    if (want_find(c, idx) >= 0)
        return 0;
    if (c->nwant == c->capwant) {
        const size_t cap = c->capwant ? c->capwant * 2 : 256;
        uint32_t *w = ingest__realloc(c->p.ctx, c->want, c->capwant * sizeof(*w), cap * sizeof(*w));
        uint8_t *g = w ? ingest__realloc(c->p.ctx, c->got, c->capwant, cap) : NULL;
        if (w != NULL)
            c->want = w;
        if (g == NULL)
            return INGEST_ENOMEM;
        c->got = g;
        c->capwant = cap;
    }
    size_t at = c->nwant;
    while (at > 0 && c->want[at - 1] > idx)
        at--;
    memmove(c->want + at + 1, c->want + at, (c->nwant - at) * sizeof(*c->want));
    memmove(c->got + at + 1, c->got + at, c->nwant - at);
    c->want[at] = idx;
    c->got[at] = 0;
    c->nwant++;
    return 0;
}

static void core_abort(kcore *c, int kind, const char *fmt, ...) INGEST__PRINTF(3, 4);
static void core_abort(kcore *c, int kind, const char *fmt, ...)
{
    if (c->abort == KA_NONE) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->abort_why, sizeof(c->abort_why), fmt, ap);
        va_end(ap);
        c->abort = kind;
    }
    pthread_cond_broadcast(&c->cv);
}

/* Publish a reply about batch (under smu). */
static int core_reply(kcore *c, const char *batch, const ingest_krec_body *b, const uint32_t *idx)
{
    ingest_krec_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = b->type;
    snprintf(h.device, sizeof(h.device), "%s", c->p.device);
    snprintf(h.batch, sizeof(h.batch), "%s", batch);
    return kpub_record(&c->p, &h, b, idx, 0);
}

static int core_reply_landed(kcore *c, const char *batch, int status, const char *msg)
{
    ingest_krec_body b;
    memset(&b, 0, sizeof(b));
    b.type = INGEST_KREC_LANDED;
    b.u.landed.status = status;
    snprintf(b.u.landed.message, sizeof(b.u.landed.message), "%s", msg);
    pthread_mutex_lock(&c->p.smu);
    const int rc = core_reply(c, batch, &b, NULL);
    pthread_mutex_unlock(&c->p.smu);
    return rc;
}

/* The batch being fed is over (under mu): tell the owner, once. */
static void core_batch_over(kcore *c)
{
    if (c->state != KS_NONE && c->state != KS_DONE && c->o.batch_done != NULL)
        c->o.batch_done(c->o.ud, c->begin_token);
    c->state = KS_DONE;
}

/* End the serve of a batch given up (called by the receiving thread, mu not held). */
static int core_give_up(kcore *c)
{
    pthread_mutex_lock(&c->mu);
    const int kind = c->abort;
    char batch[sizeof(c->batch)], why[sizeof(c->abort_why)];
    snprintf(batch, sizeof(batch), "%s", c->batch);
    snprintf(why, sizeof(why), "%s", c->abort_why);
    uint32_t *need = NULL;
    size_t n = 0;
    if (kind == KA_NEEDED && c->nwant > 0 && c->nwant <= (KCORE_REPLY_MAX - INGEST_KREC_OVERHEAD_MAX - 8) / 4 &&
        (need = ingest__malloc(c->p.ctx, c->nwant * sizeof(*need))) != NULL) {
        memcpy(need, c->want, c->nwant * sizeof(*need));
        n = c->nwant;
    }
    const int state = c->state;
    pthread_mutex_unlock(&c->mu);
    if (state != KS_NONE && state != KS_DONE) {
        if (kind == KA_NEEDED && n > 0) {
            if (c->o.before_needed)
                c->o.before_needed(c->o.ud);
            ingest_krec_body b;
            memset(&b, 0, sizeof(b));
            b.type = INGEST_KREC_NEEDED;
            b.u.needed.count = (uint32_t)n;
            pthread_mutex_lock(&c->p.smu);
            (void)core_reply(c, batch, &b, need);
            pthread_mutex_unlock(&c->p.smu);
            c->p.st.batches_needed++;
        } else if (kind == KA_NEEDED || kind == KA_STALE) {
            (void)core_reply_landed(c, batch, INGEST_ESTALE, why);
        }
    }
    ingest__free(c->p.ctx, need);
    pthread_mutex_lock(&c->mu);
    core_batch_over(c);
    c->recv_closed = 1;
    c->recv_rc = INGEST_ECLOSED;
    pthread_mutex_unlock(&c->mu);
    return ingest__fail(c->p.rctx, INGEST_ECLOSED, "batch %s given up: %s", batch, why);
}

/*
 * Take item it into the message being put together (mu held): 1 when a
 * message is complete, 0 when more pieces are needed or the item was
 * dropped, < 0 to give the batch up.
 */
static int core_take(kcore *c, kitem *it)
{
    const int begin = it->wtype == INGEST_MSG_BATCH_BEGIN && it->seq == 0 && it->offset == 0;
    const int open = c->state != KS_NONE && c->state != KS_DONE;
    if (begin && open) {
        /* a batch began while this one waits for the rest of its records: the device began again (a
         * restart), or the rest was lost on the way while the device pipelined; this batch ends here
         * and the beginning is read again.  The device is told, in case it waits for it, unless the new
         * beginning is this very batch's: the device sends it again, and waits for the new copy's answer */
        core_abort(c, strcmp(it->batch, c->batch) == 0 ? KA_AGAIN : KA_STALE,
                   "batch %s was cut off at record %u by the beginning of batch %s", c->batch, c->next_seq,
                   it->batch);
        return -2;
    }
    if (!begin && open && strcmp(it->batch, c->batch) != 0) {
        /* another batch's records while this one waits for its own: the rest of it is lost (a topic
         * that dropped records); the device ships it again, and this record is judged after that */
        core_abort(c, KA_STALE, "batch %s stopped at record %u (records of batch %s follow)", c->batch,
                   c->next_seq, it->batch);
        return -2;
    }
    if (begin) {
        snprintf(c->batch, sizeof(c->batch), "%s", it->batch);
        c->state = KS_MANIFEST;
        c->next_seq = 0;
        c->begin_token = it->token;
        c->nwant = c->ngot = 0;
        c->in_msg = 0;
    } else if (!open || strcmp(it->batch, c->batch) != 0) {
        c->p.st.orphans++;
        /* A batch whose beginning never came (lost on the way; the tail of the batch just answered is
         * no such batch): its device may wait for it, so it is told, once, to ship it again. */
        if (strcmp(it->batch, c->batch) != 0 && strcmp(it->batch, c->orphan_told) != 0) {
            snprintf(c->orphan_told, sizeof(c->orphan_told), "%s", it->batch);
            c->orphan_pending = 1;
        }
        return 0;
    }
    if (it->seq != c->next_seq) {
        core_abort(c, KA_STALE, "records %u to %u of batch %s never came", c->next_seq, it->seq - 1, c->batch);
        return -1;
    }
    c->next_seq++;
    if (!c->in_msg) {
        if (it->offset != 0 || it->total > INGEST_WIRE_MAX_PAYLOAD) {
            core_abort(c, KA_STALE, "record %u of batch %s: a message of %u bytes, or a piece out of place",
                       it->seq, c->batch, it->total);
            return -1;
        }
        if (it->total > c->mcap || c->mb == NULL) {
            const size_t cap = it->total > 64 ? it->total : 64; /* never NULL, even for an empty message */
            uint8_t *n = ingest__realloc(c->p.ctx, c->mb, 0, cap);
            if (n == NULL) {
                core_abort(c, KA_STALE, "out of memory");
                return -1;
            }
            c->mb = n;
            c->mcap = cap;
        }
        c->mtype = it->wtype;
        c->mtotal = it->total;
        c->mlen = 0;
        c->in_msg = 1;
    } else if (it->wtype != c->mtype || it->total != c->mtotal || it->offset != c->mlen) {
        core_abort(c, KA_STALE, "record %u of batch %s does not continue its message", it->seq, c->batch);
        return -1;
    }
    if (it->len > 0)
        memcpy(c->mb + c->mlen, it->data, it->len);
    c->mlen += it->len;
    if (c->mlen < c->mtotal)
        return 0;
    c->in_msg = 0;
    return 1;
}

/* A complete message m of the batch being fed (mu held): 1 give it to the core, 0 drop it, < 0 give up. */
static int core_judge(kcore *c, const ingest_wire_msg *m)
{
    switch (m->type) {
    case INGEST_MSG_BATCH_BEGIN:
    case INGEST_MSG_MANIFEST_PART:
        return c->state == KS_MANIFEST ? 1 : (core_abort(c, KA_STALE, "manifest out of place"), -1);
    case INGEST_MSG_MANIFEST_END:
        if (c->state != KS_MANIFEST)
            return core_abort(c, KA_STALE, "manifest out of place"), -1;
        c->state = KS_WAIT_WANT;
        return 1;
    case INGEST_MSG_CHUNK: {
        if (c->state != KS_CHUNKS)
            return 0;
        const int k = want_find(c, m->u.chunk.index);
        if (k < 0 || c->got[k]) {
            c->p.st.chunks_dropped++;
            return 0;
        }
        c->got[k] = 1;
        c->ngot++;
        return 1;
    }
    case INGEST_MSG_CHUNK_GROUP: {
        if (c->state != KS_CHUNKS)
            return 0;
        uint32_t wanted = 0;
        for (uint32_t i = 0; i < m->u.group.count; i++) {
            const int k = want_find(c, ingest_wire_group_index(&m->u.group, i));
            wanted += k >= 0 && !c->got[k];
        }
        if (wanted != m->u.group.count) {
            /* a group the core wants none or part of: part of it stays missing (NEEDED at the commit) */
            c->p.st.chunks_dropped++;
            return 0;
        }
        for (uint32_t i = 0; i < m->u.group.count; i++) {
            const int k = want_find(c, ingest_wire_group_index(&m->u.group, i));
            c->got[k] = 1;
            c->ngot++;
        }
        return 1;
    }
    case INGEST_MSG_BATCH_COMMIT:
        if (c->state != KS_CHUNKS)
            return core_abort(c, KA_STALE, "commit out of place"), -1;
        if (c->ngot < c->nwant) {
            core_abort(c, KA_NEEDED, "%zu of the %zu chunks the core needs did not come", c->nwant - c->ngot,
                       c->nwant);
            return -1;
        }
        c->state = KS_COMMITTED;
        return 1;
    case INGEST_MSG_ERROR:
        core_batch_over(c); /* the device gave the batch up; the core drops it */
        return 1;
    default:
        return core_abort(c, KA_STALE, "%s in a record", ingest_wire_type_name(m->type)), -1;
    }
}

static int core_recv(ingest_link *l, ingest_wire_msg *out, int timeout_ms)
{
    kcore *c = (kcore *)l;
    struct timespec ts;
    const struct timespec *until = deadline(&ts, timeout_ms);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->recv_closed) {
            const int rc = c->recv_rc;
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
        if (c->abort != KA_NONE) {
            pthread_mutex_unlock(&c->mu);
            return core_give_up(c);
        }
        if (c->down) {
            pthread_mutex_unlock(&c->mu);
            return ingest__fail(c->p.rctx, INGEST_ECLOSED, "the link is closed");
        }
        if (c->state == KS_WAIT_WANT || c->state == KS_COMMITTED || c->head == NULL) {
            /* the core's WANT decides what the next chunks are for; after a commit, its ACK (or a WANT
             * of stale chunks) comes before anything of the next batch is read */
            if (deadline_wait(&c->cv, &c->mu, until)) {
                pthread_mutex_unlock(&c->mu);
                return ingest__fail(c->p.rctx, INGEST_ETIMEDOUT, "no record within %d ms", timeout_ms);
            }
            continue;
        }
        if (c->o.test_pause_file != NULL && access(c->o.test_pause_file, F_OK) == 0) {
            /* tests only: a device whose landing is slow (its queue fills while the file exists) */
            pthread_mutex_unlock(&c->mu);
            const struct timespec nap = { 0, 20 * 1000000L };
            nanosleep(&nap, NULL);
            pthread_mutex_lock(&c->mu);
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            if (until != NULL && (now.tv_sec > until->tv_sec || (now.tv_sec == until->tv_sec && now.tv_nsec >= until->tv_nsec))) {
                pthread_mutex_unlock(&c->mu);
                return ingest__fail(c->p.rctx, INGEST_ETIMEDOUT, "no record within %d ms", timeout_ms);
            }
            continue;
        }
        kitem *it = c->head;
        c->head = it->next;
        if (c->head == NULL)
            c->tail = NULL;
        c->qbytes -= it->len;
        pthread_cond_broadcast(&c->cv);
        const int t = core_take(c, it);
        if (t == -2) {
            it->next = c->head; /* read again after the serve that ends here */
            c->head = it;
            if (c->tail == NULL)
                c->tail = it;
            c->qbytes += it->len;
            continue;
        }
        ingest__free(c->p.ctx, it);
        if (c->orphan_pending) {
            char batch[sizeof(c->orphan_told)];
            snprintf(batch, sizeof(batch), "%s", c->orphan_told);
            c->orphan_pending = 0;
            pthread_mutex_unlock(&c->mu);
            (void)core_reply_landed(c, batch, INGEST_ESTALE, "the beginning of this batch never came");
            pthread_mutex_lock(&c->mu);
        }
        if (t <= 0)
            continue;
        memset(out, 0, sizeof(*out));
        int rc = ingest_wire_decode(c->p.rctx, c->mtype, c->mb, c->mlen, out);
        out->type = (uint8_t)c->mtype;
        if (rc < 0) {
            /* the core answers ERROR and closes; the reply says why */
            pthread_mutex_unlock(&c->mu);
            return rc;
        }
        const int j = core_judge(c, out);
        if (j > 0) {
            pthread_mutex_unlock(&c->mu);
            return 0;
        }
    }
}

static int core_send(ingest_link *l, const ingest_wire_msg *m)
{
    kcore *c = (kcore *)l;
    pthread_mutex_lock(&c->mu);
    char batch[sizeof(c->batch)];
    snprintf(batch, sizeof(batch), "%s", c->batch);
    int reply = 0, status = 0;
    char msg[INGEST_WIRE_MESSAGE_MAX + 1] = "";
    switch (m->type) {
    case INGEST_MSG_WANT: {
        const int before = c->state;
        for (uint32_t i = 0; i < m->u.want.count; i++)
            if (want_add(c, ingest_wire_want_index(&m->u.want, i)) < 0) {
                core_abort(c, KA_STALE, "out of memory");
                break;
            }
        if (before == KS_WAIT_WANT) {
            if (!(m->u.want.flags & INGEST_WANT_MORE))
                c->state = KS_CHUNKS;
        } else if (before == KS_CHUNKS || before == KS_COMMITTED) {
            /* known chunks turned out stale: the device must send them, in a new attempt */
            core_abort(c, KA_NEEDED, "%u chunks the core held were missing or changed downstream", m->u.want.count);
        }
        pthread_cond_broadcast(&c->cv);
        break;
    }
    case INGEST_MSG_ACK:
        if (c->state != KS_NONE && c->state != KS_DONE && strcmp(m->u.ack.batch_id, c->batch) == 0) {
            reply = 1;
            status = m->u.ack.status;
            snprintf(msg, sizeof(msg), "%s", m->u.ack.message);
        }
        break;
    case INGEST_MSG_ERROR:
        if (c->state != KS_NONE && c->state != KS_DONE) {
            reply = 1;
            status = m->u.error.code < 0 ? m->u.error.code : INGEST_EPROTO;
            snprintf(msg, sizeof(msg), "%s", m->u.error.message);
        }
        break;
    default:
        break; /* PONG, RECEIVED, DICT_WANT: nobody waits for them */
    }
    pthread_mutex_unlock(&c->mu);
    if (!reply)
        return 0;
    const int rc = core_reply_landed(c, batch, status, msg);
    pthread_mutex_lock(&c->mu);
    if (strcmp(c->batch, batch) == 0)
        core_batch_over(c);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int core_queue(ingest_link *l, const ingest_krec_hdr *h, const ingest_krec_body *b, uint64_t token, int wait)
{
    kcore *c = (kcore *)l;
    if (h->type < INGEST_KREC_MANIFEST || h->type > INGEST_KREC_END || strcmp(h->device, c->p.device) != 0)
        return INGEST_EINVAL;
    kitem *it = ingest__malloc(c->p.ctx, sizeof(*it) + b->u.msg.len);
    if (it == NULL)
        return INGEST_ENOMEM;
    it->next = NULL;
    snprintf(it->batch, sizeof(it->batch), "%s", h->batch);
    it->seq = h->seq;
    it->wtype = b->u.msg.wtype;
    it->offset = b->u.msg.offset;
    it->total = b->u.msg.total;
    it->token = token;
    it->len = b->u.msg.len;
    if (it->len)
        memcpy(it->data, b->u.msg.data, it->len);
    pthread_mutex_lock(&c->mu);
    /* a link between two serves (shut down by the one that ended, not rearmed yet) still queues */
    while (!c->stopped && !c->retired && c->head != NULL && c->qbytes + it->len > c->queue_max) {
        if (!wait) {
            pthread_mutex_unlock(&c->mu);
            ingest__free(c->p.ctx, it);
            return INGEST_EBUSY;
        }
        pthread_cond_wait(&c->cv, &c->mu);
    }
    if (c->stopped || c->retired) {
        pthread_mutex_unlock(&c->mu);
        ingest__free(c->p.ctx, it);
        return INGEST_ECLOSED;
    }
    if (c->tail)
        c->tail->next = it;
    else
        c->head = it;
    c->tail = it;
    c->qbytes += it->len;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int ingest_klink_core_feed(ingest_link *l, const ingest_krec_hdr *h, const ingest_krec_body *b, uint64_t token)
{
    return core_queue(l, h, b, token, 1);
}

int ingest_klink_core_offer(ingest_link *l, const ingest_krec_hdr *h, const ingest_krec_body *b, uint64_t token)
{
    return core_queue(l, h, b, token, 0);
}

int ingest_klink_core_room(ingest_link *l, size_t len)
{
    kcore *c = (kcore *)l;
    pthread_mutex_lock(&c->mu);
    const int room = c->stopped || c->retired || c->head == NULL ||
                     (c->qbytes <= c->queue_max / 2 && c->qbytes + len <= c->queue_max);
    pthread_mutex_unlock(&c->mu);
    return room;
}

int ingest_klink_core_rearm(ingest_link *l)
{
    kcore *c = (kcore *)l;
    pthread_mutex_lock(&c->mu);
    if (c->state != KS_NONE && c->state != KS_DONE) {
        /* cut off (idle, or the link shut down): nothing was landed; the device ships it again.  Stopped (a
         * rebalance, the receiver stopping) it is not reported over: its beginning stays open, so the offsets
         * committed now stay before it, and the partition's next owner reads it whole */
        if (c->stopped && !c->dropped)
            c->state = KS_DONE;
        else
            core_batch_over(c);
    }
    c->state = KS_NONE;
    c->batch[0] = '\0';
    c->abort = KA_NONE;
    c->recv_closed = 0;
    c->in_msg = 0;
    const int more = c->head != NULL && !c->stopped;
    if (more)
        c->down = 0; /* the serve shut the link down as it ended */
    else
        c->retired = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return more;
}

void ingest_klink_core_stop(ingest_link *l)
{
    kcore *c = (kcore *)l;
    pthread_mutex_lock(&c->mu);
    c->stopped = c->down = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void ingest_klink_core_drop(ingest_link *l)
{
    kcore *c = (kcore *)l;
    pthread_mutex_lock(&c->mu);
    for (kitem *it = c->head, *n; it != NULL; it = n) {
        n = it->next;
        /* a batch that began here is over too (its beginning held its partition's offset commits) */
        if (it->wtype == INGEST_MSG_BATCH_BEGIN && it->seq == 0 && it->offset == 0 && c->o.batch_done != NULL)
            c->o.batch_done(c->o.ud, it->token);
        ingest__free(c->p.ctx, it);
    }
    c->head = c->tail = NULL;
    c->qbytes = 0;
    c->stopped = c->down = c->dropped = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static const char *core_send_errmsg(ingest_link *l)
{
    return ingest_ctx_errmsg(((kcore *)l)->p.sctx);
}

static const char *core_recv_errmsg(ingest_link *l)
{
    return ingest_ctx_errmsg(((kcore *)l)->p.rctx);
}

static void core_shutdown(ingest_link *l)
{
    kcore *c = (kcore *)l;
    pthread_mutex_lock(&c->mu);
    c->down = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void core_destroy(ingest_link *l)
{
    kcore *c = (kcore *)l;
    ingest_ctx *ctx = c->p.ctx;
    for (kitem *it = c->head, *n; it != NULL; it = n) {
        n = it->next;
        ingest__free(ctx, it);
    }
    ingest__free(ctx, c->want);
    ingest__free(ctx, c->got);
    ingest__free(ctx, c->mb);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    kpub_fini(&c->p);
    ingest__free(ctx, c);
}

static const ingest_link_ops core_ops = {
    "kafka", core_send, core_recv, core_send_errmsg, core_recv_errmsg, core_shutdown, core_destroy,
};

int ingest_klink_core_create(ingest_ctx *ctx, const ingest_klink_core_opts *o, ingest_link **out)
{
    *out = NULL;
    kcore *c = ingest__calloc(ctx, 1, sizeof(*c));
    if (c == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "kafka link: out of memory");
    /* replies are small: a record of 256 KiB holds a NEEDED of ~65k indexes; a longer list is sent as
     * LANDED ESTALE, after which the device ships the whole batch again */
    const int rc = kpub_init(&c->p, ctx, o->device, o->keys, o->bus, KCORE_REPLY_MAX);
    if (rc < 0) {
        kpub_fini(&c->p);
        ingest__free(ctx, c);
        return rc;
    }
    c->o = *o;
    c->o.device = c->p.device;
    c->o.keys = NULL;
    c->queue_max = o->queue_max ? o->queue_max : KCORE_QUEUE_DEFAULT;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->base.ops = &core_ops;
    c->base.features = INGEST_SESSION_FEATURE_PACK | INGEST_SESSION_FEATURE_SHUFFLE2;
    c->base.sends_unwanted = 1;
    c->base.peer_max_payload = INGEST_WIRE_MAX_PAYLOAD;
    snprintf(c->base.peer, sizeof(c->base.peer), "kafka:%s", c->p.device);
    snprintf(c->base.detail, sizeof(c->base.detail), "sealed records, XChaCha20-Poly1305");
    *out = &c->base;
    return 0;
}

void ingest_klink_stats_get(ingest_link *l, ingest_klink_stats *st)
{
    if (l->ops == &edge_ops) {
        kedge *e = (kedge *)l;
        pthread_mutex_lock(&e->mu);
        *st = e->p.st;
        pthread_mutex_unlock(&e->mu);
    } else if (l->ops == &core_ops) {
        kcore *c = (kcore *)l;
        pthread_mutex_lock(&c->mu);
        *st = c->p.st;
        pthread_mutex_unlock(&c->mu);
    } else {
        memset(st, 0, sizeof(*st));
    }
}
