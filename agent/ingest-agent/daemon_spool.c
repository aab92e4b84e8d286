/* The edge daemon's spool copies and after-ship actions (daemon_int.h). */
#include "daemon_int.h"
#include "../common/fsmove.h"

#include <sys/statvfs.h>

/* ---- spool ------------------------------------------------------------------ */

static int mkdirs(char *p, size_t sync_below);

/* The errors that mean "no room" on the state filesystem: backpressure, never a per-file warning. */
#define NO_ROOM(e) ((e) == ENOSPC || (e) == EDQUOT)

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

/*
 * Size the spool to the free space of the state filesystem: its room is
 * min(spool.quota, what it holds + the space free to the agent less a
 * reserve).  The reserve (5% of the filesystem, at most 64 MiB) keeps room
 * for the state store's commits, which must go through for batches to be
 * journaled and acknowledged.  A filesystem out of inodes has no room.
 * Where statvfs fails, the quota alone.
 */
#define FS_RESERVE_MAX (64ull << 20)
void dmn_spool_size(daemon_t *d)
{
    struct statvfs v;
    d->spool_room = d->spool_quota;
    if (statvfs(d->a->cfg->state_dir, &v) != 0) {
        d->fs_free = UINT64_MAX;
        d->fs_reserve = 0;
        return;
    }
    const uint64_t unit = v.f_frsize ? (uint64_t)v.f_frsize : (uint64_t)v.f_bsize;
    uint64_t avail = (uint64_t)v.f_bavail * unit;
    if (v.f_files != 0 && v.f_favail == 0)
        avail = 0;
    const uint64_t size = (uint64_t)v.f_blocks * unit;
    d->fs_free = avail;
    d->fs_block = v.f_bsize ? (uint64_t)v.f_bsize : unit;
    d->fs_reserve = size / 20 < FS_RESERVE_MAX ? size / 20 : FS_RESERVE_MAX;
    const uint64_t room = d->spool_bytes + (avail > d->fs_reserve ? avail - d->fs_reserve : 0);
    if (room < d->spool_room)
        d->spool_room = room;
}

/*
 * Spool backpressure goes off once the smallest file waiting for room
 * (spool_want; 0: none is) fits, and there is room at all; after an ENOSPC, only once the
 * filesystem has more free space than it had then.
 */
void dmn_spool_resume_check(daemon_t *d)
{
    dmn_spool_size(d);
    if (!d->spool_full || d->spool_bytes + d->spool_want > d->spool_room || d->spool_room <= d->spool_bytes)
        return;
    if (d->spool_nospace && d->fs_free <= d->nospace_free)
        return;
    prog_log(INGEST_LOG_INFO,
             "spool backpressure off: %llu of %llu bytes in use (spool.quota %llu, %llu bytes free on the state "
             "filesystem)",
             (unsigned long long)d->spool_bytes, (unsigned long long)d->spool_room,
             (unsigned long long)d->spool_quota, (unsigned long long)d->fs_free);
    d->spool_full = 0;
    d->spool_nospace = 0;
    dmn_schedule_scan(d, d->now);
}

/*
 * A spool copy of path (size bytes) met err (ENOSPC or EDQUOT): the spool
 * is full whatever its quota says.  Said once (not per file, not per
 * walk); the file is not taken and a later walk tries again.  Returns 2
 * (dmn_spool_copy's "no room").
 */
int dmn_spool_nospace(daemon_t *d, const char *path, uint64_t size, int err)
{
    dmn_spool_size(d);
    if (!d->spool_full)
        prog_log(INGEST_LOG_WARN,
                 "backpressure: no room on the state filesystem for the spool (%s copying %s, %llu bytes; %llu bytes "
                 "free, %llu spooled): not taking new files from spool sources until there is room",
                 strerror(err), prog_esc(path), (unsigned long long)size, (unsigned long long)d->fs_free,
                 (unsigned long long)d->spool_bytes);
    d->spool_full = 1;
    d->spool_nospace = 1;
    d->nospace_free = d->fs_free;
    if (d->spool_want == 0 || size < d->spool_want)
        d->spool_want = size;
    if (size < d->spool_want_walk)
        d->spool_want_walk = size;
    return 2;
}

