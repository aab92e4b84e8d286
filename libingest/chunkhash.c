/*
 * The two-thread chunk+hash pipeline (include/ingest/chunkhash.h).
 *
 * The queue is a fixed array of QMAX entries addressed by sequence numbers:
 *   head  <= claim <= tail
 *   [head, claim)  claimed: being hashed (by the hasher or the caller) or done
 *   [claim, tail)  waiting for a hasher
 * Entries are claimed in order, by whichever thread is free; they are
 * delivered (callback) in order by the caller once done.  Only the caller
 * writes entries and moves head and tail; claim and done flags are shared
 * under the mutex.
 *
 * Ring mode (update/fd): the current chunk lives contiguously at
 * ring[cur_start, cur_start + fill) with [cur_start, cur_start + max)
 * reserved for it; fill may run past the chunk's end (bytes of the next
 * chunk).  At a cut the next chunk starts right after, or at 0 when the
 * reservation would run off the end of the ring (the few leftover bytes
 * are copied); before that we wait until no undelivered chunk overlaps
 * the new reservation.
 */
#include "internal.h"
#include "ingest/chunkhash.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define QMAX 64u
#define DEPTH_DEFAULT 4u

struct entry {
    const uint8_t *ptr;
    uint64_t off;
    uint32_t len;
    int done;
    uint8_t id[INGEST_ID_BYTES];
};

struct ingest_chunkhash_s {
    ingest_ctx *ctx;
    ingest_chunker *chunker;
    ingest_chunk_params p;
    uint8_t key[INGEST_KEY_BYTES];
    ingest_chunk_cb cb;
    void *ud;
    unsigned depth;
    int threaded;

    uint8_t *ring;
    size_t ring_size;
    size_t cur_start, fill, scanned; /* ring mode, see above */
    uint64_t stream_off;             /* stream offset of the next chunk to enqueue */

    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    int sync_ready, thread_running, stop;
    pthread_t thread;
    uint64_t head, claim, tail;
    struct entry q[QMAX];
};

static void hash_entry(const ingest_chunkhash *ch, struct entry *e)
{
    ingest_chunk_id(ch->key, e->ptr, e->len, e->id);
}

static void *hasher_main(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-hash"); /* docs/architecture.md "Threads" */
    ingest_chunkhash *ch = arg;
    pthread_mutex_lock(&ch->mu);
    for (;;) {
        while (!ch->stop && ch->claim == ch->tail)
            pthread_cond_wait(&ch->cv_work, &ch->mu);
        if (ch->stop)
            break;
        struct entry *e = &ch->q[ch->claim++ % QMAX];
        pthread_mutex_unlock(&ch->mu);
        hash_entry(ch, e);
        pthread_mutex_lock(&ch->mu);
        e->done = 1;
        pthread_cond_signal(&ch->cv_done);
    }
    pthread_mutex_unlock(&ch->mu);
    return NULL;
}

/* Caller: hash the oldest waiting entry itself.  Called and returns with mu held. */
static void help_locked(ingest_chunkhash *ch)
{
    struct entry *e = &ch->q[ch->claim++ % QMAX];
    pthread_mutex_unlock(&ch->mu);
    hash_entry(ch, e);
    pthread_mutex_lock(&ch->mu);
    e->done = 1;
}

/* Deliver the done entries at the head, in order. */
static int deliver(ingest_chunkhash *ch)
{
    for (;;) {
        pthread_mutex_lock(&ch->mu);
        const int ready = ch->head < ch->tail && ch->q[ch->head % QMAX].done;
        pthread_mutex_unlock(&ch->mu);
        if (!ready)
            return 0;
        /* A done entry is touched by no other thread until head moves past it. */
        const struct entry *e = &ch->q[ch->head % QMAX];
        ingest_chunk_info info = { .offset = e->off, .len = e->len, .data = e->ptr };
        memcpy(info.id, e->id, INGEST_ID_BYTES);
        const int rc = ch->cb(ch->ud, &info);
        pthread_mutex_lock(&ch->mu);
        ch->head++;
        pthread_mutex_unlock(&ch->mu);
        if (rc != 0)
            return rc;
    }
}

/* Make the head of the queue move: deliver, else hash one, else wait. */
static int progress(ingest_chunkhash *ch)
{
    pthread_mutex_lock(&ch->mu);
    if (ch->head < ch->tail && !ch->q[ch->head % QMAX].done) {
        if (ch->claim < ch->tail)
            help_locked(ch);
        else
            while (!ch->q[ch->head % QMAX].done)
                pthread_cond_wait(&ch->cv_done, &ch->mu);
    }
    pthread_mutex_unlock(&ch->mu);
    return deliver(ch);
}

