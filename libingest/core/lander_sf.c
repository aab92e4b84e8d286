/*
 * The lander's small-file helper: a thread of the batch that lands whole
 * small files (create, write, mtime, stat, close) while the batch's own
 * thread lands the next ones (docs/landing.md, "Small files").  On a batch
 * of small files the landing thread spent about nine tenths of its time in
 * those system calls, one file after the other; creates in one directory
 * from two threads run side by side on ext4.
 *
 * A file is handed over only while fewer than SF_AHEAD are queued: else
 * the landing thread lands it itself, so the two share the files and
 * neither waits for the other.  The helper owns a copy of the file's bytes
 * and a duplicate of its directory's descriptor; the landing thread did
 * the directory's bookkeeping (its stage, its sync) before.  A failure is
 * kept (errno, what, which file) and reported, with the message a landing
 * of its own would give, by the next hand-over or wait.  Every reader of
 * a file's temporary copy or identity waits first (lander__sf_wait): a
 * repeat copied from it, the commit, a withdrawal; a failed batch stops the
 * helper before its temporary files are removed.
 *
 * A create that finds the job's directory removed since the landing thread
 * entered it (ENOENT: another batch removed the empty directories it had
 * made, or a job tidying bronze did) is not a failure: the job, bytes and
 * all, is put aside and the landing thread makes the file itself at the
 * next hand-over or wait, walking to the directory again and making what
 * is missing (lander__reenter_land_dir does the same for its own files).
 */
#include "core_int.h"
#include "lander_int.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>

#define SF_SLOTS 8u /* > SF_AHEAD */

/* finish_file starts a file's writeback at its end only for large files or small batches: never these */
_Static_assert(SF_FILE_MAX < LANDER_EARLY_WRITEBACK_MIN && SF_MIN_FILES >= INGEST_LANDER_SYNCFS_MIN,
               "the small-file helper would need to start writeback");

typedef struct sfjob {
    uint32_t fi;
    int dirfd; /* the helper's: closed after the job */
    uint32_t len, cap;
    uint8_t *data;
    mode_t mode;
    struct timespec mtime;
    char name[NAME_MAX_BYTES + 1];
} sfjob;

struct lander_sf {
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* both ways */
    sfjob jobs[SF_SLOTS];
    sfjob redo[SF_SLOTS]; /* put aside: the directory was removed (the landing thread makes them); dirfd -1 */
    unsigned nredo;
    unsigned head, n; /* queued jobs; the one at head is being landed while busy */
    bool busy, stop; /* stop: what is still queued is dropped */
    bool helper_waiting, poster_waiting;
    int err; /* errno of the first failure */
    uint32_t err_fi;
    const char *err_what;
    lfile *files;
};

static const char SF_CREATE[] = "create temporary file for";

/* One file: 0, or errno with *what set (SF_CREATE: the create failed). */
static int sf_land(struct lander_sf *sf, sfjob *j, const char **what)
{
    lfile *f = &sf->files[j->fi];
    *what = SF_CREATE;
    const int fd = openat(j->dirfd, j->name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, j->mode);
    if (fd < 0)
        return errno;
    int e = 0;
    *what = "write";
    if (lander__write_full(fd, j->data, j->len) < 0)
        e = errno;
    const struct timespec ts[2] = {j->mtime, j->mtime};
    struct stat sb;
    if (e == 0 && futimens(fd, ts) < 0) {
        e = errno;
        *what = "set mtime of";
    }
    if (e == 0 && fstat(fd, &sb) < 0) {
        e = errno;
        *what = "stat";
    }
    if (e == 0) {
        lander__ident_of(f, &sb);
        f->ident_set = true;
        /* created with its landed mode, unless the umask took bits away */
        if ((sb.st_mode & 07777) != j->mode && fchmod(fd, j->mode) < 0) {
            e = errno;
            *what = "chmod";
        }
    }
    if (close(fd) < 0 && e == 0) {
        e = errno;
        *what = "close";
    }
    return e;
}

