/*
 * `ingestctl bench pipeline [--evolve] DIR`: the real pipeline on loopback.
 * Makes keys and configs in a temporary directory, starts ingest-receiver
 * (from the directory of this ingestctl) on 127.0.0.1, ships DIR with
 * ingest-agent --once, and with --evolve changes DIR in place (`bench gen
 * --evolve`) and ships it again.  Prints one JSON object per phase: source
 * bytes and files, MB/s and files/s, wire bytes, dedup and compression
 * ratios, CPU seconds and peak RSS of each process.
 */
#include "ingestctl.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <ingest.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t tree_bytes, tree_files;

static int add_file(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)p;
    (void)f;
    if (type == FTW_F && S_ISREG(st->st_mode)) {
        tree_bytes += (uint64_t)st->st_size;
        tree_files++;
    }
    return 0;
}

static int rm_entry(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)type;
    (void)f;
    remove(p);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* utime+stime of pid in seconds, from /proc. */
static double proc_cpu(pid_t pid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (f == NULL || fgets(buf, sizeof(buf), f) == NULL) {
        if (f)
            fclose(f);
        return 0;
    }
    fclose(f);
    const char *c = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (c == NULL || sscanf(c + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static long proc_kib(pid_t pid, const char *field)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long v = -1;
    const size_t n = strlen(field);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    const int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static uint64_t field(const char *line, const char *name)
{
    char key[64];
    snprintf(key, sizeof(key), " %s=", name);
    const char *p = strstr(line, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* Ship once; print the phase's JSON.  0 or 1. */
static int ship(const char *bindir, const char *work, const char *phase, const char *dir, pid_t recv)
{
    tree_bytes = tree_files = 0;
    nftw(dir, add_file, 32, FTW_PHYS);
    char agent[4200], cfg[4200], line[2048] = "";
    snprintf(agent, sizeof(agent), "%s/ingest-agent", bindir);
    snprintf(cfg, sizeof(cfg), "%s/agent.yaml", work);
    int pfd[2];
    if (pipe(pfd) != 0)
        return 1;
    const double rcpu0 = proc_cpu(recv), t0 = now_s();
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        execl(agent, agent, "--config", cfg, "--once", "--all", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    FILE *out = fdopen(pfd[0], "r");
    char buf[2048];
    while (out && fgets(buf, sizeof(buf), out))
        if (strncmp(buf, "shipped:", 8) == 0)
            snprintf(line, sizeof(line), "%s", buf);
    if (out)
        fclose(out);
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    wait4(pid, &st, 0, &ru);
    const double secs = now_s() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || line[0] == '\0') {
        fprintf(stderr, "ingestctl bench pipeline: the agent failed in phase %s\n", phase);
        return 1;
    }
    const uint64_t bytes = field(line, "bytes"), chunks = field(line, "chunks"), fresh = field(line, "chunks_new");
    const uint64_t cbytes = field(line, "chunk_bytes"), wire = field(line, "wire_bytes");
    const uint64_t raw = field(line, "chunk_raw_bytes");
    printf("{\"phase\":\"%s\",\"source_bytes\":%llu,\"source_files\":%llu,\"shipped_bytes\":%llu,"
           "\"shipped_files\":%llu,\"seconds\":%.3f,\"MBps\":%.1f,\"files_per_s\":%.1f,\"wire_bytes\":%llu,"
           "\"chunks\":%llu,\"chunks_new\":%llu,\"dedup_ratio\":%.3f,\"compression_ratio\":%.3f,"
           "\"agent_cpu_s\":%.3f,\"agent_peak_rss_kib\":%ld,\"receiver_cpu_s\":%.3f,\"receiver_peak_rss_kib\":%ld}\n",
           phase, (unsigned long long)tree_bytes, (unsigned long long)tree_files, (unsigned long long)bytes,
           (unsigned long long)field(line, "files"), secs, secs > 0 ? (double)bytes / 1e6 / secs : 0.0,
           secs > 0 ? (double)field(line, "files") / secs : 0.0, (unsigned long long)wire,
           (unsigned long long)chunks, (unsigned long long)fresh, fresh ? (double)chunks / (double)fresh : 0.0,
           cbytes && raw ? (double)raw / (double)cbytes : 0.0,
           (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               (double)ru.ru_stime.tv_usec / 1e6,
           ru.ru_maxrss, proc_cpu(recv) - rcpu0, proc_kib(recv, "VmHWM"));
    fflush(stdout);
    return bytes == tree_bytes ? 0 : 1;
}

static int make_keys(ingest_ctx *ctx, const char *work)
{
    char p[4200], pub[INGEST_PUBKEY_B64_BYTES], text[512];
    ingest_secret_key r, d;
    int rc = ingest_secret_key_generate(&r);
    rc = rc ? rc : ingest_secret_key_generate(&d);
    snprintf(p, sizeof(p), "%s/receiver.key", work);
    rc = rc ? rc : ingest_secret_key_save(ctx, p, &r);
    snprintf(p, sizeof(p), "%s/receiver.pub", work);
    rc = rc ? rc : ingest_public_key_save(ctx, p, r.pk);
    snprintf(p, sizeof(p), "%s/bench.key", work);
    rc = rc ? rc : ingest_secret_key_save(ctx, p, &d);
    snprintf(p, sizeof(p), "%s/fleet.dedup", work);
    rc = rc ? rc : ingest_dedup_key_generate_file(ctx, p);
    ingest_public_key_format(d.pk, pub);
    snprintf(text, sizeof(text), "bench %s\n", pub);
    snprintf(p, sizeof(p), "%s/authorized", work);
    rc = rc ? rc : write_text(p, text);
    ingest_secret_key_wipe(&r);
    ingest_secret_key_wipe(&d);
    return rc;
}

int cmd_bench_pipeline(int argc, char **argv)
{
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
            fprintf(stderr, "usage: ingestctl bench pipeline [--transport tcp] [--evolve] DIR\n");
            return 2;
        }
    }
    if (dir == NULL) {
        fprintf(stderr, "usage: ingestctl bench pipeline [--transport tcp] [--evolve] DIR\n");
        return 2;
    }
    char self[4096], bindir[4096], work[] = "/tmp/ingest-pipeline.XXXXXX";
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0 || mkdtemp(work) == NULL)
        return 1;
    self[n] = '\0';
    snprintf(bindir, sizeof(bindir), "%s", self);
    *strrchr(bindir, '/') = '\0';
    char absdir[4096];
    if (realpath(dir, absdir) == NULL) {
        fprintf(stderr, "ingestctl bench pipeline: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    int rc = 1;
    pid_t recv = -1;
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    char p[4300], text[8192], addr[256] = "";
    if (ctx == NULL || make_keys(ctx, work) != 0) {
        fprintf(stderr, "ingestctl bench pipeline: keys: %s\n", ctx ? ingest_ctx_errmsg(ctx) : "");
        goto out;
    }
    snprintf(p, sizeof(p), "%s/bronze", work);
    mkdir(p, 0755);
    snprintf(text, sizeof(text),
             "listen: 127.0.0.1:0\nkey: receiver.key\nauthorized_devices: authorized\ndedup_key: fleet.dedup\n"
             "state_dir: rstate\nbronze: bronze\nlog:\n  level: warn\n");
    snprintf(p, sizeof(p), "%s/receiver.yaml", work);
    if (write_text(p, text) != 0)
        goto out;
    char rbin[4200], ready[4300], rcfg[4300];
    snprintf(rbin, sizeof(rbin), "%s/ingest-receiver", bindir);
    snprintf(ready, sizeof(ready), "%s/addr", work);
    snprintf(rcfg, sizeof(rcfg), "%s/receiver.yaml", work);
    recv = fork();
    if (recv == 0) {
        execl(rbin, rbin, "--config", rcfg, "--ready-file", ready, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 400; i++) {
        FILE *f = fopen(ready, "r");
        if (f != NULL) {
            const int ok = fgets(addr, sizeof(addr), f) != NULL;
            fclose(f);
            if (ok)
                break;
        }
        usleep(25000);
    }
    addr[strcspn(addr, "\n")] = '\0';
    if (addr[0] == '\0') {
        fprintf(stderr, "ingestctl bench pipeline: the receiver did not start\n");
        goto out;
    }
    snprintf(text, sizeof(text),
             "device:\n  id: bench\n  key: bench.key\ncore:\n  address: %s\n  receiver_key: receiver.pub\n"
             "dedup_key: fleet.dedup\nsources:\n  - path: %s\nstate_dir: astate\nlog:\n  level: warn\n",
             addr, absdir);
    snprintf(p, sizeof(p), "%s/agent.yaml", work);
    if (write_text(p, text) != 0)
        goto out;
    rc = ship(bindir, work, "initial", absdir, recv);
    if (rc == 0 && evolve) {
        char *gargv[] = { "gen", "--evolve", absdir, NULL };
        const int saved = dup(1);
        const int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1); /* bench gen prints its own line */
        rc = cmd_bench_gen(3, gargv) == 0 ? 0 : 1;
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
        close(devnull);
        if (rc == 0)
            rc = ship(bindir, work, "incremental", absdir, recv);
    }
out:
    if (recv > 0) {
        kill(recv, SIGTERM);
        waitpid(recv, NULL, 0);
    }
    nftw(work, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
    ingest_ctx_destroy(ctx);
    return rc;
}
