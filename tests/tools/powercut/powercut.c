/*
 * powercut.so: a crash-simulating I/O layer for the fault suite (tests only).
 *
 * Preloaded (LD_PRELOAD) into the receiver or the agent, it keeps an undo
 * log of every change the program makes under POWERCUT_ROOTS (absolute
 * directories, ':'-separated) in POWERCUT_DIR: the old bytes before each
 * write or truncate, and each name change (create, mkdir, unlink, rename,
 * link) with what it replaced.  It also logs what makes changes durable:
 * fsync/fdatasync of a file (its data), fsync of a directory (the name
 * changes in it), writes through an O_SYNC/O_DSYNC descriptor, syncfs and
 * sync (everything).  A "power cut" is then kill -9 of the program followed
 * by powercut-restore, which undoes, newest first, every change that no
 * later sync made durable: what a machine that lost power would find,
 * under the strict POSIX model (a new name needs its directory synced, a
 * file's bytes need the file synced), as LazyFS does over FUSE.
 *
 * Each write is logged before it is made, under one lock, so the log's
 * order is the order of the operations.  Only regular files and
 * directories under the roots are logged; everything else passes through.
 * Without POWERCUT_DIR the layer does nothing.  A data record names the
 * file by its path at the time (restore follows the durable renames after
 * it); a name that a change removes (unlink, rename over) is kept as a hard
 * link under POWERCUT_DIR/shadow (same filesystem as the roots).  Files
 * that are only written are never linked, so their ctime and link count
 * stay what the program under test expects.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pclog.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_ROOTS 8

static struct {
    int on;
    int logfd;
    char dir[PATH_MAX];
    char roots[MAX_ROOTS][PATH_MAX];
    size_t rootlen[MAX_ROOTS];
    int nroots;
    uint64_t seq;
    uint64_t logsize; /* bytes in the log: a sync record covers the records before where it stood */
    uint64_t cut_at, nsyncs; /* POWERCUT_CUT_AT_SYNC, and the sync calls so far */
    pthread_mutex_t mu;
    int (*open)(const char *, int, ...);
    int (*openat)(int, const char *, int, ...);
    ssize_t (*write)(int, const void *, size_t);
    ssize_t (*pwrite)(int, const void *, size_t, off_t);
    ssize_t (*writev)(int, const struct iovec *, int);
    ssize_t (*pwritev)(int, const struct iovec *, int, off_t);
    int (*ftruncate)(int, off_t);
    int (*fsync)(int);
    int (*fdatasync)(int);
    int (*syncfs)(int);
    void (*sync)(void);
    int (*ioctl)(int, unsigned long, ...);
    int (*rename)(const char *, const char *);
    int (*renameat)(int, const char *, int, const char *);
    int (*renameat2)(int, const char *, int, const char *, unsigned);
    int (*unlink)(const char *);
    int (*unlinkat)(int, const char *, int);
    int (*rmdir)(const char *);
    int (*mkdir)(const char *, mode_t);
    int (*mkdirat)(int, const char *, mode_t);
    int (*link)(const char *, const char *);
    int (*linkat)(int, const char *, int, const char *, int);
    int (*symlink)(const char *, const char *);
    int (*symlinkat)(const char *, int, const char *);
} G = { .mu = PTHREAD_MUTEX_INITIALIZER, .logfd = -1 };

