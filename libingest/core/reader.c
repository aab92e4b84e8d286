/*
 * The reader thread of a served link (core_int.h): receives messages,
 * decodes and verifies chunks and chunk groups against the open batch's
 * manifest, and queues what the serving thread lands.
 */
#include "core_int.h"

#include <sodium.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * The core's queue budget (opts.queue_budget): wait while every reader
 * together holds more, unless this one holds nothing (so every link moves)
 * or it is quitting; then count n bytes in.
 */
static void budget_take(readq *q, size_t n)
{
    ingest_core *c = q->core;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->budget_lock);
    for (;;) {
        pthread_mutex_lock(&q->lock);
        const size_t mine = q->bytes;
        const int quit = q->quit;
        pthread_mutex_unlock(&q->lock);
        if (mine == 0 || quit || c->stopping || c->queued <= c->o.queue_budget)
            break;
        c->budget_waiters++;
        pthread_cond_wait(&c->budget_cond, &c->budget_lock);
        c->budget_waiters--;
    }
    c->queued += n;
    pthread_mutex_unlock(&c->budget_lock);
}

static void budget_give(readq *q, size_t n)
{
    ingest_core *c = q->core;
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->budget_lock);
    c->queued -= n;
    if (c->budget_waiters > 0)
        pthread_cond_broadcast(&c->budget_cond);
    pthread_mutex_unlock(&c->budget_lock);
}

/* Queue it (waiting for room); returns q->quit as seen under the lock. */
static int readq_push(readq *q, qitem *it)
{
    budget_take(q, it->cap + sizeof(*it));
    pthread_mutex_lock(&q->lock);
    while (q->bytes > INGEST_CORE_READQ_MAX && !q->quit) {
        q->push_waiting++;
        pthread_cond_wait(&q->cond, &q->lock);
        q->push_waiting--;
    }
    it->next = NULL;
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    q->bytes += it->cap + sizeof(*it);
    const int wake = q->pop_waiting > 0, quit = q->quit;
    pthread_mutex_unlock(&q->lock);
    if (wake)
        pthread_cond_broadcast(&q->cond);
    return quit;
}

qitem *core_readq_pop(readq *q)
{
    pthread_mutex_lock(&q->lock);
    while (q->head == NULL) {
        q->pop_waiting++;
        pthread_cond_wait(&q->cond, &q->lock);
        q->pop_waiting--;
    }
    qitem *it = q->head;
    q->head = it->next;
    if (q->head == NULL)
        q->tail = NULL;
    q->bytes -= it->cap + sizeof(*it);
    /* the reader waits for room until the queue is down to half its bound: one wake-up per half, not per item */
    const int wake = q->push_waiting > 0 && (q->bytes <= INGEST_CORE_READQ_MAX / 2 || q->quit);
    pthread_mutex_unlock(&q->lock);
    if (wake)
        pthread_cond_broadcast(&q->cond);
    budget_give(q, it->cap + sizeof(*it));
    return it;
}

/*
 * Publish (or withdraw, with NULL) the open batch to the reader, once its
 * WANT is about to be sent: a CHUNK read before that was sent before the
 * WANT asked for it.  Returns the generation chunks of this batch carry.
 */
uint64_t core_readq_set_batch(readq *q, ingest_lander_batch *b)
{
    static atomic_ullong gens;
    pthread_mutex_lock(&q->lock);
    q->batch = b;
    q->gen = b != NULL ? ++gens : 0;
    const uint64_t g = q->gen;
    pthread_mutex_unlock(&q->lock);
    return g;
}

/* Items kept for reuse: at most this many, holding at most this many bytes, none larger than this. */
#define SPARE_MAX 64u
#define SPARE_BYTES (256u * 1024u)
#define SPARE_ITEM_MAX (256u * 1024u)

/*
 * Room for len bytes, rounded up so that items of near sizes can take each
 * other's place (the queue's bounds count this room, not len).
 */
