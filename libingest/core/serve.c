/*
 * Serving one device over a link (include/ingest/core.h): the protocol's
 * core side.  BATCH_BEGIN, the manifest's parts and MANIFEST_END open a
 * batch in a lander; the WANT asks for the chunks the core does not hold;
 * chunks (verified ahead by the reader thread, reader.c) are landed as
 * they come; BATCH_COMMIT makes the batch durable (here, or with the
 * pipeline feature in the committer thread while the next batch arrives)
 * and the ACK says so.  Dictionaries a device offers are taken before a
 * batch opens.
 */
#include "core_int.h"
#include "ingest/manifest.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct u32vec {
    uint32_t *v;
    size_t n, cap;
    ingest_ctx *ctx; /* v's allocator */
} u32vec;

static int u32vec_push(u32vec *a, const uint32_t *v, size_t n)
{
    if (n == 0) /* v may be NULL then; memcpy(NULL, NULL, 0) is undefined */
        return 0;
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1024;
        while (cap < a->n + n)
            cap *= 2;
        uint32_t *p = ingest__realloc(a->ctx, a->v, a->cap * sizeof(*p), cap * sizeof(*p));
        if (p == NULL)
            return -1;
        a->v = p;
        a->cap = cap;
    }
    memcpy(a->v + a->n, v, n * sizeof(*v));
    a->n += n;
    return 0;
}

static int cmp_u32(const void *a, const void *b)
{
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sort and deduplicate the indexes. */
static void sort_wants(u32vec *w)
{
    if (w->n > 1) /* w->v is NULL while nothing was pushed; qsort(NULL, 0) is undefined */
        qsort(w->v, w->n, sizeof(uint32_t), cmp_u32);
    size_t n = 0;
    for (size_t i = 0; i < w->n; i++)
        if (n == 0 || w->v[i] != w->v[n - 1])
            w->v[n++] = w->v[i];
    w->n = n;
}

/* With the runs feature: the sorted indexes w as WANT frames of runs (first, n), MORE on all but the last. */
static int send_want_runs(ingest_link *lk, const char *batch, const u32vec *w, size_t nruns)
{
    uint32_t *pairs = ingest__malloc(w->ctx, 2 * nruns * sizeof *pairs);
    if (pairs == NULL)
        return ingest__fail(w->ctx, INGEST_ENOMEM, "out of memory for %zu runs of wanted chunks", nruns);
    size_t k = 0;
    for (size_t i = 0; i < w->n; i++) {
        if (k > 0 && w->v[i] == pairs[2 * (k - 1)] + pairs[2 * (k - 1) + 1]) {
            pairs[2 * (k - 1) + 1]++;
        } else {
            pairs[2 * k] = w->v[i];
            pairs[2 * k + 1] = 1;
            k++;
        }
    }
    const size_t per = (INGEST_WIRE_MAX_PAYLOAD - 256) / 8;
    size_t off = 0;
    int rc = 0;
    do {
        const size_t c = nruns - off < per ? nruns - off : per;
        ingest_wire_msg m;
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_WANT;
        snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", batch);
        m.u.want.count = (uint32_t)c;
        m.u.want.idx = pairs + 2 * off;
        m.u.want.flags = INGEST_WANT_RUNS | (off + c < nruns ? INGEST_WANT_MORE : 0);
        if ((rc = ingest_link_send(lk, &m)) < 0)
            break;
        off += c;
    } while (off < nruns);
    ingest__free(w->ctx, pairs);
    return rc;
}

/* Send the indexes as WANT frames (sorted, deduplicated), MORE on all but the last. */
static int send_wants(ingest_link *lk, const char *batch, u32vec *w)
{
    sort_wants(w);
    if ((lk->features & (INGEST_SESSION_FEATURE_RUNS | INGEST_SESSION_FEATURE_PACK)) ==
        (INGEST_SESSION_FEATURE_RUNS | INGEST_SESSION_FEATURE_PACK)) { /* (runs come with pack: the device's rule) */
        size_t nruns = 0;
        for (size_t i = 0; i < w->n; i++)
            nruns += i == 0 || w->v[i] != w->v[i - 1] + 1;
        if (nruns > 0 && 2 * nruns < w->n) /* 8 bytes a run against 4 an index */
            return send_want_runs(lk, batch, w, nruns);
    }
    const size_t per = (INGEST_WIRE_MAX_PAYLOAD - 256) / 4;
    size_t off = 0;
    do {
        const size_t k = w->n - off < per ? w->n - off : per;
        ingest_wire_msg m;
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_WANT;
        snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", batch);
        m.u.want.count = (uint32_t)k;
        m.u.want.idx = w->v + off;
        m.u.want.flags = off + k < w->n ? INGEST_WANT_MORE : 0;
        const int rc = ingest_link_send(lk, &m);
        if (rc < 0)
            return rc;
        off += k;
    } while (off < w->n);
    return 0;
}

static int send_ack(ingest_link *lk, const char *batch, int status, const char *msg)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ACK;
    snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", batch);
    m.u.ack.status = status;
    snprintf(m.u.ack.message, sizeof(m.u.ack.message), "%s", msg);
    return ingest_link_send(lk, &m);
}

