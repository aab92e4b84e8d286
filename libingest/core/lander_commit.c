/* The lander's commit: make a batch durable (sync, rename, manifest, index) in two phases. */
#include "lander_int.h"

/* ---------------------------------------------------------------- commit */

static int write_manifest(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    ingest_manifest_writer *w = NULL;
    int fd = -1, dfd = -1, rc;
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1], fn[NAME_MAX_BYTES + 1];
    snprintf(dir, sizeof dir, "_manifests/%s", b->device);
    snprintf(tn, sizeof tn, ".%s.jsonl.tmp", b->name);
    snprintf(fn, sizeof fn, "%s.jsonl", b->name);
    if ((rc = lander__walk_dir(b, fn, dir, true, &dfd)) < 0)
        goto out;
    if ((rc = lander__add_dir(b, dir)) < 0)
        goto out;
    if ((rc = ingest_manifest_writer_create(b->ctx, &w)) < 0)
        goto out;
    fd = openat(dfd, tn, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = lander__sys_fail(b->ctx, errno, "create manifest in", dir);
        goto out;
    }
    ingest_manifest_rec rec;
    memset(&rec, 0, sizeof rec);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    rec.type = INGEST_MREC_HEADER;
    rec.format = INGEST_MANIFEST_FORMAT;
    rec.device = b->device;
    rec.batch = b->name;
    rec.nfiles = b->nfiles;
    rec.total_bytes = b->stats.bytes;
    rec.created_ns = ingest_time_ns(&now);
    /* the device's digest, kept so that a replay of exactly this batch is recognised by it (same_landed_batch) */
    rec.has_digest = b->has_digest;
    memcpy(rec.digest, b->digest, sizeof rec.digest);
    for (uint32_t i = 0; i <= b->nfiles; i++) {
        if ((rc = ingest_manifest_writer_add(w, &rec)) < 0)
            goto out;
        size_t n;
        const void *d = ingest_manifest_writer_data(w, &n);
        if (n >= MANIFEST_FLUSH || i == b->nfiles) {
            if (lander__write_full(fd, d, n) < 0) {
                rc = lander__sys_fail(b->ctx, errno, "write manifest in", dir);
                goto out;
            }
            b->stats.bytes_written += n;
            ingest_manifest_writer_reset(w);
        }
        if (i == b->nfiles)
            break;
        const lfile *f = &b->files[i];
        memset(&rec, 0, sizeof rec);
        rec.type = INGEST_MREC_FILE;
        rec.path = f->path;
        rec.landed = f->refused != NULL ? "" : f->landed;
        rec.refused = f->refused;
        rec.size = f->size;
        rec.mtime_ns = f->mtime_ns;
        rec.mode = f->mode;
        rec.version = f->version;
        memcpy(rec.hash, f->hash, sizeof rec.hash);
        rec.nchunks_total = f->nchunks;
        rec.chunks = f->nchunks ? &b->mc[f->first] : NULL;
        rec.nchunks = f->nchunks;
    }
    if (!b->syncfs) {
        if (fsync(fd) < 0) {
            rc = lander__sys_fail(b->ctx, errno, "fsync manifest in", dir);
            goto out;
        }
        b->stats.syncs++;
    }
    if (close(fd) < 0) {
        fd = -1;
        rc = lander__sys_fail(b->ctx, errno, "close manifest in", dir);
        goto out;
    }
    fd = -1;
    if (renameat(dfd, tn, dfd, fn) < 0) {
        rc = lander__sys_fail(b->ctx, errno, "rename manifest in", dir);
        goto out;
    }
    b->manifest_placed = true;
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
        unlinkat(dfd, tn, 0);
    }
    if (dfd >= 0)
        close(dfd);
    ingest_manifest_writer_destroy(w);
    (void)l;
    return rc;
}

/*
 * For each touched directory b->dirs[from, n): the parents of it and of its
 * ancestors whose names are not known durable (made by a batch that never
 * committed, or by a receiver that was killed before it synced them): a
 * file's name is only as durable as the names of the directories above it.
 */
static int add_parents(ingest_lander_batch *b, size_t from, size_t n)
{
    for (size_t i = from; i < n; i++) {
        char d[LANDED_MAX];
        snprintf(d, sizeof d, "%s", b->dirs[i]);
        while (d[0] != '\0' && !ingest__syncs_dir_durable(b->l->syncs, d)) {
            char *slash = strrchr(d, '/');
            if (slash != NULL)
                *slash = '\0';
            else
                d[0] = '\0';
            INGEST__FORWARD(lander__add_dir(b, d));
        }
    }
    return 0;
}

