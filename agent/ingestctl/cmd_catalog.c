/*
 * ingestctl catalog: list landed files from the catalog (never walking the
 * bronze tree), or the feed after a cursor; ingestctl verify: re-hash
 * landed files against their manifests.  docs/catalog.md.
 */
#include "ingestctl.h"
#include "../common/prog.h"

#include <errno.h>
#include <ingest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- output: a buffer written with write(2) ------------------------------------ */

#define OUT_CAP (1u << 20)
#define OUT_SLACK (3 * 6 * 4096 + 512) /* a record: two paths of 4096 bytes escaped (6 bytes each at worst), names */

typedef struct out {
    char *buf;
    size_t len;
    int fd;
    int failed;
} out;

static void out_flush(out *o)
{
    size_t off = 0;
    while (off < o->len && !o->failed) {
        const ssize_t n = write(o->fd, o->buf + off, o->len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            o->failed = errno;
            break;
        }
        off += (size_t)n;
    }
    o->len = 0;
}

/* Room for one record. */
static char *out_room(out *o)
{
    if (o->len + OUT_SLACK > OUT_CAP)
        out_flush(o);
    return o->buf + o->len;
}

static char *put_str(char *p, const char *s)
{
    const size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}
/* A string literal, its length known at compile time. */
#define PUT_LIT(p, lit) (memcpy((p), (lit), sizeof(lit) - 1), (p) + sizeof(lit) - 1)

static const char digits2[201] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                 "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                 "8081828384858687888990919293949596979899";

static char *put_u64(char *p, uint64_t v)
{
    char t[24];
    char *e = t + sizeof(t), *q = e;
    while (v >= 100) {
        const unsigned d = (unsigned)(v % 100);
        v /= 100;
        q -= 2;
        memcpy(q, digits2 + 2 * d, 2);
    }
    if (v >= 10) {
        q -= 2;
        memcpy(q, digits2 + 2 * v, 2);
    } else {
        *--q = (char)('0' + v);
    }
    memcpy(p, q, (size_t)(e - q));
    return p + (e - q);
}

static char *put_i64(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        return put_u64(p, (uint64_t)0 - (uint64_t)v);
    }
    return put_u64(p, (uint64_t)v);
}

static char hexpairs[512];

static void hexpairs_init(void)
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 256; i++) {
        hexpairs[2 * i] = hx[i >> 4];
        hexpairs[2 * i + 1] = hx[i & 15];
    }
}

static char *put_hex(char *p, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++, p += 2)
        memcpy(p, hexpairs + 2 * b[i], 2);
    return p;
}

/* Bytes a JSON string carries as they are: printable ASCII but '"' and '\\'. */
static unsigned char json_plain[256];

static void json_plain_init(void)
{
    for (int c = 0x20; c < 0x80; c++)
        json_plain[c] = c != '"' && c != '\\';
}

/* Length of the valid UTF-8 sequence at s (s[0] >= 0x80), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    const unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

/* A JSON string, as the manifest writes one (docs/manifest.md: raw bytes as \uDC80..\uDCFF). */
static char *put_json(char *p, const char *str, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    *p++ = '"';
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && json_plain[s[j]])
            j++;
        if (j > i) {
            memcpy(p, s + i, j - i);
            p += j - i;
            i = j;
            if (i == n)
                break;
        }
        const unsigned char c = s[i];
        if (c >= 0x80) {
            const size_t l = utf8_len(s + i, n - i);
            if (l > 0) {
                memcpy(p, s + i, l);
                p += l;
                i += l;
            } else {
                p = put_str(p, "\\udc");
                *p++ = hx[c >> 4];
                *p++ = hx[c & 15];
                i++;
            }
            continue;
        }
        *p++ = '\\';
        switch (c) {
        case '"': *p++ = '"'; break;
        case '\\': *p++ = '\\'; break;
        case '\n': *p++ = 'n'; break;
        case '\r': *p++ = 'r'; break;
        case '\t': *p++ = 't'; break;
        case '\b': *p++ = 'b'; break;
        case '\f': *p++ = 'f'; break;
        default:
            p = put_str(p, "u00");
            *p++ = hx[c >> 4];
            *p++ = hx[c & 15];
        }
        i++;
    }
    *p++ = '"';
    return p;
}

