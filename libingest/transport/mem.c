/*
 * The mem transport: two links joined in memory, for tests of the
 * protocol's state machines (include/ingest/link.h).  Messages are encoded
 * on send and decoded on receive, so a receiving end judges bytes exactly
 * as it would from a socket; a sending end can lose, duplicate, reorder or
 * hold back one chosen message, or send raw bytes no encoder would make.
 */
#include "../internal.h"
#include "ingest/link.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct mem_msg {
    struct mem_msg *next;
    unsigned type;
    size_t len;
    uint8_t bytes[];
} mem_msg;

typedef struct mem_pair mem_pair;

typedef struct mem_link {
    ingest_link base;
    mem_pair *pair;
    int side;                 /* this end receives queue[side] and sends to queue[!side] */
    int down;                 /* shut down or destroyed */
    int destroyed;
    ingest_ctx *sctx, *rctx;  /* the send and receive directions' details */
    mem_msg *held;            /* the last message received: the views point into it */
    mem_msg *swapped;         /* a SWAP fault's message, sent after the next one */
    int fault, stalled;
    unsigned fault_type, fault_nth, fault_seen;
    uint64_t sent;
    int recv_closed;          /* a failed receive closes the direction for good */
    int recv_closed_rc;
} mem_link;

struct mem_pair {
    ingest_ctx *ctx; /* the allocator */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mem_msg *head[2], *tail[2];
    size_t bytes[2];
    mem_link *end[2];
};

static void pair_free(mem_pair *p)
{
    for (int i = 0; i < 2; i++)
        for (mem_msg *m = p->head[i], *n; m != NULL; m = n) {
            n = m->next;
            ingest__free(p->ctx, m);
        }
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    ingest__free(p->ctx, p);
}

/* Queue m for the other end (under mu). */
static void enqueue(mem_pair *p, int q, mem_msg *m)
{
    m->next = NULL;
    if (p->tail[q] != NULL)
        p->tail[q]->next = m;
    else
        p->head[q] = m;
    p->tail[q] = m;
    p->bytes[q] += m->len;
}

static mem_msg *msg_copy(mem_pair *p, const mem_msg *m)
{
    mem_msg *c = ingest__malloc(p->ctx, sizeof(*c) + m->len);
    if (c != NULL)
        memcpy(c, m, sizeof(*c) + m->len);
    return c;
}

