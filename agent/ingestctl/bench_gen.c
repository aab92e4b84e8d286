/*
 * `ingestctl bench gen`: a deterministic sensor tree for demos, tests and
 * benchmarks, and with --evolve its next generation.
 *
 * Profile "sensors" (share of bytes): telemetry CSV and JSON 30%, int16
 * signal frames 30%, JPEG-like incompressible blobs 25%, a large text log
 * 15%.  Everything comes from splitmix64 seeded with --seed, so the same
 * arguments always give the same bytes.  Layout: docs/benchmarks.md.
 */
#include "ingestctl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uint64_t s;
} rng;

static uint64_t next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t below(rng *r, uint64_t n) { return n ? next(r) % n : 0; }

static int mkdirs(const char *path)
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

static int wopen(writer *w, const char *dir, const char *name, int append)
{
    char path[4096];
    if (mkdirs(dir) != 0) {
        fprintf(stderr, "ingestctl bench gen: mkdir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    w->fd = open(path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
    w->len = 0;
    w->err = 0;
    if (w->fd < 0) {
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

static void wput(writer *w, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        size_t room = sizeof(w->buf) - w->len;
        size_t k = n < room ? n : room;
        memcpy(w->buf + w->len, c, k);
        w->len += k;
        c += k;
        n -= k;
        if (w->len == sizeof(w->buf))
            wflush(w);
    }
}

static int wclose(writer *w)
{
    wflush(w);
    if (close(w->fd) != 0 && w->err == 0)
        w->err = errno;
    if (w->err) {
        fprintf(stderr, "ingestctl bench gen: write: %s\n", strerror(w->err));
        return -1;
    }
    return 0;
}

static writer W;

static int gen_csv(rng *r, const char *dir, const char *name, uint64_t bytes, uint64_t t0)
{
    if (wopen(&W, dir, name, 0) != 0)
        return -1;
    char line[160];
    wput(&W, "timestamp_ms,sensor,temperature_c,humidity_pct,pressure_hpa,status\n", 67);
    double temp = 20.0 + (double)below(r, 100) / 10.0, hum = 40.0 + (double)below(r, 200) / 10.0;
    uint64_t written = 67, t = t0;
    while (written < bytes) {
        temp += ((double)below(r, 21) - 10.0) / 100.0;
        hum += ((double)below(r, 21) - 10.0) / 50.0;
        const int n = snprintf(line, sizeof(line), "%" PRIu64 ",s%02u,%.2f,%.1f,%.2f,%s\n", t,
                               (unsigned)below(r, 16), temp, hum, 1013.25 + (double)below(r, 300) / 100.0,
                               below(r, 50) == 0 ? "WARN" : "OK");
        wput(&W, line, (size_t)n);
        written += (uint64_t)n;
        t += 100 + below(r, 5);
    }
    return wclose(&W);
}

static int gen_json(rng *r, const char *dir, const char *name, uint64_t t, unsigned records)
{
    if (wopen(&W, dir, name, 0) != 0)
        return -1;
    char buf[512];
    for (unsigned i = 0; i < records; i++, t += 1000) {
        const int n = snprintf(buf, sizeof(buf),
                               "{\"ts\":%" PRIu64 ",\"device\":\"plc-%02u\",\"line\":%u,\"counters\":{\"good\":%u,"
                               "\"scrap\":%u,\"cycle_ms\":%u},\"state\":\"%s\",\"alarms\":[]}\n",
                               t, (unsigned)below(r, 32), (unsigned)below(r, 8), (unsigned)below(r, 100000),
                               (unsigned)below(r, 300), 800 + (unsigned)below(r, 400),
                               below(r, 10) ? "running" : "idle");
        wput(&W, buf, (size_t)n);
    }
    return wclose(&W);
}

static int gen_frame(rng *r, const char *dir, const char *name, uint64_t bytes)
{
    if (wopen(&W, dir, name, 0) != 0)
        return -1;
    const double f = 0.001 + (double)below(r, 1000) / 100000.0;
    int16_t s[512];
    uint64_t i = 0;
    for (uint64_t written = 0; written < bytes; written += sizeof(s)) {
        for (size_t k = 0; k < 512; k++, i++)
            s[k] = (int16_t)(8000.0 * sin((double)i * f) + (double)below(r, 64) - 32.0);
        const size_t n = bytes - written < sizeof(s) ? (size_t)(bytes - written) : sizeof(s);
        wput(&W, s, n);
    }
    return wclose(&W);
}

static int gen_blob(rng *r, const char *dir, const char *name, uint64_t bytes)
{
    if (wopen(&W, dir, name, 0) != 0)
        return -1;
    static const uint8_t soi[] = { 0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0 };
    wput(&W, soi, sizeof(soi));
    uint64_t buf[512];
    for (uint64_t written = sizeof(soi); written < bytes; written += sizeof(buf)) {
        for (size_t k = 0; k < 512; k++)
            buf[k] = next(r);
        const size_t n = bytes - written < sizeof(buf) ? (size_t)(bytes - written) : sizeof(buf);
        wput(&W, buf, n);
    }
    return wclose(&W);
}

static const char *const LEVELS[] = { "INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR" };
static const char *const MSGS[] = { "uplink ok rtt_ms=%u", "camera %u frame dropped", "plc %u poll complete",
                                    "disk usage %u%%", "retrying connection attempt %u", "sensor %u calibrated" };

static int gen_log(rng *r, const char *dir, const char *name, uint64_t bytes, uint64_t t, int append)
{
    if (wopen(&W, dir, name, append) != 0)
        return -1;
    char line[256], msg[96];
    for (uint64_t written = 0; written < bytes;) {
        const unsigned m = (unsigned)below(r, 6);
        snprintf(msg, sizeof(msg), MSGS[m], (unsigned)below(r, 100));
        const int n = snprintf(line, sizeof(line), "%" PRIu64 ".%03u gw01 %s [%s] %s\n", t / 1000,
                               (unsigned)(t % 1000), LEVELS[below(r, 6)], m < 3 ? "net" : "io", msg);
        wput(&W, line, (size_t)n);
        written += (uint64_t)n;
        t += 7 + below(r, 200);
    }
    return wclose(&W);
}

uint64_t bench_parse_size(const char *s, int *ok)
{
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    uint64_t mul = 1;
    if (*end == '\0' || strcmp(end, "B") == 0) mul = 1;
    else if (strcmp(end, "KiB") == 0 || strcmp(end, "K") == 0) mul = 1ull << 10;
    else if (strcmp(end, "MiB") == 0 || strcmp(end, "M") == 0) mul = 1ull << 20;
    else if (strcmp(end, "GiB") == 0 || strcmp(end, "G") == 0) mul = 1ull << 30;
    else { *ok = 0; return 0; }
    *ok = errno == 0 && v >= 0 && end != s;
    return (uint64_t)(v * (double)mul);
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
            if (mkdirs(dir) != 0) {
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

int cmd_bench_gen(int argc, char **argv)
{
    uint64_t size = 64ull << 20, seed = 1, nfiles = 1000000;
    unsigned gen = 0;
    const char *root = NULL, *profile = "sensors";
    for (int i = 1; i < argc; i++) {
        int ok = 1;
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            size = bench_parse_size(argv[++i], &ok);
        } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--profile") == 0 && i + 1 < argc) {
            profile = argv[++i];
        } else if (strcmp(argv[i], "--files") == 0 && i + 1 < argc) {
            nfiles = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--evolve") == 0) {
            gen = 1;
        } else if (strcmp(argv[i], "--generation") == 0 && i + 1 < argc) {
            gen = (unsigned)strtoul(argv[++i], NULL, 10);
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
    if (root == NULL || (strcmp(profile, "sensors") != 0 && strcmp(profile, "empty") != 0)) {
        fprintf(stderr, "usage: ingestctl bench gen [--profile sensors] [--size BYTES] [--seed N] "
                        "[--evolve | --generation N] DIR\n"
                        "       ingestctl bench gen --profile empty [--files N] DIR\n");
        return 2;
    }
    if (strcmp(profile, "empty") == 0) {
        if (generate_empty(root, nfiles) != 0)
            return 1;
        printf("{\"dir\":\"%s\",\"profile\":\"empty\",\"files\":%llu}\n", root, (unsigned long long)nfiles);
        return 0;
    }
    unsigned files = 0;
    const int rc = gen ? evolve(root, size, seed, gen, &files) : generate(root, size, seed, &files);
    if (rc != 0)
        return 1;
    printf("{\"dir\":\"%s\",\"generation\":%u,\"%s\":%u}\n", root, gen, gen ? "changes" : "files", files);
    return 0;
}
