/*
 * The Kafka transport's clients on librdkafka (include/ingest/kafka.h):
 * configurations from our keys, and the edge's client, an idempotent
 * producer of the device's records whose delivery reports and replies are
 * handed to the edge link (klink.h) by a thread of its own.
 */
#include "../internal.h"
#include "kafka_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- configuration ------------------------------------------------------------ */

static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    const ingest__kafka_logto *t = rd_kafka_opaque(rk);
    if (t == NULL || t->log == NULL)
        return;
    /* syslog levels: 0..3 errors, 4 warnings, 5..6 notices, 7 debug */
    const int ours = level <= 3 ? INGEST_LOG_ERROR : level == 4 ? INGEST_LOG_WARN : level <= 6 ? INGEST_LOG_INFO
                                                                                                  : INGEST_LOG_DEBUG;
    if (ours > t->level)
        return;
    char line[1024];
    snprintf(line, sizeof(line), "kafka: %s: %s", fac, buf);
    t->log(t->ud, ours, line);
}

static int conf_set(ingest_ctx *ctx, rd_kafka_conf_t *c, const char *name, const char *value, const char *what)
{
    char err[512];
    if (rd_kafka_conf_set(c, name, value, err, sizeof(err)) != RD_KAFKA_CONF_OK)
        return ingest__fail(ctx, INGEST_EINVAL, "%s%s: %s", what, name, err);
    return 0;
}

/* Split "name=value" (name non-empty) into name (cap bytes) and value. */
static int split_prop(ingest_ctx *ctx, const char *p, char *name, size_t cap, const char **value)
{
    const char *eq = p ? strchr(p, '=') : NULL;
    if (eq == NULL || eq == p || (size_t)(eq - p) >= cap)
        return ingest__fail(ctx, INGEST_EINVAL, "kafka.properties: \"%s\" is not name=value", p ? p : "");
    memcpy(name, p, (size_t)(eq - p));
    name[eq - p] = '\0';
    *value = eq + 1;
    return 0;
}

static int apply_props(ingest_ctx *ctx, rd_kafka_conf_t *c, const char *const *props, size_t n)
{
    if (n > INGEST_KAFKA_PROPERTIES_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "kafka.properties: %zu entries, at most %d", n,
                            INGEST_KAFKA_PROPERTIES_MAX);
    for (size_t i = 0; i < n; i++) {
        char name[256];
        const char *value = NULL;
        INGEST__FORWARD(split_prop(ctx, props[i], name, sizeof(name), &value));
        INGEST__FORWARD(conf_set(ctx, c, name, value, "kafka.properties."));
    }
    return 0;
}

int ingest_kafka_check_properties(ingest_ctx *ctx, const char *const *props, size_t n)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    if (c == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "kafka: out of memory");
    const int rc = apply_props(ctx, c, props, n);
    rd_kafka_conf_destroy(c);
    return rc;
}

/* name=value in a fresh configuration, read back as property as: 0 with out, or -1. */
static int setting_read(const char *name, const char *value, const char *as, char *out, size_t cap)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    if (c == NULL)
        return -1;
    char err[256];
    size_t sz = cap;
    const int ok = rd_kafka_conf_set(c, name, value, err, sizeof(err)) == RD_KAFKA_CONF_OK &&
                   rd_kafka_conf_get(c, as, out, &sz) == RD_KAFKA_CONF_OK;
    rd_kafka_conf_destroy(c);
    return ok ? 0 : -1;
}

int ingest__kafka_same_setting(const char *name, const char *value, const char *as, const char *kept)
{
    char got[128], want[128];
    if (setting_read(name, value, as, got, sizeof(got)) != 0 || setting_read(as, kept, as, want, sizeof(want)) != 0)
        return -1;
    return strcmp(got, want) == 0;
}

/* Whether the properties set name (so our default gives way). */
static int props_set(const ingest_kafka_conf *kc, const char *name)
{
    const size_t n = strlen(name);
    for (size_t i = 0; i < kc->nprops; i++)
        if (kc->props[i] && strncmp(kc->props[i], name, n) == 0 && kc->props[i][n] == '=')
            return 1;
    return 0;
}

