/*
 * The receivers' consumer group (include/ingest/core.h, "Kafka"): consume
 * the device records of a topic, open each with its device's keys, and
 * feed it to that device's Kafka core link (klink.h), which a thread of
 * the device's serves with ingest_core_serve; commit offsets by hand, never
 * past the first record of a batch that is not over.
 */
#include "core_int.h"
#include "ingest/klink.h"
#include "ingest/session.h"
#include "../transport/kafka_int.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define KSERVE_COMMIT_S 0.2     /* at most this long between commits while batches end */
#define KSERVE_REPLY_WAIT_S 10.0 /* a commit waiting longer for its replies is logged; a revoke's gives up */
#define KSERVE_RETRY_MAX 100000 /* replies kept to be published again; more are given up */

typedef struct ksess {
    struct ksess *next;
    struct ingest_core_kafka *k;
    char device[INGEST_DEVICE_ID_MAX + 1];
    uint8_t pk[INGEST_PUBKEY_BYTES]; /* the device's key its keys were made from */
    ingest_krec_keys keys;
    int retired;       /* revoked or given a new key since: fed no more, freed once its serve ended */
    ingest_link *link; /* NULL while no serve runs */
    pthread_t thread;
    atomic_int ended;  /* the serve loop returned (the link retired) */
    atomic_int halt;   /* its serve is being stopped (a reply it cannot publish now is kept, not waited for) */
    /* the partitions its records came from since its serve started (fed_many: more than fed holds); a
     * revoke stops the serves fed from a revoked partition only */
    int32_t fed[4];
    unsigned nfed;
    int fed_many, stopping;
} ksess;

/* A partition's offsets: the next one to read, and the first records of batches not over yet.  A partition
 * is paused at a record its device's full queue could not take (paused_at, its session and size): read
 * again from there once that queue has room, while the other partitions go on. */
typedef struct kpart {
    int32_t part;
    int64_t next, committed;
    int64_t *open;
    size_t nopen, capopen;
    int64_t paused_at; /* -1: reading */
    struct ksess *paused_s; /* NULL: set back after a revoke, no serve to wait for */
    size_t paused_len;
    uint64_t npauses;
    unsigned char gone, back; /* revoke's marks */
    unsigned char stuck;      /* holds a record that was not served (or a batch cut off): set back at a revoke */
} kpart;

struct ingest_core_kafka {
    ingest__kafka_logto logto; /* first: the clients' opaque */
    ingest_core *core;
    ingest_ctx *ctx, *kctx;    /* the core's allocator; the consumer thread's details */
    ingest_core_kafka_opts o;
    char topic[256], reply_topic[256];
    rd_kafka_t *cons, *prod;
    rd_kafka_topic_t *rkt_reply;
    int32_t reply_parts;
    pthread_mutex_t mu; /* parts, dirty */
    kpart *parts;
    size_t nparts, capparts;
    int dirty;
    ksess *sessions;   /* the consumer thread's */
    atomic_int stop;
    atomic_int recheck; /* authorized devices were re-read */
    uint8_t *plain;    /* INGEST_KREC_MAX */
    double last_commit, last_retry, pend_since;
    unsigned long retry_errs; /* reply_retry's sends that failed (logged one in a hundred) */
    atomic_int frozen;        /* a reply could not be numbered: nothing is committed until a restart */
    int failed;               /* the reply producer failed for good (the consumer thread's) */
    rd_kafka_topic_partition_list_t *pend; /* offsets to commit once the replies numbered below pend_upto are out */
    uint64_t pend_upto;
    int replies_behind; /* a snapshot waited KSERVE_REPLY_WAIT_S for its replies (logged once) */
    pthread_mutex_t rmu; /* the reply numbers and the retry list (delivery reports come on any thread polling) */
    uint64_t rbase;
    unsigned char *rdone;
    size_t rhead, rn, rcap;
    struct rretry *retry, **retry_tail; /* oldest first */
    size_t nretry;
    atomic_ullong replies_again, replies_lost; /* replies published again; given up */
    atomic_ullong records, bytes, forged, unknown, malformed, begun, done, commits, rebalances, pauses;
    atomic_uint nsessions;
    char pause_device[INGEST_DEVICE_ID_MAX + 1]; /* tests only: o.test_serve_pause, split */
    const char *pause_file;
};

static void klog_limited(ingest_core_kafka *k, const char *what, const char *fmt, ...) INGEST__PRINTF(3, 4);
/* Dropped records are logged, the first ten of each kind and then one in a thousand. */
static void klog_limited(ingest_core_kafka *k, const char *what, const char *fmt, ...)
{
    (void)what;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    core_log(k->core, INGEST_LOG_WARN, "%s", line);
}

/* ---- offsets ---------------------------------------------------------------------- */

static kpart *part_get(ingest_core_kafka *k, int32_t p)
{
    for (size_t i = 0; i < k->nparts; i++)
        if (k->parts[i].part == p)
            return &k->parts[i];
    if (k->nparts == k->capparts) {
        const size_t cap = k->capparts ? k->capparts * 2 : 16;
        kpart *n = ingest__realloc(k->ctx, k->parts, k->capparts * sizeof(*n), cap * sizeof(*n));
        if (n == NULL)
            return NULL;
        k->parts = n;
        k->capparts = cap;
    }
    kpart *t = &k->parts[k->nparts++];
    memset(t, 0, sizeof(*t));
    t->part = p;
    t->next = t->committed = t->paused_at = -1;
    return t;
}

static void parts_clear(ingest_core_kafka *k)
{
    for (size_t i = 0; i < k->nparts; i++)
        ingest__free(k->ctx, k->parts[i].open);
    k->nparts = 0;
}

static uint64_t token_of(int32_t p, int64_t off)
{
    return (uint64_t)(uint32_t)p << 48 | ((uint64_t)off & ((1ull << 48) - 1));
}

static void batch_done(void *ud, uint64_t token)
{
    ksess *s = ud;
    ingest_core_kafka *k = s->k;
    const int32_t p = (int32_t)(token >> 48);
    const int64_t off = (int64_t)(token & ((1ull << 48) - 1));
    pthread_mutex_lock(&k->mu);
    kpart *t = NULL;
    for (size_t i = 0; i < k->nparts && t == NULL; i++)
        if (k->parts[i].part == p)
            t = &k->parts[i];
    for (size_t i = 0; t != NULL && i < t->nopen; i++)
        if (t->open[i] == off) {
            t->open[i] = t->open[--t->nopen];
            k->dirty = 1;
            atomic_fetch_add(&k->done, 1);
            break;
        }
    pthread_mutex_unlock(&k->mu);
}

/* ---- replies and commits ---------------------------------------------------------------------- */

