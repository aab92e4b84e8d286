/*
 * The lander's appending in place (ingest_lander_set_append, docs/landing.md,
 * "Appending in place"): a growing file's new version written into its
 * landed file, the intent that makes it crash-safe, its undo and the sweep.
 *
 * Intent file: _manifests/.append/{devtag}.{batch}.{file index}, made
 * durable before the landed file is changed at all:
 *
 *   ingest-append 2\n
 *   {dev} {ino} {size} {mtime_ns} {mode} {new size}\n   the landed file before the append, and its size after
 *   {device}\n{batch}\n{landed path}\n
 *
 * The append is kept once the batch's manifest _manifests/{device}/{batch}.jsonl
 * is in place (it records the new size); otherwise the file is cut back to
 * {size}, its mode and mtime restored (the sweep at the receiver's start,
 * ingest_lander_sweep_appends, or the batch's abort), but only while it is
 * still that file (device and inode) at a size this append can have made:
 * {size} to {new size}.  (Version 1 intents, without the new size, are still
 * read, with no upper bound.)
 *
 * A file whose cut-back fails keeps its claim (no other batch of this
 * process appends to it: later versions are written whole and renamed over
 * it) and its intent, and a start whose sweep leaves an intent turns
 * appending off for that run: no append ever follows an intent not acted
 * on, so the sweep can never cut off bytes a later batch landed.
 */
#include "lander_int.h"

#include <sys/file.h>

#define APP_DIR "_manifests/.append"
#define APP_INTENT_MAX (3 * 24 + 2 * 130 + LANDED_MAX + 64)

int ingest_lander_set_append(ingest_lander *l, int on)
{
    if (l == NULL)
        return INGEST_EINVAL;
    l->append = on != 0;
    return 0;
}

void lander__data_name(const ingest_lander_batch *b, const char *name, uint32_t fi, char *out, size_t cap)
{
    if (b->files[fi].append)
        snprintf(out, cap, "%s", name);
    else
        lander__tmp_of(b, name, fi, out, cap);
}

/* The lander table's key of a landed file being appended to (the in-flight table, device "."). */
static void app_key(const lfile *f, uint8_t key[INGEST_ID_BYTES])
{
    uint8_t in[24] = "append\0";
    memcpy(in + 8, &f->app_dev, 8);
    memcpy(in + 16, &f->app_ino, 8);
    crypto_generichash(key, INGEST_ID_BYTES, in, sizeof in, NULL, 0);
}

/*
 * Under the store's lock: may file fi (its landed file st, at name) be
 * appended to?  Its first chunk must be the index's, at offset 0 of the
 * landed file at its own landed path (identity unchanged), and no other
 * batch may be appending to that file.  1 claimed, 0 not, < 0 error.
 */
