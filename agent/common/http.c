/* The Prometheus endpoint (http.h). */
#include "http.h"
#include "prog.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REQ_MAX 8192
#define BODY_MAX (1024u * 1024u)

struct metrics_http {
    prog_server *srv;
    ingest_metrics *m;
};

static void answer(void *ud, int c)
{
    metrics_http *h = ud;
    char req[REQ_MAX + 1];
    size_t len = 0;
    req[0] = '\0';
    const double deadline = prog_now() + 2.0;
    /* Read until the end of the headers, the bound or the deadline. */
    while (len < REQ_MAX && strstr(req, "\r\n\r\n") == NULL && strstr(req, "\n\n") == NULL &&
           strlen(req) == len) { /* (a NUL byte ends it too: answered as not found) */
        const int left = (int)((deadline - prog_now()) * 1000);
        struct pollfd p = { c, POLLIN, 0 };
        if (left <= 0 || poll(&p, 1, left) != 1)
            return;
        const ssize_t n = read(c, req + len, REQ_MAX - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        req[len] = '\0';
    }
    req[len] = '\0';
    if (strncmp(req, "GET /metrics ", 13) != 0 && strncmp(req, "GET /metrics?", 13) != 0) {
        static const char nf[] = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n"
                                 "Connection: close\r\n\r\nnot found\n";
        prog_write_all(c, nf, sizeof(nf) - 1);
        return;
    }
    /* clients are answered concurrently (prog_server): a body each */
    char *body = malloc(BODY_MAX);
    if (body == NULL)
        return;
    const size_t blen = ingest_metrics_render(h->m, body, BODY_MAX);
    const size_t n = blen < BODY_MAX ? blen : BODY_MAX - 1;
    char head[256];
    const int hl = snprintf(head, sizeof(head),
                            "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %zu\r\n"
                            "Connection: close\r\n\r\n",
                            n);
    prog_write_all(c, head, (size_t)hl);
    prog_write_all(c, body, n);
    free(body);
}

metrics_http *metrics_http_start(const char *address, ingest_metrics *m, char *bound, size_t bound_cap, char *err,
                                 size_t errcap)
{
    metrics_http *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    h->m = m;
    const int fd = prog_listen(address, bound, bound_cap, err, errcap);
    static const char busy[] = "HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 5\r\n"
                               "Connection: close\r\n\r\nbusy\n";
    if (fd < 0 || (h->srv = prog_server_start(fd, answer, h, busy, err, errcap)) == NULL) {
        free(h);
        return NULL;
    }
    return h;
}

void metrics_http_stop(metrics_http *h)
{
    if (h == NULL)
        return;
    prog_server_stop(h->srv);
    free(h);
}