rd_kafka_conf_t *ingest__kafka_conf(ingest_ctx *ctx, const ingest_kafka_conf *kc, int role, void *opaque)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    if (c == NULL) {
        ingest__fail(ctx, INGEST_ENOMEM, "kafka: out of memory");
        return NULL;
    }
    /* defaults a property may change: small queues (a gateway's memory), short fetch waits (latency) */
    /* roles: p producer, r the agent's reader of its replies, g a receiver of the group */
    static const char *const defaults[][3] = {
        { "queue.buffering.max.kbytes", "4096", "p" }, { "linger.ms", "2", "p" },
        { "fetch.wait.max.ms", "50", "rg" },
        /* a device's records come in 1 MB: the group fetches many at once, and holds up to 16 MiB */
        { "queued.max.messages.kbytes", "16384", "g" }, { "max.partition.fetch.bytes", "8388608", "g" },
        /* replies are a few hundred bytes: the agent's reader keeps little */
        { "queued.max.messages.kbytes", "1024", "r" },  { "max.partition.fetch.bytes", "65536", "r" },
        { "socket.keepalive.enable", "true", "prg" },
    };
    int rc = kc->brokers && kc->brokers[0] ? conf_set(ctx, c, "bootstrap.servers", kc->brokers, "kafka.brokers ")
                                           : ingest__fail(ctx, INGEST_EINVAL, "kafka.brokers is empty");
    for (size_t i = 0; rc == 0 && i < sizeof(defaults) / sizeof(defaults[0]); i++)
        if (strchr(defaults[i][2], role == KAFKA_PRODUCER ? 'p' : role == KAFKA_CONSUMER ? 'r' : 'g') &&
            !props_set(kc, defaults[i][0]))
            rc = conf_set(ctx, c, defaults[i][0], defaults[i][1], "kafka default ");
    if (rc == 0)
        rc = apply_props(ctx, c, kc->props, kc->nprops);
    if (rc == 0 && role == KAFKA_PRODUCER) {
        /* what the transport's guarantee rests on: no loss, no duplicate, order per partition */
        rc = conf_set(ctx, c, "enable.idempotence", "true", "kafka ");
        if (rc == 0)
            rc = conf_set(ctx, c, "acks", "all", "kafka ");
    }
    if (rc == 0 && role == KAFKA_GROUP) {
        rc = conf_set(ctx, c, "group.id", kc->group && kc->group[0] ? kc->group : INGEST_KAFKA_GROUP_DEFAULT,
                      "kafka.group ");
        if (rc == 0)
            rc = conf_set(ctx, c, "enable.auto.commit", "false", "kafka ");
        if (rc == 0)
            rc = conf_set(ctx, c, "auto.offset.reset", "earliest", "kafka ");
    }
    if (rc == 0 && role == KAFKA_CONSUMER)
        rc = conf_set(ctx, c, "enable.auto.commit", "false", "kafka ");
    if (rc < 0) {
        rd_kafka_conf_destroy(c);
        return NULL;
    }
    rd_kafka_conf_set_opaque(c, opaque);
    rd_kafka_conf_set_log_cb(c, kafka_log_cb);
    return c;
}

int32_t ingest__kafka_partitions(ingest_ctx *ctx, rd_kafka_t *rk, rd_kafka_topic_t *rkt, int timeout_ms)
{
    const struct rd_kafka_metadata *md = NULL;
    const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        ingest__fail(ctx, INGEST_EIO, "kafka: topic %s: %s", rd_kafka_topic_name(rkt), rd_kafka_err2str(err));
        return 0;
    }
    int32_t n = 0;
    if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        n = md->topics[0].partition_cnt;
    else
        ingest__fail(ctx, INGEST_EIO, "kafka: topic %s: %s", rd_kafka_topic_name(rkt),
                     md->topic_cnt == 1 ? rd_kafka_err2str(md->topics[0].err) : "not found");
    rd_kafka_metadata_destroy(md);
    return n;
}

int ingest_kafka_reply_topic(const ingest_kafka_conf *kc, char *out, size_t cap)
{
    const char *topic = kc->topic && kc->topic[0] ? kc->topic : INGEST_KAFKA_TOPIC_DEFAULT;
    const int n = kc->reply_topic && kc->reply_topic[0] ? snprintf(out, cap, "%s", kc->reply_topic)
                                                          : snprintf(out, cap, "%s-replies", topic);
    return n < 0 || (size_t)n >= cap ? INGEST_ETOOBIG : 0;
}

int32_t ingest_kafka_reply_partition(const char *device, int32_t nparts)
{
    if (nparts <= 0)
        return 0;
    return rd_kafka_msg_partitioner_consistent(NULL, device, strlen(device), nparts, NULL, NULL);
}

