/* The configuration's parser: rows and instances, and the walk over libyaml's events (config_int.h). */
#include "config_int.h"

/* ---- rows and instances -------------------------------------------------- */

/* Does row belong to the object whose rows are named prefix + KEY? */
static bool row_member(const cfg_row *row, const char *prefix)
{
    const size_t n = strlen(prefix);
    return strncmp(row->name, prefix, n) == 0 && strstr(row->name + n, "[]") == NULL;
}

static const cfg_row *find_row(const cfg_parser *p, const cfg_inst *inst, const char *full)
{
    for (size_t i = 0; i < p->schema->nrows; i++) {
        const cfg_row *row = &p->schema->rows[i];
        if (row_member(row, inst->prefix) && strcmp(row->name, full) == 0)
            return row;
    }
    return NULL;
}

/* Is full a section (a prefix of some member row followed by '.')? */
static bool is_section(const cfg_parser *p, const cfg_inst *inst, const char *full)
{
    const size_t n = strlen(full);
    for (size_t i = 0; i < p->schema->nrows; i++) {
        const cfg_row *row = &p->schema->rows[i];
        if (row_member(row, inst->prefix) && strncmp(row->name, full, n) == 0 && row->name[n] == '.')
            return true;
    }
    return false;
}

cfg_mark cfg__mark_of(const cfg_parser *p, const cfg_inst *inst, const char *name)
{
    for (size_t i = 0; i < p->schema->nrows; i++)
        if (strcmp(p->schema->rows[i].name, name) == 0 && inst->seen[i].line != 0)
            return inst->seen[i];
    return inst->start;
}

static char **field_str(void *base, const cfg_row *row) { return (char **)((char *)base + row->off); }

static void store_uint(void *base, const cfg_row *row, uint64_t v)
{
    void *f = (char *)base + row->off;
    if (row->width == 4) {
        const uint32_t t = (uint32_t)v;
        memcpy(f, &t, 4);
    } else {
        memcpy(f, &v, 8);
    }
}

/* Free the strings and lists of one object. */
void cfg__free_obj(ingest_ctx *ctx, const cfg_schema *schema, const char *prefix, void *base)
{
    for (size_t i = 0; i < schema->nrows; i++) {
        const cfg_row *row = &schema->rows[i];
        if (!row_member(row, prefix))
            continue;
        if (row->type == T_STRING || row->type == T_PATH) {
            char **s = field_str(base, row);
            ingest__free(ctx, *s);
            *s = NULL;
        } else if (row->type == T_LIST) {
            char sub[CFG_NAME_MAX];
            snprintf(sub, sizeof(sub), "%s[].", row->name);
            void **arr = (void **)((char *)base + row->off);
            size_t *count = (size_t *)((char *)base + row->count_off);
            for (size_t k = 0; *arr != NULL && k < *count; k++)
                cfg__free_obj(ctx, schema, sub, (char *)*arr + k * row->elem_size);
            ingest__free(ctx, *arr);
            *arr = NULL;
            *count = 0;
        } else if (row->type == T_STRLIST || row->type == T_MAP) {
            char ***arr = (char ***)(void *)((char *)base + row->off);
            size_t *count = (size_t *)((char *)base + row->count_off);
            for (size_t k = 0; *arr != NULL && k < *count; k++)
                ingest__free(ctx, (*arr)[k]);
            ingest__free(ctx, *arr);
            *arr = NULL;
            *count = 0;
        }
    }
}

/* Resolve a relative path against the config file's directory. */
char *cfg__resolve_path(cfg_parser *p, const char *v)
{
    if (v[0] == '\0' || v[0] == '/')
        return ingest__strdup(p->ctx, v);
    const size_t a = strlen(p->basedir), b = strlen(v);
    char *s = ingest__malloc(p->ctx, a + b + 2);
    if (s == NULL)
        return NULL;
    memcpy(s, p->basedir, a);
    s[a] = '/';
    memcpy(s + a + 1, v, b + 1);
    return s;
}

static bool streq_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        const char x = (char)(*a >= 'A' && *a <= 'Z' ? *a + 32 : *a);
        const char y = (char)(*b >= 'A' && *b <= 'Z' ? *b + 32 : *b);
        if (x != y)
            return false;
    }
    return *a == *b;
}

/*
 * Convert text for row and store it in base.  shown names the key in
 * messages; at is where the value is (line 0 for a default).
 */