/* Send m (owned by the call) with the end's fault applied. */
static int put(mem_link *l, mem_msg *m)
{
    mem_pair *p = l->pair;
    const int q = !l->side;
    pthread_mutex_lock(&p->mu);
    while (!l->down && !p->end[q]->down && p->bytes[q] > INGEST_LINK_MEM_QUEUE_MAX)
        pthread_cond_wait(&p->cv, &p->mu);
    if (l->down || p->end[q]->down) {
        pthread_mutex_unlock(&p->mu);
        ingest__free(p->ctx, m);
        return ingest__fail(l->sctx, INGEST_ECLOSED, "the link is closed");
    }
    l->sent++;
    int fault = 0;
    if (l->fault != 0 && (l->fault_type == 0 || l->fault_type == m->type) && ++l->fault_seen == l->fault_nth) {
        fault = l->fault;
        l->fault = 0;
    }
    if (fault == INGEST_LINK_FAULT_STALL)
        l->stalled = 1;
    if (l->stalled || fault == INGEST_LINK_FAULT_DROP) {
        ingest__free(p->ctx, m);
    } else if (fault == INGEST_LINK_FAULT_SWAP) {
        l->swapped = m;
    } else {
        mem_msg *dup = fault == INGEST_LINK_FAULT_DUP ? msg_copy(p, m) : NULL;
        enqueue(p, q, m);
        if (dup != NULL)
            enqueue(p, q, dup);
        if (l->swapped != NULL) {
            enqueue(p, q, l->swapped);
            l->swapped = NULL;
        }
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static int mem_send(ingest_link *base, const ingest_wire_msg *m)
{
    mem_link *l = (mem_link *)base;
    const size_t n = ingest_wire_encoded_size(m);
    if (n > l->base.peer_max_payload)
        return ingest__fail(l->sctx, INGEST_ETOOBIG, "%s of %zu bytes: more than the peer's bound %zu",
                            ingest_wire_type_name(m->type), n, l->base.peer_max_payload);
    mem_msg *w = ingest__malloc(l->pair->ctx, sizeof(*w) + n);
    if (w == NULL)
        return ingest__fail(l->sctx, INGEST_ENOMEM, "out of memory for a message of %zu bytes", n);
    w->type = m->type;
    size_t len = 0;
    const int rc = ingest_wire_encode(l->sctx, m, w->bytes, n, &len);
    if (rc < 0) {
        ingest__free(l->pair->ctx, w);
        return rc;
    }
    w->len = len;
    return put(l, w);
}

int ingest_link_mem_send_raw(ingest_link *base, unsigned type, const void *payload, size_t len)
{
    mem_link *l = (mem_link *)base;
    mem_msg *w = ingest__malloc(l->pair->ctx, sizeof(*w) + len);
    if (w == NULL)
        return ingest__fail(l->sctx, INGEST_ENOMEM, "out of memory for a message of %zu bytes", len);
    w->type = type;
    w->len = len;
    if (len > 0)
        memcpy(w->bytes, payload, len);
    return put(l, w);
}

static int recv_fail(mem_link *l, int rc)
{
    l->recv_closed = 1;
    l->recv_closed_rc = rc;
    return rc;
}

static int mem_recv(ingest_link *base, ingest_wire_msg *out, int timeout_ms)
{
    mem_link *l = (mem_link *)base;
    mem_pair *p = l->pair;
    if (l->recv_closed)
        return l->recv_closed_rc;
    ingest__free(p->ctx, l->held);
    l->held = NULL;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms >= 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    const int q = l->side;
    pthread_mutex_lock(&p->mu);
    int timed_out = 0;
    while (!l->down && p->head[q] == NULL && !p->end[!q]->down && !timed_out) {
        if (timeout_ms < 0)
            pthread_cond_wait(&p->cv, &p->mu);
        else
            timed_out = pthread_cond_timedwait(&p->cv, &p->mu, &until) == ETIMEDOUT;
    }
    mem_msg *m = NULL;
    if (!l->down && p->head[q] != NULL) {
        m = p->head[q];
        p->head[q] = m->next;
        if (p->head[q] == NULL)
            p->tail[q] = NULL;
        p->bytes[q] -= m->len;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (m == NULL) {
        if (timed_out && !l->down && !p->end[!q]->down)
            return ingest__fail(l->rctx, INGEST_ETIMEDOUT, "no message within %d ms", timeout_ms);
        ingest__fail(l->rctx, INGEST_ECLOSED, "the link is closed");
        return recv_fail(l, INGEST_ECLOSED);
    }
    l->held = m;
    memset(out, 0, sizeof(*out));
    if (m->type == 0 || m->type > INGEST_MSG_TYPE_LAST) {
        ingest__fail(l->rctx, INGEST_EPROTO, "message of unknown type %u", m->type);
        return recv_fail(l, INGEST_EPROTO);
    }
    const int rc = ingest_wire_decode(l->rctx, m->type, m->bytes, m->len, out);
    if (rc < 0)
        return recv_fail(l, rc);
    out->type = (uint8_t)m->type;
    return 0;
}

static const char *mem_send_errmsg(ingest_link *base)
{
    return ingest_ctx_errmsg(((mem_link *)base)->sctx);
}

static const char *mem_recv_errmsg(ingest_link *base)
{
    return ingest_ctx_errmsg(((mem_link *)base)->rctx);
}

static void mem_shutdown(ingest_link *base)
{
    mem_link *l = (mem_link *)base;
    pthread_mutex_lock(&l->pair->mu);
    l->down = 1;
    pthread_cond_broadcast(&l->pair->cv);
    pthread_mutex_unlock(&l->pair->mu);
}

static void mem_destroy(ingest_link *base)
{
    mem_link *l = (mem_link *)base;
    mem_pair *p = l->pair;
    pthread_mutex_lock(&p->mu);
    l->down = 1;
    l->destroyed = 1;
    const int last = p->end[!l->side]->destroyed;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    ingest__free(p->ctx, l->held);
    ingest__free(p->ctx, l->swapped);
    ingest_ctx_destroy(l->sctx);
    ingest_ctx_destroy(l->rctx);
    if (last) {
        ingest_ctx *ctx = p->ctx;
        mem_link *other = p->end[!l->side];
        pair_free(p);
        ingest__free(ctx, other);
        ingest__free(ctx, l);
    }
}

static const ingest_link_ops mem_ops = {
    "mem", mem_send, mem_recv, mem_send_errmsg, mem_recv_errmsg, mem_shutdown, mem_destroy,
};

int ingest_link_mem_pair(ingest_ctx *ctx, unsigned features, ingest_link **a, ingest_link **b)
{
    *a = *b = NULL;
    mem_pair *p = ingest__calloc(ctx, 1, sizeof(*p));
    if (p == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "mem link: out of memory");
    p->ctx = ctx;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 0; i < 2; i++) {
        mem_link *l = ingest__calloc(ctx, 1, sizeof(*l));
        if (l == NULL || (l->sctx = ingest_ctx_create(NULL)) == NULL || (l->rctx = ingest_ctx_create(NULL)) == NULL) {
            if (l != NULL) {
                ingest_ctx_destroy(l->sctx);
                ingest__free(ctx, l);
            }
            for (int j = 0; j < i; j++) {
                ingest_ctx_destroy(p->end[j]->sctx);
                ingest_ctx_destroy(p->end[j]->rctx);
                ingest__free(ctx, p->end[j]);
            }
            pair_free(p);
            return ingest__fail(ctx, INGEST_ENOMEM, "mem link: out of memory");
        }
        l->base.ops = &mem_ops;
        l->base.features = features;
        l->base.peer_max_payload = INGEST_WIRE_MAX_PAYLOAD;
        l->base.recv_sliceable = 1;
        snprintf(l->base.peer, sizeof(l->base.peer), "mem:%d", !i);
        snprintf(l->base.detail, sizeof(l->base.detail), "in memory");
        l->pair = p;
        l->side = i;
        p->end[i] = l;
    }
    *a = &p->end[0]->base;
    *b = &p->end[1]->base;
    return 0;
}

int ingest_link_mem_fault(ingest_link *base, int fault, unsigned type, unsigned nth)
{
    mem_link *l = (mem_link *)base;
    if (base->ops != &mem_ops || fault < INGEST_LINK_FAULT_DROP || fault > INGEST_LINK_FAULT_STALL || nth == 0 ||
        type > INGEST_MSG_TYPE_LAST)
        return INGEST_EINVAL;
    pthread_mutex_lock(&l->pair->mu);
    l->fault = fault;
    l->fault_type = type;
    l->fault_nth = nth;
    l->fault_seen = 0;
    pthread_mutex_unlock(&l->pair->mu);
    return 0;
}

uint64_t ingest_link_mem_sent(const ingest_link *base)
{
    return ((const mem_link *)base)->sent;
}
