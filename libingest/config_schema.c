/* The configuration's schema: value validators and the two programs' key tables (config_int.h). */
#include "config_int.h"
#include "ingest/codec.h"
#include "ingest/kafka.h"
#include "ingest/sender.h"
#include "ingest/wire.h"
#include "pathpolicy.h"

/* ---- validators ---------------------------------------------------------- */


int cfg__perr(cfg_parser *p, cfg_mark at, const char *fmt, ...)
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
bool cfg__valid_name(const char *s)
{
    const size_t n = strlen(s);
    if (n == 0 || n > 64 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_name_char(s[i]))
            return false;
    return true;
}

/* device.id: a name that is also a wire id (ingest_wire_id_valid), so what the config takes travels. */
static int check_device_id(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    if (!cfg__valid_name(value) || !ingest_wire_id_valid(value, strlen(value)))
        return cfg__perr(p, at,
                         "key '%s': '%s' is not a valid device id (1 to 64 of A-Z a-z 0-9 . _ -, starting with a "
                         "letter or digit)",
                         shown, value);
    return INGEST_OK;
}

static int check_name(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    if (!cfg__valid_name(value))
        return cfg__perr(p, at,
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
        return cfg__perr(p, at, "key '%s': bad address '%s': %s", shown, value, why);
    return INGEST_OK;
}

/* A listening address may use port 0: an ephemeral port (the receiver reports the one bound). */
static int check_listen(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    const char *why = NULL;
    if (hostport_problem(value, true, &why) != 0)
        return cfg__perr(p, at, "key '%s': bad address '%s': %s", shown, value, why);
    return INGEST_OK;
}

static int check_listen(cfg_parser *p, const char *shown, const char *value, cfg_mark at);

static int check_listen_or_empty(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    return value[0] == '\0' ? INGEST_OK : check_listen(p, shown, value, at);
}


/* The layout: the bronze tree's one rule (pathpolicy.h), which agents apply too. */
static int check_layout(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    char why[200];
    if (ingest__path_check_layout(value, why, sizeof why) != 0)
        return cfg__perr(p, at, "key '%s': %s", shown, why);
    return INGEST_OK;
}

/* A glob of sources[].include / exclude (include/ingest/filter.h). */
static int check_glob(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    char why[INGEST__ERRMSG_MAX];
    if (ingest_filter_glob_check(p->ctx, value) == INGEST_OK)
        return INGEST_OK;
    snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(p->ctx));
    return cfg__perr(p, at, "key '%s': %s", shown, why);
}

static int check_prefix(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    char why[INGEST__ERRMSG_MAX];
    uint8_t bytes[INGEST_FILTER_MAX_PREFIX];
    size_t n;
    if (ingest_filter_prefix_parse(p->ctx, value, bytes, sizeof(bytes), &n) == INGEST_OK)
        return INGEST_OK;
    snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(p->ctx));
    return cfg__perr(p, at, "key '%s': %s", shown, why);
}

static int check_after_ship(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    if (strcmp(value, "keep") == 0 || strcmp(value, "delete") == 0 ||
        (strncmp(value, "move:", 5) == 0 && value[5] != '\0'))
        return INGEST_OK;
    if (strcmp(value, "move:") == 0 || strcmp(value, "move") == 0)
        return cfg__perr(p, at, "key '%s': 'move' needs a directory: move:DIR", shown);
    return cfg__perr(p, at, "key '%s': '%s' is not keep, delete or move:DIR", shown, value);
}

/* "HH:MM-HH:MM", 00:00..23:59, two different times; minutes of the day. */
int cfg__parse_window(const char *s, int *start, int *end)
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
    if (cfg__parse_window(value, &a, &b) != 0)
        return cfg__perr(p, at,
                    "key '%s': bad window '%s': expected HH:MM-HH:MM (local time, 00:00 to 23:59, two "
                    "different times; \"\" = always)",
                    shown, value);
    return INGEST_OK;
}

/*
 * kafka.brokers: "" (the default: none), or host[:port] entries separated by
 * commas (blanks around them allowed), each perhaps after a protocol name
 * ("SSL://"), the host a name or an address ([IPv6] in brackets), the port
 * 1..65535.  What librdkafka would only say later, as a connection that
 * never comes, is said at load.
 */
