/*
 * `ingestctl bench pipeline [--evolve] DIR`: the real pipeline on loopback.
 * Makes keys and configs in a temporary directory, starts ingest-receiver
 * (from the directory of this ingestctl) on 127.0.0.1, ships DIR with
 * ingest-agent --once, and with --evolve changes DIR in place (`bench gen
 * --evolve`) and ships it again.  Prints one JSON object per phase: source
 * bytes and files, MB/s and files/s, wire bytes, dedup and compression
 * ratios, per-file latency percentiles and where the agent's shipping thread
 * spent its time (from its summary line), CPU seconds and peak RSS of each
 * process.  Shares its process and /proc helpers with bench fleet
 * (bench_common.c).
 */
#include "ingestctl.h"
#include "bench_common.h"

#include <errno.h>
#include <fcntl.h>
#include <ingest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WHO "ingestctl bench pipeline"

/* A seconds figure of the summary as JSON: null when the agent did not print it. */
static void json_seconds(const char *key, double v)
{
    if (v < 0)
        printf(",\"%s\":null", key);
    else
        printf(",\"%s\":%.3f", key, v);
}

/* Ship once; print the phase's JSON.  0 or 1. */
static int ship(const char *bindir, const char *work, const char *phase, const char *dir, pid_t recv)
{
    uint64_t tree_bytes, tree_files;
    bench_tree_size(dir, &tree_bytes, &tree_files);
    char agent[4200], cfg[4200], out[4200], line[4096];
    snprintf(agent, sizeof(agent), "%s/ingest-agent", bindir);
    snprintf(cfg, sizeof(cfg), "%s/agent.yaml", work);
    snprintf(out, sizeof(out), "%s/agent.out", work);
    char *argv[] = { agent, "--config", cfg, "--once", "--all", NULL };
    const double rcpu0 = bench_proc_cpu(recv), t0 = bench_now();
    const pid_t pid = bench_spawn(argv, out, NULL);
    if (pid < 0) {
        fprintf(stderr, WHO ": %s: %s\n", agent, strerror(errno));
        return 1;
    }
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR)
        ;
    bench_reaped(pid);
    const double secs = bench_now() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || bench_summary_read(out, line, sizeof(line)) != 0) {
        fprintf(stderr, WHO ": the agent failed in phase %s\n", phase);
        return 1;
    }
    const uint64_t bytes = bench_summary_u64(line, "bytes"), files = bench_summary_u64(line, "files");
    const uint64_t chunks = bench_summary_u64(line, "chunks"), fresh = bench_summary_u64(line, "chunks_new");
    const uint64_t cbytes = bench_summary_u64(line, "chunk_bytes"), raw = bench_summary_u64(line, "chunk_raw_bytes");
    printf("{\"phase\":\"%s\",\"source_bytes\":%llu,\"source_files\":%llu,\"shipped_bytes\":%llu,"
           "\"shipped_files\":%llu,\"seconds\":%.3f,\"MBps\":%.1f,\"files_per_s\":%.1f,\"wire_bytes\":%llu,"
           "\"chunks\":%llu,\"chunks_new\":%llu,\"dedup_ratio\":%.3f,\"compression_ratio\":%.3f",
           phase, (unsigned long long)tree_bytes, (unsigned long long)tree_files, (unsigned long long)bytes,
           (unsigned long long)files, secs, secs > 0 ? (double)bytes / 1e6 / secs : 0.0,
           secs > 0 ? (double)files / secs : 0.0, (unsigned long long)bench_summary_u64(line, "wire_bytes"),
           (unsigned long long)chunks, (unsigned long long)fresh, fresh ? (double)chunks / (double)fresh : 0.0,
           cbytes && raw ? (double)raw / (double)cbytes : 0.0);
    json_seconds("latency_p50_s", bench_summary_double(line, "latency_p50_seconds"));
    json_seconds("latency_p99_s", bench_summary_double(line, "latency_p99_seconds"));
    json_seconds("agent_wait_build_s", bench_summary_double(line, "wait_build_seconds"));
    json_seconds("agent_wait_want_s", bench_summary_double(line, "wait_want_seconds"));
    json_seconds("agent_send_s", bench_summary_double(line, "send_seconds"));
    json_seconds("agent_wait_ack_s", bench_summary_double(line, "wait_ack_seconds"));
    printf(",\"agent_cpu_s\":%.3f,\"agent_peak_rss_kib\":%ld,\"receiver_cpu_s\":%.3f,\"receiver_peak_rss_kib\":%ld}\n",
           bench_rusage_cpu(&ru), ru.ru_maxrss, bench_proc_cpu(recv) - rcpu0, bench_proc_kib(recv, "VmHWM"));
    fflush(stdout);
    return bytes == tree_bytes ? 0 : 1;
}