/* fsync the touched directories b->dirs[from, ndirs), each once, and the parents add_parents finds. */
static int sync_dirs(ingest_lander_batch *b, size_t from)
{
    const uint64_t gen = ingest__syncs_dir_gen(b->l->syncs); /* before add_parents looks */
    INGEST__FORWARD(add_parents(b, from, b->ndirs));
    qsort(b->dirs + from, b->ndirs - from, sizeof *b->dirs, lander__cmp_strp);
    for (size_t i = from; i < b->ndirs; i++) {
        if (i > from && strcmp(b->dirs[i], b->dirs[i - 1]) == 0)
            continue;
        int dfd = -1;
        INGEST__FORWARD(lander__walk_dir(b, b->dirs[i], b->dirs[i], false, &dfd));
        if (dfd < 0)
            return ingest__fail(b->ctx, INGEST_EIO, "lander: directory %s vanished", b->dirs[i]);
        const int r = fsync(dfd);
        const int e = errno;
        close(dfd);
        if (r < 0)
            return lander__sys_fail(b->ctx, e, "fsync directory", b->dirs[i][0] ? b->dirs[i] : ".");
        b->stats.syncs++;
    }
    /* every one's parent is synced now (add_parents), so their names are durable */
    for (size_t i = from; i < b->ndirs; i++)
        if (b->dirs[i][0] != '\0')
            ingest__syncs_dir_mark(b->l->syncs, b->dirs[i], gen);
    return 0;
}

static int versions_db(ingest_lander *l)
{
    if (l->vdb_open)
        return 0;
    INGEST__FORWARD(ingest__store_db(l->st, INGEST__VERSIONS_TABLE, &l->vdb));
    l->vdb_open = true;
    return 0;
}

/*
 * File i is a symlink (its manifest mode): its temporary data file tn, in
 * b->dirfd, holds its target, verified against the manifest.  Make the
 * symlink under its own temporary name (lander__tmp_link_name) with that
 * target and the manifest's mtime, then remove the data file; the rename
 * of step 2 puts the symlink in place.  The target is never followed.
 */