static int apply_text(cfg_parser *p, const cfg_row *row, void *base, const char *text,
                      const char *shown, cfg_mark at)
{
    char why[INGEST__ERRMSG_MAX];
    int rc;
    switch (row->type) {
    case T_STRING:
    case T_PATH: {
        const bool keep = row->type != T_PATH || ((row->flags & F_AUTO) && strcmp(text, "auto") == 0);
        char *s = keep ? ingest__strdup(p->ctx, text) : cfg__resolve_path(p, text);
        if (s == NULL)
            return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        char **f = field_str(base, row);
        ingest__free(p->ctx, *f);
        *f = s;
        /* "" is checked too where it is not the default (a required key, or one whose default is a value:
         * layout: "" would land every file at the root of bronze) */
        if (row->check != NULL &&
            (text[0] != '\0' || (row->flags & F_REQUIRED) || (row->def != NULL && row->def[0] != '\0')))
            return row->check(p, shown, text, at);
        return INGEST_OK;
    }
    case T_BOOL: {
        bool v;
        if (streq_nocase(text, "true") || streq_nocase(text, "yes") || streq_nocase(text, "on"))
            v = true;
        else if (streq_nocase(text, "false") || streq_nocase(text, "no") || streq_nocase(text, "off"))
            v = false;
        else
            return cfg__perr(p, at, "key '%s': '%s' is not a boolean (true or false)", shown, text);
        memcpy((char *)base + row->off, &v, sizeof(v));
        return INGEST_OK;
    }
    case T_ENUM:
        for (const cfg_enum *e = row->enums; e->name != NULL; e++) {
            if (strcmp(e->name, text) == 0) {
                memcpy((char *)base + row->off, &e->value, sizeof(int));
                return row->check != NULL ? row->check(p, shown, text, at) : INGEST_OK;
            }
        }
        {
            char list[128] = "";
            for (const cfg_enum *e = row->enums; e->name != NULL; e++) {
                if (list[0] != '\0')
                    strncat(list, ", ", sizeof(list) - strlen(list) - 1);
                strncat(list, e->name, sizeof(list) - strlen(list) - 1);
            }
            return cfg__perr(p, at, "key '%s': '%s' is not one of %s", shown, text, list);
        }
    case T_INT: {
        const char *c = text;
        const bool neg = *c == '-';
        uint64_t mag;
        if (neg || *c == '+')
            c++;
        if (*c < '0' || *c > '9' ||
            ingest_parse_size(NULL, c, &mag) != INGEST_OK || strspn(c, "0123456789_") != strlen(c))
            return cfg__perr(p, at, "key '%s': '%s' is not a whole number", shown, text);
        if (mag > (uint64_t)INT64_MAX ||
            (neg ? -(int64_t)mag < row->min : (int64_t)mag > row->max) ||
            (!neg && (int64_t)mag < row->min))
            return cfg__perr(p, at, "key '%s': %s is out of range (%" PRId64 "..%" PRId64 ")", shown, text,
                        row->min, row->max);
        store_uint(base, row, neg ? (uint64_t)(-(int64_t)mag) : mag);
        return INGEST_OK;
    }
    case T_SIZE:
    case T_RATE:
    case T_DURATION: {
        uint64_t v;
        char rate[INGEST_CONFIG_MAX_VALUE + 1];
        if (row->type == T_RATE) {
            /* a size, optionally followed by "/s" */
            size_t n = strlen(text);
            if (n >= 2 && strcmp(text + n - 2, "/s") == 0)
                n -= 2;
            snprintf(rate, sizeof(rate), "%.*s", (int)n, text);
        }
        rc = row->type == T_SIZE   ? ingest_parse_size(p->ctx, text, &v)
             : row->type == T_RATE ? ingest_parse_size(p->ctx, rate, &v)
                                   : ingest_parse_duration(p->ctx, text, &v);
        if (rc != INGEST_OK) {
            snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(p->ctx));
            return cfg__perr(p, at, "key '%s': %s", shown, why);
        }
        if (v < (uint64_t)row->min || v > (uint64_t)row->max)
            return cfg__perr(p, at, "key '%s': %s is out of range (%" PRId64 "..%" PRId64 " %s)", shown,
                        text, row->min, row->max,
                        row->type == T_SIZE ? "bytes" : row->type == T_RATE ? "bytes/s" : "ms");
        store_uint(base, row, v);
        return INGEST_OK;
    }
    default:
        return cfg__perr(p, at, "key '%s': internal error: bad row type", shown);
    }
}

