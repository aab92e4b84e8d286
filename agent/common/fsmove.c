/*
 * prog_move_file (fsmove.h): rename, or copy-then-unlink across
 * filesystems, durably.  `after_ship: move:DIR` uses it, so a DIR on another
 * filesystem than the source (a USB disk, a tmpfs) works.
 */
#include "fsmove.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int prog_sync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else if ((size_t)(slash - path) >= sizeof(dir)) {
        errno = ENAMETOOLONG;
        return -1;
    } else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    const int rc = fsync(fd);
    const int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Every byte of in (from offset 0) to out; 0 or -1. */
static int copy_bytes(int in, int out)
{
    char buf[64 * 1024];
    off_t off = 0;
    for (;;) {
        const ssize_t n = pread(in, buf, sizeof(buf), off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0)
            return 0;
        for (ssize_t done = 0; done < n;) {
            const ssize_t w = write(out, buf + done, (size_t)(n - done));
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                return -1;
            }
            done += w;
        }
        off += n;
    }
}

static int copy_across(const char *src, int srcfd, const char *dst)
{
    char tmp[PATH_MAX];
    const char *base = strrchr(dst, '/');
    const int dirlen = base == NULL ? 0 : (int)(base - dst + 1);
    base = base == NULL ? dst : base + 1;
    if ((size_t)snprintf(tmp, sizeof(tmp), "%.*s.%s.ingest-move.%ld", dirlen, dst, base, (long)getpid()) >=
        sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int in = srcfd, out = -1, rc = -1, e = 0;
    if (in < 0 && (in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY)) < 0)
        return -1;
    struct stat st;
    if (fstat(in, &st) != 0)
        goto out;
    if (!S_ISREG(st.st_mode)) {
        errno = EINVAL;
        goto out;
    }
    (void)unlink(tmp); /* a leftover of a crashed move by a process of this pid */
    out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, st.st_mode & 07777);
    if (out < 0)
        goto out;
    if (copy_bytes(in, out) != 0)
        goto fail;
    /* The owner only where permitted (root, or the owner already); the mode again, past the umask. */
    if (fchown(out, st.st_uid, st.st_gid) != 0 && errno != EPERM)
        goto fail;
    const struct timespec times[2] = { st.st_atim, st.st_mtim };
    if (fchmod(out, st.st_mode & 07777) != 0 || futimens(out, times) != 0 || fsync(out) != 0)
        goto fail;
    if (close(out) != 0) {
        out = -1;
        goto fail;
    }
    out = -1;
    if (rename(tmp, dst) != 0)
        goto fail;
    if (prog_sync_parent(dst) != 0)
        goto out; /* dst is complete; src stays: a copy too many, never a loss */
    if (unlink(src) != 0 || prog_sync_parent(src) != 0)
        goto out;
    rc = 0;
    goto out;
fail:
    e = errno;
    if (out >= 0)
        close(out);
    out = -1;
    (void)unlink(tmp);
    errno = e;
out:
    e = errno;
    if (out >= 0)
        close(out);
    if (srcfd < 0)
        close(in);
    errno = e;
    return rc;
}

int prog_move_file(const char *src, int srcfd, const char *dst)
{
    if (rename(src, dst) == 0)
        return prog_sync_parent(dst) == 0 && prog_sync_parent(src) == 0 ? 0 : -1;
    if (errno != EXDEV)
        return -1;
    return copy_across(src, srcfd, dst);
}
