/*
 * The transport seam: a link carries the protocol's messages (wire.h)
 * between one device and the core, in order, after both ends agreed on the
 * session features (session.h).  The edge's shipping (edge.h) and the
 * core's serving (core.h) speak to a link only, never to a socket, so a
 * transport is one small table of functions:
 *
 *   tcp   today's authenticated, encrypted session over a stream socket
 *         (ingest_link_tcp_create, after ingest_session_handshake_fd)
 *   mem   an in-memory pair, for tests of the protocol state machines: it
 *         can lose, duplicate, reorder or hold back messages, and let a
 *         test send bytes no encoder would make (ingest_link_mem_pair)
 *
 * A link belongs to the code that created it; destroy it before whatever
 * it borrows (a tcp link borrows its session and its descriptor).
 *
 * THREAD SAFETY: any number of threads may send on a link (sends are
 * serialised inside it) while one other thread receives.  shutdown may be
 * called from any thread, at any time, to end a receive that waits.
 */
#ifndef INGEST_LINK_H
#define INGEST_LINK_H

#include "ingest/common.h"
#include "ingest/session.h"
#include "ingest/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ingest_link ingest_link;

/* One transport: every function but describe and destroy may fail with an INGEST_E* code. */
typedef struct ingest_link_ops {
    const char *name; /* "tcp", "mem" */
    /* Send one message (views of m are read before it returns). */
    int (*send)(ingest_link *l, const ingest_wire_msg *m);
    /*
     * Receive one message, waiting at most timeout_ms (negative: forever).
     * Views of m point into the link's buffer, valid until the next
     * receive.  INGEST_ETIMEDOUT between messages leaves the link usable;
     * any other failure closes the receive direction for good.
     */
    int (*recv)(ingest_link *l, ingest_wire_msg *m, int timeout_ms);
    /* The detail of the last send / receive failure ("" if none). */
    const char *(*send_errmsg)(ingest_link *l);
    const char *(*recv_errmsg)(ingest_link *l);
    /* End both directions: a waiting receive returns INGEST_ECLOSED, later sends fail. */
    void (*shutdown)(ingest_link *l);
    void (*destroy)(ingest_link *l);
} ingest_link_ops;

/* What every link shares; a transport's own state follows it. */
struct ingest_link {
    const ingest_link_ops *ops;
    unsigned features;       /* the agreed INGEST_SESSION_FEATURE_* bits */
    size_t peer_max_payload; /* the largest payload the peer accepts per message */
    char peer[160];          /* who is at the other end, for log lines ("10.0.0.7:40112") */
    char detail[48];         /* how it is protected, for log lines ("AES-256-GCM") */
    /* The device sends chunks whether the core asked for them or not (Kafka: it
     * publishes before any answer), so the core gains nothing by not asking. */
    unsigned char sends_unwanted;
    /* A receive that times out never leaves part of a message behind (a queue of whole messages), so a
     * long wait may be made of short ones: the edge does, to notice a stop.  A TCP link's timeout in the
     * middle of a frame closes it, so it is waited for in one piece (a stop shuts its socket down). */
    unsigned char recv_sliceable;
    /* What a long silence of the peer may mean on this transport, for the edge's warning when an answer is
     * overdue ("" if nothing to add).  A Kafka receiver answers nothing to a device it does not know. */
    char silence[320];
};

INGEST_API int ingest_link_send(ingest_link *l, const ingest_wire_msg *m);
INGEST_API int ingest_link_recv(ingest_link *l, ingest_wire_msg *m, int timeout_ms);
INGEST_API const char *ingest_link_send_errmsg(ingest_link *l);
INGEST_API const char *ingest_link_recv_errmsg(ingest_link *l);
INGEST_API void ingest_link_shutdown(ingest_link *l);
/* NULL is accepted. */
INGEST_API void ingest_link_destroy(ingest_link *l);

/*
 * A tcp link over a session whose handshake succeeded on fd.  Both are
 * borrowed: the caller closes fd and destroys the session after the link.
 * peer names the other end in log lines (may be NULL).
 */
INGEST_API int ingest_link_tcp_create(ingest_ctx *ctx, ingest_session *ss, int fd, const char *peer,
                                      ingest_link **out) INGEST_WUR;

/*
 * Two connected in-memory links (a's sends are b's receives and the other
 * way round), as after a handshake that agreed features.  Each message is
 * encoded on send and decoded on receive, as on a real transport; a queue
 * holds at most INGEST_LINK_MEM_QUEUE_MAX bytes (a send waits for room).
 * Destroy both.
 */
#define INGEST_LINK_MEM_QUEUE_MAX (64u * 1024u * 1024u)
INGEST_API int ingest_link_mem_pair(ingest_ctx *ctx, unsigned features, ingest_link **a, ingest_link **b) INGEST_WUR;

/* Faults a mem link applies to what it sends (ingest_link_mem_fault). */
enum {
    INGEST_LINK_FAULT_DROP = 1,  /* the message is lost */
    INGEST_LINK_FAULT_DUP = 2,   /* it arrives twice */
    INGEST_LINK_FAULT_SWAP = 3,  /* it arrives after the message sent next */
    INGEST_LINK_FAULT_STALL = 4, /* it and everything after it are held back for good */
};
/*
 * Apply fault to the nth (1-based) message of type (0: of any type) that l
 * sends from now on; one fault at a time per link (a new one replaces the
 * old).  Returns 0 or INGEST_EINVAL.
 */
INGEST_API int ingest_link_mem_fault(ingest_link *l, int fault, unsigned type, unsigned nth);
/*
 * Send a message's raw payload, as a peer that lies would: type and bytes
 * travel unchecked, and the receiving end's decoder judges them.
 */
INGEST_API int ingest_link_mem_send_raw(ingest_link *l, unsigned type, const void *payload, size_t len);
/* Messages l has sent so far (faults included: a dropped one counts). */
INGEST_API uint64_t ingest_link_mem_sent(const ingest_link *l);

#ifdef __cplusplus
}
#endif
#endif