static int inst_init(cfg_parser *p, cfg_inst *inst, const char *prefix, const char *shown, void *base,
                     cfg_mark start)
{
    memset(inst, 0, sizeof(*inst));
    inst->prefix = prefix;
    snprintf(inst->shown, sizeof(inst->shown), "%.*s", CFG_NAME_MAX + 64, shown);
    inst->base = base;
    inst->start = start;
    inst->seen = ingest__calloc(p->ctx, p->schema->nrows, sizeof(*inst->seen));
    inst->sections = ingest__calloc(p->ctx, p->schema->nrows, sizeof(*inst->sections));
    if (inst->seen == NULL || inst->sections == NULL)
        return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
    /* Defaults first; the file overrides them. */
    for (size_t i = 0; i < p->schema->nrows; i++) {
        const cfg_row *row = &p->schema->rows[i];
        if (row_member(row, prefix) && row->def != NULL)
            INGEST__FORWARD(apply_text(p, row, base, row->def, row->name, (cfg_mark){ 0, 0 }));
    }
    return INGEST_OK;
}

static void inst_fini(cfg_parser *p, cfg_inst *inst)
{
    if (inst->sections != NULL)
        for (size_t i = 0; i < inst->nsections; i++)
            ingest__free(p->ctx, inst->sections[i]);
    ingest__free(p->ctx, inst->sections);
    ingest__free(p->ctx, inst->seen);
    inst->sections = NULL;
    inst->seen = NULL;
}

/* Missing required keys and list sizes, once an object is read. */
static int inst_check(cfg_parser *p, cfg_inst *inst)
{
    for (size_t i = 0; i < p->schema->nrows; i++) {
        const cfg_row *row = &p->schema->rows[i];
        if (!row_member(row, inst->prefix))
            continue;
        const char *rel = row->name + strlen(inst->prefix);
        if (row->flags & F_REQUIRED && inst->seen[i].line == 0)
            return cfg__perr(p, inst->start, "missing required key '%s%s'", inst->shown, rel);
        if (row->type == T_LIST && inst->seen[i].line != 0) {
            const size_t n = *(size_t *)((char *)inst->base + row->count_off);
            if (n < (size_t)row->min)
                return cfg__perr(p, inst->seen[i], "key '%s%s' needs at least %" PRId64 " entr%s",
                            inst->shown, rel, row->min, row->min == 1 ? "y" : "ies");
        }
        if ((row->type == T_STRING || row->type == T_PATH) && *field_str(inst->base, row) == NULL) {
            /* optional string without a default: "" */
            char **f = field_str(inst->base, row);
            *f = ingest__strdup(p->ctx, "");
            if (*f == NULL)
                return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        }
    }
    return INGEST_OK;
}

/* ---- events -------------------------------------------------------------- */

static cfg_mark ev_mark(const yaml_event_t *ev)
{
    return (cfg_mark){ ev->start_mark.line + 1, ev->start_mark.column + 1 };
}

static int yaml_error(cfg_parser *p)
{
    const yaml_parser_t *y = &p->yp;
    if (y->error == YAML_MEMORY_ERROR)
        return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory while parsing", p->file);
    cfg_mark at;
    if (y->error == YAML_READER_ERROR) {
        /* Reader errors carry a byte offset; count lines ourselves. */
        at.line = 1;
        at.col = 1;
        for (size_t i = 0; i < y->problem_offset && i < p->len; i++) {
            if (p->data[i] == '\n') {
                at.line++;
                at.col = 1;
            } else {
                at.col++;
            }
        }
    } else {
        at = (cfg_mark){ y->problem_mark.line + 1, y->problem_mark.column + 1 };
    }
    /* An unquoted glob such as *.csv reads as a YAML alias: say so. */
    const bool alias = y->context != NULL && strstr(y->context, "alias") != NULL;
    return cfg__perr(p, at, "malformed YAML: %s%s%s%s", y->problem ? y->problem : "syntax error",
                y->context ? " " : "", y->context ? y->context : "",
                alias ? " (quote a value that starts with '*')" : "");
}