/*
 * The outcome rc of a write of the state store (what: where, for the
 * log).  Out of space (ENOSPC, EDQUOT, the map full) is backpressure: said
 * once, no new files are taken, and what was not written is written again
 * by a later walk (settle records, the open batch's list) or a later ack.
 * A write that goes through with more than the reserve free on the state
 * filesystem turns it off.  Other failures are logged.  Returns rc.
 */
#define STORE_WARN_EVERY_S 600.0

void dmn_store_nospace(daemon_t *d, const char *what, const char *why)
{
    const double now = prog_now();
    if (!d->store_full && !d->store_said && (d->store_said_at == 0 || now - d->store_said_at >= STORE_WARN_EVERY_S)) {
        prog_log(INGEST_LOG_WARN,
                 "backpressure: the state store cannot be written (%s: %s): not taking new files until there "
                 "is room on the state filesystem; what was not written is written again",
                 what, why);
        d->store_said = 1;
        d->store_said_at = now;
    }
    d->store_full = 1;
}

int dmn_store_check(daemon_t *d, int rc, const char *what)
{
    if (rc == INGEST_ENOSPC) {
        dmn_store_nospace(d, what, ingest_ctx_errmsg(d->a->ctx));
        return rc;
    }
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "%s: %s", what, ingest_ctx_errmsg(d->a->ctx));
        return rc;
    }
    if (d->store_full) {
        dmn_spool_size(d);
        if (d->fs_free > d->fs_reserve) {
            if (d->store_said) /* said with its warning, not for a full store not said again */
                prog_log(INGEST_LOG_INFO, "state store backpressure off: writes go through again (%llu bytes free)",
                         (unsigned long long)d->fs_free);
            d->store_said = 0;
            d->store_full = 0;
            dmn_schedule_scan(d, d->now);
        }
    }
    return 0;
}

/*
 * A copy of n bytes went into the spool.  It takes whole blocks of the
 * state filesystem (a page of a tmpfs for a 5-byte file): the room the
 * last sizing left shrinks by the part of the last block it does not
 * fill, so that many small files do not eat the reserve before the next
 * walk sizes the spool again.
 */
static void spool_charge(daemon_t *d, uint64_t n)
{
    const uint64_t b = d->fs_block ? d->fs_block : 4096;
    const uint64_t slack = (n + b - 1) / b * b - n + (n == 0 ? b : 0);
    d->spool_bytes += n;
    d->spool_files++;
    d->spool_room = d->spool_room > slack ? d->spool_room - slack : 0;
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
    dmn_spool_size(d);
    return 0;
}

static int same_version(const struct stat *st, const ingest_sender_stat *w)
{
    return (uint64_t)st->st_size == w->size &&
           ingest_time_ns(&st->st_mtim) == w->mtime_ns &&
           ingest_time_ns(&st->st_ctim) == w->ctime_ns;
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
    if (mkdirs(dst, SIZE_MAX) != 0) {
        if (NO_ROOM(errno))
            return dmn_spool_nospace(d, src, st->size, errno);
        prog_log(INGEST_LOG_WARN, "spool: %s: %s", prog_esc(dst), strerror(errno));
        return -1;
    }
    (void)unlink(dst); /* a copy left by an earlier try */
    const struct timespec times[2] = { a.st_atim, a.st_mtim };
    if (symlink(target, dst) != 0 || utimensat(AT_FDCWD, dst, times, AT_SYMLINK_NOFOLLOW) != 0) {
        if (NO_ROOM(errno)) {
            const int e = errno;
            (void)unlink(dst);
            return dmn_spool_nospace(d, src, st->size, e);
        }
        prog_log(INGEST_LOG_WARN, "spool: copying the symlink %s to %s: %s", prog_esc(src), prog_esc(dst),
                 strerror(errno));
        (void)unlink(dst);
        return -1;
    }
    spool_charge(d, (uint64_t)n);
    return 0;
}

/*
 * Copy source file rel (the version st) into the spool of batch seq, with
 * its mtime and permission bits, and fsync it.  0 copied; 1 the file
 * changed or vanished meanwhile (not taken: the next walk sees it again);
 * 2 no room on the state filesystem (ENOSPC, EDQUOT: spool backpressure,
 * dmn_spool_nospace; not taken); -1 a local failure (logged; not taken).
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
    if (mkdirs(dst, SIZE_MAX) != 0 || (buf = malloc(1u << 20)) == NULL) {
        if (NO_ROOM(errno))
            goto no_room;
        prog_log(INGEST_LOG_WARN, "spool: %s: %s", prog_esc(dst), strerror(errno));
        goto done;
    }
    out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
        if (NO_ROOM(errno))
            goto no_room;
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
    spool_charge(d, total);
    goto done;
io_error:
    if (NO_ROOM(errno))
        goto no_room;
    prog_log(INGEST_LOG_WARN, "spool: copying %s to %s: %s", prog_esc(src), prog_esc(dst), strerror(errno));
    goto done;
no_room:
    rc = dmn_spool_nospace(d, src, st->size, errno); /* said once, not per file */
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