/* ---- the edge's client ---------------------------------------------------------- */

#define TOKEN_GEN_SHIFT 40
#define TOKEN_MASK ((1ull << TOKEN_GEN_SHIFT) - 1)

struct ingest_kafka_edge {
    ingest__kafka_logto logto; /* first: the clients' opaque */
    ingest_ctx *ctx;
    ingest_kafka_edge_opts o;
    char device[INGEST_DEVICE_ID_MAX + 1];
    char topic[256], reply_topic[256];
    rd_kafka_t *prod, *cons;
    rd_kafka_topic_t *rkt_reply;
    int32_t reply_part;
    size_t record_max; /* INGEST_KAFKA_RECORD_MAX, or less under a smaller message.max.bytes */
    pthread_t thread;
    int started, consuming;
    atomic_int stop;
    pthread_mutex_t mu; /* link, gen */
    ingest_link *link;
    uint64_t gen;
    atomic_uint_fast64_t produced, delivered, failed, replies, replies_bad;
};

static void klog(ingest_kafka_edge *k, int level, const char *fmt, ...) INGEST__PRINTF(3, 4);
static void klog(ingest_kafka_edge *k, int level, const char *fmt, ...)
{
    if (k->o.log == NULL || level > k->o.log_level)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    k->o.log(k->o.log_userdata, level, line);
}

static void edge_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    ingest_kafka_edge *k = opaque;
    const uint64_t tok = (uint64_t)(uintptr_t)m->_private;
    atomic_fetch_add(m->err ? &k->failed : &k->delivered, 1);
    pthread_mutex_lock(&k->mu);
    if (k->link != NULL && tok >> TOKEN_GEN_SHIFT == k->gen)
        ingest_klink_delivered(k->link, tok & TOKEN_MASK, m->err == 0, m->err ? rd_kafka_err2str(m->err) : NULL);
    pthread_mutex_unlock(&k->mu);
}

/* The bus of the link: publish keyed by the device, waiting while librdkafka's queue is full. */
static int edge_produce(void *ud, const char *key, const uint8_t *rec, size_t len, uint64_t token, char *why,
                        size_t whycap)
{
    ingest_kafka_edge *k = ud;
    pthread_mutex_lock(&k->mu);
    const uint64_t tok = k->gen << TOKEN_GEN_SHIFT | (token & TOKEN_MASK);
    pthread_mutex_unlock(&k->mu);
    for (;;) {
        const rd_kafka_resp_err_t err = rd_kafka_producev(
            k->prod, RD_KAFKA_V_TOPIC(k->topic), RD_KAFKA_V_KEY(key, strlen(key)),
            RD_KAFKA_V_VALUE((void *)rec, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_OPAQUE((void *)(uintptr_t)tok), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            atomic_fetch_add(&k->produced, 1);
            return 0;
        }
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || atomic_load(&k->stop)) {
            snprintf(why, whycap, "%s", rd_kafka_err2str(err));
            return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? INGEST_ETOOBIG : INGEST_EIO;
        }
        rd_kafka_poll(k->prod, 50); /* full: deliveries make room */
    }
}

static void *edge_thread(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-kafka"); /* docs/architecture.md "Threads" */
    ingest_kafka_edge *k = arg;
    const size_t dlen = strlen(k->device);
    while (!atomic_load(&k->stop)) {
        rd_kafka_poll(k->prod, 0);
        rd_kafka_message_t *m = rd_kafka_consume(k->rkt_reply, k->reply_part, 50);
        if (m == NULL)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->key_len == dlen && memcmp(m->key, k->device, dlen) == 0) {
            atomic_fetch_add(&k->replies, 1);
            char why[INGEST__ERRMSG_MAX] = "";
            pthread_mutex_lock(&k->mu);
            const int rc = k->link ? ingest_klink_edge_reply(k->link, m->payload, m->len) : 1;
            if (rc < 0)
                snprintf(why, sizeof(why), "%s", ingest_link_recv_errmsg(k->link));
            pthread_mutex_unlock(&k->mu);
            if (rc < 0) {
                atomic_fetch_add(&k->replies_bad, 1);
                klog(k, INGEST_LOG_WARN, "kafka: a reply on %s [%d] at offset %lld was dropped: %s", k->reply_topic,
                     (int)k->reply_part, (long long)m->offset, why);
            }
        } else if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            klog(k, INGEST_LOG_WARN, "kafka: reading replies: %s", rd_kafka_message_errstr(m));
        }
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

