/*
 * ingestctl bench stages [--level N] [--runs N] [--batch-files N] [--land DIR] TREE
 *
 * What the data path costs per stage on a real tree, one stage at a time on
 * one thread: the CPU seconds (user + system, CLOCK_THREAD_CPUTIME_ID) each
 * byte of TREE spends in every stage it must pass between the device's
 * file and the core's landed file.  The sum is the least CPU a ship of the
 * tree can take, however its stages are spread over threads; divided over
 * the machine's cores it bounds the throughput of any pipelined design
 * that does this work.  See bench/README.md ("The ceiling").
 *
 * Stages, in order, each timed over windows of about 8 MiB of chunks:
 *   read        pread of every file from the page cache (1 MiB pieces)
 *   chunk       FastCDC boundaries (default parameters)
 *   hash        the chunk id, HMAC-SHA256 (ingest_chunk_id; the device)
 *   compress    ingest_codec_encode_adaptive at --level, the shuffle2 filter
 *               allowed, for chunks over 32 KiB; smaller ones compressed
 *               together in groups as the agent's CHUNK_GROUP frames are
 *               (consecutive in walk order, up to chunking.max bytes, ending
 *               at a large chunk and after every --batch-files files, 1000 by
 *               default like batch.max_files): what the agent does with a
 *               receiver of this version
 *   seal        AEAD of each encoded chunk (AES-256-GCM through OpenSSL's
 *               EVP, one context keyed once, when the CPU has AES-NI,
 *               else XChaCha20-Poly1305 (libsodium): what the session does)
 *   loopback    the sealed bytes through a local socket pair, written and
 *               read back by the same thread (both ends' copies)
 *   open        AEAD decryption
 *   decompress  ingest_codec_decode without the id check
 *   verify      the chunk id of each decoded chunk again (the core)
 *   land        write() of each decoded chunk to a file under --land DIR
 *               (page cache; one syncfs at the end, wall time reported apart)
 * Making the landed bytes durable costs CPU this thread does not spend: the
 * kernel's workers write the pages back (on a loop-mounted filesystem they
 * also copy them into the image's page cache).  With --land, what each run
 * up to its syncfs costs the machine beyond this process (/proc/stat, all
 * CPUs, less the busy rate of a quiet second before the run) is reported
 * apart as durable_cpu_seconds, with a second ceiling that counts it
 * (ceiling_durable_mbps_2cores).
 * Every decoded chunk is compared with the source (a check, not timed).
 *
 * One JSON object on stdout; with --runs N every stage figure is the
 * median of N runs over the whole tree (the first pass, untimed, warms the
 * page cache).
 */
#include "bench_common.h"
#include "ingestctl.h"

#include <ingest.h>
#include <ingest/codec.h>
#include <ingest/config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_RUNS 9
#define INGEST__BENCH_TRY(x) \
    do {                     \
        if ((x) != 0)        \
            return -1;       \
    } while (0)
#define WINDOW (8u << 20)
#define READ_PIECE (1u << 20)
#define MAX_FILES 10000000u
#define MAX_DEPTH 32

enum { S_READ, S_CHUNK, S_HASH, S_COMPRESS, S_SEAL, S_LOOP, S_OPEN, S_DECOMP, S_VERIFY, S_LAND, S_N };
static const char *const stage_names[S_N] = { "read", "chunk", "hash", "compress", "seal",
                                              "loopback", "open", "decompress", "verify", "land" };
/* which side does the stage: 0 device, 1 core, 2 both (the loopback copies) */
static const int stage_side[S_N] = { 0, 0, 0, 0, 0, 2, 1, 1, 1, 1 };

typedef struct paths {
    char **v;
    size_t n, cap;
} paths;