/*
 * The directories above file p, made where missing; each one made is fsynced into its parent (durable).
 * Those found whose path is longer than sync_below bytes (under the configured directory of that length)
 * are too: made by a run that died before it synced them, their names may not be durable, and a file moved
 * into them would go with them in a power cut.  Those above it are the operator's (and may not be readable
 * to the agent: a parent it cannot open is not one to fsync).  SIZE_MAX: none found is synced.  (The
 * spool's copies are made durable by a syncfs before they count.)
 */
/* A filesystem that cannot fsync a directory (EINVAL) or is read-only (EROFS): nothing more can be done
 * there, and a move into it is as durable as that filesystem makes it. */
static int cannot_sync_dirs(int e) { return e == EINVAL || e == EROFS; }
/* A directory the agent cannot open to sync (EACCES, EPERM) is the operator's, as is one whose filesystem
 * cannot sync it: nothing the agent made hangs on it, and a move into it is as durable as it can be. */
static int not_ours_to_sync(int e) { return e == EACCES || e == EPERM || cannot_sync_dirs(e); }

static int mkdirs(char *p, size_t sync_below)
{
    for (char *q = p + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        const int r = mkdir(p, 0755);
        const int sync_existing = (size_t)(q - p) > sync_below;
        const int e = errno, synced = (r != 0 && !(sync_existing && e == EEXIST)) || prog_sync_parent(p) == 0 ||
                                      cannot_sync_dirs(errno);
        if (r == 0 && !synced) {
            /* made but its name not durable (its parent cannot be opened, say): not left for a later call to
             * find and take as durable */
            const int se = errno;
            (void)rmdir(p);
            errno = se;
        }
        *q = '/';
        if ((r != 0 && e != EEXIST) || !synced) {
            if (r != 0 && e != EEXIST)
                errno = e;
            return -1;
        }
    }
    return 0;
}

/*
 * Once per run and source, before its first move: the names of its move_dir and of the directories
 * above it fsynced into their parents, as far as the agent can open those.  A run that made them (mkdirs
 * makes a missing move_dir) and died before their syncs left names nothing made durable, and move_dir may
 * be on another filesystem than the state directory, whose syncfs at start would not cover them.  A parent
 * the agent cannot open (EACCES, EPERM) is the operator's: the agent could not have made what is in it; so
 * is one on a filesystem that cannot sync a directory (EROFS, EINVAL).  One not there yet (ENOENT) is made,
 * and synced, by mkdirs.  0, or -1 with errno (an I/O error: the move waits for a later try).
 */
static int sync_move_chain(dsource *s)
{
    if (s->move_chain_synced)
        return 0;
    char p[PATH_MAX];
    if (snprintf(p, sizeof(p), "%s", s->move_dir) >= (int)sizeof(p)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/';)
        p[--n] = '\0';
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0')
            continue;
        const char c = *q;
        *q = '\0';
        const int bad = q > p && q[-1] != '/' && prog_sync_parent(p) != 0 && errno != ENOENT &&
                        !not_ours_to_sync(errno);
        *q = c;
        if (bad)
            return -1;
        if (c == '\0')
            break;
    }
    s->move_chain_synced = 1;
    return 0;
}

/* The acked batches whose deferred after-ship actions were logged (each is said once), and whether they
 * failed (else they wait for a writer): their entry, or NULL. */
static struct dmn_defer *defer_of(const daemon_t *d, uint64_t seq)
{
    for (size_t i = 0; i < d->ndefer; i++)
        if (d->defer[i].seq == seq)
            return &d->defer[i];
    return NULL;
}

static void defer_log_add(daemon_t *d, uint64_t seq, int failed)
{
    if (d->ndefer == d->capdefer) {
        const size_t nc = d->capdefer ? d->capdefer * 2 : 16;
        struct dmn_defer *n = realloc(d->defer, nc * sizeof(*n));
        if (n == NULL)
            return; /* it is only said again (and retried every second) */
        d->defer = n;
        d->capdefer = nc;
    }
    d->defer[d->ndefer].seq = seq;
    d->defer[d->ndefer++].failed = failed;
}

