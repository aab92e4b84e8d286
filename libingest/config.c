/*
 * The YAML configuration loader of ingest-agent and ingest-receiver.
 *
 * Each program has one table of rows (cfg_row): dotted key name, type,
 * bounds, default, offset of the field in the program's plain struct and a
 * description.  The loader walks libyaml's event stream (never a document
 * tree), so nesting depth, value sizes and list lengths are checked as the
 * events arrive, and anchors, aliases and tags are refused outright.
 *
 * A list of strings (T_STRLIST: `sources[].include`) is one row whose
 * field is a char ** with a count beside it (count_off); row->max bounds
 * the entries and row->check runs on each entry.
 *
 * A list of mappings (the agent's `sources`) is one row of type T_LIST;
 * the keys of its entries are rows named "sources[].KEY" whose offsets are
 * into the entry struct, so adding a per-source key is adding one row.
 *
 * Defaults are written as YAML text and go through the same converter as
 * the file's values, so the --help listing shows exactly what is applied.
 */
#include "internal.h"
#include "ingest/config.h"
#include "ingest/filter.h"
#include "ingest/index.h"
#include "ingest/sender.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

enum { T_STRING, T_PATH, T_BOOL, T_INT, T_SIZE, T_DURATION, T_ENUM, T_LIST, T_STRLIST, T_RATE };

#define F_REQUIRED 1u

#define CFG_NAME_MAX 256 /* longest dotted key name we track */
#define CFG_DIR_MAX 4096
#define CFG_SUN_PATH_MAX 107 /* sizeof(sockaddr_un.sun_path) - 1 on Linux */

typedef struct cfg_enum {
    const char *name;
    int value;
} cfg_enum;

typedef struct cfg_mark {
    size_t line, col; /* 1-based; line 0 = none */
} cfg_mark;

typedef struct cfg_parser cfg_parser;
typedef struct cfg_row cfg_row;
typedef struct cfg_inst cfg_inst;

/* Extra validation of a string value (already stored); 0 or an error. */
typedef int (*cfg_check_fn)(cfg_parser *p, const char *shown, const char *value, cfg_mark at);
/* Cross-key checks once an object (the whole file, one list entry) is read. */
typedef int (*cfg_finish_fn)(cfg_parser *p, cfg_inst *inst);

struct cfg_row {
    const char *name;
    int type;
    unsigned flags;
    const char *def; /* YAML text of the default; NULL: none (required, or set by finish) */
    const char *def_doc; /* shown as the default when def is NULL and the key is optional */
    size_t off, width;
    int64_t min, max; /* T_INT/T_SIZE/T_DURATION/T_RATE bounds; T_LIST/T_STRLIST entry count */
    const cfg_enum *enums; /* T_ENUM, NULL-terminated */
    cfg_check_fn check;    /* T_STRING/T_PATH; T_STRLIST: each entry */
    size_t count_off, elem_size; /* T_LIST (count_off also T_STRLIST) */
    cfg_finish_fn finish_entry;  /* T_LIST */
    const char *desc;
};

typedef struct cfg_schema {
    const cfg_row *rows;
    size_t nrows;
    cfg_finish_fn finish;
} cfg_schema;

struct cfg_parser {
    ingest_ctx *ctx;
    const cfg_schema *schema;
    const char *file;
    const unsigned char *data;
    size_t len;
    char *basedir;
    yaml_parser_t yp;
    yaml_event_t ev;
    bool yp_init, have_ev;
    int depth;
};

/* One object being filled: the top-level struct or one list entry. */
struct cfg_inst {
    const char *prefix; /* row-name prefix: "" or "sources[]." */
    char shown[CFG_NAME_MAX + 96]; /* prefix in messages: "" or "sources[2]." */
    void *base;
    cfg_mark *seen;     /* per row: where it was set */
    char **sections;    /* section names already opened ("batch.") */
    size_t nsections;
    cfg_mark start;
};

#define FIELD(S, m) .off = offsetof(S, m), .width = sizeof(((S *)0)->m)

/* ---- validators ---------------------------------------------------------- */

static int perr(cfg_parser *p, cfg_mark at, const char *fmt, ...) INGEST__PRINTF(3, 4);

static int perr(cfg_parser *p, cfg_mark at, const char *fmt, ...)
{
    char msg[INGEST__ERRMSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (at.line == 0)
        at.line = at.col = 1;
    return ingest__fail(p->ctx, INGEST_EINVAL, "%s:%zu:%zu: %s", p->file, at.line, at.col, msg);
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

/* [A-Za-z0-9._-]{1,64}, and not "." or ".." (names become path components). */
static bool valid_name(const char *s)
{
    const size_t n = strlen(s);
    if (n == 0 || n > 64 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_name_char(s[i]))
            return false;
    return true;
}

static int check_name(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    if (!valid_name(value))
        return perr(p, at,
                    "key '%s': '%s' is not a valid name (1 to 64 of A-Z a-z 0-9 . _ -, not . or ..)",
                    shown, value);
    return INGEST_OK;
}

/* "host:port" or "[v6addr]:port"; port 1..65535. */
static int hostport_problem(const char *v, bool allow_zero, const char **why)
{
    const char *colon;
    if (v[0] == '[') {
        const char *close = strchr(v, ']');
        if (close == NULL || close == v + 1 || close[1] != ':') {
            *why = "expected [address]:port";
            return -1;
        }
        for (const char *c = v + 1; c < close; c++)
            if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || (*c >= 'A' && *c <= 'F') ||
                  *c == ':' || *c == '.')) {
                *why = "bad character in the bracketed address";
                return -1;
            }
        colon = close + 1;
    } else {
        colon = strrchr(v, ':');
        if (colon == NULL) {
            *why = "expected host:port";
            return -1;
        }
        if (colon == v) {
            *why = "the host is missing";
            return -1;
        }
        for (const char *c = v; c < colon; c++) {
            if (*c == ':') {
                *why = "write IPv6 addresses in brackets, as [::1]:7443";
                return -1;
            }
            if (!is_name_char(*c)) {
                *why = "bad character in the host name";
                return -1;
            }
        }
    }
    const char *port = colon + 1;
    const size_t n = strlen(port);
    if (n == 0 || n > 5) {
        *why = "the port must be a number from 1 to 65535";
        return -1;
    }
    long val = 0;
    for (size_t i = 0; i < n; i++) {
        if (port[i] < '0' || port[i] > '9') {
            *why = "the port must be a number from 1 to 65535";
            return -1;
        }
        val = val * 10 + (port[i] - '0');
    }
    if ((val < 1 && !(allow_zero && val == 0)) || val > 65535) {
        *why = allow_zero ? "the port must be a number from 0 to 65535" : "the port must be a number from 1 to 65535";
        return -1;
    }
    return 0;
}

