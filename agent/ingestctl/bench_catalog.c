/*
 * ingestctl bench catalog [--files N] [--runs N] [--per-batch N] [--keep] DIR:
 * the catalog against a tree walk.  Makes DIR/bronze as the receiver would
 * leave it, without shipping: N small landed files under the default layout
 * ({device}/{yyyy}/{mm}/{dd}/{path}: 10 devices, 10 days, 100 directories of
 * N/10,000 files) and one manifest per batch of --per-batch files, with real
 * chunk ids and file hashes (the documented default dedup key).  Then, after
 * the catalog's first catch-up (timed), RUNS interleaved rounds of
 *   find BRONZE -type f -printf '%p %s\n'                  (the tree walk)
 *   ingestctl catalog --bronze BRONZE --format paths          (same lines)
 *   ingestctl catalog --bronze BRONZE --format jsonl          (every field)
 *   ingestctl catalog --bronze BRONZE --format paths --prefix dev-03/2026/11/05/   (1%)
 * each a child process writing to /dev/null, wall time; prints one JSON
 * object with the medians, the ratios and the catalog's size per file.
 */
#include "bench_common.h"
#include "ingestctl.h"

#include <errno.h>
#include <fcntl.h>
#include <ingest.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS_MAX 25
#define DEVICES 10
#define DAYS 10
#define DIRS 100