/* Drop every undelivered chunk (after an error) and start a fresh stream. */
static void abort_stream(ingest_chunkhash *ch)
{
    pthread_mutex_lock(&ch->mu);
    for (uint64_t s = ch->claim; s < ch->tail; s++)
        ch->q[s % QMAX].done = 1;
    ch->claim = ch->tail;
    for (uint64_t s = ch->head; s < ch->tail; s++)
        while (!ch->q[s % QMAX].done)
            pthread_cond_wait(&ch->cv_done, &ch->mu);
    ch->head = ch->tail;
    pthread_mutex_unlock(&ch->mu);
    ingest_chunker_reset(ch->chunker);
    ch->cur_start = ch->fill = ch->scanned = 0;
    ch->stream_off = 0;
}

static int enqueue(ingest_chunkhash *ch, const uint8_t *ptr, uint32_t len)
{
    while (ch->tail - ch->head >= QMAX)
        INGEST__FORWARD(progress(ch));
    pthread_mutex_lock(&ch->mu);
    struct entry *e = &ch->q[ch->tail++ % QMAX];
    e->ptr = ptr;
    e->off = ch->stream_off;
    e->len = len;
    e->done = 0;
    ch->stream_off += len;
    if (!ch->threaded || ch->tail - ch->claim > ch->depth)
        help_locked(ch);
    else
        pthread_cond_signal(&ch->cv_work);
    pthread_mutex_unlock(&ch->mu);
    return deliver(ch);
}

static int overlaps_live(const ingest_chunkhash *ch, size_t a, size_t b)
{
    for (uint64_t s = ch->head; s < ch->tail; s++) {
        const struct entry *e = &ch->q[s % QMAX];
        const size_t ea = (size_t)(e->ptr - ch->ring), eb = ea + e->len;
        if (ea < b && a < eb)
            return 1;
    }
    return 0;
}

/* Process the unscanned ring bytes of the current chunk; cut and enqueue chunks. */
static int process_ring(ingest_chunkhash *ch)
{
    const size_t max = ch->p.max;
    while (ch->scanned < ch->fill) {
        size_t used;
        const uint8_t *base = ch->ring + ch->cur_start;
        if (!ingest_chunker_scan(ch->chunker, base + ch->scanned, ch->fill - ch->scanned, &used)) {
            ch->scanned = ch->fill;
            break;
        }
        const size_t len = ch->scanned + used, left = ch->fill - len;
        INGEST__FORWARD(enqueue(ch, base, (uint32_t)len));
        size_t next = ch->cur_start + len;
        const size_t target = next + max > ch->ring_size ? 0 : next;
        /* Only the bytes [next, next + left) and undelivered chunks are live. */
        while (overlaps_live(ch, target, target + max))
            INGEST__FORWARD(progress(ch));
        if (target != next)
            memcpy(ch->ring + target, ch->ring + next, left);
        ch->cur_start = target;
        ch->fill = left;
        ch->scanned = 0;
    }
    return 0;
}

static int finish_stream(ingest_chunkhash *ch, const uint8_t *last)
{
    const uint64_t n = ingest_chunker_finish(ch->chunker);
    int rc = 0;
    if (n > 0)
        rc = enqueue(ch, last, (uint32_t)n);
    while (rc == 0 && ch->head < ch->tail)
        rc = progress(ch);
    if (rc != 0) {
        abort_stream(ch);
        return rc;
    }
    ch->cur_start = ch->fill = ch->scanned = 0;
    ch->stream_off = 0;
    return 0;
}

int ingest_chunkhash_update(ingest_chunkhash *ch, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        size_t n = ch->p.max - ch->fill;
        if (n > len)
            n = len;
        memcpy(ch->ring + ch->cur_start + ch->fill, p, n);
        ch->fill += n;
        p += n;
        len -= n;
        const int rc = process_ring(ch);
        if (rc != 0) {
            abort_stream(ch);
            return rc;
        }
    }
    return 0;
}

int ingest_chunkhash_finish(ingest_chunkhash *ch)
{
    return finish_stream(ch, ch->ring + ch->cur_start);
}

int ingest_chunkhash_fd(ingest_chunkhash *ch, int fd)
{
    int rc = 0;
    if (ch->fill != 0 || ch->stream_off != 0)
        return ingest__fail(ch->ctx, INGEST_EINVAL, "chunkhash: fd stream started in the middle of a stream");
    for (;;) {
        const ssize_t r = read(fd, ch->ring + ch->cur_start + ch->fill, ch->p.max - ch->fill);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = ingest__fail(ch->ctx, ingest__errno(errno), "chunkhash: read at offset %llu: %s",
                              (unsigned long long)(ch->stream_off + ch->fill), strerror(errno));
            abort_stream(ch);
            return rc;
        }
        if (r == 0)
            break;
        ch->fill += (size_t)r;
        rc = process_ring(ch);
        if (rc != 0) {
            abort_stream(ch);
            return rc;
        }
    }
    return ingest_chunkhash_finish(ch);
}