/*
 * Every reply is numbered as it is produced (its msg_opaque), and a ring marks which numbers from rbase on
 * were delivered: rbase is the lowest number not delivered yet.  Offsets are committed from a snapshot
 * taken with the number of the next reply (upto), once every reply below it was delivered: a batch ends
 * (batch_done) only after its reply was produced, so the replies of every batch the snapshot passes are
 * among them.  A commit past a landed batch whose reply was then lost with this receiver (a crash while the
 * reply topic's broker is unreachable) would leave its device waiting out its reply timeout; not committed,
 * the batch is read again and answered "already landed".
 */
typedef struct rretry {
    struct rretry *next;
    uint64_t num;
    int32_t part;
    size_t keylen, len;
    uint8_t data[]; /* the key, then the reply */
} rretry;

#define RRING_MIN 256

static int reply_number(ingest_core_kafka *k, uint64_t *num)
{
    pthread_mutex_lock(&k->rmu);
    if (k->rn == k->rcap) {
        const size_t cap = k->rcap ? k->rcap * 2 : RRING_MIN;
        unsigned char *r = ingest__malloc(k->ctx, cap);
        if (r == NULL) {
            pthread_mutex_unlock(&k->rmu);
            return INGEST_ENOMEM;
        }
        for (size_t i = 0; i < k->rn; i++)
            r[i] = k->rdone[(k->rhead + i) & (k->rcap - 1)];
        ingest__free(k->ctx, k->rdone);
        k->rdone = r;
        k->rcap = cap;
        k->rhead = 0;
    }
    *num = k->rbase + k->rn;
    k->rdone[(k->rhead + k->rn) & (k->rcap - 1)] = 0;
    k->rn++;
    pthread_mutex_unlock(&k->rmu);
    return 0;
}

/* Reply num was delivered (or never went out: its serve was told). */
static void reply_delivered(ingest_core_kafka *k, uint64_t num)
{
    pthread_mutex_lock(&k->rmu);
    if (num >= k->rbase && num - k->rbase < k->rn) {
        k->rdone[(k->rhead + (num - k->rbase)) & (k->rcap - 1)] = 1;
        while (k->rn > 0 && k->rdone[k->rhead]) {
            k->rhead = (k->rhead + 1) & (k->rcap - 1);
            k->rn--;
            k->rbase++;
        }
    }
    pthread_mutex_unlock(&k->rmu);
}

/* Every reply numbered below upto was delivered. */
static int replies_out(ingest_core_kafka *k, uint64_t upto)
{
    pthread_mutex_lock(&k->rmu);
    const int out = k->rbase >= upto;
    pthread_mutex_unlock(&k->rmu);
    return out;
}

static rd_kafka_resp_err_t reply_send(ingest_core_kafka *k, int32_t part, const void *key, size_t keylen,
                                      const void *rec, size_t len, uint64_t num)
{
    return rd_kafka_producev(k->prod, RD_KAFKA_V_TOPIC(k->reply_topic), RD_KAFKA_V_PARTITION(part),
                             RD_KAFKA_V_KEY(key, keylen), RD_KAFKA_V_VALUE((void *)rec, len),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE((void *)(uintptr_t)num),
                             RD_KAFKA_V_END);
}

/* Errors that refuse this reply for good (publishing it again cannot help): it is given up, and its device
 * ships the batch again after its reply timeout.  Others (timeouts, a broker down, an ACL the operator may
 * fix) keep it to be published again. */
static int reply_refused(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
        return 1;
    default:
        return 0;
    }
}

/*
 * Reply num (key, rec) was not delivered (err): keep it at the end of the retry list, to be published again
 * by the consumer loop (reply_retry) under its number, so that no commit passes it meanwhile; or give it up
 * (reply_refused, or KSERVE_RETRY_MAX kept already), which lets the commits pass its batch.  Not kept for
 * want of memory, its number stays undelivered: the commits wait for a restart, which answers its batch again.
 */
static void reply_keep(ingest_core_kafka *k, uint64_t num, int32_t part, const void *key, size_t keylen,
                       const void *rec, size_t len, rd_kafka_resp_err_t err)
{
    const int kn = keylen < 64 ? (int)keylen : 64;
    const char *dev = key != NULL ? (const char *)key : "";
    pthread_mutex_lock(&k->rmu);
    const size_t kept = k->nretry;
    pthread_mutex_unlock(&k->rmu);
    if (reply_refused(err) || kept >= KSERVE_RETRY_MAX) {
        reply_delivered(k, num);
        ingest_metric_add(k->o.replies, "given_up", 1);
        const unsigned long long n = atomic_fetch_add(&k->replies_lost, 1) + 1;
        if (n % 100 == 1)
            core_log(k->core, INGEST_LOG_ERROR, "kafka: a reply to device %.*s was %s %s (%s)%s: given up, the "
                     "device ships its batch again after its reply timeout (%llu given up so far)", kn, dev,
                     reply_refused(err) ? "refused by" : "not delivered to", k->reply_topic, rd_kafka_err2str(err),
                     reply_refused(err) ? "" : " and too many replies wait to be published again", n);
        return;
    }
    rretry *r = ingest__malloc(k->ctx, sizeof(*r) + keylen + len);
    if (r == NULL) {
        core_log(k->core, INGEST_LOG_ERROR, "kafka: a reply to device %.*s was not delivered to %s (%s) and cannot "
                 "be kept (out of memory): offsets are not committed until a restart, which answers its batch "
                 "again", kn, dev, k->reply_topic, rd_kafka_err2str(err));
        return;
    }
    r->next = NULL;
    r->num = num;
    r->part = part;
    r->keylen = keylen;
    r->len = len;
    if (keylen)
        memcpy(r->data, key, keylen);
    if (len)
        memcpy(r->data + keylen, rec, len);
    pthread_mutex_lock(&k->rmu);
    *k->retry_tail = r;
    k->retry_tail = &r->next;
    k->nretry++;
    pthread_mutex_unlock(&k->rmu);
    ingest_metric_add(k->o.replies, "again", 1);
    const unsigned long long n = atomic_fetch_add(&k->replies_again, 1) + 1;
    if (n % 100 == 1)
        core_log(k->core, err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT || err == RD_KAFKA_RESP_ERR__QUEUE_FULL
                              ? INGEST_LOG_WARN : INGEST_LOG_ERROR,
                 "kafka: a reply to device %.*s was not delivered to %s (%s); it is published again (%llu so far)",
                 kn, dev, k->reply_topic, rd_kafka_err2str(err), n);
}

/*
 * A serve's reply (the serve's thread).  While the producer's queue is full the serve waits (back-pressure),
 * unless its serve or the receiver is stopping: the reply is then kept for the consumer loop, as is one the
 * producer refuses outright (an unknown topic, a fatal producer error), so that the serve can end its batch
 * and no commit passes it.
 */
