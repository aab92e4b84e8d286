/*
 * Verification of landed files against their manifests
 * (ingest_catalog_verify, include/ingest/catalog.h): the calling thread
 * reads the catalog and the manifests and queues one job per file; worker
 * threads read each file once, chunk by chunk as its manifest cuts it,
 * recompute each chunk id (keyed HMAC-SHA256) and the whole-file hash, and
 * hand the job back; the calling thread reports problems and progress.
 */
#include "catalog_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ingest/manifest.h"

#define VERIFY_THREADS_MAX 256
#define PROGRESS_NS 200000000ll
/* The longest symlink target a landed symlink has (INGEST_LANDER_LINK_MAX). */
#define INGEST__VERIFY_LINK_MAX 4095

typedef struct vjob {
    struct vjob *next;
    ingest_catalog_entry e; /* strings in this allocation */
    char device[INGEST__CAT_NAME_MAX + 1], batch[INGEST__CAT_NAME_MAX + 1];
    ingest_manifest_chunk *chunks;
    uint64_t nchunks, have;
    uint8_t *buf; /* the largest chunk's size: allocated by the calling thread, as everything here */
    int what; /* 0 ok, INGEST_VERIFY_* */
    char detail[256];
    uint64_t bytes_read;
} vjob;

typedef struct vctx {
    ingest_catalog *cat;
    const uint8_t *key;
    int rootfd;
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    vjob *queue, *queue_tail, *done;
    size_t queued, cap;
    bool closing;
} vctx;

static void *worker(void *arg);
static void job_free(ingest_ctx *ctx, vjob *j);

static bool relpath_ok(const char *p, size_t n)
{
    if (n == 0 || p[0] == '/')
        return false;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '/')
            continue;
        const size_t cl = i - start;
        if (cl == 0 || (cl == 1 && p[start] == '.') || (cl == 2 && p[start] == '.' && p[start + 1] == '.'))
            return false;
        start = i + 1;
    }
    return true;
}

