/*
 * The walk's helper thread: shared fstatat of a block of names, and the
 * listing of the next directory ahead.  See walkahead.h.
 */
#include "../internal.h"
#include "walkahead.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* Names claimed at a time: enough to keep the counter off the hot path,
 * few enough that the two threads finish a block together. */
#define CLAIM 16

/* Room a getdents64 call needs to return at least one more record. */
#define MIN_ROOM (sizeof(uint64_t) * 2 + 2 + 1 + 256 + 8)

enum { LIST_IDLE, LIST_QUEUED, LIST_RUNNING, LIST_DONE };

struct ingest__walkahead {
    ingest_ctx *ctx;
    pthread_t thread;
    int threaded;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the helper waits here for work */
    pthread_cond_t done; /* the walking thread waits here */
    int quit;

    /* the block being stat'ed */
    int st_active;  /* set by the walker; the helper joins while set */
    int st_inside;  /* the helper is working on the block */
    int dirfd;
    char *const *names;
    struct stat *st;
    int *err;
    size_t n;
    atomic_size_t next, finished;

    /* the listing ahead */
    int list_state;
    uint64_t list_tag;
    int list_dirfd;
    const char *list_name;
    int list_fd, list_err, list_eof;
    size_t list_len;
    uint8_t *list_buf; /* the one being filled, of list_bufs */
    uint8_t *list_bufs[2];
    int list_flip;
};

/* Claim and stat names until none is left. */
static void stat_share(ingest__walkahead *wa, int dirfd, char *const *names, struct stat *st, int *err, size_t n)
{
    for (;;) {
        const size_t from = atomic_fetch_add(&wa->next, CLAIM);
        if (from >= n)
            return;
        const size_t to = from + CLAIM < n ? from + CLAIM : n;
        for (size_t i = from; i < to; i++)
            err[i] = fstatat(dirfd, names[i], &st[i], AT_SYMLINK_NOFOLLOW) == 0 ? 0 : errno;
        atomic_fetch_add(&wa->finished, to - from);
    }
}

static void list_run(ingest__walkahead *wa, int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = fd < 0 ? errno : 0, eof = 0;
    size_t len = 0;
    while (fd >= 0 && INGEST__WA_LISTBUF - len >= MIN_ROOM) {
        const ssize_t r = getdents64(fd, wa->list_buf + len, INGEST__WA_LISTBUF - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            eof = r == 0; /* on an error the walker reads on and meets it */
            break;
        }
        len += (size_t)r;
    }
    pthread_mutex_lock(&wa->mu);
    wa->list_fd = fd;
    wa->list_err = err;
    wa->list_eof = eof;
    wa->list_len = len;
    wa->list_state = LIST_DONE;
    pthread_cond_broadcast(&wa->done);
    pthread_mutex_unlock(&wa->mu);
}

static void *helper(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-walk"); /* docs/architecture.md "Threads" */
    ingest__walkahead *wa = arg;
    pthread_mutex_lock(&wa->mu);
    for (;;) {
        const int stat_work = wa->st_active && atomic_load(&wa->next) < wa->n;
        if (wa->quit)
            break;
        if (stat_work) {
            const int dirfd = wa->dirfd;
            char *const *names = wa->names;
            struct stat *st = wa->st;
            int *err = wa->err;
            const size_t n = wa->n;
            wa->st_inside = 1;
            pthread_mutex_unlock(&wa->mu);
            stat_share(wa, dirfd, names, st, err, n);
            pthread_mutex_lock(&wa->mu);
            wa->st_inside = 0;
            pthread_cond_broadcast(&wa->done);
            continue;
        }
        if (wa->list_state == LIST_QUEUED) {
            wa->list_state = LIST_RUNNING;
            const int dirfd = wa->list_dirfd;
            const char *name = wa->list_name;
            pthread_mutex_unlock(&wa->mu);
            list_run(wa, dirfd, name);
            pthread_mutex_lock(&wa->mu);
            continue;
        }
        pthread_cond_wait(&wa->wake, &wa->mu);
    }
    pthread_mutex_unlock(&wa->mu);
    return NULL;
}

