/* Helpers of the benchmarks that run the real programs; see bench_common.h. */
#include "bench_common.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <ingest/hash.h>
#include <ingest/session.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double bench_proc_cpu(pid_t pid)
{
    char p[64], buf[1024];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return 0;
    const int ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    /* The command name may hold spaces and parentheses: fields restart after the last ')'. */
    const char *c = ok ? strrchr(buf, ')') : NULL;
    unsigned long ut = 0, st = 0;
    if (c == NULL || sscanf(c + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

long bench_proc_kib(pid_t pid, const char *field)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return -1;
    long v = -1;
    const size_t n = strlen(field);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            v = strtol(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

double bench_rusage_cpu(const struct rusage *ru)
{
    return (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec / 1e6 + (double)ru->ru_stime.tv_sec +
           (double)ru->ru_stime.tv_usec / 1e6;
}

int bench_write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    const int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* nftw has no user pointer: the walk's totals live here for its duration. */
static uint64_t walk_bytes, walk_files;

static int add_file(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)p;
    (void)f;
    if (type == FTW_F && S_ISREG(st->st_mode)) {
        walk_bytes += (uint64_t)st->st_size;
        walk_files++;
    }
    return 0;
}

void bench_tree_size(const char *dir, uint64_t *bytes, uint64_t *files)
{
    walk_bytes = walk_files = 0;
    nftw(dir, add_file, 32, FTW_PHYS);
    *bytes = walk_bytes;
    *files = walk_files;
}

static int rm_entry(const char *p, const struct stat *st, int type, struct FTW *f)
{
    (void)st;
    (void)type;
    (void)f;
    remove(p);
    return 0;
}

void bench_remove_tree(const char *dir)
{
    nftw(dir, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

int bench_bindir(char *dir, size_t cap)
{
    const ssize_t n = readlink("/proc/self/exe", dir, cap - 1);
    if (n <= 0)
        return -1;
    dir[n] = '\0';
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        return -1;
    *slash = '\0';
    return 0;
}

int bench_make_keys(ingest_ctx *ctx, const char *who, const char *work, const char *const *devices, size_t n)
{
    char p[4200], pub[INGEST_PUBKEY_B64_BYTES];
    ingest_secret_key k;
    int rc = ingest_secret_key_generate(&k);
    snprintf(p, sizeof(p), "%s/receiver.key", work);
    rc = rc ? rc : ingest_secret_key_save(ctx, p, &k);
    snprintf(p, sizeof(p), "%s/receiver.pub", work);
    rc = rc ? rc : ingest_public_key_save(ctx, p, k.pk);
    ingest_secret_key_wipe(&k);
    snprintf(p, sizeof(p), "%s/fleet.dedup", work);
    rc = rc ? rc : ingest_dedup_key_generate_file(ctx, p);
    if (rc != 0) {
        fprintf(stderr, "%s: keys: %s\n", who, ingest_ctx_errmsg(ctx));
        return -1;
    }
    snprintf(p, sizeof(p), "%s/authorized", work);
    FILE *auth = fopen(p, "w");
    if (auth == NULL) {
        fprintf(stderr, "%s: %s: %s\n", who, p, strerror(errno));
        return -1;
    }
    int werr = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = ingest_secret_key_generate(&k);
        snprintf(p, sizeof(p), "%s/%s.key", work, devices[i]);
        rc = rc ? rc : ingest_secret_key_save(ctx, p, &k);
        ingest_public_key_format(k.pk, pub);
        ingest_secret_key_wipe(&k);
        if (rc == 0 && fprintf(auth, "%s %s\n", devices[i], pub) < 0)
            werr = errno;
    }
    if (fclose(auth) != 0 && werr == 0)
        werr = errno;
    if (rc != 0)
        fprintf(stderr, "%s: device keys: %s\n", who, ingest_ctx_errmsg(ctx));
    else if (werr != 0)
        fprintf(stderr, "%s: %s/authorized: %s\n", who, work, strerror(werr));
    return rc == 0 && werr == 0 ? 0 : -1;
}

int bench_summary_read(const char *path, char *line, size_t cap)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int found = -1;
    while (fgets(buf, sizeof(buf), f))
        if (strncmp(buf, "shipped:", 8) == 0) {
            buf[strcspn(buf, "\n")] = '\0';
            snprintf(line, cap, "%s", buf);
            found = 0;
        }
    fclose(f);
    return found;
}

/* Where `name=` starts its value in line, or NULL. */
static const char *summary_value(const char *line, const char *name)
{
    char key[96];
    snprintf(key, sizeof(key), " %s=", name);
    const char *p = strstr(line, key);
    return p ? p + strlen(key) : NULL;
}

uint64_t bench_summary_u64(const char *line, const char *name)
{
    const char *v = summary_value(line, name);
    return v ? strtoull(v, NULL, 10) : 0;
}

double bench_summary_double(const char *line, const char *name)
{
    const char *v = summary_value(line, name);
    return v ? strtod(v, NULL) : -1.0;
}

/*
 * The children to stop.  Written only with signals blocked, so the handler
 * never sees a half-updated slot; 0 marks a free slot.
 */
static volatile pid_t children[BENCH_MAX_CHILDREN];
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler needs lock-free atomics");
static atomic_int caught; /* set by the handler, which may run on any thread */

static void on_signal(int sig)
{
    const int saved = errno;
    caught = sig;
    for (size_t i = 0; i < BENCH_MAX_CHILDREN; i++)
        if (children[i] > 0)
            kill(children[i], SIGTERM);
    errno = saved;
}

void bench_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int bench_interrupted(void) { return caught; }

static void block_signals(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, old);
}

/* Store pid in the first slot holding match: track(pid, 0) adds, track(0, pid) forgets. */
static int track(pid_t pid, pid_t match)
{
    for (size_t i = 0; i < BENCH_MAX_CHILDREN; i++)
        if (children[i] == match) {
            children[i] = pid;
            return 0;
        }
    return -1;
}

static int redirect(const char *path, int fd, int flags)
{
    const int f = open(path, flags, 0644);
    if (f < 0 || dup2(f, fd) < 0)
        return -1;
    if (f != fd)
        close(f);
    return 0;
}

pid_t bench_spawn(char *const *argv, const char *out, const char *err)
{
    sigset_t old;
    block_signals(&old);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
        /* Die with ingestctl even when it is killed with SIGKILL. */
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != parent)
            _exit(127);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (redirect("/dev/null", 0, O_RDONLY) != 0 ||
            (out != NULL && redirect(out, 1, O_WRONLY | O_CREAT | O_TRUNC) != 0) ||
            (err != NULL && redirect(err, 2, O_WRONLY | O_CREAT | O_TRUNC) != 0))
            _exit(127);
        execv(argv[0], argv);
        fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    const int saved = errno;
    if (pid > 0 && track(pid, 0) != 0) {
        /* No slot: never leave an untracked child behind. */
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        sigprocmask(SIG_SETMASK, &old, NULL);
        errno = EAGAIN;
        return -1;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    errno = saved;
    return pid;
}

void bench_reaped(pid_t pid)
{
    sigset_t old;
    block_signals(&old);
    if (pid > 0)
        track(0, pid);
    sigprocmask(SIG_SETMASK, &old, NULL);
}

void bench_stop(pid_t pid)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    bench_reaped(pid);
}

void bench_stop_all(void)
{
    for (size_t i = 0; i < BENCH_MAX_CHILDREN; i++)
        if (children[i] > 0)
            kill(children[i], SIGTERM);
    for (size_t i = 0; i < BENCH_MAX_CHILDREN; i++)
        if (children[i] > 0)
            bench_stop(children[i]);
}

int bench_start_receiver(const char *who, const char *bindir, const char *work, const char *log, pid_t *pid,
                         char *addr, size_t cap)
{
    char rbin[4200], cfg[4200], ready[4200];
    snprintf(rbin, sizeof(rbin), "%s/ingest-receiver", bindir);
    snprintf(cfg, sizeof(cfg), "%s/receiver.yaml", work);
    snprintf(ready, sizeof(ready), "%s/receiver.addr", work);
    char *argv[] = { rbin, "--config", cfg, "--ready-file", ready, NULL };
    addr[0] = '\0';
    *pid = bench_spawn(argv, NULL, log);
    if (*pid < 0) {
        fprintf(stderr, "%s: %s: %s\n", who, rbin, strerror(errno));
        return -1;
    }
    for (int i = 0; i < 400 && addr[0] == '\0' && !caught; i++) {
        FILE *f = fopen(ready, "r");
        if (f != NULL) {
            if (fgets(addr, (int)cap, f) == NULL)
                addr[0] = '\0';
            fclose(f);
            addr[strcspn(addr, "\n")] = '\0';
            if (addr[0] != '\0')
                break;
        }
        int st;
        if (waitpid(*pid, &st, WNOHANG) == *pid) {
            bench_reaped(*pid);
            *pid = -1;
            break;
        }
        usleep(25000);
    }
    if (addr[0] == '\0') {
        fprintf(stderr, "%s: the receiver did not start%s%s\n", who, log ? "; its log " : "", log ? log : "");
        if (log != NULL)
            bench_print_tail(log, 10);
        bench_stop(*pid);
        *pid = -1;
        return -1;
    }
    return 0;
}

void bench_print_tail(const char *path, int n)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char buf[16384];
    if (fseek(f, 0, SEEK_END) == 0) {
        const long size = ftell(f);
        if (size > (long)sizeof(buf) - 1)
            fseek(f, size - (long)sizeof(buf) + 1, SEEK_SET);
        else
            fseek(f, 0, SEEK_SET);
    }
    const size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    /* Walk back over n line ends (a final newline does not start a line). */
    size_t start = len;
    if (start > 0 && buf[start - 1] == '\n')
        start--;
    for (int lines = 0; start > 0; start--)
        if (buf[start - 1] == '\n' && ++lines == n)
            break;
    for (char *line = buf + start, *end; *line != '\0'; line = end + 1) {
        end = strchr(line, '\n');
        if (end == NULL) {
            fprintf(stderr, "    %s\n", line);
            break;
        }
        fprintf(stderr, "    %.*s\n", (int)(end - line), line);
    }
}
