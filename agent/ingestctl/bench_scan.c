/*
 * `ingestctl bench scan DIR`: how fast the edge discovers a tree.  Runs the
 * sender's walk over DIR (as the agent's rescans do: every regular file is
 * stat'ed and offered to the want_file hook), then the same walk building
 * real batches (time to the first batch), and in the same run
 * `find DIR -type f | wc -l`, and prints one JSON object with the times,
 * their ratio and the peak private memory (RssAnon) of this process.
 */
#include "bench_common.h"
#include "ingestctl.h"

#include <ingest.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct scan_state {
    uint64_t seen;
    long peak_anon;
} scan_state;

static int count_only(void *ud, const char *path, const ingest_sender_stat *st)
{
    (void)path;
    (void)st;
    scan_state *s = ud;
    if (++s->seen % 65536 == 0) {
        const long a = bench_proc_kib(getpid(), "RssAnon");
        if (a > s->peak_anon)
            s->peak_anon = a;
    }
    return 0; /* discovery only: nothing is chunked */
}

static int take_all(void *ud, const char *path, const ingest_sender_stat *st)
{
    (void)path;
    (void)st;
    scan_state *s = ud;
    s->seen++;
    return 1;
}

int cmd_bench_scan(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: ingestctl bench scan DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    struct stat sb;
    const int st_rc = stat(dir, &sb);
    if (st_rc != 0 || !S_ISDIR(sb.st_mode)) {
        /* the walk would skip it with a warning and report a scan of 0 files */
        fprintf(stderr, "ingestctl bench scan: %s: %s\n", dir, st_rc != 0 ? strerror(errno) : "not a directory");
        return 1;
    }
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        return 1;
    ingest_sender_source src = { "bench", dir, INGEST_SENDER_SYMLINKS_SKIP };
    ingest_sender_opts o;
    memset(&o, 0, sizeof(o));
    o.device = "bench";
    o.dedup_key = ingest_default_dedup_key();
    o.sources = &src;
    o.nsources = 1;
    o.max_files = 1000;
    o.batch_prefix = "";
    scan_state st = { 0, bench_proc_kib(getpid(), "RssAnon") };
    o.want_file = count_only;
    o.userdata = &st;
    ingest_sender *s = NULL;
    ingest_sender_batch *b = NULL;
    int rc = 1;
    /* 1. discovery alone */
    double t0 = bench_now();
    if (ingest_sender_create(ctx, &o, &s) != 0 || ingest_sender_scan(s) != 0 || ingest_sender_next_batch(s, &b) < 0) {
        fprintf(stderr, "ingestctl bench scan: %s\n", ingest_ctx_errmsg(ctx));
        goto out;
    }
    const double scan_s = bench_now() - t0;
    const uint64_t files = st.seen;
    ingest_sender_destroy(s);
    s = NULL;
    /* 2. time to the first batch of 1,000 files (opened, chunked, hashed) */
    scan_state st2 = { 0, 0 };
    o.want_file = take_all;
    o.userdata = &st2;
    t0 = bench_now();
    if (ingest_sender_create(ctx, &o, &s) != 0 || ingest_sender_scan(s) != 0 || ingest_sender_next_batch(s, &b) < 0) {
        fprintf(stderr, "ingestctl bench scan: %s\n", ingest_ctx_errmsg(ctx));
        goto out;
    }
    const double first_s = bench_now() - t0;
    ingest_sender_batch_destroy(b);
    b = NULL;
    /* 3. find in the same run */
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "find '%s' -type f | wc -l", dir);
    t0 = bench_now();
    FILE *p = popen(cmd, "r");
    unsigned long long found = 0;
    if (p == NULL || fscanf(p, "%llu", &found) != 1) {
        fprintf(stderr, "ingestctl bench scan: find failed\n");
        if (p)
            pclose(p);
        goto out;
    }
    pclose(p);
    const double find_s = bench_now() - t0;
    const long anon = bench_proc_kib(getpid(), "RssAnon");
    printf("{\"dir\":\"%s\",\"files\":%llu,\"find_files\":%llu,\"scan_seconds\":%.3f,\"first_batch_seconds\":%.3f,"
           "\"find_seconds\":%.3f,\"scan_vs_find\":%.2f,\"peak_rss_anon_kib\":%ld,\"peak_rss_kib\":%ld}\n",
           dir, (unsigned long long)files, found, scan_s, first_s, find_s, find_s > 0 ? scan_s / find_s : 0.0,
           st.peak_anon > anon ? st.peak_anon : anon, bench_proc_kib(getpid(), "VmHWM"));
    rc = files == found ? 0 : 1;
    if (rc)
        fprintf(stderr, "ingestctl bench scan: the walk saw %llu files, find %llu\n", (unsigned long long)files, found);
out:
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    ingest_ctx_destroy(ctx);
    return rc;
}