/* The next definitions (libc's), all at once: before main, or at the first call made before that. */
static void resolve_all(void)
{
    G.open = dlsym(RTLD_NEXT, "open");
    G.openat = dlsym(RTLD_NEXT, "openat");
    G.write = dlsym(RTLD_NEXT, "write");
    G.pwrite = dlsym(RTLD_NEXT, "pwrite");
    G.writev = dlsym(RTLD_NEXT, "writev");
    G.pwritev = dlsym(RTLD_NEXT, "pwritev");
    G.ftruncate = dlsym(RTLD_NEXT, "ftruncate");
    G.fsync = dlsym(RTLD_NEXT, "fsync");
    G.fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    G.syncfs = dlsym(RTLD_NEXT, "syncfs");
    G.sync = dlsym(RTLD_NEXT, "sync");
    G.ioctl = dlsym(RTLD_NEXT, "ioctl");
    G.rename = dlsym(RTLD_NEXT, "rename");
    G.renameat = dlsym(RTLD_NEXT, "renameat");
    G.renameat2 = dlsym(RTLD_NEXT, "renameat2");
    G.unlink = dlsym(RTLD_NEXT, "unlink");
    G.unlinkat = dlsym(RTLD_NEXT, "unlinkat");
    G.rmdir = dlsym(RTLD_NEXT, "rmdir");
    G.mkdir = dlsym(RTLD_NEXT, "mkdir");
    G.mkdirat = dlsym(RTLD_NEXT, "mkdirat");
    G.link = dlsym(RTLD_NEXT, "link");
    G.linkat = dlsym(RTLD_NEXT, "linkat");
    G.symlink = dlsym(RTLD_NEXT, "symlink");
    G.symlinkat = dlsym(RTLD_NEXT, "symlinkat");
}

#define REAL(name) (G.name != NULL ? G.name : (resolve_all(), G.name))

static void pc_die(const char *what)
{
    char m[512];
    const int n = snprintf(m, sizeof(m), "powercut: %s: %s; the undo log can no longer be trusted\n", what,
                           strerror(errno));
    if (n > 0)
        (void)!REAL(write)(2, m, (size_t)n < sizeof(m) ? (size_t)n : sizeof(m) - 1);
    abort();
}