static int reply_produce(void *ud, const char *key, const uint8_t *rec, size_t len, uint64_t token, char *why,
                         size_t whycap)
{
    ksess *s = ud;
    ingest_core_kafka *k = s->k;
    (void)token;
    const int32_t part = ingest_kafka_reply_partition(key, k->reply_parts);
    uint64_t num;
    if (reply_number(k, &num) < 0) {
        /* its batch may end without its reply: no commit may pass it, nor any later one */
        if (!atomic_exchange(&k->frozen, 1))
            core_log(k->core, INGEST_LOG_ERROR, "kafka: a reply to device %s cannot be numbered (out of memory): "
                     "offsets are not committed until a restart, which answers its batch again", key);
        snprintf(why, whycap, "out of memory");
        return INGEST_ENOMEM;
    }
    const size_t keylen = strlen(key);
    for (;;) {
        const rd_kafka_resp_err_t err = reply_send(k, part, key, keylen, rec, len, num);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
            return 0;
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || atomic_load(&s->halt) || atomic_load(&k->stop)) {
            reply_keep(k, num, part, key, keylen, rec, len, err);
            return 0;
        }
        rd_kafka_poll(k->prod, 50);
    }
}

/* A reply's delivery report (on whichever thread polls the producer). */
static void reply_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    ingest_core_kafka *k = opaque;
    const uint64_t num = (uint64_t)(uintptr_t)m->_private;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
        reply_delivered(k, num);
    else
        reply_keep(k, num, m->partition, m->key, m->key != NULL ? m->key_len : 0, m->payload, m->len, m->err);
}

/*
 * Publish again, oldest first, the replies not delivered (the consumer thread; at most once a second unless
 * now): one pass over those kept when it starts, up to the first one the producer does not take now (its
 * queue full, or an error that may pass: that one stays at the head, for the next call).  A reply the
 * producer refuses for good (reply_refused) is given up.
 */
static void reply_retry(ingest_core_kafka *k, int now)
{
    if (!now && core_now() - k->last_retry < 1.0)
        return;
    k->last_retry = core_now();
    pthread_mutex_lock(&k->rmu);
    size_t left = k->nretry;
    pthread_mutex_unlock(&k->rmu);
    for (; left > 0; left--) {
        pthread_mutex_lock(&k->rmu);
        rretry *r = k->retry;
        if (r != NULL) {
            k->retry = r->next;
            if (k->retry == NULL)
                k->retry_tail = &k->retry;
            k->nretry--;
        }
        pthread_mutex_unlock(&k->rmu);
        if (r == NULL)
            return;
        const rd_kafka_resp_err_t err = reply_send(k, r->part, r->data, r->keylen, r->data + r->keylen, r->len,
                                                   r->num);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR && !reply_refused(err)) {
            pthread_mutex_lock(&k->rmu); /* back at the head, to go first next time */
            r->next = k->retry;
            if (k->retry == NULL)
                k->retry_tail = &r->next;
            k->retry = r;
            k->nretry++;
            pthread_mutex_unlock(&k->rmu);
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL && k->retry_errs++ % 100 == 0)
                core_log(k->core, INGEST_LOG_WARN, "kafka: replies cannot be published again to %s now (%s): "
                         "tried again in a second", k->reply_topic, rd_kafka_err2str(err));
            return;
        }
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) /* (given up) */
            reply_keep(k, r->num, r->part, r->data, r->keylen, r->data + r->keylen, r->len, err);
        ingest__free(k->ctx, r);
    }
}

/* The offsets to commit now (each partition up to its oldest open batch, or all it read) and the reply
 * number they wait for; NULL when there is none. */
static rd_kafka_topic_partition_list_t *offsets_snapshot(ingest_core_kafka *k, uint64_t *upto)
{
    pthread_mutex_lock(&k->mu);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)(k->nparts ? k->nparts : 1));
    for (size_t i = 0; l != NULL && i < k->nparts; i++) {
        const kpart *t = &k->parts[i];
        int64_t off = t->next;
        for (size_t j = 0; j < t->nopen; j++)
            if (t->open[j] < off)
                off = t->open[j];
        if (off >= 0 && off > t->committed)
            rd_kafka_topic_partition_list_add(l, k->topic, t->part)->offset = off;
    }
    k->dirty = 0;
    pthread_mutex_lock(&k->rmu);
    *upto = k->rbase + k->rn;
    pthread_mutex_unlock(&k->rmu);
    pthread_mutex_unlock(&k->mu);
    if (l != NULL && l->cnt == 0) {
        rd_kafka_topic_partition_list_destroy(l);
        l = NULL;
    }
    return l;
}

static void offsets_commit(ingest_core_kafka *k, rd_kafka_topic_partition_list_t *l)
{
    if (atomic_load(&k->frozen))
        return; /* (reply_produce said why) */
    const rd_kafka_resp_err_t err = rd_kafka_commit(k->cons, l, 0);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        atomic_fetch_add(&k->commits, 1);
        pthread_mutex_lock(&k->mu);
        for (int i = 0; i < l->cnt; i++) {
            kpart *t = part_get(k, l->elems[i].partition);
            if (t != NULL && l->elems[i].offset > t->committed)
                t->committed = l->elems[i].offset;
        }
        pthread_mutex_unlock(&k->mu);
    } else {
        core_log(k->core, INGEST_LOG_WARN, "kafka: committing offsets: %s (records are read again)",
                 rd_kafka_err2str(err));
    }
    k->last_commit = core_now();
}

static void replies_late(ingest_core_kafka *k, double waited)
{
    if (k->replies_behind)
        return;
    k->replies_behind = 1;
    core_log(k->core, INGEST_LOG_WARN, "kafka: replies not delivered to %s after %.0f s: offsets are not committed "
             "until they are", k->reply_topic, waited);
}

static void replies_caught_up(ingest_core_kafka *k)
{
    if (k->replies_behind)
        core_log(k->core, INGEST_LOG_INFO, "kafka: replies delivered to %s again: offsets committed", k->reply_topic);
    k->replies_behind = 0;
}

/* The consumer loop's commits: a snapshot every KSERVE_COMMIT_S while batches end, committed once its
 * replies are out (a later snapshot waits for it: under steady traffic each commits a little behind). */
static void commit_step(ingest_core_kafka *k)
{
    if (atomic_load(&k->frozen))
        return; /* (reply_produce said why) */
    const double now = core_now();
    if (k->pend == NULL) {
        pthread_mutex_lock(&k->mu);
        const int dirty = k->dirty;
        pthread_mutex_unlock(&k->mu);
        if (!dirty || now - k->last_commit < KSERVE_COMMIT_S)
            return;
        k->pend = offsets_snapshot(k, &k->pend_upto);
        k->pend_since = now;
        if (k->pend == NULL)
            return;
    }
    if (replies_out(k, k->pend_upto)) {
        offsets_commit(k, k->pend);
        rd_kafka_topic_partition_list_destroy(k->pend);
        k->pend = NULL;
        replies_caught_up(k);
    } else if (now - k->pend_since >= KSERVE_REPLY_WAIT_S) {
        replies_late(k, now - k->pend_since);
    }
}

