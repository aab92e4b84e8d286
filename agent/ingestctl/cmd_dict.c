/*
 * ingestctl dict: train a zstd dictionary from sample files, or show one.
 *
 *   ingestctl dict train --out FILE [--size BYTES] [--force] SAMPLE...
 *   ingestctl dict info FILE
 *
 * Each sample file is one training sample; a file larger than 128 KiB is
 * cut into 128 KiB samples (chunks are compressed one by one, so samples
 * should look like chunks).  At most 256 MiB of samples are read.
 */
#include "ingestctl.h"

#include <ingest.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DICT_DEFAULT_SIZE 112640u
#define SAMPLE_PIECE_MAX (128u * 1024u)
#define SAMPLES_TOTAL_MAX (256u * 1024u * 1024u)

struct samples {
    unsigned char *buf;
    size_t len, cap;
    size_t *sizes;
    unsigned n, ncap;
};

static void dict_usage(FILE *f)
{
    fprintf(f, "usage: ingestctl dict train --out FILE [--size BYTES] [--force] SAMPLE...\n"
               "       ingestctl dict info FILE\n"
               "  --size BYTES  largest dictionary to write (default %u)\n"
               "  --force       overwrite an existing --out file\n",
            DICT_DEFAULT_SIZE);
}

static int add_piece(struct samples *s, size_t len)
{
    if (s->n == s->ncap) {
        const unsigned ncap = s->ncap ? s->ncap * 2 : 256;
        size_t *p = realloc(s->sizes, ncap * sizeof(*p));
        if (p == NULL)
            return -1;
        s->sizes = p;
        s->ncap = ncap;
    }
    s->sizes[s->n++] = len;
    return 0;
}

/* Append one file; 0 ok, 1 skipped (complaint printed), -1 fatal. */
static int read_sample(struct samples *s, const char *path)
{
    struct stat st;
    int rc = 1;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "ingestctl dict: skipping %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "ingestctl dict: skipping %s: not a regular file\n", path);
        goto out;
    }
    if (st.st_size == 0) {
        fprintf(stderr, "ingestctl dict: skipping %s: empty\n", path);
        goto out;
    }
    const size_t room = SAMPLES_TOTAL_MAX - s->len;
    size_t want = (uint64_t)st.st_size < room ? (size_t)st.st_size : room;
    if (want == 0) {
        fprintf(stderr, "ingestctl dict: skipping %s: %u MiB of samples already read\n", path,
                SAMPLES_TOTAL_MAX >> 20);
        goto out;
    }
    if (s->len + want > s->cap) {
        size_t cap = s->cap ? s->cap : 1u << 20;
        while (cap < s->len + want)
            cap *= 2;
        unsigned char *b = realloc(s->buf, cap);
        if (b == NULL) {
            rc = -1;
            goto out;
        }
        s->buf = b;
        s->cap = cap;
    }
    size_t got = 0;
    while (got < want) {
        const ssize_t r = read(fd, s->buf + s->len + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            fprintf(stderr, "ingestctl dict: skipping %s: read: %s\n", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break; /* shrank while reading: take what is there */
        got += (size_t)r;
    }
    if (got == 0) {
        fprintf(stderr, "ingestctl dict: skipping %s: empty\n", path);
        goto out;
    }
    for (size_t off = 0; off < got; off += SAMPLE_PIECE_MAX)
        if (add_piece(s, got - off < SAMPLE_PIECE_MAX ? got - off : SAMPLE_PIECE_MAX) != 0) {
            rc = -1;
            goto out;
        }
    s->len += got;
    rc = 0;
out:
    close(fd);
    return rc;
}

static int write_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        const ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/*
 * Write through a temporary file, then put it in place: rename() with
 * --force, link() without (which refuses an existing name atomically).
 */
static int write_dict(const char *out, const void *dict, size_t len, int force)
{
    char tmp[4096];
    int rc = 1;
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", out, (long)getpid()) >= (int)sizeof(tmp)) {
        fprintf(stderr, "ingestctl dict: %s: path too long\n", out);
        return 1;
    }
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "ingestctl dict: %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    if (fchmod(fd, 0644) != 0 || write_all(fd, dict, len) != 0 || fsync(fd) != 0) {
        fprintf(stderr, "ingestctl dict: %s: %s\n", tmp, strerror(errno));
        close(fd);
        goto out;
    }
    if (close(fd) != 0) {
        fprintf(stderr, "ingestctl dict: %s: %s\n", tmp, strerror(errno));
        goto out;
    }
    if (force) {
        if (rename(tmp, out) != 0) {
            fprintf(stderr, "ingestctl dict: rename to %s: %s\n", out, strerror(errno));
            goto out;
        }
        return 0;
    }
    if (link(tmp, out) != 0) {
        if (errno == EEXIST)
            fprintf(stderr, "ingestctl dict: refusing to overwrite %s (use --force)\n", out);
        else
            fprintf(stderr, "ingestctl dict: %s: %s\n", out, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    unlink(tmp);
    return rc;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    const unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v > SIZE_MAX)
        return -1;
    *out = (size_t)v;
    return 0;
}

