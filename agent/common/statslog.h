/*
 * --stats-interval: a thread that logs the metrics registry as one JSON
 * line ("stats {...}", level info) every interval seconds, and once more
 * when stopped, so a run always ends with its figures in the log.
 */
#ifndef INGEST_STATSLOG_H
#define INGEST_STATSLOG_H

#include <ingest.h>
#include <ingest/metrics.h>

typedef struct stats_logger stats_logger;

/* NULL with errno set when the thread cannot start. */
stats_logger *stats_logger_start(ingest_metrics *m, double interval_s);
/* Logs the final line, ends the thread and frees it (NULL is fine). */
void stats_logger_stop(stats_logger *l);
/* Parse a --stats-interval value: seconds, > 0 and at most a day; -1 when bad. */
double stats_interval_parse(const char *s);

#endif
