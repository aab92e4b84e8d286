/*
 * The Prometheus endpoint: a deliberately small HTTP/1.0 responder that
 * answers GET /metrics with the registry's text exposition and 404 to
 * anything else.  One thread, one connection at a time, a request read of at
 * most 8 KiB within 2 s, then the connection is closed.  Hand-written
 * rather than libmicrohttpd, which would pull gnutls into the edge daemon
 * for one fixed resource on a loopback port.
 */
#ifndef INGEST_HTTP_H
#define INGEST_HTTP_H

#include <ingest.h>
#include <ingest/metrics.h>
#include <stddef.h>

typedef struct metrics_http metrics_http;

/* Listen on address (host:port) and serve m; bound gets the address bound. NULL with err on failure. */
metrics_http *metrics_http_start(const char *address, ingest_metrics *m, char *bound, size_t bound_cap, char *err,
                                 size_t errcap);
void metrics_http_stop(metrics_http *h);

#endif