static int read_full(int fd, uint8_t *buf, size_t n, uint64_t off, size_t *got)
{
    size_t done = 0;
    while (done < n) {
        const ssize_t r = pread(fd, buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *got = done;
    return 0;
}

/*
 * Hash j's chunks as its manifest cuts them, read from fd, or from
 * mem[0, memlen) when mem is not NULL (a symlink's target); sets j->what
 * and j->detail.
 */
static void check_chunks(vctx *v, vjob *j, int fd, const uint8_t *mem, size_t memlen)
{
    ingest_filehash fh;
    ingest_filehash_init(&fh, v->key);
    uint64_t off = 0;
    for (uint64_t i = 0; i < j->nchunks; i++) {
        const uint32_t len = j->chunks[i].len;
        size_t got = 0;
        int rc = 0;
        if (mem != NULL) {
            got = off >= memlen ? 0 : memlen - off < len ? (size_t)(memlen - off) : len;
            memcpy(j->buf, mem + off, got);
        } else {
            rc = read_full(fd, j->buf, len, off, &got);
            j->bytes_read += got;
        }
        if (rc < 0 || got != len) {
            j->what = INGEST_VERIFY_CHANGED;
            snprintf(j->detail, sizeof(j->detail), rc < 0 ? "read error at byte %llu: %s" : "shorter than its size "
                     "at byte %llu%s", (unsigned long long)(off + got), rc < 0 ? strerror(-rc) : "");
            return;
        }
        uint8_t id[INGEST_ID_BYTES];
        ingest_chunk_id(v->key, j->buf, len, id);
        if (memcmp(id, j->chunks[i].id, INGEST_ID_BYTES) != 0) {
            j->what = INGEST_VERIFY_CORRUPT;
            snprintf(j->detail, sizeof(j->detail), "chunk %llu of %llu (bytes %llu..%llu) does not match its id",
                     (unsigned long long)i + 1, (unsigned long long)j->nchunks, (unsigned long long)off,
                     (unsigned long long)(off + len));
            return;
        }
        ingest_filehash_update(&fh, id, sizeof(id));
        off += len;
    }
    uint8_t h[INGEST_ID_BYTES];
    ingest_filehash_final(&fh, h);
    if (memcmp(h, j->e.hash, INGEST_ID_BYTES) != 0) {
        j->what = INGEST_VERIFY_CORRUPT;
        snprintf(j->detail, sizeof(j->detail), "its chunks match, but the whole-file hash does not");
    }
}

/* Why a landed path could not be opened (or stat'ed) below the root, never through a symlink. */
static const char *missing_why(int e)
{
    return e == ENOENT ? "no such file"
           : e == ELOOP ? "a symlink is in its place or on its way (never followed)"
           : e == ENOTDIR ? "a symlink or a file is on its way (never followed)"
                         : strerror(e);
}

/*
 * A file landed as a symlink (its manifest mode): its target, read with
 * readlinkat (never followed), is its content, checked as a file's bytes.
 */
static void check_link(vctx *v, vjob *j)
{
    struct stat sb;
    char target[INGEST__VERIFY_LINK_MAX + 1];
    const char *last = NULL;
    const int pfd = ingest__open_parent_beneath(v->rootfd, j->e.landed, &last);
    if (pfd < 0 || fstatat(pfd, last, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        j->what = INGEST_VERIFY_MISSING;
        snprintf(j->detail, sizeof(j->detail), "%s", missing_why(errno));
        if (pfd >= 0)
            close(pfd);
        return;
    }
    if (!S_ISLNK(sb.st_mode)) {
        j->what = INGEST_VERIFY_MISSING;
        snprintf(j->detail, sizeof(j->detail), "not a symlink (the manifest's mode is one)");
        close(pfd);
        return;
    }
    const ssize_t n = readlinkat(pfd, last, target, sizeof(target));
    const int e = errno;
    close(pfd);
    if (n < 0) {
        j->what = INGEST_VERIFY_MISSING;
        snprintf(j->detail, sizeof(j->detail), "readlink: %s", strerror(e));
        return;
    }
    j->bytes_read += (uint64_t)n;
    if ((uint64_t)n != j->e.size) {
        j->what = INGEST_VERIFY_CHANGED;
        snprintf(j->detail, sizeof(j->detail), "symlink target of %s%lld bytes, the manifest says %llu",
                 (size_t)n > INGEST__VERIFY_LINK_MAX ? "more than " : "", (long long)n, (unsigned long long)j->e.size);
        return;
    }
    check_chunks(v, j, -1, (const uint8_t *)target, (size_t)n);
}

/* Check one file; sets j->what and j->detail. */
static void check_file(vctx *v, vjob *j)
{
    if (S_ISLNK(j->e.mode)) {
        check_link(v, j);
        return;
    }
    const char *last = NULL;
    const int pfd = ingest__open_parent_beneath(v->rootfd, j->e.landed, &last);
    const int fd = pfd >= 0 ? openat(pfd, last, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    const int e = errno;
    if (pfd >= 0)
        close(pfd);
    if (fd < 0) {
        j->what = INGEST_VERIFY_MISSING;
        snprintf(j->detail, sizeof(j->detail), "%s", missing_why(e));
        return;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        j->what = INGEST_VERIFY_MISSING;
        snprintf(j->detail, sizeof(j->detail), "not a regular file");
        goto out;
    }
    if ((uint64_t)sb.st_size != j->e.size) {
        j->what = INGEST_VERIFY_CHANGED;
        snprintf(j->detail, sizeof(j->detail), "%llu bytes, the manifest says %llu", (unsigned long long)sb.st_size,
                 (unsigned long long)j->e.size);
        goto out;
    }
    check_chunks(v, j, fd, NULL, 0);
out:
    close(fd);
}

static void *worker(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-verify"); /* docs/architecture.md "Threads" */
    vctx *v = arg;
    pthread_mutex_lock(&v->mu);
    for (;;) {
        while (v->queue == NULL && !v->closing)
            pthread_cond_wait(&v->work, &v->mu);
        if (v->queue == NULL)
            break;
        vjob *j = v->queue;
        v->queue = j->next;
        if (v->queue == NULL)
            v->queue_tail = NULL;
        v->queued--;
        pthread_cond_broadcast(&v->done_cv); /* room in the queue */
        pthread_mutex_unlock(&v->mu);
        check_file(v, j);
        pthread_mutex_lock(&v->mu);
        j->next = v->done;
        v->done = j;
        pthread_cond_broadcast(&v->done_cv);
    }
    pthread_mutex_unlock(&v->mu);
    return NULL;
}

typedef struct vrun {
    vctx v;
    const ingest_catalog_verify_opts *o;
    ingest_catalog_verify_stats *st;
    uint64_t total_files, total_bytes;
    int64_t last_progress;
} vrun;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ingest_time_ns(&ts);
}

/* Report and free the finished jobs (called with v.mu held; drops it around the callbacks). */
static void drain(vrun *R)
{
    vctx *v = &R->v;
    while (v->done != NULL) {
        vjob *list = v->done;
        v->done = NULL;
        pthread_mutex_unlock(&v->mu);
        while (list != NULL) {
            vjob *j = list;
            list = j->next;
            R->st->files++;
            R->st->bytes += j->bytes_read;
            switch (j->what) {
            case 0: R->st->ok++; break;
            case INGEST_VERIFY_MISSING: R->st->missing++; break;
            case INGEST_VERIFY_CHANGED: R->st->changed++; break;
            default: R->st->corrupt++; break;
            }
            if (j->what != 0 && R->o->problem != NULL)
                R->o->problem(R->o->ud, j->what, &j->e, j->detail);
            job_free(v->cat->ctx, j);
        }
        pthread_mutex_lock(&v->mu);
    }
    const int64_t t = mono_ns();
    if (R->o->progress != NULL && t - R->last_progress >= PROGRESS_NS) {
        R->last_progress = t;
        pthread_mutex_unlock(&v->mu);
        R->o->progress(R->o->ud, R->st->files, R->st->bytes, R->total_files, R->total_bytes);
        pthread_mutex_lock(&v->mu);
    }
}

static void wait_some(vrun *R)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += PROGRESS_NS;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&R->v.done_cv, &R->v.mu, &ts);
}

static int enqueue(vrun *R, vjob *j)
{
    vctx *v = &R->v;
    pthread_mutex_lock(&v->mu);
    while (v->queued >= v->cap) {
        drain(R);
        if (v->queued >= v->cap)
            wait_some(R);
    }
    j->next = NULL;
    if (v->queue_tail)
        v->queue_tail->next = j;
    else
        v->queue = j;
    v->queue_tail = j;
    v->queued++;
    pthread_cond_signal(&v->work);
    drain(R);
    pthread_mutex_unlock(&v->mu);
    return 0;
}

static void job_free(ingest_ctx *ctx, vjob *j)
{
    if (j == NULL)
        return;
    ingest__free(ctx, j->chunks);
    ingest__free(ctx, j->buf);
    ingest__free(ctx, j);
}

static vjob *job_new(ingest_ctx *ctx, const ingest_manifest_rec *rec, const ingest__catrec *r, const char *device, const char *batch,
                     int64_t landed_ns)
{
    const size_t ll = strlen(rec->landed), pl = strlen(rec->path);
    vjob *j = ingest__calloc(ctx, 1, sizeof(*j) + ll + pl + 2);
    if (j == NULL)
        return NULL;
    char *s = (char *)(j + 1);
    memcpy(s, rec->landed, ll + 1);
    memcpy(s + ll + 1, rec->path, pl + 1);
    snprintf(j->device, sizeof(j->device), "%s", device);
    snprintf(j->batch, sizeof(j->batch), "%s", batch);
    j->e.landed = s;
    j->e.landed_len = ll;
    j->e.path = s + ll + 1;
    j->e.path_len = pl;
    j->e.device = j->device;
    j->e.batch = j->batch;
    j->e.size = rec->size;
    j->e.mtime_ns = rec->mtime_ns;
    j->e.mode = rec->mode;
    j->e.version = rec->version;
    memcpy(j->e.hash, rec->hash, INGEST_ID_BYTES);
    j->e.landed_ns = landed_ns;
    j->e.batch_no = r->batch_no;
    j->nchunks = rec->nchunks_total;
    if (j->nchunks > 0) {
        j->chunks = ingest__malloc(ctx, j->nchunks * sizeof(*j->chunks));
        if (j->chunks == NULL) {
            ingest__free(ctx, j);
            return NULL;
        }
    }
    return j;
}

/* Queue the current files of one batch from its manifest. */
static int verify_batch(vrun *R, MDB_txn *txn, uint64_t bno, const char *device, const char *batch,
                        int64_t landed_ns, const char *prefix, uint64_t *matched)
{
    *matched = UINT64_MAX; /* the batch was not read whole: counted skipped as a whole */
    ingest_catalog *const cat = R->v.cat;
    char path[INGEST__CAT_PBUF];
    snprintf(path, sizeof(path), "%s/_manifests/%s/%s.jsonl", cat->bronze, device, batch);
    ingest_manifest_reader *mr = NULL;
    ingest_manifest_rec rec;
    int rc = ingest_manifest_reader_open(cat->ctx, path, &mr);
    if (rc < 0) {
        ingest__log(cat->ctx, INGEST_LOG_WARN, "verify: batch %s of %s not checked: %s", batch, device,
                    ingest_ctx_errmsg(cat->ctx));
        R->st->skipped++;
        return 0;
    }
    const size_t plen = strlen(prefix);
    vjob *j = NULL;
    int ret = 0;
    uint64_t seen = 0; /* records that are the catalog's current entry of this batch */
    while ((rc = ingest_manifest_reader_next(mr, &rec)) > 0) {
        if (rec.type == INGEST_MREC_FILE) {
            job_free(cat->ctx, j); /* NULL: the reader checks the sequence */
            j = NULL;
            if (rec.landed == NULL || rec.landed[0] == '\0')
                continue;
            const size_t ll = strlen(rec.landed);
            if (plen > 0 && (ll < plen || memcmp(rec.landed, prefix, plen) != 0))
                continue;
            ingest__catrec r;
            bool replaced = false;
            const int found = ingest__cat_find(cat, txn, rec.landed, ll, rec.version, &r, &replaced);
            if (found < 0) {
                ret = found;
                break;
            }
            if (found == 0 || replaced || r.batch_no != bno)
                continue;
            seen++;
            if (!relpath_ok(rec.landed, ll)) {
                ingest__log(cat->ctx, INGEST_LOG_WARN, "verify: %s: landed path '%.200s' refused", path, rec.landed);
                R->st->skipped++;
                continue;
            }
            j = job_new(cat->ctx, &rec, &r, device, batch, landed_ns);
            if (j == NULL) {
                ret = ingest__fail(cat->ctx, INGEST_ENOMEM, "verify: out of memory");
                break;
            }
        } else if (rec.type != INGEST_MREC_CHUNKS || j == NULL) {
            continue;
        }
        for (uint32_t i = 0; i < rec.nchunks && j->have < j->nchunks; i++)
            j->chunks[j->have++] = rec.chunks[i];
        if (j->have == j->nchunks) {
            uint32_t maxlen = 1;
            for (uint64_t i = 0; i < j->nchunks; i++)
                if (j->chunks[i].len > maxlen)
                    maxlen = j->chunks[i].len;
            if ((j->buf = ingest__malloc(cat->ctx, maxlen)) == NULL) {
                ret = ingest__fail(cat->ctx, INGEST_ENOMEM, "verify: out of memory");
                break;
            }
            enqueue(R, j);
            j = NULL;
        }
    }
    job_free(cat->ctx, j);
    if (rc < 0 && ret == 0) {
        ingest__log(cat->ctx, INGEST_LOG_WARN, "verify: batch %s of %s: %s", batch, device,
                    ingest_ctx_errmsg(cat->ctx));
        R->st->skipped++;
    } else if (rc == 0) {
        *matched = seen;
    }
    ingest_manifest_reader_close(mr);
    return ret;
}

/*
 * The files the catalog holds as current in batch bno (the feed record in
 * cat->fr, just begun) under prefix: each must be met in the batch's
 * manifest, or it is not checked (a manifest edited since it landed).
 */
static int catalog_batch_files(ingest_catalog *cat, MDB_txn *txn, uint64_t bno, const char *prefix, uint64_t *n)
{
    const size_t plen = strlen(prefix);
    ingest__catrec r;
    bool replaced = false;
    int rc;
    *n = 0;
    while ((rc = ingest__catfeed_next_held(cat, txn, cat->fr, bno, prefix, plen, &r, &replaced)) > 0)
        *n += !replaced;
    return rc < 0 ? rc : 0;
}

static int count_cb(void *ud, const ingest_catalog_entry *e)
{
    vrun *R = ud;
    R->total_files++;
    R->total_bytes += e->size;
    return 0;
}

/* From catalog_list.c, without its lock (verify holds it). */
static int for_each_batch(vrun *R, MDB_txn *txn, const ingest_catalog_filter *f)
{
    ingest_catalog *const cat = R->v.cat;
    MDB_cursor *cur = NULL;
    int rc = mdb_cursor_open(txn, cat->feed, &cur);
    if (rc != 0)
        return ingest__cat_mdb(cat, rc, "cursor");
    const char *prefix = f != NULL && f->prefix != NULL ? f->prefix : "";
    MDB_val k, v;
    int ret = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 8) {
            ret = ingest__fail(cat->ctx, INGEST_ECORRUPT, "catalog %s: feed key of %zu bytes", cat->dir, k.mv_size);
            break;
        }
        uint64_t bno = 0;
        for (int i = 0; i < 8; i++)
            bno = bno << 8 | ((const uint8_t *)k.mv_data)[i];
        ingest__catfeed_r *const fr = cat->fr;
        if (ingest__catfeed_r_begin(fr, v.mv_data, v.mv_size) < 0) {
            ret = ingest__cat_feed_bad(cat, bno, fr);
            break;
        }
        if (f != NULL && ((f->device != NULL && strcmp(f->device, fr->device) != 0) ||
                          (f->since_ns != 0 && fr->landed_ns < f->since_ns) ||
                          (f->until_ns != 0 && fr->landed_ns >= f->until_ns)))
            continue;
        char device[INGEST__CAT_NAME_MAX + 1], batch[INGEST__CAT_NAME_MAX + 1];
        memcpy(device, fr->device, sizeof(device));
        memcpy(batch, fr->batch, sizeof(batch));
        const int64_t landed_ns = fr->landed_ns;
        uint64_t held = 0, matched = 0;
        if ((ret = catalog_batch_files(cat, txn, bno, prefix, &held)) < 0 ||
            (ret = verify_batch(R, txn, bno, device, batch, landed_ns, prefix, &matched)) < 0)
            break;
        if (matched != UINT64_MAX && matched < held) {
            ingest__log(cat->ctx, INGEST_LOG_WARN,
                        "verify: batch %s of %s: %llu of its %llu files in the catalog are not in its manifest (the "
                        "manifest was changed since it landed?): not checked", batch, device,
                        (unsigned long long)(held - matched), (unsigned long long)held);
            R->st->skipped += held - matched;
        }
    }
    if (ret == 0 && rc != 0 && rc != MDB_NOTFOUND)
        ret = ingest__cat_mdb(cat, rc, "next batch");
    mdb_cursor_close(cur);
    return ret;
}

