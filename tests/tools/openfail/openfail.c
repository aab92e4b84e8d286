/*
 * openfail.so: a layer for tests that makes a file unreadable for a
 * moment, as a flaky disk or a full descriptor table would.  Preloaded
 * (LD_PRELOAD) into the agent; without OPENFAIL_NAME it does nothing.
 *
 *   - OPENFAIL_NAME: a file name (the last component of the path given to
 *     openat, opened read-only): the opens of that name are counted;
 *   - OPENFAIL_NTH (default 1) and OPENFAIL_COUNT (default 1): the NTH
 *     such open and the COUNT-1 after it fail;
 *   - OPENFAIL_ERRNO (default 5, EIO): with this errno;
 *   - OPENFAIL_LOG: each failure made appends a line to it, so that a
 *     test can tell that the fault was met.
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
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int (*real_openat)(int, const char *, int, ...);
static const char *name;
static const char *logpath;
static long nth = 1, count = 1;
static int err = EIO;
static atomic_long seen;

static long env_long(const char *k, long dflt)
{
    const char *v = getenv(k);
    if (v == NULL || *v == '\0')
        return dflt;
    char *end = NULL;
    const long n = strtol(v, &end, 10);
    return end != NULL && *end == '\0' && n > 0 ? n : dflt;
}

static void init(void)
{
    real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    name = getenv("OPENFAIL_NAME");
    if (name != NULL && *name == '\0')
        name = NULL;
    logpath = getenv("OPENFAIL_LOG");
    nth = env_long("OPENFAIL_NTH", 1);
    count = env_long("OPENFAIL_COUNT", 1);
    err = (int)env_long("OPENFAIL_ERRNO", EIO);
}

static int matches(const char *path, int flags)
{
    if (name == NULL || path == NULL || (flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_DIRECTORY)) != 0)
        return 0;
    const char *slash = strrchr(path, '/');
    return strcmp(slash != NULL ? slash + 1 : path, name) == 0;
}

static void note(const char *path)
{
    if (logpath == NULL)
        return;
    FILE *f = fopen(logpath, "a");
    if (f == NULL)
        return;
    fprintf(f, "openat %s: errno %d\n", path, err);
    fclose(f);
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
    if (matches(path, flags)) {
        const long k = atomic_fetch_add(&seen, 1) + 1;
        if (k >= nth && k < nth + count) {
            note(path);
            errno = err;
            return -1;
        }
    }
    return real_openat(dirfd, path, flags, mode);
}
