/*
 * ingestctl bench chunk [--size BYTES] [--level N] [--runs N]
 *                       [--min N --avg N --max N] [FILE]
 *
 * One JSON object: throughput (1 MB = 10^6 bytes per second) of each stage
 * of the edge data path measured on the same in-memory data in one process,
 * each the median of --runs runs (runs interleave the stages so that
 * machine noise hits them alike):
 *   chunk            FastCDC boundaries alone
 *   hash             the chunk id (HMAC-SHA256) of each chunk alone (same chunks)
 *   chunk_hash_1t    chunk then hash each chunk, one thread
 *   chunk_hash_2t    the two-thread pipeline (ingest_chunkhash_buffer)
 *   zstd             ingest_codec_encode of each chunk alone at --level
 *   chunk_hash_zstd  the pipeline, compressing each chunk in its callback
 * plus the chunk count, mean chunk size, compression ratio (raw/encoded),
 * the serial limit 1/(1/chunk + 1/hash) and the ratios chunk_hash_1t /
 * serial limit and chunk_hash_2t / hash.
 *
 * Without FILE the data is a deterministic generated mix, documented in
 * docs/chunking.md: segments of 256 KiB..2 MiB, about 50% telemetry CSV
 * text, 30% int16 smooth signal frames, 20% random bytes.
 */
#include "ingestctl.h"

#include <ingest.h>
#include <ingest/chunkhash.h>
#include <ingest/config.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_RUNS 15

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the generated mix --------------------------------------------------- */

static void gen_csv(uint8_t *p, size_t n, uint64_t *rs, uint64_t *t_ms)
{
    size_t w = 0;
    char line[160];
    while (w < n) {
        const uint64_t r = splitmix64(rs);
        *t_ms += 100 + r % 20;
        const uint64_t s = *t_ms / 1000;
        const int len = snprintf(line, sizeof(line),
                                 "2024-%02u-%02uT%02u:%02u:%02u.%03uZ,dev-%04u,temp=%.2f,hum=%.1f,press=%.2f,"
                                 "vib=%u,status=%s\n",
                                 (unsigned)(1 + s / 2592000 % 12), (unsigned)(1 + s / 86400 % 28),
                                 (unsigned)(s / 3600 % 24), (unsigned)(s / 60 % 60), (unsigned)(s % 60),
                                 (unsigned)(*t_ms % 1000), (unsigned)(r >> 8 & 63),
                                 20.0 + (double)(s % 600) / 60.0 + (double)(r >> 20 & 15) / 100.0,
                                 40.0 + (double)(r >> 24 & 127) / 10.0, 1013.0 + (double)(r >> 32 & 255) / 100.0,
                                 (unsigned)(r >> 40 & 1023), (r >> 50 & 31) == 0 ? "WARN" : "OK");
        const size_t k = (size_t)len < n - w ? (size_t)len : n - w;
        memcpy(p + w, line, k);
        w += k;
    }
}

static void gen_signal(uint8_t *p, size_t n, uint64_t *rs, const int16_t *sine)
{
    /* Frames: 16-byte header (magic, sequence, rate) then 4096 int16 samples. */
    size_t w = 0;
    uint32_t seq = (uint32_t)splitmix64(rs);
    while (w < n) {
        uint8_t frame[16 + 8192];
        memcpy(frame, "SIGF", 4);
        seq++;
        memcpy(frame + 4, &seq, 4);
        memset(frame + 8, 0, 8);
        const uint64_t r = splitmix64(rs);
        uint32_t phase = (uint32_t)r, step = 3 + (uint32_t)(r >> 32) % 40;
        uint64_t noise = r;
        for (int i = 0; i < 4096; i++) {
            if ((i & 15) == 0)
                noise = splitmix64(rs);
            const int16_t v = (int16_t)(sine[(phase >> 4) & 4095] + (int)(noise & 15) - 8);
            noise >>= 4;
            phase += step;
            memcpy(frame + 16 + 2 * i, &v, 2);
        }
        const size_t k = sizeof(frame) < n - w ? sizeof(frame) : n - w;
        memcpy(p + w, frame, k);
        w += k;
    }
}

static void gen_random(uint8_t *p, size_t n, uint64_t *rs)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint64_t v = splitmix64(rs);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)splitmix64(rs);
}