static int check_hostport(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    const char *why = NULL;
    if (hostport_problem(value, false, &why) != 0)
        return perr(p, at, "key '%s': bad address '%s': %s", shown, value, why);
    return INGEST_OK;
}

/* A listening address may use port 0: an ephemeral port (the receiver reports the one bound). */
static int check_listen(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    const char *why = NULL;
    if (hostport_problem(value, true, &why) != 0)
        return perr(p, at, "key '%s': bad address '%s': %s", shown, value, why);
    return INGEST_OK;
}

static int check_listen(cfg_parser *p, const char *shown, const char *value, cfg_mark at);

static int check_listen_or_empty(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    return value[0] == '\0' ? INGEST_OK : check_listen(p, shown, value, at);
}


static const char *const layout_placeholders[] = { "{device}", "{path}", "{yyyy}", "{mm}",
                                                   "{dd}",     "{batch}", NULL };

static int check_layout(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    bool has_path = false;
    if (value[0] == '/')
        return perr(p, at, "key '%s': the layout must be relative to the bronze root", shown);
    for (const char *c = value; *c != '\0';) {
        if (*c == '}')
            return perr(p, at, "key '%s': unmatched '}' at offset %zu", shown, (size_t)(c - value));
        if (*c != '{') {
            /* no ".." path component */
            if ((c == value || c[-1] == '/') && c[0] == '.' && c[1] == '.' &&
                (c[2] == '/' || c[2] == '\0'))
                return perr(p, at, "key '%s': '..' is not allowed in the layout", shown);
            c++;
            continue;
        }
        size_t i;
        for (i = 0; layout_placeholders[i] != NULL; i++) {
            const size_t n = strlen(layout_placeholders[i]);
            if (strncmp(c, layout_placeholders[i], n) == 0) {
                if (i == 1)
                    has_path = true;
                c += n;
                break;
            }
        }
        if (layout_placeholders[i] == NULL) {
            const char *close = strchr(c, '}');
            const int n = close ? (int)(close - c + 1) : (int)strlen(c);
            return perr(p, at,
                        "key '%s': unknown placeholder '%.*s' (known: {device} {path} {yyyy} {mm} "
                        "{dd} {batch})",
                        shown, n > 40 ? 40 : n, c);
        }
    }
    if (!has_path)
        return perr(p, at, "key '%s': the layout must contain {path}", shown);
    return INGEST_OK;
}

/* A glob of sources[].include / exclude (include/ingest/filter.h). */
static int check_glob(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    char why[INGEST__ERRMSG_MAX];
    if (ingest_filter_glob_check(p->ctx, value) == INGEST_OK)
        return INGEST_OK;
    snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(p->ctx));
    return perr(p, at, "key '%s': %s", shown, why);
}

static int check_prefix(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    char why[INGEST__ERRMSG_MAX];
    uint8_t bytes[INGEST_FILTER_MAX_PREFIX];
    size_t n;
    if (ingest_filter_prefix_parse(p->ctx, value, bytes, sizeof(bytes), &n) == INGEST_OK)
        return INGEST_OK;
    snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(p->ctx));
    return perr(p, at, "key '%s': %s", shown, why);
}

static int check_after_ship(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    if (strcmp(value, "keep") == 0 || strcmp(value, "delete") == 0 ||
        (strncmp(value, "move:", 5) == 0 && value[5] != '\0'))
        return INGEST_OK;
    if (strcmp(value, "move:") == 0 || strcmp(value, "move") == 0)
        return perr(p, at, "key '%s': 'move' needs a directory: move:DIR", shown);
    return perr(p, at, "key '%s': '%s' is not keep, delete or move:DIR", shown, value);
}

/* "HH:MM-HH:MM", 00:00..23:59, two different times; minutes of the day. */
static int parse_window(const char *s, int *start, int *end)
{
    int v[4];
    const char *c = s;
    for (int i = 0; i < 4; i++) {
        if (c[0] < '0' || c[0] > '9' || c[1] < '0' || c[1] > '9')
            return -1;
        v[i] = (c[0] - '0') * 10 + (c[1] - '0');
        c += 2;
        const char sep = i == 0 || i == 2 ? ':' : i == 1 ? '-' : '\0';
        if (*c != sep)
            return -1;
        if (sep != '\0')
            c++;
    }
    if (v[0] > 23 || v[2] > 23 || v[1] > 59 || v[3] > 59)
        return -1;
    *start = v[0] * 60 + v[1];
    *end = v[2] * 60 + v[3];
    return *start == *end ? -1 : 0;
}