typedef struct st {
    ingest_ctx *ctx;
    ingest_chunker *chunker;
    ingest_codec *codec;
    uint8_t *piece;                 /* READ_PIECE */
    uint32_t *lens;                 /* chunk lengths of the current file */
    size_t nlens, lens_cap;
    uint8_t (*ids)[INGEST_ID_BYTES];
    size_t ids_cap;
    uint8_t *enc;                   /* encoded + sealed chunks of a window */
    size_t *enc_off;                /* offsets in enc, one per chunk + 1 */
    size_t enc_cap, off_cap;
    uint8_t *recv;                  /* the window back from the socket */
    uint8_t *dec;                   /* one decoded chunk */
    size_t dec_cap;
    int sp[2];                      /* socket pair */
    int aes;
    uint8_t key[32];
    EVP_CIPHER_CTX *gcm_enc, *gcm_dec; /* AES-256-GCM, keyed once */
    uint64_t nonce;
    ingest_codec_hint hint;         /* adaptive encoding of file hint_file */
    uint64_t hint_file;
    /* the pending group of small chunks (the agent's CHUNK_GROUP), across files */
    uint8_t *grp;
    size_t grp_len, grp_cap, *grp_starts, grp_n;
    uint32_t *grp_lens;
    uint64_t grp_file;              /* file of its first chunk */
    int grpfd;                      /* where grouped chunks land (-1: no --land) */
    long batch_files;               /* files per batch: groups end at a batch's end */
    uint64_t batch_bytes;           /* bytes per batch at most (but one file), as batch.max_bytes */
    int landfd;                     /* directory to land into, or -1 */
    double sec[S_N];
    uint64_t bytes, files, chunks, encoded;
} st;

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * CPU seconds the whole machine has spent busy (every CPU; user, nice,
 * system, irq, softirq and steal of /proc/stat's "cpu" line), or -1 where
 * that cannot be read.
 */
static double machine_busy_now(void)
{
    FILE *f = fopen("/proc/stat", "re");
    if (f == NULL)
        return -1;
    unsigned long long v[8] = { 0 };
    const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                         &v[6], &v[7]);
    fclose(f);
    const long hz = sysconf(_SC_CLK_TCK);
    if (n != 8 || hz <= 0)
        return -1;
    /* v: user nice system idle iowait irq softirq steal */
    return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

static double process_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * What a run costs the machine beyond this process: its busy CPU seconds
 * from meter_start to meter_stop less this process's own CPU, less the
 * busy rate of a quiet second before the start (whatever else runs) times
 * the wall time.  With the land stage in the run that is the kernel's
 * workers making the landed bytes durable, whether they start writing
 * back during the run or at its syncfs.
 */
struct meter {
    double rate; /* busy CPU seconds per second while quiet; < 0: /proc/stat unreadable */
    double busy0, cpu0, wall0;
};

static void meter_start(struct meter *m)
{
    const double q0 = machine_busy_now(), w0 = wall_now();
    const struct timespec quiet = { 1, 0 }; /* ticks are 10 ms: a shorter window gives a coarse rate */
    nanosleep(&quiet, NULL);
    m->busy0 = machine_busy_now();
    m->wall0 = wall_now();
    m->cpu0 = process_cpu_now();
    m->rate = q0 >= 0 && m->busy0 >= 0 && m->wall0 > w0 ? (m->busy0 - q0) / (m->wall0 - w0) : -1;
}

/* the seconds described above (0 at least), or -1 where /proc/stat cannot be read */
static double meter_stop(const struct meter *m)
{
    const double busy = machine_busy_now(), cpu = process_cpu_now(), wall = wall_now();
    if (m->rate < 0 || busy < 0)
        return -1;
    const double c = (busy - m->busy0) - (cpu - m->cpu0) - m->rate * (wall - m->wall0);
    return c > 0 ? c : 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int collect(const char *dir, int depth, paths *p)
{
    if (depth > MAX_DEPTH)
        return 0;
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "ingestctl bench stages: %s: %s%s\n", dir, strerror(errno), depth > 0 ? " (skipped)" : "");
        return depth > 0 ? 0 : -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        const size_t n = strlen(dir) + strlen(de->d_name) + 2;
        char *path = malloc(n);
        if (path == NULL) {
            rc = -1;
            break;
        }
        snprintf(path, n, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0) {
            free(path);
            continue;
        }
        if (S_ISDIR(sb.st_mode)) {
            rc = collect(path, depth + 1, p);
            free(path);
        } else if (S_ISREG(sb.st_mode) && p->n < MAX_FILES) {
            if (p->n == p->cap) {
                const size_t cap = p->cap ? 2 * p->cap : 1024;
                char **v = realloc(p->v, cap * sizeof(*v));
                if (v == NULL) {
                    free(path);
                    rc = -1;
                    break;
                }
                p->v = v;
                p->cap = cap;
            }
            p->v[p->n++] = path;
        } else {
            free(path);
        }
    }
    closedir(d);
    return rc;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap : 1024;
    while (cap2 < need)
        cap2 *= 2;
    void *q = realloc(*p, cap2 * elem);
    if (q == NULL)
        return -1;
    *p = q;
    *cap = cap2;
    return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The window's sealed bytes enc[0, n) through the socket pair into recv. */
static int loopback(st *s, size_t n)
{
    size_t sent = 0, got = 0;
    while (got < n) {
        if (sent < n) {
            const size_t k = n - sent < 65536 ? n - sent : 65536;
            const ssize_t w = send(s->sp[0], s->enc + sent, k, MSG_DONTWAIT);
            if (w > 0)
                sent += (size_t)w;
            else if (w < 0 && errno != EAGAIN && errno != EINTR)
                return -1;
        }
        const ssize_t r = recv(s->sp[1], s->recv + got, n - got, MSG_DONTWAIT);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            return -1;
    }
    return 0;
}

static void nonce_of(uint64_t n, uint8_t *out, size_t len)
{
    memset(out, 0, len);
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(n >> (8 * i));
}

/* AES-256-GCM as the session seals a record (libingest/transport/aead.c): the IV per record, no AD here. */
static int gcm_seal(EVP_CIPHER_CTX *c, const uint8_t *iv, uint8_t *m, size_t ml)
{
    int l = 0, l2 = 0;
    return EVP_EncryptInit_ex2(c, NULL, NULL, iv, NULL) == 1 && EVP_EncryptUpdate(c, m, &l, m, (int)ml) == 1 &&
                   EVP_EncryptFinal_ex(c, m + l, &l2) == 1 &&
                   EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, m + ml) == 1
               ? 0
               : -1;
}