void dmn_defer_log_drop(daemon_t *d, uint64_t seq)
{
    struct dmn_defer *e = defer_of(d, seq);
    if (e != NULL)
        *e = d->defer[--d->ndefer];
}

int dmn_defer_due(const daemon_t *d, uint64_t seq)
{
    const struct dmn_defer *e = defer_of(d, seq);
    return d->now >= (e != NULL && e->failed ? d->fail_next : d->defer_next);
}

/* st is the version f shipped (an inode of 0 in f is unknown).  A symlink never is: after_ship leaves
 * shipped symlinks (symlinks: ship) where they are. */
static int is_shipped_version(const struct stat *st, const ingest_journal_file *f)
{
    return S_ISREG(st->st_mode) && (uint64_t)st->st_size == f->size &&
           ingest_time_ns(&st->st_mtim) == f->mtime_ns &&
           ingest_time_ns(&st->st_ctim) == f->ctime_ns &&
           (f->ino == 0 || (uint64_t)st->st_ino == f->ino);
}

/* Is st, found under the claim name of f's inode, f's version?  Its ctime is the claim's (a rename sets it);
 * the inode in the name, with its size and mtime, says it is the file the journal recorded. */
static int is_claimed_version(const struct stat *st, const ingest_journal_file *f)
{
    return S_ISREG(st->st_mode) && f->ino != 0 && (uint64_t)st->st_ino == f->ino &&
           (uint64_t)st->st_size == f->size &&
           ingest_time_ns(&st->st_mtim) == f->mtime_ns;
}

/* The name beside a file under which its after-ship action holds it (claim_file): short, and found again
 * from the inode the journal recorded, should the agent stop between the claim and the action. */
static int claim_name(const char *full, uint64_t ino, char *out, size_t cap)
{
    const char *slash = strrchr(full, '/');
    const int dirlen = slash != NULL ? (int)(slash - full) + 1 : 0;
    return (size_t)snprintf(out, cap, "%.*s" AGENT_CLAIM_PREFIX "%016llx", dirlen, full, (unsigned long long)ino) <
                   cap
               ? 0
               : -1;
}

/* The version f under its claim name beside full (into cl and *c), left by an action that stopped or
 * failed after its claim: 1, else 0. */
static int find_claim(const char *full, const ingest_journal_file *f, char *cl, size_t cap, struct stat *c)
{
    return f->ino != 0 && claim_name(full, f->ino, cl, cap) == 0 && lstat(cl, c) == 0 && is_claimed_version(c, f);
}

enum { CLAIM_OK, CLAIM_GONE, CLAIM_OTHER, CLAIM_NONE };

/*
 * Take the file at full, the inode of want, to its claim name cl (rename
 * without replacing), so that the action removes or moves that inode and
 * no other: a writer that replaces the path by rename (a new file renamed
 * over it) between the checks and the action keeps its new file.
 * CLAIM_OK: cl holds it.  CLAIM_GONE: nothing is at full any more.
 * CLAIM_OTHER: the file at full was another (a newer version): it is put
 * back, or, when yet another came meanwhile, renamed from cl to
 * NAME.ingest-kept.INODE beside it (logged), where it ships like any new
 * file (a claim name is never shipped).  CLAIM_NONE: the filesystem cannot rename without
 * replacing (EINVAL), or the claim name is taken: the action goes by the
 * path, as before.
 */
static int claim_file(const char *full, const struct stat *want, const char *cl)
{
    if (renameat2(AT_FDCWD, full, AT_FDCWD, cl, RENAME_NOREPLACE) != 0)
        return errno == ENOENT ? CLAIM_GONE : CLAIM_NONE;
    struct stat c;
    const int seen = lstat(cl, &c) == 0;
    if (seen && c.st_dev == want->st_dev && c.st_ino == want->st_ino)
        return CLAIM_OK;
    if (renameat2(AT_FDCWD, cl, AT_FDCWD, full, RENAME_NOREPLACE) != 0) {
        char kept[PATH_MAX];
        const char *as = cl;
        if (seen &&
            (size_t)snprintf(kept, sizeof(kept), "%s.ingest-kept.%016llx", full, (unsigned long long)c.st_ino) <
                sizeof(kept) &&
            renameat2(AT_FDCWD, cl, AT_FDCWD, kept, RENAME_NOREPLACE) == 0)
            as = kept;
        prog_log(INGEST_LOG_WARN, "after_ship: %s was replaced twice while it was acted on: the version between is "
                 "kept as %s", prog_esc(full), prog_esc(as));
    }
    return CLAIM_OTHER;
}