static size_t item_cap(size_t len)
{
    const size_t step = len <= 4096 ? 256 : len <= 65536 ? 4096 : 16384;
    return (len + step - 1) / step * step;
}

void core_readq_recycle(readq *q, qitem *it)
{
    if (it == NULL)
        return;
    pthread_mutex_lock(&q->lock);
    const int keep = it->cap <= SPARE_ITEM_MAX && q->nspare < SPARE_MAX && q->spare_bytes + it->cap <= SPARE_BYTES;
    if (keep) {
        it->next = q->spare;
        q->spare = it;
        q->nspare++;
        q->spare_bytes += it->cap;
    }
    pthread_mutex_unlock(&q->lock);
    if (!keep)
        ingest__free(q->core->ctx, it);
}

/* Free a list of items. */
static void free_items(readq *q, qitem *it)
{
    while (it != NULL) {
        qitem *nx = it->next;
        ingest__free(q->core->ctx, it);
        it = nx;
    }
}

void core_readq_free_spares(readq *q)
{
    free_items(q, q->spare);
    q->spare = NULL;
    q->nspare = q->spare_bytes = 0;
}

/*
 * A kept item with room for len bytes (and not twice what it needs), or
 * NULL.  When none fits, the kept ones are of sizes the link has stopped
 * sending (a file of large chunks before a run of small files): all are
 * freed, to make room for items of the sizes it sends now.
 */
static qitem *spare_take(readq *q, size_t len)
{
    qitem *it = NULL, *stale = NULL;
    const size_t want = item_cap(len);
    pthread_mutex_lock(&q->lock);
    for (qitem **p = &q->spare; *p != NULL; p = &(*p)->next)
        if ((*p)->cap >= len && (*p)->cap <= 2 * want) {
            it = *p;
            *p = it->next;
            q->nspare--;
            q->spare_bytes -= it->cap;
            break;
        }
    if (it == NULL) {
        stale = q->spare;
        q->spare = NULL;
        q->nspare = q->spare_bytes = 0;
    }
    pthread_mutex_unlock(&q->lock);
    free_items(q, stale);
    return it;
}

static qitem *item_new(readq *q, size_t len)
{
    qitem *it = len <= SPARE_ITEM_MAX ? spare_take(q, len) : NULL;
    const size_t cap = it != NULL ? it->cap : item_cap(len);
    if (it == NULL && (it = ingest__malloc(q->core->ctx, sizeof(*it) + cap)) == NULL)
        return NULL;
    memset(it, 0, offsetof(qitem, why)); /* not why's 512 bytes: "" unless a failure sets it */
    it->why[0] = '\0';
    it->len = len;
    it->cap = cap;
    return it;
}

/* Mark the reader as decoding with its codec (dict_load waits) or not. */
static void reader_decoding(readq *q, int on)
{
    pthread_mutex_lock(&q->lock);
    q->decoding = on;
    const int wake = !on && q->decoding_waiting > 0; /* dict_load waits for the end of decoding */
    pthread_mutex_unlock(&q->lock);
    if (wake)
        pthread_cond_broadcast(&q->cond);
}

/* Free a group's scratch (ids and lengths, and the decoded bytes when
 * held) and give back what it took of the queue budget. */
static void group_scratch_free(readq *q, size_t meta, size_t decoded)
{
    if (q->gbuf != NULL) {
        ingest__free(q->core->ctx, q->gbuf);
        q->gbuf = NULL;
        budget_give(q, decoded);
    }
    ingest__free(q->core->ctx, q->gids);
    q->gids = NULL;
    q->glens = NULL;
    budget_give(q, meta);
}

/*
 * A CHUNK_GROUP: decode it once, verify each chunk's id over its slice and
 * queue each as a verified CHUNK, so the landing sees what it would have
 * seen from one CHUNK per index.  Its scratch is allocated for this group
 * only, sized to it and charged to the core's queue budget (waiting, as a
 * queued chunk does, while the budget is spent): an idle link, or one
 * sending single CHUNKs, holds none.  A group that cannot be checked (no open
 * batch, an index past the batch, lengths past INGEST_WIRE_GROUP_MAX_RAW,
 * a bad frame, an id mismatch) is queued as one failed CHUNK_GROUP item
 * naming why.  Returns -1 only when out of memory.
 */