/* A revoke's or a stop's commit: a snapshot now, committed if its replies go out within
 * KSERVE_REPLY_WAIT_S (else not: the next owner, or this receiver started again, reads their batches
 * again and answers them). */
static void commit_offsets(ingest_core_kafka *k)
{
    if (k->pend != NULL) { /* (the snapshot now covers it) */
        rd_kafka_topic_partition_list_destroy(k->pend);
        k->pend = NULL;
    }
    if (k->failed)
        return; /* (its replies will not be delivered: the next owner reads those batches again) */
    uint64_t upto = 0;
    rd_kafka_topic_partition_list_t *l = offsets_snapshot(k, &upto);
    if (l == NULL)
        return; /* nothing to commit */
    const double t0 = core_now();
    while (!replies_out(k, upto) && core_now() - t0 < KSERVE_REPLY_WAIT_S) {
        rd_kafka_poll(k->prod, 50);
        reply_retry(k, 0);
    }
    if (replies_out(k, upto)) {
        offsets_commit(k, l);
        replies_caught_up(k);
    } else {
        replies_late(k, core_now() - t0);
        pthread_mutex_lock(&k->mu);
        k->dirty = 1;
        pthread_mutex_unlock(&k->mu);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* ---- sessions ---------------------------------------------------------------------- */

/* Before a NEEDED reply: learn from the manifests what the group's other receivers landed. */
static void before_needed(void *ud)
{
    ksess *s = ud;
    ingest_core *core = s->k->core;
    ingest_core_lock(core);
    ingest_index_stats st;
    if (ingest_index_catch_up(core->o.index, &st) == 0 && st.batches > 0)
        core_log(core, INGEST_LOG_INFO, "kafka: caught up with %llu batches other receivers landed",
                 (unsigned long long)st.batches);
    ingest_core_unlock(core);
}

static void *sess_main(void *arg)
{
    ksess *s = arg;
    do
        (void)ingest_core_serve(s->k->core, s->link, s->device);
    while (ingest_klink_core_rearm(s->link) == 1);
    atomic_store(&s->ended, 1);
    return NULL;
}

/* Stop s's serve (it ends soon after; sess_join waits for it). */
static void sess_halt(ksess *s)
{
    atomic_store(&s->halt, 1);
    ingest_klink_core_stop(s->link);
}

/* End s's serve (stop: for good, now; else it has ended by itself) and free its link. */
static void sess_join(ksess *s, int stop)
{
    if (s->link == NULL)
        return;
    if (stop)
        sess_halt(s);
    pthread_join(s->thread, NULL);
    ingest_link_destroy(s->link);
    s->link = NULL;
    atomic_fetch_sub(&s->k->nsessions, 1);
}

static int sess_start(ingest_core_kafka *k, ksess *s)
{
    const ingest_klink_core_opts o = {
        .device = s->device, .keys = &s->keys, .bus = { reply_produce, s }, .queue_max = k->o.queue_max,
        .batch_done = batch_done, .before_needed = before_needed, .ud = s,
        .test_pause_file = k->pause_file != NULL && (strcmp(k->pause_device, s->device) == 0 ||
                                                     strcmp(k->pause_device, "*") == 0) ? k->pause_file : NULL,
    };
    INGEST__FORWARD(ingest_klink_core_create(k->ctx, &o, &s->link));
    atomic_store(&s->ended, 0);
    atomic_store(&s->halt, 0);
    s->nfed = 0;
    s->fed_many = 0;
    if (core_thread_start(&s->thread, sess_main, s, "ingest-ksess") != 0) {
        ingest_link_destroy(s->link);
        s->link = NULL;
        return INGEST_ENOMEM;
    }
    atomic_fetch_add(&k->nsessions, 1);
    return 0;
}

static void sessions_stop(ingest_core_kafka *k)
{
    for (ksess *s = k->sessions; s != NULL; s = s->next)
        if (s->link != NULL)
            sess_halt(s);
    for (ksess *s = k->sessions; s != NULL; s = s->next)
        sess_join(s, 0);
}

/* s's device was revoked (!authorized) or given a new key: s is fed no more and its queued records are dropped
 * (a batch fed in part is over: the device ships it again); reaped once its serve ended. */
static void sess_retire(ingest_core_kafka *k, ksess *s, int authorized)
{
    s->retired = 1;
    atomic_store(&s->halt, 1);
    if (s->link != NULL)
        ingest_klink_core_drop(s->link);
    core_log(k->core, INGEST_LOG_INFO, "kafka: device %s %s (authorized devices re-read): records queued for its "
             "serve are dropped (a batch begun is shipped again)", s->device,
             authorized ? "has a new key" : "is no longer authorized");
}

/* Authorized devices were re-read (ingest_core_kafka_recheck): retire the sessions of devices revoked or given a
 * new key now, not at their next record (a device that sends none would be served what was queued). */
static void sessions_recheck(ingest_core_kafka *k)
{
    if (!atomic_exchange(&k->recheck, 0))
        return;
    for (ksess *s = k->sessions; s != NULL; s = s->next) {
        uint8_t pk[INGEST_PUBKEY_BYTES];
        if (s->retired)
            continue;
        const int authorized = k->o.device_key(k->o.ud, s->device, pk) == 0;
        if (!authorized || memcmp(s->pk, pk, sizeof(pk)) != 0)
            sess_retire(k, s, authorized);
    }
}

/*
 * The session of device (made, with its keys, on first sight): NULL when the device is not authorized.  The
 * key is looked up for every record, so authorized devices re-read (SIGHUP) apply at once: a session of a
 * device revoked or given a new key since is retired (its queued records dropped, a batch it was fed in part
 * over: the device ships it again), and a new key makes a new session.
 */
static ksess *sess_find(ingest_core_kafka *k, const char *device)
{
    uint8_t pk[INGEST_PUBKEY_BYTES];
    const int authorized = k->o.device_key(k->o.ud, device, pk) == 0;
    for (ksess *s = k->sessions; s != NULL; s = s->next) {
        if (s->retired || strcmp(s->device, device) != 0)
            continue;
        if (authorized && memcmp(s->pk, pk, sizeof(pk)) == 0)
            return s;
        sess_retire(k, s, authorized);
        break;
    }
    if (!authorized)
        return NULL;
    ksess *s = ingest__calloc(k->ctx, 1, sizeof(*s));
    if (s == NULL)
        return NULL;
    if (ingest_krec_keys_core(k->o.key, pk, &s->keys) != 0) {
        ingest__free(k->ctx, s);
        return NULL;
    }
    memcpy(s->pk, pk, sizeof(pk));
    s->k = k;
    snprintf(s->device, sizeof(s->device), "%s", device);
    s->next = k->sessions;
    k->sessions = s;
    return s;
}

static void parts_resume(ingest_core_kafka *k, const struct ksess *only);

/* Join the serves that ended; free the retired sessions whose serve is over. */
static void sessions_reap(ingest_core_kafka *k)
{
    for (ksess **pp = &k->sessions; *pp != NULL;) {
        ksess *s = *pp;
        if (s->link != NULL && atomic_load(&s->ended))
            sess_join(s, 0);
        if (s->retired && s->link == NULL) {
            parts_resume(k, s); /* (before it is freed) the record it could not take comes again */
            *pp = s->next;
            ingest_krec_keys_wipe(&s->keys);
            ingest__free(k->ctx, s);
            continue;
        }
        pp = &s->next;
    }
}

/* ---- records ---------------------------------------------------------------------- */

static void count(ingest_core_kafka *k, atomic_ullong *c, const char *label)
{
    atomic_fetch_add(c, 1);
    ingest_metric_add(k->o.records, label, 1);
}

/* A batch a peer receiver landed (its manifest is in bronze) that this index has not seen: catch up. */
static void peer_landed(ingest_core_kafka *k, const char *device, const char *batch)
{
    char path[4096];
    const int n = snprintf(path, sizeof(path), "%s/_manifests/%s/%s.jsonl", k->core->bronze, device, batch);
    struct stat st;
    if (n < 0 || (size_t)n >= sizeof(path) || stat(path, &st) != 0)
        return;
    ingest_core_lock(k->core);
    if (ingest_index_batch_landed(k->core->o.index, device, batch) == 0) {
        ingest_index_stats is;
        if (ingest_index_catch_up(k->core->o.index, &is) == 0)
            core_log(k->core, INGEST_LOG_INFO, "kafka: batch %s of %s was landed by another receiver; caught up "
                     "with %llu batches", batch, device, (unsigned long long)is.batches);
    }
    ingest_core_unlock(k->core);
}

/* Keep t's commits before offset off until a batch_done of it (the first record of a batch, or one that
 * could not be served). */
static void part_hold(ingest_core_kafka *k, kpart *t, int64_t off)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&k->mu);
    if (t->nopen == t->capopen) {
        const size_t cap = t->capopen ? t->capopen * 2 : 8;
        int64_t *o = ingest__realloc(k->ctx, t->open, t->capopen * sizeof(*o), cap * sizeof(*o));
        if (o != NULL) {
            t->open = o;
            t->capopen = cap;
        }
    }
    if (t->nopen < t->capopen)
        t->open[t->nopen++] = off;
    pthread_mutex_unlock(&k->mu);
}

