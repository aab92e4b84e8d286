/*
 * dirsnatch.so: a layer for tests that removes directories at the worst
 * moment, as a job tidying a landing zone (removing its empty directories)
 * would by chance.  Preloaded (LD_PRELOAD) into the receiver; without
 * DIRSNATCH_ROOT (an absolute directory) it does nothing.  Under that
 * root, outside its _manifests:
 *
 *   - a create (openat with O_CREAT relative to a directory descriptor)
 *     is preceded, every DIRSNATCH_EVERY-th time (default 3), by rmdir of
 *     the directory it creates in: the create then finds ENOENT if the
 *     directory was empty;
 *   - a directory made by mkdirat is removed again at once, every
 *     DIRSNATCH_EVERY-th time, so that the next step into it fails.
 *
 * Each removal that succeeded appends a line to DIRSNATCH_LOG (if set),
 * so that a test can tell that the race was met.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
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
static int (*real_mkdirat)(int, const char *, mode_t);
static char root[PATH_MAX];
static size_t rootlen;
static unsigned every = 3;
static const char *logpath;
static atomic_uint ncreate, nmkdir;

static void init(void)
{
    real_openat = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    real_mkdirat = (int (*)(int, const char *, mode_t))dlsym(RTLD_NEXT, "mkdirat");
    const char *r = getenv("DIRSNATCH_ROOT");
    if (r != NULL && r[0] == '/' && strlen(r) < sizeof root) {
        snprintf(root, sizeof root, "%s", r);
        rootlen = strlen(root);
        while (rootlen > 1 && root[rootlen - 1] == '/')
            root[--rootlen] = '\0';
    }
    const char *e = getenv("DIRSNATCH_EVERY");
    if (e != NULL && atoi(e) > 0)
        every = (unsigned)atoi(e);
    logpath = getenv("DIRSNATCH_LOG");
}

/* The path of directory descriptor fd (or of name in it), if it lies under the root and outside its _manifests. */
static int path_of(int fd, const char *name, char *out, size_t cap)
{
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, out, cap - 1);
    if (n <= 0)
        return -1;
    out[n] = '\0';
    if (name != NULL) {
        const size_t k = (size_t)n;
        if (k + 1 + strlen(name) >= cap)
            return -1;
        out[k] = '/';
        strcpy(out + k + 1, name);
    }
    if (rootlen == 0 || strncmp(out, root, rootlen) != 0 || out[rootlen] != '/')
        return -1;
    if (strncmp(out + rootlen, "/_manifests", 11) == 0)
        return -1;
    return 0;
}

static void snatch(const char *path, const char *why)
{
    if (rmdir(path) != 0 || logpath == NULL)
        return;
    FILE *f = fopen(logpath, "a");
    if (f != NULL) {
        fprintf(f, "%s %s\n", why, path);
        fclose(f);
    }
}

EXPORT int openat(int dirfd, const char *name, int flags, ...)
{
    pthread_once(&once, init);
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    char p[PATH_MAX];
    if ((flags & O_CREAT) && dirfd >= 0 && rootlen > 0 && atomic_fetch_add(&ncreate, 1) % every == every - 1 &&
        path_of(dirfd, NULL, p, sizeof p) == 0)
        snatch(p, "create");
    return real_openat(dirfd, name, flags, mode);
}

EXPORT int mkdirat(int dirfd, const char *name, mode_t mode)
{
    pthread_once(&once, init);
    const int r = real_mkdirat(dirfd, name, mode);
    char p[PATH_MAX];
    if (r == 0 && dirfd >= 0 && rootlen > 0 && atomic_fetch_add(&nmkdir, 1) % every == every - 1 &&
        path_of(dirfd, name, p, sizeof p) == 0)
        snatch(p, "mkdir");
    return r;
}
