/*
 * Metrics: counters, gauges and histograms with an optional label, rendered
 * as Prometheus text exposition (version 0.0.4).  A registry is filled at
 * start (define), then updated from any thread (add/set/observe are atomic
 * and lock-free) and rendered by the endpoint's thread.
 *
 * THREAD SAFETY: define and destroy from one thread before/after use;
 * ingest_metric_add/set/observe and ingest_metrics_render from any thread.
 */
#ifndef INGEST_METRICS_H
#define INGEST_METRICS_H

#include "ingest/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_METRICS_MAX 128          /* metrics per registry */
#define INGEST_METRICS_LABELS 16        /* label values per metric */
#define INGEST_METRICS_BUCKETS 16       /* histogram buckets (+Inf is added) */

/* SECONDS: a counter of seconds (kept in microseconds, rendered as a
 * Prometheus counter with six decimals); add to it with
 * ingest_metric_add_seconds. */
enum { INGEST_METRIC_COUNTER = 1, INGEST_METRIC_GAUGE = 2, INGEST_METRIC_HISTOGRAM = 3, INGEST_METRIC_SECONDS = 4 };

typedef struct ingest_metrics_s ingest_metrics;
typedef struct ingest_metric_s ingest_metric;

INGEST_API int ingest_metrics_create(ingest_ctx *ctx, ingest_metrics **out) INGEST_WUR;
INGEST_API void ingest_metrics_destroy(ingest_metrics *m);

/*
 * Define a metric.  name: [a-zA-Z_:][a-zA-Z0-9_:]* (counters end in
 * "_total"); label: a label name or NULL; buckets: the upper bounds of a
 * histogram, ascending (nbuckets <= INGEST_METRICS_BUCKETS), else NULL.
 */
INGEST_API int ingest_metric_define(ingest_metrics *m, int type, const char *name, const char *help,
                                    const char *label, const double *buckets, unsigned nbuckets,
                                    ingest_metric **out);
/*
 * Update the series of label value lv (NULL or "" when the metric has no
 * label; a metric keeps up to INGEST_METRICS_LABELS values, later ones are
 * folded into lv="other").  x may be NULL (metrics off): nothing happens.
 */
INGEST_API void ingest_metric_add(ingest_metric *x, const char *lv, uint64_t n);
INGEST_API void ingest_metric_set(ingest_metric *x, const char *lv, int64_t v);
INGEST_API void ingest_metric_observe(ingest_metric *x, const char *lv, double v);
/* Add seconds (> 0) to a SECONDS counter. */
INGEST_API void ingest_metric_add_seconds(ingest_metric *x, const char *lv, double seconds);
/* Current value of a counter or gauge series (0 when absent). */
INGEST_API int64_t ingest_metric_get(ingest_metric *x, const char *lv);

/* Render everything as Prometheus text into buf (NUL-terminated); returns the length needed. */
INGEST_API size_t ingest_metrics_render(ingest_metrics *m, char *buf, size_t cap);
/*
 * The same figures as one JSON object (NUL-terminated; returns the length
 * needed): {"name": value} for a metric without a label, {"name": {"label
 * value": value, ...}} with one; a histogram's value is {"buckets": {"le":
 * cumulative count, ..., "+Inf": count}, "sum": s, "count": n}.
 */
INGEST_API size_t ingest_metrics_render_json(ingest_metrics *m, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