/* Advance to the next event; refuse what we never accept anywhere. */
static int next_event(cfg_parser *p)
{
    if (p->have_ev) {
        yaml_event_delete(&p->ev);
        p->have_ev = false;
    }
    if (!yaml_parser_parse(&p->yp, &p->ev))
        return yaml_error(p);
    p->have_ev = true;
    const yaml_event_t *ev = &p->ev;
    const cfg_mark at = ev_mark(ev);
    const yaml_char_t *anchor = NULL, *tag = NULL;
    switch (ev->type) {
    case YAML_ALIAS_EVENT:
        return cfg__perr(p, at, "YAML aliases (*name) are not supported (quote a value that starts with '*')");
    case YAML_SCALAR_EVENT:
        anchor = ev->data.scalar.anchor;
        tag = ev->data.scalar.tag;
        break;
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        anchor = ev->type == YAML_MAPPING_START_EVENT ? ev->data.mapping_start.anchor
                                                      : ev->data.sequence_start.anchor;
        tag = ev->type == YAML_MAPPING_START_EVENT ? ev->data.mapping_start.tag
                                                   : ev->data.sequence_start.tag;
        if (++p->depth > INGEST_CONFIG_MAX_DEPTH)
            return cfg__perr(p, at, "nesting deeper than %d levels", INGEST_CONFIG_MAX_DEPTH);
        break;
    case YAML_MAPPING_END_EVENT:
    case YAML_SEQUENCE_END_EVENT:
        p->depth--;
        break;
    default:
        break;
    }
    if (anchor != NULL)
        return cfg__perr(p, at, "YAML anchors (&name) are not supported");
    if (tag != NULL)
        return cfg__perr(p, at, "YAML tags (!name) are not supported");
    return INGEST_OK;
}

/* Plain empty, ~ or null: "no value". */
static bool scalar_is_null(const yaml_event_t *ev)
{
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = (const char *)ev->data.scalar.value;
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
           strcmp(v, "NULL") == 0;
}

const char *cfg__type_name(int type)
{
    static const char *const names[] = { "string", "path", "bool", "int", "size",
                                         "duration", "enum", "list", "strings", "rate", "map" };
    return type >= 0 && type <= T_MAP ? names[type] : "?";
}

static int parse_mapping(cfg_parser *p, cfg_inst *inst, const char *path);

static int parse_list(cfg_parser *p, cfg_inst *inst, const cfg_row *row, const char *shown)
{
    void **arr = (void **)((char *)inst->base + row->off);
    size_t *count = (size_t *)((char *)inst->base + row->count_off);
    size_t cap = 0;
    char sub_prefix[CFG_NAME_MAX], sub_shown[CFG_NAME_MAX + 96];
    snprintf(sub_prefix, sizeof(sub_prefix), "%s[].", row->name);

    if (p->ev.type == YAML_SCALAR_EVENT && scalar_is_null(&p->ev))
        return INGEST_OK; /* an empty list; the minimum is checked later */
    if (p->ev.type != YAML_SEQUENCE_START_EVENT)
        return cfg__perr(p, ev_mark(&p->ev), "key '%s' must be a list", shown);
    for (;;) {
        INGEST__FORWARD(next_event(p));
        if (p->ev.type == YAML_SEQUENCE_END_EVENT)
            return INGEST_OK;
        const cfg_mark at = ev_mark(&p->ev);
        if (p->ev.type != YAML_MAPPING_START_EVENT)
            return cfg__perr(p, at, "each entry of '%s' must be a mapping", shown);
        if (*count >= (size_t)row->max)
            return cfg__perr(p, at, "key '%s' has more than %" PRId64 " entries", shown, row->max);
        if (*count == cap) {
            const size_t ncap = cap ? cap * 2 : 4;
            char *n = ingest__calloc(p->ctx, ncap, row->elem_size);
            if (n == NULL)
                return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
            if (*count)
                memcpy(n, *arr, *count * row->elem_size);
            ingest__free(p->ctx, *arr);
            *arr = n;
            cap = ncap;
        }
        void *entry = (char *)*arr + *count * row->elem_size;
        memset(entry, 0, row->elem_size);
        (*count)++;
        snprintf(sub_shown, sizeof(sub_shown), "%.*s[%zu].", CFG_NAME_MAX, shown, *count - 1);
        cfg_inst item;
        int rc = inst_init(p, &item, sub_prefix, sub_shown, entry, at);
        if (rc == INGEST_OK)
            rc = parse_mapping(p, &item, "");
        if (rc == INGEST_OK)
            rc = inst_check(p, &item);
        if (rc == INGEST_OK && row->finish_entry != NULL)
            rc = row->finish_entry(p, &item);
        inst_fini(p, &item);
        if (rc != INGEST_OK)
            return rc;
    }
}

