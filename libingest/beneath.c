/*
 * Landed paths resolved without following a symlink anywhere on the way.
 * A device may land symlinks in the bronze tree (docs/landing.md,
 * "Symlinks"), so the core's readers of landed files (the index, the
 * lander's copies of known chunks, verify) never resolve a landed path
 * through one: the last component is taken with O_NOFOLLOW /
 * AT_SYMLINK_NOFOLLOW by the caller, the directories on the way here.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef SYS_openat2
#include <linux/openat2.h>
#endif

int ingest__open_parent_beneath(int dirfd, const char *rel, const char **last)
{
    const char *slash = strrchr(rel, '/');
    *last = slash != NULL ? slash + 1 : rel;
    if (slash == NULL)
        return openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char dir[PATH_MAX];
    const size_t dl = (size_t)(slash - rel);
    if (dl == 0 || dl >= sizeof(dir)) {
        errno = dl == 0 ? EINVAL : ENAMETOOLONG;
        return -1;
    }
    memcpy(dir, rel, dl);
    dir[dl] = '\0';
#ifdef SYS_openat2
    struct open_how how;
    memset(&how, 0, sizeof(how));
    how.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    const long fd = syscall(SYS_openat2, dirfd, dir, &how, sizeof(how));
    if (fd >= 0)
        return (int)fd;
    if (errno != ENOSYS && errno != EPERM) /* not a kernel (or a sandbox) without openat2 */
        return -1;
#endif
    /* one component at a time, none followed */
    int cur = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (char *c = dir, *next; cur >= 0 && c != NULL; c = next) {
        next = strchr(c, '/');
        if (next != NULL)
            *next++ = '\0';
        if (c[0] == '\0' || strcmp(c, ".") == 0 || strcmp(c, "..") == 0) {
            close(cur);
            errno = EINVAL;
            return -1;
        }
        const int nfd = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        const int e = errno;
        close(cur);
        errno = e;
        cur = nfd;
    }
    return cur;
}

int ingest__lstat_beneath(const char *root, const char *rel, struct stat *sb)
{
    const int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0)
        return -1;
    const char *last = NULL;
    const int pfd = ingest__open_parent_beneath(rfd, rel, &last);
    int e = errno, r = -1;
    if (pfd >= 0) {
        r = fstatat(pfd, last, sb, AT_SYMLINK_NOFOLLOW);
        e = errno;
        close(pfd);
    }
    close(rfd);
    errno = e;
    return r;
}
