/* Token bucket and daily window for the edge's wire rate (throttle.h). */
#include "ingest/throttle.h"
#include "../internal.h"

#include <string.h>

struct ingest_throttle_s {
    ingest_ctx *ctx;
    uint64_t rate;       /* bytes per second; 0: unlimited */
    double tokens;       /* may go negative (debt) after a large request */
    int64_t last_ns;     /* when tokens were last refilled; 0: never */
    int window;          /* 1 when a window is set */
    int start_min, end_min;
};

int ingest_throttle_parse_window(const char *s, int *start_min, int *end_min)
{
    int v[4];
    const char *p = s;
    for (int i = 0; i < 4; i++) {
        if (p[0] < '0' || p[0] > '9' || p[1] < '0' || p[1] > '9')
            return INGEST_EINVAL;
        v[i] = (p[0] - '0') * 10 + (p[1] - '0');
        p += 2;
        const char sep = i == 0 || i == 2 ? ':' : i == 1 ? '-' : '\0';
        if (*p != sep)
            return INGEST_EINVAL;
        if (sep)
            p++;
    }
    if (v[0] > 23 || v[2] > 23 || v[1] > 59 || v[3] > 59)
        return INGEST_EINVAL;
    *start_min = v[0] * 60 + v[1];
    *end_min = v[2] * 60 + v[3];
    return *start_min == *end_min ? INGEST_EINVAL : INGEST_OK;
}

int ingest_throttle_create(ingest_ctx *ctx, uint64_t rate, const char *window, ingest_throttle **out)
{
    *out = NULL;
    ingest_throttle *t = ingest__calloc(ctx, 1, sizeof(*t));
    if (t == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "throttle: out of memory");
    t->ctx = ctx;
    t->rate = rate;
    t->tokens = (double)rate;
    if (window != NULL && window[0] != '\0') {
        if (ingest_throttle_parse_window(window, &t->start_min, &t->end_min) != 0) {
            ingest__free(ctx, t);
            return ingest__fail(ctx, INGEST_EINVAL,
                                "throttle: window '%s' is not HH:MM-HH:MM with two different times", window);
        }
        t->window = 1;
    }
    *out = t;
    return INGEST_OK;
}

void ingest_throttle_destroy(ingest_throttle *t)
{
    if (t != NULL)
        ingest__free(t->ctx, t);
}

/* Minutes from m until the window opens (0 when inside it). */
static int minutes_to_window(const ingest_throttle *t, int m)
{
    const int s = t->start_min, e = t->end_min;
    const int inside = s < e ? (m >= s && m < e) : (m >= s || m < e);
    if (inside)
        return 0;
    return (s - m + 1440) % 1440;
}

int64_t ingest_throttle_delay(ingest_throttle *t, uint64_t n, int64_t now_ns, int minute_of_day)
{
    if (t->window) {
        const int wait_min = minutes_to_window(t, minute_of_day);
        if (wait_min > 0)
            return (int64_t)wait_min * 60000;
    }
    if (t->rate == 0)
        return 0;
    if (t->last_ns != 0 && now_ns > t->last_ns) {
        t->tokens += (double)(now_ns - t->last_ns) * 1e-9 * (double)t->rate;
        if (t->tokens > (double)t->rate)
            t->tokens = (double)t->rate;
    }
    t->last_ns = now_ns;
    /* A request up to the burst needs that many tokens; a larger one needs a full bucket. */
    const double need = (double)n < (double)t->rate ? (double)n : (double)t->rate;
    if (t->tokens >= need) {
        t->tokens -= (double)n;
        return 0;
    }
    const double wait_s = (need - t->tokens) / (double)t->rate;
    const int64_t ms = (int64_t)(wait_s * 1000.0) + 1;
    return ms;
}
