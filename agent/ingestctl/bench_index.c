/*
 * ingestctl bench index [--entries N] [--dir DIR]: N random 32-byte chunk
 * ids with locations inserted through the index (transactions of the
 * store's default 1000 writes, each commit synced), then random lookups
 * (hits and misses).  Prints one JSON object.
 */
#include "bench_common.h"
#include "ingestctl.h"

#include <errno.h>
#include <ingest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOOKUPS_MAX 1000000ull
#define SAMPLE_EVERY 10000ull

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The id of entry i of stream seed: 32 pseudo-random bytes. */
static void make_id(uint64_t seed, uint64_t i, uint8_t id[INGEST_ID_BYTES])
{
    for (int w = 0; w < 4; w++) {
        const uint64_t v = mix64(seed ^ mix64(i * 4 + (uint64_t)w));
        memcpy(id + 8 * w, &v, 8);
    }
}

static void sample(long *peak)
{
    const long v = bench_proc_kib(getpid(), "RssAnon");
    if (v > *peak)
        *peak = v;
}

int cmd_bench_index(int argc, char **argv)
{
    uint64_t n = 1000000;
    const char *dir = NULL;
    char tmpdir[64] = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--entries") == 0 && i + 1 < argc) {
            char *end = NULL;
            errno = 0;
            const unsigned long long v = strtoull(argv[++i], &end, 10);
            if (errno != 0 || end == argv[i] || *end != '\0' || v == 0 || v > 10000000000ull) {
                fprintf(stderr, "ingestctl bench index: bad --entries '%s'\n", argv[i]);
                return 2;
            }
            n = v;
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else {
            fprintf(stderr, "usage: ingestctl bench index [--entries N] [--dir DIR]\n");
            return 2;
        }
    }
    if (dir == NULL) {
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/ingest-bench-index.XXXXXX");
        if (mkdtemp(tmpdir) == NULL) {
            fprintf(stderr, "ingestctl bench index: mkdtemp: %s\n", strerror(errno));
            return 1;
        }
        dir = tmpdir;
    }

    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_loc loc;
    long peak_anon = 0;
    int status = 1, rc = 0;
    const uint64_t seed = 0x5eed1234abcdull, miss_seed = 0xdeadbeef77ull;
    if (ctx == NULL)
        goto out;
    if ((rc = ingest_store_open(ctx, dir, NULL, &st)) < 0 || (rc = ingest_index_open(st, NULL, &idx)) < 0)
        goto fail;
    sample(&peak_anon);

    const double t0 = bench_now();
    for (uint64_t i = 0; i < n; i++) {
        make_id(seed, i, id);
        const ingest_chunk_loc l = { 1 + i / 64, (i % 64) * 65536, 65536 };
        if ((rc = ingest_index_add_chunk(idx, id, &l)) < 0)
            goto fail;
        if (i % SAMPLE_EVERY == 0)
            sample(&peak_anon);
    }
    if ((rc = ingest_store_commit(st)) < 0)
        goto fail;
    const double t_insert = bench_now() - t0;
    sample(&peak_anon);

    const uint64_t lookups = n < LOOKUPS_MAX ? n : LOOKUPS_MAX;
    uint64_t state = 42, hits = 0, misses = 0;
    double t1 = bench_now();
    for (uint64_t i = 0; i < lookups; i++) {
        state = mix64(state);
        const uint64_t j = state % n;
        make_id(seed, j, id);
        rc = ingest_index_find(idx, id, &loc);
        if (rc < 0 || loc.file_no != 1 + j / 64) {
            fprintf(stderr, "ingestctl bench index: entry %llu: %s\n", (unsigned long long)j,
                    rc < 0 ? ingest_strerror(rc) : "wrong location");
            goto out;
        }
        hits++;
        if (i % SAMPLE_EVERY == 0)
            sample(&peak_anon);
    }
    const double t_hits = bench_now() - t1;
    t1 = bench_now();
    for (uint64_t i = 0; i < lookups; i++) {
        make_id(miss_seed, i, id);
        rc = ingest_index_find(idx, id, &loc);
        if (rc != INGEST_ENOTFOUND) {
            fprintf(stderr, "ingestctl bench index: a miss was found\n");
            goto out;
        }
        misses++;
    }
    const double t_miss = bench_now() - t1;
    sample(&peak_anon);

    char path[4200];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    const unsigned long long data_bytes = stat(path, &sb) == 0 ? (unsigned long long)sb.st_blocks * 512ull : 0;
    const unsigned long long file_bytes = stat(path, &sb) == 0 ? (unsigned long long)sb.st_size : 0;
    printf("{\"entries\": %llu, \"txn_writes\": 1000, \"insert_seconds\": %.3f, \"inserts_per_s\": %.0f, "
           "\"lookup_hits\": %llu, \"lookup_hits_per_s\": %.0f, \"lookup_misses\": %llu, \"lookup_misses_per_s\": %.0f, "
           "\"data_mdb_bytes\": %llu, \"data_mdb_allocated_bytes\": %llu, \"bytes_per_entry\": %.1f, "
           "\"peak_rss_anon_kib\": %ld, \"peak_rss_kib\": %ld}\n",
           (unsigned long long)n, t_insert, (double)n / t_insert, (unsigned long long)hits,
           (double)hits / t_hits, (unsigned long long)misses, (double)misses / t_miss, file_bytes, data_bytes,
           (double)file_bytes / (double)n, peak_anon, bench_proc_kib(getpid(), "VmHWM"));
    status = 0;
    goto out;
fail:
    fprintf(stderr, "ingestctl bench index: %s: %s\n", ingest_strerror(rc), ingest_ctx_errmsg(ctx));
out:
    ingest_index_close(idx);
    ingest_store_close(st);
    if (tmpdir[0] != '\0') {
        (void)ingest_store_wipe(ctx, tmpdir);
        rmdir(tmpdir);
    }
    ingest_ctx_destroy(ctx);
    return status;
}
