/* --stats-interval: the metrics as periodic JSON log lines (statslog.h). */
#include "statslog.h"
#include "prog.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct stats_logger {
    ingest_metrics *m;
    double interval;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int quit;
    char *buf;
    size_t cap;
};

static void log_once(stats_logger *l)
{
    size_t need = ingest_metrics_render_json(l->m, l->buf, l->cap);
    if (need >= l->cap) {
        char *nb = realloc(l->buf, need + 1024);
        if (nb == NULL)
            return;
        l->buf = nb;
        l->cap = need + 1024;
        need = ingest_metrics_render_json(l->m, l->buf, l->cap);
    }
    if (need < l->cap)
        prog_log(INGEST_LOG_INFO, "stats %s", l->buf);
}

static void *run(void *arg)
{
    (void)pthread_setname_np(pthread_self(), "ingest-stats"); /* docs/architecture.md "Threads" */
    stats_logger *l = arg;
    pthread_mutex_lock(&l->lock);
    while (!l->quit) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        const double t = (double)until.tv_sec + (double)until.tv_nsec / 1e9 + l->interval;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        while (!l->quit && pthread_cond_timedwait(&l->cond, &l->lock, &until) != ETIMEDOUT)
            ;
        if (l->quit)
            break;
        pthread_mutex_unlock(&l->lock);
        log_once(l);
        pthread_mutex_lock(&l->lock);
    }
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

stats_logger *stats_logger_start(ingest_metrics *m, double interval_s)
{
    stats_logger *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->m = m;
    l->interval = interval_s;
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    const int e = pthread_create(&l->thread, NULL, run, l);
    if (e != 0) {
        pthread_cond_destroy(&l->cond);
        pthread_mutex_destroy(&l->lock);
        free(l);
        errno = e;
        return NULL;
    }
    return l;
}

void stats_logger_stop(stats_logger *l)
{
    if (l == NULL)
        return;
    pthread_mutex_lock(&l->lock);
    l->quit = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
    pthread_join(l->thread, NULL);
    log_once(l);
    pthread_cond_destroy(&l->cond);
    pthread_mutex_destroy(&l->lock);
    free(l->buf);
    free(l);
}

double stats_interval_parse(const char *s)
{
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !(v > 0) || v > 86400)
        return -1;
    return v;
}