int cmd_bench_pipeline(int argc, char **argv)
{
    static const char usage[] = "usage: ingestctl bench pipeline [--transport tcp] [--evolve] DIR\n";
    const char *dir = NULL;
    int evolve = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--evolve") == 0)
            evolve = 1;
        else if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc && strcmp(argv[i + 1], "tcp") == 0)
            i++;
        else if (argv[i][0] != '-' && dir == NULL)
            dir = argv[i];
        else {
            fputs(usage, stderr);
            return 2;
        }
    }
    if (dir == NULL) {
        fputs(usage, stderr);
        return 2;
    }
    char bindir[4096], absdir[4096], work[] = "/tmp/ingest-pipeline.XXXXXX";
    if (realpath(dir, absdir) == NULL) {
        fprintf(stderr, WHO ": %s: %s\n", dir, strerror(errno));
        return 2;
    }
    if (bench_bindir(bindir, sizeof(bindir)) != 0 || mkdtemp(work) == NULL) {
        fprintf(stderr, WHO ": cannot make the work directory: %s\n", strerror(errno));
        return 1;
    }
    bench_signals_install();
    int rc = 1;
    pid_t recv = -1;
    static const char *const devices[] = { "bench" };
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    char p[4300], text[8192], addr[256] = "";
    if (ctx == NULL) {
        fprintf(stderr, WHO ": out of memory\n");
        goto out;
    }
    if (bench_make_keys(ctx, WHO, work, devices, 1) != 0)
        goto out;
    snprintf(p, sizeof(p), "%s/bronze", work);
    mkdir(p, 0755);
    snprintf(text, sizeof(text),
             "listen: 127.0.0.1:0\nkey: receiver.key\nauthorized_devices: authorized\ndedup_key: fleet.dedup\n"
             "state_dir: rstate\nbronze: bronze\nlog:\n  level: warn\n");
    snprintf(p, sizeof(p), "%s/receiver.yaml", work);
    if (bench_write_text(p, text) != 0) {
        fprintf(stderr, WHO ": %s: %s\n", p, strerror(errno));
        goto out;
    }
    if (bench_start_receiver(WHO, bindir, work, NULL, &recv, addr, sizeof(addr)) != 0)
        goto out;
    snprintf(text, sizeof(text),
             "device:\n  id: bench\n  key: bench.key\ncore:\n  address: %s\n  receiver_key: receiver.pub\n"
             "dedup_key: fleet.dedup\nsources:\n  - path: %s\nstate_dir: astate\nlog:\n  level: warn\n",
             addr, absdir);
    snprintf(p, sizeof(p), "%s/agent.yaml", work);
    if (bench_write_text(p, text) != 0) {
        fprintf(stderr, WHO ": %s: %s\n", p, strerror(errno));
        goto out;
    }
    rc = ship(bindir, work, "initial", absdir, recv);
    if (rc == 0 && evolve && !bench_interrupted()) {
        char *gargv[] = { "gen", "--evolve", absdir, NULL };
        const int saved = dup(1);
        const int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1); /* bench gen prints its own line */
        rc = cmd_bench_gen(3, gargv) == 0 ? 0 : 1;
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
        close(devnull);
        if (rc == 0 && !bench_interrupted())
            rc = ship(bindir, work, "incremental", absdir, recv);
    }
out:
    bench_stop_all();
    bench_remove_tree(work);
    ingest_ctx_destroy(ctx);
    if (bench_interrupted()) {
        fprintf(stderr, WHO ": interrupted by signal %d\n", bench_interrupted());
        rc = 1;
    }
    return rc;
}
