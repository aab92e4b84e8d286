/* Tests of the YAML config loader (libingest/config*.c) and units (units.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest/common.h"
#include "ingest/config.h"
#include "ingest/index.h"

/* ---- helpers -------------------------------------------------------------- */

/* Repository root, from the environment or from this file's path. */
static void srcpath(char *out, size_t cap, const char *rel)
{
    const char *top = getenv("INGEST_SRCDIR");
    if (top != NULL) {
        snprintf(out, cap, "%s/%s", top, rel);
        return;
    }
    const char *me = __FILE__; /* .../tests/unit/test_config.c */
    const char *cut = strstr(me, "tests/unit/test_config.c");
    const int n = cut ? (int)(cut - me) : 0;
    snprintf(out, cap, "%.*s%s", n, me, rel);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(f);
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static const char agent_min[] = "device:\n"
                                "  id: gw-1\n"
                                "  key: keys/device.key\n"
                                "core:\n"
                                "  address: core.example.net:7443\n"
                                "  receiver_key: /etc/ingest/receiver.pub\n"
                                "dedup_key: dedup.key\n"
                                "sources:\n"
                                "  - path: /data/cam/\n"
                                "state_dir: /var/lib/ingest\n";

static const char receiver_min[] = "key: receiver.key\n"
                                   "authorized_devices: /etc/ingest/devices\n"
                                   "dedup_key: /etc/ingest/dedup.key\n"
                                   "state_dir: /var/lib/r\n"
                                   "bronze: /srv/bronze\n";

static ingest_agent_config *agent_ok(ingest_ctx *ctx, const char *yaml)
{
    ingest_agent_config *cfg = NULL;
    const int rc = ingest_agent_config_parse(ctx, "/etc/ingest/agent.yaml", yaml, strlen(yaml), &cfg);
    if (rc != 0)
        fail_msg("unexpected failure %d: %s", rc, ingest_ctx_errmsg(ctx));
    assert_non_null(cfg);
    return cfg;
}

static void agent_err(const char *yaml, const char *expect)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *cfg = (ingest_agent_config *)1;
    const int rc = ingest_agent_config_parse(ctx, "agent.yaml", yaml, strlen(yaml), &cfg);
    if (rc != INGEST_EINVAL || strstr(ingest_ctx_errmsg(ctx), expect) == NULL)
        fail_msg("rc %d, message [%s], expected [%s] for:\n%s", rc, ingest_ctx_errmsg(ctx), expect,
                 yaml);
    assert_null(cfg);
    ingest_ctx_destroy(ctx);
}

static void receiver_err(const char *yaml, const char *expect)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_receiver_config *cfg = (ingest_receiver_config *)1;
    const int rc = ingest_receiver_config_parse(ctx, "receiver.yaml", yaml, strlen(yaml), &cfg);
    if (rc != INGEST_EINVAL || strstr(ingest_ctx_errmsg(ctx), expect) == NULL)
        fail_msg("rc %d, message [%s], expected [%s] for:\n%s", rc, ingest_ctx_errmsg(ctx), expect,
                 yaml);
    assert_null(cfg);
    ingest_ctx_destroy(ctx);
}

/* agent_min with text appended (top-level keys). */
static void agent_err_plus(const char *extra, const char *expect)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s%s", agent_min, extra);
    agent_err(buf, expect);
}

/* ---- loading -------------------------------------------------------------- */

static void test_agent_full(void **state)
{
    (void)state;
    static const char yaml[] = "device:\n"
                               "  id: edge_7.a-B\n"
                               "  key: /k/device.key\n"
                               "core:\n"
                               "  address: \"[2001:db8::1]:9000\"\n"
                               "  receiver_key: /k/r.pub\n"
                               "transport: tcp\n"
                               "dedup_key: /k/dedup\n"
                               "sources:\n"
                               "  - path: /data/a\n"
                               "    name: alpha\n"
                               "  - {path: /data/b/, name: beta}\n"
                               "  - path: /data/c\n"
                               "state_dir: /state\n"
                               "chunking:\n"
                               "  min: 8KiB\n"
                               "  avg: 32KiB\n"
                               "  max: 1MiB\n"
                               "compression:\n"
                               "  level: -3\n"
                               "  dictionary: /k/telemetry.dict\n"
                               "batch:\n"
                               "  max_files: 50_000\n"
                               "  max_bytes: 2GB\n"
                               "  max_wait: 1500ms\n"
                               "havecache:\n"
                               "  max_entries: 123456\n"
                               "log:\n"
                               "  level: debug\n"
                               "metrics:\n"
                               "  listen: 127.0.0.1:9464\n";
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *c = agent_ok(ctx, yaml);
    assert_string_equal(c->device_id, "edge_7.a-B");
    assert_string_equal(c->device_key, "/k/device.key");
    assert_string_equal(c->core_address, "[2001:db8::1]:9000");
    assert_string_equal(c->core_receiver_key, "/k/r.pub");
    assert_int_equal(c->transport, INGEST_TRANSPORT_TCP);
    assert_string_equal(c->dedup_key, "/k/dedup");
    assert_int_equal(c->sources_count, 3);
    assert_string_equal(c->sources[0].path, "/data/a");
    assert_string_equal(c->sources[0].name, "alpha");
    assert_string_equal(c->sources[1].path, "/data/b/");
    assert_string_equal(c->sources[1].name, "beta");
    assert_string_equal(c->sources[2].path, "/data/c");
    assert_string_equal(c->sources[2].name, "c");
    assert_string_equal(c->state_dir, "/state");
    assert_int_equal(c->chunking.min, 8192);
    assert_int_equal(c->chunking.avg, 32768);
    assert_int_equal(c->chunking.max, 1048576);
    assert_int_equal(c->compression_level, -3);
    assert_string_equal(c->compression_dictionary, "/k/telemetry.dict");
    assert_int_equal(c->batch_max_files, 50000);
    assert_true(c->batch_max_bytes == 2000000000ull);
    assert_int_equal(c->batch_max_wait_ms, 1500);
    assert_int_equal(c->havecache_max_entries, 123456);
    assert_int_equal(c->log_level, INGEST_LOG_DEBUG);
    assert_string_equal(c->metrics_listen, "127.0.0.1:9464");
    ingest_agent_config_free(c);
    ingest_ctx_destroy(ctx);
}

/* compression.dictionary: the word auto stays as it is (a relative path resolves against the config's directory). */
static void test_agent_dictionary_auto(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        { "compression:\n  dictionary: auto\n", "auto" },
        { "compression:\n  dictionary: auto.dict\n", "/etc/ingest/auto.dict" },
        { "compression:\n  dictionary: dicts/auto\n", "/etc/ingest/dicts/auto" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[4096];
        snprintf(buf, sizeof(buf), "%s%s", agent_min, cases[i][0]);
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        ingest_agent_config *c = agent_ok(ctx, buf);
        assert_string_equal(c->compression_dictionary, cases[i][1]);
        ingest_agent_config_free(c);
        ingest_ctx_destroy(ctx);
    }
}

static void test_agent_defaults(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *c = agent_ok(ctx, agent_min);
    /* Relative paths resolve against the config's directory. */
    assert_string_equal(c->device_key, "/etc/ingest/keys/device.key");
    assert_string_equal(c->dedup_key, "/etc/ingest/dedup.key");
    assert_string_equal(c->core_receiver_key, "/etc/ingest/receiver.pub");
    assert_int_equal(c->transport, INGEST_TRANSPORT_TCP);
    assert_int_equal(c->sources_count, 1);
    assert_string_equal(c->sources[0].name, "cam"); /* basename, trailing '/' ignored */
    assert_int_equal(c->chunking.min, 16 * 1024);
    assert_int_equal(c->chunking.avg, 64 * 1024);
    assert_int_equal(c->chunking.max, 256 * 1024);
    assert_int_equal(c->compression_level, 1);
    assert_string_equal(c->compression_dictionary, "");
    assert_int_equal(c->batch_max_files, 4000);
    assert_true(c->batch_max_bytes == 256ull << 20);
    assert_int_equal(c->batch_max_wait_ms, 5000);
    assert_int_equal(c->havecache_max_entries, 4000000);
    assert_int_equal(c->log_level, INGEST_LOG_INFO);
    assert_string_equal(c->metrics_listen, "");
    /* filters and daemon keys */
    const ingest_source_config *s = &c->sources[0];
    assert_null(s->include);
    assert_int_equal(s->include_count, 0);
    assert_null(s->exclude);
    assert_int_equal(s->exclude_count, 0);
    assert_int_equal(s->min_size, 0);
    assert_int_equal(s->max_size, 0);
    assert_int_equal(s->max_age_ms, 0);
    assert_int_equal(s->sample_every, 1);
    assert_string_equal(s->drop_if_prefix, "");
    assert_int_equal(s->settle_ms, 2000);
    assert_int_equal(s->spool, INGEST_SPOOL_NONE);
    assert_string_equal(s->after_ship, "keep");
    assert_int_equal(s->after_ship_mode, INGEST_AFTER_SHIP_KEEP);
    assert_string_equal(s->after_ship_dir, "");
    assert_int_equal(s->symlinks, INGEST_SYMLINKS_SKIP);
    assert_int_equal(c->rescan_interval_ms, 60000);
    assert_true(c->spool_quota == 1ull << 30);
    assert_int_equal(c->queue_max_files, 100000);
    assert_true(c->queue_max_bytes == 4ull << 30);
    assert_int_equal(c->throttle_rate, 0);
    assert_string_equal(c->throttle_window, "");
    assert_int_equal(c->throttle_window_start, -1);
    assert_int_equal(c->throttle_window_end, -1);
    assert_string_equal(c->status_socket, "/var/lib/ingest/agent.sock");
    ingest_agent_config_free(c);
    ingest_ctx_destroy(ctx);
}