static void edge_free(ingest_kafka_edge *k)
{
    if (k->started) {
        atomic_store(&k->stop, 1);
        pthread_join(k->thread, NULL);
    }
    if (k->consuming)
        rd_kafka_consume_stop(k->rkt_reply, k->reply_part);
    if (k->rkt_reply)
        rd_kafka_topic_destroy(k->rkt_reply);
    if (k->cons)
        rd_kafka_destroy(k->cons);
    if (k->prod) {
        if (rd_kafka_flush(k->prod, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR)
            klog(k, INGEST_LOG_WARN, "kafka: %d records still queued at close; their batches are shipped again",
                 rd_kafka_outq_len(k->prod));
        rd_kafka_destroy(k->prod);
    }
    pthread_mutex_destroy(&k->mu);
    ingest__free(k->ctx, k);
}

int ingest_kafka_edge_open(ingest_ctx *ctx, const ingest_kafka_edge_opts *o, ingest_kafka_edge **out)
{
    *out = NULL;
    if (o->device == NULL || !ingest_wire_id_valid(o->device, strlen(o->device)))
        return ingest__fail(ctx, INGEST_EINVAL, "kafka: a valid device id is needed");
    ingest_kafka_edge *k = ingest__calloc(ctx, 1, sizeof(*k));
    if (k == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "kafka: out of memory");
    k->ctx = ctx;
    k->o = *o;
    k->logto = (ingest__kafka_logto){ o->log, o->log_userdata, o->log_level };
    pthread_mutex_init(&k->mu, NULL);
    snprintf(k->device, sizeof(k->device), "%s", o->device);
    snprintf(k->topic, sizeof(k->topic), "%s", o->kc.topic && o->kc.topic[0] ? o->kc.topic : INGEST_KAFKA_TOPIC_DEFAULT);
    const int timeout = o->timeout_ms > 0 ? o->timeout_ms : 10000;
    char err[512];
    int rc = ingest_kafka_reply_topic(&o->kc, k->reply_topic, sizeof(k->reply_topic));
    if (rc < 0) {
        edge_free(k);
        return ingest__fail(ctx, rc, "kafka: reply topic name too long");
    }
    rd_kafka_conf_t *pc = ingest__kafka_conf(ctx, &o->kc, KAFKA_PRODUCER, k);
    if (pc == NULL) {
        edge_free(k);
        return INGEST_EINVAL;
    }
    rd_kafka_conf_set_dr_msg_cb(pc, edge_dr);
    /* records fit the producer's message.max.bytes (set in kafka.properties to match a broker's smaller
     * limit), with room for the key and Kafka's framing */
    char mmb[32];
    size_t mmbn = sizeof(mmb);
    k->record_max = INGEST_KAFKA_RECORD_MAX;
    if (rd_kafka_conf_get(pc, "message.max.bytes", mmb, &mmbn) == RD_KAFKA_CONF_OK) {
        const unsigned long long v = strtoull(mmb, NULL, 10);
        if (v < INGEST_KAFKA_RECORD_MIN + INGEST_KAFKA_RECORD_ROOM) {
            rd_kafka_conf_destroy(pc);
            edge_free(k);
            return ingest__fail(ctx, INGEST_EINVAL, "kafka.properties: message.max.bytes %llu is too small: "
                                "records need at least %u (%u of record and %u of key and framing)", v,
                                INGEST_KAFKA_RECORD_MIN + INGEST_KAFKA_RECORD_ROOM, INGEST_KAFKA_RECORD_MIN,
                                INGEST_KAFKA_RECORD_ROOM);
        }
        if (v - INGEST_KAFKA_RECORD_ROOM < k->record_max)
            k->record_max = (size_t)(v - INGEST_KAFKA_RECORD_ROOM);
    }
    if ((k->prod = rd_kafka_new(RD_KAFKA_PRODUCER, pc, err, sizeof(err))) == NULL) {
        rd_kafka_conf_destroy(pc);
        edge_free(k);
        return ingest__fail(ctx, INGEST_EINVAL, "kafka: producer: %s", err);
    }
    rd_kafka_conf_t *cc = ingest__kafka_conf(ctx, &o->kc, KAFKA_CONSUMER, k);
    if (cc == NULL) {
        edge_free(k);
        return INGEST_EINVAL;
    }
    if ((k->cons = rd_kafka_new(RD_KAFKA_CONSUMER, cc, err, sizeof(err))) == NULL) {
        rd_kafka_conf_destroy(cc);
        edge_free(k);
        return ingest__fail(ctx, INGEST_EINVAL, "kafka: reply reader: %s", err);
    }
    if ((k->rkt_reply = rd_kafka_topic_new(k->cons, k->reply_topic, NULL)) == NULL) {
        edge_free(k);
        return ingest__fail(ctx, INGEST_ENOMEM, "kafka: reply topic %s: %s", k->reply_topic,
                            rd_kafka_err2str(rd_kafka_last_error()));
    }
    const int32_t nparts = ingest__kafka_partitions(ctx, k->cons, k->rkt_reply, timeout);
    if (nparts <= 0) {
        edge_free(k);
        return INGEST_EIO;
    }
    k->reply_part = ingest_kafka_reply_partition(k->device, nparts);
    int64_t lo = 0, hi = 0;
    const rd_kafka_resp_err_t werr =
        rd_kafka_query_watermark_offsets(k->cons, k->reply_topic, k->reply_part, &lo, &hi, timeout);
    if (werr != RD_KAFKA_RESP_ERR_NO_ERROR) {
        edge_free(k);
        return ingest__fail(ctx, INGEST_EIO, "kafka: where replies end on %s [%d]: %s", k->reply_topic,
                            (int)k->reply_part, rd_kafka_err2str(werr));
    }
    /* from the current end: replies to batches of an earlier run go unread (those batches are shipped
     * again from the journal, and a landed one is answered again) */
    if (rd_kafka_consume_start(k->rkt_reply, k->reply_part, hi) != 0) {
        edge_free(k);
        return ingest__fail(ctx, INGEST_EIO, "kafka: reading %s [%d]: %s", k->reply_topic, (int)k->reply_part,
                            rd_kafka_err2str(rd_kafka_last_error()));
    }
    k->consuming = 1;
    if (pthread_create(&k->thread, NULL, edge_thread, k) != 0) {
        edge_free(k);
        return ingest__fail(ctx, INGEST_ENOMEM, "kafka: cannot start a thread");
    }
    k->started = 1;
    klog(k, INGEST_LOG_DEBUG, "kafka: producing to %s; replies on %s [%d] from offset %lld", k->topic,
         k->reply_topic, (int)k->reply_part, (long long)hi);
    *out = k;
    return 0;
}

void ingest_kafka_edge_close(ingest_kafka_edge *k)
{
    if (k != NULL)
        edge_free(k);
}

int ingest_kafka_edge_link(ingest_kafka_edge *k, const ingest_klink_edge_opts *lo, ingest_link **out)
{
    ingest_klink_edge_opts o = *lo;
    o.bus = (ingest_kbus){ edge_produce, k };
    o.record_max = k->record_max;
    ingest_link *l = NULL;
    INGEST__FORWARD(ingest_klink_edge_create(k->ctx, &o, &l));
    pthread_mutex_lock(&k->mu);
    k->gen++;
    k->link = l;
    pthread_mutex_unlock(&k->mu);
    *out = l;
    return 0;
}

void ingest_kafka_edge_unlink(ingest_kafka_edge *k)
{
    if (k == NULL)
        return;
    pthread_mutex_lock(&k->mu);
    k->link = NULL;
    k->gen++;
    pthread_mutex_unlock(&k->mu);
}

int ingest_kafka_edge_failed(ingest_kafka_edge *k, char *why, size_t whycap)
{
    if (k == NULL || k->prod == NULL)
        return 0;
    char reason[256] = "";
    const rd_kafka_resp_err_t err = rd_kafka_fatal_error(k->prod, reason, sizeof(reason));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
        return 0;
    snprintf(why, whycap, "%s: %s", rd_kafka_err2name(err), reason);
    return 1;
}

void ingest_kafka_edge_stats_get(ingest_kafka_edge *k, ingest_kafka_edge_stats *st)
{
    st->produced = atomic_load(&k->produced);
    st->delivered = atomic_load(&k->delivered);
    st->failed = atomic_load(&k->failed);
    st->replies = atomic_load(&k->replies);
    st->replies_bad = atomic_load(&k->replies_bad);
}
