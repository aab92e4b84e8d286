/*
 * Configuration of ingest-agent and ingest-receiver: one YAML file per
 * program, loaded into a plain struct.
 *
 * Every key is a row of a table inside the library (name, type, bounds,
 * default, description); the same table drives the loader, the --help key
 * listing (ingest_config_help) and the reference in docs/config.md.
 *
 * Contract of the loaders:
 * - The file is untrusted: it is bounded (INGEST_CONFIG_MAX_FILE bytes,
 *   INGEST_CONFIG_MAX_DEPTH levels of nesting) before it is parsed; YAML
 *   anchors, aliases and explicit tags are rejected.
 * - Any problem (unreadable file, malformed YAML, unknown key, duplicate
 *   key, wrong type, out-of-range value, missing required key) returns
 *   INGEST_EINVAL (INGEST_ENOMEM only when memory runs out), *out stays
 *   NULL, and ingest_ctx_errmsg(ctx) reads "FILE:LINE:COL: what, key 'k'",
 *   with 1-based line and column, e.g.
 *   "agent.yaml:7:3: unknown key 'batch.max_filez'".
 * - Relative paths in the file (keys of type path) are resolved against the
 *   directory of the config file, made absolute with the current directory
 *   when the config path is relative.  Files named by the config need not
 *   exist: the programs check them when they start.
 * - After a successful load every string field is non-NULL ("" when an
 *   optional key is unset); a list of strings that is unset or empty is
 *   NULL with a count of 0.
 *
 * THREAD SAFETY: loaders use only their context; the key listing functions
 * are thread-safe.
 */
#ifndef INGEST_CONFIG_H
#define INGEST_CONFIG_H

#include "ingest/common.h"
#include "ingest/chunker.h"

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define INGEST_CONFIG_MAX_FILE (1024u * 1024u) /* bytes */
#define INGEST_CONFIG_MAX_DEPTH 16             /* nested mappings/sequences */
#define INGEST_CONFIG_MAX_VALUE 4096           /* bytes in one scalar */
/* The agent's sources: the sender's limit (INGEST_SENDER_MAX_SOURCES, ingest/sender.h), so a config that
   loads can start. */
#define INGEST_CONFIG_MAX_SOURCES 256

/* Values of ingest_agent_config.transport. */
enum { INGEST_TRANSPORT_TCP = 0, INGEST_TRANSPORT_KAFKA = 1 };

/* Values of ingest_source_config.spool. */
enum { INGEST_SPOOL_NONE = 0, INGEST_SPOOL_COPY = 1 };

/* Values of ingest_source_config.after_ship_mode. */
enum { INGEST_AFTER_SHIP_KEEP = 0, INGEST_AFTER_SHIP_DELETE = 1, INGEST_AFTER_SHIP_MOVE = 2 };

/* Values of ingest_source_config.symlinks. */
enum { INGEST_SYMLINKS_SKIP = 0, INGEST_SYMLINKS_SHIP = 1 };

/*
 * One entry of the agent's `sources` list.  The filter keys map one to one
 * onto ingest_filter_spec (include/ingest/filter.h); docs/config.md,
 * section Filters, gives their exact semantics.
 */
typedef struct ingest_source_config {
    char *path; /* directory to ship (resolved) */
    char *name; /* short name, [A-Za-z0-9._-]{1,64}; default: basename of path */
    char **include;          /* include globs (NULL when none) */
    size_t include_count;    /* 0..INGEST_FILTER_MAX_GLOBS */
    char **exclude;          /* exclude globs (NULL when none) */
    size_t exclude_count;    /* 0..INGEST_FILTER_MAX_GLOBS */
    uint64_t min_size;       /* bytes, 0 = no lower bound */
    uint64_t max_size;       /* bytes, 0 = no upper bound; else >= min_size */
    uint64_t max_age_ms;     /* 0 = no age bound */
    uint64_t sample_every;   /* >= 1; 1 = every file */
    char *drop_if_prefix;    /* "" = none; "hex:..." or a string (validated) */
    uint64_t settle_ms;      /* size and mtime unchanged this long before a file is taken */
    int spool;               /* INGEST_SPOOL_* */
    char *after_ship;        /* "keep", "delete" or "move:DIR" with DIR resolved (absolute) */
    int after_ship_mode;     /* INGEST_AFTER_SHIP_*, parsed from after_ship */
    const char *after_ship_dir; /* MOVE: the directory (points into after_ship); else "" */
    int symlinks;            /* INGEST_SYMLINKS_*: skip (count) or ship a symlink as a symlink */
} ingest_source_config;

