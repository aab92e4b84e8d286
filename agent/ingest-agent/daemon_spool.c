/* The edge daemon's spool copies and after-ship actions (daemon_int.h). */
#include "daemon_int.h"
#include "../common/fsmove.h"

/* ---- spool ------------------------------------------------------------------ */

static int mkdirs(char *p);

/* Bytes and files under dirfd/name (a directory or a file); removed when rm. */
static void tree_walk(int at, const char *name, int rm, uint64_t *bytes, uint64_t *files)
{
    struct stat st;
    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        const int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
        if (dir == NULL) {
            if (fd >= 0)
                close(fd);
            return;
        }
        struct dirent *e;
        while ((e = readdir(dir)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                tree_walk(dirfd(dir), e->d_name, rm, bytes, files);
        closedir(dir);
        if (rm && unlinkat(at, name, AT_REMOVEDIR) != 0)
            prog_log(INGEST_LOG_WARN, "spool: cannot remove directory %s: %s", prog_esc(name), strerror(errno));
        return;
    }
    if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) { /* a spooled symlink counts its target */
        *bytes += (uint64_t)st.st_size;
        *files += 1;
    }
    if (rm && unlinkat(at, name, 0) != 0)
        prog_log(INGEST_LOG_WARN, "spool: cannot remove %s: %s", prog_esc(name), strerror(errno));
}

void dmn_spool_resume_check(daemon_t *d)
{
    if (d->spool_full && d->spool_bytes < d->spool_quota) {
        prog_log(INGEST_LOG_INFO, "spool backpressure off: %llu of %llu bytes in use",
                 (unsigned long long)d->spool_bytes, (unsigned long long)d->spool_quota);
        d->spool_full = 0;
        dmn_schedule_scan(d, d->now);
    }
}