/* A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. */
static char *put_csv(char *p, const char *s, size_t n)
{
    if (strcspn(s, ",\"\r\n") >= n) {
        memcpy(p, s, n);
        return p + n;
    }
    *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"')
            *p++ = '"';
        *p++ = s[i];
    }
    *p++ = '"';
    return p;
}

static char *put_time(char *p, int64_t ns)
{
    const time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    char b[32];
    gmtime_r(&t, &tm);
    strftime(b, sizeof(b), "%Y-%m-%d %H:%M:%S", &tm);
    return put_str(p, b);
}

/* For the table: control bytes shown as '?'. */
static char *put_plain(char *p, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        *p++ = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
    return p;
}

enum { F_JSONL, F_CSV, F_TABLE, F_PATHS };

typedef struct lister {
    out o;
    int format;
    const char *bronze;
    size_t bronze_len;
    uint64_t n;
} lister;

static int print_entry(void *ud, const ingest_catalog_entry *e)
{
    lister *L = ud;
    char *const start = out_room(&L->o);
    char *p = start;
    switch (L->format) {
    case F_PATHS:
        memcpy(p, L->bronze, L->bronze_len);
        p += L->bronze_len;
        *p++ = '/';
        memcpy(p, e->landed, e->landed_len);
        p += e->landed_len;
        *p++ = ' ';
        p = put_u64(p, e->size);
        break;
    case F_JSONL:
        p = put_str(p, "{\"device\":");
        p = put_json(p, e->device, strlen(e->device));
        p = put_str(p, ",\"path\":");
        p = put_json(p, e->path, e->path_len);
        p = put_str(p, ",\"landed\":");
        p = put_json(p, e->landed, e->landed_len);
        p = put_str(p, ",\"size\":");
        p = put_u64(p, e->size);
        p = put_str(p, ",\"mtime_ns\":");
        p = put_i64(p, e->mtime_ns);
        p = put_str(p, ",\"mode\":");
        p = put_u64(p, e->mode);
        p = put_str(p, ",\"hash\":\"");
        p = put_hex(p, e->hash, INGEST_ID_BYTES);
        p = put_str(p, "\",\"version\":");
        p = put_u64(p, e->version);
        p = put_str(p, ",\"batch\":");
        p = put_json(p, e->batch, strlen(e->batch));
        p = put_str(p, ",\"landed_ns\":");
        p = put_i64(p, e->landed_ns);
        p = e->replaced ? PUT_LIT(p, ",\"replaced\":true}") : PUT_LIT(p, ",\"replaced\":false}");
        break;
    case F_CSV:
        p = put_csv(p, e->device, strlen(e->device));
        *p++ = ',';
        p = put_csv(p, e->path, e->path_len);
        *p++ = ',';
        p = put_csv(p, e->landed, e->landed_len);
        *p++ = ',';
        p = put_u64(p, e->size);
        *p++ = ',';
        p = put_i64(p, e->mtime_ns);
        *p++ = ',';
        p = put_u64(p, e->mode);
        *p++ = ',';
        p = put_hex(p, e->hash, INGEST_ID_BYTES);
        *p++ = ',';
        p = put_u64(p, e->version);
        *p++ = ',';
        p = put_csv(p, e->batch, strlen(e->batch));
        *p++ = ',';
        p = put_i64(p, e->landed_ns);
        p = e->replaced ? PUT_LIT(p, ",true") : PUT_LIT(p, ",false");
        break;
    default: {
        p = put_time(p, e->landed_ns);
        *p++ = ' ';
        char num[24];
        const size_t nl = (size_t)(put_u64(num, e->size) - num);
        for (size_t i = nl; i < 12; i++)
            *p++ = ' ';
        memcpy(p, num, nl);
        p += nl;
        p = PUT_LIT(p, "  v");
        p = put_u64(p, e->version);
        *p++ = ' ';
        p = put_hex(p, e->hash, 6);
        *p++ = ' ';
        p = put_plain(p, e->device, strlen(e->device));
        *p++ = ' ';
        p = put_plain(p, e->landed, e->landed_len);
        if (e->replaced)
            p = PUT_LIT(p, "  (replaced)");
        break;
    }
    }
    *p++ = '\n';
    L->o.len += (size_t)(p - start);
    L->n++;
    return L->o.failed ? -1 : 0;
}