int ingest__wa_create(ingest_ctx *ctx, ingest__walkahead **out)
{
    *out = NULL;
    ingest__walkahead *wa = ingest__calloc(ctx, 1, sizeof(*wa));
    if (wa == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory (walk helper)");
    wa->ctx = ctx;
    wa->list_fd = -1;
    wa->list_bufs[0] = ingest__malloc(ctx, INGEST__WA_LISTBUF);
    wa->list_bufs[1] = ingest__malloc(ctx, INGEST__WA_LISTBUF);
    if (wa->list_bufs[0] == NULL || wa->list_bufs[1] == NULL) {
        ingest__free(ctx, wa->list_bufs[0]);
        ingest__free(ctx, wa->list_bufs[1]);
        ingest__free(ctx, wa);
        return ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory (walk helper buffer)");
    }
    atomic_init(&wa->next, 0);
    atomic_init(&wa->finished, 0);
    pthread_mutex_init(&wa->mu, NULL);
    pthread_cond_init(&wa->wake, NULL);
    pthread_cond_init(&wa->done, NULL);
    /* A small stack: the helper's frames are a few system calls deep. */
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) == 0) {
        (void)pthread_attr_setstacksize(&attr, 64u * 1024u);
        wa->threaded = pthread_create(&wa->thread, &attr, helper, wa) == 0;
        pthread_attr_destroy(&attr);
    }
    *out = wa;
    return 0;
}

void ingest__wa_destroy(ingest__walkahead *wa)
{
    if (wa == NULL)
        return;
    ingest__wa_drop(wa);
    if (wa->threaded) {
        pthread_mutex_lock(&wa->mu);
        wa->quit = 1;
        pthread_cond_broadcast(&wa->wake);
        pthread_mutex_unlock(&wa->mu);
        pthread_join(wa->thread, NULL);
    }
    pthread_cond_destroy(&wa->done);
    pthread_cond_destroy(&wa->wake);
    pthread_mutex_destroy(&wa->mu);
    ingest__free(wa->ctx, wa->list_bufs[0]);
    ingest__free(wa->ctx, wa->list_bufs[1]);
    ingest__free(wa->ctx, wa);
}

void ingest__wa_stat(ingest__walkahead *wa, int dirfd, char *const *names, size_t n, struct stat *st, int *err)
{
    atomic_store(&wa->next, 0);
    atomic_store(&wa->finished, 0);
    if (!wa->threaded || n < CLAIM * 2) {
        stat_share(wa, dirfd, names, st, err, n);
        return;
    }
    pthread_mutex_lock(&wa->mu);
    wa->dirfd = dirfd;
    wa->names = names;
    wa->st = st;
    wa->err = err;
    wa->n = n;
    wa->st_active = 1;
    pthread_cond_signal(&wa->wake);
    pthread_mutex_unlock(&wa->mu);
    stat_share(wa, dirfd, names, st, err, n);
    pthread_mutex_lock(&wa->mu);
    /* Every claimed name is finished, and the helper has let go of the
     * block (it may still hold the pointers otherwise). */
    while (atomic_load(&wa->finished) < n || wa->st_inside)
        pthread_cond_wait(&wa->done, &wa->mu);
    wa->st_active = 0;
    pthread_mutex_unlock(&wa->mu);
}

int ingest__wa_list(ingest__walkahead *wa, int dirfd, const char *name, uint64_t tag)
{
    if (!wa->threaded || tag == 0)
        return -1;
    pthread_mutex_lock(&wa->mu);
    const int busy = wa->list_state != LIST_IDLE;
    if (!busy) {
        wa->list_state = LIST_QUEUED;
        wa->list_tag = tag;
        wa->list_dirfd = dirfd;
        wa->list_name = name;
        wa->list_flip ^= 1;
        wa->list_buf = wa->list_bufs[wa->list_flip];
        pthread_cond_signal(&wa->wake);
    }
    pthread_mutex_unlock(&wa->mu);
    return busy ? -1 : 0;
}

uint64_t ingest__wa_pending(ingest__walkahead *wa)
{
    pthread_mutex_lock(&wa->mu);
    const uint64_t tag = wa->list_state != LIST_IDLE ? wa->list_tag : 0;
    pthread_mutex_unlock(&wa->mu);
    return tag;
}

int ingest__wa_take(ingest__walkahead *wa, int *fd, int *err, const uint8_t **buf, size_t *len, int *eof)
{
    pthread_mutex_lock(&wa->mu);
    if (wa->list_state == LIST_IDLE) {
        pthread_mutex_unlock(&wa->mu);
        return -1;
    }
    while (wa->list_state != LIST_DONE)
        pthread_cond_wait(&wa->done, &wa->mu);
    *fd = wa->list_fd;
    *err = wa->list_err;
    *buf = wa->list_buf;
    *len = wa->list_len;
    *eof = wa->list_eof;
    wa->list_fd = -1;
    wa->list_state = LIST_IDLE;
    wa->list_tag = 0;
    pthread_mutex_unlock(&wa->mu);
    return 0;
}

void ingest__wa_drop(ingest__walkahead *wa)
{
    int fd = -1, err = 0, eof = 0;
    const uint8_t *buf;
    size_t len;
    if (ingest__wa_take(wa, &fd, &err, &buf, &len, &eof) == 0 && fd >= 0)
        close(fd);
}
