/*
 * Wire-rate throttle of the edge: a token bucket (throttle.rate, bytes per
 * second, burst of one second) and an optional daily window
 * (throttle.window, "HH:MM-HH:MM" in local time, may wrap past midnight)
 * outside of which nothing is sent.  Time is passed in, so the throttle is
 * deterministic and testable; it never sleeps itself.
 *
 * THREAD SAFETY: one thread at a time.
 */
#ifndef INGEST_THROTTLE_H
#define INGEST_THROTTLE_H

#include "ingest/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ingest_throttle_s ingest_throttle;

/*
 * rate: bytes per second, 0 for unlimited.  window: "HH:MM-HH:MM" or
 * NULL/"" for always.  INGEST_EINVAL for a malformed window (detail in ctx).
 */
INGEST_API int ingest_throttle_create(ingest_ctx *ctx, uint64_t rate, const char *window,
                                      ingest_throttle **out) INGEST_WUR;
INGEST_API void ingest_throttle_destroy(ingest_throttle *t);

/* Parse "HH:MM-HH:MM" into minutes of the day; 0 or INGEST_EINVAL. */
INGEST_API int ingest_throttle_parse_window(const char *s, int *start_min, int *end_min);

/*
 * Milliseconds to wait before n bytes may be sent at now_ns (monotonic
 * nanoseconds); 0 means send now, and then the bytes are taken from the
 * bucket.  minute_of_day is the local time of day in minutes (0..1439),
 * for the window; outside the window the wait runs to its start.  A
 * request larger than the burst waits until the bucket is full and then
 * goes, leaving the bucket in debt, so the long-run rate holds.
 */
INGEST_API int64_t ingest_throttle_delay(ingest_throttle *t, uint64_t n, int64_t now_ns, int minute_of_day);

#ifdef __cplusplus
}
#endif
#endif