static const char *format_name(int f)
{
    return f == F_JSONL ? "jsonl" : f == F_CSV ? "csv" : f == F_TABLE ? "table" : "paths";
}

static int parse_format(const char *s)
{
    for (int f = F_JSONL; f <= F_PATHS; f++)
        if (strcmp(s, format_name(f)) == 0)
            return f;
    return -1;
}

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ingest_time_ns(&ts);
}

static void catalog_usage(FILE *f)
{
    fprintf(f,
            "usage: ingestctl catalog --bronze DIR [--device NAME] [--prefix LANDED_PREFIX] [--since TIME]\n"
            "                         [--until TIME] [--all-versions] [--format jsonl|csv|table|paths]\n"
            "                         [--after CURSOR | --cursor-file FILE] [--limit BATCHES]\n"
            "                         [--no-catch-up] [--rebuild] [--info]\n"
            "TIME: 2026-11-22, 2026-11-22T10:30:00Z, +HH:MM offsets, @UNIX_SECONDS, or -30m/-36h/-7d.\n"
            "Lists landed files from the catalog beside the manifests, never walking the tree; the catalog\n"
            "first catches up with manifests landed since.  --after prints what landed after CURSOR, then\n"
            "the new cursor (last line).  Default format: table on a terminal, jsonl otherwise.\n");
}

/* Common options of catalog and verify. */
typedef struct copts {
    const char *bronze, *device, *prefix, *after, *cursor_file, *config, *dedup_key;
    int64_t since, until;
    int format, all_versions, no_catch_up, rebuild, info, feed;
    uint64_t limit;
    unsigned threads;
} copts;

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    const unsigned long long x = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-')
        return -1;
    *v = x;
    return 0;
}

/* 0, or 2 after saying why. */
static int parse_opts(const char *cmd, int argc, char **argv, copts *c, ingest_ctx *ctx)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define TAKE(field)                                                              \
    do {                                                                         \
        if (val == NULL) {                                                       \
            fprintf(stderr, "ingestctl %s: %s needs a value\n", cmd, a);         \
            return 2;                                                            \
        }                                                                        \
        (field) = val;                                                           \
        i++;                                                                     \
    } while (0)
        if (strcmp(a, "--bronze") == 0)
            TAKE(c->bronze);
        else if (strcmp(a, "--device") == 0)
            TAKE(c->device);
        else if (strcmp(a, "--prefix") == 0)
            TAKE(c->prefix);
        else if (strcmp(a, "--after") == 0) {
            TAKE(c->after);
            c->feed = 1;
        } else if (strcmp(a, "--cursor-file") == 0) {
            TAKE(c->cursor_file);
            c->feed = 1;
        } else if (strcmp(a, "--config") == 0)
            TAKE(c->config);
        else if (strcmp(a, "--dedup-key") == 0)
            TAKE(c->dedup_key);
        else if (strcmp(a, "--since") == 0 || strcmp(a, "--until") == 0) {
            const char *t = NULL;
            TAKE(t);
            int64_t ns;
            if (ingest_parse_time(ctx, t, wall_ns(), &ns) < 0) {
                fprintf(stderr, "ingestctl %s: %s: %s\n", cmd, a, ingest_ctx_errmsg(ctx));
                return 2;
            }
            if (a[2] == 's')
                c->since = ns; /* (0, the epoch, bounds nothing landed: as no bound) */
            else
                c->until = ns != 0 ? ns : INT64_MIN; /* before the epoch: nothing (0 would be no bound) */
        } else if (strcmp(a, "--format") == 0) {
            const char *f = NULL;
            TAKE(f);
            if ((c->format = parse_format(f)) < 0) {
                fprintf(stderr, "ingestctl %s: --format %s: expected jsonl, csv, table or paths\n", cmd, f);
                return 2;
            }
        } else if (strcmp(a, "--limit") == 0 || strcmp(a, "--threads") == 0) {
            const char *n = NULL;
            uint64_t v;
            TAKE(n);
            if (parse_u64(n, &v) < 0 || v == 0 || (a[2] == 't' && v > 256)) {
                fprintf(stderr, "ingestctl %s: %s %s: expected a whole number from 1%s\n", cmd, a, n,
                        a[2] == 't' ? " to 256" : "");
                return 2;
            }
            if (a[2] == 'l')
                c->limit = v;
            else
                c->threads = (unsigned)v;
        } else if (strcmp(a, "--all-versions") == 0)
            c->all_versions = 1;
        else if (strcmp(a, "--no-catch-up") == 0)
            c->no_catch_up = 1;
        else if (strcmp(a, "--rebuild") == 0)
            c->rebuild = 1;
        else if (strcmp(a, "--info") == 0)
            c->info = 1;
        else {
            fprintf(stderr, "ingestctl %s: unexpected argument '%s' (--help)\n", cmd, a);
            return 2;
        }