static int gcm_open(EVP_CIPHER_CTX *c, const uint8_t *iv, uint8_t *m, size_t ml)
{
    int l = 0, l2 = 0;
    return EVP_DecryptInit_ex2(c, NULL, NULL, iv, NULL) == 1 && EVP_DecryptUpdate(c, m, &l, m, (int)ml) == 1 &&
                   EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, m + ml) == 1 &&
                   EVP_DecryptFinal_ex(c, m + l, &l2) == 1
               ? 0
               : -1;
}

/*
 * Stages hash..land over chunks [c0, c1) of data (lens[i] bytes at
 * starts[i]), one window.  With group set the chunks are contiguous and
 * travel as one unit, compressed together as the agent's CHUNK_GROUP frames
 * do (plain zstd, no probing); otherwise each is a unit of its own, encoded
 * adaptively with the hint of file file_no.
 */
static int window(st *s, const uint8_t *data, const size_t *starts, const uint32_t *lens, size_t c0, size_t c1,
                  int outfd, int group, uint64_t file_no)
{
    const size_t tag = 16, nu = group ? 1 : c1 - c0;
    size_t need = 0, total = 0;
    for (size_t i = c0; i < c1; i++)
        total += lens[i];
    need = group ? ingest_codec_bound(total) + tag : 0;
    for (size_t i = c0; !group && i < c1; i++)
        need += ingest_codec_bound(lens[i]) + tag;
    if (grow((void **)&s->enc, &s->enc_cap, need, 1) != 0 ||
        grow((void **)&s->enc_off, &s->off_cap, nu + 1, sizeof(size_t)) != 0 ||
        grow((void **)&s->ids, &s->ids_cap, c1 - c0, INGEST_ID_BYTES) != 0)
        return -1;
    uint8_t *r = realloc(s->recv, s->enc_cap);
    if (r == NULL)
        return -1;
    s->recv = r;

    double t = cpu_now(), u;
    for (size_t i = c0; i < c1; i++)
        ingest_chunk_id(ingest_default_dedup_key(), data + starts[i], lens[i], s->ids[i - c0]);
    u = cpu_now();
    s->sec[S_HASH] += u - t;
    t = u;
    size_t off = 0;
    if (!group && s->hint_file != file_no) {
        s->hint_file = file_no;
        memset(&s->hint, 0, sizeof(s->hint));
    }
    for (size_t k = 0; k < nu; k++) {
        size_t el = 0;
        s->enc_off[k] = off;
        const int rc = group ? ingest_codec_encode(s->codec, data + starts[c0], total, s->enc, s->enc_cap - tag, &el)
                             : ingest_codec_encode_adaptive(s->codec, data + starts[c0 + k], lens[c0 + k], s->enc + off,
                                                            s->enc_cap - off - tag, &el, &s->hint);
        if (rc != 0)
            return -1;
        off += el + tag;
    }
    s->enc_off[nu] = off;
    u = cpu_now();
    s->sec[S_COMPRESS] += u - t;
    t = u;
    for (size_t k = 0; k < nu; k++) {
        uint8_t *m = s->enc + s->enc_off[k];
        const size_t ml = s->enc_off[k + 1] - s->enc_off[k] - tag;
        uint8_t nonce[24];
        nonce_of(s->nonce + k, nonce, sizeof nonce);
        if (s->aes) {
            if (gcm_seal(s->gcm_enc, nonce, m, ml) != 0)
                return -1;
        } else {
            crypto_aead_xchacha20poly1305_ietf_encrypt_detached(m, m + ml, NULL, m, ml, NULL, 0, NULL, nonce, s->key);
        }
    }
    u = cpu_now();
    s->sec[S_SEAL] += u - t;
    t = u;
    if (loopback(s, off) != 0)
        return -1;
    u = cpu_now();
    s->sec[S_LOOP] += u - t;
    t = u;
    for (size_t k = 0; k < nu; k++) {
        uint8_t *m = s->recv + s->enc_off[k];
        const size_t ml = s->enc_off[k + 1] - s->enc_off[k] - tag;
        uint8_t nonce[24];
        nonce_of(s->nonce + k, nonce, sizeof nonce);
        const int bad = s->aes ? gcm_open(s->gcm_dec, nonce, m, ml)
                               : crypto_aead_xchacha20poly1305_ietf_decrypt_detached(m, NULL, m, ml, m + ml, NULL, 0,
                                                                                     nonce, s->key);
        if (bad != 0)
            return -1;
    }
    u = cpu_now();
    s->sec[S_OPEN] += u - t;
    /* decompress, verify and land unit by unit (one unit buffer), each timed apart */
    for (size_t k = 0; k < nu; k++) {
        const uint8_t *m = s->recv + s->enc_off[k];
        const size_t ml = s->enc_off[k + 1] - s->enc_off[k] - tag;
        const size_t i0 = group ? c0 : c0 + k, i1 = group ? c1 : c0 + k + 1;
        const size_t want = group ? total : lens[i0];
        size_t dl = 0;
        t = cpu_now();
        if (ingest_codec_decode(s->codec, m, ml, s->dec, s->dec_cap, &dl, NULL, NULL) != 0 || dl != want)
            return -1;
        u = cpu_now();
        s->sec[S_DECOMP] += u - t;
        size_t at = 0;
        for (size_t i = i0; i < i1; at += lens[i], i++) {
            uint8_t id[INGEST_ID_BYTES];
            t = cpu_now();
            ingest_chunk_id(ingest_default_dedup_key(), s->dec + at, lens[i], id);
            u = cpu_now();
            s->sec[S_VERIFY] += u - t;
            if (memcmp(id, s->ids[i - c0], INGEST_ID_BYTES) != 0 || memcmp(s->dec + at, data + starts[i], lens[i]) != 0) {
                fprintf(stderr, "ingestctl bench stages: chunk %zu did not come back intact\n", i);
                return -1;
            }
            const int fd = group ? s->grpfd : outfd;
            if (fd >= 0) {
                t = u;
                if (write_all(fd, s->dec + at, lens[i]) != 0)
                    return -1;
                s->sec[S_LAND] += cpu_now() - t;
            }
        }
    }
    s->nonce += nu;
    s->encoded += off - tag * nu;
    return 0;
}