static void generate(uint8_t *p, size_t n)
{
    static int16_t sine[4096];
    for (int i = 0; i < 4096; i++)
        sine[i] = (int16_t)lrint(12000.0 * sin(2.0 * 3.14159265358979323846 * i / 4096.0));
    uint64_t rs = UINT64_C(0x62656e63686d6978); /* "benchmix" */
    uint64_t t_ms = 1700000000000ull;
    for (size_t w = 0; w < n;) {
        const uint64_t r = splitmix64(&rs);
        size_t seg = (256u << 10) + (size_t)(r % (1792u << 10));
        if (seg > n - w)
            seg = n - w;
        const unsigned kind = (unsigned)(r >> 40) % 10; /* 0-4 csv, 5-7 signal, 8-9 random */
        if (kind < 5)
            gen_csv(p + w, seg, &rs, &t_ms);
        else if (kind < 8)
            gen_signal(p + w, seg, &rs, sine);
        else
            gen_random(p + w, seg, &rs);
        w += seg;
    }
}

/* ---- measurements ------------------------------------------------------ */

typedef struct bench {
    const uint8_t *data;
    size_t len;
    ingest_chunk_params p;
    uint32_t *lens; /* chunk lengths from the first chunking run */
    size_t nchunks, cap;
    ingest_codec *codec;
    uint8_t *dst;
    size_t dst_cap;
    uint64_t encoded;
    uint8_t sink[INGEST_ID_BYTES]; /* keeps the hashing from being optimized away */
} bench;

static int chunk_alone(bench *b, ingest_chunker *c, int record)
{
    size_t pos = 0, start = 0, n = 0;
    while (pos < b->len) {
        size_t used;
        const int cut = ingest_chunker_scan(c, b->data + pos, b->len - pos, &used);
        pos += used;
        if (!cut)
            break;
        if (record) {
            if (n == b->cap) {
                const size_t cap = b->cap ? 2 * b->cap : 4096;
                uint32_t *l = realloc(b->lens, cap * sizeof(*l));
                if (l == NULL)
                    return -1;
                b->lens = l;
                b->cap = cap;
            }
            b->lens[n] = (uint32_t)(pos - start);
        }
        n++;
        start = pos;
    }
    const uint64_t last = ingest_chunker_finish(c);
    if (record && last) {
        if (n == b->cap) {
            uint32_t *l = realloc(b->lens, (b->cap + 1) * sizeof(*l));
            if (l == NULL)
                return -1;
            b->lens = l;
            b->cap++;
        }
        b->lens[n] = (uint32_t)last;
    }
    n += last != 0;
    if (record)
        b->nchunks = n;
    return n == b->nchunks ? 0 : -1;
}

static void hash_alone(bench *b)
{
    size_t off = 0;
    for (size_t i = 0; i < b->nchunks; i++) {
        uint8_t id[INGEST_ID_BYTES];
        ingest_chunk_id(ingest_default_dedup_key(), b->data + off, b->lens[i], id);
        b->sink[i % INGEST_ID_BYTES] ^= id[0];
        off += b->lens[i];
    }
}

static void chunk_hash_1t(bench *b, ingest_chunker *c)
{
    size_t pos = 0, start = 0;
    uint8_t id[INGEST_ID_BYTES];
    while (pos < b->len) {
        size_t used;
        const int cut = ingest_chunker_scan(c, b->data + pos, b->len - pos, &used);
        pos += used;
        if (!cut)
            break;
        ingest_chunk_id(ingest_default_dedup_key(), b->data + start, pos - start, id);
        b->sink[0] ^= id[0];
        start = pos;
    }
    if (ingest_chunker_finish(c) != 0) {
        ingest_chunk_id(ingest_default_dedup_key(), b->data + start, b->len - start, id);
        b->sink[0] ^= id[0];
    }
}

static int encode(bench *b, const uint8_t *src, size_t n)
{
    size_t out = 0;
    const int rc = ingest_codec_encode(b->codec, src, n, b->dst, b->dst_cap, &out);
    b->encoded += out;
    return rc;
}

static int zstd_alone(bench *b)
{
    size_t off = 0;
    b->encoded = 0;
    for (size_t i = 0; i < b->nchunks; i++) {
        if (encode(b, b->data + off, b->lens[i]) != 0)
            return -1;
        off += b->lens[i];
    }
    return 0;
}