static int read_group(readq *q, const ingest_wire_msg *m)
{
    const ingest_wire_chunk_group *g = &m->u.group;
    const double t0 = core_now();
    char why[256] = "";
    size_t total = 0;
    uint32_t bad = ingest_wire_group_index(g, 0);
    /* Scratch sized to this group (count is bounded by the wire parser), charged to the queue budget while held. */
    const size_t meta = (size_t)g->count * (INGEST_ID_BYTES + sizeof(uint32_t));
    budget_take(q, meta);
    q->gids = ingest__malloc(q->core->ctx, meta);
    if (q->gids == NULL) {
        budget_give(q, meta);
        return -1;
    }
    q->glens = (uint32_t *)(void *)(q->gids + (size_t)g->count * INGEST_ID_BYTES);
    pthread_mutex_lock(&q->lock);
    const uint64_t gen = q->gen;
    int ok = q->batch != NULL;
    uint32_t npushed = 0; /* pushed chunks have an all-zero id here: theirs is computed below */
    for (uint32_t i = 0; ok && i < g->count; i++) {
        const uint32_t idx = ingest_wire_group_index(g, i);
        npushed += ingest_lander_chunk_pushed(q->batch, idx) != 0;
        if (ingest_lander_chunk_expect(q->batch, idx, q->gids + (size_t)i * INGEST_ID_BYTES, &q->glens[i]) != 0) {
            snprintf(why, sizeof(why), "chunk %u is past the batch's chunk list", idx);
            bad = idx;
            ok = 0;
        } else if ((total += q->glens[i]) > INGEST_WIRE_GROUP_MAX_RAW) {
            snprintf(why, sizeof(why), "the group holds more than %u bytes", INGEST_WIRE_GROUP_MAX_RAW);
            ok = 0;
        }
    }
    pthread_mutex_unlock(&q->lock);
    if (!ok && why[0] == '\0')
        snprintf(why, sizeof(why), "CHUNK sent before the WANT that asks for it");
    size_t got = 0;
    int rc;
    if (ok) { /* the budget is taken before decoding is marked: a dictionary load never waits on a budget wait */
        budget_take(q, total);
        if ((q->gbuf = ingest__malloc(q->core->ctx, total)) == NULL) {
            budget_give(q, total);
            group_scratch_free(q, meta, 0);
            return -1;
        }
    }
    reader_decoding(q, 1);
    if (ok && (rc = ingest_codec_decode(q->codec, g->data, g->len, q->gbuf, total, &got, NULL, NULL)) < 0) {
        snprintf(why, sizeof(why), "%s: %s", ingest_strerror(rc), ingest_ctx_errmsg(q->ctx));
        ok = 0;
    } else if (ok && got != total) {
        snprintf(why, sizeof(why), "decodes to %zu bytes, its chunks hold %zu", got, total);
        ok = 0;
    }
    reader_decoding(q, 0);
    size_t at = 0;
    for (uint32_t i = 0; ok && i < g->count; at += q->glens[i], i++) {
        uint8_t id[INGEST_ID_BYTES];
        uint8_t *want = q->gids + (size_t)i * INGEST_ID_BYTES;
        ingest_chunk_id(q->key, q->gbuf + at, q->glens[i], id);
        if (npushed > 0 && sodium_is_zero(want, INGEST_ID_BYTES)) {
            /* pushed (listed without an id): the lander takes this id as the chunk's (put_verified) */
            memcpy(want, id, INGEST_ID_BYTES);
        } else if (memcmp(id, want, INGEST_ID_BYTES) != 0) {
            bad = ingest_wire_group_index(g, i);
            snprintf(why, sizeof(why), "chunk %u does not match its id in the manifest", bad);
            ok = 0;
        }
    }
    if (!ok) {
        group_scratch_free(q, meta, total);
        qitem *it = item_new(q, 0);
        if (it == NULL)
            return -1;
        it->m.type = INGEST_MSG_CHUNK_GROUP;
        it->m.u.chunk.index = bad;
        it->gen = gen;
        snprintf(it->why, sizeof(it->why), "%s", why);
        readq_push(q, it);
        return 0;
    }
    ingest_metric_add_seconds(q->stage, "verify", core_now() - t0);
    /* The group's wire bytes are shared among its chunks by length. */
    size_t enc_left = g->len;
    at = 0;
    for (uint32_t i = 0; i < g->count; at += q->glens[i], i++) {
        qitem *it = item_new(q, q->glens[i]);
        if (it == NULL) {
            group_scratch_free(q, meta, total);
            return -1;
        }
        memcpy(it->data, q->gbuf + at, q->glens[i]);
        it->verified = 1;
        memcpy(it->id, q->gids + (size_t)i * INGEST_ID_BYTES, INGEST_ID_BYTES);
        it->m.type = INGEST_MSG_CHUNK;
        it->m.u.chunk.index = ingest_wire_group_index(g, i);
        it->gen = gen;
        const size_t share = i + 1 == g->count ? enc_left : (size_t)((uint64_t)g->len * q->glens[i] / total);
        it->enc_len = share < enc_left ? share : enc_left;
        enc_left -= it->enc_len;
        readq_push(q, it);
    }
    group_scratch_free(q, meta, total);
    return 0;
}