static void *sf_main(void *arg)
{
    struct lander_sf *sf = arg;
    pthread_mutex_lock(&sf->mu);
    for (;;) {
        while (sf->n == 0 && !sf->stop) {
            sf->helper_waiting = true;
            pthread_cond_wait(&sf->cv, &sf->mu);
            sf->helper_waiting = false;
        }
        if (sf->n == 0)
            break;
        sfjob *j = &sf->jobs[sf->head];
        const char *what = NULL;
        int e = 0;
        const bool drop = sf->stop || sf->err != 0; /* after a failure the batch fails: land no more */
        sf->busy = true;
        pthread_mutex_unlock(&sf->mu);
        if (!drop)
            e = sf_land(sf, j, &what);
        close(j->dirfd);
        j->dirfd = -1;
        pthread_mutex_lock(&sf->mu);
        if (e == ENOENT && what == SF_CREATE && sf->nredo < SF_SLOTS) {
            /* its directory was removed: the landing thread makes it again, and the file, from these bytes */
            sf->redo[sf->nredo++] = *j;
            j->data = NULL;
            j->cap = 0;
            e = 0;
        }
        if (e != 0 && sf->err == 0) {
            sf->err = e;
            sf->err_fi = j->fi;
            sf->err_what = what;
        }
        sf->busy = false;
        sf->head = (sf->head + 1) % SF_SLOTS;
        sf->n--;
        if (sf->poster_waiting)
            pthread_cond_broadcast(&sf->cv);
    }
    pthread_mutex_unlock(&sf->mu);
    return NULL;
}

/* The failure kept, reported in the batch's context (under sf->mu). */
static int sf_report(ingest_lander_batch *b, struct lander_sf *sf)
{
    const int e = sf->err;
    sf->err = -1; /* reported: the batch fails, the helper lands no more */
    return lander__sys_fail(b->ctx, e, sf->err_what, b->files[sf->err_fi].landed);
}

/*
 * Make the files put aside by the helper (their directory was removed), on
 * the landing thread: enter the file's directory again as the landing
 * thread would for the first time (made again, or staged where a missing
 * directory is; the name is the one that goes with that), and land the
 * file as the helper would.  The landing thread's own directory (b->dirfd,
 * that of the file at its cursor) is kept, unless it is the removed one.
 * 0, or < 0 (the batch's error set).
 */
static int sf_redo(ingest_lander_batch *b, struct lander_sf *sf)
{
    sfjob r[SF_SLOTS];
    pthread_mutex_lock(&sf->mu);
    const unsigned n = sf->nredo;
    memcpy(r, sf->redo, n * sizeof r[0]);
    sf->nredo = 0;
    pthread_mutex_unlock(&sf->mu);
    if (n == 0)
        return 0;
    int keep_fd = b->dirfd;
    char *keep_dir = b->cur_dir;
    struct stat sb;
    if (keep_fd >= 0 && fstat(keep_fd, &sb) == 0 && sb.st_nlink == 0) {
        lander__close_fd(&keep_fd); /* the removed directory: entered again when next needed */
        ingest__free(b->ctx, keep_dir);
        keep_dir = NULL;
    }
    b->dirfd = -1;
    b->cur_dir = NULL;
    int rc = 0;
    for (unsigned k = 0; k < n && rc == 0; k++) {
        sfjob *j = &r[k];
        const lfile *f = &b->files[j->fi];
        char dir[LANDED_MAX];
        const char *name;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        b->stats.files_helped--; /* made here after all */
        for (unsigned tries = 0;; tries++) {
            if ((rc = lander__reenter_land_dir(b, j->fi, dir)) < 0)
                break;
            lander__tmp_name(b, name, j->fi, j->name, sizeof j->name); /* staged now, perhaps: its final name */
            j->dirfd = b->dirfd; /* lent */
            const char *what = NULL;
            const int e = sf_land(sf, j, &what);
            j->dirfd = -1;
            if (e == 0)
                break;
            if (e != ENOENT || what != SF_CREATE || tries >= LANDER_REENTER_TRIES) {
                rc = lander__sys_fail(b->ctx, e, what, f->landed);
                break;
            }
        }
    }
    lander__forget_dir(b);
    b->dirfd = keep_fd;
    b->cur_dir = keep_dir;
    for (unsigned k = 0; k < n; k++)
        ingest__free(b->ctx, r[k].data);
    return rc;
}