static void test_agent_filters_and_daemon_keys(void **state)
{
    (void)state;
    static const char yaml[] = "device: {id: gw, key: k}\n"
                               "core: {address: 'h:1', receiver_key: r}\n"
                               "dedup_key: d\n"
                               "state_dir: /var/lib/ingest/\n"
                               "sources:\n"
                               "  - path: /data/cam\n"
                               "    include: [\"**/*.jpg\", '**/*.json']\n"
                               "    exclude:\n"
                               "      - \"**/tmp/**\"\n"
                               "      - \"**/.*\"\n"
                               "      - 'x[!0-9]?'\n"
                               "    min_size: 1KiB\n"
                               "    max_size: 2GiB\n"
                               "    max_age: 24h\n"
                               "    sample_every: 10\n"
                               "    drop_if_prefix: \"hex:00000000\"\n"
                               "    settle: 500ms\n"
                               "    spool: copy\n"
                               "    after_ship: delete\n"
                               "    symlinks: ship\n"
                               "  - path: /data/plc\n"
                               "    include: []\n"
                               "    exclude:\n"
                               "    drop_if_prefix: '#DRAFT'\n"
                               "    settle: 0\n"
                               "    after_ship: move:done/plc/\n"
                               "  - path: /data/x\n"
                               "    after_ship: move:/data/xdone\n"
                               "    max_size: 5\n"
                               "    min_size: 5\n"
                               "rescan_interval: 5m\n"
                               "spool: {quota: 20GiB}\n"
                               "queue:\n"
                               "  max_files: 5000\n"
                               "  max_bytes: 512MiB\n"
                               "throttle:\n"
                               "  rate: 10MiB/s\n"
                               "  window: '22:30-06:00'\n"
                               "status:\n"
                               "  socket: run/agent.sock\n";
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *c = agent_ok(ctx, yaml);
    const ingest_source_config *s = &c->sources[0];
    assert_int_equal(s->include_count, 2);
    assert_string_equal(s->include[0], "**/*.jpg");
    assert_string_equal(s->include[1], "**/*.json");
    assert_int_equal(s->exclude_count, 3);
    assert_string_equal(s->exclude[0], "**/tmp/**");
    assert_string_equal(s->exclude[1], "**/.*");
    assert_string_equal(s->exclude[2], "x[!0-9]?");
    assert_int_equal(s->min_size, 1024);
    assert_true(s->max_size == 2ull << 30);
    assert_int_equal(s->max_age_ms, 24 * 3600 * 1000);
    assert_int_equal(s->sample_every, 10);
    assert_string_equal(s->drop_if_prefix, "hex:00000000");
    assert_int_equal(s->settle_ms, 500);
    assert_int_equal(s->spool, INGEST_SPOOL_COPY);
    assert_string_equal(s->after_ship, "delete");
    assert_int_equal(s->after_ship_mode, INGEST_AFTER_SHIP_DELETE);
    assert_string_equal(s->after_ship_dir, "");
    assert_int_equal(s->symlinks, INGEST_SYMLINKS_SHIP);
    s = &c->sources[1];
    assert_int_equal(s->symlinks, INGEST_SYMLINKS_SKIP);
    assert_int_equal(s->include_count, 0);
    assert_int_equal(s->exclude_count, 0);
    assert_string_equal(s->drop_if_prefix, "#DRAFT");
    assert_int_equal(s->settle_ms, 0);
    assert_int_equal(s->spool, INGEST_SPOOL_NONE);
    assert_int_equal(s->after_ship_mode, INGEST_AFTER_SHIP_MOVE);
    assert_string_equal(s->after_ship, "move:/etc/ingest/done/plc/"); /* resolved like a path */
    assert_string_equal(s->after_ship_dir, "/etc/ingest/done/plc/");
    s = &c->sources[2];
    assert_string_equal(s->after_ship_dir, "/data/xdone"); /* a sibling, not inside /data/x */
    assert_int_equal(s->min_size, 5);
    assert_int_equal(s->max_size, 5);
    assert_int_equal(c->rescan_interval_ms, 300000);
    assert_true(c->spool_quota == 20ull << 30);
    assert_int_equal(c->queue_max_files, 5000);
    assert_true(c->queue_max_bytes == 512ull << 20);
    assert_true(c->throttle_rate == 10ull << 20);
    assert_string_equal(c->throttle_window, "22:30-06:00");
    assert_int_equal(c->throttle_window_start, 22 * 60 + 30);
    assert_int_equal(c->throttle_window_end, 6 * 60);
    assert_string_equal(c->status_socket, "/etc/ingest/run/agent.sock");
    ingest_agent_config_free(c);

    /* a rate without /s, the flat form, and state_dir "/" for the socket default */
    static const char flat[] = "device: {id: gw, key: k}\n"
                               "core: {address: 'h:1', receiver_key: r}\n"
                               "dedup_key: d\nstate_dir: /\nsources: [{path: /a}]\n"
                               "throttle.rate: 250kB\nthrottle.window: 00:00-23:59\n";
    c = agent_ok(ctx, flat);
    assert_int_equal(c->throttle_rate, 250000);
    assert_int_equal(c->throttle_window_start, 0);
    assert_int_equal(c->throttle_window_end, 23 * 60 + 59);
    assert_string_equal(c->status_socket, "/agent.sock");
    ingest_agent_config_free(c);
    ingest_ctx_destroy(ctx);
}

static void test_errors_filters_and_daemon_keys(void **state)
{
    (void)state;
    static const char head[] = "device: {id: gw, key: k}\n"
                               "core: {address: 'h:1', receiver_key: r}\n"
                               "dedup_key: d\n"
                               "state_dir: s\n"
                               "sources:\n"
                               "  - path: /data/a\n"; /* line 6; a source key goes on line 7 */
    static const struct {
        const char *tail, *expect;
    } cases[] = {
        /* lists of strings */
        { "    include: '**/*.csv'\n",
          "agent.yaml:7:14: key 'sources[0].include' must be a list of strings" },
        { "    include: {a: 1}\n", "agent.yaml:7:14: key 'sources[0].include' must be a list of strings" },
        { "    include: [[a]]\n", "agent.yaml:7:15: key 'sources[0].include[0]' must be a string, not a list" },
        { "    exclude: [a, {b: 1}]\n", "agent.yaml:7:18: key 'sources[0].exclude[1]' must be a string, not a mapping" },
        { "    exclude: [a, ~]\n", "agent.yaml:7:18: key 'sources[0].exclude[1]' needs a value" },
        { "    include: [*csv]\n", "agent.yaml:7:15: YAML aliases (*name) are not supported (quote a value that starts with '*')" },
        { "    include: [*.csv]\n", "agent.yaml:7:16: malformed YAML: did not find expected alphabetic or numeric character while scanning an alias (quote a value that starts with '*')" },
        { "    include:\n      - *.csv\n", "agent.yaml:8:10: malformed YAML" },
        { "    include: ['x[ab']\n",
          "agent.yaml:7:15: key 'sources[0].include[0]': bad glob 'x[ab': unterminated '[' at offset 1" },
        { "    exclude:\n      - ok\n      - '/abs'\n",
          "agent.yaml:9:9: key 'sources[0].exclude[1]': bad glob '/abs': patterns are relative to the source" },
        { "    exclude: ['a**']\n", "key 'sources[0].exclude[0]': bad glob 'a**': '**' must be a whole path component at offset 1" },
        { "    include: ['']\n", "agent.yaml:7:15: key 'sources[0].include[0]': bad glob '': empty pattern" },
        { "    include: [a]\n    include: [b]\n", "agent.yaml:8:5: duplicate key 'sources[0].include'" },
        /* sizes, durations, ints */
        { "    min_size: lots\n", "agent.yaml:7:15: key 'sources[0].min_size': bad size 'lots'" },
        { "    max_size: -1\n", "agent.yaml:7:15: key 'sources[0].max_size': bad size '-1': must not be negative" },
        { "    max_size: 2048TiB\n", "agent.yaml:7:15: key 'sources[0].max_size': 2048TiB is out of range" },
        { "    min_size: 10\n    max_size: 9\n",
          "agent.yaml:8:5: key 'sources[0].max_size' (9 bytes) is less than sources[0].min_size (10 bytes)" },
        { "    max_age: 3\n", "agent.yaml:7:14: key 'sources[0].max_age': bad duration '3': a unit is required" },
        { "    max_age: 87601h\n", "agent.yaml:7:14: key 'sources[0].max_age': 87601h is out of range" },
        { "    sample_every: 0\n", "agent.yaml:7:19: key 'sources[0].sample_every': 0 is out of range (1..1000000)" },
        { "    sample_every: 1000001\n", "key 'sources[0].sample_every': 1000001 is out of range (1..1000000)" },
        { "    sample_every: half\n", "agent.yaml:7:19: key 'sources[0].sample_every': 'half' is not a whole number" },
        { "    settle: 25h\n", "agent.yaml:7:13: key 'sources[0].settle': 25h is out of range" },
        /* prefix */
        { "    drop_if_prefix: 'hex:0g'\n",
          "agent.yaml:7:21: key 'sources[0].drop_if_prefix': bad prefix 'hex:0g': 'g' at offset 5 is not a hex digit" },
        { "    drop_if_prefix: 'hex:123'\n",
          "agent.yaml:7:21: key 'sources[0].drop_if_prefix': bad prefix 'hex:123': 'hex:' needs an even number of hex digits, got 3" },
        { "    drop_if_prefix: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'\n",
          "agent.yaml:7:21: key 'sources[0].drop_if_prefix': bad prefix 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...': 65 bytes, more than 64" },
        /* enums and after_ship */
        { "    spool: move\n", "agent.yaml:7:12: key 'sources[0].spool': 'move' is not one of none, copy" },
        { "    symlinks: follow\n", "agent.yaml:7:15: key 'sources[0].symlinks': 'follow' is not one of skip, ship" },
        { "    after_ship: remove\n", "agent.yaml:7:17: key 'sources[0].after_ship': 'remove' is not keep, delete or move:DIR" },
        { "    after_ship: 'move:'\n", "agent.yaml:7:17: key 'sources[0].after_ship': 'move' needs a directory: move:DIR" },
        { "    after_ship: move\n", "agent.yaml:7:17: key 'sources[0].after_ship': 'move' needs a directory: move:DIR" },
        { "    after_ship: move:/data/a/done\n",
          "agent.yaml:7:5: key 'sources[0].after_ship': the directory '/data/a/done' is inside the source '/data/a'" },
        { "    after_ship: move:/data/a/\n", "the directory '/data/a/' is inside the source '/data/a'" },
        /* top-level daemon keys */
        { "rescan_interval: 5ms\n", "agent.yaml:7:18: key 'rescan_interval': 5ms is out of range" },
        { "rescan_interval: soon\n", "agent.yaml:7:18: key 'rescan_interval': bad duration 'soon'" },
        { "spool:\n  quota: 1kB\n", "agent.yaml:8:10: key 'spool.quota': 1kB is out of range" },
        { "spool:\n  quota: 1 gigabyte\n", "agent.yaml:8:10: key 'spool.quota': bad size '1 gigabyte': unknown unit 'gigabyte'" },
        { "spool: copy\n", "agent.yaml:7:8: key 'spool' must be a mapping of keys" },
        { "queue:\n  max_files: 0\n", "agent.yaml:8:14: key 'queue.max_files': 0 is out of range (1..100000000)" },
        { "queue:\n  max_bytes: 1000\n", "agent.yaml:8:14: key 'queue.max_bytes': 1000 is out of range" },
        { "queue:\n  max_filez: 1\n", "agent.yaml:8:3: unknown key 'queue.max_filez'" },
        { "throttle:\n  rate: 10MiB/h\n", "agent.yaml:8:9: key 'throttle.rate': bad size '10MiB/h'" },
        { "throttle:\n  rate: fast\n", "agent.yaml:8:9: key 'throttle.rate': bad size 'fast'" },
        { "throttle:\n  rate: /s\n", "agent.yaml:8:9: key 'throttle.rate': bad size ''" },
        { "throttle:\n  rate: 2048TiB/s\n", "agent.yaml:8:9: key 'throttle.rate': 2048TiB/s is out of range (0..1125899906842624 bytes/s)" },
        { "throttle:\n  window: '9:00-17:00'\n",
          "agent.yaml:8:11: key 'throttle.window': bad window '9:00-17:00': expected HH:MM-HH:MM" },
        { "throttle:\n  window: '24:00-06:00'\n", "agent.yaml:8:11: key 'throttle.window': bad window '24:00-06:00'" },
        { "throttle:\n  window: '08:60-09:00'\n", "key 'throttle.window': bad window '08:60-09:00'" },
        { "throttle:\n  window: '08:00-08:00'\n", "key 'throttle.window': bad window '08:00-08:00'" },
        { "throttle:\n  window: '08:00-09:00x'\n", "key 'throttle.window': bad window '08:00-09:00x'" },
        { "throttle:\n  window: '08:00 - 09:00'\n", "key 'throttle.window': bad window" },
        { "status:\n  socket: /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
          "agent.yaml:8:3: key 'status.socket': '/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...' is 110 bytes long, more than the 107" },
        { "status:\n  sockets: /x\n", "agent.yaml:8:3: unknown key 'status.sockets'" },
    };
    char buf[2048];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(buf, sizeof(buf), "%s%s", head, cases[i].tail);
        agent_err(buf, cases[i].expect);
    }
    /* 64 globs are fine, 65 are not */
    char *big = malloc(8192);
    strcpy(big, head);
    strcat(big, "    exclude:\n");
    for (int i = 0; i < 64; i++)
        sprintf(big + strlen(big), "      - 'p%d/**'\n", i);
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *c = agent_ok(ctx, big);
    assert_int_equal(c->sources[0].exclude_count, 64);
    assert_string_equal(c->sources[0].exclude[63], "p63/**");
    ingest_agent_config_free(c);
    ingest_ctx_destroy(ctx);
    strcat(big, "      - 'p64/**'\n");
    agent_err(big, "agent.yaml:72:9: key 'sources[0].exclude' has more than 64 entries");
    free(big);
}