static int make_link(ingest_lander_batch *b, uint32_t i, const char *tn)
{
    lfile *f = &b->files[i];
    char target[INGEST_LANDER_LINK_MAX + 1], ln[NAME_MAX_BYTES + 1];
    const int fd = openat(b->dirfd, tn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return lander__sys_fail(b->ctx, errno, "open temporary file of", f->landed);
    size_t got = 0;
    while (got < sizeof target) {
        const ssize_t n = pread(fd, target + got, sizeof target - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            const int e = errno;
            close(fd);
            return lander__sys_fail(b->ctx, e, "read temporary file of", f->landed);
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (got != f->size || got == 0 || got > INGEST_LANDER_LINK_MAX)
        return ingest__fail(b->ctx, INGEST_EIO, "lander: file %s: temporary file of %zu bytes, expected %llu",
                            f->path, got, (unsigned long long)f->size);
    if (memchr(target, '\0', got) != NULL)
        return ingest__fail(b->ctx, INGEST_EINVAL,
                            "lander: file %s: a symlink whose target holds a NUL byte cannot be made", f->path);
    target[got] = '\0';
    lander__tmp_link_name(b, i, ln, sizeof ln);
    (void)unlinkat(b->dirfd, ln, 0); /* left by an earlier try of this batch */
    if (symlinkat(target, b->dirfd, ln) < 0)
        return lander__sys_fail(b->ctx, errno, "create the symlink of", f->landed);
    f->linked = true;
    int64_t sec = f->mtime_ns / 1000000000, ns = f->mtime_ns % 1000000000;
    if (ns < 0) { /* floor, for times before 1970 */
        sec -= 1;
        ns += 1000000000;
    }
    struct timespec ts[2];
    ts[0].tv_sec = ts[1].tv_sec = (time_t)sec;
    ts[0].tv_nsec = ts[1].tv_nsec = (long)ns;
    if (utimensat(b->dirfd, ln, ts, AT_SYMLINK_NOFOLLOW) < 0)
        return lander__sys_fail(b->ctx, errno, "set the mtime of the symlink of", f->landed);
    if (unlinkat(b->dirfd, tn, 0) < 0)
        return lander__sys_fail(b->ctx, errno, "remove the temporary file of", f->landed);
    struct stat sb;
    if (fstatat(b->dirfd, ln, &sb, AT_SYMLINK_NOFOLLOW) < 0)
        return lander__sys_fail(b->ctx, errno, "stat the symlink of", f->landed);
    f->ident.dev = (uint64_t)sb.st_dev;
    f->ident.ino = (uint64_t)sb.st_ino;
    f->ident.size = (uint64_t)sb.st_size;
    f->ident.mtime_ns = f->mtime_ns;
    return 0;
}

static void note_max(atomic_uint_fast64_t *v, uint_fast64_t n)
{
    uint_fast64_t cur = atomic_load(v);
    while (cur < n && !atomic_compare_exchange_weak(v, &cur, n))
        ;
}

/* A syncfs of the bronze filesystem, numbered in the lander's count (lander_syncs.h). */
static int lander_syncfs(ingest_lander_batch *b)
{
    ingest__syncs *sy = b->l->syncs;
    const uint_fast64_t n = atomic_fetch_add(&sy->started, 1) + 1;
    if (syncfs(b->l->rootfd) < 0) {
        const int e = errno;
        atomic_store(&sy->failed, true);
        return lander__sys_fail(b->ctx, e, "syncfs", b->l->root);
    }
    note_max(&sy->done, n);
    b->stats.syncs++;
    return 0;
}

/*
 * Did a syncfs that began after b's files were all written (commit_prepare)
 * return 0?  It wrote their data, typically the second syncfs of the batch
 * before, made while this one waited its turn.  Never once a syncfs failed
 * (a writeback error is reported once per open file, maybe to another).
 */
static bool data_synced(const ingest_lander_batch *b)
{
    const ingest__syncs *sy = b->l->syncs;
    return !atomic_load(&sy->failed) && atomic_load(&sy->done) > b->syncs_seen;
}

/* Make b->dirfd the directory file i's data is in now (dir: its final one). */
static int enter_data_dir(ingest_lander_batch *b, uint32_t i, const char *dir)
{
    char ddir[LANDED_MAX];
    lander__data_dir(b, i, dir, ddir, sizeof ddir);
    return lander__enter_dir(b, b->files[i].path, ddir, false);
}

/*
 * Commit step 1, run with the caller's lock released: every file's data
 * on disk under its temporary name, and its identity (recorded in the
 * index; read from the open file when it was finished).  Few files, or not
 * all on the bronze root's filesystem: an fsync per file (and per
 * directory in step 3).  A batch of many files on one filesystem: one
 * syncfs(), which writes out every file's data (the flusher writes the
 * small files together: they started no writeback of their own) and makes
 * it durable before any rename; the syncfs of step 3 then commits the
 * final names and the manifest.  A rename can reach the journal before
 * that second syncfs (another fsync on the filesystem, the journal's
 * timer) but only after the data it names is durable.  syncfs reports the
 * writeback errors of the filesystem since Linux 5.8.  That first syncfs
 * is left out when one begun after the batch's last write returned 0
 * (data_synced): when the committer is behind, the second syncfs of the
 * batch before it wrote this one's data.  Touches only the batch and its
 * files.
 */
static int sync_temps(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    struct stat rs;
    if (fstat(l->rootfd, &rs) < 0)
        return lander__sys_fail(b->ctx, errno, "stat", l->root);
    bool use_syncfs = b->nfiles >= INGEST_LANDER_SYNCFS_MIN;
    const lander_mark now = lander__sweep_mark(l->rootfd);
    const bool swept = now.ino != b->sweep_mark.ino || now.ctime_ns != b->sweep_mark.ctime_ns;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (f->refused != NULL)
            continue;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        lander__data_name(b, name, i, tn, sizeof tn);
        /* After a sweep since the batch began (a peer's crash sweep of a shared tree: lander__sweep_mark),
         * a file in a stage (a new directory, put in place whole in step 2, not file by file), and after a
         * directory was made again (lander__reenter_land_dir: removed, perhaps with files of the batch in
         * it) any file, is looked at, and one gone fails the batch: files can go from a stage that stays
         * (the sweep's rmdir of the stage losing to a file made meanwhile), and a stage put in place
         * without them would be acknowledged.  A file outside a stage is found gone by its rename. */
        if (!f->ident_set || f->link || f->append || (swept && f->stage != 0) || b->stats.dirs_remade > 0) {
            INGEST__FORWARD(enter_data_dir(b, i, dir));
            struct stat sb;
            if (fstatat(b->dirfd, tn, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT && f->ident_set)
                    return ingest__fail(b->ctx, INGEST_EIO,
                                        "lander: batch %s: the temporary file of %s is gone (removed from bronze "
                                        "under the batch, perhaps with its directory); the batch fails",
                                        b->name, f->landed);
                return lander__sys_fail(b->ctx, errno, "stat temporary file of", f->landed);
            }
            lander__ident_of(f, &sb);
        }
        if (f->ident.dev != (uint64_t)rs.st_dev)
            use_syncfs = false;
    }
    b->syncfs = use_syncfs;
    if (use_syncfs) {
        /* every file's data durable before any rename: one syncfs, the flusher writing the files together */
        for (uint32_t i = 0; i < b->nfiles; i++) {
            lfile *f = &b->files[i];
            if (f->refused != NULL || !f->link)
                continue;
            lander__split_path(f->landed, dir, sizeof dir, &name);
            lander__data_name(b, name, i, tn, sizeof tn);
            INGEST__FORWARD(enter_data_dir(b, i, dir));
            INGEST__FORWARD(make_link(b, i, tn));
        }
        /* the landed versions the renames will replace, kept (lander_undo.c): durable with the syncfs, or with
         * an fsync of their directories when the data is durable already */
        const bool synced = data_synced(b);
        INGEST__FORWARD(lander__old_keep(b, synced));
        return synced ? 0 : lander_syncfs(b);
    }
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (f->refused != NULL)
            continue;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        lander__data_name(b, name, i, tn, sizeof tn);
        INGEST__FORWARD(enter_data_dir(b, i, dir));
        if (f->link) {
            /* durable with its directory (the directory fsyncs of step 3, or the syncfs) */
            INGEST__FORWARD(make_link(b, i, tn));
            continue;
        }
        const int fd = openat(b->dirfd, tn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return lander__sys_fail(b->ctx, errno, "open temporary file of", f->landed);
        const int r = use_syncfs ? sync_file_range(fd, 0, 0,
                                                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                                        SYNC_FILE_RANGE_WAIT_AFTER)
                                 : fsync(fd);
        const int e = errno;
        close(fd);
        if (r < 0)
            return lander__sys_fail(b->ctx, e, use_syncfs ? "write out" : "fsync", f->landed);
        if (!use_syncfs)
            b->stats.syncs++;
    }
    return lander__old_keep(b, true); /* (each backup's directory fsynced) */
}

/*
 * Commit step 2, under the caller's lock: each file's version (the path's
 * counter + 1) is read, stored and the file renamed over its final name,
 * in one locked step, so a batch landing the same path later gets the next
 * version and renames after us: the newest version is the one left in
 * place.  The counter is stored before the rename: a rename that fails
 * leaves a gap in the numbers, never a landed version without a record
 * (in a store that defers the index's writes, until a crash: see
 * docs/landing.md).
 * commit_now: commit the store before the caller's lock is released (see
 * settle).
 */
/* Make b->sdirfd the directory dir (cached by name): where a merged stage's file is moved from. */
static int enter_src_dir(ingest_lander_batch *b, const lfile *f, const char *dir)
{
    if (b->sdirfd >= 0 && b->s_dir && strcmp(b->s_dir, dir) == 0)
        return 0;
    lander__close_fd(&b->sdirfd);
    ingest__free(b->ctx, b->s_dir);
    b->s_dir = NULL;
    INGEST__FORWARD(lander__walk_dir(b, f->path, dir, false, &b->sdirfd));
    if (b->sdirfd < 0)
        return ingest__fail(b->ctx, INGEST_EIO, "lander: file %s: staged directory %s vanished", f->path, dir);
    b->s_dir = ingest__strdup(b->ctx, dir);
    return b->s_dir ? 0 : ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
}

/* Does a file of b that lands (not refused) lie in stage s? */
static bool stage_used(const ingest_lander_batch *b, size_t s)
{
    for (uint32_t i = 0; i < b->nfiles; i++)
        if (b->files[i].stage == s + 1 && b->files[i].refused == NULL && b->files[i].created)
            return true;
    return false;
}

/* Open the parent directory of bronze-relative path p: *pfd, and *name its last component. */
static int open_parent(ingest_lander_batch *b, const char *p, int *pfd, const char **name)
{
    char parent[LANDED_MAX];
    lander__split_path(p, parent, sizeof parent, name);
    INGEST__FORWARD(lander__walk_dir(b, p, parent, false, pfd));
    if (*pfd < 0)
        return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: the directory %s vanished", b->name,
                            parent[0] ? parent : ".");
    return 0;
}

/*
 * Each stage: renamed into place whole when nothing is at its final name.
 * A directory there (made meanwhile by another batch, often the batch
 * before with the same new directory) makes it a merge: its files are
 * moved one by one.  Anything else there refuses the batch, before any
 * rename.
 */
static int check_stages(ingest_lander_batch *b)
{
    for (size_t s = 0; s < b->nstages; s++) {
        lstage *st = &b->stages[s];
        st->whole = false;
        if (st->gone || !stage_used(b, s))
            continue;
        int pfd = -1;
        const char *name;
        INGEST__FORWARD(open_parent(b, st->final, &pfd, &name));
        struct stat sb;
        const int r = fstatat(pfd, name, &sb, AT_SYMLINK_NOFOLLOW);
        const int e = errno;
        close(pfd);
        if (r < 0 && e != ENOENT)
            return lander__sys_fail(b->ctx, e, "stat the final name of directory", st->final);
        if (r < 0)
            st->whole = true;
        else if (!S_ISDIR(sb.st_mode))
            return ingest__fail(b->ctx, INGEST_EEXIST,
                                "lander: batch %s: cannot make directory %s: a %s is there (nothing of the batch was "
                                "put in place)",
                                b->name, st->final, S_ISLNK(sb.st_mode) ? "symlink" : "file");
    }
    return 0;
}

/*
 * Before the first rename: every final name must be free or a regular file
 * (an earlier version).  A directory, symlink or other file there would
 * fail its rename halfway through the batch; refusing here leaves nothing
 * of the batch under a final name.  The files of a stage put in place
 * whole are new (their directory was not there).
 */
static int check_final_names(ingest_lander_batch *b)
{
    char dir[LANDED_MAX];
    const char *name;
    INGEST__FORWARD(check_stages(b));
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (f->refused != NULL)
            continue;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        if (f->stage != 0) {
            bool missing = false;
            if (!b->stages[f->stage - 1].whole)
                INGEST__FORWARD(lander__enter_dir_found(b, f->path, dir, &missing));
            if (b->stages[f->stage - 1].whole || missing) {
                f->fresh = true;
                continue;
            }
        } else {
            INGEST__FORWARD(lander__enter_dir(b, f->path, dir, false));
        }
        struct stat sb;
        if (fstatat(b->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT)
                return lander__sys_fail(b->ctx, errno, "stat the final name of", f->landed);
            if (f->append) /* its bytes went into a file no name holds now: not landed */
                return ingest__fail(b->ctx, INGEST_EEXIST,
                                    "lander: file %s: %s was removed or moved away while batch %s appended to it "
                                    "(nothing of the batch was put in place)",
                                    f->path, f->landed, b->name);
            f->fresh = true;
            continue;
        }
        f->fresh = false;
        if (f->append && ((uint64_t)sb.st_dev != f->app_dev || (uint64_t)sb.st_ino != f->app_ino))
            return ingest__fail(b->ctx, INGEST_EEXIST,
                                "lander: file %s: %s was replaced while batch %s appended to it (nothing of the "
                                "batch was put in place)",
                                f->path, f->landed, b->name);
        /* an earlier version: a file, or a symlink landed as one (rename replaces it, never follows it) */
        if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
            return ingest__fail(b->ctx, INGEST_EEXIST,
                                "lander: file %s: cannot land at %s: a %s is there (nothing of batch %s was put in "
                                "place)",
                                f->path, f->landed, S_ISDIR(sb.st_mode) ? "directory" : "special file", b->name);
    }
    return 0;
}