static int check_window(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    int a, b;
    if (parse_window(value, &a, &b) != 0)
        return perr(p, at,
                    "key '%s': bad window '%s': expected HH:MM-HH:MM (local time, 00:00 to 23:59, two "
                    "different times; \"\" = always)",
                    shown, value);
    return INGEST_OK;
}

/* ---- the tables ---------------------------------------------------------- */

static const cfg_enum transport_enum[] = { { "tcp", INGEST_TRANSPORT_TCP },
                                           { "kafka", INGEST_TRANSPORT_KAFKA },
                                           { NULL, 0 } };
static const cfg_enum spool_enum[] = { { "none", INGEST_SPOOL_NONE },
                                       { "copy", INGEST_SPOOL_COPY },
                                       { NULL, 0 } };
static const cfg_enum log_enum[] = { { "error", INGEST_LOG_ERROR }, { "warn", INGEST_LOG_WARN },
                                     { "info", INGEST_LOG_INFO },   { "debug", INGEST_LOG_DEBUG },
                                     { NULL, 0 } };

static const cfg_enum dedup_scope_enum[] = { { "fleet", INGEST_DEDUP_FLEET },
                                              { "device", INGEST_DEDUP_DEVICE },
                                              { NULL, 0 } };

static int finish_source(cfg_parser *p, cfg_inst *inst);
static int finish_agent(cfg_parser *p, cfg_inst *inst);

#define KiB 1024ll
#define MiB (1024ll * 1024)
#define GiB (1024ll * 1024 * 1024)
#define TiB (1024ll * GiB)
#define SEC ((int64_t)1000)
#define HOUR (3600 * SEC)
#define PiB (1024ll * TiB)

_Static_assert(INGEST_CONFIG_MAX_SOURCES == INGEST_SENDER_MAX_SOURCES,
               "a config the loader takes must not be refused by the sender at start");