__attribute__((constructor)) static void pc_init(void)
{
    resolve_all();
    const char *d = getenv("POWERCUT_DIR"), *r = getenv("POWERCUT_ROOTS");
    if (d == NULL || *d == '\0' || r == NULL || *r == '\0')
        return;
    snprintf(G.dir, sizeof(G.dir), "%s", d);
    const char *cut = getenv("POWERCUT_CUT_AT_SYNC");
    G.cut_at = cut != NULL ? strtoull(cut, NULL, 10) : 0;
    char buf[MAX_ROOTS * PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", r);
    for (char *save = NULL, *t = strtok_r(buf, ":", &save); t && G.nroots < MAX_ROOTS; t = strtok_r(NULL, ":", &save)) {
        snprintf(G.roots[G.nroots], PATH_MAX, "%s", t);
        G.rootlen[G.nroots] = strlen(G.roots[G.nroots]);
        while (G.rootlen[G.nroots] > 1 && G.roots[G.nroots][G.rootlen[G.nroots] - 1] == '/')
            G.roots[G.nroots][--G.rootlen[G.nroots]] = '\0';
        G.nroots++;
    }
    char p[PATH_MAX + 16];
    snprintf(p, sizeof(p), "%s/shadow", G.dir);
    (void)REAL(mkdir)(p, 0700);
    snprintf(p, sizeof(p), "%s/log", G.dir);
    G.logfd = REAL(open)(p, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (G.logfd < 0)
        pc_die("cannot open the undo log");
    /* a run killed while it logged left a torn last record (its change was never made): cut it off */
    struct stat st;
    off_t at = 0;
    if (fstat(G.logfd, &st) < 0)
        pc_die("cannot stat the undo log");
    for (pc_rec h; at < st.st_size; at += (off_t)sizeof(h) + h.plen1 + h.plen2 + h.plen3 + (off_t)h.nold) {
        if (pread(G.logfd, &h, sizeof(h), at) != (ssize_t)sizeof(h) || h.magic != PC_MAGIC ||
            at + (off_t)sizeof(h) + h.plen1 + h.plen2 + h.plen3 + (off_t)h.nold > st.st_size)
            break;
    }
    if (at < st.st_size && REAL(ftruncate)(G.logfd, at) < 0)
        pc_die("cannot cut the undo log's torn record");
    G.logsize = (uint64_t)at;
    /* out of the way of the descriptors a program (or a shell's redirection) expects to be free */
    const int hi = fcntl(G.logfd, F_DUPFD_CLOEXEC, 900);
    if (hi < 0)
        pc_die("cannot move the undo log's descriptor");
    close(G.logfd);
    G.logfd = hi;
    /* the roots, for powercut-restore (it finds each inode written under them) */
    snprintf(p, sizeof(p), "%s/roots", G.dir);
    const int rf = REAL(open)(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    for (int i = 0; rf >= 0 && i < G.nroots; i++)
        if (REAL(write)(rf, G.roots[i], G.rootlen[i]) != (ssize_t)G.rootlen[i] || REAL(write)(rf, "\n", 1) != 1)
            pc_die("cannot write the roots file");
    if (rf < 0 || close(rf) != 0)
        pc_die("cannot write the roots file");
    G.on = 1;
}

static int under_roots(const char *path)
{
    for (int i = 0; i < G.nroots; i++)
        if (strncmp(path, G.roots[i], G.rootlen[i]) == 0 && (path[G.rootlen[i]] == '/' || path[G.rootlen[i]] == '\0'))
            return 1;
    return 0;
}

/* The absolute path of (dirfd, name), lexically; 0 when it cannot be told. */
static int abs_path(int dirfd, const char *name, char *out, size_t cap)
{
    char base[PATH_MAX];
    if (name[0] == '/') {
        snprintf(out, cap, "%s", name);
        return 1;
    }
    if (dirfd == AT_FDCWD) {
        if (getcwd(base, sizeof(base)) == NULL)
            return 0;
    } else {
        char l[64];
        snprintf(l, sizeof(l), "/proc/self/fd/%d", dirfd);
        const ssize_t n = readlink(l, base, sizeof(base) - 1);
        if (n <= 0)
            return 0;
        base[n] = '\0';
    }
    const int n = snprintf(out, cap, "%s/%s", base, name);
    return n > 0 && (size_t)n < cap;
}

static int fd_path(int fd, char *out, size_t cap)
{
    char l[64];
    snprintf(l, sizeof(l), "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(l, out, cap - 1);
    if (n <= 0)
        return 0;
    out[n] = '\0';
    return 1;
}

static void log_rec(pc_rec *h, const char *p1, const char *p2, const char *p3, int oldfd)
{
    h->magic = PC_MAGIC;
    h->plen1 = p1 ? (uint32_t)strlen(p1) : 0;
    h->plen2 = p2 ? (uint32_t)strlen(p2) : 0;
    h->plen3 = p3 ? (uint32_t)strlen(p3) : 0;
    struct iovec v[4] = { { h, sizeof(*h) }, { (void *)p1, h->plen1 }, { (void *)p2, h->plen2 }, { (void *)p3, h->plen3 } };
    size_t want = 0;
    for (int i = 0; i < 4; i++)
        want += v[i].iov_len;
    if (REAL(writev)(G.logfd, v, 4) != (ssize_t)want)
        pc_die("cannot write the undo log");
    G.logsize += want + h->nold;
    /* the old bytes, copied in pieces from the file itself (a static buffer: used under the lock only, and
     * threads of the programs may have small stacks) */
    static char buf[65536];
    for (uint64_t done = 0; done < h->nold;) {
        const size_t n = h->nold - done < sizeof(buf) ? (size_t)(h->nold - done) : sizeof(buf);
        const ssize_t r = pread(oldfd, buf, n, (off_t)(h->off + done));
        if (r <= 0)
            pc_die("cannot read old bytes");
        if (REAL(write)(G.logfd, buf, (size_t)r) != r)
            pc_die("cannot write the undo log");
        done += (uint64_t)r;
    }
    G.seq++;
}

/*
 * Before a write of [off, off + len) to fd (off < 0: at the descriptor's
 * position or, with O_APPEND, at the end): is it a file under the roots?
 * Then log its old bytes.  Returns with the lock held when it logged
 * (*locked), so that the write follows its record.
 */
static void before_write(int fd, int64_t off, uint64_t len, int truncate_to, int *locked)
{
    *locked = 0;
    if (!G.on)
        return;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return;
    char path[PATH_MAX];
    if (!fd_path(fd, path, sizeof(path)) || !under_roots(path))
        return;
    pthread_mutex_lock(&G.mu);
    *locked = 1;
    if (fstat(fd, &st) < 0)
        pc_die("fstat");
    const int fl = fcntl(fd, F_GETFL);
    pc_rec h = { 0 };
    h.dev = (uint64_t)st.st_dev;
    h.ino = (uint64_t)st.st_ino;
    h.oldsize = (uint64_t)st.st_size;
    if (truncate_to) {
        h.off = (uint64_t)off;
        h.len = 0;
    } else {
        if (off < 0)
            off = (fl >= 0 && (fl & O_APPEND)) ? (int64_t)st.st_size : (int64_t)lseek(fd, 0, SEEK_CUR);
        if (off < 0)
            pc_die("lseek");
        h.off = (uint64_t)off;
        h.len = len;
    }
    const uint64_t end = truncate_to ? h.oldsize : h.off + h.len;
    h.nold = h.off < h.oldsize ? (end < h.oldsize ? end : h.oldsize) - h.off : 0;
    if (h.nold > PC_OLD_MAX)
        pc_die("a write over more than 1 GiB of old bytes");
    int rfd = fd;
    if (h.nold > 0 && fl >= 0 && (fl & O_ACCMODE) == O_WRONLY) {
        rfd = REAL(open)(path, O_RDONLY | O_CLOEXEC);
        if (rfd < 0)
            pc_die("cannot reopen a write-only file to read its old bytes");
    }
    h.kind = PC_DATA;
    log_rec(&h, path, NULL, NULL, rfd);
    if (rfd != fd)
        close(rfd);
    if (!truncate_to && fl >= 0 && (fl & (O_DSYNC | O_SYNC))) {
        pc_rec s = { 0 };
        s.kind = PC_RANGE_SYNC;
        s.dev = h.dev;
        s.ino = h.ino;
        s.off = h.off;
        s.len = h.len;
        log_rec(&s, NULL, NULL, NULL, -1); /* durable when the write returns; logged first, under the lock */
    }
}

static void after(int locked)
{
    if (locked)
        pthread_mutex_unlock(&G.mu);
}

/*
 * Where the log stands now: a sync that starts now covers the records
 * before this.  POWERCUT_CUT_AT_SYNC=N: the N-th sync call of the process
 * (fsync, fdatasync, syncfs, sync, whatever it is on) does not happen: the
 * process is killed just before it, so that a test can cut the power at
 * every point where the program waits for durability, one run each.
 */
static uint64_t log_mark(void)
{
    pthread_mutex_lock(&G.mu);
    const uint64_t m = G.logsize;
    if (G.cut_at > 0 && ++G.nsyncs == G.cut_at) {
        static const char msg[] = "powercut: the power is cut here (POWERCUT_CUT_AT_SYNC)\n";
        (void)!REAL(write)(2, msg, sizeof(msg) - 1);
        raise(SIGKILL); /* with the lock held: no other thread logs anything more */
    }
    pthread_mutex_unlock(&G.mu);
    return m;
}

/*
 * After a sync call that returned 0 and started when the log stood at
 * upto: fsync of a file (SYNC) or directory (DSYNC) under the roots, or
 * syncfs (all: 1, the filesystem of fd) or sync (all: 2, every
 * filesystem).  Changes logged after upto, by other threads meanwhile, are
 * not covered by it.
 */
static void log_sync(int fd, int all, uint64_t upto)
{
    if (!G.on)
        return;
    pc_rec h = { 0 };
    h.off = upto;
    struct stat st;
    if (all == 2) {
        h.kind = PC_SYNCALL; /* dev 0: every filesystem */
    } else if (all == 1) {
        if (fstat(fd, &st) < 0)
            return;
        h.kind = PC_SYNCALL;
        h.dev = (uint64_t)st.st_dev;
    } else {
        if (fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
            return;
        char path[PATH_MAX];
        if (!fd_path(fd, path, sizeof(path)) || !under_roots(path))
            return;
        h.kind = S_ISDIR(st.st_mode) ? PC_DSYNC : PC_SYNC;
        h.dev = (uint64_t)st.st_dev;
        h.ino = (uint64_t)st.st_ino;
    }
    pthread_mutex_lock(&G.mu);
    log_rec(&h, NULL, NULL, NULL, -1);
    pthread_mutex_unlock(&G.mu);
}

/* The parent directory of absolute path p: its identity; 0 when it is not there. */
static int parent_of(const char *p, uint64_t *dev, uint64_t *ino)
{
    char d[PATH_MAX];
    snprintf(d, sizeof(d), "%s", p);
    char *s = strrchr(d, '/');
    if (s == NULL)
        return 0;
    if (s == d)
        s[1] = '\0';
    else
        *s = '\0';
    struct stat st;
    if (stat(d, &st) < 0)
        return 0;
    *dev = (uint64_t)st.st_dev;
    *ino = (uint64_t)st.st_ino;
    return 1;
}

/*
 * A name change at (dirfd, name) [to (dirfd2, name2)]: is it under the
 * roots?  Then take the lock and fill the record's paths and parents;
 * keep what the change would remove (rename over, unlink) under shadow/.
 */
typedef struct {
    pc_rec h;
    char p1[PATH_MAX], p2[PATH_MAX + 64], p3[PATH_MAX + 64];
} name_op;

static int name_begin(name_op **po, int kind, int dirfd, const char *name, int dirfd2, const char *name2)
{
    *po = NULL;
    if (!G.on)
        return 0;
    name_op *o = calloc(1, sizeof(*o)); /* on the heap: a program's threads may have small stacks */
    if (o == NULL)
        pc_die("out of memory");
    if (!abs_path(dirfd, name, o->p1, sizeof(o->p1)) || (name2 && !abs_path(dirfd2, name2, o->p2, sizeof(o->p2))))
        pc_die("a path that cannot be made absolute");
    if (!under_roots(o->p1) && !(name2 && under_roots(o->p2))) {
        free(o);
        return 0; /* a rename into or out of the roots is logged */
    }
    *po = o;
    pthread_mutex_lock(&G.mu);
    memset(&o->h, 0, sizeof(o->h));
    o->h.kind = (uint32_t)kind;
    o->p3[0] = '\0';
    (void)parent_of(o->p1, &o->h.p1dev, &o->h.p1ino);
    if (name2)
        (void)parent_of(o->p2, &o->h.p2dev, &o->h.p2ino);
    struct stat st;
    const char *victim = kind == PC_UNLINK ? o->p1 : kind == PC_RENAME ? o->p2 : NULL;
    if (victim && lstat(victim, &st) == 0 && !S_ISDIR(st.st_mode)) {
        if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) { /* a socket or FIFO: made by bind/mkfifo, not logged */
            pthread_mutex_unlock(&G.mu);
            free(o);
            *po = NULL;
            return 0;
        }
        static unsigned long long nth;
        do
            snprintf(o->p3, sizeof(o->p3), "%s/shadow/n-%ld-%llu", G.dir, (long)getpid(), ++nth);
        while (REAL(link)(victim, o->p3) < 0 && errno == EEXIST);
        if (errno != EEXIST && access(o->p3, F_OK) != 0)
            pc_die("cannot keep a removed name in the shadow directory");
    }
    if (kind == PC_UNLINK) { /* the unlinked name's shadow travels as path2 */
        memcpy(o->p2, o->p3, sizeof(o->p3));
        o->p3[0] = '\0';
    }
    return 1;
}

static int name_end(name_op *o, int rc)
{
    const int e = errno;
    if (o != NULL) {
        if (rc == 0)
            log_rec(&o->h, o->p1, o->h.kind == PC_RENAME || o->h.kind == PC_UNLINK ? o->p2 : NULL,
                    o->p3[0] ? o->p3 : NULL, -1);
        else if (o->h.kind == PC_UNLINK && o->p2[0])
            (void)REAL(unlink)(o->p2);
        else if (o->p3[0])
            (void)REAL(unlink)(o->p3);
        pthread_mutex_unlock(&G.mu);
        free(o);
    }
    errno = e;
    return rc;
}

/* ---- open ---------------------------------------------------------------- */

static int open_common(int dirfd, const char *path, int flags, mode_t mode)
{
    if (!G.on)
        return REAL(openat)(dirfd, path, flags, mode);
    name_op *o;
    struct stat st;
    if ((flags & O_CREAT) && fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT &&
        name_begin(&o, PC_CREATE, dirfd, path, 0, NULL)) {
        const int fd = REAL(openat)(dirfd, path, flags, mode); /* a new file: only its name is logged */
        (void)name_end(o, fd < 0 ? -1 : 0);
        return fd;
    }
    if (!(flags & O_TRUNC) || (flags & O_ACCMODE) == O_RDONLY)
        return REAL(openat)(dirfd, path, flags, mode);
    /* O_TRUNC of a file that may be under the roots: keep its bytes first */
    const int fd = REAL(openat)(dirfd, path, flags & ~O_TRUNC, mode);
    if (fd < 0)
        return fd;
    int locked;
    before_write(fd, 0, 0, 1, &locked);
    const int rc = REAL(ftruncate)(fd, 0);
    after(locked);
    if (rc < 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

EXPORT int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    const mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return open_common(AT_FDCWD, path, flags, m);
}

EXPORT int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    const mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return open_common(AT_FDCWD, path, flags, m);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    const mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return open_common(dirfd, path, flags, m);
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    const mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return open_common(dirfd, path, flags, m);
}

EXPORT int creat(const char *path, mode_t mode) { return open_common(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode); }

/* ---- data ---------------------------------------------------------------- */

static uint64_t iov_len(const struct iovec *v, int n)
{
    uint64_t s = 0;
    for (int i = 0; i < n; i++)
        s += v[i].iov_len;
    return s;
}

EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    int locked;
    before_write(fd, -1, n, 0, &locked);
    const ssize_t r = REAL(write)(fd, buf, n);
    const int e = errno;
    after(locked);
    errno = e;
    return r;
}

EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    int locked;
    before_write(fd, off, n, 0, &locked);
    const ssize_t r = REAL(pwrite)(fd, buf, n, off);
    const int e = errno;
    after(locked);
    errno = e;
    return r;
}

EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }

EXPORT ssize_t writev(int fd, const struct iovec *v, int cnt)
{
    int locked;
    before_write(fd, -1, iov_len(v, cnt), 0, &locked);
    const ssize_t r = REAL(writev)(fd, v, cnt);
    const int e = errno;
    after(locked);
    errno = e;
    return r;
}

EXPORT ssize_t pwritev(int fd, const struct iovec *v, int cnt, off_t off)
{
    int locked;
    before_write(fd, off, iov_len(v, cnt), 0, &locked);
    const ssize_t r = REAL(pwritev)(fd, v, cnt, off);
    const int e = errno;
    after(locked);
    errno = e;
    return r;
}

EXPORT ssize_t pwritev64(int fd, const struct iovec *v, int cnt, off_t off) { return pwritev(fd, v, cnt, off); }

EXPORT int ftruncate(int fd, off_t len)
{
    int locked;
    before_write(fd, len, 0, 1, &locked);
    const int r = REAL(ftruncate)(fd, len);
    const int e = errno;
    after(locked);
    errno = e;
    return r;
}

EXPORT int ftruncate64(int fd, off_t len) { return ftruncate(fd, len); }

EXPORT int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int locked = 0;
    if (req == FICLONERANGE && arg != NULL) {
        const struct file_clone_range *r = arg;
        before_write(fd, (int64_t)r->dest_offset, r->src_length ? r->src_length : UINT64_MAX / 2, 0, &locked);
    } else if (req == FICLONE) {
        before_write(fd, 0, 0, 1, &locked); /* the whole file is replaced */
    }
    const int rc = REAL(ioctl)(fd, req, arg);
    const int e = errno;
    after(locked);
    errno = e;
    return rc;
}