/*
 * The agent's configuration.  Allocated by the loader, released with
 * ingest_agent_config_free().  Fields may be appended in later versions.
 */
typedef struct ingest_agent_config {
    char *device_id;                 /* device.id */
    char *device_key;                /* device.key (path) */
    char *core_address;              /* core.address, "host:port" */
    char *core_receiver_key;         /* core.receiver_key (path) */
    int transport;                   /* transport: INGEST_TRANSPORT_* */
    char *dedup_key;                 /* dedup_key (path) */
    ingest_source_config *sources;   /* sources */
    size_t sources_count;            /* >= 1 */
    char *state_dir;                 /* state_dir (path) */
    ingest_chunk_params chunking;    /* chunking.min/avg/max, bytes */
    int compression_level;           /* compression.level */
    int compression_encoders;        /* compression.encoders (0: auto) */
    char *compression_dictionary;    /* compression.dictionary (path, "" = none) */
    uint64_t batch_max_files;        /* batch.max_files */
    uint64_t batch_max_bytes;        /* batch.max_bytes, bytes */
    uint64_t batch_max_wait_ms;      /* batch.max_wait, milliseconds */
    uint64_t batch_push_max;         /* batch.push_max, bytes (0: push nothing) */
    uint64_t havecache_max_entries;  /* havecache.max_entries */
    int log_level;                   /* log.level: INGEST_LOG_* */
    char *metrics_listen;            /* metrics.listen, "host:port" or "" = off */
    uint64_t rescan_interval_ms;     /* rescan_interval, milliseconds */
    uint64_t spool_quota;            /* spool.quota, bytes */
    uint64_t queue_max_files;        /* queue.max_files */
    uint64_t queue_max_bytes;        /* queue.max_bytes, bytes */
    uint64_t throttle_rate;          /* throttle.rate, bytes per second, 0 = unlimited */
    char *throttle_window;           /* throttle.window, "HH:MM-HH:MM" or "" = always */
    int throttle_window_start;       /* its start, minutes after local midnight; -1 when "" */
    int throttle_window_end;         /* its end (may be < start: wraps midnight); -1 when "" */
    char *status_socket;             /* status.socket (path); default {state_dir}/agent.sock */
    /* transport: kafka (docs/kafka.md) */
    char *kafka_brokers;             /* kafka.brokers, "host:port,..." ("" unless transport is kafka) */
    char *kafka_topic;               /* kafka.topic */
    char *kafka_reply_topic;         /* kafka.reply_topic ("" = "{topic}-replies") */
    char **kafka_properties;         /* kafka.properties, "name=value" each, passed to librdkafka */
    size_t kafka_properties_count;
} ingest_agent_config;

/* The receiver's configuration; see ingest_agent_config. */
typedef struct ingest_receiver_config {
    char *listen;                    /* listen, "host:port" */
    char *key;                       /* key (path) */
    char *authorized_devices;        /* authorized_devices (path) */
    char *dedup_key;                 /* dedup_key (path) */
    char *state_dir;                 /* state_dir (path) */
    char *bronze;                    /* bronze (path) */
    char *layout;                    /* layout template */
    bool layout_shared;              /* layout_shared: a layout without {device} allowed */
    uint32_t max_connections;        /* max_connections: authenticated sessions */
    uint64_t handshake_timeout_ms;   /* handshake.timeout, milliseconds */
    uint64_t handshake_first_byte_ms; /* handshake.first_byte_timeout, milliseconds */
    uint32_t handshake_max_pending;  /* handshake.max_pending */
    uint32_t handshake_max_per_address; /* handshake.max_pending_per_address */
    uint64_t idle_timeout_ms;        /* idle_timeout, milliseconds */
    uint64_t queue_budget;            /* memory.queue_budget, bytes */
    bool direct_io;                   /* direct_io */
    bool append_in_place;             /* append_in_place */
    uint64_t index_flush_interval_ms; /* index.flush_interval, milliseconds */
    uint32_t index_flush_entries;     /* index.flush_entries */
    int log_level;                   /* log.level: INGEST_LOG_* */
    char *metrics_listen;            /* metrics.listen, "host:port" or "" = off */
    int dedup_scope;                 /* dedup.scope: INGEST_DEDUP_* (include/ingest/index.h) */
    /* Kafka (docs/kafka.md): consumed as well as TCP when kafka.brokers is set */
    char *kafka_brokers;             /* kafka.brokers ("" = off) */
    char *kafka_topic;               /* kafka.topic */
    char *kafka_reply_topic;         /* kafka.reply_topic ("" = "{topic}-replies") */
    char *kafka_group;               /* kafka.group */
    uint64_t kafka_device_queue;     /* kafka.device_queue, bytes */
    char **kafka_properties;         /* kafka.properties, "name=value" each */
    size_t kafka_properties_count;
} ingest_receiver_config;

