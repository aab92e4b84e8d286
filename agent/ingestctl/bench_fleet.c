/*
 * `ingestctl bench fleet --devices N [--size SIZE] [--shared PCT]
 * [--stagger DURATION] [--random] [--keep] [DIR]`: N devices shipping at once
 * to one receiver on loopback.
 *
 * Each device's tree is a shared part (`bench gen` seed 0, PCT% of SIZE, the
 * same bytes on every device) plus a part of its own (seed = the device's
 * number, the rest of SIZE); with --random both parts are files of random
 * bytes (256 KiB each, the last one shorter), incompressible.  One ingest-receiver on 127.0.0.1 authorizes
 * the N devices (a key each); the N `ingest-agent --once --all` start
 * together (or one every --stagger), each with its own state_dir.  The
 * receiver looks chunks up in its index, which a batch joins when it
 * commits: devices shipping the same chunks at the same moment all send
 * them, so cross-device dedup shows up only between batches that do not
 * overlap in time (--stagger).  When all have exited, one JSON
 * object: totals over the fleet (bytes, wall seconds, MB/s, wire bytes,
 * chunks, the share of chunks the core already had, the raw bytes of the
 * chunks sent against the unique content: the shared part once plus each
 * device's own part), the receiver's CPU and
 * memory, and one entry per device from its summary line and its rusage.
 *
 * The work directory (DIR/ingest-fleet.XXXXXX, DIR default $TMPDIR or /tmp)
 * holds the trees, keys, configs, states, bronze and logs; it is removed
 * at the end unless --keep.  Every child is stopped on exit, on SIGINT,
 * SIGTERM and SIGHUP, and (PR_SET_PDEATHSIG) if ingestctl itself dies.
 */
#include "ingestctl.h"
#include "bench_common.h"
#include "bench_gen.h"

#include <errno.h>
#include <ingest.h>
#include <ingest/config.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WHO "ingestctl bench fleet"
#define MAX_DEVICES (BENCH_MAX_CHILDREN - 8)
#define SHARED_SEED 0 /* no device has number 0 */

typedef struct {
    char id[16];
    char dir[4224]; /* WORK/ID: tree/, state/, agent.out, agent.log */
    pid_t pid;
    int done;
    double t_start, t_end;
    struct rusage ru;
    uint64_t tree_bytes, tree_files;
    char line[4096]; /* its `shipped:` summary */
} device;