/*
 * Rename directory from to to (bronze-relative, one parent), never over
 * anything there.  With taken: a directory at to (EEXIST, ENOTEMPTY) sets
 * *taken and returns 0, nothing renamed.
 */
static int rename_dir(ingest_lander_batch *b, const char *from, const char *to, bool *taken)
{
    int pfd = -1;
    const char *fname, *tname;
    char fparent[LANDED_MAX], tparent[LANDED_MAX];
    lander__split_path(from, fparent, sizeof fparent, &fname);
    lander__split_path(to, tparent, sizeof tparent, &tname);
    if (strcmp(fparent, tparent) != 0)
        return ingest__fail(b->ctx, INGEST_EINVAL, "lander: %s and %s differ in their directory", from, to);
    INGEST__FORWARD(open_parent(b, to, &pfd, &tname));
    int r = renameat2(pfd, fname, pfd, tname, RENAME_NOREPLACE);
    if (r < 0 && errno == EINVAL) /* a filesystem without RENAME_NOREPLACE: the name was checked free */
        r = renameat(pfd, fname, pfd, tname);
    const int e = errno;
    struct stat sb;
    if (r < 0 && taken != NULL && (e == EEXIST || e == ENOTEMPTY) &&
        fstatat(pfd, tname, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode)) {
        close(pfd);
        *taken = true;
        return 0;
    }
    close(pfd);
    return r < 0 ? lander__sys_fail(b->ctx, e, "rename into place the directory", to) : 0;
}

