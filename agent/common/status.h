/*
 * The agent's status endpoint: a unix socket (mode 0600) that answers one
 * request per connection.  The client writes "json\n" or "text\n"; the
 * server writes what the render callback produced and closes.  The
 * callback runs on the status thread: it must take whatever locks guard
 * the figures it reads.
 */
#ifndef INGEST_STATUS_H
#define INGEST_STATUS_H

#include <stddef.h>

/* Write the status (NUL-terminated, at most cap bytes) as JSON or text. */
typedef void (*status_render_fn)(void *userdata, int json, char *buf, size_t cap);

typedef struct status_server status_server;

/* Listen on path (a stale socket file is replaced); NULL with err set on failure. */
status_server *status_server_start(const char *path, status_render_fn fn, void *userdata, char *err,
                                   size_t errcap);
/* Stop the thread, close and unlink the socket; NULL accepted. */
void status_server_stop(status_server *s);

/* Client side: ask the server at path; the answer goes to out.  0 or -1 with err. */
int status_query(const char *path, int json, char *out, size_t cap, char *err, size_t errcap);

#endif