#undef TAKE
    }
    if (c->device != NULL && (c->device[0] == '\0' || strlen(c->device) > 128)) {
        fprintf(stderr, "ingestctl %s: --device: a name of 1 to 128 bytes\n", cmd);
        return 2;
    }
    if (c->prefix != NULL && strlen(c->prefix) > 4096) {
        fprintf(stderr, "ingestctl %s: --prefix: at most 4096 bytes\n", cmd);
        return 2;
    }
    if (c->since != 0 && c->until != 0 && c->until <= c->since) {
        fprintf(stderr, "ingestctl %s: --until is not after --since\n", cmd);
        return 2;
    }
    if (c->limit != 0 && !c->feed) {
        fprintf(stderr, "ingestctl %s: --limit bounds the batches of a feed: give it with --after CURSOR or "
                        "--cursor-file FILE\n", cmd);
        return 2;
    }
    return 0;
}

static void lib_log(void *ud, int level, const char *msg)
{
    (void)ud;
    fprintf(stderr, "ingestctl: %s%s\n", level == INGEST_LOG_ERROR ? "error: " : level == INGEST_LOG_WARN ? "warning: " : "",
            msg);
}

/*
 * Open the catalog of bronze, catching it up unless told not to (or when it
 * cannot be written: then read-only, with a warning).  NULL after saying why.
 */
static ingest_catalog *open_catalog(const char *cmd, ingest_ctx *ctx, const copts *c)
{
    ingest_catalog *cat = NULL;
    int rc;
    if (c->rebuild) {
        char p[4200];
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof(p), "%s/_manifests/.catalog/%s", c->bronze, i ? "lock.mdb" : "data.mdb");
            if (unlink(p) != 0 && errno != ENOENT) {
                fprintf(stderr, "ingestctl %s: --rebuild: remove %s: %s\n", cmd, p, strerror(errno));
                return NULL;
            }
        }
    }
    if (!c->no_catch_up) {
        rc = ingest_catalog_open(ctx, c->bronze, INGEST_CATALOG_EXISTING, &cat);
        if (rc == 0) {
            ingest_catalog_stats st;
            if ((rc = ingest_catalog_catch_up(cat, &st)) < 0) {
                fprintf(stderr, "ingestctl %s: catching up the catalog: %s\n", cmd, ingest_ctx_errmsg(ctx));
                ingest_catalog_close(cat);
                return NULL;
            }
            return cat;
        }
        if (rc != INGEST_EIO && rc != INGEST_ENOSPC) { /* (a full bronze: read as it is) */
            fprintf(stderr, "ingestctl %s: %s\n", cmd, ingest_ctx_errmsg(ctx));
            return NULL;
        }
        fprintf(stderr, "ingestctl %s: warning: cannot write the catalog (%s); reading it as it is\n", cmd,
                ingest_ctx_errmsg(ctx));
    }
    if ((rc = ingest_catalog_open(ctx, c->bronze, INGEST_CATALOG_RDONLY | INGEST_CATALOG_EXISTING, &cat)) < 0) {
        fprintf(stderr, "ingestctl %s: %s\n", cmd, ingest_ctx_errmsg(ctx));
        return NULL;
    }
    return cat;
}

