/* The core's shared state (include/ingest/core.h): options, the land lock, one link per device. */
#include "core_int.h"

#include <errno.h>
#include <limits.h>
#include <sys/resource.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

size_t ingest_core_thread_stack(void)
{
    size_t n = INGEST_CORE_THREAD_STACK;
    struct rlimit rl;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < n)
        n = (size_t)rl.rlim_cur;
    return n < (size_t)PTHREAD_STACK_MIN ? (size_t)PTHREAD_STACK_MIN : n;
}

int core_thread_start(pthread_t *t, void *(*fn)(void *), void *arg, const char *name)
{
    pthread_attr_t attr;
    int e = pthread_attr_init(&attr);
    if (e != 0)
        return e;
    e = pthread_attr_setstacksize(&attr, ingest_core_thread_stack());
    if (e == 0)
        e = pthread_create(t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (e == 0)
        (void)pthread_setname_np(*t, name); /* top -H, perf: docs/architecture.md "Threads" */
    return e;
}

void core_log(ingest_core *s, int level, const char *fmt, ...)
{
    if (s->o.log == NULL || level > s->o.log_level)
        return;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    s->o.log(s->o.log_userdata, level, msg);
}

double core_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int ingest_core_create(ingest_ctx *ctx, const ingest_core_opts *opts, ingest_core **out)
{
    *out = NULL;
    if (opts == NULL || opts->store == NULL || opts->index == NULL || opts->bronze == NULL || opts->dedup_key == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "core: store, index, bronze and dedup key are required");
    if (opts->features & ~INGEST_SESSION_FEATURES_ALL)
        return ingest__fail(ctx, INGEST_EINVAL, "core: unknown feature bits 0x%x",
                            opts->features & ~INGEST_SESSION_FEATURES_ALL);
    char why[200];
    if (opts->layout != NULL && ingest__path_check_layout(opts->layout, why, sizeof why) != 0)
        return ingest__fail(ctx, INGEST_EINVAL, "core: layout \"%.200s\": %s", opts->layout, why);
    ingest_core *s = ingest__calloc(ctx, 1, sizeof(*s));
    if (s != NULL) {
        s->ctx = ctx;
        pthread_mutex_init(&s->land_lock, NULL);
        ingest__syncs_init(&s->syncs);
        pthread_mutex_init(&s->dev_lock, NULL);
        pthread_cond_init(&s->dev_cond, NULL);
        pthread_mutex_init(&s->budget_lock, NULL);
        pthread_cond_init(&s->budget_cond, NULL);
    }
    if (s == NULL || (s->bronze = ingest__strdup(ctx, opts->bronze)) == NULL || (s->layout = ingest__strdup(ctx, opts->layout != NULL ? opts->layout : INGEST_LANDER_LAYOUT_DEFAULT)) == NULL) {
        ingest_core_destroy(s);
        return ingest__fail(ctx, INGEST_ENOMEM, "core: out of memory");
    }
    s->o = *opts;
    s->o.bronze = s->bronze;
    s->o.layout = s->layout;
    memcpy(s->dedup, opts->dedup_key, sizeof(s->dedup));
    s->o.dedup_key = s->dedup;
    if (opts->metrics != NULL)
        s->m = *opts->metrics;
    s->o.metrics = &s->m;
    if (s->o.queue_budget == 0)
        s->o.queue_budget = INGEST_CORE_QUEUE_BUDGET_DEFAULT;
    *out = s;
    return 0;
}

void ingest_core_destroy(ingest_core *s)
{
    if (s == NULL)
        return;
    pthread_cond_destroy(&s->budget_cond);
    pthread_mutex_destroy(&s->budget_lock);
    pthread_cond_destroy(&s->dev_cond);
    pthread_mutex_destroy(&s->dev_lock);
    pthread_mutex_destroy(&s->land_lock);
    ingest__syncs_destroy(&s->syncs);
    ingest__free(s->ctx, s->active);
    ingest__free(s->ctx, s->bronze);
    ingest__free(s->ctx, s->layout);
    explicit_bzero(s->dedup, sizeof(s->dedup));
    ingest__free(s->ctx, s);
}

void ingest_core_stop(ingest_core *s)
{
    s->stopping = 1;
    pthread_mutex_lock(&s->budget_lock);
    pthread_cond_broadcast(&s->budget_cond);
    pthread_mutex_unlock(&s->budget_lock);
    pthread_mutex_lock(&s->dev_lock);
    pthread_cond_broadcast(&s->dev_cond);
    pthread_mutex_unlock(&s->dev_lock);
}

void ingest_core_stats_get(ingest_core *s, ingest_core_stats *st)
{
    st->batches_landed = s->batches_landed;
    st->batches_failed = s->batches_failed;
    st->chunks_received = s->chunks_received;
    st->bytes_received = s->bytes_received;
    st->links = s->links;
}

void ingest_core_lock(ingest_core *s)
{
    pthread_mutex_lock(&s->land_lock);
}

int ingest_core_trylock(ingest_core *s)
{
    return pthread_mutex_trylock(&s->land_lock) == 0 ? 0 : INGEST_EBUSY;
}

void ingest_core_unlock(ingest_core *s)
{
    pthread_mutex_unlock(&s->land_lock);
}

int core_device_claim(ingest_core *s, const char *device, ingest_link *link)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += INGEST_CORE_DEVICE_WAIT_S;
    pthread_mutex_lock(&s->dev_lock);
    ingest_link *ended = NULL;
    for (;;) {
        size_t i = 0;
        while (i < s->nactive && strcmp(s->active[i].id, device) != 0)
            i++;
        if (i == s->nactive)
            break;
        if (s->active[i].link != ended) {
            ended = s->active[i].link;
            core_log(s, INGEST_LOG_WARN, "device %s: a new session from %s replaces the one from %s", device,
                     link->peer, ended->peer);
            ingest_link_shutdown(ended); /* its batch in flight is not acknowledged: the device re-sends it */
        }
        if (s->stopping || pthread_cond_timedwait(&s->dev_cond, &s->dev_lock, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&s->dev_lock);
            return -1;
        }
    }
    if (s->nactive == s->capactive) {
        const size_t cap = s->capactive ? s->capactive * 2 : 16;
        void *p = ingest__realloc(s->ctx, s->active, s->capactive * sizeof(*s->active), cap * sizeof(*s->active));
        if (p == NULL) {
            pthread_mutex_unlock(&s->dev_lock);
            return -1;
        }
        s->active = p;
        s->capactive = cap;
    }
    snprintf(s->active[s->nactive].id, sizeof(s->active[0].id), "%s", device);
    s->active[s->nactive++].link = link;
    pthread_mutex_unlock(&s->dev_lock);
    return 0;
}

void core_device_release(ingest_core *s, const char *device)
{
    pthread_mutex_lock(&s->dev_lock);
    for (size_t i = 0; i < s->nactive; i++)
        if (strcmp(s->active[i].id, device) == 0) {
            memmove(&s->active[i], &s->active[i + 1], (s->nactive - i - 1) * sizeof(s->active[0]));
            s->nactive--;
            break;
        }
    pthread_cond_broadcast(&s->dev_cond);
    pthread_mutex_unlock(&s->dev_lock);
}