/* Remove the spool copies of batch seq (acked, dropped or never journaled). */
void dmn_spool_drop(daemon_t *d, uint64_t seq)
{
    char name[32];
    snprintf(name, sizeof(name), "%llu", (unsigned long long)seq);
    const int dfd = open(d->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    uint64_t bytes = 0, files = 0;
    tree_walk(dfd, name, 1, &bytes, &files);
    close(dfd);
    d->spool_bytes = d->spool_bytes > bytes ? d->spool_bytes - bytes : 0;
    d->spool_files = d->spool_files > files ? d->spool_files - files : 0;
    dmn_spool_resume_check(d);
}

/*
 * At start: make the spool directory, remove what belongs to no journaled
 * batch (copies made for a batch that was never journaled before a crash)
 * and count the rest against the quota.
 */
int dmn_spool_init(daemon_t *d)
{
    snprintf(d->spool_dir, sizeof(d->spool_dir), "%s/spool", d->a->cfg->state_dir);
    if (mkdir(d->spool_dir, 0700) != 0 && errno != EEXIST) {
        prog_log(INGEST_LOG_ERROR, "spool %s: %s", d->spool_dir, strerror(errno));
        return -1;
    }
    const int dfd = open(d->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (dir == NULL) {
        prog_log(INGEST_LOG_ERROR, "spool %s: %s", d->spool_dir, strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *end = NULL;
        const unsigned long long seq = strtoull(e->d_name, &end, 10);
        ingest_journal_batch *jb = NULL;
        const int known = seq > 0 && end != NULL && *end == '\0' && ingest_journal_get(d->j, seq, &jb) == 0;
        ingest_journal_batch_free(d->j, jb);
        uint64_t bytes = 0, files = 0;
        tree_walk(dirfd(dir), e->d_name, !known, &bytes, &files);
        if (known) {
            d->spool_bytes += bytes;
            d->spool_files += files;
        } else {
            prog_log(INGEST_LOG_INFO, "spool: removed %s (no journaled batch): %llu files, %llu bytes", e->d_name,
                     (unsigned long long)files, (unsigned long long)bytes);
        }
    }
    closedir(dir);
    return 0;
}

static int same_version(const struct stat *st, const ingest_sender_stat *w)
{
    return (uint64_t)st->st_size == w->size &&
           (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec == w->mtime_ns &&
           (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec == w->ctime_ns;
}

/*
 * The spool copy of a symlink (symlinks: ship): a symlink with the same
 * target (readlink, never followed) and mtime.  Returns as dmn_spool_copy.
 */
static int spool_copy_link(daemon_t *d, const char *src, char *dst, const ingest_sender_stat *st)
{
    char target[INGEST_SENDER_LINK_MAX + 1];
    struct stat a, b;
    if (lstat(src, &a) != 0 || !S_ISLNK(a.st_mode) || !same_version(&a, st))
        return 1;
    const ssize_t n = readlink(src, target, sizeof(target));
    if (n < 0)
        return errno == ENOENT || errno == EINVAL ? 1 : -1;
    if ((size_t)n > INGEST_SENDER_LINK_MAX || lstat(src, &b) != 0 || !same_version(&b, st) ||
        (uint64_t)n != st->size)
        return 1; /* changed meanwhile (or unshippable: the walk of the spool reports it) */
    target[n] = '\0';
    if (mkdirs(dst) != 0) {
        prog_log(INGEST_LOG_WARN, "spool: %s: %s", prog_esc(dst), strerror(errno));
        return -1;
    }
    (void)unlink(dst); /* a copy left by an earlier try */
    const struct timespec times[2] = { a.st_atim, a.st_mtim };
    if (symlink(target, dst) != 0 || utimensat(AT_FDCWD, dst, times, AT_SYMLINK_NOFOLLOW) != 0) {
        prog_log(INGEST_LOG_WARN, "spool: copying the symlink %s to %s: %s", prog_esc(src), prog_esc(dst),
                 strerror(errno));
        (void)unlink(dst);
        return -1;
    }
    d->spool_bytes += (uint64_t)n;
    d->spool_files++;
    return 0;
}

/*
 * Copy source file rel (the version st) into the spool of batch seq, with
 * its mtime and permission bits, and fsync it.  0 copied; 1 the file
 * changed or vanished meanwhile (not taken: the next walk sees it again);
 * -1 a local failure (logged; not taken).
 */
int dmn_spool_copy(daemon_t *d, uint64_t seq, const dsource *s, const char *rel, const ingest_sender_stat *st)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if ((size_t)snprintf(src, sizeof(src), "%s/%s", s->path, rel) >= sizeof(src) ||
        (size_t)snprintf(dst, sizeof(dst), "%s/%llu/%s/%s", d->spool_dir, (unsigned long long)seq, s->name, rel) >=
            sizeof(dst)) {
        prog_log(INGEST_LOG_WARN, "spool: path too long for %s/%s", s->name, prog_esc(rel));
        return -1;
    }
    struct stat ls;
    if (lstat(src, &ls) != 0)
        return errno == ENOENT ? 1 : -1;
    if (S_ISLNK(ls.st_mode)) /* a source with symlinks: ship: the link is spooled as a link, never followed */
        return spool_copy_link(d, src, dst, st);
    const int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (in < 0)
        return errno == ENOENT ? 1 : -1;
    struct stat a, b;
    int rc = -1, out = -1;
    char *buf = NULL;
    if (fstat(in, &a) != 0 || !S_ISREG(a.st_mode) || !same_version(&a, st)) {
        rc = 1;
        goto done;
    }
    if (mkdirs(dst) != 0 || (buf = malloc(1u << 20)) == NULL) {
        prog_log(INGEST_LOG_WARN, "spool: %s: %s", prog_esc(dst), strerror(errno));
        goto done;
    }
    out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
        prog_log(INGEST_LOG_WARN, "spool: %s: %s", prog_esc(dst), strerror(errno));
        goto done;
    }
    uint64_t total = 0;
    for (;;) {
        const ssize_t n = read(in, buf, 1u << 20);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto io_error;
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            const ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                goto io_error;
            off += w;
        }
        total += (uint64_t)n;
    }
    if (fstat(in, &b) != 0 || !same_version(&b, st) || total != st->size) {
        rc = 1; /* changed while copied */
        goto done;
    }
    const struct timespec times[2] = { a.st_atim, a.st_mtim };
    if (fchmod(out, (a.st_mode & 0777) | 0400) != 0 || futimens(out, times) != 0 || fsync(out) != 0)
        goto io_error;
    rc = 0;
    d->spool_bytes += total;
    d->spool_files++;
    goto done;
io_error:
    prog_log(INGEST_LOG_WARN, "spool: copying %s to %s: %s", prog_esc(src), prog_esc(dst), strerror(errno));
done:
    if (out >= 0) {
        close(out);
        if (rc != 0)
            unlink(dst);
    }
    close(in);
    free(buf);
    return rc;
}

/* ---- after-ship ------------------------------------------------------------- */

static int mkdirs(char *p)
{
    for (char *q = p + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        const int r = mkdir(p, 0755);
        *q = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    return 0;
}

/* The acked batches whose deferred after-ship actions were logged: each is said once. */
static int defer_logged(const daemon_t *d, uint64_t seq)
{
    for (size_t i = 0; i < d->ndefer; i++)
        if (d->defer_seq[i] == seq)
            return 1;
    return 0;
}

static void defer_log_add(daemon_t *d, uint64_t seq)
{
    if (d->ndefer == d->capdefer) {
        const size_t nc = d->capdefer ? d->capdefer * 2 : 16;
        uint64_t *n = realloc(d->defer_seq, nc * sizeof(*n));
        if (n == NULL)
            return; /* it is only said again */
        d->defer_seq = n;
        d->capdefer = nc;
    }
    d->defer_seq[d->ndefer++] = seq;
}

void dmn_defer_log_drop(daemon_t *d, uint64_t seq)
{
    for (size_t i = 0; i < d->ndefer; i++)
        if (d->defer_seq[i] == seq) {
            d->defer_seq[i] = d->defer_seq[--d->ndefer];
            return;
        }
}

/* st is the version f shipped (an inode of 0 in f is unknown).  A symlink never is: after_ship leaves
 * shipped symlinks (symlinks: ship) where they are. */
static int is_shipped_version(const struct stat *st, const ingest_journal_file *f)
{
    return S_ISREG(st->st_mode) && (uint64_t)st->st_size == f->size &&
           (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec == f->mtime_ns &&
           (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec == f->ctime_ns &&
           (f->ino == 0 || (uint64_t)st->st_ino == f->ino);
}

/*
 * Delete or move (s->after) the acked file rel of source s, when it is
 * still the version shipped (f) and no other process has it open.
 * Returns 1 when it was left for later because some process holds it open
 * (logged unless quiet), else 0 (done, or nothing to do: gone, or a newer
 * version, which ships in its turn).
 *
 * "Nobody has it open" is a write lease (F_SETLEASE F_WRLCK on a read-only
 * descriptor): the kernel grants it only while no other open file
 * description of the file exists, in any process, so a writer that paused
 * with its file open keeps it from being deleted under it.  Under the lease
 * the file is checked again (the version shipped, and still the one at
 * this path) before it goes.  Where the lease cannot be taken at all
 * (EINVAL: the filesystem has no leases; EACCES: the agent neither owns the
 * file nor has CAP_LEASE) the action runs without that check, as it always
 * did, and a warning says so once (docs/operations.md).
 */
static int release_file(daemon_t *d, const dsource *s, const char *rel, const ingest_journal_file *f, int quiet)
{
    const char *what = s->after == AFTER_DELETE ? "delete" : "move";
    char full[PATH_MAX];
    struct stat st, at;
    ingest_file_state fs;
    if (ingest_filetable_get(d->a->state.ft, f->path, &fs) == 0 && fs.dev == INGEST_FILE_STATE_REFUSED)
        return 0; /* the core refused this version: it never landed, so it stays */
    if ((size_t)snprintf(full, sizeof(full), "%s/%s", s->path, rel) >= sizeof(full))
        return 0;
    if (lstat(full, &st) != 0 || !is_shipped_version(&st, f))
        return 0; /* gone, or a newer version: leave it */
    const int fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 && (errno == ENOENT || errno == ELOOP))
        return 0; /* gone, or replaced by a symlink, since */
    int leased = 0;
    if (fd >= 0 && fcntl(fd, F_SETLEASE, F_WRLCK) == 0) {
        leased = 1;
    } else if (fd >= 0 ? errno == EAGAIN : errno == EWOULDBLOCK) {
        /* open elsewhere (or another process holds a lease on it) */
        if (fd >= 0)
            close(fd);
        if (!quiet)
            prog_log(INGEST_LOG_INFO,
                     "after_ship %s of %s deferred: another process still has it open (a writer may not be done "
                     "with it); retried every second until it is closed",
                     what, prog_esc(full));
        return 1;
    } else if (!d->lease_warned) {
        d->lease_warned = 1;
        prog_log(INGEST_LOG_WARN,
                 "after_ship: cannot tell whether %s is still open in another process (%s: %s); acked files are "
                 "%s without that check, and a writer still holding one open loses what it writes next "
                 "(docs/operations.md)",
                 prog_esc(full), fd >= 0 ? "F_SETLEASE" : "open", strerror(errno),
                 s->after == AFTER_DELETE ? "deleted" : "moved");
    }
    /* (under the lease) still the version shipped, still at this path */
    const int same = (fd < 0 || (fstat(fd, &st) == 0 && is_shipped_version(&st, f))) && lstat(full, &at) == 0 &&
                     at.st_dev == st.st_dev && at.st_ino == st.st_ino && is_shipped_version(&at, f);
    if (same) {
        if (s->after == AFTER_DELETE) {
            if (unlink(full) == 0) {
                d->deleted++;
                if (quiet)
                    prog_log(INGEST_LOG_INFO, "after_ship: %s deleted (no process has it open any more)",
                             prog_esc(full));
            } else {
                prog_log(INGEST_LOG_WARN, "after_ship delete %s: %s", prog_esc(full), strerror(errno));
            }
        } else {
            char dst[PATH_MAX];
            snprintf(dst, sizeof(dst), "%s/%s", s->move_dir, rel);
            if (mkdirs(dst) == 0 && prog_move_file(full, fd, dst) == 0) { /* across filesystems too */
                d->moved++;
                if (quiet)
                    prog_log(INGEST_LOG_INFO, "after_ship: %s moved to %s (no process has it open any more)",
                             prog_esc(full), prog_esc(dst));
            } else {
                prog_log(INGEST_LOG_WARN, "after_ship move %s -> %s: %s", prog_esc(full), prog_esc(dst),
                         strerror(errno));
            }
        }
    }
    if (leased)
        (void)fcntl(fd, F_SETLEASE, F_UNLCK);
    if (fd >= 0)
        close(fd);
    return 0;
}

/*
 * Apply the source's after-ship action to the acked files f[0, n) of batch
 * seq (only to files still the version shipped, and nobody has open);
 * returns how many were deferred because some process still has them open.
 * The file table entry is kept: a file put back unchanged is not shipped
 * again.
 */
size_t dmn_after_ship(daemon_t *d, uint64_t seq, const ingest_journal_file *f, size_t n)
{
    const int quiet = defer_logged(d, seq);
    size_t deferred = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rel = NULL;
        const dsource *s = dmn_source_of(d, f[i].path, &rel);
        if (s != NULL && s->after != AFTER_KEEP)
            deferred += (size_t)release_file(d, s, rel, &f[i], quiet);
    }
    if (deferred > 0 && !quiet)
        defer_log_add(d, seq);
    return deferred;
}