/* A list of strings: each entry a non-empty scalar, at most row->max of them. */
static int parse_strlist(cfg_parser *p, cfg_inst *inst, const cfg_row *row, const char *shown)
{
    char ***arr = (char ***)(void *)((char *)inst->base + row->off);
    size_t *count = (size_t *)((char *)inst->base + row->count_off);
    char entry_shown[CFG_NAME_MAX * 3 + 32];

    if (p->ev.type == YAML_SCALAR_EVENT && scalar_is_null(&p->ev))
        return INGEST_OK; /* no entries */
    if (p->ev.type != YAML_SEQUENCE_START_EVENT)
        return cfg__perr(p, ev_mark(&p->ev), "key '%s' must be a list of strings, e.g. [\"a\", \"b\"]",
                    shown);
    for (;;) {
        INGEST__FORWARD(next_event(p));
        if (p->ev.type == YAML_SEQUENCE_END_EVENT)
            return INGEST_OK;
        const cfg_mark at = ev_mark(&p->ev);
        snprintf(entry_shown, sizeof(entry_shown), "%s[%zu]", shown, *count);
        if (p->ev.type != YAML_SCALAR_EVENT)
            return cfg__perr(p, at, "key '%s' must be a string, not a %s", entry_shown,
                        p->ev.type == YAML_MAPPING_START_EVENT ? "mapping" : "list");
        if (*count >= (size_t)row->max)
            return cfg__perr(p, at, "key '%s' has more than %" PRId64 " entries", shown, row->max);
        const char *v = (const char *)p->ev.data.scalar.value;
        const size_t n = p->ev.data.scalar.length;
        if (n > INGEST_CONFIG_MAX_VALUE)
            return cfg__perr(p, at, "key '%s': value longer than %d bytes", entry_shown,
                        INGEST_CONFIG_MAX_VALUE);
        if (strlen(v) != n)
            return cfg__perr(p, at, "key '%s': value contains a NUL byte", entry_shown);
        if (scalar_is_null(&p->ev))
            return cfg__perr(p, at, "key '%s' needs a value", entry_shown);
        if (*arr == NULL) {
            *arr = ingest__calloc(p->ctx, (size_t)row->max, sizeof(char *));
            if (*arr == NULL)
                return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        }
        char *dup = ingest__strdup(p->ctx, v);
        if (dup == NULL)
            return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        (*arr)[(*count)++] = dup;
        if (row->check != NULL)
            INGEST__FORWARD(row->check(p, entry_shown, v, at));
    }
}

/* A mapping of names to scalar values, at most row->max: each stored as "name=value". */
static int parse_map(cfg_parser *p, cfg_inst *inst, const cfg_row *row, const char *shown)
{
    char ***arr = (char ***)(void *)((char *)inst->base + row->off);
    size_t *count = (size_t *)((char *)inst->base + row->count_off);
    char entry_shown[CFG_NAME_MAX * 3 + 300];

    if (p->ev.type == YAML_SCALAR_EVENT && scalar_is_null(&p->ev))
        return INGEST_OK; /* no entries */
    if (p->ev.type != YAML_MAPPING_START_EVENT)
        return cfg__perr(p, ev_mark(&p->ev), "key '%s' must be a mapping of names to values", shown);
    for (;;) {
        INGEST__FORWARD(next_event(p));
        if (p->ev.type == YAML_MAPPING_END_EVENT)
            return INGEST_OK;
        const cfg_mark at = ev_mark(&p->ev);
        if (p->ev.type != YAML_SCALAR_EVENT)
            return cfg__perr(p, at, "key '%s': a name must be a plain string", shown);
        const size_t klen = p->ev.data.scalar.length;
        const char *k = (const char *)p->ev.data.scalar.value;
        if (klen == 0 || klen > 128 || strlen(k) != klen || strchr(k, '=') != NULL)
            return cfg__perr(p, at, "key '%s': a name of 1..128 bytes without '=' is needed", shown);
        char name[129];
        memcpy(name, k, klen + 1);
        snprintf(entry_shown, sizeof(entry_shown), "%s.%s", shown, name);
        if (*count >= (size_t)row->max)
            return cfg__perr(p, at, "key '%s' has more than %" PRId64 " entries", shown, row->max);
        for (size_t i = 0; i < *count; i++)
            if (strncmp((*arr)[i], name, klen) == 0 && (*arr)[i][klen] == '=')
                return cfg__perr(p, at, "duplicate key '%s'", entry_shown);
        INGEST__FORWARD(next_event(p));
        const cfg_mark vat = ev_mark(&p->ev);
        if (p->ev.type != YAML_SCALAR_EVENT)
            return cfg__perr(p, vat, "key '%s' must be a string, not a %s", entry_shown,
                             p->ev.type == YAML_MAPPING_START_EVENT ? "mapping" : "list");
        const char *v = (const char *)p->ev.data.scalar.value;
        const size_t n = p->ev.data.scalar.length;
        if (n > INGEST_CONFIG_MAX_VALUE || strlen(v) != n)
            return cfg__perr(p, vat, "key '%s': a value of at most %d bytes without NUL is needed", entry_shown,
                             INGEST_CONFIG_MAX_VALUE);
        if (*arr == NULL) {
            *arr = ingest__calloc(p->ctx, (size_t)row->max, sizeof(char *));
            if (*arr == NULL)
                return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        }
        char *e = ingest__malloc(p->ctx, klen + 1 + n + 1);
        if (e == NULL)
            return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        memcpy(e, name, klen);
        e[klen] = '=';
        memcpy(e + klen + 1, v, n + 1);
        (*arr)[(*count)++] = e;
        if (row->check != NULL)
            INGEST__FORWARD(row->check(p, entry_shown, e, vat));
    }
}