/* The directories to fsync (step 3) under from now lie under to. */
static int move_dirs(ingest_lander_batch *b, const char *from, const char *to)
{
    const size_t fl = strlen(from);
    for (size_t i = 0; i < b->ndirs; i++) {
        const char *d = b->dirs[i];
        if (strncmp(d, from, fl) != 0 || (d[fl] != '\0' && d[fl] != '/'))
            continue;
        char nd[LANDED_MAX];
        snprintf(nd, sizeof nd, "%s%s", to, d + fl);
        char *c = ingest__strdup(b->ctx, nd);
        if (!c)
            return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
        ingest__free(b->ctx, b->dirs[i]);
        b->dirs[i] = c;
    }
    return 0;
}

/*
 * Put stage st in place whole: one rename of its directory.  Its final
 * name, free when check_stages looked, can be taken since: a batch landing
 * meanwhile made the directory for files of its own (a batch of few files
 * lands in its final directories, made as it goes, without the lock the
 * commit holds).  The stage is then merged, its files moved one by one, as
 * if check_stages had found the directory there (st->whole false).
 */
static int place_stage(ingest_lander_batch *b, lstage *st)
{
    bool taken = false;
    INGEST__FORWARD(rename_dir(b, st->real, st->final, &taken));
    if (taken) {
        ingest__log(b->ctx, INGEST_LOG_INFO,
                    "lander: batch %s: directory %s was made by another batch while this one committed: its files "
                    "are moved into it one by one",
                    b->name, st->final);
        st->whole = false;
        return 0;
    }
    st->placed = true;
    lander__forget_dir(b); /* a cached descriptor may name a directory by a path now gone */
    return move_dirs(b, st->real, st->final);
}