/* Undo a part_hold of off whose record was not queued after all (it is read again). */
static void part_unhold(ingest_core_kafka *k, kpart *t, int64_t off)
{
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < t->nopen; i++)
        if (t->open[i] == off) {
            t->open[i] = t->open[--t->nopen];
            break;
        }
    pthread_mutex_unlock(&k->mu);
}

/* One partition, for the pause, resume and seek calls. */
static rd_kafka_topic_partition_list_t *one_part(const ingest_core_kafka *k, int32_t part, int64_t off)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    if (l != NULL)
        rd_kafka_topic_partition_list_add(l, k->topic, part)->offset = off;
    return l;
}

/* Stop fetching partition part and set it back to off (read from there once resumed): 0 or the error. */
static rd_kafka_resp_err_t pause_seek(ingest_core_kafka *k, int32_t part, int64_t off)
{
    rd_kafka_topic_partition_list_t *l = one_part(k, part, off);
    if (l == NULL)
        return RD_KAFKA_RESP_ERR__FAIL; /* (out of memory) */
    rd_kafka_resp_err_t err = rd_kafka_pause_partitions(k->cons, l);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
        err = l->elems[0].err;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* with a timeout: no record fetched from before the seek is passed to us after it */
        rd_kafka_error_t *e = rd_kafka_seek_partitions(k->cons, l, 5000);
        if (e != NULL) {
            err = rd_kafka_error_code(e);
            rd_kafka_error_destroy(e);
        } else {
            err = l->elems[0].err;
        }
        /* Timed out, the seek is still queued and runs before any later resume (the partition's ops are
         * ordered): the record comes again from off as planned.  librdkafka 2.0.2 takes this timeout in
         * microseconds (fixed in 2.0.3, its issue 4230), so it does time out under load.  Falling back to the
         * wait here would feed the record now and once more after the seek. */
        if (err == RD_KAFKA_RESP_ERR__TIMED_OUT)
            err = RD_KAFKA_RESP_ERR_NO_ERROR;
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            l->elems[0].err = RD_KAFKA_RESP_ERR_NO_ERROR;
            (void)rd_kafka_resume_partitions(k->cons, l);
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
    return err;
}

/*
 * The record at off (len bytes queued) did not fit in s's queue: its serve is behind.  Rather than wait for
 * it, which would stop every device this receiver reads, stop reading t's partition and read it again from
 * off once s has room (parts_resume).  0, or < 0 when the partition could not be paused and set back (the
 * caller then waits for the room, as it did before).
 */
static int part_pause(ingest_core_kafka *k, kpart *t, ksess *s, int64_t off, size_t len)
{
    const rd_kafka_resp_err_t err = pause_seek(k, t->part, off);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        core_log(k->core, INGEST_LOG_WARN, "kafka: %s [%d]: cannot pause at offset %lld for device %s, whose serve "
                 "is behind (%s): waiting for it", k->topic, (int)t->part, (long long)off, s->device,
                 rd_kafka_err2str(err));
        return INGEST_EIO;
    }
    pthread_mutex_lock(&k->mu);
    t->paused_at = off;
    t->paused_s = s;
    t->paused_len = len;
    t->next = off; /* committed offsets stay at it: it was not read */
    pthread_mutex_unlock(&k->mu);
    atomic_fetch_add(&k->pauses, 1);
    ingest_metric_add(k->o.pauses, s->device, 1);
    if (t->npauses++ % 100 == 0)
        core_log(k->core, INGEST_LOG_INFO, "kafka: %s [%d] paused at offset %lld: device %s's serve is behind (its "
                 "queue is full); the other partitions go on (%llu pauses of this partition)", k->topic,
                 (int)t->part, (long long)off, s->device, (unsigned long long)t->npauses);
    return 0;
}

static void part_resume(ingest_core_kafka *k, kpart *t)
{
    rd_kafka_topic_partition_list_t *l = one_part(k, t->part, RD_KAFKA_OFFSET_INVALID);
    if (l != NULL) {
        (void)rd_kafka_resume_partitions(k->cons, l);
        rd_kafka_topic_partition_list_destroy(l);
    }
    pthread_mutex_lock(&k->mu);
    t->paused_at = -1;
    t->paused_s = NULL;
    pthread_mutex_unlock(&k->mu);
}