/* The current event is the value of row (key at keymark). */
static int parse_value(cfg_parser *p, cfg_inst *inst, const cfg_row *row, const char *shown)
{
    if (row->type == T_LIST)
        return parse_list(p, inst, row, shown);
    if (row->type == T_STRLIST)
        return parse_strlist(p, inst, row, shown);
    if (row->type == T_MAP)
        return parse_map(p, inst, row, shown);
    const yaml_event_t *ev = &p->ev;
    const cfg_mark at = ev_mark(ev);
    if (ev->type == YAML_MAPPING_START_EVENT || ev->type == YAML_SEQUENCE_START_EVENT)
        return cfg__perr(p, at, "key '%s' must be a %s, not a %s", shown, cfg__type_name(row->type),
                    ev->type == YAML_MAPPING_START_EVENT ? "mapping" : "list");
    if (ev->type != YAML_SCALAR_EVENT)
        return cfg__perr(p, at, "key '%s': unexpected YAML event", shown);
    const char *v = (const char *)ev->data.scalar.value;
    const size_t n = ev->data.scalar.length;
    if (n > INGEST_CONFIG_MAX_VALUE)
        return cfg__perr(p, at, "key '%s': value longer than %d bytes", shown, INGEST_CONFIG_MAX_VALUE);
    if (strlen(v) != n)
        return cfg__perr(p, at, "key '%s': value contains a NUL byte", shown);
    if (scalar_is_null(ev)) {
        if (row->flags & F_REQUIRED)
            return cfg__perr(p, at, "key '%s' needs a value", shown);
        if (row->def != NULL)
            return apply_text(p, row, inst->base, row->def, shown, at);
        if (row->type == T_STRING || row->type == T_PATH) {
            char **f = field_str(inst->base, row);
            ingest__free(p->ctx, *f);
            *f = NULL; /* set to "" (or derived) once the object is complete */
        }
        return INGEST_OK;
    }
    return apply_text(p, row, inst->base, v, shown, at);
}

/* The current event is MAPPING_START; read up to its MAPPING_END. */
static int parse_mapping(cfg_parser *p, cfg_inst *inst, const char *path)
{
    char full[CFG_NAME_MAX], shown[CFG_NAME_MAX * 3];
    for (;;) {
        INGEST__FORWARD(next_event(p));
        if (p->ev.type == YAML_MAPPING_END_EVENT)
            return INGEST_OK;
        const cfg_mark at = ev_mark(&p->ev);
        if (p->ev.type != YAML_SCALAR_EVENT)
            return cfg__perr(p, at, "a key must be a plain name, not a %s",
                        p->ev.type == YAML_MAPPING_START_EVENT ? "mapping" : "list");
        const char *key = (const char *)p->ev.data.scalar.value;
        const size_t klen = p->ev.data.scalar.length;
        if (klen > 128 || strlen(key) != klen)
            return cfg__perr(p, at, "unknown key '%s%s%.40s...'", inst->shown, path, key);
        snprintf(full, sizeof(full), "%s%s%s", inst->prefix, path, key);
        snprintf(shown, sizeof(shown), "%s%s%s", inst->shown, path, key);
        const cfg_row *row = find_row(p, inst, full);
        if (row != NULL) {
            const size_t idx = (size_t)(row - p->schema->rows);
            if (inst->seen[idx].line != 0)
                return cfg__perr(p, at, "duplicate key '%s' (first set at line %zu)", shown,
                            inst->seen[idx].line);
            inst->seen[idx] = at;
            INGEST__FORWARD(next_event(p));
            INGEST__FORWARD(parse_value(p, inst, row, shown));
            continue;
        }
        if (!is_section(p, inst, full))
            return cfg__perr(p, at, "unknown key '%s'", shown);
        /* A section such as "batch": a mapping of its keys. */
        const size_t plen = strlen(inst->prefix);
        for (size_t i = 0; i < inst->nsections; i++)
            if (strcmp(inst->sections[i], full + plen) == 0)
                return cfg__perr(p, at, "duplicate key '%s'", shown);
        if (inst->nsections < p->schema->nrows) {
            inst->sections[inst->nsections] = ingest__strdup(p->ctx, full + plen);
            if (inst->sections[inst->nsections] == NULL)
                return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
            inst->nsections++;
        }
        char sub[CFG_NAME_MAX];
        snprintf(sub, sizeof(sub), "%s.", full + plen); /* before the event (and key) goes */
        INGEST__FORWARD(next_event(p));
        if (p->ev.type == YAML_SCALAR_EVENT && scalar_is_null(&p->ev))
            continue; /* "batch:" with nothing under it */
        if (p->ev.type != YAML_MAPPING_START_EVENT)
            return cfg__perr(p, ev_mark(&p->ev), "key '%s' must be a mapping of keys", shown);
        INGEST__FORWARD(parse_mapping(p, inst, sub));
    }
}