static void test_agent_null_values_mean_default(void **state)
{
    (void)state;
    char buf[2048];
    snprintf(buf, sizeof(buf), "%s%s", agent_min,
             "batch:\n  max_files: ~\ncompression:\n  dictionary:\nlog:\nmetrics: {listen: null}\n");
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *c = agent_ok(ctx, buf);
    assert_int_equal(c->batch_max_files, 4000);
    assert_string_equal(c->compression_dictionary, "");
    assert_string_equal(c->metrics_listen, "");
    ingest_agent_config_free(c);
    ingest_ctx_destroy(ctx);
}

static void test_receiver_full_and_defaults(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_receiver_config *r = NULL;
    assert_int_equal(ingest_receiver_config_parse(ctx, "/etc/r/receiver.yaml", receiver_min,
                                                  strlen(receiver_min), &r),
                     0);
    assert_string_equal(r->listen, "127.0.0.1:7443");
    assert_string_equal(r->key, "/etc/r/receiver.key");
    assert_string_equal(r->authorized_devices, "/etc/ingest/devices");
    assert_string_equal(r->bronze, "/srv/bronze");
    assert_string_equal(r->layout, "{device}/{yyyy}/{mm}/{dd}/{path}");
    assert_int_equal(r->max_connections, 64);
    assert_int_equal(r->handshake_timeout_ms, 10000);
    assert_int_equal(r->handshake_first_byte_ms, 3000);
    assert_int_equal(r->handshake_max_pending, 256);
    assert_int_equal(r->handshake_max_per_address, 32);
    assert_int_equal(r->idle_timeout_ms, 60000);
    assert_int_equal(r->log_level, INGEST_LOG_INFO);
    assert_string_equal(r->metrics_listen, "");
    ingest_receiver_config_free(r);

    static const char full[] = "listen: 0.0.0.0:7000\n"
                               "key: /k/r.key\n"
                               "authorized_devices: /k/devs\n"
                               "dedup_key: /k/dedup\n"
                               "state_dir: /s\n"
                               "bronze: /b\n"
                               "layout: \"raw/{device}/{batch}/{path}\"\n"
                               "max_connections: 1000\n"
                               "handshake: {timeout: 4s, first_byte_timeout: 500ms, max_pending: 64,\n"
                               "            max_pending_per_address: 8}\n"
                               "idle_timeout: 2m\n"
                               "log: {level: warn}\n"
                               "metrics: {listen: \"[::1]:9465\"}\n";
    assert_int_equal(ingest_receiver_config_parse(ctx, "/r.yaml", full, strlen(full), &r), 0);
    assert_string_equal(r->listen, "0.0.0.0:7000");
    assert_string_equal(r->layout, "raw/{device}/{batch}/{path}");
    assert_int_equal(r->max_connections, 1000);
    assert_int_equal(r->handshake_timeout_ms, 4000);
    assert_int_equal(r->handshake_first_byte_ms, 500);
    assert_int_equal(r->handshake_max_pending, 64);
    assert_int_equal(r->handshake_max_per_address, 8);
    assert_int_equal(r->idle_timeout_ms, 120000);
    assert_int_equal(r->log_level, INGEST_LOG_WARN);
    assert_string_equal(r->metrics_listen, "[::1]:9465");
    ingest_receiver_config_free(r);
    ingest_receiver_config_free(NULL);
    ingest_agent_config_free(NULL);
    ingest_ctx_destroy(ctx);
}

static void test_relative_to_config_dir(void **state)
{
    (void)state;
    char cwd[4096], want[8192];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *c = NULL;
    assert_int_equal(ingest_agent_config_parse(ctx, "conf/x/agent.yaml", agent_min, strlen(agent_min), &c), 0);
    snprintf(want, sizeof(want), "%s/conf/x/keys/device.key", cwd);
    assert_string_equal(c->device_key, want);
    assert_string_equal(c->sources[0].path, "/data/cam/"); /* absolute: unchanged */
    ingest_agent_config_free(c);
    assert_int_equal(ingest_agent_config_parse(ctx, "agent.yaml", agent_min, strlen(agent_min), &c), 0);
    snprintf(want, sizeof(want), "%s/dedup.key", cwd);
    assert_string_equal(c->dedup_key, want);
    ingest_agent_config_free(c);
    ingest_ctx_destroy(ctx);
}

/* ---- errors --------------------------------------------------------------- */

static void test_error_positions(void **state)
{
    (void)state;
    /* The example of the brief, exactly. */
    static const char yaml[] = "device:\n"
                               "  id: gw-1\n"
                               "  key: k\n"
                               "core: {address: 'h:1', receiver_key: r}\n"
                               "dedup_key: d\n"
                               "batch:\n"
                               "  max_filez: 10\n";
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *cfg = NULL;
    assert_int_equal(ingest_agent_config_parse(ctx, "agent.yaml", yaml, strlen(yaml), &cfg),
                     INGEST_EINVAL);
    assert_string_equal(ingest_ctx_errmsg(ctx), "agent.yaml:7:3: unknown key 'batch.max_filez'");
    assert_null(cfg);
    ingest_ctx_destroy(ctx);
}

