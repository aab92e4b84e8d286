/* The configuration loader's entry points: load and parse either program's file, free it, list the keys (config_int.h). */
#include "config_int.h"

/* ---- public loaders ------------------------------------------------------ */

typedef struct agent_holder {
    ingest_ctx *ctx;
    ingest_agent_config cfg;
} agent_holder;

typedef struct receiver_holder {
    ingest_ctx *ctx;
    ingest_receiver_config cfg;
} receiver_holder;

int ingest_agent_config_parse(ingest_ctx *ctx, const char *name, const void *data, size_t len,
                              ingest_agent_config **out)
{
    *out = NULL;
    agent_holder *h = ingest__calloc(ctx, 1, sizeof(*h));
    if (h == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "%s: out of memory", name);
    h->ctx = ctx;
    const int rc = cfg__load_mem(ctx, &cfg__agent_schema, name, data, len, &h->cfg);
    if (rc != INGEST_OK) {
        ingest_agent_config_free(&h->cfg);
        return rc;
    }
    *out = &h->cfg;
    return INGEST_OK;
}

int ingest_agent_config_load(ingest_ctx *ctx, const char *path, ingest_agent_config **out)
{
    char *data;
    size_t len;
    *out = NULL;
    INGEST__FORWARD(cfg__read_file(ctx, path, &data, &len));
    const int rc = ingest_agent_config_parse(ctx, path, data, len, out);
    ingest__free(ctx, data);
    return rc;
}

void ingest_agent_config_free(ingest_agent_config *cfg)
{
    if (cfg == NULL)
        return;
    agent_holder *h = (agent_holder *)(void *)((char *)cfg - offsetof(agent_holder, cfg));
    ingest_ctx *ctx = h->ctx;
    cfg__free_obj(ctx, &cfg__agent_schema, "", cfg);
    ingest__free(ctx, h);
}

int ingest_receiver_config_parse(ingest_ctx *ctx, const char *name, const void *data, size_t len,
                                 ingest_receiver_config **out)
{
    *out = NULL;
    receiver_holder *h = ingest__calloc(ctx, 1, sizeof(*h));
    if (h == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "%s: out of memory", name);
    h->ctx = ctx;
    const int rc = cfg__load_mem(ctx, &cfg__receiver_schema, name, data, len, &h->cfg);
    if (rc != INGEST_OK) {
        ingest_receiver_config_free(&h->cfg);
        return rc;
    }
    *out = &h->cfg;
    return INGEST_OK;
}

int ingest_receiver_config_load(ingest_ctx *ctx, const char *path, ingest_receiver_config **out)
{
    char *data;
    size_t len;
    *out = NULL;
    INGEST__FORWARD(cfg__read_file(ctx, path, &data, &len));
    const int rc = ingest_receiver_config_parse(ctx, path, data, len, out);
    ingest__free(ctx, data);
    return rc;
}

void ingest_receiver_config_free(ingest_receiver_config *cfg)
{
    if (cfg == NULL)
        return;
    receiver_holder *h = (receiver_holder *)(void *)((char *)cfg - offsetof(receiver_holder, cfg));
    ingest_ctx *ctx = h->ctx;
    cfg__free_obj(ctx, &cfg__receiver_schema, "", cfg);
    ingest__free(ctx, h);
}

/* ---- key reference ------------------------------------------------------- */