sfslot *lander__sf_take(ingest_lander_batch *b, int *rc)
{
    *rc = 0;
    struct lander_sf *sf = b->sf;
    if (sf == NULL) {
        sf = ingest__calloc(b->ctx, 1, sizeof *sf);
        if (sf == NULL)
            return NULL; /* landed by the caller */
        pthread_mutex_init(&sf->mu, NULL);
        pthread_cond_init(&sf->cv, NULL);
        for (unsigned k = 0; k < SF_SLOTS; k++)
            sf->jobs[k].dirfd = -1;
        sf->files = b->files;
        sf->started = core_thread_start(&sf->th, sf_main, sf, "ingest-smallf") == 0;
        b->sf = sf;
    }
    if (!sf->started)
        return NULL;
    pthread_mutex_lock(&sf->mu);
    if (sf->err > 0)
        *rc = sf_report(b, sf);
    const bool redo = sf->nredo > 0;
    const unsigned n = sf->n;
    /* the slot after the queued ones: head + n stays where it is while the helper takes jobs */
    const unsigned tail = (sf->head + n) % SF_SLOTS;
    pthread_mutex_unlock(&sf->mu);
    if (*rc == 0 && redo)
        *rc = sf_redo(b, sf); /* files put aside (their directory was removed): made here first */
    if (*rc < 0 || n >= SF_AHEAD)
        return NULL;
    return (sfslot *)&sf->jobs[tail]; /* the helper touches only queued slots */
}

int lander__sf_fill(ingest_lander_batch *b, sfslot *slot, uint32_t fi, int dirfd, const char *name,
                    const uint8_t *data, uint32_t len, uint32_t mode, int64_t mtime_ns)
{
    sfjob *j = (sfjob *)slot;
    if (j->cap < len) {
        uint8_t *p = ingest__malloc(b->ctx, len);
        if (p == NULL)
            return 0; /* landed by the caller */
        ingest__free(b->ctx, j->data);
        j->data = p;
        j->cap = len;
    }
    const int dfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (dfd < 0)
        return 0;
    j->fi = fi;
    j->dirfd = dfd;
    j->len = len;
    memcpy(j->data, data, len);
    j->mode = (mode_t)mode;
    int64_t s = mtime_ns / 1000000000, ns = mtime_ns % 1000000000;
    if (ns < 0) {
        s--;
        ns += 1000000000;
    }
    j->mtime.tv_sec = (time_t)s;
    j->mtime.tv_nsec = (long)ns;
    snprintf(j->name, sizeof j->name, "%s", name);
    struct lander_sf *sf = b->sf;
    pthread_mutex_lock(&sf->mu);
    sf->n++;
    const bool wake = sf->helper_waiting;
    pthread_mutex_unlock(&sf->mu);
    if (wake)
        pthread_cond_broadcast(&sf->cv);
    return 1;
}

int lander__sf_wait(ingest_lander_batch *b)
{
    struct lander_sf *sf = b->sf;
    if (sf == NULL || !sf->started)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&sf->mu);
    while (sf->n > 0) {
        sf->poster_waiting = true;
        pthread_cond_wait(&sf->cv, &sf->mu);
        sf->poster_waiting = false;
    }
    if (sf->err > 0)
        rc = sf_report(b, sf);
    else if (sf->err < 0)
        rc = ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: a small file failed to land before", b->name);
    pthread_mutex_unlock(&sf->mu);
    if (rc == 0)
        rc = sf_redo(b, sf); /* the helper is idle (nothing queued): what it put aside is made here */
    return rc;
}

void lander__sf_stop(ingest_lander_batch *b)
{
    struct lander_sf *sf = b->sf;
    if (sf == NULL)
        return;
    if (sf->started) {
        pthread_mutex_lock(&sf->mu);
        sf->stop = true; /* what is still queued is not landed (its temporary files are removed next) */
        pthread_cond_broadcast(&sf->cv);
        pthread_mutex_unlock(&sf->mu);
        pthread_join(sf->th, NULL);
    }
    for (unsigned k = 0; k < SF_SLOTS; k++) {
        if (sf->jobs[k].dirfd >= 0)
            close(sf->jobs[k].dirfd);
        ingest__free(b->ctx, sf->jobs[k].data);
    }
    for (unsigned k = 0; k < sf->nredo; k++)
        ingest__free(b->ctx, sf->redo[k].data); /* put aside and not made: the batch failed */
    pthread_mutex_destroy(&sf->mu);
    pthread_cond_destroy(&sf->cv);
    ingest__free(b->ctx, sf);
    b->sf = NULL;
}