#define A ingest_agent_config
#define S ingest_source_config
static const cfg_row agent_rows[] = {
    { .name = "device.id", .type = T_STRING, .flags = F_REQUIRED, FIELD(A, device_id),
      .check = check_name, .desc = "Identity of this device: 1 to 64 of A-Z a-z 0-9 . _ -" },
    { .name = "device.key", .type = T_PATH, .flags = F_REQUIRED, FIELD(A, device_key),
      .desc = "File holding this device's secret key (ingestctl keygen)" },
    { .name = "core.address", .type = T_STRING, .flags = F_REQUIRED, FIELD(A, core_address),
      .check = check_hostport, .desc = "Receiver to ship to, host:port ([v6addr]:port)" },
    { .name = "core.receiver_key", .type = T_PATH, .flags = F_REQUIRED, FIELD(A, core_receiver_key),
      .desc = "The receiver's public key file (.pub), pinned" },
    { .name = "transport", .type = T_ENUM, .def = "tcp", FIELD(A, transport),
      .enums = transport_enum, .desc = "How batches travel: tcp (direct session) or kafka" },
    { .name = "dedup_key", .type = T_PATH, .flags = F_REQUIRED, FIELD(A, dedup_key),
      .desc = "The fleet's chunk-id key file, the same on every device and the receiver" },
    { .name = "sources", .type = T_LIST, .flags = F_REQUIRED, FIELD(A, sources),
      .count_off = offsetof(A, sources_count), .elem_size = sizeof(S), .min = 1,
      .max = INGEST_CONFIG_MAX_SOURCES, .finish_entry = finish_source,
      .desc = "Directories to ship: a list of mappings with the keys below" },
    { .name = "sources[].path", .type = T_PATH, .flags = F_REQUIRED, FIELD(S, path),
      .desc = "Directory whose files are shipped" },
    { .name = "sources[].name", .type = T_STRING, FIELD(S, name), .check = check_name,
      .def_doc = "(last component of path)",
      .desc = "Short name of the source (default: last component of path)" },
    { .name = "sources[].include", .type = T_STRLIST, FIELD(S, include),
      .count_off = offsetof(S, include_count), .max = INGEST_FILTER_MAX_GLOBS, .check = check_glob,
      .def_doc = "[]", .desc = "Globs on the path under the source; ship only matching files ([] = all)" },
    { .name = "sources[].exclude", .type = T_STRLIST, FIELD(S, exclude),
      .count_off = offsetof(S, exclude_count), .max = INGEST_FILTER_MAX_GLOBS, .check = check_glob,
      .def_doc = "[]", .desc = "Globs on the path under the source; never ship matching files" },
    { .name = "sources[].min_size", .type = T_SIZE, .def = "0", FIELD(S, min_size), .min = 0,
      .max = PiB, .desc = "Skip files smaller than this" },
    { .name = "sources[].max_size", .type = T_SIZE, .def = "0", FIELD(S, max_size), .min = 0,
      .max = PiB, .desc = "Skip files larger than this (0 = no limit)" },
    { .name = "sources[].max_age", .type = T_DURATION, .def = "0", FIELD(S, max_age_ms), .min = 0,
      .max = 87600 * HOUR, .desc = "Skip files last modified longer ago than this (0 = no limit)" },
    { .name = "sources[].sample_every", .type = T_INT, .def = "1", FIELD(S, sample_every), .min = 1,
      .max = 1000000, .desc = "Ship 1 in N files, chosen by a hash of the path (1 = all)" },
    { .name = "sources[].drop_if_prefix", .type = T_STRING, .def = "", FIELD(S, drop_if_prefix),
      .check = check_prefix,
      .desc = "Skip files starting with these bytes: hex:0000ffff or a string (\"\" = off)" },
    { .name = "sources[].settle", .type = T_DURATION, .def = "2s", FIELD(S, settle_ms), .min = 0,
      .max = 24 * HOUR, .desc = "Take a file once its size and mtime were unchanged this long" },
    { .name = "sources[].spool", .type = T_ENUM, .def = "none", FIELD(S, spool), .enums = spool_enum,
      .desc = "none (read files in place) or copy (copy into the spool when taken)" },
    { .name = "sources[].after_ship", .type = T_STRING, .def = "keep", FIELD(S, after_ship),
      .check = check_after_ship,
      .desc = "After the core acks a file: keep, delete or move:DIR (DIR outside the source)" },
    { .name = "state_dir", .type = T_PATH, .flags = F_REQUIRED, FIELD(A, state_dir),
      .desc = "Directory of the agent's journal and caches (LMDB)" },
    { .name = "chunking.min", .type = T_SIZE, .def = "16KiB", FIELD(A, chunking.min), .min = 64,
      .max = 64 * MiB, .desc = "Smallest chunk; files below it are one chunk" },
    { .name = "chunking.avg", .type = T_SIZE, .def = "64KiB", FIELD(A, chunking.avg), .min = 64,
      .max = 64 * MiB, .desc = "Target average chunk size, a power of two" },
    { .name = "chunking.max", .type = T_SIZE, .def = "256KiB", FIELD(A, chunking.max), .min = 64,
      .max = 64 * MiB, .desc = "Largest chunk (forced cut); min < avg < max" },
    { .name = "compression.level", .type = T_INT, .def = "1", FIELD(A, compression_level),
      .min = -7, .max = 19, .desc = "zstd level; 1 is the measured sweet spot, negative = faster" },
    { .name = "compression.dictionary", .type = T_PATH, .def = "",
      FIELD(A, compression_dictionary), .desc = "Trained zstd dictionary file (\"\" = none)" },
    { .name = "batch.max_files", .type = T_INT, .def = "1000", FIELD(A, batch_max_files), .min = 1,
      .max = 10000000, .desc = "Close a batch at this many files" },
    { .name = "batch.max_bytes", .type = T_SIZE, .def = "256MiB", FIELD(A, batch_max_bytes),
      .min = 64 * KiB, .max = 64 * GiB, .desc = "Close a batch at this many bytes of file data" },
    { .name = "batch.max_wait", .type = T_DURATION, .def = "5s", FIELD(A, batch_max_wait_ms),
      .min = 10, .max = 24 * HOUR, .desc = "Close a batch this long after its first file" },
    { .name = "havecache.max_entries", .type = T_INT, .def = "4000000",
      FIELD(A, havecache_max_entries), .min = 1024, .max = 1000000000,
      .desc = "Chunk ids the agent remembers the core holds" },
    { .name = "log.level", .type = T_ENUM, .def = "info", FIELD(A, log_level), .enums = log_enum,
      .desc = "Least severe messages logged: error, warn, info or debug" },
    { .name = "metrics.listen", .type = T_STRING, .def = "", FIELD(A, metrics_listen),
      .check = check_listen_or_empty, .desc = "Prometheus endpoint host:port (\"\" = off; port 0: any free port)" },
    { .name = "rescan_interval", .type = T_DURATION, .def = "60s", FIELD(A, rescan_interval_ms),
      .min = 10, .max = 24 * HOUR, .desc = "Walk every source this often (besides inotify)" },
    { .name = "spool.quota", .type = T_SIZE, .def = "1GiB", FIELD(A, spool_quota), .min = MiB,
      .max = PiB, .desc = "Most bytes the spool (sources with spool: copy) may hold" },
    { .name = "queue.max_files", .type = T_INT, .def = "100000", FIELD(A, queue_max_files), .min = 1,
      .max = 100000000, .desc = "Files waiting to ship before the scan pauses" },
    { .name = "queue.max_bytes", .type = T_SIZE, .def = "4GiB", FIELD(A, queue_max_bytes),
      .min = MiB, .max = PiB, .desc = "Bytes of files waiting to ship before the scan pauses" },
    { .name = "throttle.rate", .type = T_RATE, .def = "0", FIELD(A, throttle_rate), .min = 0,
      .max = PiB, .desc = "Most bytes per second on the wire, e.g. 10MiB or 10MiB/s (0 = unlimited)" },
    { .name = "throttle.window", .type = T_STRING, .def = "", FIELD(A, throttle_window),
      .check = check_window,
      .desc = "Ship only between these local times, HH:MM-HH:MM (\"\" = always)" },
    { .name = "status.socket", .type = T_PATH, FIELD(A, status_socket),
      .def_doc = "{state_dir}/agent.sock", .desc = "Unix socket for ingestctl status" },
};
#undef A
#undef S