/* A move that failed: logged (the first of a pass), its directory forgotten (it may be gone). */
static void move_failed(daemon_t *d, int quiet, size_t *nfail, const char *full, const char *dst)
{
    const int e = errno;
    d->moved_dir[0] = '\0';
    if (!quiet && (*nfail)++ == 0)
        prog_log(INGEST_LOG_WARN, "after_ship move %s -> %s: %s; tried again later", prog_esc(full), prog_esc(dst),
                 strerror(e));
    errno = e;
}

/*
 * Delete or move (s->after) the acked file rel of source s, when it is
 * still the version shipped (f) and no other process has it open.
 * Returns 1 when it was left for later because some process holds it open
 * (logged unless quiet), 2 when the deletion or move failed (logged unless
 * quiet or *nfail says one of this pass was: tried again later, with
 * back-off), else 0 (done, or nothing to do: gone, or a newer version,
 * which ships in its turn).
 *
 * "Nobody has it open" is a write lease (F_SETLEASE F_WRLCK on a read-only
 * descriptor): the kernel grants it only while no other open file
 * description of the file exists, in any process, so a writer that paused
 * with its file open keeps it from being deleted under it.  Under the lease
 * the file is checked again (the version shipped, and still the one at
 * this path), then claimed (claim_file) and deleted or moved by its claim
 * name.  Where the lease cannot be taken at all (EINVAL: the filesystem has
 * no leases; EACCES: the agent neither owns the file nor has CAP_LEASE) the
 * action runs without that check, as it always did, and a warning says so
 * once (docs/operations.md).
 */