/* 64KiB, 5MiB, 1000 (no exact binary unit): the largest unit that divides. */
static void fmt_size(char *out, size_t cap, uint64_t v)
{
    static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    size_t u = 0;
    while (u < 4 && v != 0 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    snprintf(out, cap, "%" PRIu64 "%s", v, units[u]);
}

static void fmt_duration(char *out, size_t cap, uint64_t ms)
{
    if (ms != 0 && ms % HOUR == 0)
        snprintf(out, cap, "%" PRIu64 "h", ms / HOUR);
    else if (ms != 0 && ms % 60000 == 0)
        snprintf(out, cap, "%" PRIu64 "m", ms / 60000);
    else if (ms != 0 && ms % SEC == 0)
        snprintf(out, cap, "%" PRIu64 "s", ms / SEC);
    else
        snprintf(out, cap, "%" PRIu64 "ms", ms);
}

static const cfg_schema *schema_of(int program)
{
    return program == INGEST_CONFIG_AGENT      ? &cfg__agent_schema
           : program == INGEST_CONFIG_RECEIVER ? &cfg__receiver_schema
                                               : NULL;
}

int ingest_config_keys(int program, ingest_config_key_fn fn, void *userdata)
{
    const cfg_schema *schema = schema_of(program);
    if (schema == NULL)
        return ingest__fail(NULL, INGEST_EINVAL, "no such program");
    for (size_t i = 0; i < schema->nrows; i++) {
        const cfg_row *row = &schema->rows[i];
        char bounds[160] = "", lo[32], hi[32];
        switch (row->type) {
        case T_INT:
            snprintf(bounds, sizeof(bounds), "%" PRId64 "..%" PRId64, row->min, row->max);
            break;
        case T_SIZE:
        case T_RATE:
            fmt_size(lo, sizeof(lo), (uint64_t)row->min);
            fmt_size(hi, sizeof(hi), (uint64_t)row->max);
            snprintf(bounds, sizeof(bounds), "%s..%s%s", lo, hi, row->type == T_RATE ? "/s" : "");
            break;
        case T_DURATION:
            fmt_duration(lo, sizeof(lo), (uint64_t)row->min);
            fmt_duration(hi, sizeof(hi), (uint64_t)row->max);
            snprintf(bounds, sizeof(bounds), "%s..%s", lo, hi);
            break;
        case T_ENUM:
            for (const cfg_enum *e = row->enums; e->name != NULL; e++) {
                if (e != row->enums)
                    strncat(bounds, "|", sizeof(bounds) - strlen(bounds) - 1);
                strncat(bounds, e->name, sizeof(bounds) - strlen(bounds) - 1);
            }
            break;
        case T_LIST:
        case T_STRLIST:
        case T_MAP:
            snprintf(bounds, sizeof(bounds), "%" PRId64 "..%" PRId64 " entries", row->min, row->max);
            break;
        default:
            break;
        }
        const ingest_config_key key = {
            .name = row->name,
            .type = cfg__type_name(row->type),
            .required = (row->flags & F_REQUIRED) != 0,
            .default_value = row->def ? row->def : row->def_doc ? row->def_doc : "",
            .bounds = bounds,
            .description = row->desc,
        };
        const int rc = fn(userdata, &key);
        if (rc != 0)
            return rc;
    }
    return INGEST_OK;
}

typedef struct help_writer {
    char *buf;
    size_t cap, len;
} help_writer;

static void help_put(help_writer *w, const char *fmt, ...) INGEST__PRINTF(2, 3);

static void help_put(help_writer *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const size_t room = w->len < w->cap ? w->cap - w->len : 0;
    const int n = vsnprintf(room ? w->buf + w->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        w->len += (size_t)n;
}

static int help_key(void *userdata, const ingest_config_key *k)
{
    help_writer *w = userdata;
    help_put(w, "  %-24s %s", k->name, k->type);
    if (k->bounds[0] != '\0')
        help_put(w, " %s", k->bounds);
    if (k->required)
        help_put(w, ", required");
    else if (strcmp(k->type, "list") != 0 && k->default_value[0] == '\0')
        help_put(w, ", default \"\"");
    else if (strcmp(k->type, "list") != 0)
        help_put(w, ", default %s", k->default_value);
    help_put(w, "\n      %s\n", k->description);
    return 0;
}

size_t ingest_config_help(int program, char *buf, size_t cap)
{
    help_writer w = { buf, cap, 0 };
    if (cap > 0)
        buf[0] = '\0';
    if (schema_of(program) == NULL)
        return 0;
    help_put(&w, "Configuration keys (sizes: B KiB MiB GiB TiB kB MB GB TB; durations: ms s m h):\n");
    (void)ingest_config_keys(program, help_key, &w);
    if (cap > 0 && w.len >= cap)
        buf[cap - 1] = '\0';
    return w.len;
}