static int check_brokers(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    const char *c = value;
    unsigned n = 0;
    while (*c != '\0') {
        while (*c == ' ')
            c++;
        const char *start = c, *proto = strstr(c, "://"), *comma = strchr(c, ',');
        const char *end = comma != NULL ? comma : c + strlen(c);
        if (proto != NULL && proto < end) {
            for (const char *q = c; q < proto; q++)
                if (!((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || *q == '_'))
                    goto bad;
            c = proto + 3;
        }
        if (*c == '[') {
            const char *close = memchr(c, ']', (size_t)(end - c));
            if (close == NULL || close == c + 1)
                goto bad;
            for (const char *q = c + 1; q < close; q++)
                if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f') || (*q >= 'A' && *q <= 'F') || *q == ':' ||
                      *q == '.'))
                    goto bad;
            c = close + 1;
        } else {
            const char *h = c;
            while (c < end && ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                               *c == '.' || *c == '-' || *c == '_'))
                c++;
            if (c == h)
                goto bad;
        }
        if (c < end && *c == ':') {
            char *pe;
            const unsigned long port = strtoul(c + 1, &pe, 10);
            if (pe == c + 1 || port < 1 || port > 65535)
                goto bad;
            c = pe;
        }
        while (c < end && *c == ' ')
            c++;
        if (c != end)
            goto bad;
        n++;
        c = comma != NULL ? comma + 1 : end;
        if (comma != NULL && *c == '\0') {
            start = end = c; /* a comma last: an empty entry after it */
            goto bad;
        }
        continue;
    bad:
        return cfg__perr(p, at, "key '%s': broker %u ('%.*s') is not host:port (a name or [IPv6 address], a port "
                                "1-65535, perhaps after PROTOCOL://; entries separated by commas)",
                         shown, n + 1, (int)(end - start), start);
    }
    return INGEST_OK;
}

/* A Kafka topic or group name: 1..249 of [A-Za-z0-9._-]. */
static int check_kafka_topic(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    const size_t n = strlen(value);
    if (n == 0)
        return INGEST_OK;
    if (n > 249 || strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n)
        return cfg__perr(p, at, "key '%s': '%.60s' is not a topic or group name (1 to 249 of A-Z a-z 0-9 . _ -)",
                         shown, value);
    return INGEST_OK;
}

/* kafka.properties: each entry as librdkafka takes it (named, with librdkafka's reason). */
static int check_kafka_property(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    const char *const one[1] = { value };
    if (ingest_kafka_check_properties(p->ctx, one, 1) != INGEST_OK) {
        char why[INGEST__ERRMSG_MAX];
        const char *m = ingest_ctx_errmsg(p->ctx), *r = strstr(m, ": "); /* after the property's name */
        snprintf(why, sizeof(why), "%s", r != NULL ? r + 2 : m);
        return cfg__perr(p, at, "key '%s': librdkafka refuses it: %s", shown, why);
    }
    return INGEST_OK;
}

/*
 * A property the transport sets after the file's (docs/kafka.md: what its
 * guarantee rests on) may only be given its value, in any spelling
 * librdkafka takes (acks: all, ALL or -1; request.required.acks is acks):
 * another one would be overridden without a word.  names[i] (or an alias
 * in aliases[]: "alias=name") must read as values[i].
 */
static int check_kept_property(cfg_parser *p, const char *shown, const char *value, cfg_mark at,
                               const char *const names[], const char *const values[], size_t n)
{
    static const char *const aliases[][2] = { { "request.required.acks", "acks" } };
    const char *eq = strchr(value, '=');
    if (eq == NULL)
        return INGEST_OK;
    char name[128];
    snprintf(name, sizeof(name), "%.*s", (int)(eq - value), value);
    const char *as = name;
    for (size_t k = 0; k < sizeof(aliases) / sizeof(aliases[0]); k++)
        if (strcmp(name, aliases[k][0]) == 0)
            as = aliases[k][1];
    for (size_t i = 0; i < n; i++) {
        if (strcmp(as, names[i]) != 0)
            continue;
        if (ingest__kafka_same_setting(name, eq + 1, as, values[i]) == 0)
            return cfg__perr(p, at, "key '%s': the transport keeps %s = %s (what its no-loss, no-duplicate "
                             "guarantee rests on, docs/kafka.md); it cannot be '%.60s'", shown, names[i], values[i],
                             eq + 1);
        return INGEST_OK;
    }
    return INGEST_OK;
}