static int release_file(daemon_t *d, dsource *s, const char *rel, const ingest_journal_file *f, int quiet,
                        size_t *nfail, char *removed, size_t cap)
{
    removed[0] = '\0';
    const char *what = s->after == AFTER_DELETE ? "delete" : "move";
    char full[PATH_MAX], dst[PATH_MAX], cl[PATH_MAX];
    struct stat st, at;
    ingest_file_state fs;
    if ((size_t)snprintf(full, sizeof(full), "%s/%s", s->path, rel) >= sizeof(full))
        return 0;
    if (s->after == AFTER_MOVE && (size_t)snprintf(dst, sizeof(dst), "%s/%s", s->move_dir, rel) >= sizeof(dst)) {
        if (!quiet)
            prog_log(INGEST_LOG_WARN, "after_ship move of %s: its destination under %s is longer than %d bytes: left "
                     "where it is", prog_esc(full), prog_esc(s->move_dir), PATH_MAX - 1);
        return 0;
    }
    const char *path = full; /* where the file is acted on: full, or its claim name cl */
    int claimed = 0;
    int gone = lstat(full, &st) != 0;
    if (gone && errno != ENOENT)
        return 0;
    struct stat left;
    if ((gone || !is_shipped_version(&st, f)) && find_claim(full, f, cl, sizeof(cl), &left)) {
        st = left; /* left under its claim name by a run that stopped before the action */
        path = cl;
        claimed = 1;
        gone = 0;
    }
    if (gone) {
        /* gone: perhaps deleted by a run that died before making the deletion durable; its directory is
         * fsynced all the same before the batch's record goes (a cut must not bring it back) */
        snprintf(removed, cap, "%s", full);
        /* or moved by a run that died (or whose fsync failed) between the rename and the fsync of the
         * directory moved into: that one too, or the cut that keeps the unlink could lose the new name */
        if (s->after == AFTER_MOVE && lstat(dst, &at) == 0 && prog_sync_parent(dst) != 0 &&
            !not_ours_to_sync(errno)) {
            if (!quiet && (*nfail)++ == 0)
                prog_log(INGEST_LOG_WARN, "after_ship move %s -> %s: fsync of its directory: %s; tried again later",
                         prog_esc(full), prog_esc(dst), strerror(errno));
            return 2;
        }
        return 0;
    }
    /* Only a version that landed: the ACK's store transaction records in the file table exactly the
     * versions the core landed.  The batch's journal record lists every file taken for it, also one left
     * out when the batch was built (unreadable for a moment, gone and back), withdrawn while it was sent,
     * or refused (marked INGEST_FILE_STATE_REFUSED): such a file has no entry of this version and stays
     * where it is (one that left its batch unchanged is found and shipped again: resettle_missing).  (A
     * claimed file passed this check before it was claimed; its entry went when a walk found its name gone.) */
    const int got = claimed ? 0 : ingest_filetable_get(d->a->state.ft, f->path, &fs);
    if (got < 0 && got != INGEST_ENOTFOUND) {
        if (!quiet && (*nfail)++ == 0)
            prog_log(INGEST_LOG_WARN, "after_ship %s of %s: state store: %s; tried again later", what, prog_esc(full),
                     ingest_ctx_errmsg(d->a->ctx));
        return 2;
    }
    if (!claimed && (got != 0 || fs.dev == INGEST_FILE_STATE_REFUSED || fs.size != f->size ||
                     fs.mtime_ns != f->mtime_ns || fs.ctime_ns != f->ctime_ns))
        return 0;
    if (!claimed && !is_shipped_version(&st, f))
        return 0; /* a newer version: leave it */
    const int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
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
    int (*const is_version)(const struct stat *, const ingest_journal_file *) =
        claimed ? is_claimed_version : is_shipped_version;
    int same = (fd < 0 || (fstat(fd, &st) == 0 && is_version(&st, f))) && lstat(path, &at) == 0 &&
               at.st_dev == st.st_dev && at.st_ino == st.st_ino && is_version(&at, f);
    int rc = 0;
    /* A move's destination directory first (the directories above dst below move_dir are made and synced
     * once, then known, d->moved_dir, until another; one known that is gone, removed by hand, is made
     * again): a move that cannot be made leaves the file as it is. */
    char dir[PATH_MAX];
    char *slash = NULL;
    int known = 0;
    const size_t below = s->after == AFTER_MOVE ? strlen(s->move_dir) : 0;
    if (same && s->after == AFTER_MOVE) {
        snprintf(dir, sizeof(dir), "%s", dst);
        if ((slash = strrchr(dir, '/')) != NULL)
            *slash = '\0';
        known = slash != NULL && strcmp(dir, d->moved_dir) == 0;
        if (sync_move_chain(s) != 0 || (!known && mkdirs(dst, below) != 0)) {
            move_failed(d, quiet, nfail, full, dst);
            same = 0;
            rc = 2;
        }
    }
    if (same && !claimed && f->ino != 0) {
        /* from here on acted on by its claim name: a file renamed over full after the check stays; a failed
         * action leaves it under that name, where the next try finds it */
        const int c = claim_name(full, f->ino, cl, sizeof(cl)) == 0 ? claim_file(full, &at, cl) : CLAIM_NONE;
        if (c == CLAIM_OK) {
            path = cl;
            claimed = 1;
        }
        same = c == CLAIM_OK || c == CLAIM_NONE;
    }
    if (same) {
        if (s->after == AFTER_DELETE) {
            if (unlink(path) == 0) {
                d->deleted++;
                snprintf(removed, cap, "%s", full);
                if (quiet)
                    prog_log(INGEST_LOG_INFO, "after_ship: %s deleted (on a later try)", prog_esc(full));
            } else {
                rc = 2;
                if (!quiet && (*nfail)++ == 0)
                    prog_log(INGEST_LOG_WARN, "after_ship delete %s: %s; tried again later", prog_esc(full),
                             strerror(errno));
            }
        } else {
            int ok = prog_move_file(path, fd, dst) == 0; /* across filesystems too; durable */
            if (!ok && known && errno == ENOENT) {
                known = 0;
                ok = mkdirs(dst, below) == 0 && prog_move_file(path, fd, dst) == 0;
            }
            if (ok) {
                if (!known && slash != NULL)
                    snprintf(d->moved_dir, sizeof(d->moved_dir), "%s", dir);
                d->moved++;
                if (quiet)
                    prog_log(INGEST_LOG_INFO, "after_ship: %s moved to %s (on a later try)", prog_esc(full),
                             prog_esc(dst));
            } else {
                move_failed(d, quiet, nfail, full, dst);
                rc = 2;
            }
        }
    }
    if (leased)
        (void)fcntl(fd, F_SETLEASE, F_UNLCK);
    if (fd >= 0)
        close(fd);
    return rc;
}