static int dict_train(int argc, char **argv)
{
    const char *out = NULL;
    size_t size = DICT_DEFAULT_SIZE;
    int force = 0, i, rc = 1;
    struct samples s = { NULL, 0, 0, NULL, 0, 0 };
    ingest_ctx *ctx = NULL;
    void *dict = NULL;
    size_t dlen = 0;
    uint32_t id = 0;
    unsigned files = 0;

    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (parse_size(argv[++i], &size) != 0 || size < 256 || size > INGEST_DICT_MAX_BYTES) {
                fprintf(stderr, "ingestctl dict: --size must be 256..%u bytes, not '%s'\n", INGEST_DICT_MAX_BYTES,
                        argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            dict_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "ingestctl dict: unknown or incomplete option '%s'\n", argv[i]);
            dict_usage(stderr);
            return 2;
        }
    }
    if (out == NULL || i >= argc) {
        fprintf(stderr, "ingestctl dict: train needs --out FILE and at least one SAMPLE\n");
        dict_usage(stderr);
        return 2;
    }
    struct stat st;
    if (!force && lstat(out, &st) == 0) {
        fprintf(stderr, "ingestctl dict: refusing to overwrite %s (use --force)\n", out);
        return 1;
    }
    for (; i < argc; i++) {
        const int r = read_sample(&s, argv[i]);
        if (r < 0) {
            fprintf(stderr, "ingestctl dict: out of memory reading samples\n");
            goto out;
        }
        files += r == 0;
    }
    if (s.n == 0) {
        fprintf(stderr, "ingestctl dict: no readable samples\n");
        goto out;
    }
    ctx = ingest_ctx_create(NULL);
    if (ctx == NULL) {
        fprintf(stderr, "ingestctl dict: out of memory\n");
        goto out;
    }
    const int trc = ingest_dict_train(ctx, s.buf, s.sizes, s.n, size, &dict, &dlen, &id);
    if (trc != 0) {
        fprintf(stderr, "ingestctl dict: training failed: %s (%s)\n", ingest_ctx_errmsg(ctx), ingest_strerror(trc));
        goto out;
    }
    if (write_dict(out, dict, dlen, force) != 0)
        goto out;
    printf("dict id %" PRIu32 ", %zu bytes, from %u samples\n", id, dlen, s.n);
    if (files != s.n)
        fprintf(stderr, "ingestctl dict: (%u files, large ones cut into %u KiB samples)\n", files,
                SAMPLE_PIECE_MAX >> 10);
    rc = 0;
out:
    if (ctx != NULL)
        ingest_buf_free(ctx, dict);
    ingest_ctx_destroy(ctx);
    free(s.buf);
    free(s.sizes);
    return rc;
}

static int dict_info(int argc, char **argv)
{
    if (argc != 2) {
        dict_usage(stderr);
        return 2;
    }
    const char *path = argv[1];
    int rc = 1;
    unsigned char *buf = NULL;
    ingest_ctx *ctx = NULL;
    ingest_codec *c = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "ingestctl dict: %s: %s\n", path, strerror(errno));
        return 1;
    }
    buf = malloc(INGEST_DICT_MAX_BYTES + 1u);
    if (buf == NULL) {
        fprintf(stderr, "ingestctl dict: out of memory\n");
        goto out;
    }
    const size_t len = fread(buf, 1, INGEST_DICT_MAX_BYTES + 1u, f);
    if (ferror(f)) {
        fprintf(stderr, "ingestctl dict: %s: read error\n", path);
        goto out;
    }
    if (len > INGEST_DICT_MAX_BYTES) {
        fprintf(stderr, "ingestctl dict: %s: larger than %u bytes\n", path, INGEST_DICT_MAX_BYTES);
        goto out;
    }
    const uint32_t id = ingest_dict_id(buf, len);
    if (id == 0) {
        fprintf(stderr, "ingestctl dict: %s: not a zstd dictionary\n", path);
        goto out;
    }
    /* Load it as the codec would, so a damaged dictionary shows here. */
    ctx = ingest_ctx_create(NULL);
    int r = ctx == NULL ? INGEST_ENOMEM : ingest_codec_create(ctx, 3, &c);
    if (r == 0)
        r = ingest_codec_add_dict(c, buf, len, NULL);
    if (r != 0) {
        fprintf(stderr, "ingestctl dict: %s: %s (%s)\n", path, ingest_ctx_errmsg(ctx), ingest_strerror(r));
        goto out;
    }
    printf("dict id %" PRIu32 ", %zu bytes\n", id, len);
    rc = 0;
out:
    ingest_codec_destroy(c);
    ingest_ctx_destroy(ctx);
    free(buf);
    fclose(f);
    return rc;
}

int cmd_dict(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "train") == 0)
        return dict_train(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "info") == 0)
        return dict_info(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        dict_usage(stdout);
        return 0;
    }
    dict_usage(stderr);
    return 2;
}
