/* The agent's status endpoint over a unix socket (status.h). */
#include "status.h"
#include "prog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define STATUS_MAX (256u * 1024u)
/* what a client gets when the agent answers as many as it can already */
#define STATUS_BUSY "busy\n"

struct status_server {
    prog_server *srv;
    status_render_fn fn;
    void *ud;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

static void answer(void *ud, int c)
{
    status_server *s = ud;
    char req[16] = "";
    struct pollfd p = { c, POLLIN, 0 };
    /* A client that says nothing within a second gets the text form. */
    if (poll(&p, 1, 1000) == 1) {
        const ssize_t n = read(c, req, sizeof(req) - 1);
        req[n > 0 ? n : 0] = '\0';
    }
    const int json = strncmp(req, "json", 4) == 0;
    char *buf = malloc(STATUS_MAX); /* clients are answered concurrently (prog_server): a buffer each */
    if (buf == NULL)
        return;
    buf[0] = '\0';
    s->fn(s->ud, json, buf, STATUS_MAX);
    prog_write_all(c, buf, strlen(buf));
    free(buf);
}

status_server *status_server_start(const char *path, status_render_fn fn, void *userdata, char *err, size_t errcap)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errcap, "status socket path %s is longer than %zu bytes", path, sizeof(sa.sun_path) - 1);
        return NULL;
    }
    status_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    snprintf(s->path, sizeof(s->path), "%s", path);
    s->fn = fn;
    s->ud = userdata;
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* Only a socket is replaced, never another kind of file. */
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    /* Created 0600 from the start: no window in which others could connect. */
    const mode_t old = umask(0177);
    const int bound = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    umask(old);
    if (!bound || listen(fd, 8) != 0) {
        snprintf(err, errcap, "status socket %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(s);
        return NULL;
    }
    if ((s->srv = prog_server_start(fd, answer, s, STATUS_BUSY, err, errcap)) == NULL) {
        unlink(path);
        free(s);
        return NULL;
    }
    return s;
}

void status_server_stop(status_server *s)
{
    if (s == NULL)
        return;
    prog_server_stop(s->srv);
    unlink(s->path);
    free(s);
}

/* One try: 0 with the answer in out (empty: none came), or -1 with err. */
static int query_once(const char *path, int json, char *out, size_t cap, char *err, size_t errcap)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        snprintf(err, errcap, "socket path too long: %s", path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        snprintf(err, errcap, "cannot reach the agent at %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    const char *req = json ? "json\n" : "text\n";
    /* (never SIGPIPE: the agent may have closed a client it had no room for) */
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0 && errno != EPIPE && errno != ECONNRESET) {
        snprintf(err, errcap, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t len = 0;
    for (;;) {
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, 5000) != 1) {
            snprintf(err, errcap, "%s: no answer within 5 s", path);
            close(fd);
            return -1;
        }
        if (len + 1 >= cap)
            break;
        const ssize_t n = read(fd, out + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    out[len] = '\0';
    close(fd);
    return 0;
}

int status_query(const char *path, int json, char *out, size_t cap, char *err, size_t errcap)
{
    /* An agent answering many clients at once says STATUS_BUSY (or closes at once): try again a few times
     * over about 3 s, then say so; an empty answer is never taken for one. */
    for (int i = 0; i < 15; i++) {
        if (query_once(path, json, out, cap, err, errcap) != 0)
            return -1;
        if (out[0] != '\0' && strcmp(out, STATUS_BUSY) != 0)
            return 0;
        struct timespec ts = { 0, 200 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    snprintf(err, errcap, "%s: the agent did not answer (busy with other status clients?)", path);
    return -1;
}