static int parse_document(cfg_parser *p, cfg_inst *top)
{
    INGEST__FORWARD(next_event(p)); /* STREAM_START */
    INGEST__FORWARD(next_event(p));
    if (p->ev.type == YAML_STREAM_END_EVENT)
        return INGEST_OK; /* empty file: missing keys are reported by the caller */
    if (p->ev.type != YAML_DOCUMENT_START_EVENT)
        return cfg__perr(p, ev_mark(&p->ev), "malformed YAML: expected a document");
    INGEST__FORWARD(next_event(p));
    top->start = ev_mark(&p->ev);
    if (p->ev.type == YAML_MAPPING_START_EVENT) {
        INGEST__FORWARD(parse_mapping(p, top, ""));
    } else if (!(p->ev.type == YAML_SCALAR_EVENT && scalar_is_null(&p->ev))) {
        return cfg__perr(p, ev_mark(&p->ev), "the top level must be a mapping of keys");
    }
    INGEST__FORWARD(next_event(p)); /* DOCUMENT_END */
    INGEST__FORWARD(next_event(p));
    if (p->ev.type != YAML_STREAM_END_EVENT)
        return cfg__perr(p, ev_mark(&p->ev), "only one YAML document is allowed");
    return INGEST_OK;
}

/*
 * Bound nesting before libyaml sees the text: libyaml 0.2.5 has no depth
 * limit, and its scanner queues tokens for every open '[' or '{' (and
 * every block level) ahead of the events we check.  This is a conservative
 * lexical pass: flow brackets outside quotes and comments may nest at most
 * INGEST_CONFIG_MAX_DEPTH deep, and a line's content may start at most
 * CFG_MAX_INDENT columns in (counting "- " markers), which bounds block
 * nesting.  A quote opens a quoted scalar only after a blank, an indicator
 * or the start of a line (so "it's" stays plain).
 */
#define CFG_MAX_INDENT 128

static int prescan(cfg_parser *p)
{
    const unsigned char *d = p->data;
    const size_t n = p->len;
    size_t line = 1, col = 1, depth = 0;
    char quote = 0;
    bool line_start = true;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = d[i];
        if (line_start && quote == 0 && depth == 0) {
            size_t j = i;
            while (j < n && (d[j] == ' ' || ((d[j] == '-' || d[j] == '?' || d[j] == ':') &&
                                             (j + 1 == n || d[j + 1] == ' ' || d[j + 1] == '\n'))))
                j++;
            if (j - i > CFG_MAX_INDENT && j < n && d[j] != '#' && d[j] != '\n' && d[j] != '\r')
                return cfg__perr(p, (cfg_mark){ line, CFG_MAX_INDENT + 1 },
                            "nesting too deep: content indented more than %d columns",
                            CFG_MAX_INDENT);
        }
        line_start = false;
        if (c == '\n') {
            line++;
            col = 1;
            line_start = true;
            continue;
        }
        if (quote == '"') {
            if (c == '\\' && i + 1 < n && d[i + 1] != '\n') {
                i++;
                col++;
            } else if (c == '"') {
                quote = 0;
            }
        } else if (quote == '\'') {
            if (c == '\'')
                quote = 0;
        } else {
            const unsigned char prev = i > 0 ? d[i - 1] : '\n';
            const bool after_blank = prev == ' ' || prev == '\t' || prev == '\n' || prev == '\r';
            if (c == '#' && after_blank) {
                while (i + 1 < n && d[i + 1] != '\n')
                    i++;
            } else if ((c == '"' || c == '\'') &&
                       (after_blank || prev == '[' || prev == '{' || prev == ',' || prev == ':')) {
                quote = (char)c;
            } else if (c == '[' || c == '{') {
                if (++depth > INGEST_CONFIG_MAX_DEPTH)
                    return cfg__perr(p, (cfg_mark){ line, col }, "nesting deeper than %d levels",
                                INGEST_CONFIG_MAX_DEPTH);
            } else if ((c == ']' || c == '}') && depth > 0) {
                depth--;
            }
        }
        col++;
    }
    return INGEST_OK;
}

