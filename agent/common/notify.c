/*
 * prog_notify: the few lines of systemd's readiness protocol that the
 * programs need (see notify.h).  No new dependency: a datagram socket,
 * one sendto, close.
 */
#include "notify.h"

#include "prog.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int prog_notify(const char *state)
{
    static int warned;
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return 0;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    const size_t n = strlen(path);
    int rc = -1, e = EINVAL;
    /* A path, or '@' for a name in the abstract namespace (a leading NUL on the wire). */
    if ((path[0] != '/' && path[0] != '@') || n < 2 || n >= sizeof(sa.sun_path))
        goto out;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    /* The abstract name's length is the address's: no trailing NUL is counted. */
    const socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
    const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        e = errno;
        goto out;
    }
    const size_t sl = strlen(state);
    const ssize_t w = sendto(fd, state, sl, MSG_NOSIGNAL, (const struct sockaddr *)&sa, len);
    e = errno;
    close(fd);
    if (w == (ssize_t)sl)
        rc = 1;
    else if (w >= 0)
        e = EMSGSIZE;
out:
    if (rc < 0 && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        prog_log(INGEST_LOG_WARN, "NOTIFY_SOCKET %s: cannot tell the service manager '%s': %s", prog_esc(path),
                 prog_esc(state), strerror(e));
    return rc;
}