/* transport: kafka needs kafka.brokers, not core.address; properties reach the config as name=value. */
static void test_agent_kafka(void **state)
{
    (void)state;
    static const char yaml[] = "device: {id: gw-1, key: k}\n"
                               "core: {receiver_key: r}\n"
                               "transport: kafka\n"
                               "kafka:\n"
                               "  brokers: k1:9092,k2:9092\n"
                               "  properties:\n"
                               "    security.protocol: ssl\n"
                               "    linger.ms: 20\n"
                               "    acks: ALL\n" /* the value the transport keeps, spelt otherwise: accepted */
                               "    enable.idempotence: \"1\"\n"
                               "dedup_key: d\n"
                               "sources: [{path: /s}]\n"
                               "state_dir: /st\n";
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *cfg = agent_ok(ctx, yaml);
    assert_int_equal(cfg->transport, INGEST_TRANSPORT_KAFKA);
    assert_string_equal(cfg->kafka_brokers, "k1:9092,k2:9092");
    assert_string_equal(cfg->kafka_topic, "ingest");
    assert_string_equal(cfg->kafka_reply_topic, "");
    assert_int_equal(cfg->kafka_properties_count, 4);
    assert_string_equal(cfg->kafka_properties[0], "security.protocol=ssl");
    assert_string_equal(cfg->kafka_properties[1], "linger.ms=20");
    assert_string_equal(cfg->kafka_properties[2], "acks=ALL");
    assert_string_equal(cfg->kafka_properties[3], "enable.idempotence=1");
    ingest_agent_config_free(cfg);
    /* tcp (the default) still needs core.address */
    agent_err("device: {id: gw-1, key: k}\ncore: {receiver_key: r}\ndedup_key: d\nsources: [{path: /s}]\n"
              "state_dir: /st\n",
              "key 'core.address' is required with transport: tcp");
    receiver_err("key: k\nauthorized_devices: a\ndedup_key: d\nstate_dir: s\nbronze: b\n"
                 "kafka:\n  brokers: k:1\n  properties:\n    linger.ms: soon\n",
                 "key 'kafka.properties.linger.ms': librdkafka refuses it");
    receiver_err("key: k\nauthorized_devices: a\ndedup_key: d\nstate_dir: s\nbronze: b\n"
                 "kafka:\n  brokers: k:1\n  properties:\n    enable.auto.commit: \"true\"\n",
                 "key 'kafka.properties.enable.auto.commit': the transport keeps enable.auto.commit = false");
    /* the agent's message.max.bytes is read as librdkafka reads it (0x... in hex) */
    agent_err("device: {id: gw-1, key: k}\ncore: {receiver_key: r}\ntransport: kafka\ndedup_key: d\n"
              "sources: [{path: /s}]\nstate_dir: /st\nkafka:\n  brokers: k:1\n  properties:\n"
              "    message.max.bytes: \"0x1000\"\n",
              "key 'kafka.properties.message.max.bytes': 4096 is too small");
    {
        static const char y[] = "device: {id: gw-1, key: k}\ncore: {receiver_key: r}\ntransport: kafka\n"
                                "dedup_key: d\nsources: [{path: /s}]\nstate_dir: /st\nkafka:\n  brokers: k:1\n"
                                "  properties:\n    message.max.bytes: \"0x100000\"\n";
        ingest_agent_config *c = agent_ok(ctx, y);
        ingest_agent_config_free(c);
    }
    /* brokers: host:port entries (a protocol before, IPv6 in brackets); anything else at load */
    static const char *const bad_brokers[][2] = {
        { "not a broker list!!", "broker 1 ('not a broker list!!') is not host:port" },
        { "k:0", "broker 1 ('k:0') is not host:port" },
        { "k:1,", "broker 2 ('') is not host:port" },
        { "k:1,,k:2", "broker 2 ('') is not host:port" },
        { "[zz]:1", "broker 1 ('[zz]:1') is not host:port" },
    };
    for (size_t i = 0; i < sizeof bad_brokers / sizeof bad_brokers[0]; i++) {
        char y[256];
        snprintf(y, sizeof y, "key: k\nauthorized_devices: a\ndedup_key: d\nstate_dir: s\nbronze: b\n"
                 "kafka:\n  brokers: \"%s\"\n", bad_brokers[i][0]);
        receiver_err(y, bad_brokers[i][1]);
    }
    {
        ingest_receiver_config *okc = NULL;
        static const char oky[] = "key: k\nauthorized_devices: a\ndedup_key: d\nstate_dir: s\nbronze: b\n"
                                  "kafka:\n  brokers: \"SSL://k1.example:9093, [::1]:9092,k3\"\n";
        assert_int_equal(ingest_receiver_config_parse(ctx, "r.yaml", oky, strlen(oky), &okc), 0);
        ingest_receiver_config_free(okc);
    }
    ingest_receiver_config *rc = NULL;
    static const char ryaml[] = "key: k\nauthorized_devices: a\ndedup_key: d\nstate_dir: s\nbronze: b\n"
                                "kafka:\n  brokers: k:1\n  group: fleet-a\n";
    assert_int_equal(ingest_receiver_config_parse(ctx, "r.yaml", ryaml, strlen(ryaml), &rc), 0);
    assert_string_equal(rc->kafka_brokers, "k:1");
    assert_string_equal(rc->kafka_group, "fleet-a");
    assert_int_equal(rc->kafka_properties_count, 0);
    ingest_receiver_config_free(rc);
    ingest_ctx_destroy(ctx);
}

static void test_errors_agent(void **state)
{
    (void)state;
    /* unknown keys */
    agent_err_plus("bogus: 1\n", "agent.yaml:11:1: unknown key 'bogus'");
    agent_err_plus("batch:\n  max_filez: 10\n", "agent.yaml:12:3: unknown key 'batch.max_filez'");
    agent_err_plus("transport: kafka\n", "key 'kafka.brokers' is required with transport: kafka");
    agent_err_plus("transport: kafka\nkafka:\n  brokers: b:9092\n  properties:\n    no.such.thing: 1\n",
                   "agent.yaml:15:20: key 'kafka.properties.no.such.thing': librdkafka refuses it: "
                   "No such configuration property: \"no.such.thing\"");
    agent_err_plus("transport: kafka\nkafka:\n  brokers: b:9092\n  properties:\n    acks: [all]\n",
                   "key 'kafka.properties.acks' must be a string, not a list");
    agent_err_plus("kafka:\n  topic: a/b\n", "key 'kafka.topic': 'a/b' is not a topic or group name");
    /* what the transport keeps may be given its value only (it would be overridden without a word) */
    agent_err_plus("transport: kafka\nkafka:\n  brokers: b:9092\n  properties:\n    enable.idempotence: \"false\"\n",
                   "agent.yaml:15:25: key 'kafka.properties.enable.idempotence': the transport keeps "
                   "enable.idempotence = true (what its no-loss, no-duplicate guarantee rests on, docs/kafka.md); it "
                   "cannot be 'false'");
    agent_err_plus("transport: kafka\nkafka:\n  brokers: b:9092\n  properties:\n    acks: \"1\"\n",
                   "key 'kafka.properties.acks': the transport keeps acks = all");
    agent_err_plus("transport: kafka\nkafka:\n  brokers: b:9092\n  properties:\n    request.required.acks: \"0\"\n",
                   "key 'kafka.properties.request.required.acks': the transport keeps acks = all");
    agent_err_plus("bogus:\n  x: 1\n", "agent.yaml:11:1: unknown key 'bogus'");
    agent_err_plus("sources[].path: /x\n", "agent.yaml:11:1: unknown key 'sources[].path'");
    agent_err_plus("batch.max_filez: 3\n", "agent.yaml:11:1: unknown key 'batch.max_filez'");
    /* wrong types */
    agent_err_plus("batch:\n  max_files:\n    a: 1\n",
                   "agent.yaml:13:5: key 'batch.max_files' must be a int, not a mapping");
    agent_err_plus("transport: [tcp]\n", "agent.yaml:11:12: key 'transport' must be a enum, not a list");
    agent_err_plus("batch: 5\n", "agent.yaml:11:8: key 'batch' must be a mapping of keys");
    agent_err_plus("batch:\n  max_files: lots\n", "agent.yaml:12:14: key 'batch.max_files': 'lots' is not a whole number");
    agent_err_plus("{a: 1}: 2\n", "agent.yaml:11:1: a key must be a plain name, not a mapping");
    /* out of range */
    agent_err_plus("compression:\n  level: 20\n",
                   "agent.yaml:12:10: key 'compression.level': 20 is out of range (-7..19)");
    agent_err_plus("compression:\n  level: -8\n", "key 'compression.level': -8 is out of range (-7..19)");
    agent_err_plus("batch:\n  max_files: 0\n", "agent.yaml:12:14: key 'batch.max_files': 0 is out of range");
    agent_err_plus("batch:\n  max_files: 99999999999999999999999\n", "key 'batch.max_files'");
    agent_err_plus("chunking:\n  max: 128MiB\n", "agent.yaml:12:8: key 'chunking.max': 128MiB is out of range");
    /* a chunk travels whole in one message of at most 4 MiB, its 16 header bytes included */
    agent_err_plus("chunking:\n  min: 1MiB\n  avg: 2MiB\n  max: 4MiB\n",
                   "agent.yaml:14:8: key 'chunking.max': 4MiB is out of range (64..4194288 bytes)");
    {
        char buf[4096];
        snprintf(buf, sizeof(buf), "%schunking:\n  min: 1MiB\n  avg: 2MiB\n  max: 4194288B\n", agent_min);
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        ingest_agent_config *c = agent_ok(ctx, buf);
        assert_int_equal(c->chunking.max, 4194288);
        ingest_agent_config_free(c);
        ingest_ctx_destroy(ctx);
    }
    agent_err_plus("batch:\n  max_wait: 25h\n", "agent.yaml:12:13: key 'batch.max_wait': 25h is out of range");
    /* units */
    agent_err_plus("batch:\n  max_bytes: 12 parsecs\n",
                   "agent.yaml:12:14: key 'batch.max_bytes': bad size '12 parsecs': unknown unit 'parsecs'");
    agent_err_plus("batch:\n  max_bytes: -5MiB\n", "key 'batch.max_bytes': bad size '-5MiB': must not be negative");
    agent_err_plus("batch:\n  max_wait: 5\n", "agent.yaml:12:13: key 'batch.max_wait': bad duration '5': a unit is required");
    agent_err_plus("batch:\n  max_bytes: 1.5GiB\n", "must be a whole number");
    /* enums and validated strings */
    agent_err_plus("transport: udp\n", "agent.yaml:11:12: key 'transport': 'udp' is not one of tcp, kafka");
    agent_err_plus("log:\n  level: verbose\n", "agent.yaml:12:10: key 'log.level': 'verbose' is not one of error, warn, info, debug");
    agent_err_plus("metrics:\n  listen: localhost\n", "agent.yaml:12:11: key 'metrics.listen': bad address 'localhost': expected host:port");
    /* duplicates */
    agent_err_plus("state_dir: /x\n", "agent.yaml:11:1: duplicate key 'state_dir' (first set at line 10)");
    agent_err_plus("batch: {max_files: 1}\nbatch: {max_bytes: 1MiB}\n", "agent.yaml:12:1: duplicate key 'batch'");
    agent_err_plus("batch:\n  max_files: 1\n  max_files: 2\n", "agent.yaml:13:3: duplicate key 'batch.max_files'");
    agent_err_plus("batch: {max_files: 1}\nbatch.max_files: 2\n", "agent.yaml:12:1: duplicate key 'batch.max_files'");
    /* chunking cross-check */
    agent_err_plus("chunking:\n  avg: 48KiB\n", "agent.yaml:12:3: keys 'chunking.min/avg/max'");
    agent_err_plus("chunking:\n  min: 512KiB\n", "agent.yaml:12:3: keys 'chunking.min/avg/max'");
    /* YAML features we refuse, and malformed YAML */
    agent_err_plus("log: &a {level: info}\nmetrics: *a\n", "agent.yaml:11:6: YAML anchors (&name) are not supported");
    agent_err_plus("transport: !!str tcp\n", "agent.yaml:11:12: YAML tags (!name) are not supported");
    agent_err_plus("batch: {max_files: 1\n", "agent.yaml:12:1: malformed YAML");
    agent_err_plus("  bad indent: 1\n", "agent.yaml:11:13: malformed YAML: mapping values are not allowed");
    agent_err("device: 'unterminated\n", "agent.yaml:2:1: malformed YAML");
    agent_err("- a\n- b\n", "agent.yaml:1:1: the top level must be a mapping of keys");
    agent_err("just text\n", "agent.yaml:1:1: the top level must be a mapping of keys");
    agent_err("log: {level: info}\n---\nb: 2\n", "agent.yaml:2:1: only one YAML document is allowed");
    agent_err("device: {id: \"a\\0b\"}\n", "agent.yaml:1:14: key 'device.id': value contains a NUL byte");
    agent_err("device: {id: \"\\xff\"}\n", "agent.yaml:1:14: key 'device.id': '\xc3\xbf' is not a valid device id");
    agent_err("log: \xff\xfe\n", "agent.yaml:1:6: malformed YAML");
    {
        char deep[512] = "x: ";
        for (int i = 0; i < 40; i++)
            strcat(deep, "[");
        agent_err(deep, "agent.yaml:1:20: nesting deeper than 16 levels");
        /* Brackets inside quotes and comments do not count. */
        char ok[512];
        snprintf(ok, sizeof(ok), "%s# [[[[[[[[[[[[[[[[[[[[[[[\nmetrics: {listen: \"[[[[[[[[[[[[[[[[[[[[[[\"}\n",
                 agent_min);
        agent_err(ok, "key 'metrics.listen': bad address");
        char *wide = malloc(4096);
        strcpy(wide, "sources:\n");
        for (int i = 0; i < 70; i++)
            strcat(wide, "- ");
        strcat(wide, "x\n");
        agent_err(wide, "agent.yaml:2:129: nesting too deep: content indented more than 128 columns");
        free(wide);
    }
}