/* Resume the paused partitions whose device's queue has room now, or whose serve ended (s NULL: every one). */
static void parts_resume(ingest_core_kafka *k, const ksess *only)
{
    for (size_t i = 0; i < k->nparts; i++) {
        kpart *t = &k->parts[i];
        if (t->paused_at < 0 || (only != NULL && t->paused_s != only))
            continue;
        const ksess *s = t->paused_s; /* NULL: set back by a rebalance, no serve to wait for */
        if (only == NULL && s != NULL && s->link != NULL && !s->retired && !atomic_load(&s->ended) &&
            !ingest_klink_core_room(s->link, t->paused_len))
            continue;
        part_resume(k, t);
    }
}

static int sess_fed_from(const ksess *s, int32_t part)
{
    for (unsigned i = 0; i < s->nfed; i++)
        if (s->fed[i] == part)
            return 1;
    return s->fed_many;
}

/* Queue a record for s, starting its serve when none runs: 0, INGEST_EBUSY (offered only: no room), < 0. */
static int sess_feed(ingest_core_kafka *k, ksess *s, int32_t part, const ingest_krec_hdr *h,
                     const ingest_krec_body *b, uint64_t token, int wait)
{
    int rc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (s->link != NULL && atomic_load(&s->ended))
            sess_join(s, 0);
        if (s->link == NULL && (rc = sess_start(k, s)) < 0)
            break;
        rc = wait ? ingest_klink_core_feed(s->link, h, b, token) : ingest_klink_core_offer(s->link, h, b, token);
        if (rc != INGEST_ECLOSED)
            break;
        sess_join(s, 0); /* it retired as the record came: a new serve */
    }
    if (s->link != NULL && !sess_fed_from(s, part)) { /* the serve now running (queued or not: a revoke stops it) */
        if (s->nfed < sizeof(s->fed) / sizeof(s->fed[0]))
            s->fed[s->nfed++] = part;
        else
            s->fed_many = 1;
    }
    return rc;
}

static void handle(ingest_core_kafka *k, const rd_kafka_message_t *m)
{
    pthread_mutex_lock(&k->mu);
    kpart *t = part_get(k, m->partition);
    if (t != NULL && t->paused_at >= 0) {
        /* fetched before its partition was paused: it comes again once the partition resumes */
        pthread_mutex_unlock(&k->mu);
        return;
    }
    atomic_fetch_add(&k->records, 1);
    atomic_fetch_add(&k->bytes, m->len);
    if (t != NULL && m->offset + 1 > t->next) {
        t->next = m->offset + 1;
        k->dirty = 1;
    }
    pthread_mutex_unlock(&k->mu);
    ingest_krec_hdr h;
    int bad = ingest_krec_peek(k->kctx, m->payload, m->len, &h) != 0;
    if (!bad && (h.type < INGEST_KREC_MANIFEST || h.type > INGEST_KREC_END))
        bad = ingest__fail(k->kctx, INGEST_EPROTO, "record of type %u, a reply, on the devices' topic", h.type) != 0;
    if (bad) {
        count(k, &k->malformed, "malformed");
        klog_limited(k, "malformed", "kafka: %s [%d] offset %lld: not a device record (%s); skipped", k->topic,
                     (int)m->partition, (long long)m->offset, ingest_ctx_errmsg(k->kctx));
        return;
    }
    ksess *s = sess_find(k, h.device);
    if (s == NULL) {
        count(k, &k->unknown, "unknown_device");
        klog_limited(k, "unknown", "kafka: %s [%d] offset %lld: a record of device %s, which is not authorized; "
                     "skipped", k->topic, (int)m->partition, (long long)m->offset, h.device);
        return;
    }
    size_t n = 0;
    ingest_krec_body b;
    int rc = ingest_krec_open(k->kctx, s->keys.open, m->payload, m->len, &h, k->plain, INGEST_KREC_MAX, &n);
    if (rc != 0) {
        count(k, &k->forged, "forged");
        /* (the open cleared h: the device named is the session's, which the peeked header gave) */
        klog_limited(k, "forged", "kafka: %s [%d] offset %lld: a record claiming device %s does not open under its "
                     "key (forged or altered: %s); skipped", k->topic, (int)m->partition, (long long)m->offset,
                     s->device, ingest_ctx_errmsg(k->kctx));
        return;
    }
    if (ingest_krec_body_decode(k->kctx, h.type, k->plain, n, &b) != 0) {
        count(k, &k->malformed, "malformed");
        klog_limited(k, "malformed", "kafka: %s [%d] offset %lld: device %s: %s; skipped", k->topic,
                     (int)m->partition, (long long)m->offset, h.device, ingest_ctx_errmsg(k->kctx));
        return;
    }
    const uint64_t token = token_of(m->partition, m->offset);
    const int begins = b.u.msg.wtype == INGEST_MSG_BATCH_BEGIN && b.u.msg.offset == 0 && h.seq == 0;
    if (begins) {
        peer_landed(k, h.device, h.batch);
        part_hold(k, t, m->offset); /* before the feed: the serve may end the batch at once */
    }
    rc = sess_feed(k, s, m->partition, &h, &b, token, 0);
    if (rc == INGEST_EBUSY && t != NULL && part_pause(k, t, s, m->offset, b.u.msg.len) == 0) {
        /* not taken: read again, and counted, when the partition resumes */
        if (begins)
            part_unhold(k, t, m->offset);
        atomic_fetch_sub(&k->records, 1);
        atomic_fetch_sub(&k->bytes, m->len);
        return;
    }
    if (rc == INGEST_EBUSY)
        rc = sess_feed(k, s, m->partition, &h, &b, token, 1);
    ingest_metric_add(k->o.records, "ok", 1);
    if (begins)
        atomic_fetch_add(&k->begun, 1);
    if (rc < 0) {
        part_hold(k, t, m->offset); /* for good: no commit passes it before a restart or a rebalance */
        if (t != NULL)
            t->stuck = 1; /* (a cooperative rebalance that keeps t sets it back) */
        core_log(k->core, INGEST_LOG_ERROR, "kafka: device %s: a record could not be served: %s; it is read again "
                 "after a restart", h.device, ingest_strerror(rc));
    }
}

/* ---- the group ---------------------------------------------------------------------- */

static int part_listed(const rd_kafka_topic_partition_list_t *l, const char *topic, int32_t part)
{
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].partition == part && strcmp(l->elems[i].topic, topic) == 0)
            return 1;
    return 0;
}