/*
 * Source s keeps its files now (after_ship changed to keep while the
 * batch's action was pending): a file an earlier action left under its
 * claim name (a move that failed after the claim) goes back to its name,
 * or nothing would ever bring it back (the batch's record goes next).
 * Always 0.
 */
static int unclaim_kept(const dsource *s, const char *rel, const ingest_journal_file *f)
{
    char full[PATH_MAX], cl[PATH_MAX];
    struct stat c;
    if ((size_t)snprintf(full, sizeof(full), "%s/%s", s->path, rel) >= sizeof(full) ||
        !find_claim(full, f, cl, sizeof(cl), &c))
        return 0;
    if (renameat2(AT_FDCWD, cl, AT_FDCWD, full, RENAME_NOREPLACE) == 0)
        prog_log(INGEST_LOG_INFO, "after_ship: %s put back from %s (its source keeps its files now)", prog_esc(full),
                 prog_esc(cl));
    else
        prog_log(INGEST_LOG_WARN, "after_ship: %s could not be put back from %s (%s): it stays there", prog_esc(full),
                 prog_esc(cl), strerror(errno));
    return 0;
}

/*
 * Apply the source's after-ship action to the acked files f[0, n) of batch
 * seq (only to files still the version shipped, and nobody has open);
 * returns how many were deferred because some process still has them open,
 * or failed (a move or deletion refused, a deletion or move that could not
 * be made durable; d->defer_failed set: retried with back-off).  The file
 * table entry is kept: a file put back unchanged is not shipped again.
 *
 * A deletion is made durable (its directory fsynced, once per run of files
 * in one directory) before this returns, so before the batch's ACKED
 * record goes: a power cut cannot bring back a deleted file whose batch the
 * journal has forgotten (tests/integration/test_powercut.sh).
 */
size_t dmn_after_ship(daemon_t *d, uint64_t seq, const ingest_journal_file *f, size_t n)
{
    struct dmn_defer *known = defer_of(d, seq);
    const int quiet = known != NULL;
    size_t deferred = 0, nfail = 0, failures = 0;
    char pending[PATH_MAX] = "", removed[PATH_MAX];
    for (size_t i = 0; i <= n; i++) {
        removed[0] = '\0';
        if (i < n) {
            const char *rel = NULL;
            dsource *s = dmn_source_of(d, f[i].path, &rel);
            const int r = s != NULL && s->after != AFTER_KEEP
                              ? release_file(d, s, rel, &f[i], quiet, &nfail, removed, sizeof(removed))
                              : s != NULL ? unclaim_kept(s, rel, &f[i])
                                          : 0;
            deferred += r != 0;
            failures += r == 2;
        }
        /* the directory of the deletions before, once this one is elsewhere (or at the end) */
        const char *ps = strrchr(pending, '/'), *rs = strrchr(removed, '/');
        const int same = ps && rs && ps - pending == rs - removed && memcmp(pending, removed, (size_t)(ps - pending)) == 0;
        if (pending[0] && (i == n || (removed[0] && !same))) {
            if (prog_sync_parent(pending) != 0 && !cannot_sync_dirs(errno)) {
                if (!quiet)
                    prog_log(INGEST_LOG_WARN, "after_ship: cannot make the deletions in the directory of %s durable "
                             "(fsync: %s); the batch's record stays, and is tried again", prog_esc(pending),
                             strerror(errno));
                deferred++;
                failures++;
            }
            pending[0] = '\0';
        }
        if (removed[0])
            memcpy(pending, removed, sizeof(pending));
    }
    if (nfail > 1)
        prog_log(INGEST_LOG_WARN, "after_ship: %zu more files of this batch failed the same way (%zu in all)",
                 nfail - 1, nfail);
    if (nfail > 0)
        prog_log(INGEST_LOG_WARN, "after_ship: the batch's record stays in the journal; its files are tried again "
                 "after 1 s, then less often (at most every %.0f s), and after a restart", DEFER_FAIL_MAX_S);
    if (failures > 0)
        d->defer_failed = 1;
    if (known != NULL && known->failed && failures == 0)
        d->defer_fail_clean = 1; /* (done, or only waiting for a writer now) */
    if (known != NULL)
        known->failed = failures > 0;
    else if (deferred > 0)
        defer_log_add(d, seq, failures > 0);
    return deferred;
}