/*
 * A rename failed after others succeeded (an I/O error: check_final_names
 * found every name usable): take back the files that had no earlier
 * version, so the batch leaves nothing new under a final name.  A file
 * that replaced an earlier version stays (that version is gone); the batch
 * is not acknowledged, and its replay lands it again as a newer version.
 */
static void undo_renames(ingest_lander_batch *b)
{
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    char keep[INGEST__ERRMSG_MAX];
    memcpy(keep, b->ctx->errmsg, sizeof keep);
    for (size_t s = 0; s < b->nstages; s++) {
        lstage *st = &b->stages[s];
        if (!st->placed || rename_dir(b, st->final, st->real, NULL) < 0)
            continue;
        st->placed = false;
        (void)move_dirs(b, st->final, st->real);
        for (uint32_t i = 0; i < b->nfiles; i++)
            if (b->files[i].stage == s + 1 && b->files[i].renamed && !b->files[i].append)
                b->files[i].renamed = false;
    }
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (!f->renamed)
            continue;
        if (f->append)
            continue; /* taken back with the batch (lander__app_undo) */
        lander__split_path(f->landed, dir, sizeof dir, &name);
        if (!f->fresh) {
            if (!lander__old_restore(b, i) && !f->backed)
                ingest__log(b->ctx, INGEST_LOG_WARN,
                            "lander: batch %s failed during its renames: %s stays as the newer version", b->name,
                            f->landed);
            continue;
        }
        if (f->stage != 0) {
            if (b->stages[f->stage - 1].placed)
                continue; /* its stage could not be taken back */
            char ddir[LANDED_MAX];
            lander__data_dir(b, i, dir, ddir, sizeof ddir);
            if (lander__enter_dir(b, f->path, dir, false) == 0 && enter_src_dir(b, f, ddir) == 0 &&
                renameat(b->dirfd, name, b->sdirfd, name) == 0)
                f->renamed = false;
            continue;
        }
        lander__tmp_of(b, name, i, tn, sizeof tn);
        if (lander__enter_dir(b, f->path, dir, false) == 0 && renameat(b->dirfd, name, b->dirfd, tn) == 0)
            f->renamed = false; /* a temporary again: removed with the others */
    }
    memcpy(b->ctx->errmsg, keep, sizeof keep);
}

static int place_files(ingest_lander_batch *b, bool commit_now)
{
    ingest_lander *l = b->l;
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    INGEST__FORWARD(versions_db(l));
    INGEST__FORWARD(check_final_names(b));
    lander__hook(b, INGEST__LANDER_HOOK_PLACE);
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (f->refused != NULL)
            continue; /* no version, no final name */
        uint8_t v[8];
        size_t vl = 0;
        uint8_t key[INGEST__PATH_KEY_MAX];
        const size_t kl = ingest__landed_key(f->landed, key);
        int r = ingest__store_get(l->st, l->vdb, key, kl, v, sizeof v, &vl);
        if (r < 0 && r != INGEST_ENOTFOUND) {
            r = lander__store_fail(b, r, "read the version of", f->landed);
            goto fail;
        }
        f->version = (r == 0 && vl == 8) ? ingest__get_u64(v) + 1 : 1;
        ingest__put_u64(v, f->version);
        b->wrote = true;
        if ((r = ingest__store_put(l->st, l->vdb, key, kl, v, sizeof v)) < 0) {
            r = lander__store_fail(b, r, "store the version of", f->landed);
            goto fail;
        }
        if (f->append) {
            f->renamed = true; /* already in place: its directory entry never changed */
            continue;
        }
        lander__split_path(f->landed, dir, sizeof dir, &name);
        if (f->stage != 0 && b->stages[f->stage - 1].whole) {
            lstage *st = &b->stages[f->stage - 1];
            if (!st->placed && (r = place_stage(b, st)) < 0)
                goto fail;
            if (st->placed) {
                f->renamed = true; /* in place with its directory */
                continue;
            }
            /* merged after all (place_stage): moved below like the files of a stage check_stages merged */
        }
        lander__tmp_of(b, name, i, tn, sizeof tn); /* in a merged stage: its final name there */
        int from;
        if (f->stage != 0) {
            /* a merged stage: from its place in the stage to its final directory (made if missing) */
            char ddir[LANDED_MAX];
            lander__data_dir(b, i, dir, ddir, sizeof ddir);
            if ((r = enter_src_dir(b, f, ddir)) < 0 || (r = lander__enter_dir(b, f->path, dir, true)) < 0)
                goto fail;
            from = b->sdirfd;
        } else {
            if ((r = lander__enter_dir(b, f->path, dir, false)) < 0)
                goto fail;
            from = b->dirfd;
        }
        if (!f->fresh && (r = lander__old_check(b, i, name)) < 0)
            goto fail;
        if (renameat(from, tn, b->dirfd, name) < 0) {
            r = lander__sys_fail(b->ctx, errno, "rename into place", f->landed);
            goto fail;
        }
        f->renamed = true;
        continue;
    fail:
        undo_renames(b);
        return r;
    }
    return commit_now ? lander__settle(b, 0) : 0;
}