int ingest_chunkhash_buffer(ingest_chunkhash *ch, const void *data, size_t len)
{
    const uint8_t *p = data, *start = data, *const end = p + len;
    if (ch->fill != 0 || ch->stream_off != 0)
        return ingest__fail(ch->ctx, INGEST_EINVAL, "chunkhash: buffer stream started in the middle of a stream");
    while (p < end) {
        size_t used;
        if (!ingest_chunker_scan(ch->chunker, p, (size_t)(end - p), &used))
            break;
        p += used;
        const int rc = enqueue(ch, start, (uint32_t)(p - start));
        if (rc != 0) {
            abort_stream(ch);
            return rc;
        }
        start = p;
    }
    return finish_stream(ch, start);
}

int ingest_chunkhash_create(ingest_ctx *ctx, const ingest_chunkhash_opts *opts, ingest_chunk_cb cb, void *userdata,
                            ingest_chunkhash **out)
{
    static const ingest_chunkhash_opts defaults = { 0 };
    int rc = 0;
    *out = NULL;
    if (opts == NULL)
        opts = &defaults;
    if (cb == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "chunkhash: no callback");
    if (opts->threads < 0 || opts->threads > 2)
        return ingest__fail(ctx, INGEST_EINVAL, "chunkhash: threads must be 1 or 2, got %d", opts->threads);
    if (opts->depth > QMAX / 2)
        return ingest__fail(ctx, INGEST_EINVAL, "chunkhash: depth %u above %u", opts->depth, QMAX / 2);
    ingest_chunk_params p;
    if (opts->params != NULL)
        p = *opts->params;
    else
        ingest_chunk_params_default(&p);
    INGEST__FORWARD(ingest_chunk_params_check(ctx, &p));

    ingest_chunkhash *ch = ingest__calloc(ctx, 1, sizeof(*ch));
    if (ch == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "chunkhash: out of memory");
    ch->ctx = ctx;
    ch->p = p;
    memcpy(ch->key, opts->key != NULL ? opts->key : ingest_default_dedup_key(), INGEST_KEY_BYTES);
    ch->cb = cb;
    ch->ud = userdata;
    ch->depth = opts->depth ? opts->depth : DEPTH_DEFAULT;
    ch->threaded = opts->threads != 1;
    /* One chunk being cut (max), the waste at the wrap (< max), room for the queue. */
    const size_t queue_room = 16 * (size_t)p.avg < (16u << 20) ? 16 * (size_t)p.avg : (16u << 20);
    ch->ring_size = 2 * (size_t)p.max + queue_room;
    ch->ring = ingest__malloc(ctx, ch->ring_size);
    if (ch->ring == NULL) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "chunkhash: cannot allocate a %zu-byte ring", ch->ring_size);
        goto fail;
    }
    rc = ingest_chunker_create(ctx, &p, &ch->chunker);
    if (rc != 0)
        goto fail;
    if (pthread_mutex_init(&ch->mu, NULL) != 0) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "chunkhash: pthread_mutex_init failed");
        goto fail;
    }
    if (pthread_cond_init(&ch->cv_work, NULL) != 0) {
        pthread_mutex_destroy(&ch->mu);
        rc = ingest__fail(ctx, INGEST_ENOMEM, "chunkhash: pthread_cond_init failed");
        goto fail;
    }
    if (pthread_cond_init(&ch->cv_done, NULL) != 0) {
        pthread_cond_destroy(&ch->cv_work);
        pthread_mutex_destroy(&ch->mu);
        rc = ingest__fail(ctx, INGEST_ENOMEM, "chunkhash: pthread_cond_init failed");
        goto fail;
    }
    ch->sync_ready = 1;
    if (ch->threaded) {
        const int e = pthread_create(&ch->thread, NULL, hasher_main, ch);
        if (e != 0) {
            rc = ingest__fail(ctx, INGEST_EIO, "chunkhash: cannot start the hasher thread: %s", strerror(e));
            goto fail;
        }
        ch->thread_running = 1;
    }
    *out = ch;
    return 0;
fail:
    ingest_chunkhash_destroy(ch);
    return rc;
}

void ingest_chunkhash_destroy(ingest_chunkhash *ch)
{
    if (ch == NULL)
        return;
    if (ch->thread_running) {
        pthread_mutex_lock(&ch->mu);
        ch->stop = 1;
        pthread_cond_signal(&ch->cv_work);
        pthread_mutex_unlock(&ch->mu);
        pthread_join(ch->thread, NULL);
    }
    if (ch->sync_ready) {
        pthread_cond_destroy(&ch->cv_done);
        pthread_cond_destroy(&ch->cv_work);
        pthread_mutex_destroy(&ch->mu);
    }
    ingest_chunker_destroy(ch->chunker);
    ingest__free(ch->ctx, ch->ring);
    ingest__free(ch->ctx, ch);
}