static double run_child(char *const *argv, uint64_t *lines)
{
    int pfd[2] = { -1, -1 };
    if (lines != NULL && pipe(pfd) != 0)
        return -1;
    const double t0 = bench_now();
    const pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = lines != NULL ? pfd[1] : open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        if (lines != NULL) {
            close(pfd[0]);
            close(pfd[1]);
        } else {
            close(fd);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    if (lines != NULL) {
        close(pfd[1]);
        char buf[1 << 16];
        ssize_t n;
        *lines = 0;
        while ((n = read(pfd[0], buf, sizeof(buf))) > 0)
            for (ssize_t i = 0; i < n; i++)
                *lines += buf[i] == '\n';
        close(pfd[0]);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    const double t = bench_now() - t0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t : -1;
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

static int mkdirs(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        const int rc = mkdir(path, 0755);
        *p = '/';
        if (rc != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Write the manifest bytes of w to path (via a temporary name). */
static int flush_manifest(ingest_manifest_writer *w, const char *path)
{
    size_t n;
    const void *d = ingest_manifest_writer_data(w, &n);
    char tmp[8300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fwrite(d, 1, n, f) != n || fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

/* The tree: files[i] for i in [0, n), batches of per_batch. */
static int generate(const char *bronze, uint64_t n, uint64_t per_batch)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_manifest_writer *w = NULL;
    if (ctx == NULL)
        return -1;
    const uint8_t *key = ingest_default_dedup_key();
    const uint64_t per_dir = (n + DEVICES * DAYS * DIRS - 1) / (DEVICES * DAYS * DIRS);
    char dir[4200], file[8200], rel[256], landed[512], mpath[8200], batch[32];
    int ret = -1;
    uint64_t i = 0, b = 0;
    const int64_t base = 1795000000ll * 1000000000;
    while (i < n) {
        /* one batch: consecutive files (so one device and day, a few directories) */
        const uint64_t nb = n - i < per_batch ? n - i : per_batch;
        const unsigned dev = (unsigned)((i / per_dir / DIRS / DAYS) % DEVICES);
        snprintf(batch, sizeof(batch), "b%08llu", (unsigned long long)b++);
        snprintf(dir, sizeof(dir), "%s/_manifests/dev-%02u", bronze, dev);
        if (mkdirs(dir) != 0)
            goto out;
        if (ingest_manifest_writer_create(ctx, &w) < 0)
            goto out;
        ingest_manifest_rec rec;
        memset(&rec, 0, sizeof(rec));
        rec.type = INGEST_MREC_HEADER;
        rec.format = INGEST_MANIFEST_FORMAT;
        char devname[16];
        snprintf(devname, sizeof(devname), "dev-%02u", dev);
        rec.device = devname;
        rec.batch = batch;
        rec.nfiles = nb;
        rec.created_ns = base + (int64_t)b * 1000000000;
        uint64_t bytes = 0;
        for (uint64_t k = 0; k < nb; k++)
            bytes += 20 + (i + k) % 50;
        rec.total_bytes = bytes;
        if (ingest_manifest_writer_add(w, &rec) < 0)
            goto out;
        char last_dir[4200] = "";
        for (uint64_t k = 0; k < nb; k++, i++) {
            const uint64_t d = i / per_dir, day = d / DIRS % DAYS, sub = d % DIRS, devi = d / DIRS / DAYS % DEVICES;
            snprintf(rel, sizeof(rel), "d%02llu/f%07llu.json", (unsigned long long)sub, (unsigned long long)i);
            snprintf(landed, sizeof(landed), "dev-%02llu/2026/11/%02llu/%s", (unsigned long long)devi,
                     (unsigned long long)day + 1, rel);
            snprintf(dir, sizeof(dir), "%s/dev-%02llu/2026/11/%02llu/d%02llu", bronze, (unsigned long long)devi,
                     (unsigned long long)day + 1, (unsigned long long)sub);
            if (strcmp(dir, last_dir) != 0) {
                if (mkdirs(dir) != 0)
                    goto out;
                snprintf(last_dir, sizeof(last_dir), "%s", dir);
            }
            char content[96];
            const size_t len = 20 + (size_t)(i % 50);
            memset(content, 'x', sizeof(content));
            snprintf(content, sizeof(content), "{\"file\":%llu}", (unsigned long long)i);
            content[strlen(content)] = ' ';
            content[len - 1] = '\n';
            snprintf(file, sizeof(file), "%s/%s", bronze, landed);
            const int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0 || write(fd, content, len) != (ssize_t)len || close(fd) != 0)
                goto out;
            ingest_manifest_chunk ch;
            ingest_chunk_id(key, content, len, ch.id);
            ch.len = (uint32_t)len;
            ingest_filehash fh;
            ingest_filehash_init(&fh, key);
            ingest_filehash_update(&fh, ch.id, sizeof(ch.id));
            memset(&rec, 0, sizeof(rec));
            rec.type = INGEST_MREC_FILE;
            rec.path = rel;
            rec.landed = landed;
            rec.size = len;
            rec.mtime_ns = base;
            rec.mode = 0100644;
            rec.version = 1;
            ingest_filehash_final(&fh, rec.hash);
            rec.nchunks_total = 1;
            rec.chunks = &ch;
            rec.nchunks = 1;
            if (ingest_manifest_writer_add(w, &rec) < 0)
                goto out;
        }
        if (ingest_manifest_writer_finish(w) < 0)
            goto out;
        snprintf(mpath, sizeof(mpath), "%s/_manifests/%s/%s.jsonl", bronze, devname, batch);
        if (flush_manifest(w, mpath) != 0)
            goto out;
        ingest_manifest_writer_destroy(w);
        w = NULL;
    }
    ret = 0;
out:
    if (ret != 0)
        fprintf(stderr, "ingestctl bench catalog: generating: %s\n",
                ingest_ctx_errmsg(ctx)[0] ? ingest_ctx_errmsg(ctx) : strerror(errno));
    ingest_manifest_writer_destroy(w);
    ingest_ctx_destroy(ctx);
    return ret;
}

int cmd_bench_catalog(int argc, char **argv)
{
    uint64_t files = 1000000, per_batch = 1000;
    int runs = 5, keep = 0;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "--files") == 0 || strcmp(argv[i], "--per-batch") == 0 ||
             strcmp(argv[i], "--runs") == 0) && i + 1 < argc) {
            char *end = NULL;
            errno = 0;
            const unsigned long long v = strtoull(argv[i + 1], &end, 10);
            if (errno != 0 || *end != '\0' || v == 0 || v > 100000000ull) {
                fprintf(stderr, "ingestctl bench catalog: bad %s '%s'\n", argv[i], argv[i + 1]);
                return 2;
            }
            if (argv[i][2] == 'f')
                files = v;
            else if (argv[i][2] == 'p')
                per_batch = v;
            else
                runs = v > RUNS_MAX ? RUNS_MAX : (int)v;
            i++;
        } else if (strcmp(argv[i], "--keep") == 0) {
            keep = 1;
        } else if (argv[i][0] == '-' || dir != NULL) {
            fprintf(stderr, "usage: ingestctl bench catalog [--files N] [--runs N] [--per-batch N] [--keep] DIR\n");
            return 2;
        } else {
            dir = argv[i];
        }
    }
    if (dir == NULL || files < DEVICES * DAYS * DIRS) {
        fprintf(stderr, "usage: ingestctl bench catalog [--files N (>= 10000)] [--runs N] [--per-batch N] [--keep] DIR\n");
        return 2;
    }
    char bronze[4096], self[4096];
    snprintf(bronze, sizeof(bronze), "%s/bronze", dir);
    const ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (sl <= 0)
        return 1;
    self[sl] = '\0';
    struct stat sb;
    double t_gen = 0;
    if (stat(bronze, &sb) == 0) {
        fprintf(stderr, "ingestctl bench catalog: %s exists; reusing it (remove it for a new tree)\n", bronze);
    } else {
        const double t0 = bench_now();
        if (mkdirs(bronze) != 0 || generate(bronze, files, per_batch) != 0)
            return 1;
        t_gen = bench_now() - t0;
        sync();
        sleep(3); /* manifest directories old enough for the catalog to trust their mtime */
    }
    /* the first catch-up: the catalog made from every manifest */
    char *info[] = { self, "catalog", "--bronze", bronze, "--info", NULL };
    char p_catalog[4200];
    snprintf(p_catalog, sizeof(p_catalog), "%s/_manifests/.catalog", bronze);
    char rmcmd[4300];
    snprintf(rmcmd, sizeof(rmcmd), "%s/data.mdb", p_catalog);
    unlink(rmcmd);
    snprintf(rmcmd, sizeof(rmcmd), "%s/lock.mdb", p_catalog);
    unlink(rmcmd);
    const double t_build = run_child(info, NULL);
    if (t_build < 0) {
        fprintf(stderr, "ingestctl bench catalog: the catalog's first catch-up failed\n");
        return 1;
    }
    char *find_argv[] = { "/usr/bin/find", bronze, "-type", "f", "-printf", "%p %s\\n", NULL };
    char find_fmt[] = "%p %s\n";
    find_argv[5] = find_fmt;
    char prefix[] = "dev-03/2026/11/05/";
    char *all_paths[] = { self, "catalog", "--bronze", bronze, "--format", "paths", NULL };
    char *all_jsonl[] = { self, "catalog", "--bronze", bronze, "--format", "jsonl", NULL };
    char *pre_paths[] = { self, "catalog", "--bronze", bronze, "--format", "paths", "--prefix", prefix, NULL };
    /* what each lists, once */
    uint64_t n_find = 0, n_all = 0, n_pre = 0;
    if (run_child(find_argv, &n_find) < 0 || run_child(all_paths, &n_all) < 0 || run_child(pre_paths, &n_pre) < 0) {
        fprintf(stderr, "ingestctl bench catalog: a listing failed\n");
        return 1;
    }
    double tf[RUNS_MAX], ta[RUNS_MAX], tj[RUNS_MAX], tp[RUNS_MAX];
    for (int r = 0; r < runs; r++) {
        tf[r] = run_child(find_argv, NULL);
        ta[r] = run_child(all_paths, NULL);
        tj[r] = run_child(all_jsonl, NULL);
        tp[r] = run_child(pre_paths, NULL);
        if (tf[r] < 0 || ta[r] < 0 || tj[r] < 0 || tp[r] < 0) {
            fprintf(stderr, "ingestctl bench catalog: a timed run failed\n");
            return 1;
        }
    }
    const double mf = median(tf, runs), ma = median(ta, runs), mj = median(tj, runs), mp = median(tp, runs);
    snprintf(rmcmd, sizeof(rmcmd), "%s/data.mdb", p_catalog);
    uint64_t cat_bytes = 0, cat_size = 0;
    if (stat(rmcmd, &sb) == 0) {
        cat_bytes = (uint64_t)sb.st_blocks * 512;
        cat_size = (uint64_t)sb.st_size;
    }
    printf("{\"files\":%llu,\"per_batch\":%llu,\"runs\":%d,\"generate_s\":%.2f,\"catalog_build_s\":%.3f,"
           "\"find_lines\":%llu,\"catalog_lines\":%llu,\"prefix_lines\":%llu,"
           "\"find_s\":%.4f,\"catalog_paths_s\":%.4f,\"catalog_jsonl_s\":%.4f,\"catalog_prefix_s\":%.5f,"
           "\"speedup_paths\":%.1f,\"speedup_jsonl\":%.1f,\"speedup_prefix\":%.1f,"
           "\"catalog_bytes_on_disk\":%llu,\"catalog_file_size\":%llu,\"bytes_per_file\":%.1f}\n",
           (unsigned long long)files, (unsigned long long)per_batch, runs, t_gen, t_build,
           (unsigned long long)n_find, (unsigned long long)n_all, (unsigned long long)n_pre, mf, ma, mj, mp,
           mf / ma, mf / mj, mf / mp, (unsigned long long)cat_bytes, (unsigned long long)cat_size,
           (double)cat_bytes / (double)files);
    if (!keep && t_gen > 0)
        bench_remove_tree(bronze);
    return 0;
}