/*
 * Commit step 3, run with the caller's lock released.  With fsyncs: every
 * directory the files were renamed into once (their final names durable),
 * then the batch manifest (written, fsynced, renamed) and its directory.
 * In that order: a manifest made durable before the names it lists could
 * survive a power cut that took those names, and the receiver would then
 * take a replay of the batch for landed and acknowledge it.  With one
 * syncfs: the manifest, then the syncfs, which makes the names and the
 * manifest durable at once.  Touches only the batch and its files.
 */
static int sync_landed(ingest_lander_batch *b)
{
    if (!b->syncfs)
        INGEST__FORWARD(sync_dirs(b, 0));
    const size_t landed_dirs = b->ndirs; /* (after the parents sync_dirs added: synced already) */
    INGEST__FORWARD(write_manifest(b));
    /* the manifest in place records the appended sizes: appends are never taken back from here on */
    for (uint32_t i = 0; i < b->nfiles; i++)
        b->files[i].app_done = b->files[i].append;
    lander__close_fd(&b->dirfd);
    if (b->syncfs)
        return lander_syncfs(b);
    return sync_dirs(b, landed_dirs); /* the manifest's directory (and any made for it) */
}

/*
 * Commit step 4, under the caller's lock: the index (files, chunks at their
 * new place: first occurrences, copied chunks re-pointed at the newest
 * copy), the batch mark, the store commit.  A file whose path a later batch
 * landed again since step 2 (its counter is past our version) was replaced
 * on disk: it is not indexed, lest its record replace the newer file's.
 */
/* Is file i's data indexed by index_batch?  Not a refused file's (no final name), nor a symlink's. */
static bool file_indexed(const lfile *f) { return f->refused == NULL && !f->link; }


static int index_batch(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    if (l->test_fail_index)
        return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: the index cannot be updated (a test's fault)",
                            b->name);
    b->wrote = true;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (!file_indexed(f))
            continue; /* refused: nothing of it stays; a symlink is no source of chunks (reading it would follow it) */
        uint8_t v[8];
        size_t vl = 0;
        uint8_t key[INGEST__PATH_KEY_MAX];
        const int r = ingest__store_get(l->st, l->vdb, key, ingest__landed_key(f->landed, key), v, sizeof v, &vl);
        if (r < 0 && r != INGEST_ENOTFOUND)
            return lander__store_fail(b, r, "read the version of", f->landed);
        if (r == 0 && vl == 8 && ingest__get_u64(v) > f->version) {
            ingest__log(b->ctx, INGEST_LOG_INFO,
                        "lander: batch %s: %s version %llu was replaced by version %llu before it was indexed",
                        b->name, f->landed, (unsigned long long)f->version,
                        (unsigned long long)ingest__get_u64(v));
            continue;
        }
        uint64_t file_no = 0;
        INGEST__FORWARD(ingest_index_add_file(l->idx, f->landed, &f->ident, &file_no));
        for (uint32_t k = f->first; k < f->first + f->nchunks; k++) {
            /* a repeat is indexed where it first occurs, unless that is in a file left out */
            if ((b->cst[k] & K_MASK) == K_DUP && file_indexed(&b->files[lander__file_of_chunk(b, b->src[k])]))
                continue;
            const ingest_chunk_loc loc = {file_no, b->pos[k], b->mc[k].len};
            INGEST__FORWARD(ingest_index_add_chunk_for(l->idx, b->device, b->mc[k].id, &loc));
        }
    }
    INGEST__FORWARD(ingest_index_batch_mark(l->idx, b->device, b->name));
    lander__inflight_release(b, true); /* indexed: later batches find them there now */
    lander__app_release(b, true);
    return lander__settle(b, 0);
}

static void lk_unlock(const ingest_lander_lock *lk)
{
    if (lk)
        lk->unlock(lk->ud);
}

static void lk_lock(const ingest_lander_lock *lk)
{
    if (lk)
        lk->lock(lk->ud);
}

/*
 * With the caller's lock (lk): called and returns with it held, drops it
 * around the disk waits.  With the lander's own lock: called without it,
 * takes it around steps 2 and 4 only.
 */
static int do_commit(ingest_lander_batch *b, const ingest_lander_lock *lk)
{
    lk_unlock(lk);
    int rc = sync_temps(b);
    lk_lock(lk);
    if (rc < 0)
        return rc;
    lander__enter(b->l);
    rc = lander__leave(b, place_files(b, lk != NULL));
    if (rc < 0)
        return rc;
    lk_unlock(lk);
    lander__hook(b, INGEST__LANDER_HOOK_PLACED);
    rc = sync_landed(b);
    if (rc == 0 && b->l->catalog != NULL) /* the manifest is durable; the catalog locks itself */
        (void)ingest_catalog_add_batch_later(b->l->catalog, b->device, b->name); /* queued when it has an adder */
    lk_lock(lk);
    if (rc < 0)
        return rc;
    lander__enter(b->l);
    return lander__leave(b, index_batch(b));
}