static void test_errors_required_and_sources(void **state)
{
    (void)state;
    agent_err("", "agent.yaml:1:1: missing required key 'device.id'");
    agent_err("# only a comment\n", "agent.yaml:1:1: missing required key 'device.id'");
    agent_err("device: {id: gw}\n", "agent.yaml:1:1: missing required key 'device.key'");
    agent_err("device: {id: gw, key: k}\ncore: {address: 'h:1', receiver_key: r}\ndedup_key: d\n",
              "agent.yaml:1:1: missing required key 'sources'");
    agent_err("device:\n  id:\n", "agent.yaml:2:6: key 'device.id' needs a value");
    agent_err("device: {id: 'bad id!'}\n", "agent.yaml:1:14: key 'device.id': 'bad id!' is not a valid device id");
    agent_err("device: {id: '..'}\n", "key 'device.id': '..' is not a valid device id");
    agent_err("device: {id: ''}\n", "key 'device.id': '' is not a valid device id");
    /* one id rule everywhere: what the config takes, the wire and the manifests take */
    agent_err("device: {id: '-gw'}\n", "key 'device.id': '-gw' is not a valid device id");
    agent_err("device: {id: '_gw'}\n", "key 'device.id': '_gw' is not a valid device id");
    agent_err("core: {address: 'host'}\n", "agent.yaml:1:17: key 'core.address': bad address 'host': expected host:port");
    agent_err("core: {address: 'host:0'}\n", "key 'core.address': bad address 'host:0': the port must be a number from 1 to 65535");
    agent_err("core: {address: 'host:65536'}\n", "the port must be a number from 1 to 65535");
    agent_err("core: {address: 'host:http'}\n", "the port must be a number from 1 to 65535");
    agent_err("core: {address: ':7443'}\n", "the host is missing");
    agent_err("core: {address: '::1:7443'}\n", "write IPv6 addresses in brackets");
    agent_err("core: {address: 'a b:1'}\n", "bad character in the host name");

    /* a move directory that is, holds or is inside the agent's state_dir: its files would overwrite the store */
    static const char *const moves[][2] = {
        { "/var/lib/ia", "the directory '/var/lib/ia' is inside state_dir '/var/lib/ia'" },
        { "/var/lib/ia/done", "the directory '/var/lib/ia/done' is inside state_dir '/var/lib/ia'" },
        { "/var", "the directory '/var' holds state_dir '/var/lib/ia'" },
    };
    for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++) {
        char y[512];
        snprintf(y, sizeof y, "device: {id: gw, key: k}\ncore: {address: 'h:1', receiver_key: r}\ndedup_key: d\n"
                 "state_dir: /var/lib/ia\nsources:\n  - {path: /data/a, after_ship: 'move:%s'}\n", moves[i][0]);
        agent_err(y, moves[i][1]);
    }
    /* the status socket made in a long state_dir would not fit a unix socket path */
    {
        char y[512], sd[128];
        snprintf(sd, sizeof sd, "/%0100d", 0);
        snprintf(y, sizeof y, "device: {id: gw, key: k}\ncore: {address: 'h:1', receiver_key: r}\ndedup_key: d\n"
                 "state_dir: %s\nsources:\n  - path: /data/a\n", sd);
        agent_err(y, "0000...' is 101 bytes long: the status socket made in it (agent.sock) would pass the 107 bytes");
        snprintf(y, sizeof y, "device: {id: gw, key: k}\ncore: {address: 'h:1', receiver_key: r}\ndedup_key: d\n"
                 "state_dir: %s\nstatus: {socket: /run/ia.sock}\nsources:\n  - path: /data/a\n", sd);
        ingest_ctx *ctx = ingest_ctx_create(NULL);
        ingest_agent_config *c = agent_ok(ctx, y);
        ingest_agent_config_free(c);
        ingest_ctx_destroy(ctx);
    }

    static const char head[] = "device: {id: gw, key: k}\n"
                               "core: {address: 'h:1', receiver_key: r}\n"
                               "dedup_key: d\n"
                               "state_dir: s\n";
    static const struct {
        const char *tail, *expect;
    } cases[] = {
        { "sources: []\n", "agent.yaml:5:1: key 'sources' needs at least 1 entry" },
        { "sources:\n", "agent.yaml:5:1: key 'sources' needs at least 1 entry" },
        { "sources: /data\n", "agent.yaml:5:10: key 'sources' must be a list" },
        { "sources: {path: /data}\n", "agent.yaml:5:10: key 'sources' must be a list" },
        { "sources:\n  - /data\n", "agent.yaml:6:5: each entry of 'sources' must be a mapping" },
        { "sources:\n  - path: /a\n  - name: b\n", "agent.yaml:7:5: missing required key 'sources[1].path'" },
        { "sources:\n  - path: /a\n    pth: /b\n", "agent.yaml:7:5: unknown key 'sources[0].pth'" },
        { "sources:\n  - path: /a\n    path: /b\n", "agent.yaml:7:5: duplicate key 'sources[0].path'" },
        { "sources:\n  - {path: /a, name: 'x y'}\n", "agent.yaml:6:22: key 'sources[0].name': 'x y' is not a valid name" },
        { "sources:\n  - path: /a/x\n  - path: /b/x\n", "agent.yaml:5:1: key 'sources[1].name': name 'x' is already used by sources[0]" },
        { "sources:\n  - path: /a\n  - {path: /a/sub, name: s}\n",
          "agent.yaml:5:1: key 'sources[1].path': '/a/sub' is inside sources[0]'s '/a': sources must not overlap" },
        { "sources:\n  - path: /a/\n  - {path: /a, name: s}\n", "'/a/' is the same as sources[1]'s '/a'" },
        { "sources:\n  - {path: /a, after_ship: 'move:/b/done'}\n  - path: /b\n",
          "key 'sources[0].after_ship': the directory '/b/done' is inside sources[1]'s '/b'" },
        { "sources:\n  - path: /\n", "agent.yaml:6:5: cannot derive a source name from path '/'; set sources[0].name" },
        { "sources:\n  - path: '/data/my files'\n", "cannot use 'my files' (the end of path '/data/my files') as a source name" },
        { "sources:\n  - {path: /a, device: {id: x}}\n", "agent.yaml:6:16: unknown key 'sources[0].device'" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[1024];
        snprintf(buf, sizeof(buf), "%s%s", head, cases[i].tail);
        agent_err(buf, cases[i].expect);
    }
    /* The limit on the number of sources. */
    size_t cap = 64 + 24 * (INGEST_CONFIG_MAX_SOURCES + 2);
    char *big = malloc(sizeof(head) + cap);
    strcpy(big, head);
    strcat(big, "sources:\n");
    for (int i = 0; i <= INGEST_CONFIG_MAX_SOURCES; i++)
        sprintf(big + strlen(big), "  - path: /s%d\n", i);
    agent_err(big, "key 'sources' has more than 256 entries");
    free(big);
    /* Overlap through a symlink: a source that is a link into another source's tree, or a move directory
     * reached through one, is refused like one written inside it (the paths as they resolve now). */
    char dir[] = "/tmp/ingest-cfg-XXXXXX", a[256], link[256], move[256], y[2048];
    assert_non_null(mkdtemp(dir));
    snprintf(a, sizeof a, "%s/a", dir);
    assert_int_equal(mkdir(a, 0755), 0);
    snprintf(link, sizeof link, "%s/a/sub", dir);
    assert_int_equal(mkdir(link, 0755), 0);
    snprintf(link, sizeof link, "%s/b", dir);
    assert_int_equal(symlink("a/sub", link), 0);
    snprintf(y, sizeof y, "%ssources:\n  - path: %s\n  - path: %s\n", head, a, link);
    char expect[1024];
    snprintf(expect, sizeof expect, "key 'sources[1].path': '%s' (that is '%s/a/sub') is inside sources[0]'s '%s'", link,
             dir, a);
    agent_err(y, expect);
    snprintf(move, sizeof move, "%s/b/done", dir);
    assert_int_equal(mkdir(move, 0755), 0);
    /* one source whose move directory is, through the link, inside itself */
    snprintf(y, sizeof y, "%ssources:\n  - {path: %s, after_ship: 'move:%s'}\n", head, a, move);
    snprintf(expect, sizeof expect, "key 'sources[0].after_ship': the directory '%s' (that is '%s/a/sub/done') is "
             "inside sources[0]'s '%s'", move, dir, a);
    agent_err(y, expect);
    snprintf(y, sizeof y, "%ssources:\n  - {path: %s/x, name: x, after_ship: 'move:%s'}\n  - path: %s\n", head, dir,
             move, a);
    snprintf(expect, sizeof expect, "key 'sources[0].after_ship': the directory '%s' (that is '%s/a/sub/done') is inside "
             "sources[1]'s '%s'", move, dir, a);
    agent_err(y, expect);
    /* a move directory not made yet, reached through the link: refused too (the agent would make it inside) */
    snprintf(y, sizeof y, "%ssources:\n  - {path: %s/x, name: x, after_ship: 'move:%s/new/out'}\n  - path: %s\n",
             head, dir, link, a);
    snprintf(expect, sizeof expect, "the directory '%s/new/out' (that is '%s/a/sub/new/out') is inside sources[1]'s",
             link, dir);
    agent_err(y, expect);
    /* the agent's state_dir inside a source: as written, and through a link */
    snprintf(y, sizeof y, "device: {id: gw, key: k}\ncore: {address: 'h:1', receiver_key: r}\ndedup_key: d\n"
             "state_dir: %s/state\nsources:\n  - path: %s\n", a, a);
    snprintf(expect, sizeof expect, "key 'state_dir': '%s/state' is inside sources[0]'s '%s'", a, a);
    agent_err(y, expect);
    snprintf(y, sizeof y, "device: {id: gw, key: k}\ncore: {address: 'h:1', receiver_key: r}\ndedup_key: d\n"
             "state_dir: %s\nsources:\n  - path: %s\n", link, a);
    snprintf(expect, sizeof expect, "key 'state_dir': '%s' (that is '%s/a/sub') is inside sources[0]'s '%s'", link,
             dir, a);
    agent_err(y, expect);
    /* directories not made yet, written with "." and "..": the same directory once made */
    snprintf(y, sizeof y, "%ssources:\n  - {path: %s/new/b/../a, name: x}\n  - {path: %s/new/./a/, name: y}\n",
             head, dir, dir);
    snprintf(expect, sizeof expect, "key 'sources[0].path': '%s/new/b/../a' (that is '%s/new/a') is the same as "
             "sources[1]'s '%s/new/./a/' (that is '%s/new/a')", dir, dir, dir, dir);
    agent_err(y, expect);
    /* a move directory inside the agent's state_dir through a link: its files would overwrite the store */
    snprintf(y, sizeof y, "device: {id: gw, key: k}\ncore: {address: 'h:1', receiver_key: r}\ndedup_key: d\n"
             "state_dir: %s/a/sub\nsources:\n  - {path: %s/x, name: x, after_ship: 'move:%s'}\n", dir, dir, move);
    snprintf(expect, sizeof expect, "key 'sources[0].after_ship': the directory '%s' (that is '%s/a/sub/done') is "
             "inside state_dir '%s/a/sub'", move, dir, dir);
    agent_err(y, expect);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_errors_receiver(void **state)
{
    (void)state;
    char buf[1024];
    receiver_err("key: k\n", "receiver.yaml:1:1: missing required key 'authorized_devices'");
    snprintf(buf, sizeof(buf), "%slayout: '{device}/{yyyy}'\n", receiver_min);
    receiver_err(buf, "receiver.yaml:6:9: key 'layout': the layout must contain {path}");
    /* "" is not "the default" for a key whose default is a value: checked like any layout (found by fuzz_config) */
    snprintf(buf, sizeof(buf), "%slayout: \"\"\nlayout_shared: true\n", receiver_min);
    receiver_err(buf, "receiver.yaml:6:9: key 'layout': the layout has 0 bytes (1..1024)");
    snprintf(buf, sizeof(buf), "%slayout: '{device}/{hh}/{path}'\n", receiver_min);
    receiver_err(buf, "receiver.yaml:6:9: key 'layout': unknown placeholder '{hh}'");
    snprintf(buf, sizeof(buf), "%slayout: '/abs/{path}'\n", receiver_min);
    receiver_err(buf, "the layout must be relative to the bronze root");
    snprintf(buf, sizeof(buf), "%slayout: '{device}/../{path}'\n", receiver_min);
    receiver_err(buf, "'..' is not allowed in the layout");
    /* the receiver's state and the landed trees overlap: refused */
    receiver_err("key: receiver.key\nauthorized_devices: /etc/ingest/devices\ndedup_key: /etc/ingest/dedup.key\n"
                 "state_dir: /srv/bronze/.state\nbronze: /srv/bronze\n",
                 "key 'state_dir': '/srv/bronze/.state' and bronze '/srv/bronze' overlap");
    receiver_err("key: receiver.key\nauthorized_devices: /etc/ingest/devices\ndedup_key: /etc/ingest/dedup.key\n"
                 "state_dir: /srv/bronze\nbronze: /srv/bronze/\n",
                 "and bronze '/srv/bronze/' overlap");
    /* every file would be refused as it lands (the tree of the manifests): refused at load */
    snprintf(buf, sizeof(buf), "%slayout: '_manifests/{device}/{path}'\n", receiver_min);
    receiver_err(buf, "receiver.yaml:6:9: key 'layout': the layout puts files under _manifests");
    snprintf(buf, sizeof(buf), "%slayout: '{device}}/{path}'\n", receiver_min);
    receiver_err(buf, "unmatched '}'");
    snprintf(buf, sizeof(buf), "%smax_connections: 0\n", receiver_min);
    receiver_err(buf, "receiver.yaml:6:18: key 'max_connections': 0 is out of range (1..65536)");
    snprintf(buf, sizeof(buf), "%sidle_timeout: 500ms\n", receiver_min);
    receiver_err(buf, "receiver.yaml:6:15: key 'idle_timeout': 500ms is out of range");
    snprintf(buf, sizeof(buf), "%sdevice: {id: x}\n", receiver_min);
    receiver_err(buf, "receiver.yaml:6:1: unknown key 'device'");
    snprintf(buf, sizeof(buf), "%slisten: '[::1]7443'\n", receiver_min);
    receiver_err(buf, "key 'listen': bad address '[::1]7443': expected [address]:port");
    snprintf(buf, sizeof(buf), "%sdirect_io: maybe\n", receiver_min);
    receiver_err(buf, "receiver.yaml:6:12: key 'direct_io': 'maybe' is not a boolean (true or false)");
    snprintf(buf, sizeof(buf), "%sindex:\n  flush_interval: 500ms\n", receiver_min);
    receiver_err(buf, "key 'index.flush_interval': 500ms is out of range");
    /* direct_io: default true; false and the other spellings */
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_receiver_config *r = NULL;
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", receiver_min, strlen(receiver_min), &r), 0);
    assert_true(r->direct_io);
    assert_false(r->append_in_place);
    assert_int_equal(r->index_flush_entries, 65536);
    assert_int_equal(r->index_flush_interval_ms, 30000);
    ingest_receiver_config_free(r);
    snprintf(buf, sizeof(buf), "%sdirect_io: off\n", receiver_min);
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", buf, strlen(buf), &r), 0);
    assert_false(r->direct_io);
    ingest_receiver_config_free(r);
    /* append_in_place: default false */
    snprintf(buf, sizeof(buf), "%sappend_in_place: true\n", receiver_min);
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", buf, strlen(buf), &r), 0);
    assert_true(r->append_in_place);
    ingest_receiver_config_free(r);
    /* dedup.scope: default fleet; device; nothing else */
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", receiver_min, strlen(receiver_min), &r), 0);
    assert_int_equal(r->dedup_scope, INGEST_DEDUP_FLEET);
    ingest_receiver_config_free(r);
    snprintf(buf, sizeof(buf), "%sdedup:\n  scope: device\n", receiver_min);
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", buf, strlen(buf), &r), 0);
    assert_int_equal(r->dedup_scope, INGEST_DEDUP_DEVICE);
    ingest_receiver_config_free(r);
    ingest_ctx_destroy(ctx);
    snprintf(buf, sizeof(buf), "%sdedup:\n  scope: devices\n", receiver_min);
    receiver_err(buf, "key 'dedup.scope'");
}

/* A layout without {device} lets devices overwrite each other: refused unless layout_shared says so. */
static void test_layout_shared(void **state)
{
    (void)state;
    char buf[1024];
    static const char *const shared[] = { "{path}", "{yyyy}/{mm}/{dd}/{path}", "{batch}/{path}", "raw/{path}",
                                          "device/{path}" };
    for (size_t i = 0; i < sizeof(shared) / sizeof(shared[0]); i++) {
        snprintf(buf, sizeof(buf), "%slayout: '%s'\n", receiver_min, shared[i]);
        receiver_err(buf, "receiver.yaml:6:1: key 'layout'");
        receiver_err(buf, "has no {device}, so devices would overwrite each other's files");
        receiver_err(buf, "or set layout_shared: true");
        snprintf(buf, sizeof(buf), "%slayout: '%s'\nlayout_shared: false\n", receiver_min, shared[i]);
        receiver_err(buf, "has no {device}");
    }
    /* the key names it wherever it comes */
    snprintf(buf, sizeof(buf), "%slayout_shared: false\nlayout: '{path}'\n", receiver_min);
    receiver_err(buf, "receiver.yaml:7:1: key 'layout'");
    snprintf(buf, sizeof(buf), "%slayout_shared: maybe\n", receiver_min);
    receiver_err(buf, "key 'layout_shared': 'maybe' is not a boolean");

    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_receiver_config *r = NULL;
    /* the default layout has {device}, and layout_shared is off */
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", receiver_min, strlen(receiver_min), &r), 0);
    assert_non_null(strstr(r->layout, "{device}"));
    assert_false(r->layout_shared);
    ingest_receiver_config_free(r);
    /* said on purpose: loads, in either order */
    snprintf(buf, sizeof(buf), "%slayout: '{yyyy}/{path}'\nlayout_shared: true\n", receiver_min);
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", buf, strlen(buf), &r), 0);
    assert_string_equal(r->layout, "{yyyy}/{path}");
    assert_true(r->layout_shared);
    ingest_receiver_config_free(r);
    snprintf(buf, sizeof(buf), "%slayout_shared: true\nlayout: '{path}'\n", receiver_min);
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", buf, strlen(buf), &r), 0);
    ingest_receiver_config_free(r);
    /* {device} anywhere will do; layout_shared is then harmless */
    snprintf(buf, sizeof(buf), "%slayout: 'raw/{yyyy}/{device}/{path}'\n", receiver_min);
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", buf, strlen(buf), &r), 0);
    ingest_receiver_config_free(r);
    snprintf(buf, sizeof(buf), "%slayout: '{path}/{device}'\nlayout_shared: true\n", receiver_min);
    assert_int_equal(ingest_receiver_config_parse(ctx, "receiver.yaml", buf, strlen(buf), &r), 0);
    ingest_receiver_config_free(r);
    ingest_ctx_destroy(ctx);
}

static void test_file_errors(void **state)
{
    (void)state;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *c = NULL;
    ingest_receiver_config *r = NULL;
    assert_int_equal(ingest_agent_config_load(ctx, "/nonexistent/agent.yaml", &c), INGEST_EINVAL);
    assert_string_equal(ingest_ctx_errmsg(ctx), "/nonexistent/agent.yaml: cannot open: No such file or directory");
    assert_null(c);
    assert_int_equal(ingest_receiver_config_load(ctx, "/", &r), INGEST_EINVAL);
    assert_string_equal(ingest_ctx_errmsg(ctx), "/: not a regular file");
    assert_null(r);

    char dir[] = "/tmp/test_config.XXXXXX", path[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/big.yaml", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (unsigned i = 0; i <= INGEST_CONFIG_MAX_FILE / 16; i++)
        fputs("# padding......\n", f);
    fclose(f);
    assert_int_equal(ingest_agent_config_load(ctx, path, &c), INGEST_EINVAL);
    assert_non_null(strstr(ingest_ctx_errmsg(ctx), "more than the limit of 1048576"));
    unlink(path);
    /* From memory the same bound applies. */
    assert_int_equal(ingest_agent_config_parse(ctx, "m.yaml", "", INGEST_CONFIG_MAX_FILE + 1, &c), INGEST_EINVAL);

    /* A real file loads, with paths relative to its directory. */
    snprintf(path, sizeof(path), "%s/agent.yaml", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs(agent_min, f);
    fclose(f);
    assert_int_equal(ingest_agent_config_load(ctx, path, &c), 0);
    char want[512];
    snprintf(want, sizeof(want), "%s/keys/device.key", dir);
    assert_string_equal(c->device_key, want);
    ingest_agent_config_free(c);
    /* Errors name the path as given. */
    f = fopen(path, "wb");
    fputs("device:\n  idd: x\n", f);
    fclose(f);
    assert_int_equal(ingest_agent_config_load(ctx, path, &c), INGEST_EINVAL);
    snprintf(want, sizeof(want), "%s:2:3: unknown key 'device.idd'", path);
    assert_string_equal(ingest_ctx_errmsg(ctx), want);
    unlink(path);
    rmdir(dir);
    ingest_ctx_destroy(ctx);
}

/* ---- units ---------------------------------------------------------------- */

static void test_units(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int rc;
        uint64_t bytes;
    } sizes[] = {
        { "0", 0, 0 },
        { "65536", 0, 65536 },
        { "1_000", 0, 1000 },
        { "10B", 0, 10 },
        { "64KiB", 0, 65536 },
        { "64 KiB", 0, 65536 },
        { "3MiB", 0, 3u << 20 },
        { "2GiB", 0, 2ull << 30 },
        { "1TiB", 0, 1ull << 40 },
        { "5kB", 0, 5000 },
        { "7MB", 0, 7000000 },
        { "2GB", 0, 2000000000ull },
        { "3TB", 0, 3000000000000ull },
        { "16777215TiB", 0, 16777215ull << 40 },
        { "16777216TiB", INGEST_EINVAL, 0 }, /* 2^64: overflow */
        { "18446744073709551615", 0, UINT64_MAX },
        { "18446744073709551616", INGEST_EINVAL, 0 },
        { "12 parsecs", INGEST_EINVAL, 0 },
        { "-1", INGEST_EINVAL, 0 },
        { "-1KiB", INGEST_EINVAL, 0 },
        { "", INGEST_EINVAL, 0 },
        { "KiB", INGEST_EINVAL, 0 },
        { "1.5MiB", INGEST_EINVAL, 0 },
        { "1,000", INGEST_EINVAL, 0 },
        { "10kib", INGEST_EINVAL, 0 },
        { "10KB", INGEST_EINVAL, 0 },
        { "10 K", INGEST_EINVAL, 0 },
        { "1__0", INGEST_EINVAL, 0 },
        { "10_", INGEST_EINVAL, 0 },
        { "0x10", INGEST_EINVAL, 0 },
        { "10MiB junk", INGEST_EINVAL, 0 },
    };
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t v = 12345;
        const int rc = ingest_parse_size(ctx, sizes[i].text, &v);
        if (rc != sizes[i].rc || (rc == 0 && v != sizes[i].bytes))
            fail_msg("size '%s': rc %d value %llu (%s)", sizes[i].text, rc, (unsigned long long)v,
                     ingest_ctx_errmsg(ctx));
        if (rc != 0)
            assert_non_null(strstr(ingest_ctx_errmsg(ctx), sizes[i].text));
    }
    assert_int_equal(ingest_parse_size(ctx, "12 parsecs", &(uint64_t){ 0 }), INGEST_EINVAL);
    assert_string_equal(ingest_ctx_errmsg(ctx),
                        "bad size '12 parsecs': unknown unit 'parsecs' (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)");

    static const struct {
        const char *text;
        int rc;
        uint64_t ms;
    } durations[] = {
        { "0", 0, 0 },
        { "500ms", 0, 500 },
        { "5s", 0, 5000 },
        { "2m", 0, 120000 },
        { "1h", 0, 3600000 },
        { "90 s", 0, 90000 },
        { "5", INGEST_EINVAL, 0 },
        { "5 parsecs", INGEST_EINVAL, 0 },
        { "-5s", INGEST_EINVAL, 0 },
        { "1.5s", INGEST_EINVAL, 0 },
        { "5S", INGEST_EINVAL, 0 },
        { "5d", INGEST_EINVAL, 0 },
        { "5sec", INGEST_EINVAL, 0 },
        { "5120000000000000h", INGEST_EINVAL, 0 },
        { "", INGEST_EINVAL, 0 },
    };
    for (size_t i = 0; i < sizeof(durations) / sizeof(durations[0]); i++) {
        uint64_t v = 12345;
        const int rc = ingest_parse_duration(ctx, durations[i].text, &v);
        if (rc != durations[i].rc || (rc == 0 && v != durations[i].ms))
            fail_msg("duration '%s': rc %d value %llu (%s)", durations[i].text, rc,
                     (unsigned long long)v, ingest_ctx_errmsg(ctx));
    }
    assert_int_equal(ingest_parse_duration(NULL, "1m", &(uint64_t){ 0 }), 0);
    ingest_ctx_destroy(ctx);
}

/* ---- shipped files, help and docs ----------------------------------------- */

static void test_shipped_configs(void **state)
{
    (void)state;
    char path[4096];
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_agent_config *c = NULL;
    ingest_receiver_config *r = NULL;

    srcpath(path, sizeof(path), "conf/agent.yaml");
    if (ingest_agent_config_load(ctx, path, &c) != 0)
        fail_msg("%s", ingest_ctx_errmsg(ctx));
    assert_string_equal(c->device_id, "gw-0042");
    assert_int_equal(c->sources_count, 2);
    assert_string_equal(c->sources[0].name, "camera");
    assert_string_equal(c->sources[1].name, "plc");
    assert_int_equal(c->transport, INGEST_TRANSPORT_TCP);
    assert_int_equal(c->compression_level, 1);
    assert_int_equal(c->batch_max_wait_ms, 5000);
    assert_int_equal(c->sources[0].include_count, 2);
    assert_string_equal(c->sources[0].include[1], "**/*.json");
    assert_int_equal(c->sources[0].exclude_count, 2);
    assert_true(c->sources[0].max_size == 2ull << 30);
    assert_int_equal(c->sources[1].include_count, 0);
    assert_int_equal(c->sources[1].sample_every, 1);
    assert_string_equal(c->status_socket, "/var/lib/ingest-agent/agent.sock");
    ingest_agent_config_free(c);

    srcpath(path, sizeof(path), "conf/agent-minimal.yaml");
    if (ingest_agent_config_load(ctx, path, &c) != 0)
        fail_msg("%s", ingest_ctx_errmsg(ctx));
    assert_int_equal(c->sources_count, 1);
    assert_string_equal(c->sources[0].name, "sensors");
    assert_non_null(strstr(c->device_key, "conf/device.key"));
    assert_true(c->device_key[0] == '/');
    ingest_agent_config_free(c);

    srcpath(path, sizeof(path), "conf/receiver.yaml");
    if (ingest_receiver_config_load(ctx, path, &r) != 0)
        fail_msg("%s", ingest_ctx_errmsg(ctx));
    assert_string_equal(r->bronze, "/srv/bronze");
    assert_string_equal(r->layout, "{device}/{yyyy}/{mm}/{dd}/{path}");
    ingest_receiver_config_free(r);

    srcpath(path, sizeof(path), "conf/receiver-minimal.yaml");
    if (ingest_receiver_config_load(ctx, path, &r) != 0)
        fail_msg("%s", ingest_ctx_errmsg(ctx));
    assert_non_null(strstr(r->key, "conf/receiver.key"));
    ingest_receiver_config_free(r);
    ingest_ctx_destroy(ctx);
}

typedef struct key_check {
    const char *doc;   /* docs/config.md */
    const char *conf;  /* conf/<program>.yaml */
    int keys;
} key_check;

static int check_key(void *ud, const ingest_config_key *k)
{
    key_check *kc = ud;
    char tick[160];
    kc->keys++;
    snprintf(tick, sizeof(tick), "`%s`", k->name);
    if (strstr(kc->doc, tick) == NULL)
        fail_msg("docs/config.md does not document %s", tick);
    /* The full example shows every key (its last component). */
    const char *leaf = strrchr(k->name, '.');
    leaf = leaf ? leaf + 1 : k->name;
    char shown[160];
    snprintf(shown, sizeof(shown), "%s:", leaf);
    if (strstr(kc->conf, shown) == NULL)
        fail_msg("the example config does not show %s", k->name);
    assert_non_null(k->description);
    assert_true(k->required || k->default_value != NULL);
    return 0;
}

static int stop_at_third(void *ud, const ingest_config_key *k)
{
    (void)k;
    return ++*(int *)ud == 3 ? 42 : 0;
}

static void test_keys_docs_and_help(void **state)
{
    (void)state;
    char path[4096];
    srcpath(path, sizeof(path), "docs/config.md");
    char *doc = read_all(path, NULL);
    assert_non_null(doc);
    srcpath(path, sizeof(path), "conf/agent.yaml");
    char *agent = read_all(path, NULL);
    srcpath(path, sizeof(path), "conf/receiver.yaml");
    char *receiver = read_all(path, NULL);
    assert_non_null(agent);
    assert_non_null(receiver);
    key_check kc = { doc, agent, 0 };
    assert_int_equal(ingest_config_keys(INGEST_CONFIG_AGENT, check_key, &kc), 0);
    assert_int_equal(kc.keys, 45); /* with the kafka keys, sources[].symlinks, compression.encoders and batch.push_max */
    kc = (key_check){ doc, receiver, 0 };
    assert_int_equal(ingest_config_keys(INGEST_CONFIG_RECEIVER, check_key, &kc), 0);
    assert_int_equal(kc.keys, 28); /* with dedup.scope, layout_shared, memory.queue_budget, append_in_place and the kafka keys (kafka.device_queue) */
    int n = 0;
    assert_int_equal(ingest_config_keys(INGEST_CONFIG_AGENT, stop_at_third, &n), 42);
    assert_int_equal(ingest_config_keys(99, stop_at_third, &n), INGEST_EINVAL);

    const size_t need = ingest_config_help(INGEST_CONFIG_AGENT, NULL, 0);
    assert_true(need > 1000);
    char *help = malloc(need + 1);
    assert_int_equal(ingest_config_help(INGEST_CONFIG_AGENT, help, need + 1), need);
    assert_int_equal(strlen(help), need);
    assert_non_null(strstr(help, "  batch.max_bytes          size 64KiB..64GiB, default 256MiB\n"));
    assert_non_null(strstr(help, "  device.id                string, required\n"));
    assert_non_null(strstr(help, "  transport                enum tcp|kafka, default tcp\n"));
    assert_non_null(strstr(help, "  batch.max_wait           duration 10ms..24h, default 5s\n"));
    assert_non_null(strstr(help, "  sources[].path           path, required\n"));
    assert_non_null(strstr(help, "  sources[].include        strings 0..64 entries, default []\n"));
    assert_non_null(strstr(help, "  throttle.rate            rate 0B..1024TiB/s, default 0\n"));
    assert_non_null(strstr(help, "  status.socket            path, default {state_dir}/agent.sock\n"));
    assert_non_null(strstr(help, "  sources[].spool          enum none|copy, default none\n"));
    /* Truncation keeps a NUL and reports the full length. */
    char small[32];
    assert_int_equal(ingest_config_help(INGEST_CONFIG_AGENT, small, sizeof(small)), need);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_int_equal(memcmp(small, help, sizeof(small) - 1), 0);
    free(help);
    assert_true(ingest_config_help(INGEST_CONFIG_RECEIVER, NULL, 0) > 300);
    assert_int_equal(ingest_config_help(7, small, sizeof(small)), 0);
    assert_string_equal(small, "");
    free(doc);
    free(agent);
    free(receiver);
}

/* ---- allocation failures ---------------------------------------------------- */

typedef struct fail_alloc {
    long budget; /* allocations left before failing; <0: never fail */
    long live;
} fail_alloc;

static void *fa_alloc(void *opaque, size_t size)
{
    fail_alloc *fa = opaque;
    if (fa->budget == 0)
        return NULL;
    if (fa->budget > 0)
        fa->budget--;
    void *p = malloc(size);
    if (p != NULL)
        fa->live++;
    return p;
}

static void fa_free(void *opaque, void *ptr)
{
    fail_alloc *fa = opaque;
    if (ptr != NULL) {
        fa->live--;
        free(ptr);
    }
}

static void test_alloc_failures(void **state)
{
    (void)state;
    static const char yaml[] = "device: {id: gw, key: k}\n"
                               "core: {address: 'h:1', receiver_key: r}\n"
                               "dedup_key: d\n"
                               "state_dir: s\n"
                               "sources:\n"
                               "  - path: /a\n  - path: /b\n  - {path: c, name: cc}\n"
                               "  - path: /d\n  - path: /e\n"
                               "    include: ['**/*.csv', 'x/**']\n"
                               "    exclude: ['**/tmp/**']\n"
                               "    after_ship: move:done\n";
    int ok = 0;
    for (long n = 0; n < 500 && !ok; n++) {
        fail_alloc fa = { -1, 0 };
        const ingest_allocator a = { fa_alloc, fa_free, &fa };
        ingest_ctx *ctx = ingest_ctx_create(&a);
        assert_non_null(ctx);
        fa.budget = n;
        ingest_agent_config *c = NULL;
        const int rc = ingest_agent_config_parse(ctx, "/x/agent.yaml", yaml, strlen(yaml), &c);
        if (rc == 0) {
            assert_int_equal(c->sources_count, 5);
            assert_string_equal(c->sources[2].path, "/x/c");
            assert_int_equal(c->sources[4].include_count, 2);
            assert_string_equal(c->sources[4].after_ship_dir, "/x/done");
            assert_string_equal(c->status_socket, "/x/s/agent.sock");
            ingest_agent_config_free(c);
            ok = 1;
        } else {
            assert_int_equal(rc, INGEST_ENOMEM);
            assert_null(c);
        }
        ingest_ctx_destroy(ctx);
        assert_int_equal(fa.live, 0);
    }
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agent_full),
        cmocka_unit_test(test_agent_defaults),
        cmocka_unit_test(test_agent_dictionary_auto),
        cmocka_unit_test(test_agent_null_values_mean_default),
        cmocka_unit_test(test_agent_filters_and_daemon_keys),
        cmocka_unit_test(test_errors_filters_and_daemon_keys),
        cmocka_unit_test(test_receiver_full_and_defaults),
        cmocka_unit_test(test_relative_to_config_dir),
        cmocka_unit_test(test_error_positions),
        cmocka_unit_test(test_agent_kafka),
        cmocka_unit_test(test_errors_agent),
        cmocka_unit_test(test_errors_required_and_sources),
        cmocka_unit_test(test_errors_receiver),
        cmocka_unit_test(test_layout_shared),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_units),
        cmocka_unit_test(test_shipped_configs),
        cmocka_unit_test(test_keys_docs_and_help),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