/*
 * Load the agent configuration from the YAML file at path.  On success *out
 * holds a config made with ctx's allocator (ctx must outlive it); on
 * failure *out is NULL and the error is described in ctx (see above).
 */
INGEST_API int ingest_agent_config_load(ingest_ctx *ctx, const char *path,
                                        ingest_agent_config **out) INGEST_WUR;
/*
 * The same from memory: name is used in messages and to resolve relative
 * paths (as if the text had been read from the file `name`).
 */
INGEST_API int ingest_agent_config_parse(ingest_ctx *ctx, const char *name, const void *data,
                                         size_t len, ingest_agent_config **out) INGEST_WUR;
/* Release a config; NULL is accepted. */
INGEST_API void ingest_agent_config_free(ingest_agent_config *cfg);

INGEST_API int ingest_receiver_config_load(ingest_ctx *ctx, const char *path,
                                           ingest_receiver_config **out) INGEST_WUR;
INGEST_API int ingest_receiver_config_parse(ingest_ctx *ctx, const char *name, const void *data,
                                            size_t len, ingest_receiver_config **out) INGEST_WUR;
INGEST_API void ingest_receiver_config_free(ingest_receiver_config *cfg);

/* Which program's keys to describe. */
enum { INGEST_CONFIG_AGENT = 1, INGEST_CONFIG_RECEIVER = 2 };

/* One key, as described by ingest_config_keys().  Strings are valid during the callback. */
typedef struct ingest_config_key {
    const char *name;          /* dotted name: "batch.max_files", "sources[].path" */
    const char *type;          /* string, path, bool, int, size, duration, enum, list,
                                  strings (a list of strings), rate (a size per second) */
    int required;              /* 1: the key must be present */
    const char *default_value; /* as written in YAML; "" when none */
    const char *bounds;        /* "1..1000000", "16KiB..64MiB", "tcp|kafka", or "" */
    const char *description;   /* one line */
} ingest_config_key;

/* Return 0 to continue, non-zero to stop (that value is returned). */
typedef int (*ingest_config_key_fn)(void *userdata, const ingest_config_key *key);

/*
 * Call fn for every key of program (INGEST_CONFIG_AGENT or _RECEIVER), in
 * table order.  Returns 0, fn's non-zero value, or INGEST_EINVAL for an
 * unknown program.
 */
INGEST_API int ingest_config_keys(int program, ingest_config_key_fn fn, void *userdata);

/*
 * Write the --help key reference of program to buf (NUL-terminated,
 * truncated to cap bytes).  Returns the length the whole text needs, not
 * counting the NUL, as snprintf does (call with cap 0 to size a buffer);
 * 0 for an unknown program.
 */
INGEST_API size_t ingest_config_help(int program, char *buf, size_t cap);

/*
 * Parse a size ("65536", "64KiB", "2 GiB", "10MB") into bytes, or a
 * duration ("500ms", "5s", "2m", "1h", "0") into milliseconds.  Returns 0 or
 * INGEST_EINVAL (junk, negative, overflow) with a reason in ctx (ctx may be
 * NULL).  Units are listed in docs/config.md.
 */
INGEST_API int ingest_parse_size(ingest_ctx *ctx, const char *text, uint64_t *out);
INGEST_API int ingest_parse_duration(ingest_ctx *ctx, const char *text, uint64_t *out_ms);

#ifdef __cplusplus
}
#endif
#endif
