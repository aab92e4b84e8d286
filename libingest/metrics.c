/* Counters, gauges and histograms rendered as Prometheus text (metrics.h). */
#include "ingest/metrics.h"
#include "internal.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define LV_MAX 64

typedef struct series {
    _Atomic int used;               /* 0 free, 1 claiming, 2 ready */
    char lv[LV_MAX];
    _Atomic int64_t value;          /* counter, gauge; histogram count */
    _Atomic uint64_t buckets[INGEST_METRICS_BUCKETS + 1];
    _Atomic uint64_t sum_micro;     /* histogram sum in millionths */
} series;

struct ingest_metric_s {
    int type;
    char name[96];
    char help[160];
    char label[32];
    double bounds[INGEST_METRICS_BUCKETS];
    unsigned nbounds;
    series s[INGEST_METRICS_LABELS + 1]; /* the last one is "other" */
};

struct ingest_metrics_s {
    ingest_ctx *ctx;
    unsigned n;
    ingest_metric *m[INGEST_METRICS_MAX];
};

int ingest_metrics_create(ingest_ctx *ctx, ingest_metrics **out)
{
    *out = ingest__calloc(ctx, 1, sizeof(**out));
    if (*out == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "metrics: out of memory");
    (*out)->ctx = ctx;
    return INGEST_OK;
}

void ingest_metrics_destroy(ingest_metrics *m)
{
    if (m == NULL)
        return;
    for (unsigned i = 0; i < m->n; i++)
        ingest__free(m->ctx, m->m[i]);
    ingest__free(m->ctx, m);
}

static int name_ok(const char *s, size_t max)
{
    const size_t n = strlen(s);
    if (n == 0 || n >= max)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        const int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

int ingest_metric_define(ingest_metrics *m, int type, const char *name, const char *help, const char *label,
                         const double *buckets, unsigned nbuckets, ingest_metric **out)
{
    *out = NULL;
    if (m->n >= INGEST_METRICS_MAX)
        return ingest__fail(m->ctx, INGEST_ENOSPC, "metrics: more than %d metrics", INGEST_METRICS_MAX);
    if (!name_ok(name, sizeof((*out)->name)) || (label && !name_ok(label, sizeof((*out)->label))) ||
        type < INGEST_METRIC_COUNTER || type > INGEST_METRIC_SECONDS ||
        (type == INGEST_METRIC_HISTOGRAM) != (buckets != NULL && nbuckets > 0) || nbuckets > INGEST_METRICS_BUCKETS)
        return ingest__fail(m->ctx, INGEST_EINVAL, "metrics: bad definition of '%s'", name);
    for (unsigned i = 1; i < nbuckets; i++)
        if (!(buckets[i] > buckets[i - 1]))
            return ingest__fail(m->ctx, INGEST_EINVAL, "metrics: buckets of '%s' not ascending", name);
    ingest_metric *x = ingest__calloc(m->ctx, 1, sizeof(*x));
    if (x == NULL)
        return ingest__fail(m->ctx, INGEST_ENOMEM, "metrics: out of memory");
    x->type = type;
    snprintf(x->name, sizeof(x->name), "%s", name);
    snprintf(x->help, sizeof(x->help), "%s", help ? help : "");
    if (label)
        snprintf(x->label, sizeof(x->label), "%s", label);
    for (unsigned i = 0; i < nbuckets; i++)
        x->bounds[i] = buckets[i];
    x->nbounds = nbuckets;
    m->m[m->n++] = x;
    *out = x;
    return INGEST_OK;
}

/* The series of lv, claimed on first use without a lock. */
static series *find(ingest_metric *x, const char *lv)
{
    if (lv == NULL || x->label[0] == '\0')
        lv = "";
    for (unsigned i = 0; i < INGEST_METRICS_LABELS; i++) {
        series *s = &x->s[i];
        int u = atomic_load(&s->used);
        if (u == 0) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&s->used, &expect, 1)) {
                snprintf(s->lv, sizeof(s->lv), "%s", lv);
                atomic_store(&s->used, 2);
                return s;
            }
            u = atomic_load(&s->used);
        }
        while (u == 1)
            u = atomic_load(&s->used);
        if (strcmp(s->lv, lv) == 0)
            return s;
    }
    series *o = &x->s[INGEST_METRICS_LABELS];
    if (atomic_load(&o->used) != 2) {
        snprintf(o->lv, sizeof(o->lv), "other");
        atomic_store(&o->used, 2);
    }
    return o;
}

void ingest_metric_add(ingest_metric *x, const char *lv, uint64_t n)
{
    if (x == NULL)
        return;
    atomic_fetch_add(&find(x, lv)->value, (int64_t)n);
}

void ingest_metric_add_seconds(ingest_metric *x, const char *lv, double seconds)
{
    if (x == NULL || !(seconds > 0))
        return;
    atomic_fetch_add(&find(x, lv)->value, (int64_t)(seconds * 1e6 + 0.5));
}

void ingest_metric_set(ingest_metric *x, const char *lv, int64_t v)
{
    if (x == NULL)
        return;
    atomic_store(&find(x, lv)->value, v);
}

void ingest_metric_observe(ingest_metric *x, const char *lv, double v)
{
    if (x == NULL)
        return;
    series *s = find(x, lv);
    unsigned b = 0;
    while (b < x->nbounds && v > x->bounds[b])
        b++;
    atomic_fetch_add(&s->buckets[b], 1);
    atomic_fetch_add(&s->value, 1);
    atomic_fetch_add(&s->sum_micro, (uint64_t)(v > 0 ? v * 1e6 : 0));
}

