/*
 * The tcp transport: the authenticated session of session.h over a stream
 * socket.  The session already allows one sending and one receiving
 * thread; the link adds a lock so that several threads may send.
 */
#include "../internal.h"
#include "ingest/link.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>

typedef struct tcp_link {
    ingest_link base;
    ingest_ctx *ctx;
    ingest_session *ss;
    int fd;
    pthread_mutex_t send_lock;
} tcp_link;

static int tcp_send(ingest_link *l, const ingest_wire_msg *m)
{
    tcp_link *t = (tcp_link *)l;
    pthread_mutex_lock(&t->send_lock);
    const int rc = ingest_session_send_msg(t->ss, t->fd, m);
    pthread_mutex_unlock(&t->send_lock);
    return rc;
}

static int tcp_recv(ingest_link *l, ingest_wire_msg *m, int timeout_ms)
{
    tcp_link *t = (tcp_link *)l;
    return ingest_session_recv_msg(t->ss, t->fd, m, timeout_ms);
}

static const char *tcp_send_errmsg(ingest_link *l)
{
    return ingest_session_send_errmsg(((tcp_link *)l)->ss);
}

static const char *tcp_recv_errmsg(ingest_link *l)
{
    return ingest_session_recv_errmsg(((tcp_link *)l)->ss);
}

static void tcp_shutdown(ingest_link *l)
{
    shutdown(((tcp_link *)l)->fd, SHUT_RDWR);
}

static void tcp_destroy(ingest_link *l)
{
    tcp_link *t = (tcp_link *)l;
    pthread_mutex_destroy(&t->send_lock);
    ingest__free(t->ctx, t);
}

static const ingest_link_ops tcp_ops = {
    "tcp", tcp_send, tcp_recv, tcp_send_errmsg, tcp_recv_errmsg, tcp_shutdown, tcp_destroy,
};

int ingest_link_tcp_create(ingest_ctx *ctx, ingest_session *ss, int fd, const char *peer, ingest_link **out)
{
    *out = NULL;
    if (ss == NULL || fd < 0)
        return ingest__fail(ctx, INGEST_EINVAL, "tcp link: no session or descriptor");
    tcp_link *t = ingest__calloc(ctx, 1, sizeof(*t));
    if (t == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "tcp link: out of memory");
    t->base.ops = &tcp_ops;
    t->base.features = ingest_session_features(ss);
    t->base.peer_max_payload = ingest_session_peer_max_payload(ss);
    snprintf(t->base.peer, sizeof(t->base.peer), "%s", peer != NULL ? peer : "");
    snprintf(t->base.detail, sizeof(t->base.detail), "%s", ingest_session_cipher_name(ingest_session_cipher(ss)));
    t->ctx = ctx;
    t->ss = ss;
    t->fd = fd;
    pthread_mutex_init(&t->send_lock, NULL);
    *out = &t->base;
    return 0;
}