/* ---- durability ---------------------------------------------------------- */

/* A sync call on fd (all: 0 the file or directory, 1 its filesystem), logged once it returned 0. */
static int synced(int (*call)(int), int fd, int all)
{
    const uint64_t upto = G.on ? log_mark() : 0;
    const int r = call(fd);
    if (r == 0)
        log_sync(fd, all, upto);
    return r;
}

EXPORT int fsync(int fd) { return synced(REAL(fsync), fd, 0); }
EXPORT int fdatasync(int fd) { return synced(REAL(fdatasync), fd, 0); }
EXPORT int syncfs(int fd) { return synced(REAL(syncfs), fd, 1); }

EXPORT void sync(void)
{
    const uint64_t upto = G.on ? log_mark() : 0;
    REAL(sync)();
    log_sync(-1, 2, upto);
}

/* Calls the layer does not model: refused on a file under the roots (a test would prove nothing). */
static void unmodelled(int fd, const char *call)
{
    char path[PATH_MAX];
    if (G.on && fd_path(fd, path, sizeof(path)) && under_roots(path)) {
        errno = ENOSYS;
        pc_die(call);
    }
}

EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
    unmodelled(fd, "fallocate of a file under the roots is not modelled");
    int (*f)(int, int, off_t, off_t) = dlsym(RTLD_NEXT, "fallocate");
    return f(fd, mode, off, len);
}