int ingest_catalog_verify(ingest_catalog *cat, const ingest_catalog_verify_opts *o, ingest_catalog_verify_stats *st)
{
    if (st != NULL)
        memset(st, 0, sizeof(*st));
    if (cat == NULL || o == NULL || o->key == NULL || st == NULL)
        return INGEST_EINVAL;
    unsigned nt = o->threads;
    if (nt == 0) {
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        nt = n > 0 ? (unsigned)n : 1;
    }
    if (nt > VERIFY_THREADS_MAX)
        nt = VERIFY_THREADS_MAX;
    /* totals for the progress line: the listing, without the lock held twice */
    vrun *R = ingest__calloc(cat->ctx, 1, sizeof(*R));
    if (R == NULL)
        return ingest__fail(cat->ctx, INGEST_ENOMEM, "verify: out of memory");
    R->o = o;
    R->st = st;
    ingest_catalog_filter cf;
    if (o->filter != NULL)
        cf = *o->filter;
    else
        memset(&cf, 0, sizeof(cf));
    cf.flags &= ~INGEST_CATALOG_ALL_VERSIONS;
    int ret = ingest_catalog_list(cat, &cf, count_cb, R);
    if (ret < 0) {
        ingest__free(cat->ctx, R);
        return ret;
    }
    vctx *const v = &R->v;
    v->cat = cat;
    v->key = o->key;
    v->cap = 4 * (size_t)nt;
    v->rootfd = open(cat->bronze, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (v->rootfd < 0) {
        ret = ingest__fail(cat->ctx, ingest__errno(errno), "verify: open %s: %s", cat->bronze, strerror(errno));
        ingest__free(cat->ctx, R);
        return ret;
    }
    pthread_mutex_init(&v->mu, NULL);
    pthread_cond_init(&v->work, NULL);
    pthread_cond_init(&v->done_cv, NULL);
    pthread_t *th = ingest__calloc(cat->ctx, nt, sizeof(*th));
    unsigned started = 0;
    if (th == NULL) {
        ret = ingest__fail(cat->ctx, INGEST_ENOMEM, "verify: out of memory");
        goto out;
    }
    for (; started < nt; started++)
        if (pthread_create(&th[started], NULL, worker, v) != 0)
            break;
    if (started == 0) {
        ret = ingest__fail(cat->ctx, INGEST_EIO, "verify: cannot start a thread");
        goto out;
    }
    R->last_progress = mono_ns();
    pthread_mutex_lock(&cat->lock);
    MDB_txn *txn = NULL;
    int rc = mdb_txn_begin(cat->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        ret = ingest__cat_mdb(cat, rc, "begin");
    } else {
        ret = for_each_batch(R, txn, &cf);
        mdb_txn_abort(txn);
    }
    pthread_mutex_unlock(&cat->lock);
out:
    pthread_mutex_lock(&v->mu);
    v->closing = true;
    pthread_cond_broadcast(&v->work);
    pthread_mutex_unlock(&v->mu);
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_lock(&v->mu);
    R->last_progress = 0;
    drain(R);
    pthread_mutex_unlock(&v->mu);
    ingest__free(cat->ctx, th);
    close(v->rootfd);
    pthread_mutex_destroy(&v->mu);
    pthread_cond_destroy(&v->work);
    pthread_cond_destroy(&v->done_cv);
    ingest__free(cat->ctx, R);
    return ret;
}