/* Pass the pending group of small chunks through the stages (a CHUNK_GROUP; one alone travels as a CHUNK). */
static int flush_group(st *s)
{
    if (s->grp_n == 0)
        return 0;
    const int rc = window(s, s->grp, s->grp_starts, s->grp_lens, 0, s->grp_n, s->grpfd, s->grp_n > 1,
                          s->grp_file);
    s->grp_n = 0;
    s->grp_len = 0;
    return rc;
}

/* Add small chunk i of the file (data) to the pending group, flushing it first when full. */
static int group_add(st *s, const uint8_t *data, const size_t *starts, size_t i, uint64_t file_no)
{
    const uint32_t len = s->lens[i];
    if (s->grp_n == INGEST_SENDER_GROUP_MAX_CHUNKS || len > s->grp_cap - s->grp_len)
        INGEST__BENCH_TRY(flush_group(s));
    if (s->grp_n == 0)
        s->grp_file = file_no;
    memcpy(s->grp + s->grp_len, data + starts[i], len);
    s->grp_starts[s->grp_n] = s->grp_len;
    s->grp_lens[s->grp_n++] = len;
    s->grp_len += len;
    return 0;
}

static int one_file(st *s, const char *path, uint64_t file_no)
{
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0; /* gone since the walk: skipped */
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size == 0) {
        close(fd);
        return 0;
    }
    const size_t len = (size_t)sb.st_size;
    int rc = -1, outfd = -1;
    uint8_t *data = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (data == MAP_FAILED) {
        close(fd);
        return -1;
    }
    double t = cpu_now(), u;
    for (size_t off = 0; off < len;) {
        const ssize_t n = pread(fd, s->piece, READ_PIECE, (off_t)off);
        if (n < 0)
            goto out;
        if (n == 0) { /* shrank since the walk: skipped (the tree must hold still while measured) */
            rc = 0;
            goto out;
        }
        off += (size_t)n;
    }
    u = cpu_now();
    s->sec[S_READ] += u - t;
    t = u;
    s->nlens = 0;
    size_t pos = 0, start = 0;
    while (pos < len) {
        size_t used = 0;
        const int cut = ingest_chunker_scan(s->chunker, data + pos, len - pos, &used);
        pos += used;
        if (!cut)
            break;
        if (grow((void **)&s->lens, &s->lens_cap, s->nlens + 1, sizeof(*s->lens)) != 0)
            goto out;
        s->lens[s->nlens++] = (uint32_t)(pos - start);
        start = pos;
    }
    const uint64_t last = ingest_chunker_finish(s->chunker);
    if (last > 0) {
        if (grow((void **)&s->lens, &s->lens_cap, s->nlens + 1, sizeof(*s->lens)) != 0)
            goto out;
        s->lens[s->nlens++] = (uint32_t)last;
    }
    u = cpu_now();
    s->sec[S_CHUNK] += u - t;
    size_t *starts = malloc(s->nlens * sizeof(*starts));
    if (starts == NULL)
        goto out;
    for (size_t i = 0, o = 0; i < s->nlens; i++) {
        starts[i] = o;
        o += s->lens[i];
    }
    if (s->landfd >= 0) {
        char name[40];
        snprintf(name, sizeof name, "f%08llu", (unsigned long long)file_no);
        t = cpu_now();
        outfd = openat(s->landfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        s->sec[S_LAND] += cpu_now() - t;
        if (outfd < 0) {
            fprintf(stderr, "ingestctl bench stages: create %s: %s\n", name, strerror(errno));
            free(starts);
            goto out;
        }
    }
    /* Small chunks join the pending group (it spans files, as the agent's
     * groups span the files of a batch); a large one ends it and travels
     * alone, in windows of up to WINDOW bytes. */
    size_t c0 = 0;
    while (c0 < s->nlens) {
        if (s->lens[c0] <= INGEST_SENDER_GROUP_CHUNK_MAX) {
            if (group_add(s, data, starts, c0, file_no) != 0) {
                free(starts);
                goto out;
            }
            c0++;
            continue;
        }
        size_t c1 = c0, wbytes = 0;
        while (c1 < s->nlens && s->lens[c1] > INGEST_SENDER_GROUP_CHUNK_MAX && (c1 == c0 || wbytes + s->lens[c1] <= WINDOW))
            wbytes += s->lens[c1++];
        if (flush_group(s) != 0 || window(s, data, starts, s->lens, c0, c1, outfd, 0, file_no) != 0) {
            free(starts);
            goto out;
        }
        c0 = c1;
    }
    free(starts);
    if (outfd >= 0) {
        t = cpu_now();
        const int c = close(outfd);
        outfd = -1;
        s->sec[S_LAND] += cpu_now() - t;
        if (c != 0)
            goto out;
    }
    s->bytes += len;
    s->files++;
    s->chunks += s->nlens;
    rc = 0;
out:
    if (outfd >= 0)
        close(outfd);
    munmap(data, len);
    close(fd);
    return rc;
}