EXPORT ssize_t copy_file_range(int in, off_t *inoff, int out, off_t *outoff, size_t len, unsigned flags)
{
    unmodelled(out, "copy_file_range into a file under the roots is not modelled");
    ssize_t (*f)(int, off_t *, int, off_t *, size_t, unsigned) = dlsym(RTLD_NEXT, "copy_file_range");
    return f(in, inoff, out, outoff, len, flags);
}

/* ---- names --------------------------------------------------------------- */

EXPORT int renameat2(int od, const char *op, int nd, const char *np, unsigned flags)
{
    name_op *o;
    const int log = name_begin(&o, PC_RENAME, od, op, nd, np);
    if (log && (flags & ~(unsigned)RENAME_NOREPLACE) != 0) {
        errno = ENOSYS;
        pc_die("renameat2 with RENAME_EXCHANGE or RENAME_WHITEOUT under the roots is not modelled");
    }
    const int r = REAL(renameat2)(od, op, nd, np, flags);
    return log ? name_end(o, r) : r;
}

EXPORT int renameat(int od, const char *op, int nd, const char *np)
{
    name_op *o;
    const int log = name_begin(&o, PC_RENAME, od, op, nd, np);
    const int r = REAL(renameat)(od, op, nd, np);
    return log ? name_end(o, r) : r;
}