void *core_reader_main(void *arg)
{
    readq *q = arg;
    for (;;) {
        ingest_wire_msg m;
        const int rc = ingest_link_recv(q->link, &m, q->idle_ms);
        qitem *it = NULL;
        if (rc < 0) {
            it = item_new(q, 0);
            if (it == NULL)
                break;
            it->rc = rc;
            snprintf(it->why, sizeof(it->why), "%s", ingest_link_recv_errmsg(q->link));
        } else if (m.type == INGEST_MSG_CHUNK) {
            uint8_t id[INGEST_ID_BYTES];
            uint32_t len = 0;
            pthread_mutex_lock(&q->lock);
            const int known = q->batch != NULL && ingest_lander_chunk_expect(q->batch, m.u.chunk.index, id, &len) == 0;
            const int pushed = known && ingest_lander_chunk_pushed(q->batch, m.u.chunk.index);
            const uint64_t gen = q->gen;
            q->decoding = known;
            pthread_mutex_unlock(&q->lock);
            size_t got = 0;
            const double t0 = core_now();
            const int ok = known && (it = item_new(q, len)) != NULL &&
                           ingest_codec_decode(q->codec, m.u.chunk.data, m.u.chunk.len, it->data, len, &got,
                                               pushed ? NULL : q->key, pushed ? NULL : id) == 0 &&
                           got == len;
            if (ok && pushed) /* listed without an id: its id is that of its bytes */
                ingest_chunk_id(q->key, it->data, len, id);
            if (known)
                reader_decoding(q, 0);
            if (ok) {
                it->verified = 1;
                memcpy(it->id, id, sizeof(it->id));
                ingest_metric_add_seconds(q->stage, "verify", core_now() - t0);
            } else {
                /* Not verifiable here: the lander decodes it and names what is wrong. */
                ingest__free(q->core->ctx, it);
                if ((it = item_new(q, m.u.chunk.len)) == NULL)
                    break;
                memcpy(it->data, m.u.chunk.data, m.u.chunk.len);
            }
            it->m = m;
            it->gen = gen;
            it->enc_len = m.u.chunk.len;
            it->m.u.chunk.data = NULL;
        } else if ((m.type == INGEST_MSG_CHUNK_GROUP && q->pack) || (m.type == INGEST_MSG_CHUNK_RUN && q->runs)) {
            if (read_group(q, &m) != 0)
                break;
            continue;
        } else if (m.type == INGEST_MSG_MANIFEST_PART && q->pack) {
            /* An encoded chunk holding the manifest slice, at most INGEST_WIRE_MANIFEST_PART_MAX_RAW decoded. */
            uint32_t raw = 0;
            size_t got = 0;
            char why[256] = "";
            int drc = ingest_codec_raw_size(m.u.manifest_part.data, m.u.manifest_part.len, &raw);
            if (drc == 0 && raw > INGEST_WIRE_MANIFEST_PART_MAX_RAW) {
                drc = INGEST_ECORRUPT;
                snprintf(why, sizeof(why), "MANIFEST_PART: decodes to %" PRIu32 " bytes, more than %u", raw,
                         INGEST_WIRE_MANIFEST_PART_MAX_RAW);
            }
            if (drc == 0 && (it = item_new(q, raw)) == NULL)
                break;
            if (drc == 0) {
                reader_decoding(q, 1);
                if ((drc = ingest_codec_decode(q->codec, m.u.manifest_part.data, m.u.manifest_part.len, it->data, raw,
                                               &got, NULL, NULL)) == 0 && got != raw)
                    drc = INGEST_ECORRUPT;
                if (drc < 0 && why[0] == '\0')
                    snprintf(why, sizeof(why), "MANIFEST_PART: %s: %s", ingest_strerror(drc), ingest_ctx_errmsg(q->ctx));
                reader_decoding(q, 0);
            }
            if (drc < 0) {
                ingest__free(q->core->ctx, it);
                if ((it = item_new(q, 0)) == NULL)
                    break;
                it->rc = INGEST_ECORRUPT;
                snprintf(it->why, sizeof(it->why), "%s", why);
            } else {
                it->m = m;
                it->m.u.manifest_part.data = it->data;
                it->m.u.manifest_part.len = raw;
            }
        } else if (m.type == INGEST_MSG_MANIFEST_PART) {
            if ((it = item_new(q, m.u.manifest_part.len)) == NULL)
                break;
            memcpy(it->data, m.u.manifest_part.data, m.u.manifest_part.len);
            it->m = m;
            it->m.u.manifest_part.data = it->data;
        } else if (m.type == INGEST_MSG_CHUNK_DELTA) {
            /* rebuilt by the serving thread, which reads the predecessor (delta.c) */
            const size_t mb = ((size_t)m.u.delta.nblocks + 7) / 8;
            if ((it = item_new(q, mb + m.u.delta.len)) == NULL)
                break;
            memcpy(it->data, m.u.delta.map, mb);
            if (m.u.delta.len > 0)
                memcpy(it->data + mb, m.u.delta.data, m.u.delta.len);
            it->m = m;
            it->m.u.delta.map = it->data;
            it->m.u.delta.data = it->data + mb;
            it->enc_len = 8 + mb + m.u.delta.len;
            pthread_mutex_lock(&q->lock);
            it->gen = q->gen;
            pthread_mutex_unlock(&q->lock);
        } else if (m.type == INGEST_MSG_DICT_DATA) {
            if ((it = item_new(q, m.u.dict_data.len)) == NULL)
                break;
            memcpy(it->data, m.u.dict_data.data, m.u.dict_data.len);
            it->m = m;
            it->m.u.dict_data.data = it->data;
        } else {
            if ((it = item_new(q, 0)) == NULL)
                break;
            it->m = m;
        }
        /* quit is set by the serving thread: read under the lock (readq_push) */
        if (readq_push(q, it) || rc < 0)
            break;
    }
    pthread_mutex_lock(&q->lock);
    q->ended = 1;
    pthread_mutex_unlock(&q->lock);
    /* An end marker, so the lander thread never waits on a queue nobody fills. */
    qitem *end = item_new(q, 0);
    if (end != NULL) {
        end->rc = INGEST_ECLOSED;
        end->last = 1;
        snprintf(end->why, sizeof(end->why), "connection closed");
        readq_push(q, end);
    }
    return NULL;
}