/* Tests only (ingest_core_opts.test_ack_delay_ms): the window between durable and acknowledged, held open. */
static void test_ack_delay(const ingest_core *s)
{
    if (s->o.test_ack_delay_ms <= 0)
        return;
    const struct timespec ts = { s->o.test_ack_delay_ms / 1000, (long)(s->o.test_ack_delay_ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* FILE_REFUSED for each file of b the lander refused, before the batch's ACK. */
static int send_refusals(ingest_core *s, ingest_link *lk, const char *device, const char *batch,
                         const ingest_lander_batch *b)
{
    const uint32_t n = ingest_lander_refused_count(b);
    for (uint32_t k = 0; k < n; k++) {
        ingest_wire_msg m;
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_FILE_REFUSED;
        const char *why = NULL;
        int code = 0;
        (void)ingest_lander_refused(b, k, &m.u.refused.file_index, &code, &why);
        snprintf(m.u.refused.batch_id, sizeof(m.u.refused.batch_id), "%s", batch);
        m.u.refused.code = code < 0 ? code : INGEST_EINVAL;
        snprintf(m.u.refused.message, sizeof(m.u.refused.message), "%s", why != NULL && why[0] ? why : "refused");
        INGEST__FORWARD(ingest_link_send(lk, &m));
    }
    if (n > 0)
        ingest_metric_add(s->m.files_refused, device, n);
    return 0;
}

/*
 * A replay b of a batch landed before: the files its landed manifest
 * records as refused are told again (FILE_REFUSED) before the duplicate
 * ACK, so a device whose first answer was lost never takes them for landed
 * (its after_ship would delete them).  Each by the index of its path in b:
 * a replay may hold fewer files, in another order (the files that changed
 * since are left out of it); none for a file b does not hold.  Best effort:
 * a manifest that cannot be read tells nothing.
 */
static int send_landed_refusals(ingest_core *s, ingest_link *lk, ingest_ctx *ctx, const char *device,
                                const char *batch, const ingest_lander_batch *b)
{
    char path[4096];
    if (s->o.bronze == NULL ||
        (size_t)snprintf(path, sizeof(path), "%s/_manifests/%s/%s.jsonl", s->o.bronze, device, batch) >= sizeof(path))
        return 0;
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    int rc = 0;
    if (ingest_manifest_reader_open(ctx, path, &r) == 0) {
        while (rc == 0 && ingest_manifest_reader_next(r, &rec) == 1) {
            if (rec.type != INGEST_MREC_FILE || rec.refused == NULL)
                continue;
            const int64_t fi = ingest_lander_file_of_path(b, rec.path);
            if (fi >= 0) {
                ingest_wire_msg m;
                memset(&m, 0, sizeof(m));
                m.type = INGEST_MSG_FILE_REFUSED;
                snprintf(m.u.refused.batch_id, sizeof(m.u.refused.batch_id), "%s", batch);
                m.u.refused.file_index = (uint32_t)fi;
                /* the manifest keeps the reason, not the code: a withdrawal is told as one again */
                m.u.refused.code =
                    strcmp(rec.refused, INGEST_WIRE_WITHDRAWN_REASON) == 0 ? INGEST_ENOTFOUND : INGEST_EINVAL;
                snprintf(m.u.refused.message, sizeof(m.u.refused.message), "%s", rec.refused);
                rc = ingest_link_send(lk, &m);
            }
        }
        ingest_manifest_reader_close(r);
    }
    return rc;
}

static int send_received(ingest_link *lk, const char *batch)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_RECEIVED;
    snprintf(m.u.received.batch_id, sizeof(m.u.received.batch_id), "%s", batch);
    return ingest_link_send(lk, &m);
}

static int send_error(ingest_link *lk, int code, const char *msg)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_ERROR;
    m.u.error.code = code;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", msg);
    return ingest_link_send(lk, &m);
}

/* Collect the lander's re-wants into w. */
static int collect_rewants(ingest_lander_batch *b, u32vec *w)
{
    const uint32_t *idx;
    size_t n;
    ingest_lander_rewants(b, &idx, &n);
    return n ? u32vec_push(w, idx, n) : 0;
}

/* ---- making batches durable ------------------------------------------------ */

/*
 * The land lock, as the landers take it themselves (ingest_lander_set_lock)
 * around their short work on the shared store and index: the replay check
 * and index lookups of a new batch, the lookups of known chunks, the path
 * versions with the renames they order, the index update and the store
 * commit.  Parsing manifests, writing, copying and hashing chunks and
 * every fsync run outside it, so devices land in parallel.
 */
static void land_unlock(void *ud) { pthread_mutex_unlock(&((ingest_core *)ud)->land_lock); }
static void land_lock(void *ud) { pthread_mutex_lock(&((ingest_core *)ud)->land_lock); }

/*
 * Finish a prepared batch (without the land lock: the lander takes it):
 * make it durable, count it, log it, and fill ack/why for the ACK.
 */
static int finish_batch(ingest_core *s, ingest_lander_batch *b, ingest_ctx *lctx, const char *device, const char *batch,
                        double batch_t0, char *why, size_t whycap)
{
    const double t0 = core_now();
    const int rc = ingest_lander_commit_finish(b, NULL);
    snprintf(why, whycap, "%s", ingest_ctx_errmsg(lctx));
    ingest_lander_stats st;
    ingest_lander_batch_stats(b, &st);
    ingest_metric_add_seconds(s->m.stage, "commit", core_now() - t0);
    if (rc < 0) {
        ingest_metric_add(s->m.errors, "commit", 1);
        core_log(s, INGEST_LOG_WARN, "device %s batch %s failed: %s: %s", device, batch, ingest_strerror(rc), why);
        s->batches_failed++;
        ingest_metric_add(s->m.failed, device, 1);
        return rc;
    }
    s->batches_landed++;
    ingest_metric_add(s->m.landed, device, 1);
    ingest_metric_add(s->m.files, device, st.files);
    ingest_metric_add(s->m.bytes, device, st.bytes);
    ingest_metric_add(s->m.chunks_new, device, st.chunks_new);
    ingest_metric_add(s->m.chunks_known, device, st.chunks_known);
    ingest_metric_add(s->m.rewanted, device, st.chunks_rewanted);
    ingest_metric_add(s->m.wire, device, st.bytes_received);
    ingest_metric_add(s->m.written, device, st.bytes_written);
    ingest_metric_observe(s->m.latency, device, core_now() - batch_t0);
    char remade[64] = ""; /* directories removed under the batch (docs/landing.md): only when there were */
    if (st.dirs_remade > 0)
        snprintf(remade, sizeof remade, ", %llu directories made again", (unsigned long long)st.dirs_remade);
    core_log(s, INGEST_LOG_INFO,
             "device %s batch %s landed: %llu files, %llu bytes, %llu chunks new, %llu known, %llu re-asked, "
             "%llu written, %llu cloned, commit %.3fs%s",
             device, batch, (unsigned long long)st.files, (unsigned long long)st.bytes,
             (unsigned long long)st.chunks_new, (unsigned long long)st.chunks_known,
             (unsigned long long)st.chunks_rewanted, (unsigned long long)st.bytes_written,
             (unsigned long long)st.bytes_cloned, core_now() - t0, remade);
    return 0;
}

/*
 * A connection's committer thread (pipelined connections): makes the
 * prepared batches durable, in order, and sends their ACKs while the
 * connection's thread receives the next batch.  It holds at most
 * CORE_COMMIT_QUEUE batches (received, not yet acknowledged): the
 * connection's thread waits for room before it sends the next RECEIVED,
 * and for the queue to be empty before it sends an ACK itself (ACKs go
 * out in batch order).
 */
#define CORE_COMMIT_QUEUE 2
#define CORE_LANDERS (CORE_COMMIT_QUEUE + 1) /* one per queued batch, and the open batch's */

typedef struct commit_job {
    ingest_lander_batch *b;
    ingest_ctx *lctx;
    char batch[INGEST_WIRE_BATCH_ID_MAX + 1];
    double t0;
} commit_job;

typedef struct committer {
    ingest_core *s;
    ingest_link *lk;
    const char *device;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, quit;
    unsigned head, n; /* jobs q[head], q[head + 1]...: n of them, the first in the making while n > 0 */
    commit_job q[CORE_COMMIT_QUEUE];
} committer;

static void *committer_main(void *arg)
{
    committer *cm = arg;
    ingest_core *s = cm->s;
    pthread_mutex_lock(&cm->mu);
    for (;;) {
        while (cm->n == 0 && !cm->quit)
            pthread_cond_wait(&cm->cv, &cm->mu);
        if (cm->n == 0)
            break;
        commit_job *j = &cm->q[cm->head];
        pthread_mutex_unlock(&cm->mu);
        char why[INGEST_WIRE_MESSAGE_MAX];
        const int rc = finish_batch(s, j->b, j->lctx, cm->device, j->batch, j->t0, why, sizeof(why));
        /* A lost connection loses only the ACK: the batch is durable, a resend is acked as a duplicate. */
        if (rc >= 0)
            test_ack_delay(s);
        if (rc < 0 || send_refusals(s, cm->lk, cm->device, j->batch, j->b) == 0)
            (void)send_ack(cm->lk, j->batch, rc < 0 ? rc : INGEST_ACK_LANDED, rc < 0 ? why : "landed");
        ingest_lander_batch_destroy(j->b);
        pthread_mutex_lock(&cm->mu);
        j->b = NULL;
        cm->head = (cm->head + 1) % CORE_COMMIT_QUEUE;
        cm->n--;
        pthread_cond_broadcast(&cm->cv);
    }
    pthread_mutex_unlock(&cm->mu);
    return NULL;
}

/* Wait until the committer holds at most keep batches (0: idle; CORE_COMMIT_QUEUE - 1: room for one more). */
static void committer_wait(committer *cm, unsigned keep)
{
    if (!cm->started)
        return;
    pthread_mutex_lock(&cm->mu);
    while (cm->n > keep)
        pthread_cond_wait(&cm->cv, &cm->mu);
    pthread_mutex_unlock(&cm->mu);
}

static void committer_wait_idle(committer *cm) { committer_wait(cm, 0); }

/* Hand a prepared batch over (the committer has room); 0, or -1 when its thread cannot start. */
static int committer_give(committer *cm, ingest_lander_batch *b, ingest_ctx *lctx, const char *batch, double t0)
{
    if (!cm->started) {
        pthread_mutex_init(&cm->mu, NULL);
        pthread_cond_init(&cm->cv, NULL);
        if (core_thread_start(&cm->thread, committer_main, cm, "ingest-commit") != 0) {
            pthread_cond_destroy(&cm->cv);
            pthread_mutex_destroy(&cm->mu);
            return -1;
        }
        cm->started = 1;
    }
    pthread_mutex_lock(&cm->mu);
    commit_job *j = &cm->q[(cm->head + cm->n) % CORE_COMMIT_QUEUE];
    j->b = b;
    j->lctx = lctx;
    snprintf(j->batch, sizeof(j->batch), "%s", batch);
    j->t0 = t0;
    cm->n++;
    pthread_cond_broadcast(&cm->cv);
    pthread_mutex_unlock(&cm->mu);
    return 0;
}

/* Let the batches in hand finish (their ACKs are sent if the connection still stands), then end the thread. */
static void committer_stop(committer *cm)
{
    if (!cm->started)
        return;
    pthread_mutex_lock(&cm->mu);
    cm->quit = 1;
    pthread_cond_broadcast(&cm->cv);
    pthread_mutex_unlock(&cm->mu);
    pthread_join(cm->thread, NULL);
    pthread_cond_destroy(&cm->cv);
    pthread_mutex_destroy(&cm->mu);
    cm->started = 0;
}

/* ---- the dictionaries of a connection ------------------------------------- */

/*
 * A connection decodes with the dictionaries its own device offered on it,
 * and only those: each connection has its own codecs (the reader's and the
 * landers'), loaded by reference with bytes held by the store or by the
 * connection.  So two devices whose different dictionaries share an id
 * (ids are 31 bits) never decode each other's chunks, and no device can
 * replace a dictionary another one relies on.
 */
#define INGEST_CORE_SESSION_DICTS_MAX 8

typedef struct conn_dicts {
    struct {
        uint32_t id;
        uint8_t hash[INGEST_DICT_HASH_BYTES];
        const uint8_t *bytes; /* the store's or own[]: loaded into landers started later (landers_start) */
        size_t len;
    } d[INGEST_CORE_SESSION_DICTS_MAX]; /* accepted on this session */
    unsigned n;
    uint8_t *own[INGEST_CORE_SESSION_DICTS_MAX]; /* bytes received on this connection: the codecs refer to them */
    unsigned nown;
    const uint8_t *held[INGEST_CORE_SESSION_DICTS_MAX]; /* the store's, looked up: released when the codecs go */
    unsigned nheld;
    int receiving;                   /* a DICT_WANT SEND was answered: DICT_DATA of offer comes */
    ingest_wire_dict_offer offer;
    uint8_t *buf;                    /* what came of it so far */
    uint32_t got, cap;               /* cap: buf's size, doubling with what came, at most the offered size */
} conn_dicts;

/* Load a dictionary (bytes outlive the codecs) into the reader's codec and the landers': 0, or a code with why. */
static int dict_load(readq *q, ingest_codec *const lc[CORE_LANDERS], ingest_ctx *ctx, const uint8_t *bytes, size_t len,
                     char *why, size_t cap)
{
    pthread_mutex_lock(&q->lock);
    while (q->decoding) { /* the reader uses its codec without the lock */
        q->decoding_waiting++;
        pthread_cond_wait(&q->cond, &q->lock);
        q->decoding_waiting--;
    }
    int rc = ingest_codec_add_dict_decode_ref(q->codec, bytes, len, NULL);
    if (rc < 0) /* read while the reader cannot write ctx: it is not decoding */
        snprintf(why, cap, "%s", ingest_ctx_errmsg(ctx));
    pthread_mutex_unlock(&q->lock);
    for (int i = 0; i < CORE_LANDERS && rc == 0; i++) /* landers decode only on the connection's thread: this one; none before its first batch */
        if (lc[i] != NULL && (rc = ingest_codec_add_dict_decode_ref(lc[i], bytes, len, NULL)) < 0)
            snprintf(why, cap, "%s", "cannot load it for landing (out of memory?)");
    return rc;
}

static void dict_accept(conn_dicts *cd, uint32_t id, const uint8_t hash[INGEST_DICT_HASH_BYTES], const uint8_t *bytes,
                        size_t len)
{
    cd->d[cd->n].id = id;
    memcpy(cd->d[cd->n].hash, hash, INGEST_DICT_HASH_BYTES);
    cd->d[cd->n].bytes = bytes;
    cd->d[cd->n].len = len;
    cd->n++;
}

/* Answer a DICT_OFFER (no batch is open, the committer is idle). */
static int dict_offer(ingest_core *s, conn_dicts *cd, readq *q, ingest_codec *const lc[CORE_LANDERS], ingest_ctx *ctx, ingest_link *lk,
                      const char *device, const ingest_wire_dict_offer *o)
{
    ingest_wire_msg a;
    memset(&a, 0, sizeof(a));
    a.type = INGEST_MSG_DICT_WANT;
    a.u.dict_want.dict_id = o->dict_id;
    a.u.dict_want.answer = INGEST_DICT_REFUSED;
    char *why = a.u.dict_want.message;
    const size_t whycap = sizeof(a.u.dict_want.message);
    char hex[2 * INGEST_DICT_HASH_BYTES + 1];
    ingest_to_hex(o->hash, INGEST_DICT_HASH_BYTES, hex);
    unsigned i = 0;
    while (i < cd->n && cd->d[i].id != o->dict_id)
        i++;
    if (i < cd->n) {
        if (memcmp(cd->d[i].hash, o->hash, INGEST_DICT_HASH_BYTES) == 0)
            a.u.dict_want.answer = INGEST_DICT_HAVE;
        else
            snprintf(why, whycap, "dictionary id %u already names another dictionary on this session",
                     (unsigned)o->dict_id);
    } else if (cd->n == INGEST_CORE_SESSION_DICTS_MAX || cd->nheld == INGEST_CORE_SESSION_DICTS_MAX) {
        snprintf(why, whycap, "at most %d dictionaries per session", INGEST_CORE_SESSION_DICTS_MAX);
    } else {
        const uint8_t *bytes = ingest_dictstore_find(s->o.dicts, device, o->hash, o->size);
        if (bytes != NULL && ingest_dict_id(bytes, o->size) == o->dict_id)
            cd->held[cd->nheld++] = bytes; /* (a codec may refer to it from here, even when loading fails) */
        if (bytes == NULL) {
            a.u.dict_want.answer = INGEST_DICT_SEND;
            cd->receiving = 1;
            cd->offer = *o;
            cd->got = 0;
        } else if (ingest_dict_id(bytes, o->size) != o->dict_id) {
            snprintf(why, whycap, "the dictionary with this hash has id %u, not %u", ingest_dict_id(bytes, o->size),
                     (unsigned)o->dict_id);
            ingest_dictstore_release(s->o.dicts, bytes);
        } else if (dict_load(q, lc, ctx, bytes, o->size, why, whycap) == 0) {
            dict_accept(cd, o->dict_id, o->hash, bytes, o->size);
            a.u.dict_want.answer = INGEST_DICT_HAVE;
        }
    }
    if (a.u.dict_want.answer == INGEST_DICT_HAVE) {
        ingest_metric_add(s->m.dicts, "held", 1);
        core_log(s, INGEST_LOG_INFO, "device %s: dictionary %u (%.16s) offered: held already", device,
                 (unsigned)o->dict_id, hex);
    } else if (a.u.dict_want.answer == INGEST_DICT_SEND) {
        core_log(s, INGEST_LOG_INFO, "device %s: dictionary %u (%.16s, %u bytes) offered: asking for it", device,
                 (unsigned)o->dict_id, hex, (unsigned)o->size);
    } else {
        ingest_metric_add(s->m.dicts, "refused", 1);
        core_log(s, INGEST_LOG_WARN, "device %s: dictionary %u (%.16s) offered: refused: %s", device,
                 (unsigned)o->dict_id, hex, why);
    }
    return ingest_link_send(lk, &a);
}

/*
 * A DICT_DATA slice: 0 (more to come, or the dictionary is verified,
 * loaded and stored), or a code for an ERROR with why (nothing stored).
 */
static int dict_data(ingest_core *s, conn_dicts *cd, readq *q, ingest_codec *const lc[CORE_LANDERS], ingest_ctx *ctx, const char *device,
                     const ingest_wire_dict_data *d, char *why, size_t cap)
{
    const ingest_wire_dict_offer *o = &cd->offer;
    if (!cd->receiving || d->dict_id != o->dict_id || d->offset != cd->got || d->len > o->size - cd->got) {
        const char *what = !cd->receiving              ? "no dictionary was asked for"
                           : d->dict_id != o->dict_id  ? "the dictionary asked for is another"
                           : d->offset != cd->got      ? "not at the offset that comes next"
                                                       : "past the offered size";
        snprintf(why, cap,
                 "DICT_DATA of dictionary %u, %zu bytes at offset %u: %s (asked for: %u, %u bytes, %u received)",
                 (unsigned)d->dict_id, d->len, (unsigned)d->offset, what, cd->receiving ? (unsigned)o->dict_id : 0u,
                 cd->receiving ? (unsigned)o->size : 0u, (unsigned)cd->got);
        return INGEST_EPROTO;
    }
    if (d->len > cd->cap - cd->got) {
        /* grows with what came (never to a declared size at once), doubling so that small slices cost no
         * copy of everything before them each */
        uint32_t ncap = cd->cap < 4096u ? 4096u : cd->cap;
        while (ncap < cd->got + d->len) /* (at most the offered size, 4 MiB: checked above) */
            ncap *= 2;
        if (ncap > o->size)
            ncap = o->size;
        uint8_t *p = ingest__realloc(s->ctx, cd->buf, cd->got, ncap);
        if (p == NULL) {
            snprintf(why, cap, "out of memory for dictionary %u", (unsigned)o->dict_id);
            return INGEST_ENOMEM;
        }
        cd->buf = p;
        cd->cap = ncap;
    }
    memcpy(cd->buf + cd->got, d->data, d->len);
    cd->got += (uint32_t)d->len;
    if (cd->got < o->size)
        return 0;
    uint8_t *bytes = cd->buf;
    cd->buf = NULL;
    cd->got = cd->cap = 0;
    cd->receiving = 0;
    uint8_t h[INGEST_DICT_HASH_BYTES];
    ingest_dict_hash(bytes, o->size, h);
    if (ingest_dict_id(bytes, o->size) != o->dict_id) {
        snprintf(why, cap, "the dictionary sent has id %u, offered as %u", ingest_dict_id(bytes, o->size),
                 (unsigned)o->dict_id);
        ingest__free(s->ctx, bytes);
        return INGEST_EMISMATCH;
    }
    if (memcmp(h, o->hash, sizeof(h)) != 0) {
        snprintf(why, cap, "the bytes of dictionary %u do not have the offered hash", (unsigned)o->dict_id);
        ingest__free(s->ctx, bytes);
        return INGEST_EMISMATCH;
    }
    /* Stored, the session uses the store's copy (held until its codecs go), not a second one of its own. */
    char swhy[512] = "", lwhy[512];
    const int stored = ingest_dictstore_add(s->o.dicts, device, o->hash, bytes, o->size, swhy, sizeof(swhy)) == 0;
    const uint8_t *use = stored ? ingest_dictstore_find(s->o.dicts, device, o->hash, o->size) : NULL;
    const int own_copy = use == NULL;
    if (use != NULL) {
        cd->held[cd->nheld++] = use; /* (an offer was answered SEND only with room here) */
        ingest__free(s->ctx, bytes);
    } else {
        cd->own[cd->nown++] = bytes; /* from here the codecs may refer to them */
        use = bytes;
        if (stored)
            snprintf(swhy, sizeof(swhy), "stored, but gone from the store at once");
    }
    if (dict_load(q, lc, ctx, use, o->size, lwhy, sizeof(lwhy)) != 0) {
        snprintf(why, cap, "dictionary %u is not usable: %s", (unsigned)o->dict_id, lwhy);
        return INGEST_ECORRUPT;
    }
    dict_accept(cd, o->dict_id, o->hash, use, o->size);
    ingest_metric_add(s->m.dicts, "received", 1);
    char hex[2 * INGEST_DICT_HASH_BYTES + 1];
    ingest_to_hex(o->hash, INGEST_DICT_HASH_BYTES, hex);
    if (!own_copy)
        core_log(s, INGEST_LOG_INFO, "device %s: dictionary %u (%.16s, %u bytes) received and stored", device,
                 (unsigned)o->dict_id, hex, (unsigned)o->size);
    else
        core_log(s, INGEST_LOG_WARN, "device %s: dictionary %u (%.16s) received, used on this session only: %s", device,
                 (unsigned)o->dict_id, hex, swhy);
    return 0;
}

/* Tests only (ingest_core_opts.test_placed_pause_ms): the commit held between its renames and its manifest. */
static void placed_pause(void *ud, const char *device, int phase)
{
    const ingest_core *s = ud;
    if (phase != INGEST__LANDER_HOOK_PLACED)
        return;
    core_log((ingest_core *)s, INGEST_LOG_INFO, "device %s: test: commit paused after its renames for %d ms", device,
             s->o.test_placed_pause_ms);
    const struct timespec ts = { s->o.test_placed_pause_ms / 1000, (long)(s->o.test_placed_pause_ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/*
 * The landers of a link (n: CORE_LANDERS pipelined, else one), their contexts and codecs, made at the link's
 * first batch, not when it connects: an idle device holds none (about 40
 * KiB of a session's heap, docs/architecture.md "Connection model").  The
 * dictionaries accepted on the link so far are loaded into the new codecs.
 * 0, or a code (logged).
 */
static int landers_start(ingest_core *s, ingest_link *link, const char *device, const conn_dicts *cd,
                         const ingest_lander_lock *land_lk, int n, ingest_ctx *lctx[CORE_LANDERS],
                         ingest_codec *lcodec[CORE_LANDERS], ingest_lander *landers[CORE_LANDERS])
{
    for (int i = 0; i < n; i++) {
        if ((lctx[i] = ingest_ctx_create(&s->ctx->alloc)) == NULL) {
            core_log(s, INGEST_LOG_ERROR, "device %s: cannot start landing: out of memory", device);
            return INGEST_ENOMEM;
        }
        ingest_ctx_set_log(lctx[i], s->o.log, s->o.log_userdata, s->o.lib_log_level);
        int rc = ingest_codec_create(lctx[i], 1, &lcodec[i]);
        for (unsigned j = 0; rc == 0 && j < cd->n; j++)
            rc = ingest_codec_add_dict_decode_ref(lcodec[i], cd->d[j].bytes, cd->d[j].len, NULL);
        if (rc == 0)
            rc = ingest_lander_create(lctx[i], s->o.store, s->o.index, s->o.bronze, s->o.layout, s->dedup, lcodec[i],
                                      &landers[i]);
        if (rc == 0)
            rc = ingest_lander_set_direct_io(landers[i], s->o.direct_io);
        if (rc == 0)
            rc = ingest_lander_set_append(landers[i], s->o.append_in_place);
        if (rc == 0)
            rc = ingest_lander_set_lock(landers[i], land_lk);
        if (rc == 0 && s->o.peer_wait_ms >= 0 && !link->sends_unwanted)
            rc = ingest_lander_set_share_inflight(
                landers[i], 1, s->o.peer_wait_ms > 0 ? s->o.peer_wait_ms : INGEST_CORE_PEER_WAIT_DEFAULT_MS);
        if (rc == 0) {
            ingest_lander_set_catalog(landers[i], s->o.catalog);
            ingest__lander_share_syncs(landers[i], &s->syncs);
            if (s->land_hook != NULL)
                ingest__lander_set_hook(landers[i], s->land_hook, s->land_hook_ud);
            else if (s->o.test_placed_pause_ms > 0)
                ingest__lander_set_hook(landers[i], placed_pause, s);
        }
        if (rc < 0) {
            core_log(s, INGEST_LOG_ERROR, "device %s: cannot start landing: %s", device, ingest_ctx_errmsg(lctx[i]));
            return rc;
        }
    }
    return 0;
}

/* The open batch failed: count it, withdraw it from the reader and let it go. */
static void drop_failed_batch(ingest_core *s, readq *q, ingest_lander_batch **b, const char *device)
{
    s->batches_failed++;
    ingest_metric_add(s->m.failed, device, 1);
    core_readq_set_batch(q, NULL);
    ingest_lander_batch_destroy(*b);
    *b = NULL;
}

/*
 * A received chunk (what: "chunk", "delta chunk") failed the open batch
 * with rc: say why, count it (errors of kind), drop the batch, tell the
 * device.
 */
static void chunk_failed(ingest_core *s, readq *q, ingest_lander_batch **b, ingest_link *lk, const char *device,
                         const char *batch, const char *what, const char *kind, uint32_t index, int rc, const char *why)
{
    core_log(s, INGEST_LOG_WARN, "device %s batch %s failed: %s %u: %s: %s", device, batch, what, index,
             ingest_strerror(rc), why);
    ingest_metric_add(s->m.errors, kind, 1);
    drop_failed_batch(s, q, b, device);
    send_error(lk, rc, why);
}

int ingest_core_serve(ingest_core *s, ingest_link *link, const char *device_id)
{
    ingest_ctx *ctx = ingest_ctx_create(&s->ctx->alloc);
    /* Landers, each with its own context, used in turn: while the
     * committer thread finishes the batches of two, the next batch lands on
     * the third (pipelined links; a link without pipelining has one). */
    ingest_lander *landers[CORE_LANDERS] = { NULL };
    ingest_ctx *lctx[CORE_LANDERS] = { NULL };
    int k = 0;
    ingest_lander_batch *b = NULL;
    committer cm;
    memset(&cm, 0, sizeof(cm));
    uint8_t *manifest = NULL;
    size_t mlen = 0, mcap = 0;
    u32vec wants = { NULL, 0, 0, s->ctx };
    char batch[INGEST_WIRE_BATCH_ID_MAX + 1] = "";
    char device[INGEST_DEVICE_ID_MAX + 1] = "";
    uint32_t parts = 0;
    readq q;
    memset(&q, 0, sizeof(q));
    pthread_mutex_init(&q.lock, NULL);
    pthread_cond_init(&q.cond, NULL);
    int reader_started = 0, reader_done = 0, claimed = 0, result = INGEST_ENOMEM;
    double batch_t0 = 0;
    uint64_t gen = 0; /* of the open batch as published to the reader */
    pthread_t reader;
    qitem *it = NULL;
    /* The landers' decoders (one each: a lander's errors name the codec's detail from its own context):
     * this link's dictionaries only. */
    ingest_codec *lcodec[CORE_LANDERS] = { NULL };
    conn_dicts cd;
    memset(&cd, 0, sizeof(cd));
    core_delta dl; /* the open batch's DELTA_BASEs (delta feature) */
    memset(&dl, 0, sizeof(dl));
    dl.ctx = s->ctx;
    s->links++;
    ingest_metric_add(s->m.conns, NULL, 1);
    if (ctx == NULL)
        goto out;
    ingest_ctx_set_log(ctx, s->o.log, s->o.log_userdata, s->o.lib_log_level);
    snprintf(device, sizeof(device), "%s", device_id);
    int rc;
    if (link->features & INGEST_SESSION_FEATURE_LANDING) {
        /* the landing rules, first (before the device's previous session is waited for: the agent
         * waits for them no longer than for any answer): it refuses what breaks them before reading it */
        ingest_wire_msg lm;
        memset(&lm, 0, sizeof(lm));
        lm.type = INGEST_MSG_LANDING;
        lm.u.landing.path_max = INGEST_PATH_LANDED_MAX - 1;
        lm.u.landing.name_max = INGEST_PATH_NAME_MAX;
        snprintf(lm.u.landing.layout, sizeof(lm.u.landing.layout), "%s", s->o.layout);
        if ((rc = ingest_link_send(link, &lm)) < 0) {
            core_log(s, INGEST_LOG_INFO, "device %s: cannot send its landing rules: %s", device,
                     ingest_link_send_errmsg(link));
            result = rc;
            goto out;
        }
    }
    if (core_device_claim(s, device, link) != 0) {
        core_log(s, INGEST_LOG_WARN, "device %s from %s: its previous session did not end within %d s; closing",
                 device, link->peer, INGEST_CORE_DEVICE_WAIT_S);
        result = INGEST_EBUSY;
        goto out;
    }
    claimed = 1;
    const int pipelined = (link->features & INGEST_SESSION_FEATURE_PIPELINE) != 0;
    core_log(s, INGEST_LOG_INFO, "device %s connected from %s (%s%s)", device, link->peer, link->detail,
             pipelined ? ", pipelined" : "");
    const ingest_lander_lock land_lk = { land_unlock, land_lock, s };
    cm.s = s;
    cm.lk = link;
    cm.device = device;
    const int idle = s->o.idle_timeout_ms > 0 ? s->o.idle_timeout_ms : -1;
    q.link = link;
    q.core = s;
    q.idle_ms = idle;
    q.key = s->dedup;
    q.stage = s->m.stage;
    q.ctx = ctx;
    q.pack = (link->features & INGEST_SESSION_FEATURE_PACK) != 0;
    q.runs = q.pack && (link->features & INGEST_SESSION_FEATURE_RUNS) != 0;
    if (ingest_codec_create(ctx, 1, &q.codec) < 0 || core_thread_start(&reader, core_reader_main, &q, "ingest-reader") != 0) {
        core_log(s, INGEST_LOG_ERROR, "device %s: cannot start its reader: %s", device, ingest_ctx_errmsg(ctx));
        goto out;
    }
    result = 0;
    reader_started = 1;
    for (;;) {
        core_readq_recycle(&q, it);
        it = core_readq_pop(&q);
        reader_done |= it->last;
        rc = it->rc;
        if (rc == INGEST_ETIMEDOUT) {
            core_log(s, INGEST_LOG_INFO, "device %s idle for %d ms; closing", device, idle);
            break;
        }
        if (rc == INGEST_ECLOSED && b == NULL && mlen == 0) {
            core_log(s, INGEST_LOG_INFO, "device %s disconnected", device);
            break;
        }
        if (rc < 0) {
            ingest_metric_add(s->m.errors, rc == INGEST_ECORRUPT || rc == INGEST_EPROTO ? "protocol" : "session", 1);
            core_log(s, INGEST_LOG_WARN, "device %s: %s: %s%s", device, ingest_strerror(rc), it->why,
                     b ? "; batch abandoned" : "");
            if (rc == INGEST_ECORRUPT)
                send_error(link, rc, it->why);
            result = rc;
            break;
        }
        const ingest_wire_msg m = it->m;
        switch (m.type) {
        case INGEST_MSG_PING: {
            ingest_wire_msg p = m;
            p.type = INGEST_MSG_PONG;
            rc = ingest_link_send(link, &p);
            break;
        }
        case INGEST_MSG_DICT_OFFER:
            if (!(link->features & INGEST_SESSION_FEATURE_DICT) || b != NULL || batch[0] != '\0' ||
                cd.receiving) {
                rc = INGEST_EPROTO;
                break;
            }
            committer_wait_idle(&cm); /* the last batch's ACK goes first */
            rc = dict_offer(s, &cd, &q, lcodec, ctx, link, device, &m.u.dict_offer);
            break;
        case INGEST_MSG_DICT_DATA: {
            char why[INGEST_WIRE_MESSAGE_MAX];
            if (!(link->features & INGEST_SESSION_FEATURE_DICT)) {
                rc = INGEST_EPROTO;
                break;
            }
            rc = dict_data(s, &cd, &q, lcodec, ctx, device, &m.u.dict_data, why, sizeof(why));
            if (rc < 0) {
                core_log(s, INGEST_LOG_WARN, "device %s: %s: %s; nothing stored, closing", device, ingest_strerror(rc),
                         why);
                ingest_metric_add(s->m.errors, "protocol", 1);
                send_error(link, rc, why);
                result = rc;
                goto out;
            }
            break;
        }
        case INGEST_MSG_BATCH_BEGIN:
            if (b != NULL || cd.receiving) {
                rc = INGEST_EPROTO;
                break;
            }
            snprintf(batch, sizeof(batch), "%s", m.u.begin.batch_id);
            mlen = 0;
            parts = 0;
            break;
        case INGEST_MSG_MANIFEST_PART:
            if (batch[0] == '\0' || b != NULL || m.u.manifest_part.len > INGEST_CORE_MANIFEST_MAX - mlen) {
                rc = INGEST_EPROTO;
                break;
            }
            if (mlen + m.u.manifest_part.len > mcap) {
                size_t cap = mcap ? mcap : 1 << 16;
                while (cap < mlen + m.u.manifest_part.len)
                    cap *= 2;
                uint8_t *p = ingest__realloc(s->ctx, manifest, mcap, cap);
                if (p == NULL) {
                    rc = INGEST_ENOMEM;
                    break;
                }
                manifest = p;
                mcap = cap;
            }
            memcpy(manifest + mlen, m.u.manifest_part.data, m.u.manifest_part.len);
            mlen += m.u.manifest_part.len;
            parts++;
            break;
        case INGEST_MSG_MANIFEST_END: {
            if (batch[0] == '\0' || b != NULL || m.u.manifest_end.part_count != parts ||
                m.u.manifest_end.manifest_bytes != mlen) {
                rc = INGEST_EPROTO;
                break;
            }
            if (landers[0] == NULL &&
                (rc = landers_start(s, link, device, &cd, &land_lk, pipelined ? CORE_LANDERS : 1, lctx, lcodec, landers)) < 0) {
                result = rc;
                goto out;
            }
            batch_t0 = core_now();
            /* parsed without the land lock; the lander takes it for the replay check and the lookups */
            rc = ingest_lander_parse_ex(landers[k], device, manifest, mlen,
                                        (link->features & (INGEST_SESSION_FEATURE_PUSH | INGEST_SESSION_FEATURE_PACK)) ==
                                                (INGEST_SESSION_FEATURE_PUSH | INGEST_SESSION_FEATURE_PACK)
                                            ? INGEST_LANDER_PARSE_PUSH
                                            : 0u,
                                        &b);
            if (rc == 0)
                rc = ingest_lander_lookup(b);
            char why[INGEST_WIRE_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
            if (rc == 0 && ingest_lander_refused_count(b) > 0 && !(link->features & INGEST_SESSION_FEATURE_REFUSE)) {
                /* a device that cannot be told of one file's refusal gets its batch refused, with the first reason */
                const char *r1 = NULL;
                (void)ingest_lander_refused(b, 0, NULL, &rc, &r1);
                snprintf(why, sizeof(why), "%s", r1 != NULL ? r1 : "a file was refused");
                if (rc >= 0)
                    rc = INGEST_EINVAL;
            }
            if (rc != 0 && rc != INGEST_LANDER_ALREADY) {
                ingest_lander_batch_destroy(b);
                b = NULL;
            }
            wants.n = 0;
            if (rc == 0) {
                const uint32_t *idx;
                size_t n;
                ingest_lander_wants(b, &idx, &n);
                /* each failure with its own code: landing what it can already may meet a read-only or
                 * full bronze, which is no "out of memory" */
                int r = u32vec_push(&wants, idx, n) != 0 ? INGEST_ENOMEM : 0;
                if (r == 0 && (r = ingest_lander_advance(b)) > 0)
                    r = 0;
                if (r == 0 && collect_rewants(b, &wants) != 0)
                    r = INGEST_ENOMEM;
                if (r < 0) {
                    rc = r;
                    snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
                }
            }
            mlen = 0;
            if (rc == INGEST_LANDER_ALREADY) {
                core_log(s, INGEST_LOG_INFO, "device %s batch %s was landed before; acknowledged again", device, batch);
                ingest_metric_add(s->m.landed, device, 1);
                committer_wait_idle(&cm); /* ACKs in batch order */
                rc = (link->features & INGEST_SESSION_FEATURE_REFUSE)
                         ? send_landed_refusals(s, link, lctx[k], device, batch, b)
                         : 0;
                ingest_lander_batch_destroy(b); /* (kept for the paths of its files) */
                b = NULL;
                if (rc == 0)
                    rc = send_ack(link, batch, INGEST_ACK_DUPLICATE, "already landed");
                batch[0] = '\0';
                break;
            }
            if (rc < 0) {
                core_log(s, INGEST_LOG_WARN, "device %s batch %s refused: %s: %s", device, batch, ingest_strerror(rc),
                         why);
                s->batches_failed++;
                ingest_metric_add(s->m.failed, device, 1);
                ingest_lander_batch_destroy(b);
                b = NULL;
                committer_wait_idle(&cm);
                rc = send_ack(link, batch, rc, why);
                batch[0] = '\0';
                break;
            }
            core_log(s, INGEST_LOG_DEBUG, "device %s batch %s: %u chunks, %zu wanted", device, batch,
                     ingest_lander_batch_chunks(b), wants.n);
            gen = core_readq_set_batch(&q, b);
            dl.n = 0;
            /* not with a layout shared by the devices (no {device}): the predecessor at a landed path could
             * be another device's file, and its block hashes are not this device's to see */
            if ((link->features & INGEST_SESSION_FEATURE_DELTA) && strstr(s->o.layout, "{device}") != NULL) {
                /* the predecessors first: the device reads them before the WANT that asks for their chunks */
                sort_wants(&wants);
                if ((rc = core_delta_bases(&dl, link, b, wants.v, wants.n, why, sizeof(why))) < 0) {
                    core_log(s, INGEST_LOG_WARN, "device %s batch %s: delta bases: %s: %s", device, batch,
                             ingest_strerror(rc), why);
                    break;
                }
                if (dl.n > 0)
                    core_log(s, INGEST_LOG_INFO, "device %s batch %s: %zu of %zu wanted chunks have a predecessor "
                             "(DELTA_BASE sent)", device, batch, dl.n, wants.n);
            }
            rc = send_wants(link, batch, &wants);
            wants.n = 0; /* from here on: re-wants not sent yet (found while chunks arrive) */
            break;
        }
        case INGEST_MSG_CHUNK: {
            if (b == NULL) {
                rc = INGEST_EPROTO;
                break;
            }
            if (it->gen != gen) {
                /* read before this batch's WANT was sent: nobody asked for it */
                const char *why = "CHUNK sent before the WANT that asks for it";
                core_log(s, INGEST_LOG_WARN, "device %s batch %s: chunk %u: %s; closing", device, batch,
                         m.u.chunk.index, why);
                ingest_metric_add(s->m.errors, "protocol", 1);
                send_error(link, INGEST_EPROTO, why);
                result = INGEST_EPROTO;
                goto out;
            }
            const double tl = core_now();
            rc = it->verified ? ingest_lander_put_verified(b, m.u.chunk.index, it->data, it->len, it->enc_len, it->id)
                              : ingest_lander_put_chunk(b, m.u.chunk.index, it->data, it->enc_len);
            if (rc == 0)
                rc = collect_rewants(b, &wants) == 0 ? 0 : INGEST_ENOMEM;
            char why[INGEST_WIRE_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
            ingest_metric_add_seconds(s->m.stage, "land", core_now() - tl);
            s->chunks_received++;
            s->bytes_received += it->enc_len;
            if (rc < 0) {
                chunk_failed(s, &q, &b, link, device, batch, "chunk", "chunk", m.u.chunk.index, rc, why);
                result = rc;
                goto out;
            }
            break;
        }
        case INGEST_MSG_CHUNK_DELTA: {
            if (b == NULL || !(link->features & INGEST_SESSION_FEATURE_DELTA) || it->gen != gen) {
                rc = INGEST_EPROTO;
                break;
            }
            const double tl = core_now();
            char why[INGEST_WIRE_MESSAGE_MAX];
            rc = core_delta_land(&dl, b, lcodec[k], s->dedup, &m.u.delta, it->enc_len, why, sizeof(why));
            /* a malformed delta of a chunk that was given a base is asked for whole as well: failing the
             * batch would only bring the same delta back with its retry, for ever */
            if (rc == INGEST_ECORRUPT)
                rc = 1;
            if (rc == 1) {
                /* never landed unverified: asked for whole after the COMMIT, as a stale known chunk */
                core_log(s, INGEST_LOG_INFO, "device %s batch %s: delta chunk %u: %s; asking for it whole", device,
                         batch, m.u.delta.index, why);
                rc = u32vec_push(&wants, &m.u.delta.index, 1) == 0 ? 0 : INGEST_ENOMEM;
            } else if (rc == 0) {
                rc = collect_rewants(b, &wants) == 0 ? 0 : INGEST_ENOMEM;
            } else if (rc != INGEST_EPROTO && rc != INGEST_ECORRUPT) {
                snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
            }
            ingest_metric_add_seconds(s->m.stage, "land", core_now() - tl);
            s->chunks_received++;
            s->bytes_received += it->enc_len;
            if (rc < 0) {
                chunk_failed(s, &q, &b, link, device, batch, "delta chunk", rc == INGEST_EPROTO ? "protocol" : "chunk",
                             m.u.delta.index, rc, why);
                result = rc;
                goto out;
            }
            break;
        }
        case INGEST_MSG_FILE_WITHDRAWN: {
            /* the device takes one file of the open batch back: it vanished before its chunks were read */
            const ingest_wire_file_withdrawn *x = &m.u.withdrawn;
            if (b == NULL || strcmp(x->batch_id, batch) != 0 ||
                (link->features & (INGEST_SESSION_FEATURE_WITHDRAW | INGEST_SESSION_FEATURE_REFUSE)) !=
                    (INGEST_SESSION_FEATURE_WITHDRAW | INGEST_SESSION_FEATURE_REFUSE)) {
                rc = INGEST_EPROTO;
                break;
            }
            rc = ingest_lander_withdraw(b, x->file_index, x->code, x->message);
            char why[INGEST_WIRE_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
            if (rc < 0) {
                /* the batch cannot land without it: it fails, the device ships it again without the file */
                core_log(s, INGEST_LOG_WARN, "device %s batch %s failed: file %u withdrawn: %s: %s", device, batch,
                         x->file_index, ingest_strerror(rc), why);
                drop_failed_batch(s, &q, &b, device);
                send_error(link, rc, why);
                result = rc;
                goto out;
            }
            char esc[4 * INGEST_WIRE_MESSAGE_MAX + 4];
            core_log(s, INGEST_LOG_INFO, "device %s batch %s: file %u withdrawn by the device: %s", device, batch,
                     x->file_index, ingest_escape(esc, sizeof(esc), x->message));
            break;
        }
        case INGEST_MSG_CHUNK_GROUP: {
            /* only a group the reader could not check comes here (or one sent without the pack feature) */
            if (b == NULL || !q.pack) {
                rc = INGEST_EPROTO;
                break;
            }
            const char *why = it->gen != gen ? "CHUNK sent before the WANT that asks for it" : it->why;
            core_log(s, INGEST_LOG_WARN, "device %s batch %s failed: chunk group at chunk %u: %s; closing", device,
                     batch, m.u.chunk.index, why);
            ingest_metric_add(s->m.errors, it->gen != gen ? "protocol" : "chunk", 1);
            drop_failed_batch(s, &q, &b, device);
            char msg[INGEST_WIRE_MESSAGE_MAX];
            snprintf(msg, sizeof(msg), "chunk group at chunk %u: %s", m.u.chunk.index, why);
            send_error(link, it->gen != gen ? INGEST_EPROTO : INGEST_ECORRUPT, msg);
            result = it->gen != gen ? INGEST_EPROTO : INGEST_ECORRUPT;
            goto out;
        }
        case INGEST_MSG_BATCH_COMMIT: {
            if (b == NULL || strcmp(m.u.commit.batch_id, batch) != 0) {
                rc = INGEST_EPROTO;
                break;
            }
            const double t0 = core_now();
            if (dl.n > 0) {
                core_log(s, INGEST_LOG_INFO, "device %s batch %s: %llu delta chunks rebuilt, %llu asked again whole",
                         device, batch, (unsigned long long)dl.rebuilt, (unsigned long long)dl.stale);
                dl.n = 0; /* said once; a CHUNK_DELTA after the COMMIT is unexpected */
            }
            /* wants holds the re-wants collected while chunks arrived: they were not sent yet */
            rc = ingest_lander_commit_prepare(b);
            if (rc == INGEST_EBUSY && collect_rewants(b, &wants) != 0)
                rc = INGEST_ENOMEM;
            char why[INGEST_WIRE_MESSAGE_MAX];
            snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(lctx[k]));
            ingest_metric_add_seconds(s->m.stage, "commit", core_now() - t0); /* finish_batch counts its own */
            int finished = 0; /* finish_batch ran (and counted a failure itself) */
            if (rc == 0 && !pipelined) {
                rc = finish_batch(s, b, lctx[k], device, batch, batch_t0, why, sizeof(why));
                finished = 1;
            }
            if (rc == INGEST_EBUSY && wants.n > 0) {
                core_log(s, INGEST_LOG_INFO, "device %s batch %s: %zu known chunks were stale; asking for them",
                         device, batch, wants.n);
                rc = send_wants(link, batch, &wants);
                wants.n = 0;
                break;
            }
            wants.n = 0;
            core_readq_set_batch(&q, NULL);
            if (rc == 0 && pipelined) {
                /* Everything is in: the committer makes it durable and acks it while the next batch comes.
                 * RECEIVED goes out first: handed over first, the committer could ack the batch before
                 * it, and the device would read the RECEIVED while its next batch is open.  Up to
                 * CORE_COMMIT_QUEUE batches wait for their ACKs (the device keeps as many pending). */
                committer_wait(&cm, CORE_COMMIT_QUEUE - 1);
                if ((rc = send_received(link, batch)) < 0) {
                    ingest_lander_batch_destroy(b); /* not acknowledged: the device sends it again */
                    b = NULL;
                    batch[0] = '\0';
                    break;
                }
                if (committer_give(&cm, b, lctx[k], batch, batch_t0) == 0) {
                    b = NULL;
                    k = (k + 1) % CORE_LANDERS;
                    batch[0] = '\0';
                    break;
                }
                rc = finish_batch(s, b, lctx[k], device, batch, batch_t0, why, sizeof(why));
                finished = 1;
            }
            if (rc < 0) {
                if (!finished) {
                    core_log(s, INGEST_LOG_WARN, "device %s batch %s failed: %s: %s", device, batch,
                             ingest_strerror(rc), why);
                    s->batches_failed++;
                    ingest_metric_add(s->m.failed, device, 1);
                    ingest_metric_add(s->m.errors, "commit", 1);
                }
                committer_wait_idle(&cm);
                rc = send_ack(link, batch, rc, why);
            } else {
                committer_wait_idle(&cm);
                test_ack_delay(s);
                rc = send_refusals(s, link, device, batch, b);
                if (rc == 0)
                    rc = send_ack(link, batch, INGEST_ACK_LANDED, "landed");
            }
            ingest_lander_batch_destroy(b);
            b = NULL;
            batch[0] = '\0';
            break;
        }
        case INGEST_MSG_ERROR: {
            char esc[4 * INGEST_WIRE_MESSAGE_MAX + 4];
            core_log(s, INGEST_LOG_WARN, "device %s reported: %s: %s", device, ingest_strerror(m.u.error.code),
                     ingest_escape(esc, sizeof(esc), m.u.error.message));
            result = m.u.error.code < 0 ? m.u.error.code : INGEST_EPROTO;
            goto out;
        }
        default:
            rc = INGEST_EPROTO;
            break;
        }
        if (rc == INGEST_EPROTO) {
            ingest_metric_add(s->m.errors, "protocol", 1);
            core_log(s, INGEST_LOG_WARN, "device %s: unexpected %s message; closing", device,
                     ingest_wire_type_name(m.type));
            send_error(link, rc, "unexpected message");
            result = rc;
            break;
        }
        if (rc < 0) {
            core_log(s, INGEST_LOG_WARN, "device %s: %s: %s", device, ingest_strerror(rc),
                     ingest_link_send_errmsg(link));
            result = rc;
            break;
        }
    }
out:
    committer_stop(&cm); /* its batch is made durable and acked first */
    ingest_metric_add(s->m.conns, NULL, (uint64_t)-1);
    ingest__free(s->ctx, it);
    if (reader_started) {
        /* Stop the reader: nothing more is read once the link is shut down. */
        pthread_mutex_lock(&q.lock);
        q.quit = 1;
        pthread_cond_broadcast(&q.cond);
        pthread_mutex_unlock(&q.lock);
        pthread_mutex_lock(&s->budget_lock); /* a reader waiting for the budget sees quit */
        pthread_cond_broadcast(&s->budget_cond);
        pthread_mutex_unlock(&s->budget_lock);
        ingest_link_shutdown(link);
        while (!reader_done) { /* drain until the reader's end marker */
            qitem *d = core_readq_pop(&q);
            reader_done = d->last;
            ingest__free(s->ctx, d);
        }
        pthread_join(reader, NULL);
    }
    core_readq_set_batch(&q, NULL);
    core_readq_free_spares(&q);
    ingest_codec_destroy(q.codec);
    pthread_cond_destroy(&q.cond);
    pthread_mutex_destroy(&q.lock);
    ingest_lander_batch_destroy(b);
    for (int i = 0; i < CORE_LANDERS; i++) {
        ingest_lander_destroy(landers[i]);
        ingest_codec_destroy(lcodec[i]); /* after its lander; before its context and the dictionary bytes */
        ingest_ctx_destroy(lctx[i]);
    }
    for (unsigned i = 0; i < cd.nown; i++)
        ingest__free(s->ctx, cd.own[i]);
    for (unsigned i = 0; i < cd.nheld; i++)
        ingest_dictstore_release(s->o.dicts, cd.held[i]);
    ingest__free(s->ctx, cd.buf);
    ingest__free(s->ctx, manifest);
    ingest__free(s->ctx, wants.v);
    core_delta_free(&dl);
    ingest_ctx_destroy(ctx);
    if (claimed)
        core_device_release(s, device);
    s->links--;
    return result;
}