#define R ingest_receiver_config
static const cfg_row receiver_rows[] = {
    { .name = "listen", .type = T_STRING, .def = "127.0.0.1:7443", FIELD(R, listen),
      .check = check_listen, .desc = "Address the receiver accepts devices on, host:port (port 0: any free port)" },
    { .name = "key", .type = T_PATH, .flags = F_REQUIRED, FIELD(R, key),
      .desc = "File holding the receiver's secret key (ingestctl keygen)" },
    { .name = "authorized_devices", .type = T_PATH, .flags = F_REQUIRED,
      FIELD(R, authorized_devices), .desc = "File listing the devices allowed in, with their public keys" },
    { .name = "dedup_key", .type = T_PATH, .flags = F_REQUIRED, FIELD(R, dedup_key),
      .desc = "The fleet's chunk-id key file, the same as on the devices" },
    { .name = "state_dir", .type = T_PATH, .flags = F_REQUIRED, FIELD(R, state_dir),
      .desc = "Directory of the chunk index (LMDB)" },
    { .name = "bronze", .type = T_PATH, .flags = F_REQUIRED, FIELD(R, bronze),
      .desc = "Root of the landing zone where files are written" },
    { .name = "layout", .type = T_STRING, .def = "{device}/{yyyy}/{mm}/{dd}/{path}", FIELD(R, layout),
      .check = check_layout,
      .desc = "Where a file lands under bronze; {device} {path} {yyyy} {mm} {dd} {batch}" },
    { .name = "layout_shared", .type = T_BOOL, .def = "false", FIELD(R, layout_shared),
      .desc = "Allow a layout without {device}: devices then share paths, and one device's file replaces "
              "another's" },
    { .name = "max_connections", .type = T_INT, .def = "64", FIELD(R, max_connections), .min = 1,
      .max = 65536,
      .desc = "Authenticated device sessions at once; more wait up to 10s for one to end, then are told the "
              "receiver is busy" },
    { .name = "handshake.timeout", .type = T_DURATION, .def = "10s", FIELD(R, handshake_timeout_ms), .min = SEC,
      .max = 300 * SEC, .desc = "A connection must authenticate this soon after it is accepted" },
    { .name = "handshake.first_byte_timeout", .type = T_DURATION, .def = "3s", FIELD(R, handshake_first_byte_ms),
      .min = 100, .max = 60 * SEC, .desc = "A connection must send its first byte this soon after it is accepted" },
    { .name = "handshake.max_pending", .type = T_INT, .def = "256", FIELD(R, handshake_max_pending), .min = 1,
      .max = 4096,
      .desc = "Connections not authenticated yet, at once (not counted in max_connections); when full, the oldest "
              "silent one is dropped" },
    { .name = "handshake.max_pending_per_address", .type = T_INT, .def = "32", FIELD(R, handshake_max_per_address),
      .min = 1, .max = 4096, .desc = "The same, from one source address" },
    { .name = "idle_timeout", .type = T_DURATION, .def = "60s", FIELD(R, idle_timeout_ms),
      .min = SEC, .max = 24 * HOUR, .desc = "Close a device session silent this long" },
    { .name = "direct_io", .type = T_BOOL, .def = "true", FIELD(R, direct_io),
      .desc = "Write landed files (4 KiB or more) with O_DIRECT, past the page cache, where the filesystem allows" },
    { .name = "index.flush_interval", .type = T_DURATION, .def = "30s", FIELD(R, index_flush_interval_ms),
      .min = SEC, .max = 24 * HOUR,
      .desc = "Write the chunk index's new entries to disk at least this often (a crash replays them from the manifests)" },
    { .name = "index.flush_entries", .type = T_INT, .def = "65536", FIELD(R, index_flush_entries), .min = 1,
      .max = 4194304, .desc = "Write the chunk index's new entries to disk once this many are waiting" },
    { .name = "dedup.scope", .type = T_ENUM, .def = "fleet", FIELD(R, dedup_scope), .enums = dedup_scope_enum,
      .desc = "Whose landed chunks a batch may reuse: fleet (any device's) or device (its own only: no dedup across "
              "devices, and no device can test what others landed)" },
    { .name = "log.level", .type = T_ENUM, .def = "info", FIELD(R, log_level), .enums = log_enum,
      .desc = "Least severe messages logged: error, warn, info or debug" },
    { .name = "metrics.listen", .type = T_STRING, .def = "", FIELD(R, metrics_listen),
      .check = check_listen_or_empty, .desc = "Prometheus endpoint host:port (\"\" = off; port 0: any free port)" },
};
#undef R

static const cfg_schema agent_schema = { agent_rows, sizeof(agent_rows) / sizeof(agent_rows[0]),
                                         finish_agent };
static int finish_receiver(cfg_parser *p, cfg_inst *inst);
static const cfg_schema receiver_schema = { receiver_rows,
                                            sizeof(receiver_rows) / sizeof(receiver_rows[0]), finish_receiver };

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