/*
 * A batch with pushed chunks: the hashes its files landed with are those
 * the device's digest covers (the ids were taken from the bytes that came,
 * so this is the end-to-end check a listed id gives).  Not checkable when
 * a pushed file was withdrawn (its bytes never came).
 */
static int check_digest(ingest_lander_batch *b)
{
    if (b->npushed == 0)
        return 0;
    ingest_filehash dg;
    ingest_filehash_init(&dg, b->l->key);
    for (uint32_t i = 0; i < b->nfiles; i++) {
        if (b->files[i].hash_late)
            return 0;
        ingest_manifest_digest_add(&dg, b->files[i].path, b->files[i].hash);
    }
    uint8_t d[INGEST_ID_BYTES];
    ingest_filehash_final(&dg, d);
    if (sodium_memcmp(d, b->digest, sizeof d) != 0)
        return ingest__fail(b->ctx, INGEST_EMISMATCH,
                            "lander: batch %s: the files' hashes do not match the manifest's digest (a pushed chunk "
                            "came with other bytes than the device hashed)", b->name);
    return 0;
}

int ingest_lander_commit_prepare(ingest_lander_batch *b)
{
    if (b && b->state == B_PREPARED)
        return 0;
    if (!b || b->state != B_ACTIVE)
        return b ? lander__bad_state(b) : INGEST_EINVAL;
    int rc = lander__settle(b, lander__pump(b));
    if (rc == 0 && b->awaited == 0 && b->cur_file < b->nfiles)
        rc = lander__settle(b, lander__peer_wait(b));
    if (rc < 0)
        return lander__fail_batch(b, rc);
    if (b->awaited > 0 || b->cur_file < b->nfiles)
        return ingest__fail(b->ctx, INGEST_EBUSY, "lander: batch %s: %u chunks still awaited (%zu re-wanted)",
                            b->name, b->awaited, b->nrew);
    lander__dw_stop(b); /* idle: every file was finished */
    if ((rc = lander__sf_wait(b)) < 0) /* the small files handed over: landed, their identities read */
        return lander__fail_batch(b, rc);
    lander__sf_stop(b);
    if ((rc = check_digest(b)) < 0)
        return lander__fail_batch(b, rc);
    /* nothing more is read: release the sources and the chunk buffers now */
    lander__close_fd(&b->srcfd);
    b->src_no = UINT64_MAX;
    lander__close_fd(&b->run_fd);
    lander__close_fd(&b->spillfd);
    ingest__free(b->ctx, b->rbuf);
    ingest__free(b->ctx, b->cbuf);
    b->rbuf = b->cbuf = NULL;
    b->inbuf = NULL;
    b->bufcap = 0;
    b->syncs_seen = atomic_load(&b->l->syncs->started); /* every file is written: a syncfs begun later covers them */
    b->state = B_PREPARED;
    return 0;
}

int ingest_lander_commit_finish(ingest_lander_batch *b, const ingest_lander_lock *lk)
{
    if (!b)
        return INGEST_EINVAL;
    if (b->state != B_PREPARED)
        return lander__bad_state(b);
    if (lk && (!lk->lock || !lk->unlock))
        return ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch %s: lock without its callbacks", b->name);
    if (lk && b->l->own_lock)
        return ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch %s: the lander takes its own lock", b->name);
    const int rc = lander__settle(b, do_commit(b, lk));
    lander__close_fd(&b->dirfd);
    if (rc < 0)
        return lander__fail_batch(b, rc);
    b->state = B_COMMITTED;
    lander__app_finished(b);
    lander__old_done(b); /* the manifest lists the new versions: the landed ones kept for an undo go */
    lander__close_fd(&b->sdirfd);
    for (size_t s = 0; s < b->nstages; s++)
        if (!b->stages[s].placed)
            lander__remove_stage_dirs(b, s); /* merged (or left empty): its files were moved out */
    if (b->nrefused > 0)
        lander__remove_temps(b); /* the refused files' scratch copies: every other file was renamed */
    ingest__log(b->ctx, INGEST_LOG_INFO, "lander: batch %s of %s landed: %u files, %llu bytes%s", b->name, b->device,
                b->nfiles - b->nrefused, (unsigned long long)b->stats.bytes, b->nrefused ? " (files refused)" : "");
    return 0;
}

int ingest_lander_commit(ingest_lander_batch *b)
{
    const int rc = ingest_lander_commit_prepare(b);
    return rc < 0 ? rc : ingest_lander_commit_finish(b, NULL);
}

void ingest__lander_set_fail_index(ingest_lander *l, int on)
{
    if (l != NULL)
        l->test_fail_index = on != 0;
}
