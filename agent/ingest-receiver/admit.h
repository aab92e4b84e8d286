/*
 * Admission of connections that have not authenticated yet.
 *
 * They do not count against max_connections (authenticated sessions
 * only); they have a budget of their own, in all and per source address.
 * When a new connection finds its address's share or the whole budget
 * full, the receiver drops one that is waiting instead of refusing the
 * newcomer: the oldest that has sent nothing yet, else the oldest, of the
 * same address when its share is full, of any address when the whole
 * budget is.  A flood of idle or slow connections therefore only
 * ever pushes out its own kind, while an honest device, which sends its
 * HELLO at once, finishes its handshake in a round trip or two: it is
 * never the oldest silent one.  (The idea is OpenSSH's MaxStartups, with
 * eviction instead of random refusal, so a flood cannot keep a device out.)
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef INGEST_RECEIVER_ADMIT_H
#define INGEST_RECEIVER_ADMIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct admit admit;

/* One waiting connection; embedded in the caller's connection, which outlives admit_leave. */
typedef struct admit_entry {
    int fd;
    char addr[64];  /* source address, without the port */
    uint64_t seq;   /* admission order */
    int spoke;      /* its first bytes arrived */
    int in;         /* in the table (cleared by admit_leave or when dropped) */
    int dropped;    /* dropped to make room: its socket was shut down */
} admit_entry;

/* A budget of max_total waiting connections, at most max_per_addr of one address; NULL on ENOMEM. */
admit *admit_create(unsigned max_total, unsigned max_per_addr);
void admit_destroy(admit *a);

/*
 * Admit e (fd and addr set by the caller).  When that needs room, another
 * waiting connection is dropped: its socket shut down (its thread's reads
 * end), its address copied to dropped_addr ("" when none was dropped).
 */
void admit_enter(admit *a, admit_entry *e, char *dropped_addr, size_t cap);
/* e's first bytes arrived: it is dropped only after every silent connection. */
void admit_spoke(admit *a, admit_entry *e);
/*
 * e is done waiting (authenticated, refused or gone): out of the table.
 * Returns 1 if it had been dropped to make room, else 0.  The caller closes
 * its fd only after this call.
 */
int admit_leave(admit *a, admit_entry *e);
/* At stop: drop every waiting connection. */
void admit_drop_all(admit *a);
/* Connections waiting now. */
unsigned admit_count(admit *a);

#endif