EXPORT int rename(const char *op, const char *np) { return renameat(AT_FDCWD, op, AT_FDCWD, np); }

EXPORT int unlinkat(int dirfd, const char *path, int flags)
{
    name_op *o;
    const int log = name_begin(&o, PC_UNLINK, dirfd, path, 0, NULL);
    const int r = REAL(unlinkat)(dirfd, path, flags);
    return log ? name_end(o, r) : r;
}

EXPORT int unlink(const char *path) { return unlinkat(AT_FDCWD, path, 0); }
EXPORT int rmdir(const char *path) { return unlinkat(AT_FDCWD, path, AT_REMOVEDIR); }

EXPORT int mkdirat(int dirfd, const char *path, mode_t mode)
{
    name_op *o;
    const int log = name_begin(&o, PC_MKDIR, dirfd, path, 0, NULL);
    const int r = REAL(mkdirat)(dirfd, path, mode);
    return log ? name_end(o, r) : r;
}

EXPORT int mkdir(const char *path, mode_t mode) { return mkdirat(AT_FDCWD, path, mode); }

EXPORT int linkat(int od, const char *op, int nd, const char *np, int flags)
{
    name_op *o;
    const int log = name_begin(&o, PC_LINK, nd, np, 0, NULL);
    const int r = REAL(linkat)(od, op, nd, np, flags);
    return log ? name_end(o, r) : r;
}

EXPORT int link(const char *op, const char *np) { return linkat(AT_FDCWD, op, AT_FDCWD, np, 0); }

EXPORT int symlinkat(const char *target, int dirfd, const char *path)
{
    name_op *o;
    const int log = name_begin(&o, PC_CREATE, dirfd, path, 0, NULL);
    const int r = REAL(symlinkat)(target, dirfd, path);
    return log ? name_end(o, r) : r;
}

EXPORT int symlink(const char *target, const char *path) { return symlinkat(target, AT_FDCWD, path); }
