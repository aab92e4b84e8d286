/*
 * fsfault.so: a layer for tests that disturbs the agent's file calls at
 * the worst moment.  Preloaded (LD_PRELOAD) into the agent; without its
 * variables it does nothing.
 *
 * A source file unreadable for a moment, as a flaky disk or a full
 * descriptor table would make it:
 *   - FSFAULT_OPEN_NAME: a file name (the last component of the path given
 *     to openat, opened read-only): the opens of that name are counted;
 *   - FSFAULT_OPEN_NTH (default 1) and FSFAULT_OPEN_COUNT (default 1): the
 *     NTH such open and the COUNT-1 after it fail,
 *   - with errno FSFAULT_OPEN_ERRNO (default 5, EIO).
 *
 * A slow removal, so that another process can act in between:
 *   - FSFAULT_SLOW_NAME: a file name, or the start of one followed by *;
 *     the first unlink, rename or renameat2 of a path of that name (its last
 *     component) first creates the file
 *     FSFAULT_SLOW_MARK (if set), then sleeps FSFAULT_SLOW_MS (default
 *     1000) before the real call.
 *
 * FSFAULT_LOG: each fault made appends a line to it, so that a test can
 * tell that the fault was met.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int (*real_openat)(int, const char *, int, ...);
static int (*real_unlink)(const char *);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned);
static const char *open_name, *slow_name, *slow_mark, *logpath;
static long open_nth = 1, open_count = 1, slow_ms = 1000;
static int open_err = EIO;
static atomic_long opens_seen;
static atomic_int slowed;

static long env_long(const char *k, long dflt)
{
    const char *v = getenv(k);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end = NULL;
    const long n = strtol(v, &end, 10);
    return end != NULL && *end == '\0' && n > 0 ? n : dflt;
}

static const char *env_str(const char *k)
{
    const char *v = getenv(k);
    return v != NULL && *v != '\0' ? v : NULL;
}

static void init(void)
{
    real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    real_unlink = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    real_rename = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    real_renameat2 = (int (*)(int, const char *, int, const char *, unsigned))dlsym(RTLD_NEXT, "renameat2");
    open_name = env_str("FSFAULT_OPEN_NAME");
    slow_name = env_str("FSFAULT_SLOW_NAME");
    slow_mark = env_str("FSFAULT_SLOW_MARK");
    logpath = env_str("FSFAULT_LOG");
    open_nth = env_long("FSFAULT_OPEN_NTH", 1);
    open_count = env_long("FSFAULT_OPEN_COUNT", 1);
    open_err = (int)env_long("FSFAULT_OPEN_ERRNO", EIO);
    slow_ms = env_long("FSFAULT_SLOW_MS", 1000);
}

/* Is the last component of path name (or, when name ends with *, does it start with the rest)? */
static int named(const char *path, const char *name)
{
    if (name == NULL || path == NULL)
        return 0;
    const char *slash = strrchr(path, '/');
    const char *base = slash != NULL ? slash + 1 : path;
    const size_t n = strlen(name);
    return n > 0 && name[n - 1] == '*' ? strncmp(base, name, n - 1) == 0 : strcmp(base, name) == 0;
}

static void note(const char *what, const char *path)
{
    if (logpath == NULL)
        return;
    FILE *f = fopen(logpath, "a");
    if (f == NULL)
        return;
    fprintf(f, "%s %s\n", what, path);
    fclose(f);
}

/* The first removal of slow_name: mark, then wait. */
static void maybe_slow(const char *what, const char *path)
{
    if (!named(path, slow_name) || atomic_exchange(&slowed, 1) != 0)
        return;
    if (slow_mark != NULL) {
        FILE *f = fopen(slow_mark, "w");
        if (f != NULL)
            fclose(f);
    }
    note(what, path);
    const struct timespec ts = { slow_ms / 1000, (slow_ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    pthread_once(&once, init);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, unsigned);
        va_end(ap);
    }
    if ((flags & O_ACCMODE) == O_RDONLY && (flags & (O_CREAT | O_DIRECTORY)) == 0 && named(path, open_name)) {
        const long k = atomic_fetch_add(&opens_seen, 1) + 1;
        if (k >= open_nth && k < open_nth + open_count) {
            note("openat", path);
            errno = open_err;
            return -1;
        }
    }
    return real_openat(dirfd, path, flags, mode);
}

EXPORT int unlink(const char *path)
{
    pthread_once(&once, init);
    maybe_slow("unlink", path);
    return real_unlink(path);
}

EXPORT int rename(const char *oldpath, const char *newpath)
{
    pthread_once(&once, init);
    maybe_slow("rename", oldpath);
    return real_rename(oldpath, newpath);
}

EXPORT int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned flags)
{
    pthread_once(&once, init);
    maybe_slow("renameat2", oldpath);
    return real_renameat2(olddirfd, oldpath, newdirfd, newpath, flags);
}