static int app_claim(ingest_lander_batch *b, uint32_t fi, const struct stat *st)
{
    lfile *f = &b->files[fi];
    ingest_chunk_loc loc;
    int rc = ingest_index_find_for(b->l->idx, b->device, b->mc[f->first].id, &loc);
    if (rc == INGEST_ENOTFOUND || (rc == 0 && (loc.offset != 0 || loc.length != b->mc[f->first].len)))
        return 0;
    if (rc < 0)
        return rc;
    char p[LANDED_MAX + 512];
    rc = ingest_index_file_path(b->l->idx, loc.file_no, p, sizeof p);
    if (rc == INGEST_ESTALE || rc == INGEST_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    const size_t rl = strlen(b->l->root);
    if (strncmp(p, b->l->root, rl) != 0 || p[rl] != '/' || strcmp(p + rl + 1, f->landed) != 0)
        return 0;
    f->app_dev = (uint64_t)st->st_dev;
    f->app_ino = (uint64_t)st->st_ino;
    uint8_t key[INGEST_ID_BYTES];
    app_key(f, key);
    rc = ingest__inflight_add(b->l->idx, ".", key, b);
    if (rc <= 0)
        return rc; /* another batch appends to it (or the table is full): written whole, as usual */
    f->app_reg = true;
    f->app_no = loc.file_no;
    f->app_size = (uint64_t)st->st_size;
    f->app_mtime = ingest_time_ns(&st->st_mtim);
    f->app_mode = (uint32_t)(st->st_mode & 07777);
    return 1;
}

static void app_release_one(ingest_lander_batch *b, lfile *f)
{
    if (!f->app_reg || (f->app_grown && !f->app_done))
        return; /* (an append whose cut-back failed keeps its claim for the process's life: see the top) */
    uint8_t key[INGEST_ID_BYTES];
    app_key(f, key);
    ingest__inflight_del(b->l->idx, ".", key, b);
    f->app_reg = false;
}

void lander__app_release(ingest_lander_batch *b, bool locked)
{
    bool any = false;
    for (uint32_t i = 0; i < b->nfiles && !any; i++)
        any = b->files[i].app_reg;
    if (!any)
        return;
    const bool take = !locked && b->l->own_lock;
    if (take)
        b->l->lk.lock(b->l->lk.ud);
    for (uint32_t i = 0; i < b->nfiles; i++)
        app_release_one(b, &b->files[i]);
    if (take)
        b->l->lk.unlock(b->l->lk.ud);
}

/* Release file fi's claim alone (the batch's other appends keep theirs). */
void lander__app_release_file(ingest_lander_batch *b, uint32_t fi)
{
    lfile *f = &b->files[fi];
    if (!f->app_reg)
        return;
    const bool take = b->l->own_lock;
    if (take)
        b->l->lk.lock(b->l->lk.ud);
    app_release_one(b, f);
    if (take)
        b->l->lk.unlock(b->l->lk.ud);
}

int lander__app_try(ingest_lander_batch *b, uint32_t fi)
{
    lfile *f = &b->files[fi];
    /* a landed path with a newline cannot be written in the intent's line format: landed the usual way */
    if (!b->l->append || f->app_off || f->link || f->stage != 0 || f->refused != NULL || f->nchunks == 0 ||
        (b->cst[f->first] & K_MASK) != K_KNOWN || strchr(f->landed, '\n') != NULL)
        return 0;
    char dir[LANDED_MAX];
    const char *name;
    lander__split_path(f->landed, dir, sizeof dir, &name);
    struct stat st;
    if (fstatat(b->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > f->size)
        return 0;
    lander__enter(b->l);
    int rc = lander__leave(b, app_claim(b, fi, &st));
    if (rc <= 0)
        return rc;
    const int fd = openat(b->dirfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat now;
    if (fd < 0 || fstat(fd, &now) < 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino ||
        now.st_size != st.st_size) {
        if (fd >= 0)
            close(fd);
        lander__app_release_file(b, fi); /* this file's claim: another of the batch may be appending */
        return 0;
    }
    b->fd = fd;
    f->append = true;
    return 1;
}

static void app_intent_name(const ingest_lander_batch *b, uint32_t fi, char *out, size_t cap)
{
    snprintf(out, cap, "%s.%s.%u", b->devtag, b->name, fi);
}

/* The batch's lock of its intents, "{APP_DIR}/.{devtag}.{batch}.lock"; an intent's from its name (NULL: not one). */
static void app_lock_name(const ingest_lander_batch *b, char *out, size_t cap)
{
    snprintf(out, cap, ".%s.%s.lock", b->devtag, b->name);
}

/* Is name (in dfd) the file open at fd?  false when it is gone or another. */
static bool same_file_at(int fd, int dfd, const char *name)
{
    struct stat a, n;
    return fstat(fd, &a) == 0 && fstatat(dfd, name, &n, AT_SYMLINK_NOFOLLOW) == 0 && a.st_ino == n.st_ino &&
           a.st_dev == n.st_dev;
}

static bool app_lock_of_intent(const char *intent, char *out, size_t cap)
{
    const char *dot = strrchr(intent, '.');
    if (dot == NULL || dot == intent || (size_t)(dot - intent) + sizeof "..lock" > cap)
        return false;
    snprintf(out, cap, ".%.*s.lock", (int)(dot - intent), intent);
    return true;
}

/*
 * Hold the batch's lock (dfd: APP_DIR) before its first intent is made: a
 * sweep (of another receiver of the tree, starting) leaves the intents of a
 * batch at work alone.  The file is checked to be the one at its name once
 * locked: a sweep may remove a stale lock file between its creation and
 * the flock.
 */
static int app_lock(ingest_lander_batch *b, int dfd)
{
    if (b->app_lock_fd >= 0)
        return 0;
    char name[NAME_MAX_BYTES + 1];
    app_lock_name(b, name, sizeof name);
    for (int tries = 0; tries < 8; tries++) {
        const int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return lander__sys_fail(b->ctx, errno, "create the append lock in", APP_DIR);
        int r;
        while ((r = flock(fd, LOCK_EX)) < 0 && errno == EINTR)
            ;
        if (r < 0 || same_file_at(fd, dfd, name)) {
            b->app_lock_fd = fd; /* (a filesystem without flock: unlocked) */
            return 0;
        }
        close(fd); /* removed by a sweep meanwhile: again */
    }
    return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: cannot hold the lock of its append intents", b->name);
}

void lander__app_unlock(ingest_lander_batch *b)
{
    if (b->app_lock_fd < 0)
        return;
    char name[NAME_MAX_BYTES + 1], p[NAME_MAX_BYTES + sizeof APP_DIR + 2];
    app_lock_name(b, name, sizeof name);
    snprintf(p, sizeof p, "%s/%s", APP_DIR, name);
    (void)unlinkat(b->l->rootfd, p, 0); /* before it is unlocked: a sweep finds it locked, or not at all */
    lander__close_fd(&b->app_lock_fd);
}

int lander__app_intent(ingest_lander_batch *b, uint32_t fi)
{
    lfile *f = &b->files[fi];
    if (f->app_grown)
        return 0;
    const int rootfd = b->l->rootfd;
    INGEST__FORWARD(lander__intent_dir(b, APP_DIR, &b->l->app_dir_synced));
    const int dfd = openat(rootfd, APP_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return lander__sys_fail(b->ctx, errno, "open", APP_DIR);
    const int lr = app_lock(b, dfd);
    if (lr < 0) {
        close(dfd);
        return lr;
    }
    char name[NAME_MAX_BYTES + 1];
    app_intent_name(b, fi, name, sizeof name);
    char *text = ingest__malloc(b->ctx, APP_INTENT_MAX);
    if (text == NULL) {
        close(dfd);
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    }
    const int n = snprintf(text, APP_INTENT_MAX, "ingest-append 2\n%llu %llu %llu %lld %o %llu\n%s\n%s\n%s\n",
                           (unsigned long long)f->app_dev, (unsigned long long)f->app_ino,
                           (unsigned long long)f->app_size, (long long)f->app_mtime, (unsigned)f->app_mode,
                           (unsigned long long)f->size, b->device, b->name, f->landed);
    int rc = 0;
    const int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || lander__write_full(fd, text, (size_t)n) < 0 || fsync(fd) < 0 || fsync(dfd) < 0)
        rc = lander__sys_fail(b->ctx, errno, "write the append intent of", f->landed);
    if (fd >= 0)
        close(fd);
    close(dfd);
    ingest__free(b->ctx, text);
    if (rc == 0) {
        f->app_grown = true;
        b->stats.syncs += 2;
    }
    return rc;
}

/* Remove file fi's intent (its append kept, or taken back). */
static void app_intent_remove(ingest_lander_batch *b, uint32_t fi)
{
    char name[NAME_MAX_BYTES + 1], p[NAME_MAX_BYTES + sizeof APP_DIR + 2];
    app_intent_name(b, fi, name, sizeof name);
    snprintf(p, sizeof p, "%s/%s", APP_DIR, name);
    (void)unlinkat(b->l->rootfd, p, 0);
}

/* Cut fd (the file appended to) back to what it was: size, mode, mtime; synced. */
static int app_cut(int fd, uint64_t size, uint32_t mode, int64_t mtime_ns)
{
    struct timespec ts[2];
    int64_t s = mtime_ns / 1000000000, ns = mtime_ns % 1000000000;
    if (ns < 0) {
        s--;
        ns += 1000000000;
    }
    ts[0].tv_sec = ts[1].tv_sec = (time_t)s;
    ts[0].tv_nsec = ts[1].tv_nsec = (long)ns;
    if (ftruncate(fd, (off_t)size) < 0 || fchmod(fd, (mode_t)mode) < 0 || futimens(fd, ts) < 0 || fsync(fd) < 0)
        return -1;
    return 0;
}

/* An error that says the landed file (or a directory above it) is not there as a file: nothing to cut. */
static int gone(int e) { return e == ENOENT || e == ENOTDIR || e == ELOOP || e == EXDEV; }

void lander__app_undo(ingest_lander_batch *b)
{
    char dir[LANDED_MAX];
    const char *name;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (!f->append || !f->app_grown || f->app_done)
            continue;
        char keep[INGEST__ERRMSG_MAX];
        memcpy(keep, b->ctx->errmsg, sizeof keep);
        const int saved_state = b->state;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        int dfd = -1, fd = -1;
        bool cut = false;
        lander__hook(b, INGEST__LANDER_HOOK_UNDO);
        errno = 0;
        const int wr = lander__walk_dir(b, f->landed, dir, false, &dfd);
        int e = errno;
        if (wr == 0 && dfd >= 0) {
            fd = openat(dfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
            e = errno;
        }
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) != 0) {
            e = errno;
        } else if (fd >= 0) {
            /* only the file we appended to: a file renamed there since is another batch's */
            cut = (uint64_t)st.st_dev != f->app_dev || (uint64_t)st.st_ino != f->app_ino ||
                  app_cut(fd, f->app_size, f->app_mode, f->app_mtime) == 0;
            e = errno;
        } else {
            /* gone (the file, or a directory above it), or replaced by what it cannot open as a file: nothing
             * to take back; any other failure (no descriptor free, an I/O error) leaves it to be cut later */
            cut = (wr == 0 && dfd < 0) || gone(e);
        }
        if (fd >= 0)
            close(fd);
        if (dfd >= 0)
            close(dfd);
        memcpy(b->ctx->errmsg, keep, sizeof keep);
        b->state = saved_state;
        if (cut) {
            app_intent_remove(b, i); /* else the sweep of the next start cuts it */
            f->app_grown = false;
        } else {
            ingest__log(b->ctx, INGEST_LOG_WARN,
                        "lander: batch %s: cannot cut %s back to %llu bytes: %s; its intent stays, and it is not "
                        "appended to again before the receiver's next start cuts it",
                        b->name, f->landed, (unsigned long long)f->app_size, strerror(e));
        }
    }
    lander__app_unlock(b); /* (intents left: for the next sweep) */
}

void lander__app_finished(ingest_lander_batch *b)
{
    for (uint32_t i = 0; i < b->nfiles; i++)
        if (b->files[i].append && b->files[i].app_grown)
            app_intent_remove(b, i);
    lander__app_unlock(b);
}

/* --------------------------------------------------------------- sweep */

/* Parse an intent: 0, or -1 (malformed). */
static int intent_parse(char *t, unsigned long long *dev, unsigned long long *ino, unsigned long long *size,
                        long long *mtime, unsigned *mode, unsigned long long *new_size, char **device, char **batch,
                        char **landed)
{
    char *line[5];
    for (int k = 0; k < 5; k++) {
        char *nl = strchr(t, '\n');
        if (nl == NULL)
            return -1;
        *nl = '\0';
        line[k] = t;
        t = nl + 1;
    }
    char extra;
    *new_size = ULLONG_MAX; /* version 1: not recorded */
    if (strcmp(line[0], "ingest-append 1") == 0) {
        if (sscanf(line[1], "%llu %llu %llu %lld %o%c", dev, ino, size, mtime, mode, &extra) != 5)
            return -1;
    } else if (strcmp(line[0], "ingest-append 2") != 0 ||
               sscanf(line[1], "%llu %llu %llu %lld %o %llu%c", dev, ino, size, mtime, mode, new_size, &extra) != 6 ||
               *new_size < *size) {
        return -1;
    }
    *device = line[2];
    *batch = line[3];
    *landed = line[4];
    return 0;
}

static void sweep_intent_unlocked(ingest_ctx *ctx, int rootfd, int dfd, const char *name, uint64_t *cut,
                                  uint64_t *left);

/*
 * One intent (name, in dfd): cut its file back unless its batch's manifest
 * is in place; then remove it.  An intent that cannot be acted on (the
 * intent, the manifest's directory or the file unreadable for another
 * reason than their absence: no descriptor free, an I/O error, the cut
 * failing) stays, counted in *left, and is tried at the next start.
 */
static void sweep_intent(ingest_ctx *ctx, int rootfd, int dfd, const char *name, uint64_t *cut, uint64_t *left)
{
    /* its batch at work (here or in another receiver of the tree): left alone, held while acted on */
    char lk[NAME_MAX_BYTES + 1];
    int lkfd = app_lock_of_intent(name, lk, sizeof lk) ? openat(dfd, lk, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (lkfd >= 0 && flock(lkfd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(lkfd);
        return;
    }
    if (lkfd >= 0 && !same_file_at(lkfd, dfd, lk)) {
        /* the lock opened here was removed, and another made at its name since: a new try of the batch */
        close(lkfd);
        return;
    }
    sweep_intent_unlocked(ctx, rootfd, dfd, name, cut, left);
    if (lkfd >= 0)
        close(lkfd);
}

static void sweep_intent_unlocked(ingest_ctx *ctx, int rootfd, int dfd, const char *name, uint64_t *cut,
                                  uint64_t *left)
{
    char *t = ingest__malloc(ctx, APP_INTENT_MAX + 1);
    const char *what = NULL;
    int e = 0, lfd = -1;
    if (t == NULL) {
        what = "read it";
        e = ENOMEM;
        goto stays;
    }
    const int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        goto done; /* (gone since the directory was read) */
    const ssize_t n = fd >= 0 ? read(fd, t, APP_INTENT_MAX) : -1;
    e = errno;
    if (fd >= 0)
        close(fd);
    if (n < 0) {
        what = "read it";
        goto stays;
    }
    unsigned long long dev, ino, size, new_size;
    long long mtime;
    unsigned mode;
    char *device, *batch, *landed;
    if ((t[n] = '\0', intent_parse(t, &dev, &ino, &size, &mtime, &mode, &new_size, &device, &batch, &landed)) < 0 ||
        ingest__path_check_id(ctx, "device", device) < 0 || ingest__path_check_id(ctx, "batch", batch) < 0 ||
        ingest__path_check_rel(ctx, "landed path", landed) < 0) {
        /* torn while it was written: nothing was appended yet */
        ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s is not a complete append intent: removed", APP_DIR,
                    name);
        goto out;
    }
    char mp[2 * 130 + 32];
    snprintf(mp, sizeof mp, "_manifests/%s/%s.jsonl", device, batch);
    struct stat st;
    /* the batch landed: its manifest records the appended size (an empty one is a manifest renamed into
     * place before the syncfs that would have written it, cut by a crash: its batch did not land) */
    const int ms = fstatat(rootfd, mp, &st, AT_SYMLINK_NOFOLLOW);
    if (ms == 0 && st.st_size > 0) {
        /* ...and lists the file: a later try of the batch that left it out (removed at the edge) did not
         * land this append */
        char **listed = NULL;
        size_t nl = 0;
        if (lander__manifest_landed_paths(ctx, rootfd, mp, &listed, &nl) < 0) {
            e = EIO;
            what = "read its batch's manifest";
            goto stays;
        }
        const bool there = listed != NULL && bsearch(&landed, listed, nl, sizeof *listed, lander__cmp_strp) != NULL;
        lander__free_paths(ctx, listed, nl);
        if (there)
            goto out;
    }
    if (ms != 0 && errno != ENOENT) {
        e = errno;
        what = "look for its batch's manifest";
        goto stays;
    }
    const char *last = NULL;
    const int pfd = ingest__open_parent_beneath(rootfd, landed, &last);
    lfd = pfd >= 0 ? openat(pfd, last, O_WRONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    e = errno;
    if (pfd >= 0)
        close(pfd);
    if (lfd < 0 && gone(e))
        goto out; /* not there any more: nothing to take back */
    if (lfd < 0 || fstat(lfd, &st) != 0) {
        e = errno;
        what = "open the file";
        goto stays;
    }
    /* only the file appended to, at a length that append can have made */
    if ((unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino &&
        (unsigned long long)st.st_size >= size && (unsigned long long)st.st_size <= new_size) {
        const unsigned long long torn = (unsigned long long)st.st_size - size;
        if (app_cut(lfd, size, mode & 07777, mtime) < 0) {
            e = errno;
            what = "cut the file back";
            goto stays;
        }
        ingest__log(ctx, INGEST_LOG_WARN,
                    "lander: sweep: %s cut back to its landed %llu bytes (a torn tail of %llu bytes: batch %s of %s "
                    "did not land)",
                    landed, size, torn, batch, device);
        (*cut)++;
    }
out:
    (void)unlinkat(dfd, name, 0);
    goto done;
stays:
    ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: cannot %s: %s; the intent stays, for the next start",
                APP_DIR, name, what, strerror(e));
    (*left)++;
done:
    if (lfd >= 0)
        close(lfd);
    ingest__free(ctx, t);
}

/* Remove the lock files no batch holds (their batches ended in a crash). */
static void remove_stale_locks(int rootfd)
{
    const int dfd = openat(rootfd, APP_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int dfd2 = dfd >= 0 ? dup(dfd) : -1;
    DIR *d = dfd2 >= 0 ? fdopendir(dfd2) : NULL;
    if (d == NULL && dfd2 >= 0)
        close(dfd2);
    for (const struct dirent *de; d != NULL && (de = readdir(d)) != NULL;) {
        const size_t n = strlen(de->d_name);
        if (de->d_name[0] != '.' || n < sizeof ".lock" || strcmp(de->d_name + n - 5, ".lock") != 0)
            continue;
        const int fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && same_file_at(fd, dfd, de->d_name))
            (void)unlinkat(dfd, de->d_name, 0); /* (only the file locked here: a new one at its name is a batch's) */
        if (fd >= 0)
            close(fd);
    }
    if (d != NULL)
        closedir(d);
    if (dfd >= 0)
        close(dfd);
}

int lander__app_sweep(ingest_ctx *ctx, int rootfd, uint64_t *cut, uint64_t *left)
{
    *cut = *left = 0;
    const int rc = lander__sweep_intents(ctx, rootfd, APP_DIR, sweep_intent, cut, left);
    if (rc == 0)
        remove_stale_locks(rootfd);
    return rc;
}

int ingest_lander_sweep_appends(ingest_ctx *ctx, const char *bronze_root, uint64_t *cut, uint64_t *left)
{
    uint64_t c = 0, k = 0;
    if (cut)
        *cut = 0;
    if (left)
        *left = 0;
    if (!ctx || !bronze_root)
        return INGEST_EINVAL;
    const int rootfd = open(bronze_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rootfd < 0)
        return lander__sys_fail(ctx, errno, "open bronze root", bronze_root);
    uint64_t restored = 0, old_left = 0;
    int rc = lander__old_sweep(ctx, rootfd, &restored, &old_left); /* (lander_undo.c) */
    if (rc == 0)
        rc = lander__app_sweep(ctx, rootfd, &c, &k);
    close(rootfd);
    if (cut)
        *cut = c;
    if (left)
        *left = k;
    return rc;
}
