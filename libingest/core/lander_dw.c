/*
 * The lander's direct-I/O writer: a thread of the batch that writes each
 * filled O_DIRECT buffer while the batch's own thread fills the other one
 * (docs/landing.md, "Direct I/O").  An O_DIRECT write returns only once
 * the device has the bytes; without it the landing thread spent a quarter
 * to two fifths of a 1 GiB ship waiting there instead of landing the next
 * chunks.
 *
 * One write at a time: lander__dw_post waits for the write before, then
 * hands over (descriptor, buffer, length, offset) and returns; the buffer
 * is the writer's until the next post or wait returns.  A failed write is
 * reported (-1, errno) by the next post or wait, so the caller's message is
 * the one a write of its own would give.  Where the thread cannot start,
 * every write is made by the caller, as before.
 */
#include "core_int.h"
#include "lander_int.h"

#include <pthread.h>

struct lander_dw {
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* both ways: work for the writer, done for the poster */
    bool busy;         /* a write handed over and not finished */
    bool stop;
    int fd;
    const uint8_t *buf;
    size_t len;
    uint64_t off;
    int err; /* errno of a failed write not reported yet */
};

/* All of buf at off; 0, or errno. */
static int dw_write(int fd, const uint8_t *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        const ssize_t w = pwrite(fd, buf + done, len - done, (off_t)(off + done));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (w == 0)
            return EIO;
        done += (size_t)w;
    }
    return 0;
}

static void *dw_main(void *arg)
{
    struct lander_dw *dw = arg;
    pthread_mutex_lock(&dw->mu);
    for (;;) {
        while (!dw->busy && !dw->stop)
            pthread_cond_wait(&dw->cv, &dw->mu);
        if (!dw->busy)
            break;
        const int fd = dw->fd;
        const uint8_t *buf = dw->buf;
        const size_t len = dw->len;
        const uint64_t off = dw->off;
        pthread_mutex_unlock(&dw->mu);
        const int e = dw_write(fd, buf, len, off);
        pthread_mutex_lock(&dw->mu);
        if (e != 0 && dw->err == 0)
            dw->err = e;
        dw->busy = false;
        pthread_cond_broadcast(&dw->cv);
    }
    pthread_mutex_unlock(&dw->mu);
    return NULL;
}

/* Wait for the write handed over (if any); -1 with errno when a write failed since the last report. */
static int dw_idle(struct lander_dw *dw)
{
    pthread_mutex_lock(&dw->mu);
    while (dw->busy)
        pthread_cond_wait(&dw->cv, &dw->mu);
    const int e = dw->err;
    dw->err = 0;
    pthread_mutex_unlock(&dw->mu);
    if (e != 0) {
        errno = e;
        return -1;
    }
    return 0;
}

int lander__dw_post(ingest_lander_batch *b, int fd, const uint8_t *buf, size_t len, uint64_t off)
{
    if (b->dw == NULL) {
        struct lander_dw *dw = ingest__calloc(b->ctx, 1, sizeof *dw);
        if (dw == NULL) {
            errno = ENOMEM;
            return -1;
        }
        pthread_mutex_init(&dw->mu, NULL);
        pthread_cond_init(&dw->cv, NULL);
        dw->started = core_thread_start(&dw->th, dw_main, dw, "ingest-dwrite") == 0; /* the core's threads' small stack */
        b->dw = dw;
    }
    struct lander_dw *dw = b->dw;
    if (!dw->started) {
        const int e = dw_write(fd, buf, len, off);
        if (e != 0) {
            errno = e;
            return -1;
        }
        return 0;
    }
    if (dw_idle(dw) < 0)
        return -1;
    pthread_mutex_lock(&dw->mu);
    dw->fd = fd;
    dw->buf = buf;
    dw->len = len;
    dw->off = off;
    dw->busy = true;
    pthread_cond_broadcast(&dw->cv);
    pthread_mutex_unlock(&dw->mu);
    return 0;
}

int lander__dw_wait(ingest_lander_batch *b)
{
    return b->dw != NULL && b->dw->started ? dw_idle(b->dw) : 0;
}

void lander__dw_stop(ingest_lander_batch *b)
{
    struct lander_dw *dw = b->dw;
    if (dw == NULL)
        return;
    if (dw->started) {
        pthread_mutex_lock(&dw->mu);
        dw->stop = true;
        pthread_cond_broadcast(&dw->cv);
        pthread_mutex_unlock(&dw->mu);
        pthread_join(dw->th, NULL); /* after the write handed over, if any */
    }
    pthread_mutex_destroy(&dw->mu);
    pthread_cond_destroy(&dw->cv);
    ingest__free(b->ctx, dw);
    b->dw = NULL;
}