static const char *const kept_producer[] = { "enable.idempotence", "acks" };
static const char *const kept_producer_v[] = { "true", "all" };

/* The receiver's kafka.properties: as librdkafka takes them, and not against what the transport keeps. */
static int check_receiver_kafka_property(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    INGEST__FORWARD(check_kafka_property(p, shown, value, at));
    static const char *const names[] = { "enable.idempotence", "acks", "enable.auto.commit" };
    static const char *const values[] = { "true", "all", "false" };
    return check_kept_property(p, shown, value, at, names, values, 3);
}

/* The agent's kafka.properties: as above, and a message.max.bytes that leaves room for a record. */
static int check_agent_kafka_property(cfg_parser *p, const char *shown, const char *value, cfg_mark at)
{
    INGEST__FORWARD(check_kafka_property(p, shown, value, at));
    INGEST__FORWARD(check_kept_property(p, shown, value, at, kept_producer, kept_producer_v, 2));
    static const char mmb[] = "message.max.bytes=";
    if (strncmp(value, mmb, sizeof(mmb) - 1) == 0) {
        /* (read as librdkafka reads a number: 0x... in hex) */
        const unsigned long long v = strtoull(value + sizeof(mmb) - 1, NULL, 0);
        if (v < INGEST_KAFKA_RECORD_MIN + INGEST_KAFKA_RECORD_ROOM)
            return cfg__perr(p, at, "key '%s': %llu is too small: the agent's records need at least %u (%u of "
                             "record and %u of key and framing)", shown, v,
                             INGEST_KAFKA_RECORD_MIN + INGEST_KAFKA_RECORD_ROOM, INGEST_KAFKA_RECORD_MIN,
                             INGEST_KAFKA_RECORD_ROOM);
    }
    return INGEST_OK;
}

static const cfg_enum transport_enum[] = { { "tcp", INGEST_TRANSPORT_TCP },
                                           { "kafka", INGEST_TRANSPORT_KAFKA },
                                           { NULL, 0 } };
static const cfg_enum spool_enum[] = { { "none", INGEST_SPOOL_NONE },
                                       { "copy", INGEST_SPOOL_COPY },
                                       { NULL, 0 } };
static const cfg_enum symlinks_enum[] = { { "skip", INGEST_SYMLINKS_SKIP },
                                          { "ship", INGEST_SYMLINKS_SHIP },
                                          { NULL, 0 } };
static const cfg_enum log_enum[] = { { "error", INGEST_LOG_ERROR }, { "warn", INGEST_LOG_WARN },
                                     { "info", INGEST_LOG_INFO },   { "debug", INGEST_LOG_DEBUG },
                                     { NULL, 0 } };

static const cfg_enum dedup_scope_enum[] = { { "fleet", INGEST_DEDUP_FLEET },
                                              { "device", INGEST_DEDUP_DEVICE },
                                              { NULL, 0 } };


#define PiB (1024ll * TiB)

_Static_assert(INGEST_CONFIG_MAX_SOURCES == INGEST_SENDER_MAX_SOURCES,
               "a config the loader takes must not be refused by the sender at start");

#define A ingest_agent_config
#define S ingest_source_config
/* A chunk travels whole in one CHUNK message (its index, then the encoded chunk: stored raw at worst, with
 * the codec's header), which a receiver bounds at INGEST_WIRE_MAX_PAYLOAD: 4 MiB less 16 bytes. */
#define CHUNK_WIRE_MAX (INGEST_WIRE_MAX_PAYLOAD - 4u - INGEST_CODEC_HEADER)