/* Directory against which relative paths resolve, always absolute. */
static int make_basedir(cfg_parser *p, const char *name)
{
    const char *slash = strrchr(name, '/');
    const size_t dlen = slash ? (size_t)(slash - name) : 0;
    size_t cwdlen = 0;
    char *buf = ingest__malloc(p->ctx, CFG_DIR_MAX + dlen + 2);
    if (buf == NULL)
        return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
    p->basedir = buf;
    if (name[0] == '/') {
        memcpy(buf, name, dlen);
        buf[dlen] = '\0';
        if (dlen == 0)
            strcpy(buf, "/");
        return INGEST_OK;
    }
    if (getcwd(buf, CFG_DIR_MAX) == NULL)
        return ingest__fail(p->ctx, INGEST_EINVAL, "%s: cannot get the current directory: %s", p->file,
                            strerror(errno));
    cwdlen = strlen(buf);
    if (dlen > 0) {
        if (cwdlen > 1)
            buf[cwdlen++] = '/';
        memcpy(buf + cwdlen, name, dlen);
        buf[cwdlen + dlen] = '\0';
    }
    return INGEST_OK;
}

int cfg__load_mem(ingest_ctx *ctx, const cfg_schema *schema, const char *name, const void *data,
                    size_t len, void *obj)
{
    cfg_parser p;
    cfg_inst top;
    int rc;

    memset(&p, 0, sizeof(p));
    memset(&top, 0, sizeof(top));
    p.ctx = ctx;
    p.schema = schema;
    p.file = name;
    p.data = data;
    p.len = len;
    if (len > INGEST_CONFIG_MAX_FILE) {
        rc = ingest__fail(ctx, INGEST_EINVAL, "%s: %zu bytes, more than the limit of %u", name, len,
                          INGEST_CONFIG_MAX_FILE);
        goto out;
    }
    rc = make_basedir(&p, name);
    if (rc != INGEST_OK)
        goto out;
    if (!yaml_parser_initialize(&p.yp)) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "%s: cannot initialise the YAML parser", name);
        goto out;
    }
    p.yp_init = true;
    yaml_parser_set_input_string(&p.yp, data, len);
    rc = inst_init(&p, &top, "", "", obj, (cfg_mark){ 1, 1 });
    if (rc == INGEST_OK)
        rc = prescan(&p);
    if (rc == INGEST_OK)
        rc = parse_document(&p, &top);
    if (rc == INGEST_OK)
        rc = inst_check(&p, &top);
    if (rc == INGEST_OK && schema->finish != NULL)
        rc = schema->finish(&p, &top);
out:
    inst_fini(&p, &top);
    if (p.have_ev)
        yaml_event_delete(&p.ev);
    if (p.yp_init)
        yaml_parser_delete(&p.yp);
    ingest__free(ctx, p.basedir);
    return rc;
}

int cfg__read_file(ingest_ctx *ctx, const char *path, char **out, size_t *outlen)
{
    int rc = INGEST_OK;
    char *buf = NULL;
    size_t len = 0;
    struct stat st;

    *out = NULL;
    *outlen = 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ingest__fail(ctx, INGEST_EINVAL, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        rc = ingest__fail(ctx, INGEST_EINVAL, "%s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ingest__fail(ctx, INGEST_EINVAL, "%s: not a regular file", path);
        goto out;
    }
    if (st.st_size > (off_t)INGEST_CONFIG_MAX_FILE) {
        rc = ingest__fail(ctx, INGEST_EINVAL, "%s: %lld bytes, more than the limit of %u", path,
                          (long long)st.st_size, INGEST_CONFIG_MAX_FILE);
        goto out;
    }
    /* One byte more than the limit, to notice a file that grew. */
    buf = ingest__malloc(ctx, INGEST_CONFIG_MAX_FILE + 1);
    if (buf == NULL) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        const ssize_t n = read(fd, buf + len, INGEST_CONFIG_MAX_FILE + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = ingest__fail(ctx, INGEST_EINVAL, "%s: cannot read: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > INGEST_CONFIG_MAX_FILE) {
            rc = ingest__fail(ctx, INGEST_EINVAL, "%s: more than the limit of %u bytes", path,
                              INGEST_CONFIG_MAX_FILE);
            goto out;
        }
    }
    *out = buf;
    *outlen = len;
    buf = NULL;
out:
    ingest__free(ctx, buf);
    close(fd);
    return rc;
}