/* Set t back to its committed point (its oldest open batch, or all it read) and read it again from there. */
static void part_set_back(ingest_core_kafka *k, kpart *t)
{
    pthread_mutex_lock(&k->mu);
    int64_t off = t->next;
    for (size_t j = 0; j < t->nopen; j++)
        if (t->open[j] < off)
            off = t->open[j];
    pthread_mutex_unlock(&k->mu);
    if (off < 0)
        return;
    const rd_kafka_resp_err_t err = pause_seek(k, t->part, off);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* its open batches keep holding the commits: read again after a restart or the next rebalance; a
         * pause for the serve that ended is over (reading goes on from where it was paused) */
        core_log(k->core, INGEST_LOG_WARN, "kafka: %s [%d]: cannot set back to offset %lld after a revoke (%s): "
                 "batches cut off there are shipped again", k->topic, (int)t->part, (long long)off,
                 rd_kafka_err2str(err));
        if (t->paused_at >= 0)
            part_resume(k, t);
        t->stuck = 1;
        return;
    }
    pthread_mutex_lock(&k->mu);
    t->paused_at = t->next = off; /* resumed by the next parts_resume (no serve to wait for) */
    t->paused_s = NULL;
    t->paused_len = 0;
    t->nopen = 0;
    t->stuck = 0;
    pthread_mutex_unlock(&k->mu);
}

/*
 * Partitions revoked (all of them unless coop): end the serves fed from them, commit, forget them.  A serve
 * fed from a revoked partition and a kept one too (a device whose partition changed with the partition
 * count) leaves a batch cut off in the kept one: that partition is set back to its committed point and read
 * again from there, and the serves fed from it end as well.  So is a kept partition holding a record that
 * could not be served (stuck), as a rebalance that moved it would.
 */
static void revoke(ingest_core_kafka *k, const rd_kafka_topic_partition_list_t *parts, int coop)
{
    for (size_t i = 0; i < k->nparts; i++) {
        k->parts[i].gone = (unsigned char)(!coop || part_listed(parts, k->topic, k->parts[i].part));
        k->parts[i].back = (unsigned char)(!k->parts[i].gone && k->parts[i].stuck);
    }
    for (ksess *s = k->sessions; s != NULL; s = s->next) {
        s->stopping = s->link != NULL && !coop;
        for (size_t i = 0; s->link != NULL && i < k->nparts && !s->stopping; i++)
            s->stopping = k->parts[i].gone && sess_fed_from(s, k->parts[i].part);
    }
    for (int changed = 1; changed;) { /* kept partitions fed to a serve that ends, and the serves they fed */
        changed = 0;
        for (size_t i = 0; i < k->nparts; i++) {
            kpart *t = &k->parts[i];
            for (ksess *s = k->sessions; s != NULL && !t->gone && !t->back; s = s->next)
                t->back = s->stopping && sess_fed_from(s, t->part);
            for (ksess *s = k->sessions; t->back && s != NULL; s = s->next)
                if (s->link != NULL && !s->stopping && sess_fed_from(s, t->part))
                    s->stopping = changed = 1;
        }
    }
    for (ksess *s = k->sessions; s != NULL; s = s->next)
        if (s->stopping)
            sess_halt(s);
    for (ksess *s = k->sessions; s != NULL; s = s->next)
        if (s->stopping) {
            sess_join(s, 0);
            s->stopping = 0;
        }
    commit_offsets(k);
    for (size_t i = 0; i < k->nparts; i++) {
        kpart *t = &k->parts[i];
        if (t->gone && t->paused_at >= 0)
            part_resume(k, t); /* none stays paused for a later assignment */
        else if (t->back)
            part_set_back(k, t);
    }
    pthread_mutex_lock(&k->mu); /* (the serves kept look their partitions up in batch_done) */
    size_t w = 0;
    for (size_t i = 0; i < k->nparts; i++) {
        if (k->parts[i].gone) {
            ingest__free(k->ctx, k->parts[i].open);
            continue;
        }
        if (w != i)
            k->parts[w] = k->parts[i];
        w++;
    }
    k->nparts = w;
    pthread_mutex_unlock(&k->mu);
}

static void rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    ingest_core_kafka *k = opaque;
    const int coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    atomic_fetch_add(&k->rebalances, 1);
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        core_log(k->core, INGEST_LOG_INFO, "kafka: %d partitions of %s assigned", parts->cnt, k->topic);
        if (coop)
            rd_kafka_error_destroy(rd_kafka_incremental_assign(rk, parts));
        else
            rd_kafka_assign(rk, parts);
        (void)rd_kafka_resume_partitions(rk, parts); /* none stays paused from an earlier assignment */
        return;
    }
    /* Revoked (all assigned partitions, or with the cooperative protocol some of them): the serves fed from
     * a revoked partition end (a batch being made durable first; a batch cut off keeps its beginning's hold,
     * so the commits stay before it), offsets go as far as batches ended, and the next owner reads on from
     * there.  The serves of the partitions kept go on undisturbed. */
    core_log(k->core, INGEST_LOG_INFO, "kafka: %d partitions of %s revoked", parts->cnt, k->topic);
    revoke(k, parts, coop);
    if (coop)
        rd_kafka_error_destroy(rd_kafka_incremental_unassign(rk, parts));
    else
        rd_kafka_assign(rk, NULL);
}

static void kfree(ingest_core_kafka *k)
{
    for (ksess *s = k->sessions, *n; s != NULL; s = n) {
        n = s->next;
        sess_join(s, 1);
        ingest_krec_keys_wipe(&s->keys);
        ingest__free(k->ctx, s);
    }
    if (k->rkt_reply)
        rd_kafka_topic_destroy(k->rkt_reply);
    if (k->cons)
        rd_kafka_destroy(k->cons);
    if (k->prod) {
        rd_kafka_flush(k->prod, 5000); /* (replies not delivered by now were not committed past) */
        rd_kafka_destroy(k->prod);
    }
    while (k->retry != NULL) {
        rretry *r = k->retry;
        k->retry = r->next;
        ingest__free(k->ctx, r);
    }
    ingest__free(k->ctx, k->rdone);
    if (k->pend != NULL)
        rd_kafka_topic_partition_list_destroy(k->pend);
    pthread_mutex_destroy(&k->rmu);
    parts_clear(k);
    ingest__free(k->ctx, k->parts);
    ingest__free(k->ctx, k->plain);
    ingest_ctx_destroy(k->kctx);
    pthread_mutex_destroy(&k->mu);
    ingest__free(k->ctx, k);
}