static int count_cb(void *ud, const ingest_chunk_info *ci)
{
    bench *b = ud;
    b->sink[1] ^= ci->id[0];
    b->encoded++;
    return 0;
}

static int compress_cb(void *ud, const ingest_chunk_info *ci)
{
    bench *b = ud;
    b->sink[2] ^= ci->id[0];
    return encode(b, ci->data, ci->len);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int load_file(const char *path, uint8_t **out, size_t *len)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "ingestctl bench chunk: %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    uint8_t *p = malloc(st.st_size ? (size_t)st.st_size : 1);
    size_t n = 0;
    while (p != NULL && n < (size_t)st.st_size) {
        const ssize_t r = read(fd, p + n, (size_t)st.st_size - n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    if (p == NULL || n != (size_t)st.st_size) {
        fprintf(stderr, "ingestctl bench chunk: %s: %s\n", path, p ? "short read" : "out of memory");
        free(p);
        return -1;
    }
    *out = p;
    *len = n;
    return 0;
}

static const char usage_text[] =
    "usage: ingestctl bench chunk [--size BYTES] [--level N] [--runs N] [--min N --avg N --max N] [FILE]\n";

int cmd_bench_chunk(int argc, char **argv)
{
    uint64_t size = 256ull << 20;
    long level = 1, runs = 3;
    const char *file = NULL;
    bench b;
    memset(&b, 0, sizeof(b));
    ingest_chunk_params_default(&b.p);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (file != NULL) {
                fputs(usage_text, stderr);
                return 2;
            }
            file = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ingestctl bench chunk: missing value for %s\n%s", a, usage_text);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        uint64_t sz = 0;
        if (strcmp(a, "--size") == 0 || strcmp(a, "--min") == 0 || strcmp(a, "--avg") == 0 ||
            strcmp(a, "--max") == 0) {
            if (ingest_parse_size(NULL, v, &sz) != 0 || sz == 0 || (strcmp(a, "--size") != 0 && sz > UINT32_MAX)) {
                fprintf(stderr, "ingestctl bench chunk: %s: bad size '%s'\n", a, v);
                return 2;
            }
            if (strcmp(a, "--size") == 0)
                size = sz;
            else
                *(strcmp(a, "--min") == 0 ? &b.p.min : strcmp(a, "--avg") == 0 ? &b.p.avg : &b.p.max) = (uint32_t)sz;
        } else if (strcmp(a, "--level") == 0) {
            level = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || level < -131072 || level > 22) {
                fprintf(stderr, "ingestctl bench chunk: bad --level '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--runs") == 0) {
            runs = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || runs < 1 || runs > MAX_RUNS) {
                fprintf(stderr, "ingestctl bench chunk: --runs must be 1..%d\n", MAX_RUNS);
                return 2;
            }
        } else {
            fprintf(stderr, "ingestctl bench chunk: unknown option %s\n%s", a, usage_text);
            return 2;
        }
    }
    if (size > SIZE_MAX / 2) {
        fprintf(stderr, "ingestctl bench chunk: --size too large\n");
        return 2;
    }

    int status = 1;
    uint8_t *data = NULL;
    ingest_chunker *c = NULL;
    ingest_chunkhash *ch2 = NULL, *chz = NULL;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        goto out;
    if (ingest_chunk_params_check(ctx, &b.p) != 0) {
        fprintf(stderr, "ingestctl bench chunk: %s\n", ingest_ctx_errmsg(ctx));
        status = 2;
        goto out;
    }
    if (file != NULL) {
        if (load_file(file, &data, &b.len) != 0)
            goto out;
    } else {
        data = malloc((size_t)size);
        if (data == NULL) {
            fprintf(stderr, "ingestctl bench chunk: cannot allocate %llu bytes\n", (unsigned long long)size);
            goto out;
        }
        b.len = (size_t)size;
        generate(data, b.len);
    }
    b.data = data;
    const ingest_chunkhash_opts o = { .params = &b.p };
    if (ingest_chunker_create(ctx, &b.p, &c) != 0 || ingest_chunkhash_create(ctx, &o, count_cb, &b, &ch2) != 0 ||
        ingest_chunkhash_create(ctx, &o, compress_cb, &b, &chz) != 0 ||
        ingest_codec_create(ctx, (int)level, &b.codec) != 0) {
        fprintf(stderr, "ingestctl bench chunk: %s\n", ingest_ctx_errmsg(ctx));
        goto out;
    }
    b.dst_cap = ingest_codec_bound(b.p.max);
    b.dst = malloc(b.dst_cap);
    if (b.dst == NULL || chunk_alone(&b, c, 1) != 0) {
        fprintf(stderr, "ingestctl bench chunk: out of memory\n");
        goto out;
    }

    enum { F_CHUNK, F_HASH, F_CH1, F_CH2, F_ZSTD, F_CHZ, F_N };
    double t[F_N][MAX_RUNS];
    uint64_t encoded = 0;
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        if (chunk_alone(&b, c, 0) != 0) {
            fprintf(stderr, "ingestctl bench chunk: chunk count changed between runs\n");
            goto out;
        }
        t[F_CHUNK][r] = now() - t0;
        t0 = now();
        hash_alone(&b);
        t[F_HASH][r] = now() - t0;
        t0 = now();
        chunk_hash_1t(&b, c);
        t[F_CH1][r] = now() - t0;
        b.encoded = 0;
        t0 = now();
        if (ingest_chunkhash_buffer(ch2, b.data, b.len) != 0 || b.encoded != b.nchunks) {
            fprintf(stderr, "ingestctl bench chunk: pipeline: %s\n", ingest_ctx_errmsg(ctx));
            goto out;
        }
        t[F_CH2][r] = now() - t0;
        t0 = now();
        if (zstd_alone(&b) != 0) {
            fprintf(stderr, "ingestctl bench chunk: encode: %s\n", ingest_ctx_errmsg(ctx));
            goto out;
        }
        t[F_ZSTD][r] = now() - t0;
        encoded = b.encoded;
        b.encoded = 0;
        t0 = now();
        if (ingest_chunkhash_buffer(chz, b.data, b.len) != 0) {
            fprintf(stderr, "ingestctl bench chunk: pipeline+encode: %s\n", ingest_ctx_errmsg(ctx));
            goto out;
        }
        t[F_CHZ][r] = now() - t0;
    }
    double mbps[F_N];
    for (int f = 0; f < F_N; f++)
        mbps[f] = (double)b.len / 1e6 / median(t[f], (int)runs);
    const double serial = 1.0 / (1.0 / mbps[F_CHUNK] + 1.0 / mbps[F_HASH]);
    printf("{\"bytes\":%zu,\"source\":\"%s\",\"min\":%u,\"avg\":%u,\"max\":%u,\"level\":%ld,\"runs\":%ld,"
           "\"chunks\":%zu,\"mean_chunk\":%.0f,"
           "\"chunk_mbps\":%.1f,\"hash_mbps\":%.1f,\"chunk_hash_1t_mbps\":%.1f,\"chunk_hash_2t_mbps\":%.1f,"
           "\"zstd_mbps\":%.1f,\"chunk_hash_zstd_mbps\":%.1f,\"compression_ratio\":%.3f,"
           "\"serial_limit_mbps\":%.1f,\"chunk_hash_1t_vs_serial_limit\":%.3f,\"chunk_hash_2t_vs_hash\":%.3f,"
           "\"check\":%u}\n",
           b.len, file ? "file" : "generated", b.p.min, b.p.avg, b.p.max, level, runs, b.nchunks,
           b.nchunks ? (double)b.len / (double)b.nchunks : 0.0, mbps[F_CHUNK], mbps[F_HASH], mbps[F_CH1],
           mbps[F_CH2], mbps[F_ZSTD], mbps[F_CHZ], encoded ? (double)b.len / (double)encoded : 0.0, serial,
           mbps[F_CH1] / serial, mbps[F_CH2] / mbps[F_HASH], (unsigned)(b.sink[0] ^ b.sink[1] ^ b.sink[2]) & 1u);
    status = 0;
out:
    ingest_chunkhash_destroy(ch2);
    ingest_chunkhash_destroy(chz);
    ingest_chunker_destroy(c);
    ingest_codec_destroy(b.codec);
    ingest_ctx_destroy(ctx);
    free(b.dst);
    free(b.lens);
    free(data);
    return status;
}