static int read_cursor_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    buf[0] = '\0';
    if (f == NULL)
        return errno == ENOENT ? 0 : -1;
    if (fgets(buf, (int)cap, f) == NULL)
        buf[0] = '\0';
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    return 0;
}

int cmd_catalog(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        catalog_usage(stdout);
        return 0;
    }
    hexpairs_init();
    json_plain_init();
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 1;
    ingest_ctx_set_log(ctx, lib_log, NULL, INGEST_LOG_WARN);
    copts c;
    memset(&c, 0, sizeof(c));
    c.format = -1;
    int status = parse_opts("catalog", argc, argv, &c, ctx);
    lister L;
    memset(&L, 0, sizeof(L));
    ingest_catalog *cat = NULL;
    if (status != 0)
        goto out;
    status = 2;
    if (c.bronze == NULL) {
        catalog_usage(stderr);
        goto out;
    }
    if (c.after != NULL && c.cursor_file != NULL) {
        fprintf(stderr, "ingestctl catalog: --after and --cursor-file: give one\n");
        goto out;
    }
    status = 1;
    if ((cat = open_catalog("catalog", ctx, &c)) == NULL)
        goto out;
    if (c.info) {
        ingest_catalog_stats st;
        if (ingest_catalog_info(cat, &st) < 0) {
            fprintf(stderr, "ingestctl catalog: %s\n", ingest_ctx_errmsg(ctx));
            goto out;
        }
        printf("{\"batches\":%llu,\"files\":%llu,\"bytes\":%llu}\n", (unsigned long long)st.batches,
               (unsigned long long)st.files, (unsigned long long)st.bytes);
        status = 0;
        goto out;
    }
    if (c.format < 0)
        c.format = isatty(1) ? F_TABLE : F_JSONL;
    L.format = c.format;
    L.bronze = c.bronze;
    L.bronze_len = strlen(c.bronze);
    L.o.fd = 1;
    if ((L.o.buf = malloc(OUT_CAP)) == NULL)
        goto out;
    ingest_catalog_filter f;
    memset(&f, 0, sizeof(f));
    f.device = c.device;
    f.prefix = c.prefix;
    f.since_ns = c.since;
    f.until_ns = c.until;
    f.flags = (c.all_versions ? INGEST_CATALOG_ALL_VERSIONS : 0) | (c.format == F_PATHS ? INGEST_CATALOG_NO_BATCH : 0);
    if (c.format == F_CSV) {
        static const char head[] = "device,path,landed,size,mtime_ns,mode,hash,version,batch,landed_ns,replaced\n";
        memcpy(L.o.buf, head, sizeof(head) - 1);
        L.o.len = sizeof(head) - 1;
    }
    int rc;
    if (c.feed) {
        char cur[INGEST_CATALOG_CURSOR_MAX + 8], next[INGEST_CATALOG_CURSOR_MAX];
        if (c.cursor_file != NULL) {
            if (read_cursor_file(c.cursor_file, cur, sizeof(cur)) < 0) {
                fprintf(stderr, "ingestctl catalog: --cursor-file %s: %s\n", c.cursor_file, strerror(errno));
                goto out;
            }
        } else {
            snprintf(cur, sizeof(cur), "%s", c.after);
        }
        rc = ingest_catalog_feed(cat, cur, c.limit, &f, print_entry, &L, next, sizeof(next));
        if (rc == 0) {
            char *p = out_room(&L.o), *s = p;
            p = put_str(p, c.format == F_JSONL ? "{\"cursor\":\"" : "cursor ");
            p = put_str(p, next);
            p = put_str(p, c.format == F_JSONL ? "\"}\n" : "\n");
            L.o.len += (size_t)(p - s);
        }
        out_flush(&L.o);
        if (rc == 0 && !L.o.failed && c.cursor_file != NULL) {
            char line[INGEST_CATALOG_CURSOR_MAX + 2];
            snprintf(line, sizeof(line), "%s\n", next);
            if (prog_write_file_durable(c.cursor_file, line) != 0) {
                fprintf(stderr, "ingestctl catalog: --cursor-file %s: %s\n", c.cursor_file, strerror(errno));
                goto out;
            }
        }
    } else {
        rc = ingest_catalog_list(cat, &f, print_entry, &L);
        out_flush(&L.o);
    }
    if (L.o.failed) {
        if (L.o.failed != EPIPE)
            fprintf(stderr, "ingestctl catalog: write: %s\n", strerror(L.o.failed));
        goto out;
    }
    if (rc < 0) {
        fprintf(stderr, "ingestctl catalog: %s\n", ingest_ctx_errmsg(ctx));
        status = rc == INGEST_EINVAL || rc == INGEST_ESTALE ? 2 : 1;
        goto out;
    }
    status = 0;