int64_t ingest_metric_get(ingest_metric *x, const char *lv)
{
    return atomic_load(&find(x, lv)->value);
}

typedef struct out {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...) INGEST__PRINTF(2, 3);
static void put(out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(o->len < o->cap ? o->buf + o->len : NULL, o->len < o->cap ? o->cap - o->len : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

/* `{label="value"` with the value escaped as the exposition format wants. */
static void put_label(out *o, const ingest_metric *x, const series *s, const char *extra)
{
    if (x->label[0] == '\0' && extra == NULL)
        return;
    put(o, "{");
    if (x->label[0] != '\0') {
        put(o, "%s=\"", x->label);
        for (const char *c = s->lv; *c; c++)
            put(o, "%s", *c == '"' ? "\\\"" : *c == '\\' ? "\\\\" : *c == '\n' ? "\\n" : (char[]){ *c, 0 });
        put(o, "\"%s", extra ? "," : "");
    }
    if (extra)
        put(o, "%s", extra);
    put(o, "}");
}

size_t ingest_metrics_render(ingest_metrics *m, char *buf, size_t cap)
{
    out o = { buf, cap, 0 };
    if (cap)
        buf[0] = '\0';
    static const char *const types[] = { "", "counter", "gauge", "histogram", "counter" };
    for (unsigned i = 0; i < m->n; i++) {
        ingest_metric *x = m->m[i];
        put(&o, "# HELP %s %s\n# TYPE %s %s\n", x->name, x->help, x->name, types[x->type]);
        int any = 0;
        for (unsigned k = 0; k <= INGEST_METRICS_LABELS; k++) {
            series *s = &x->s[k];
            if (atomic_load(&s->used) != 2)
                continue;
            any = 1;
            if (x->type == INGEST_METRIC_SECONDS) {
                put(&o, "%s", x->name);
                put_label(&o, x, s, NULL);
                put(&o, " %.6f\n", (double)atomic_load(&s->value) / 1e6);
                continue;
            }
            if (x->type != INGEST_METRIC_HISTOGRAM) {
                put(&o, "%s", x->name);
                put_label(&o, x, s, NULL);
                put(&o, " %lld\n", (long long)atomic_load(&s->value));
                continue;
            }
            uint64_t cum = 0;
            char le[64];
            for (unsigned b = 0; b <= x->nbounds; b++) {
                cum += atomic_load(&s->buckets[b]);
                if (b < x->nbounds)
                    snprintf(le, sizeof(le), "le=\"%g\"", x->bounds[b]);
                else
                    snprintf(le, sizeof(le), "le=\"+Inf\"");
                put(&o, "%s_bucket", x->name);
                put_label(&o, x, s, le);
                put(&o, " %llu\n", (unsigned long long)cum);
            }
            put(&o, "%s_sum", x->name);
            put_label(&o, x, s, NULL);
            put(&o, " %.6f\n", (double)atomic_load(&s->sum_micro) / 1e6);
            put(&o, "%s_count", x->name);
            put_label(&o, x, s, NULL);
            put(&o, " %llu\n", (unsigned long long)cum);
        }
        if (!any && x->label[0] == '\0' && x->type != INGEST_METRIC_HISTOGRAM)
            put(&o, "%s 0\n", x->name);
    }
    return o.len;
}

/* A JSON string of s (names and label values are plain ASCII, but be safe). */
static void put_json_str(out *o, const char *s)
{
    put(o, "\"");
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            put(o, "\\%c", c);
        else if (c < 0x20)
            put(o, "\\u%04x", c);
        else
            put(o, "%c", c);
    }
    put(o, "\"");
}

static void put_json_value(out *o, const ingest_metric *x, series *s)
{
    if (x->type == INGEST_METRIC_SECONDS) {
        put(o, "%.6f", (double)atomic_load(&s->value) / 1e6);
    } else if (x->type != INGEST_METRIC_HISTOGRAM) {
        put(o, "%lld", (long long)atomic_load(&s->value));
    } else {
        uint64_t cum = 0;
        put(o, "{\"buckets\":{");
        for (unsigned b = 0; b <= x->nbounds; b++) {
            cum += atomic_load(&s->buckets[b]);
            if (b < x->nbounds)
                put(o, "%s\"%g\":%llu", b ? "," : "", x->bounds[b], (unsigned long long)cum);
            else
                put(o, "%s\"+Inf\":%llu", b ? "," : "", (unsigned long long)cum);
        }
        put(o, "},\"sum\":%.6f,\"count\":%llu}", (double)atomic_load(&s->sum_micro) / 1e6,
            (unsigned long long)cum);
    }
}

size_t ingest_metrics_render_json(ingest_metrics *m, char *buf, size_t cap)
{
    out o = { buf, cap, 0 };
    if (cap)
        buf[0] = '\0';
    put(&o, "{");
    for (unsigned i = 0; i < m->n; i++) {
        ingest_metric *x = m->m[i];
        put(&o, "%s", i ? "," : "");
        put_json_str(&o, x->name);
        put(&o, ":");
        if (x->label[0] == '\0') {
            series *s = &x->s[0];
            if (atomic_load(&s->used) == 2)
                put_json_value(&o, x, s);
            else
                put(&o, "0");
            continue;
        }
        put(&o, "{");
        int n = 0;
        for (unsigned k = 0; k <= INGEST_METRICS_LABELS; k++) {
            series *s = &x->s[k];
            if (atomic_load(&s->used) != 2)
                continue;
            put(&o, "%s", n++ ? "," : "");
            put_json_str(&o, s->lv);
            put(&o, ":");
            put_json_value(&o, x, s);
        }
        put(&o, "}");
    }
    put(&o, "}");
    return o.len;
}