static void usage(FILE *f)
{
    fprintf(f, "usage: ingestctl bench fleet --devices N [--size SIZE] [--shared PCT] [--stagger DURATION]\n"
               "                           [--random] [--keep] [DIR]\n"
               "  N devices (1-%d) ship SIZE each (default 64MiB), PCT%% of it the same on every\n"
               "  device (default 50), to one receiver: all at once, or one every DURATION (500ms,\n"
               "  2s).  --random: trees of random bytes (incompressible) instead of `bench gen`'s.\n"
               "  The work directory is made in DIR (default $TMPDIR or /tmp) and removed\n"
               "  at the end unless --keep.\n",
               MAX_DEVICES);
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, WHO ": mkdir %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* ROOT/fNNNNN.bin: size random bytes from seed, in files of 256 KiB (the last shorter).  0 or -1. */
static int random_tree(const char *root, uint64_t size, uint64_t seed)
{
    uint64_t buf[1024];
    char name[32];
    for (unsigned i = 0; size > 0; i++) {
        const uint64_t fsize = size < (256u << 10) ? size : (256u << 10);
        bgen_rng r = { bgen_seed(seed, 0x52, i, 0) }; /* a stream per file: no two overlap */
        snprintf(name, sizeof(name), "f%05u.bin", i);
        if (bgen_open(root, name, 0) != 0)
            return -1;
        for (uint64_t w = 0; w < fsize; w += sizeof(buf)) {
            for (size_t k = 0; k < sizeof(buf) / sizeof(buf[0]); k++)
                buf[k] = bgen_next(&r);
            bgen_put(buf, fsize - w < sizeof(buf) ? (size_t)(fsize - w) : sizeof(buf));
        }
        if (bgen_close() != 0)
            return -1;
        size -= fsize;
    }
    return 0;
}

/* Device d's tree: WORK/ID/tree/shared and WORK/ID/tree/own.  0 or -1. */
static int make_tree(device *d, unsigned number, uint64_t size, unsigned shared_pct, int random)
{
    char p[4300];
    const uint64_t shared = size / 100 * shared_pct + size % 100 * shared_pct / 100;
    unsigned files;
    snprintf(p, sizeof(p), "%s/tree", d->dir);
    if (make_dir(d->dir) != 0 || make_dir(p) != 0)
        return -1;
    snprintf(p, sizeof(p), "%s/tree/shared", d->dir);
    if (shared > 0 && (random ? random_tree(p, shared, SHARED_SEED) : bench_gen_tree(p, shared, SHARED_SEED, &files)) != 0)
        return -1;
    snprintf(p, sizeof(p), "%s/tree/own", d->dir);
    if (size - shared > 0 && (random ? random_tree(p, size - shared, number) : bench_gen_tree(p, size - shared, number, &files)) != 0)
        return -1;
    snprintf(p, sizeof(p), "%s/tree", d->dir);
    bench_tree_size(p, &d->tree_bytes, &d->tree_files);
    return 0;
}

static int write_receiver_config(const char *work, unsigned n)
{
    char p[4300], text[1024];
    snprintf(p, sizeof(p), "%s/bronze", work);
    if (make_dir(p) != 0)
        return -1;
    snprintf(text, sizeof(text),
             "listen: 127.0.0.1:0\nkey: receiver.key\nauthorized_devices: authorized\ndedup_key: fleet.dedup\n"
             "state_dir: rstate\nbronze: bronze\nlayout: \"{device}/{path}\"\nmax_connections: %u\n"
             /* every device connects from 127.0.0.1: one address's share must hold them all */
             "handshake:\n  max_pending: %u\n  max_pending_per_address: %u\n"
             "log:\n  level: warn\n",
             n > 64 ? n : 64, n > 256 ? (n < 4096 ? n : 4096) : 256, n > 256 ? (n < 4096 ? n : 4096) : 256);
    snprintf(p, sizeof(p), "%s/receiver.yaml", work);
    if (bench_write_text(p, text) != 0) {
        fprintf(stderr, WHO ": %s: %s\n", p, strerror(errno));
        return -1;
    }
    return 0;
}

static int write_agent_configs(const char *work, const device *devs, unsigned n, const char *addr)
{
    char p[4300], text[9000];
    for (unsigned i = 0; i < n; i++) {
        snprintf(text, sizeof(text),
                 "device:\n  id: %s\n  key: %s.key\ncore:\n  address: %s\n  receiver_key: receiver.pub\n"
                 "dedup_key: fleet.dedup\nsources:\n  - path: %s/tree\nstate_dir: %s/state\nlog:\n  level: warn\n",
                 devs[i].id, devs[i].id, addr, devs[i].dir, devs[i].id);
        snprintf(p, sizeof(p), "%s/%s.yaml", work, devs[i].id);
        if (bench_write_text(p, text) != 0) {
            fprintf(stderr, WHO ": %s: %s\n", p, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static device *find_device(device *devs, unsigned n, pid_t pid)
{
    for (unsigned i = 0; i < n; i++)
        if (devs[i].pid == pid && !devs[i].done)
            return &devs[i];
    return NULL;
}

static int start_agent(const char *bindir, const char *work, device *d)
{
    char agent[4200], cfg[4300], out[4300], log[4300];
    snprintf(agent, sizeof(agent), "%s/ingest-agent", bindir);
    snprintf(cfg, sizeof(cfg), "%s/%s.yaml", work, d->id);
    snprintf(out, sizeof(out), "%s/agent.out", d->dir);
    snprintf(log, sizeof(log), "%s/agent.log", d->dir);
    char *argv[] = { agent, "--config", cfg, "--once", "--all", NULL };
    d->t_start = bench_now();
    d->pid = bench_spawn(argv, out, log);
    if (d->pid < 0) {
        fprintf(stderr, WHO ": %s: %s\n", agent, strerror(errno));
        return -1;
    }
    return 0;
}

/* Record a reaped agent.  0, or -1 after saying why it failed. */
static int agent_done(device *d, int st, const struct rusage *ru, double t)
{
    char out[4300], log[4300];
    d->done = 1;
    d->ru = *ru;
    d->t_end = t;
    snprintf(out, sizeof(out), "%s/agent.out", d->dir);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && bench_summary_read(out, d->line, sizeof(d->line)) == 0)
        return 0;
    if (WIFEXITED(st))
        fprintf(stderr, WHO ": device %s failed: ingest-agent exited with status %d", d->id, WEXITSTATUS(st));
    else
        fprintf(stderr, WHO ": device %s failed: ingest-agent killed by signal %d", d->id,
                WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    fprintf(stderr, "; the other agents are stopped.  Its log %s/agent.log ends:\n", d->dir);
    snprintf(log, sizeof(log), "%s/agent.log", d->dir);
    bench_print_tail(log, 10);
    return -1;
}

/*
 * Start the n agents, agent i at i * stagger_ms after the first (all at
 * once for 0), and wait for all of them, sampling the receiver's RssAnon
 * meanwhile (peak into *rss_anon).  0, or -1 after saying which process
 * failed (the caller stops the others).
 */
static int run_agents(const char *bindir, const char *work, device *devs, unsigned n, uint64_t stagger_ms,
                      pid_t *recv, long *rss_anon)
{
    const struct timespec tick = { 0, 5 * 1000 * 1000 };
    const double t0 = bench_now();
    unsigned started = 0, left = n;
    while (left > 0) {
        if (bench_interrupted())
            return -1;
        while (started < n && bench_now() >= t0 + (double)started * (double)stagger_ms / 1000.0)
            if (start_agent(bindir, work, &devs[started++]) != 0)
                return -1;
        int st = 0;
        struct rusage ru;
        memset(&ru, 0, sizeof(ru));
        const pid_t pid = wait4(-1, &st, WNOHANG, &ru);
        if (pid < 0 && errno != EINTR) {
            fprintf(stderr, WHO ": wait: %s\n", strerror(errno));
            return -1;
        }
        if (pid <= 0) {
            const long kib = bench_proc_kib(*recv, "RssAnon");
            if (kib > *rss_anon)
                *rss_anon = kib;
            nanosleep(&tick, NULL);
            continue;
        }
        const double t = bench_now();
        bench_reaped(pid);
        if (pid == *recv) {
            char log[4300];
            *recv = -1;
            fprintf(stderr, WHO ": the receiver exited while the agents ran; its log %s/receiver.log ends:\n", work);
            snprintf(log, sizeof(log), "%s/receiver.log", work);
            bench_print_tail(log, 10);
            return -1;
        }
        device *d = find_device(devs, n, pid);
        if (d == NULL)
            continue;
        left--;
        if (agent_done(d, st, &ru, t) != 0)
            return -1;
    }
    return 0;
}

/* A seconds figure of the summary as JSON: null when the agent did not print it. */
static void json_seconds(const char *key, double v)
{
    if (v < 0)
        printf(",\"%s\":null", key);
    else
        printf(",\"%s\":%.3f", key, v);
}

static void print_json(const device *devs, unsigned n, uint64_t size, unsigned shared_pct, uint64_t stagger_ms,
                       double recv_cpu, long recv_hwm, long recv_anon)
{
    uint64_t src = 0, files = 0, wire = 0, chunks = 0, fresh = 0, dedup = 0, saved = 0, sent_raw = 0;
    double t0 = devs[0].t_start, t1 = devs[0].t_end;
    for (unsigned i = 0; i < n; i++) {
        const char *l = devs[i].line;
        src += devs[i].tree_bytes;
        files += devs[i].tree_files;
        wire += bench_summary_u64(l, "wire_bytes");
        chunks += bench_summary_u64(l, "chunks");
        fresh += bench_summary_u64(l, "chunks_new");
        dedup += bench_summary_u64(l, "chunks_dedup");
        /* Raw bytes of the chunks not sent: every shipped byte is in one chunk. */
        const uint64_t bytes = bench_summary_u64(l, "bytes"), raw = bench_summary_u64(l, "chunk_raw_bytes");
        saved += bytes > raw ? bytes - raw : 0;
        sent_raw += raw;
        if (devs[i].t_start < t0)
            t0 = devs[i].t_start;
        if (devs[i].t_end > t1)
            t1 = devs[i].t_end;
    }
    const double secs = t1 - t0;
    /* The unique content: the shared part once, each device's own part (its tree less the shared part) once. */
    const uint64_t shared = size / 100 * shared_pct + size % 100 * shared_pct / 100;
    const uint64_t unique = n > 0 && src >= (uint64_t)(n - 1) * shared ? src - (uint64_t)(n - 1) * shared : src;
    printf("{\"devices\":%u,\"device_size\":%llu,\"shared_pct\":%u,\"stagger_s\":%.3f,\"source_bytes\":%llu,"
           "\"source_files\":%llu,"
           "\"seconds\":%.3f,\"MBps\":%.1f,\"wire_bytes\":%llu,\"chunks\":%llu,\"chunks_new\":%llu,"
           "\"chunks_dedup\":%llu,\"cross_device_dedup\":%.4f,\"bytes_saved_by_dedup\":%llu,"
           "\"unique_bytes\":%llu,\"chunk_raw_bytes_sent\":%llu,\"sent_over_unique\":%.4f,"
           "\"receiver_peak_rss_kib\":%ld,",
           n, (unsigned long long)size, shared_pct, (double)stagger_ms / 1000.0, (unsigned long long)src, (unsigned long long)files, secs,
           secs > 0 ? (double)src / 1e6 / secs : 0.0, (unsigned long long)wire, (unsigned long long)chunks,
           (unsigned long long)fresh, (unsigned long long)dedup, chunks ? (double)dedup / (double)chunks : 0.0,
           (unsigned long long)saved, (unsigned long long)unique, (unsigned long long)sent_raw,
           unique ? (double)sent_raw / (double)unique : 0.0, recv_hwm);
    if (recv_anon < 0)
        printf("\"receiver_rss_anon_kib\":null,");
    else
        printf("\"receiver_rss_anon_kib\":%ld,", recv_anon);
    printf("\"receiver_cpu_s\":%.3f,\"per_device\":[", recv_cpu);
    for (unsigned i = 0; i < n; i++) {
        const device *d = &devs[i];
        const double s = d->t_end - d->t_start;
        printf("%s{\"device\":\"%s\",\"source_bytes\":%llu,\"seconds\":%.3f,\"MBps\":%.1f,\"wire_bytes\":%llu,"
               "\"chunks\":%llu,\"chunks_new\":%llu,\"chunks_dedup\":%llu",
               i ? "," : "", d->id, (unsigned long long)d->tree_bytes, s,
               s > 0 ? (double)d->tree_bytes / 1e6 / s : 0.0,
               (unsigned long long)bench_summary_u64(d->line, "wire_bytes"),
               (unsigned long long)bench_summary_u64(d->line, "chunks"),
               (unsigned long long)bench_summary_u64(d->line, "chunks_new"),
               (unsigned long long)bench_summary_u64(d->line, "chunks_dedup"));
        json_seconds("latency_p50_s", bench_summary_double(d->line, "latency_p50_seconds"));
        json_seconds("latency_p99_s", bench_summary_double(d->line, "latency_p99_seconds"));
        printf(",\"cpu_s\":%.3f,\"peak_rss_kib\":%ld}", bench_rusage_cpu(&d->ru), d->ru.ru_maxrss);
    }
    printf("]}\n");
    fflush(stdout);
}

int cmd_bench_fleet(int argc, char **argv)
{
    unsigned n = 0, shared_pct = 50;
    uint64_t size = 64ull << 20;
    uint64_t stagger_ms = 0;
    int keep = 0, random = 0;
    const char *parent = NULL;
    for (int i = 1; i < argc; i++) {
        int ok = 1;
        char *end = NULL;
        if (strcmp(argv[i], "--devices") == 0 && i + 1 < argc) {
            const unsigned long v = strtoul(argv[++i], &end, 10);
            ok = *end == '\0' && v >= 1 && v <= MAX_DEVICES;
            n = (unsigned)v;
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            size = bench_parse_size(argv[++i], &ok);
            ok = ok && size > 0;
        } else if (strcmp(argv[i], "--shared") == 0 && i + 1 < argc) {
            const unsigned long v = strtoul(argv[++i], &end, 10);
            ok = *end == '\0' && end != argv[i] && v <= 100;
            shared_pct = (unsigned)v;
        } else if (strcmp(argv[i], "--stagger") == 0 && i + 1 < argc) {
            ok = ingest_parse_duration(NULL, argv[++i], &stagger_ms) == 0 && stagger_ms <= 3600 * 1000;
        } else if (strcmp(argv[i], "--random") == 0) {
            random = 1;
        } else if (strcmp(argv[i], "--keep") == 0) {
            keep = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] != '-' && parent == NULL) {
            parent = argv[i];
        } else {
            ok = 0;
        }
        if (!ok) {
            fprintf(stderr, WHO ": bad argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (n == 0) {
        usage(stderr);
        return 2;
    }
    if (parent == NULL)
        parent = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    char bindir[4096], base[4096], work[4200];
    if (realpath(parent, base) == NULL) {
        fprintf(stderr, WHO ": %s: %s\n", parent, strerror(errno));
        return 2;
    }
    snprintf(work, sizeof(work), "%s/ingest-fleet.XXXXXX", base);
    if (bench_bindir(bindir, sizeof(bindir)) != 0 || mkdtemp(work) == NULL) {
        fprintf(stderr, WHO ": cannot make the work directory in %s: %s\n", base, strerror(errno));
        return 1;
    }
    bench_signals_install();
    int rc = 1;
    pid_t recv = -1;
    char addr[256], log[4300];
    const char **ids = calloc(n, sizeof(*ids));
    device *devs = calloc(n, sizeof(*devs));
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ids == NULL || devs == NULL || ctx == NULL) {
        fprintf(stderr, WHO ": out of memory\n");
        goto out;
    }
    for (unsigned i = 0; i < n; i++) {
        snprintf(devs[i].id, sizeof(devs[i].id), "dev-%03u", i + 1);
        snprintf(devs[i].dir, sizeof(devs[i].dir), "%s/%s", work, devs[i].id);
        devs[i].pid = -1;
        ids[i] = devs[i].id;
        if (make_tree(&devs[i], i + 1, size, shared_pct, random) != 0 || bench_interrupted())
            goto out;
    }
    if (bench_make_keys(ctx, WHO, work, ids, n) != 0 || write_receiver_config(work, n) != 0)
        goto out;
    snprintf(log, sizeof(log), "%s/receiver.log", work);
    if (bench_start_receiver(WHO, bindir, work, log, &recv, addr, sizeof(addr)) != 0 ||
        write_agent_configs(work, devs, n, addr) != 0)
        goto out;
    const double rcpu0 = bench_proc_cpu(recv);
    long anon = -1;
    if (run_agents(bindir, work, devs, n, stagger_ms, &recv, &anon) != 0)
        goto out;
    const double rcpu = bench_proc_cpu(recv) - rcpu0;
    const long hwm = bench_proc_kib(recv, "VmHWM"), last = bench_proc_kib(recv, "RssAnon");
    rc = 0;
    for (unsigned i = 0; i < n; i++) {
        const uint64_t shipped = bench_summary_u64(devs[i].line, "bytes");
        if (shipped != devs[i].tree_bytes) {
            fprintf(stderr, WHO ": device %s shipped %llu bytes of its %llu-byte tree\n", devs[i].id,
                    (unsigned long long)shipped, (unsigned long long)devs[i].tree_bytes);
            rc = 1;
        }
    }
    if (rc == 0)
        print_json(devs, n, size, shared_pct, stagger_ms, rcpu, hwm, last > anon ? last : anon);
out:
    bench_stop_all();
    if (bench_interrupted()) {
        fprintf(stderr, WHO ": interrupted by signal %d\n", bench_interrupted());
        rc = 1;
    }
    if (keep)
        fprintf(stderr, WHO ": work directory kept: %s\n", work);
    else
        bench_remove_tree(work);
    ingest_ctx_destroy(ctx);
    free(devs);
    free(ids);
    return rc;
}