out:
    free(L.o.buf);
    ingest_catalog_close(cat);
    ingest_ctx_destroy(ctx);
    return status;
}

/* ---- verify ---------------------------------------------------------------- */

typedef struct verifier {
    int tty;
    out problems; /* the JSON array's elements (problems.fd unused) */
    size_t pcap;
    uint64_t nproblems;
    int progress_shown;
} verifier;

static const char *problem_name(int what)
{
    return what == INGEST_VERIFY_MISSING ? "missing" : what == INGEST_VERIFY_CHANGED ? "changed" : "corrupt";
}

static void on_problem(void *ud, int what, const ingest_catalog_entry *e, const char *detail)
{
    verifier *V = ud;
    if (V->progress_shown) {
        fputs("\r\033[K", stderr);
        V->progress_shown = 0;
    }
    char esc[600];
    fprintf(stderr, "verify: %s %s (device %s, batch %s, version %llu): %s\n", problem_name(what),
            prog_escape(esc, sizeof(esc), e->landed), e->device, e->batch, (unsigned long long)e->version, detail);
    out *o = &V->problems;
    if (o->failed)
        return;
    if (o->len + OUT_SLACK > V->pcap) {
        const size_t nc = V->pcap * 2;
        char *nb = realloc(o->buf, nc);
        if (nb == NULL) {
            o->failed = ENOMEM;
            fprintf(stderr, "verify: out of memory: the summary will not name every problem\n");
            return;
        }
        o->buf = nb;
        V->pcap = nc;
    }
    char *p = o->buf + o->len, *s = p;
    if (V->nproblems++ > 0)
        *p++ = ',';
    p = put_str(p, "{\"problem\":\"");
    p = put_str(p, problem_name(what));
    p = put_str(p, "\",\"device\":");
    p = put_json(p, e->device, strlen(e->device));
    p = put_str(p, ",\"landed\":");
    p = put_json(p, e->landed, e->landed_len);
    p = put_str(p, ",\"path\":");
    p = put_json(p, e->path, e->path_len);
    p = put_str(p, ",\"version\":");
    p = put_u64(p, e->version);
    p = put_str(p, ",\"batch\":");
    p = put_json(p, e->batch, strlen(e->batch));
    p = put_str(p, ",\"detail\":");
    p = put_json(p, detail, strlen(detail));
    *p++ = '}';
    o->len += (size_t)(p - s);
}

static void on_progress(void *ud, uint64_t files, uint64_t bytes, uint64_t total_files, uint64_t total_bytes)
{
    verifier *V = ud;
    if (!V->tty)
        return;
    fprintf(stderr, "\r\033[Kverify: %llu/%llu files, %.1f/%.1f MB", (unsigned long long)files,
            (unsigned long long)total_files, (double)bytes / 1e6, (double)total_bytes / 1e6);
    V->progress_shown = 1;
}

static void verify_usage(FILE *f)
{
    fprintf(f, "usage: ingestctl verify (--config RECEIVER.yaml | --bronze DIR --dedup-key FILE) [--device NAME]\n"
               "                        [--since TIME] [--until TIME] [--prefix LANDED_PREFIX] [--threads N]\n"
               "                        [--no-catch-up]\n"
               "Re-hashes every landed file (current versions) against its manifest: each chunk id and the\n"
               "whole-file hash, keyed with the fleet's dedup key.  Prints a JSON summary; exit 1 naming every\n"
               "file missing, changed or corrupt (and when a manifest could not be read).\n");
}

