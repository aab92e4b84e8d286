/*
 * The walk's helper thread (internal to the sender).  A walk is mostly
 * system calls: getdents64 to list a directory and fstatat per name.  The
 * helper shares the fstatat of each block of names with the walking thread
 * (both claim names from one counter, so neither waits while the other has
 * work) and, between blocks, lists the next sibling directory ahead
 * (openat + getdents64 into a buffer of its own).
 *
 * The helper allocates nothing and touches no library state: it works on
 * the buffers given to it, so the context's allocator and error message
 * stay the walking thread's alone.  Without a thread (pthread_create
 * failed) every call still works, on the calling thread.
 */
#ifndef INGEST_WALKAHEAD_H
#define INGEST_WALKAHEAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

typedef struct ingest__walkahead ingest__walkahead;

/* Bytes of getdents64 records the helper reads ahead of one directory. */
#define INGEST__WA_LISTBUF (256u * 1024u)

int ingest__wa_create(ingest_ctx *ctx, ingest__walkahead **out);
/* Waits for the helper's work, closes a pending listing's fd, joins the thread. */
void ingest__wa_destroy(ingest__walkahead *wa);

/*
 * fstatat(dirfd, names[i], &st[i], AT_SYMLINK_NOFOLLOW) for i < n, err[i]
 * = 0 or the errno; shared with the helper.  Returns when all n are done.
 */
void ingest__wa_stat(ingest__walkahead *wa, int dirfd, char *const *names, size_t n, struct stat *st, int *err);

/*
 * Start listing directory `name` under dirfd on the helper: openat, then
 * getdents64 until the buffer is full or the directory ends.  `tag` names
 * the request for ingest__wa_take.  Returns 0, or -1 when a listing is
 * already pending or there is no helper (the caller lists it itself).
 * dirfd and name must stay valid until the listing is taken or dropped.
 */
int ingest__wa_list(ingest__walkahead *wa, int dirfd, const char *name, uint64_t tag);

/* The tag of the pending listing, or 0 when there is none. */
uint64_t ingest__wa_pending(ingest__walkahead *wa);

/*
 * Wait for the pending listing and hand it over: *fd (owned by the caller
 * from now on; -1 with *err the errno when openat failed), the records read
 * in buf[0, *len), *eof set when getdents64 reported the end.  buf stays
 * valid until the second ingest__wa_list after this one (the helper fills
 * two buffers in turn, so the next listing may be asked for before this
 * one is parsed).  Returns 0, or -1 when none was pending.
 */
int ingest__wa_take(ingest__walkahead *wa, int *fd, int *err, const uint8_t **buf, size_t *len, int *eof);

/* Wait for the pending listing, if any, and throw it away. */
void ingest__wa_drop(ingest__walkahead *wa);

#endif