static int cmp_dbl(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char usage_text[] =
    "usage: ingestctl bench stages [--level N] [--runs N] [--batch-files N] [--batch-bytes SIZE] [--land DIR] TREE\n";

int cmd_bench_stages(int argc, char **argv)
{
    /* the agent's batch.max_files and batch.max_bytes defaults (docs/config.md) */
    long level = 1, runs = 1, batch_files = 4000;
    uint64_t batch_bytes = 256ull << 20;
    const char *tree = NULL, *land = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) {
            if (tree != NULL) {
                fputs(usage_text, stderr);
                return 2;
            }
            tree = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ingestctl bench stages: missing value for %s\n%s", a, usage_text);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (strcmp(a, "--level") == 0) {
            level = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || level < -131072 || level > 22) {
                fprintf(stderr, "ingestctl bench stages: bad --level '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--runs") == 0) {
            runs = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || runs < 1 || runs > MAX_RUNS) {
                fprintf(stderr, "ingestctl bench stages: --runs must be 1..%d\n", MAX_RUNS);
                return 2;
            }
        } else if (strcmp(a, "--batch-files") == 0) {
            batch_files = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || batch_files < 1 || batch_files > 100000000) {
                fprintf(stderr, "ingestctl bench stages: bad --batch-files '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--batch-bytes") == 0) {
            if (ingest_parse_size(NULL, v, &batch_bytes) != 0 || batch_bytes == 0) {
                fprintf(stderr, "ingestctl bench stages: bad --batch-bytes '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "--land") == 0) {
            land = v;
        } else {
            fprintf(stderr, "ingestctl bench stages: unknown option %s\n%s", a, usage_text);
            return 2;
        }
    }
    if (tree == NULL) {
        fputs(usage_text, stderr);
        return 2;
    }
    if (sodium_init() < 0) {
        fprintf(stderr, "ingestctl bench stages: libsodium failed to initialise\n");
        return 1;
    }
    int status = 1;
    paths p = { NULL, 0, 0 };
    st s;
    memset(&s, 0, sizeof s);
    s.sp[0] = s.sp[1] = -1;
    s.landfd = -1;
    s.grpfd = -1;
    s.batch_files = batch_files;
    s.batch_bytes = batch_bytes;
    char landdir[4200] = "";
    double sec[S_N][MAX_RUNS], sync_wall[MAX_RUNS], run_durable[MAX_RUNS];
    if (collect(tree, 0, &p) != 0)
        goto out;
    if (p.n > 1)
        qsort(p.v, p.n, sizeof(*p.v), cmp_str);
    ingest_chunk_params cp;
    ingest_chunk_params_default(&cp);
    s.ctx = ingest_ctx_create(NULL);
    s.piece = malloc(READ_PIECE);
    /* groups of small chunks up to 1 MiB whatever chunking.max, as the agent's (libingest/edge/ship.c) */
    s.grp_cap = INGEST_WIRE_GROUP_MAX_RAW;
    s.dec_cap = cp.max > s.grp_cap ? cp.max : s.grp_cap;
    s.dec = malloc(s.dec_cap);
    s.grp = malloc(s.grp_cap);
    s.grp_starts = malloc(INGEST_SENDER_GROUP_MAX_CHUNKS * sizeof(*s.grp_starts));
    s.grp_lens = malloc(INGEST_SENDER_GROUP_MAX_CHUNKS * sizeof(*s.grp_lens));
    if (s.grp == NULL || s.grp_starts == NULL || s.grp_lens == NULL) {
        fprintf(stderr, "ingestctl bench stages: out of memory\n");
        goto out;
    }
    if (s.ctx == NULL || s.piece == NULL || s.dec == NULL || ingest_chunker_create(s.ctx, &cp, &s.chunker) != 0 ||
        ingest_codec_create(s.ctx, (int)level, &s.codec) != 0 ||
        ingest_codec_set_filters(s.codec, INGEST_CODEC_FILTER_SHUFFLE2) != 0) {
        fprintf(stderr, "ingestctl bench stages: %s\n", s.ctx ? ingest_ctx_errmsg(s.ctx) : "out of memory");
        goto out;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s.sp) != 0) {
        fprintf(stderr, "ingestctl bench stages: socketpair: %s\n", strerror(errno));
        goto out;
    }
    randombytes_buf(s.key, sizeof s.key);
    s.aes = crypto_aead_aes256gcm_is_available();
    if (s.aes) {
        s.gcm_enc = EVP_CIPHER_CTX_new();
        s.gcm_dec = EVP_CIPHER_CTX_new();
        if (s.gcm_enc == NULL || s.gcm_dec == NULL ||
            EVP_EncryptInit_ex2(s.gcm_enc, EVP_aes_256_gcm(), s.key, NULL, NULL) != 1 ||
            EVP_DecryptInit_ex2(s.gcm_dec, EVP_aes_256_gcm(), s.key, NULL, NULL) != 1) {
            fprintf(stderr, "ingestctl bench stages: OpenSSL AES-256-GCM setup failed\n");
            goto out;
        }
    }
    if (land != NULL) {
        snprintf(landdir, sizeof landdir, "%s/ingest-bench-stages.%ld", land, (long)getpid());
        if (mkdir(landdir, 0700) != 0 || (s.landfd = open(landdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
            (s.grpfd = openat(s.landfd, "groups", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
            fprintf(stderr, "ingestctl bench stages: %s: %s\n", landdir, strerror(errno));
            landdir[0] = '\0';
            goto out;
        }
    }
    /* warm the page cache (untimed) */
    for (size_t i = 0; i < p.n; i++) {
        const int fd = open(p.v[i], O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        while (read(fd, s.piece, READ_PIECE) > 0)
            ;
        close(fd);
    }
    for (long r = 0; r < runs; r++) {
        struct meter meter = { -1, 0, 0, 0 };
        if (s.landfd >= 0)
            meter_start(&meter);
        memset(s.sec, 0, sizeof s.sec);
        s.bytes = s.files = s.chunks = s.encoded = 0;
        s.hint_file = UINT64_MAX;
        /* A batch of the agent ends after batch_files files (empty ones count), or before a file that
         * would take it past batch_bytes (libingest/edge/sender.c): so do its groups. */
        long in_batch = 0;
        uint64_t batch_sum = 0;
        for (size_t i = 0; i < p.n; i++) {
            struct stat sb;
            const uint64_t size = lstat(p.v[i], &sb) == 0 ? (uint64_t)sb.st_size : 0;
            if (in_batch > 0 && batch_sum + size > s.batch_bytes) {
                if (flush_group(&s) != 0) {
                    fprintf(stderr, "ingestctl bench stages: a group of small chunks failed\n");
                    goto out;
                }
                in_batch = 0;
                batch_sum = 0;
            }
            if (one_file(&s, p.v[i], i) != 0) {
                fprintf(stderr, "ingestctl bench stages: %s failed\n", p.v[i]);
                goto out;
            }
            batch_sum += size;
            if (++in_batch == s.batch_files || i + 1 == p.n) {
                if (flush_group(&s) != 0) {
                    fprintf(stderr, "ingestctl bench stages: a group of small chunks failed\n");
                    goto out;
                }
                in_batch = 0;
                batch_sum = 0;
            }
        }
        sync_wall[r] = 0;
        run_durable[r] = -1;
        if (s.landfd >= 0) {
            const double t0 = wall_now();
            if (syncfs(s.landfd) != 0) {
                fprintf(stderr, "ingestctl bench stages: syncfs: %s\n", strerror(errno));
                goto out;
            }
            sync_wall[r] = wall_now() - t0;
            run_durable[r] = meter_stop(&meter);
        }
        for (int k = 0; k < S_N; k++)
            sec[k][r] = s.sec[k];
    }
    double med[S_N], side[3] = { 0, 0, 0 }, total = 0;
    for (int k = 0; k < S_N; k++) {
        qsort(sec[k], (size_t)runs, sizeof(double), cmp_dbl);
        med[k] = sec[k][runs / 2];
        if (k == S_LAND && s.landfd < 0)
            continue;
        side[stage_side[k]] += med[k];
        total += med[k];
    }
    qsort(sync_wall, (size_t)runs, sizeof(double), cmp_dbl);
    qsort(run_durable, (size_t)runs, sizeof(double), cmp_dbl);
    /* the machine's CPU for making the landed bytes durable: known only with --land and /proc/stat */
    const double durable = s.landfd >= 0 && run_durable[0] >= 0 ? run_durable[runs / 2] : -1;
    printf("{\"bytes\":%llu,\"files\":%llu,\"chunks\":%llu,\"encoded_bytes\":%llu,\"level\":%ld,\"runs\":%ld,"
           "\"cipher\":\"%s\",\"seconds\":{",
           (unsigned long long)s.bytes, (unsigned long long)s.files, (unsigned long long)s.chunks,
           (unsigned long long)s.encoded, level, runs, s.aes ? "aes256gcm" : "xchacha20poly1305");
    for (int k = 0; k < S_N; k++) {
        if (k == S_LAND && s.landfd < 0)
            printf("%s\"%s\":null", k ? "," : "", stage_names[k]);
        else
            printf("%s\"%s\":%.3f", k ? "," : "", stage_names[k], med[k]);
    }
    printf("},\"mbps\":{");
    for (int k = 0; k < S_N; k++) {
        if ((k == S_LAND && s.landfd < 0) || med[k] <= 0)
            printf("%s\"%s\":null", k ? "," : "", stage_names[k]);
        else
            printf("%s\"%s\":%.1f", k ? "," : "", stage_names[k], (double)s.bytes / med[k] / 1e6);
    }
    const double cores = 2.0;
    printf("},\"device_seconds\":%.3f,\"core_seconds\":%.3f,\"loopback_seconds\":%.3f,\"total_seconds\":%.3f,",
           side[0], side[1], side[2], total);
    if (s.landfd >= 0)
        printf("\"land_sync_wall_seconds\":%.3f,", sync_wall[runs / 2]);
    else
        printf("\"land_sync_wall_seconds\":null,");
    printf("\"ceiling_mbps_1core\":%.1f,\"ceiling_mbps_2cores\":%.1f,",
           total > 0 ? (double)s.bytes / total / 1e6 : 0.0, total > 0 ? cores * (double)s.bytes / total / 1e6 : 0.0);
    if (durable >= 0 && total + durable > 0)
        printf("\"durable_cpu_seconds\":%.3f,\"ceiling_durable_mbps_2cores\":%.1f}\n", durable,
               cores * (double)s.bytes / (total + durable) / 1e6);
    else
        printf("\"durable_cpu_seconds\":null,\"ceiling_durable_mbps_2cores\":null}\n");
    status = 0;
out:
    if (s.grpfd >= 0)
        close(s.grpfd);
    if (s.landfd >= 0)
        close(s.landfd);
    if (landdir[0] != '\0')
        bench_remove_tree(landdir);
    if (s.sp[0] >= 0)
        close(s.sp[0]);
    if (s.sp[1] >= 0)
        close(s.sp[1]);
    EVP_CIPHER_CTX_free(s.gcm_enc);
    EVP_CIPHER_CTX_free(s.gcm_dec);
    ingest_codec_destroy(s.codec);
    ingest_chunker_destroy(s.chunker);
    ingest_ctx_destroy(s.ctx);
    free(s.piece);
    free(s.dec);
    free(s.grp);
    free(s.grp_starts);
    free(s.grp_lens);
    free(s.lens);
    free(s.ids);
    free(s.enc);
    free(s.enc_off);
    free(s.recv);
    for (size_t i = 0; i < p.n; i++)
        free(p.v[i]);
    free(p.v);
    return status;
}