int cmd_verify(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        verify_usage(stdout);
        return 0;
    }
    hexpairs_init();
    json_plain_init();
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 1;
    ingest_ctx_set_log(ctx, lib_log, NULL, INGEST_LOG_WARN);
    copts c;
    memset(&c, 0, sizeof(c));
    c.format = -1;
    ingest_receiver_config *cfg = NULL;
    ingest_catalog *cat = NULL;
    verifier V;
    memset(&V, 0, sizeof(V));
    uint8_t key[INGEST_KEY_BYTES];
    int status = parse_opts("verify", argc, argv, &c, ctx);
    if (status != 0)
        goto out;
    status = 2;
    if (c.config != NULL) {
        if (ingest_receiver_config_load(ctx, c.config, &cfg) < 0) {
            fprintf(stderr, "ingestctl verify: %s\n", ingest_ctx_errmsg(ctx));
            goto out;
        }
        if (c.bronze == NULL)
            c.bronze = cfg->bronze;
        if (c.dedup_key == NULL)
            c.dedup_key = cfg->dedup_key;
    }
    if (c.bronze == NULL || c.dedup_key == NULL || c.feed || c.format >= 0 || c.all_versions || c.info) {
        verify_usage(stderr);
        goto out;
    }
    status = 1;
    if (ingest_dedup_key_load(ctx, c.dedup_key, key) < 0) {
        fprintf(stderr, "ingestctl verify: %s\n", ingest_ctx_errmsg(ctx));
        goto out;
    }
    if ((cat = open_catalog("verify", ctx, &c)) == NULL)
        goto out;
    V.tty = isatty(2);
    V.pcap = 1 << 16;
    if ((V.problems.buf = malloc(V.pcap)) == NULL)
        goto out;
    ingest_catalog_filter f;
    memset(&f, 0, sizeof(f));
    f.device = c.device;
    f.prefix = c.prefix;
    f.since_ns = c.since;
    f.until_ns = c.until;
    ingest_catalog_verify_opts vo;
    memset(&vo, 0, sizeof(vo));
    vo.key = key;
    vo.threads = c.threads;
    vo.filter = &f;
    vo.problem = on_problem;
    vo.progress = on_progress;
    vo.ud = &V;
    ingest_catalog_verify_stats st;
    const double t0 = prog_now();
    const int rc = ingest_catalog_verify(cat, &vo, &st);
    if (V.progress_shown)
        fputs("\r\033[K", stderr);
    if (rc < 0) {
        fprintf(stderr, "ingestctl verify: %s\n", ingest_ctx_errmsg(ctx));
        goto out;
    }
    const double secs = prog_now() - t0;
    long nt = c.threads ? (long)c.threads : sysconf(_SC_NPROCESSORS_ONLN);
    printf("{\"files\":%llu,\"bytes\":%llu,\"ok\":%llu,\"missing\":%llu,\"changed\":%llu,\"corrupt\":%llu,"
           "\"skipped\":%llu,\"threads\":%ld,\"seconds\":%.3f,\"mb_per_s\":%.1f,\"problems\":[",
           (unsigned long long)st.files, (unsigned long long)st.bytes, (unsigned long long)st.ok,
           (unsigned long long)st.missing, (unsigned long long)st.changed, (unsigned long long)st.corrupt,
           (unsigned long long)st.skipped, nt < 1 ? 1 : nt, secs, secs > 0 ? (double)st.bytes / 1e6 / secs : 0.0);
    fwrite(V.problems.buf, 1, V.problems.len, stdout);
    printf("]}\n");
    if (st.skipped > 0)
        fprintf(stderr, "verify: %llu batches or files could not be checked (see the warnings above)\n",
                (unsigned long long)st.skipped);
    if (st.corrupt > 1 && st.ok == 0 && st.changed == 0)
        /* file hashes are keyed: a wrong key makes every file look corrupt, a real corruption rarely all */
        fprintf(stderr, "verify: every file read (%llu) differs from its manifest's hash: is the dedup key the "
                        "receiver's (--dedup-key, or the config's dedup_key)? File hashes are keyed with it\n",
                (unsigned long long)st.corrupt);
    status = st.missing || st.changed || st.corrupt || st.skipped || V.problems.failed ? 1 : 0;
out:
    free(V.problems.buf);
    ingest_catalog_close(cat);
    ingest_receiver_config_free(cfg);
    ingest_ctx_destroy(ctx);
    return status;
}