int ingest_core_kafka_create(ingest_core *core, const ingest_core_kafka_opts *opts, ingest_core_kafka **out)
{
    *out = NULL;
    ingest_ctx *ctx = core->ctx;
    if (opts->key == NULL || opts->device_key == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "kafka: the core's key and a device key lookup are needed");
    ingest_core_kafka *k = ingest__calloc(ctx, 1, sizeof(*k));
    if (k == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "kafka: out of memory");
    k->core = core;
    k->ctx = ctx;
    k->o = *opts;
    k->logto = (ingest__kafka_logto){ core->o.log, core->o.log_userdata, core->o.log_level };
    const char *colon = opts->test_serve_pause != NULL ? strchr(opts->test_serve_pause, ':') : NULL;
    if (colon != NULL && (size_t)(colon - opts->test_serve_pause) < sizeof(k->pause_device)) {
        memcpy(k->pause_device, opts->test_serve_pause, (size_t)(colon - opts->test_serve_pause));
        k->pause_file = colon + 1;
    }
    pthread_mutex_init(&k->mu, NULL);
    pthread_mutex_init(&k->rmu, NULL);
    k->retry_tail = &k->retry;
    snprintf(k->topic, sizeof(k->topic), "%s",
             opts->kc.topic && opts->kc.topic[0] ? opts->kc.topic : INGEST_KAFKA_TOPIC_DEFAULT);
    char err[512];
    int rc = ingest_kafka_reply_topic(&opts->kc, k->reply_topic, sizeof(k->reply_topic));
    if (rc == 0 && ((k->kctx = ingest_ctx_create(NULL)) == NULL || (k->plain = ingest__malloc(ctx, INGEST_KREC_MAX)) == NULL))
        rc = ingest__fail(ctx, INGEST_ENOMEM, "kafka: out of memory");
    rd_kafka_conf_t *c = rc == 0 ? ingest__kafka_conf(ctx, &opts->kc, KAFKA_GROUP, k) : NULL;
    if (rc == 0 && c == NULL)
        rc = INGEST_EINVAL;
    if (rc == 0) {
        rd_kafka_conf_set_rebalance_cb(c, rebalance);
        if ((k->cons = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err))) == NULL) {
            rd_kafka_conf_destroy(c);
            rc = ingest__fail(ctx, INGEST_EINVAL, "kafka: consumer: %s", err);
        }
    }
    rd_kafka_conf_t *pc = rc == 0 ? ingest__kafka_conf(ctx, &opts->kc, KAFKA_PRODUCER, k) : NULL;
    if (rc == 0 && pc == NULL)
        rc = INGEST_EINVAL;
    if (rc == 0)
        rd_kafka_conf_set_dr_msg_cb(pc, reply_dr);
    if (rc == 0 && (k->prod = rd_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof(err))) == NULL) {
        rd_kafka_conf_destroy(pc);
        rc = ingest__fail(ctx, INGEST_EINVAL, "kafka: reply producer: %s", err);
    }
    if (rc < 0) {
        kfree(k);
        return rc;
    }
    rd_kafka_poll_set_consumer(k->cons);
    *out = k;
    return 0;
}

int ingest_core_kafka_run(ingest_core_kafka *k)
{
    /* the reply topic's partitions, once: replies to a device always go to the same one */
    while (k->reply_parts <= 0 && !atomic_load(&k->stop)) {
        if (k->rkt_reply == NULL)
            k->rkt_reply = rd_kafka_topic_new(k->prod, k->reply_topic, NULL);
        if (k->rkt_reply != NULL)
            k->reply_parts = ingest__kafka_partitions(k->kctx, k->prod, k->rkt_reply, 2000);
        if (k->reply_parts <= 0) {
            core_log(k->core, INGEST_LOG_WARN, "kafka: waiting for the reply topic %s: %s", k->reply_topic,
                     ingest_ctx_errmsg(k->kctx));
            struct timespec ts = { 1, 0 };
            nanosleep(&ts, NULL);
        }
    }
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, k->topic, RD_KAFKA_PARTITION_UA);
    const rd_kafka_resp_err_t err = rd_kafka_subscribe(k->cons, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        core_log(k->core, INGEST_LOG_ERROR, "kafka: cannot subscribe to %s: %s", k->topic, rd_kafka_err2str(err));
        return INGEST_EIO;
    }
    core_log(k->core, INGEST_LOG_INFO, "kafka: consuming %s in group %s; replies to %s (%d partitions)", k->topic,
             k->o.kc.group && k->o.kc.group[0] ? k->o.kc.group : INGEST_KAFKA_GROUP_DEFAULT, k->reply_topic,
             (int)k->reply_parts);
    k->last_commit = core_now();
    while (!atomic_load(&k->stop)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(k->cons, 100);
        if (m != NULL) {
            if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
                handle(k, m);
            else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                core_log(k->core, INGEST_LOG_WARN, "kafka: %s", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
        }
        rd_kafka_poll(k->prod, 0);
        char fatal[256];
        const rd_kafka_resp_err_t ferr = rd_kafka_fatal_error(k->prod, fatal, sizeof(fatal));
        if (ferr != RD_KAFKA_RESP_ERR_NO_ERROR) {
            /* an idempotent producer that failed for good takes no reply again: only a new one would */
            core_log(k->core, INGEST_LOG_ERROR, "kafka: the reply producer failed for good (%s: %s): the consumer "
                     "stops, offsets not committed past replies not delivered (a restart answers those batches "
                     "again)", rd_kafka_err2name(ferr), fatal);
            k->failed = 1;
            break;
        }
        if (rd_kafka_fatal_error(k->cons, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            /* (static membership, group.instance.id, fenced by another member with the same id) */
            core_log(k->core, INGEST_LOG_ERROR, "kafka: the consumer failed for good (%s): it stops", fatal);
            k->failed = 1;
            break;
        }
        sessions_recheck(k);
        parts_resume(k, NULL);
        sessions_reap(k);
        reply_retry(k, 0);
        commit_step(k);
    }
    sessions_stop(k);
    commit_offsets(k);
    rd_kafka_consumer_close(k->cons);
    return k->failed ? INGEST_EIO : 0;
}

void ingest_core_kafka_stop(ingest_core_kafka *k)
{
    atomic_store(&k->stop, 1);
}

void ingest_core_kafka_recheck(ingest_core_kafka *k)
{
    atomic_store(&k->recheck, 1);
}

void ingest_core_kafka_destroy(ingest_core_kafka *k)
{
    if (k != NULL)
        kfree(k);
}

void ingest_core_kafka_stats_get(ingest_core_kafka *k, ingest_core_kafka_stats *st)
{
    st->records = atomic_load(&k->records);
    st->bytes = atomic_load(&k->bytes);
    st->forged = atomic_load(&k->forged);
    st->unknown_device = atomic_load(&k->unknown);
    st->malformed = atomic_load(&k->malformed);
    st->batches_begun = atomic_load(&k->begun);
    st->batches_done = atomic_load(&k->done);
    st->commits = atomic_load(&k->commits);
    st->replies_again = atomic_load(&k->replies_again);
    st->replies_given_up = atomic_load(&k->replies_lost);
    st->rebalances = atomic_load(&k->rebalances);
    st->pauses = atomic_load(&k->pauses);
    st->sessions = atomic_load(&k->nsessions);
}
