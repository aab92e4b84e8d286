/*
 * `ingestctl bench gen`: a deterministic sensor tree for demos, tests and
 * benchmarks, and with --evolve its next generation.
 *
 * Profile "default" (alias "sensors"; share of bytes): telemetry CSV and
 * JSON 30%, int16 signal frames 30%, JPEG-like incompressible blobs 25%, a
 * large text log 15%.  Profile "empty": empty files for discovery
 * benchmarks.  The gateway and small profiles are in bench_gen_gateway.c.
 * Everything comes from splitmix64 seeded with --seed, so the same
 * arguments always give the same bytes.  Usage and the profiles: the USAGE
 * text below and bench/README.md.
 */
#include "ingest.h"
#include "ingestctl.h"
#include "bench_gen.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef bgen_rng rng;

static uint64_t next(rng *r) { return bgen_next(r); }
static uint64_t below(rng *r, uint64_t n) { return bgen_below(r, n); }

int bgen_mkdirs(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Buffered writer so generation costs little per byte. */
typedef struct {
    int fd;
    size_t len;
    int err;
    char buf[1 << 16];
} writer;

static writer W;

int bgen_open(const char *dir, const char *name, int append)
{
    char path[4096];
    if (bgen_mkdirs(dir) != 0) {
        fprintf(stderr, "ingestctl bench gen: mkdir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    W.fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    W.len = 0;
    W.err = 0;
    if (W.fd < 0) {
        fprintf(stderr, "ingestctl bench gen: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void wflush(writer *w)
{
    size_t off = 0;
    while (off < w->len) {
        const ssize_t n = write(w->fd, w->buf + off, w->len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            w->err = errno;
            break;
        }
        off += (size_t)n;
    }
    w->len = 0;
}

void bgen_put(const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        const size_t room = sizeof(W.buf) - W.len;
        const size_t k = n < room ? n : room;
        memcpy(W.buf + W.len, c, k);
        W.len += k;
        c += k;
        n -= k;
        if (W.len == sizeof(W.buf))
            wflush(&W);
    }
}

int bgen_close(void)
{
    wflush(&W);
    if (close(W.fd) != 0 && W.err == 0)
        W.err = errno;
    if (W.err) {
        fprintf(stderr, "ingestctl bench gen: write: %s\n", strerror(W.err));
        return -1;
    }
    return 0;
}

/* ---- text builder --------------------------------------------------------- */

void bgen_reset(bgen_text *t)
{
    t->len = 0;
    t->over = 0;
}

void bgen_mem(bgen_text *t, const void *p, size_t n)
{
    if (n > sizeof(t->buf) - t->len) {
        t->over += n;
        return;
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
}

void bgen_str(bgen_text *t, const char *s) { bgen_mem(t, s, strlen(s)); }

void bgen_ch(bgen_text *t, char c)
{
    if (t->len < sizeof(t->buf))
        t->buf[t->len++] = c;
    else
        t->over++;
}

void bgen_u64(bgen_text *t, uint64_t v)
{
    char d[20];
    size_t n = 0;
    do {
        d[sizeof(d) - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    bgen_mem(t, d + sizeof(d) - n, n);
}

void bgen_i64(bgen_text *t, int64_t v)
{
    if (v < 0) {
        bgen_ch(t, '-');
        bgen_u64(t, 0 - (uint64_t)v);
    } else {
        bgen_u64(t, (uint64_t)v);
    }
}

void bgen_pad(bgen_text *t, uint64_t v, unsigned width)
{
    char d[20];
    size_t n = 0;
    do {
        d[sizeof(d) - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && n < sizeof(d));
    while (n < width && n < sizeof(d))
        d[sizeof(d) - 1 - n++] = '0';
    bgen_mem(t, d + sizeof(d) - n, n);
}

void bgen_fix(bgen_text *t, int64_t v, unsigned decimals)
{
    static const uint64_t pow10[] = { 1, 10, 100, 1000, 10000, 100000, 1000000 };
    if (decimals == 0 || decimals > 6) {
        bgen_i64(t, v);
        return;
    }
    uint64_t a = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (v < 0)
        bgen_ch(t, '-');
    bgen_u64(t, a / pow10[decimals]);
    bgen_ch(t, '.');
    bgen_pad(t, a % pow10[decimals], decimals);
}

void bgen_hex(bgen_text *t, uint64_t v, unsigned digits)
{
    static const char hex[] = "0123456789abcdef";
    char d[16];
    if (digits > 16)
        digits = 16;
    for (unsigned i = 0; i < digits; i++, v >>= 4)
        d[digits - 1 - i] = hex[v & 15];
    bgen_mem(t, d, digits);
}

/* Howard Hinnant's civil_from_days, for days >= 0. */
static void civil(uint64_t days, unsigned *y, unsigned *m, unsigned *d)
{
    const uint64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
    const uint64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const uint64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    *d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
    *m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
    *y = (unsigned)(yoe + era * 400 + (*m <= 2));
}

void bgen_date(bgen_text *t, uint64_t days)
{
    unsigned y, m, d;
    civil(days, &y, &m, &d);
    bgen_pad(t, y, 4);
    bgen_ch(t, '-');
    bgen_pad(t, m, 2);
    bgen_ch(t, '-');
    bgen_pad(t, d, 2);
}

void bgen_iso(bgen_text *t, uint64_t ms, int with_ms)
{
    const uint64_t s = ms / 1000;
    bgen_date(t, s / 86400);
    bgen_ch(t, 'T');
    bgen_pad(t, s % 86400 / 3600, 2);
    bgen_ch(t, ':');
    bgen_pad(t, s % 3600 / 60, 2);
    bgen_ch(t, ':');
    bgen_pad(t, s % 60, 2);
    if (with_ms) {
        bgen_ch(t, '.');
        bgen_pad(t, ms % 1000, 3);
    }
    bgen_ch(t, 'Z');
}

/* ---- profile "default" ------------------------------------------------------ */

static int gen_csv(rng *r, const char *dir, const char *name, uint64_t bytes, uint64_t t0)
{
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    char line[160];
    bgen_put("timestamp_ms,sensor,temperature_c,humidity_pct,pressure_hpa,status\n", 67);
    double temp = 20.0 + (double)below(r, 100) / 10.0, hum = 40.0 + (double)below(r, 200) / 10.0;
    uint64_t written = 67, t = t0;
    while (written < bytes) {
        temp += ((double)below(r, 21) - 10.0) / 100.0;
        hum += ((double)below(r, 21) - 10.0) / 50.0;
        const int n = snprintf(line, sizeof(line), "%" PRIu64 ",s%02u,%.2f,%.1f,%.2f,%s\n", t,
                               (unsigned)below(r, 16), temp, hum, 1013.25 + (double)below(r, 300) / 100.0,
                               below(r, 50) == 0 ? "WARN" : "OK");
        bgen_put(line, (size_t)n);
        written += (uint64_t)n;
        t += 100 + below(r, 5);
    }
    return bgen_close();
}

static int gen_json(rng *r, const char *dir, const char *name, uint64_t t, unsigned records)
{
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    char buf[512];
    for (unsigned i = 0; i < records; i++, t += 1000) {
        const int n = snprintf(buf, sizeof(buf),
                               "{\"ts\":%" PRIu64 ",\"device\":\"plc-%02u\",\"line\":%u,\"counters\":{\"good\":%u,"
                               "\"scrap\":%u,\"cycle_ms\":%u},\"state\":\"%s\",\"alarms\":[]}\n",
                               t, (unsigned)below(r, 32), (unsigned)below(r, 8), (unsigned)below(r, 100000),
                               (unsigned)below(r, 300), 800 + (unsigned)below(r, 400),
                               below(r, 10) ? "running" : "idle");
        bgen_put(buf, (size_t)n);
    }
    return bgen_close();
}

static int gen_frame(rng *r, const char *dir, const char *name, uint64_t bytes)
{
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    const double f = 0.001 + (double)below(r, 1000) / 100000.0;
    int16_t s[512];
    uint64_t i = 0;
    for (uint64_t written = 0; written < bytes; written += sizeof(s)) {
        for (size_t k = 0; k < 512; k++, i++)
            s[k] = (int16_t)(8000.0 * sin((double)i * f) + (double)below(r, 64) - 32.0);
        const size_t n = bytes - written < sizeof(s) ? (size_t)(bytes - written) : sizeof(s);
        bgen_put(s, n);
    }
    return bgen_close();
}

static int gen_blob(rng *r, const char *dir, const char *name, uint64_t bytes)
{
    if (bgen_open(dir, name, 0) != 0)
        return -1;
    static const uint8_t soi[] = { 0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0 };
    bgen_put(soi, sizeof(soi));
    uint64_t buf[512];
    for (uint64_t written = sizeof(soi); written < bytes; written += sizeof(buf)) {
        for (size_t k = 0; k < 512; k++)
            buf[k] = next(r);
        const size_t n = bytes - written < sizeof(buf) ? (size_t)(bytes - written) : sizeof(buf);
        bgen_put(buf, n);
    }
    return bgen_close();
}

static const char *const LEVELS[] = { "INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR" };
static const char *const MSGS[] = { "uplink ok rtt_ms=%u", "camera %u frame dropped", "plc %u poll complete",
                                    "disk usage %u%%", "retrying connection attempt %u", "sensor %u calibrated" };

static int gen_log(rng *r, const char *dir, const char *name, uint64_t bytes, uint64_t t, int append)
{
    if (bgen_open(dir, name, append) != 0)
        return -1;
    char line[256], msg[96];
    for (uint64_t written = 0; written < bytes;) {
        const unsigned m = (unsigned)below(r, 6);
        snprintf(msg, sizeof(msg), MSGS[m], (unsigned)below(r, 100));
        const int n = snprintf(line, sizeof(line), "%" PRIu64 ".%03u gw01 %s [%s] %s\n", t / 1000,
                               (unsigned)(t % 1000), LEVELS[below(r, 6)], m < 3 ? "net" : "io", msg);
        bgen_put(line, (size_t)n);
        written += (uint64_t)n;
        t += 7 + below(r, 200);
    }
    return bgen_close();
}

uint64_t bench_parse_size(const char *s, int *ok)
{
    /* the config's sizes (a whole number, then B, KiB.. or kB..), and K, M, G for KiB, MiB, GiB */
    char buf[64];
    const size_t n = strlen(s);
    if (n == 0 || n + 3 > sizeof buf) {
        *ok = 0;
        return 0;
    }
    memcpy(buf, s, n + 1);
    if (buf[n - 1] == 'K' || buf[n - 1] == 'M' || buf[n - 1] == 'G')
        memcpy(buf + n, "iB", 3);
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    uint64_t v = 0;
    *ok = ctx != NULL && ingest_parse_size(ctx, buf, &v) == INGEST_OK;
    if (!*ok && ctx != NULL)
        fprintf(stderr, "ingestctl bench: %s\n", ingest_ctx_errmsg(ctx));
    ingest_ctx_destroy(ctx);
    return *ok ? v : 0;
}

/* A whole decimal number that fits 64 bits: 1, or 0 (said on stderr, naming the option). */
static int parse_count(const char *opt, const char *s, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v > max) {
        fprintf(stderr, "ingestctl bench gen: %s %s: expected a whole number from 0 to %llu\n", opt, s,
                (unsigned long long)max);
        return 0;
    }
    *out = v;
    return 1;
}

/* Initial generation: budget split by share. */
static int generate(const char *root, uint64_t size, uint64_t seed, unsigned *files)
{
    rng r = { seed };
    char dir[4096], name[256];
    const uint64_t t0 = 1790000000000ull; /* 2026-09-21, fixed so dates are reproducible */
    uint64_t budget = size * 25 / 100, t = t0;
    for (unsigned i = 0; budget > 0; i++) {
        uint64_t b = 64 * 1024 + below(&r, 512 * 1024);
        if (b > budget) b = budget;
        snprintf(dir, sizeof(dir), "%s/telemetry/site-%02u", root, i % 8);
        snprintf(name, sizeof(name), "%05u.csv", i);
        if (gen_csv(&r, dir, name, b, t) != 0) return -1;
        t += 3600000;
        budget -= b;
        (*files)++;
    }
    budget = size * 5 / 100;
    for (unsigned i = 0; budget > 0; i++) {
        snprintf(dir, sizeof(dir), "%s/telemetry/plc/%02u", root, i / 200);
        snprintf(name, sizeof(name), "state-%05u.json", i);
        if (gen_json(&r, dir, name, t0 + i * 60000ull, 24) != 0) return -1;
        budget = budget > 4096 ? budget - 4096 : 0;
        (*files)++;
    }
    budget = size * 30 / 100;
    for (unsigned i = 0; budget > 0; i++) {
        uint64_t b = 256 * 1024;
        if (b > budget) b = budget;
        snprintf(dir, sizeof(dir), "%s/frames/cam-%02u", root, i % 4);
        snprintf(name, sizeof(name), "frame-%05u.bin", i);
        if (gen_frame(&r, dir, name, b) != 0) return -1;
        budget -= b;
        (*files)++;
    }
    budget = size * 25 / 100;
    for (unsigned i = 0; budget > 0; i++) {
        uint64_t b = 100 * 1024 + below(&r, 2 * 1024 * 1024);
        if (b > budget) b = budget;
        snprintf(dir, sizeof(dir), "%s/blobs/cam-%02u", root, i % 4);
        snprintf(name, sizeof(name), "img-%05u.jpg", i);
        if (gen_blob(&r, dir, name, b) != 0) return -1;
        budget -= b;
        (*files)++;
    }
    snprintf(dir, sizeof(dir), "%s/logs", root);
    if (gen_log(&r, dir, "gateway.log", size * 15 / 100, t0, 0) != 0) return -1;
    (*files)++;
    return 0;
}

/*
 * Next generation, in place: append 1% to the log, add new telemetry, edit a
 * few frames in the middle, rename one site directory, duplicate a blob,
 * delete a few JSON files.
 */
static int evolve(const char *root, uint64_t size, uint64_t seed, unsigned gen, unsigned *changed)
{
    rng r = { seed * 1000003u + gen };
    char dir[4096], from[4096], to[4096], name[256];
    const uint64_t t0 = 1790000000000ull + (uint64_t)gen * 86400000ull;
    snprintf(dir, sizeof(dir), "%s/logs", root);
    if (gen_log(&r, dir, "gateway.log", size * 15 / 100 / 100 + 1, t0, 1) != 0) return -1;
    (*changed)++;
    for (unsigned i = 0; i < 4; i++) {
        snprintf(dir, sizeof(dir), "%s/telemetry/site-new-g%u", root, gen);
        snprintf(name, sizeof(name), "%05u.csv", i);
        if (gen_csv(&r, dir, name, size / 400 + 1024, t0 + i * 3600000ull) != 0) return -1;
        (*changed)++;
    }
    for (unsigned i = 0; i < 8; i++) {
        snprintf(from, sizeof(from), "%s/frames/cam-%02u/frame-%05u.bin", root, i % 4, i * 3);
        const int fd = open(from, O_WRONLY);
        if (fd < 0) continue;
        uint8_t patch[64];
        for (size_t k = 0; k < sizeof(patch); k++) patch[k] = (uint8_t)next(&r);
        if (pwrite(fd, patch, sizeof(patch), 100000) != (ssize_t)sizeof(patch)) { close(fd); return -1; }
        close(fd);
        (*changed)++;
    }
    snprintf(from, sizeof(from), "%s/telemetry/site-%02u", root, gen % 8);
    snprintf(to, sizeof(to), "%s/telemetry/site-%02u-moved-g%u", root, gen % 8, gen);
    if (rename(from, to) == 0) (*changed)++;
    snprintf(from, sizeof(from), "%s/blobs/cam-00/img-%05u.jpg", root, 0u);
    snprintf(to, sizeof(to), "%s/blobs/cam-00/img-00000-copy-g%u.jpg", root, gen);
    {
        const int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (in >= 0 && out >= 0) {
            char b[65536];
            ssize_t n;
            while ((n = read(in, b, sizeof(b))) > 0)
                if (write(out, b, (size_t)n) != n) break;
            (*changed)++;
        }
        if (in >= 0) close(in);
        if (out >= 0) close(out);
    }
    for (unsigned i = 0; i < 5; i++) {
        snprintf(from, sizeof(from), "%s/telemetry/plc/00/state-%05u.json", root, gen * 7 + i);
        if (unlink(from) == 0) (*changed)++;
    }
    return 0;
}

int bench_gen_tree(const char *root, uint64_t size, uint64_t seed, unsigned *files)
{
    *files = 0;
    return generate(root, size, seed, files);
}

/* Profile "empty": n empty files, 1,000 per directory (discovery benchmarks). */
static int generate_empty(const char *root, uint64_t n)
{
    char dir[4096], path[4200];
    for (uint64_t i = 0; i < n; i++) {
        if (i % 1000 == 0) {
            snprintf(dir, sizeof(dir), "%s/d%04llu/e%02llu", root, (unsigned long long)(i / 100000),
                     (unsigned long long)(i / 1000 % 100));
            if (bgen_mkdirs(dir) != 0) {
                fprintf(stderr, "ingestctl bench gen: mkdir %s: %s\n", dir, strerror(errno));
                return -1;
            }
        }
        snprintf(path, sizeof(path), "%s/f%06llu", dir, (unsigned long long)i);
        const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "ingestctl bench gen: %s: %s\n", path, strerror(errno));
            return -1;
        }
        close(fd);
    }
    return 0;
}

static const char USAGE[] =
    "usage: ingestctl bench gen [--profile default|gateway|small|empty] [--size BYTES] [--files N] [--seed N]\n"
    "                           [--evolve | --generation N] DIR\n"
    "\n"
    "A deterministic tree under DIR (the same arguments give the same bytes), or with --evolve\n"
    "(= --generation 1) its next generation, changed in place (pass the same --profile, --size,\n"
    "--files and --seed as for generation 0).\n"
    "\n"
    "  --profile default  (alias sensors) telemetry CSV and JSON 30% of the bytes, int16 frames\n"
    "                     30%, JPEG-like blobs 25%, one text log 15%; --size, default 64MiB.\n"
    "                     --evolve: a 1% log append, new CSVs, 64-byte edits in 8 frames, a\n"
    "                     renamed directory, a copied blob, 5 deletions.\n"
    "  --profile gateway  a field gateway's tree, --size default 1GiB (about 39,500 files):\n"
    "                     93% of the files JSON events of ~2.9 KB (10% of the bytes), CSV\n"
    "                     exports of ~26 KB, CSV telemetry of ~0.5 MB, int16 sensor frames of\n"
    "                     ~1.6 MB, JPEG-like images of ~1.1 MB, 3 growing logs; the counts\n"
    "                     scale with --size.  --evolve: ~1% appended to each log, ~1% new\n"
    "                     events, 16-byte edits in place in ~6% of the frames, an event folder\n"
    "                     of 100 files renamed, 5 events and 1 export deleted.\n"
    "  --profile small    40,000 JSON events of ~900 bytes (~36 MB); --files N sets the count,\n"
    "                     or --size BYTES (count = BYTES / 900).  --evolve: 1% new files, 10\n"
    "                     files rewritten.\n"
    "  --profile empty    --files N empty files (default 1,000,000), 1,000 per directory.\n"
    "\n"
    "Prints one JSON line: {\"dir\":..., \"generation\":N, \"files\":N} (\"changes\":N for --evolve).\n"
    "Sizes: a whole number of bytes with an optional unit as in the configuration (B, KiB, MiB, GiB,\n"
    "TiB; kB, MB, GB, TB), or K, M, G for KiB, MiB, GiB; at most 1 PiB.  --seed, --files and\n"
    "--generation take whole numbers; --evolve changes a tree made before.  See bench/README.md.\n";

int cmd_bench_gen(int argc, char **argv)
{
    uint64_t size = 0, seed = 1, nfiles = 0;
    int size_given = 0, files_given = 0;
    unsigned gen = 0;
    const char *root = NULL, *profile = "default";
    for (int i = 1; i < argc; i++) {
        int ok = 1;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(USAGE, stdout);
            return 0;
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            size = bench_parse_size(argv[++i], &ok);
            size_given = 1;
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (!parse_count("--seed", argv[++i], UINT64_MAX, &seed))
                return 2;
        } else if (strcmp(argv[i], "--profile") == 0 && i + 1 < argc) {
            profile = argv[++i];
        } else if (strcmp(argv[i], "--files") == 0 && i + 1 < argc) {
            if (!parse_count("--files", argv[++i], 100000000, &nfiles))
                return 2;
            files_given = 1;
        } else if (strcmp(argv[i], "--evolve") == 0) {
            gen = 1;
        } else if (strcmp(argv[i], "--generation") == 0 && i + 1 < argc) {
            uint64_t g = 0;
            if (!parse_count("--generation", argv[++i], 1000000, &g))
                return 2;
            gen = (unsigned)g;
        } else if (argv[i][0] != '-' && root == NULL) {
            root = argv[i];
        } else {
            ok = 0;
        }
        if (!ok) {
            fprintf(stderr, "ingestctl bench gen: bad argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (strcmp(profile, "sensors") == 0)
        profile = "default";
    if (strcmp(profile, "default") != 0 && strcmp(profile, "empty") != 0 && strcmp(profile, "gateway") != 0 &&
        strcmp(profile, "small") != 0) {
        fprintf(stderr, "ingestctl bench gen: unknown profile '%s' (default, gateway, small, empty; --help)\n", profile);
        return 2;
    }
    if (root == NULL) {
        fputs(USAGE, stderr);
        return 2;
    }
    if (size_given && size > (1ull << 50)) {
        fprintf(stderr, "ingestctl bench gen: --size %llu: at most 1 PiB\n", (unsigned long long)size);
        return 2;
    }
    if (gen > 0) {
        /* a later generation changes a tree made before: one that is not there is not made up */
        DIR *d = opendir(root);
        struct dirent *e = NULL;
        while (d != NULL && (e = readdir(d)) != NULL && (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0))
            ;
        if (d != NULL)
            closedir(d);
        if (e == NULL) {
            fprintf(stderr, "ingestctl bench gen: %s: no tree to evolve (%s); make it first: ingestctl bench gen "
                            "--profile %s %s\n",
                    root, d == NULL ? strerror(errno) : "empty", profile, root);
            return 1;
        }
    }
    if (strcmp(profile, "empty") == 0) {
        if (!files_given)
            nfiles = 1000000;
        if (generate_empty(root, nfiles) != 0)
            return 1;
        printf("{\"dir\":\"%s\",\"profile\":\"empty\",\"files\":%llu}\n", root, (unsigned long long)nfiles);
        return 0;
    }
    unsigned files = 0;
    int rc;
    if (strcmp(profile, "default") == 0) {
        if (!size_given)
            size = 64ull << 20;
        rc = gen ? evolve(root, size, seed, gen, &files) : generate(root, size, seed, &files);
        if (rc != 0)
            return 1;
        printf("{\"dir\":\"%s\",\"generation\":%u,\"%s\":%u}\n", root, gen, gen ? "changes" : "files", files);
        return 0;
    }
    if (strcmp(profile, "gateway") == 0) {
        if (!size_given)
            size = 1ull << 30;
        rc = bench_gen_gateway(root, size, seed, gen, &files);
    } else {
        if (!files_given)
            nfiles = size_given ? size / 900 : 40000;
        if (nfiles == 0)
            nfiles = 1;
        rc = bench_gen_small(root, nfiles, seed, gen, &files);
    }
    if (rc != 0)
        return 1;
    printf("{\"dir\":\"%s\",\"profile\":\"%s\",\"generation\":%u,\"%s\":%u}\n", root, profile, gen,
           gen ? "changes" : "files", files);
    return 0;
}