static cfg_mark mark_of(const cfg_parser *p, const cfg_inst *inst, const char *name)
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
static void free_obj(ingest_ctx *ctx, const cfg_schema *schema, const char *prefix, void *base)
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
                free_obj(ctx, schema, sub, (char *)*arr + k * row->elem_size);
            ingest__free(ctx, *arr);
            *arr = NULL;
            *count = 0;
        } else if (row->type == T_STRLIST) {
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
static char *resolve_path(cfg_parser *p, const char *v)
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
        char *s = row->type == T_PATH ? resolve_path(p, text) : ingest__strdup(p->ctx, text);
        if (s == NULL)
            return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        char **f = field_str(base, row);
        ingest__free(p->ctx, *f);
        *f = s;
        if (row->check != NULL && text[0] != '\0')
            return row->check(p, shown, text, at);
        if (row->check != NULL && row->flags & F_REQUIRED)
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
            return perr(p, at, "key '%s': '%s' is not a boolean (true or false)", shown, text);
        memcpy((char *)base + row->off, &v, sizeof(v));
        return INGEST_OK;
    }
    case T_ENUM:
        for (const cfg_enum *e = row->enums; e->name != NULL; e++) {
            if (strcmp(e->name, text) == 0) {
                memcpy((char *)base + row->off, &e->value, sizeof(int));
                return INGEST_OK;
            }
        }
        {
            char list[128] = "";
            for (const cfg_enum *e = row->enums; e->name != NULL; e++) {
                if (list[0] != '\0')
                    strncat(list, ", ", sizeof(list) - strlen(list) - 1);
                strncat(list, e->name, sizeof(list) - strlen(list) - 1);
            }
            return perr(p, at, "key '%s': '%s' is not one of %s", shown, text, list);
        }
    case T_INT: {
        const char *c = text;
        const bool neg = *c == '-';
        uint64_t mag;
        if (neg || *c == '+')
            c++;
        if (*c < '0' || *c > '9' ||
            ingest_parse_size(NULL, c, &mag) != INGEST_OK || strspn(c, "0123456789_") != strlen(c))
            return perr(p, at, "key '%s': '%s' is not a whole number", shown, text);
        if (mag > (uint64_t)INT64_MAX ||
            (neg ? -(int64_t)mag < row->min : (int64_t)mag > row->max) ||
            (!neg && (int64_t)mag < row->min))
            return perr(p, at, "key '%s': %s is out of range (%" PRId64 "..%" PRId64 ")", shown, text,
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
            return perr(p, at, "key '%s': %s", shown, why);
        }
        if (v < (uint64_t)row->min || v > (uint64_t)row->max)
            return perr(p, at, "key '%s': %s is out of range (%" PRId64 "..%" PRId64 " %s)", shown,
                        text, row->min, row->max,
                        row->type == T_SIZE ? "bytes" : row->type == T_RATE ? "bytes/s" : "ms");
        store_uint(base, row, v);
        return INGEST_OK;
    }
    default:
        return perr(p, at, "key '%s': internal error: bad row type", shown);
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
            return perr(p, inst->start, "missing required key '%s%s'", inst->shown, rel);
        if (row->type == T_LIST && inst->seen[i].line != 0) {
            const size_t n = *(size_t *)((char *)inst->base + row->count_off);
            if (n < (size_t)row->min)
                return perr(p, inst->seen[i], "key '%s%s' needs at least %" PRId64 " entr%s",
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
    return perr(p, at, "malformed YAML: %s%s%s%s", y->problem ? y->problem : "syntax error",
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
        return perr(p, at, "YAML aliases (*name) are not supported (quote a value that starts with '*')");
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
            return perr(p, at, "nesting deeper than %d levels", INGEST_CONFIG_MAX_DEPTH);
        break;
    case YAML_MAPPING_END_EVENT:
    case YAML_SEQUENCE_END_EVENT:
        p->depth--;
        break;
    default:
        break;
    }
    if (anchor != NULL)
        return perr(p, at, "YAML anchors (&name) are not supported");
    if (tag != NULL)
        return perr(p, at, "YAML tags (!name) are not supported");
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

static const char *type_name(int type)
{
    static const char *const names[] = { "string", "path", "bool", "int", "size",
                                         "duration", "enum", "list", "strings", "rate" };
    return type >= 0 && type <= T_RATE ? names[type] : "?";
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
        return perr(p, ev_mark(&p->ev), "key '%s' must be a list", shown);
    for (;;) {
        INGEST__FORWARD(next_event(p));
        if (p->ev.type == YAML_SEQUENCE_END_EVENT)
            return INGEST_OK;
        const cfg_mark at = ev_mark(&p->ev);
        if (p->ev.type != YAML_MAPPING_START_EVENT)
            return perr(p, at, "each entry of '%s' must be a mapping", shown);
        if (*count >= (size_t)row->max)
            return perr(p, at, "key '%s' has more than %" PRId64 " entries", shown, row->max);
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
        return perr(p, ev_mark(&p->ev), "key '%s' must be a list of strings, e.g. [\"a\", \"b\"]",
                    shown);
    for (;;) {
        INGEST__FORWARD(next_event(p));
        if (p->ev.type == YAML_SEQUENCE_END_EVENT)
            return INGEST_OK;
        const cfg_mark at = ev_mark(&p->ev);
        snprintf(entry_shown, sizeof(entry_shown), "%s[%zu]", shown, *count);
        if (p->ev.type != YAML_SCALAR_EVENT)
            return perr(p, at, "key '%s' must be a string, not a %s", entry_shown,
                        p->ev.type == YAML_MAPPING_START_EVENT ? "mapping" : "list");
        if (*count >= (size_t)row->max)
            return perr(p, at, "key '%s' has more than %" PRId64 " entries", shown, row->max);
        const char *v = (const char *)p->ev.data.scalar.value;
        const size_t n = p->ev.data.scalar.length;
        if (n > INGEST_CONFIG_MAX_VALUE)
            return perr(p, at, "key '%s': value longer than %d bytes", entry_shown,
                        INGEST_CONFIG_MAX_VALUE);
        if (strlen(v) != n)
            return perr(p, at, "key '%s': value contains a NUL byte", entry_shown);
        if (scalar_is_null(&p->ev))
            return perr(p, at, "key '%s' needs a value", entry_shown);
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

/* The current event is the value of row (key at keymark). */
static int parse_value(cfg_parser *p, cfg_inst *inst, const cfg_row *row, const char *shown)
{
    if (row->type == T_LIST)
        return parse_list(p, inst, row, shown);
    if (row->type == T_STRLIST)
        return parse_strlist(p, inst, row, shown);
    const yaml_event_t *ev = &p->ev;
    const cfg_mark at = ev_mark(ev);
    if (ev->type == YAML_MAPPING_START_EVENT || ev->type == YAML_SEQUENCE_START_EVENT)
        return perr(p, at, "key '%s' must be a %s, not a %s", shown, type_name(row->type),
                    ev->type == YAML_MAPPING_START_EVENT ? "mapping" : "list");
    if (ev->type != YAML_SCALAR_EVENT)
        return perr(p, at, "key '%s': unexpected YAML event", shown);
    const char *v = (const char *)ev->data.scalar.value;
    const size_t n = ev->data.scalar.length;
    if (n > INGEST_CONFIG_MAX_VALUE)
        return perr(p, at, "key '%s': value longer than %d bytes", shown, INGEST_CONFIG_MAX_VALUE);
    if (strlen(v) != n)
        return perr(p, at, "key '%s': value contains a NUL byte", shown);
    if (scalar_is_null(ev)) {
        if (row->flags & F_REQUIRED)
            return perr(p, at, "key '%s' needs a value", shown);
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
            return perr(p, at, "a key must be a plain name, not a %s",
                        p->ev.type == YAML_MAPPING_START_EVENT ? "mapping" : "list");
        const char *key = (const char *)p->ev.data.scalar.value;
        const size_t klen = p->ev.data.scalar.length;
        if (klen > 128 || strlen(key) != klen)
            return perr(p, at, "unknown key '%s%s%.40s...'", inst->shown, path, key);
        snprintf(full, sizeof(full), "%s%s%s", inst->prefix, path, key);
        snprintf(shown, sizeof(shown), "%s%s%s", inst->shown, path, key);
        const cfg_row *row = find_row(p, inst, full);
        if (row != NULL) {
            const size_t idx = (size_t)(row - p->schema->rows);
            if (inst->seen[idx].line != 0)
                return perr(p, at, "duplicate key '%s' (first set at line %zu)", shown,
                            inst->seen[idx].line);
            inst->seen[idx] = at;
            INGEST__FORWARD(next_event(p));
            INGEST__FORWARD(parse_value(p, inst, row, shown));
            continue;
        }
        if (!is_section(p, inst, full))
            return perr(p, at, "unknown key '%s'", shown);
        /* A section such as "batch": a mapping of its keys. */
        const size_t plen = strlen(inst->prefix);
        for (size_t i = 0; i < inst->nsections; i++)
            if (strcmp(inst->sections[i], full + plen) == 0)
                return perr(p, at, "duplicate key '%s'", shown);
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
            return perr(p, ev_mark(&p->ev), "key '%s' must be a mapping of keys", shown);
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
        return perr(p, ev_mark(&p->ev), "malformed YAML: expected a document");
    INGEST__FORWARD(next_event(p));
    top->start = ev_mark(&p->ev);
    if (p->ev.type == YAML_MAPPING_START_EVENT) {
        INGEST__FORWARD(parse_mapping(p, top, ""));
    } else if (!(p->ev.type == YAML_SCALAR_EVENT && scalar_is_null(&p->ev))) {
        return perr(p, ev_mark(&p->ev), "the top level must be a mapping of keys");
    }
    INGEST__FORWARD(next_event(p)); /* DOCUMENT_END */
    INGEST__FORWARD(next_event(p));
    if (p->ev.type != YAML_STREAM_END_EVENT)
        return perr(p, ev_mark(&p->ev), "only one YAML document is allowed");
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
                return perr(p, (cfg_mark){ line, CFG_MAX_INDENT + 1 },
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
                    return perr(p, (cfg_mark){ line, col }, "nesting deeper than %d levels",
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

static int load_mem(ingest_ctx *ctx, const cfg_schema *schema, const char *name, const void *data,
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

static int read_file(ingest_ctx *ctx, const char *path, char **out, size_t *outlen)
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

/* ---- cross-key checks ---------------------------------------------------- */

static int finish_source_name(cfg_parser *p, cfg_inst *inst)
{
    ingest_source_config *s = inst->base;
    if (s->name != NULL && s->name[0] != '\0')
        return INGEST_OK;
    /* Default name: the last component of the path as written (resolved). */
    const char *path = s->path;
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    char name[72];
    const size_t n = end - start;
    if (n == 0 || n >= sizeof(name))
        return perr(p, inst->start, "cannot derive a source name from path '%s'; set %sname", path,
                    inst->shown);
    memcpy(name, path + start, n);
    name[n] = '\0';
    if (!valid_name(name))
        return perr(p, inst->start,
                    "cannot use '%s' (the end of path '%s') as a source name; set %sname to 1 to 64 "
                    "of A-Z a-z 0-9 . _ -",
                    name, path, inst->shown);
    char *dup = ingest__strdup(p->ctx, name);
    if (dup == NULL)
        return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
    ingest__free(p->ctx, s->name);
    s->name = dup;
    return INGEST_OK;
}

/* Length of a path without its trailing slashes (but "/" stays "/"). */
static size_t path_len_trimmed(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    return n;
}

static int finish_source(cfg_parser *p, cfg_inst *inst)
{
    ingest_source_config *s = inst->base;
    INGEST__FORWARD(finish_source_name(p, inst));
    if (s->max_size != 0 && s->max_size < s->min_size)
        return perr(p, mark_of(p, inst, "sources[].max_size"),
                    "key '%smax_size' (%" PRIu64 " bytes) is less than %smin_size (%" PRIu64 " bytes)",
                    inst->shown, s->max_size, inst->shown, s->min_size);
    s->after_ship_dir = "";
    if (strcmp(s->after_ship, "delete") == 0) {
        s->after_ship_mode = INGEST_AFTER_SHIP_DELETE;
    } else if (strncmp(s->after_ship, "move:", 5) == 0) {
        /* Resolve DIR like a path key and keep it inside the string. */
        const cfg_mark at = mark_of(p, inst, "sources[].after_ship");
        char *dir = resolve_path(p, s->after_ship + 5);
        char *moved = dir ? ingest__malloc(p->ctx, strlen(dir) + 6) : NULL;
        if (moved == NULL) {
            ingest__free(p->ctx, dir);
            return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        }
        memcpy(moved, "move:", 5);
        memcpy(moved + 5, dir, strlen(dir) + 1);
        ingest__free(p->ctx, dir);
        ingest__free(p->ctx, s->after_ship);
        s->after_ship = moved;
        s->after_ship_mode = INGEST_AFTER_SHIP_MOVE;
        s->after_ship_dir = moved + 5;
        const size_t dl = path_len_trimmed(s->after_ship_dir), sl = path_len_trimmed(s->path);
        if (dl >= sl && strncmp(s->after_ship_dir, s->path, sl) == 0 &&
            (dl == sl || s->after_ship_dir[sl] == '/' || (sl == 1 && s->path[0] == '/')))
            return perr(p, at,
                        "key '%safter_ship': the directory '%s' is inside the source '%s' (its files "
                        "would be shipped again)",
                        inst->shown, s->after_ship_dir, s->path);
    } else {
        s->after_ship_mode = INGEST_AFTER_SHIP_KEEP;
    }
    return INGEST_OK;
}

/*
 * A layout without {device} puts every device's files in one tree: a file of
 * one device lands over another device's file of the same path.  Only with
 * layout_shared: true, said on purpose.
 */
static int finish_receiver(cfg_parser *p, cfg_inst *inst)
{
    const ingest_receiver_config *cfg = inst->base;
    if (strstr(cfg->layout, "{device}") == NULL && !cfg->layout_shared)
        return perr(p, mark_of(p, inst, "layout"),
                    "key 'layout': \"%s\" has no {device}, so devices would overwrite each other's files of "
                    "the same path; add {device} (e.g. \"{device}/%s\"), or set layout_shared: true if that "
                    "is what you want",
                    cfg->layout, cfg->layout);
    return INGEST_OK;
}

static int finish_agent(cfg_parser *p, cfg_inst *inst)
{
    ingest_agent_config *cfg = inst->base;
    cfg->throttle_window_start = cfg->throttle_window_end = -1;
    if (cfg->throttle_window[0] != '\0' &&
        parse_window(cfg->throttle_window, &cfg->throttle_window_start, &cfg->throttle_window_end) != 0)
        return perr(p, mark_of(p, inst, "throttle.window"), "key 'throttle.window': bad window");
    if (cfg->status_socket[0] == '\0') {
        /* Default: {state_dir}/agent.sock. */
        const size_t n = path_len_trimmed(cfg->state_dir);
        char *sock = ingest__malloc(p->ctx, n + sizeof("/agent.sock"));
        if (sock == NULL)
            return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        memcpy(sock, cfg->state_dir, n);
        strcpy(sock + (n == 1 && cfg->state_dir[0] == '/' ? 0 : n), "/agent.sock");
        ingest__free(p->ctx, cfg->status_socket);
        cfg->status_socket = sock;
    } else if (strlen(cfg->status_socket) > CFG_SUN_PATH_MAX) {
        return perr(p, mark_of(p, inst, "status.socket"),
                    "key 'status.socket': '%.60s...' is %zu bytes long, more than the %d a unix "
                    "socket path may have",
                    cfg->status_socket, strlen(cfg->status_socket), CFG_SUN_PATH_MAX);
    }
    if (ingest_chunk_params_check(p->ctx, &cfg->chunking) != INGEST_OK) {
        char why[INGEST__ERRMSG_MAX];
        snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(p->ctx));
        cfg_mark at = mark_of(p, inst, "chunking.avg");
        if (at.line == inst->start.line && at.col == inst->start.col)
            at = mark_of(p, inst, "chunking.min");
        if (at.line == inst->start.line && at.col == inst->start.col)
            at = mark_of(p, inst, "chunking.max");
        return perr(p, at, "keys 'chunking.min/avg/max' (%" PRIu32 "/%" PRIu32 "/%" PRIu32 "): %s",
                    cfg->chunking.min, cfg->chunking.avg, cfg->chunking.max, why);
    }
    for (size_t i = 0; i < cfg->sources_count; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->sources[i].name, cfg->sources[j].name) == 0)
                return perr(p, mark_of(p, inst, "sources"),
                            "key 'sources[%zu].name': name '%s' is already used by sources[%zu]", i,
                            cfg->sources[i].name, j);
    return INGEST_OK;
}

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
    const int rc = load_mem(ctx, &agent_schema, name, data, len, &h->cfg);
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
    INGEST__FORWARD(read_file(ctx, path, &data, &len));
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
    free_obj(ctx, &agent_schema, "", cfg);
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
    const int rc = load_mem(ctx, &receiver_schema, name, data, len, &h->cfg);
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
    INGEST__FORWARD(read_file(ctx, path, &data, &len));
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
    free_obj(ctx, &receiver_schema, "", cfg);
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
    return program == INGEST_CONFIG_AGENT      ? &agent_schema
           : program == INGEST_CONFIG_RECEIVER ? &receiver_schema
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
            snprintf(bounds, sizeof(bounds), "%" PRId64 "..%" PRId64 " entries", row->min, row->max);
            break;
        default:
            break;
        }
        const ingest_config_key key = {
            .name = row->name,
            .type = type_name(row->type),
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