static const cfg_row agent_rows[] = {
    { .name = "device.id", .type = T_STRING, .flags = F_REQUIRED, FIELD(A, device_id),
      .check = check_device_id,
      .desc = "Identity of this device: 1 to 64 of A-Z a-z 0-9 . _ -, starting with a letter or digit" },
    { .name = "device.key", .type = T_PATH, .flags = F_REQUIRED, FIELD(A, device_key),
      .desc = "File holding this device's secret key (ingestctl keygen)" },
    { .name = "core.address", .type = T_STRING, .def = "", FIELD(A, core_address),
      .check = check_hostport,
      .desc = "Receiver to ship to, host:port ([v6addr]:port); required with transport: tcp" },
    { .name = "core.receiver_key", .type = T_PATH, .flags = F_REQUIRED, FIELD(A, core_receiver_key),
      .desc = "The receiver's public key file (.pub), pinned" },
    { .name = "transport", .type = T_ENUM, .def = "tcp", FIELD(A, transport),
      .enums = transport_enum,
      .desc = "How batches travel: tcp (a session with core.address) or kafka (records to kafka.topic, "
              "docs/kafka.md)" },
    { .name = "kafka.brokers", .type = T_STRING, .def = "", FIELD(A, kafka_brokers), .check = check_brokers,
      .desc = "Kafka bootstrap servers, host:port,...; required with transport: kafka" },
    { .name = "kafka.topic", .type = T_STRING, .def = "ingest", FIELD(A, kafka_topic), .check = check_kafka_topic,
      .desc = "Topic the device's records go to, keyed by device id" },
    { .name = "kafka.reply_topic", .type = T_STRING, .def = "", FIELD(A, kafka_reply_topic),
      .check = check_kafka_topic, .def_doc = "{topic}-replies",
      .desc = "Topic the receivers answer on (landed, or chunks still needed)" },
    { .name = "kafka.properties", .type = T_MAP, FIELD(A, kafka_properties),
      .count_off = offsetof(A, kafka_properties_count), .max = INGEST_KAFKA_PROPERTIES_MAX,
      .check = check_agent_kafka_property, .def_doc = "{}",
      .desc = "librdkafka properties passed verbatim (TLS, SASL, tuning); idempotence and acks=all are kept" },
    { .name = "dedup_key", .type = T_PATH, .flags = F_REQUIRED, FIELD(A, dedup_key),
      .desc = "The fleet's chunk-id key file, the same on every device and the receiver" },
    { .name = "sources", .type = T_LIST, .flags = F_REQUIRED, FIELD(A, sources),
      .count_off = offsetof(A, sources_count), .elem_size = sizeof(S), .min = 1,
      .max = INGEST_CONFIG_MAX_SOURCES, .finish_entry = cfg__finish_source,
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
    { .name = "sources[].symlinks", .type = T_ENUM, .def = "skip", FIELD(S, symlinks), .enums = symlinks_enum,
      .desc = "skip (count symlinks, ship nothing) or ship (a symlink lands as a symlink: its target is "
              "data, never followed)" },
    { .name = "state_dir", .type = T_PATH, .flags = F_REQUIRED, FIELD(A, state_dir),
      .desc = "Directory of the agent's journal and caches (LMDB)" },
    { .name = "chunking.min", .type = T_SIZE, .def = "16KiB", FIELD(A, chunking.min), .min = 64,
      .max = CHUNK_WIRE_MAX, .desc = "Smallest chunk; files below it are one chunk" },
    { .name = "chunking.avg", .type = T_SIZE, .def = "64KiB", FIELD(A, chunking.avg), .min = 64,
      .max = CHUNK_WIRE_MAX, .desc = "Target average chunk size, a power of two" },
    { .name = "chunking.max", .type = T_SIZE, .def = "256KiB", FIELD(A, chunking.max), .min = 64,
      .max = CHUNK_WIRE_MAX, .desc = "Largest chunk (forced cut); min < avg < max; a chunk travels whole in one message of "
              "at most 4 MiB, its 16 header bytes included" },
    { .name = "compression.level", .type = T_INT, .def = "1", FIELD(A, compression_level),
      .min = -7, .max = 19, .desc = "zstd level; 1 is the measured sweet spot, negative = faster" },
    { .name = "compression.encoders", .type = T_INT, .def = "0", FIELD(A, compression_encoders), .min = 0,
      .max = 4, .desc = "Threads that re-read and compress wanted chunks; 0 = the online CPUs, at most 3" },
    { .name = "compression.dictionary", .type = T_PATH, .flags = F_AUTO, .def = "",
      FIELD(A, compression_dictionary),
      .desc = "Trained zstd dictionary file (\"\" = none; auto = trained by the agent from its sources' small files)" },
    { .name = "batch.max_files", .type = T_INT, .def = "4000", FIELD(A, batch_max_files), .min = 1,
      .max = 1000000, .desc = "Close a batch at this many files" },
    { .name = "batch.max_bytes", .type = T_SIZE, .def = "256MiB", FIELD(A, batch_max_bytes),
      .min = 64 * KiB, .max = 64 * GiB, .desc = "Close a batch at this many bytes of file data" },
    { .name = "batch.max_wait", .type = T_DURATION, .def = "5s", FIELD(A, batch_max_wait_ms),
      .min = 10, .max = 24 * HOUR, .desc = "Close a batch this long after its first file" },
    { .name = "batch.push_max", .type = T_SIZE, .def = "32KiB", FIELD(A, batch_push_max), .min = 0,
      .max = 32 * KiB, .desc = "Files of at most this size are sent without chunk ids in the manifest (0 = never)" },
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
    { .name = "memory.queue_budget", .type = T_SIZE, .def = "64MiB", FIELD(R, queue_budget), .min = 1 * MiB,
      .max = 64 * GiB,
      .desc = "Decoded chunks all device sessions together may hold ahead of the landing; past it a session stops "
              "reading from its device until landing drains some (each session always moves)" },
    { .name = "direct_io", .type = T_BOOL, .def = "true", FIELD(R, direct_io),
      .desc = "Write landed files of 256 KiB or more with O_DIRECT, past the page cache, where the filesystem allows" },
    { .name = "append_in_place", .type = T_BOOL, .def = "false", FIELD(R, append_in_place),
      .desc = "Land a growing file (its landed version a prefix of the new one) by appending to the landed file, "
              "not by writing it whole; readers then see the file grow (docs/landing.md)" },
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
    { .name = "kafka.brokers", .type = T_STRING, .def = "", FIELD(R, kafka_brokers), .check = check_brokers,
      .desc = "Kafka bootstrap servers, host:port,...: consume devices' records as well as TCP (\"\" = off)" },
    { .name = "kafka.topic", .type = T_STRING, .def = "ingest", FIELD(R, kafka_topic), .check = check_kafka_topic,
      .desc = "Topic of the devices' records" },
    { .name = "kafka.reply_topic", .type = T_STRING, .def = "", FIELD(R, kafka_reply_topic),
      .check = check_kafka_topic, .def_doc = "{topic}-replies", .desc = "Topic the receiver answers devices on" },
    { .name = "kafka.group", .type = T_STRING, .def = "ingest-receivers", FIELD(R, kafka_group),
      .check = check_kafka_topic, .desc = "Consumer group of the receivers sharing one bronze tree" },
    { .name = "kafka.device_queue", .type = T_SIZE, .def = "8MiB", FIELD(R, kafka_device_queue), .min = MiB,
      .max = 1024 * MiB,
      .desc = "Records read ahead of a device's serve, per device: past it the device's partition is paused "
              "and the others go on" },
    { .name = "kafka.properties", .type = T_MAP, FIELD(R, kafka_properties),
      .count_off = offsetof(R, kafka_properties_count), .max = INGEST_KAFKA_PROPERTIES_MAX,
      .check = check_receiver_kafka_property, .def_doc = "{}",
      .desc = "librdkafka properties passed verbatim (TLS, SASL, tuning); manual offset commits are kept" },
};
#undef R

const cfg_schema cfg__agent_schema = { agent_rows, sizeof(agent_rows) / sizeof(agent_rows[0]),
                                         cfg__finish_agent };
const cfg_schema cfg__receiver_schema = { receiver_rows,
                                            sizeof(receiver_rows) / sizeof(receiver_rows[0]), cfg__finish_receiver };

