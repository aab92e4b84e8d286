/*
 * ingestctl dict: train a zstd dictionary from sample files, or show one.
 *
 *   ingestctl dict train --out FILE [--size BYTES] [--force] [--from LIST] [--part LIST]... [SAMPLE...]
 *   ingestctl dict info FILE
 *   ingestctl dict test [--level N] [--from LIST] FILE SAMPLE...
 *
 * Each sample file is one training sample; a file larger than 128 KiB is
 * cut into 128 KiB samples (chunks are compressed one by one, so samples
 * should look like chunks).  At most 256 MiB of samples are read.  test
 * compresses each sample alone with the dictionary and without one, as the
 * agent does a small file, and prints what the dictionary saves.  --from
 * names samples one per line (as many as a tree has, past the limit of a
 * command line).  Each --part LIST is one kind of file, trained as a part of
 * its own (ingest_dict_train_parts); the other samples are one more part.
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
#define TEST_LEVEL_DEFAULT 1 /* the agent's compression.level default */
#define TEST_LEVEL_MIN (-7)  /* the range compression.level takes */
#define TEST_LEVEL_MAX 19

struct samples {
    unsigned char *buf;
    size_t len, cap;
    size_t *sizes;
    unsigned n, ncap;
};

static void dict_usage(FILE *f)
{
    fprintf(f, "usage: ingestctl dict train --out FILE [--size BYTES] [--force] [--from LIST] [--part LIST]... [SAMPLE...]\n"
               "       ingestctl dict info FILE\n"
               "       ingestctl dict test [--level N] [--from LIST] FILE SAMPLE...\n"
               "  --size BYTES  largest dictionary to write (default %u)\n"
               "  --force       overwrite an existing --out file\n"
               "  --from LIST   also the sample files named in LIST, one per line (- for stdin)\n"
               "  --part LIST   the files named in LIST are one kind: a part of the dictionary of its own\n"
               "  --level N     zstd level of the test, %d..%d (default %d, the agent's)\n",
            DICT_DEFAULT_SIZE, TEST_LEVEL_MIN, TEST_LEVEL_MAX, TEST_LEVEL_DEFAULT);
}

/* --help, or an option the command does not know: the exit status, the usage printed. */
static int help_or_unknown(const char *arg)
{
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
        dict_usage(stdout);
        return 0;
    }
    fprintf(stderr, "ingestctl dict: unknown or incomplete option '%s'\n", arg);
    dict_usage(stderr);
    return 2;
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

/*
 * The samples named in LIST ("-": stdin), one path per line (empty lines
 * skipped): 0 ok (*files counts those read), 1 the list could not be read
 * (said why), -1 out of memory.
 */
static int read_list(struct samples *s, const char *list, unsigned *files)
{
    static int stdin_read;
    if (strcmp(list, "-") == 0 && stdin_read++) {
        fprintf(stderr, "ingestctl dict: only one list can be read from stdin (-)\n");
        return 1;
    }
    FILE *f = strcmp(list, "-") == 0 ? stdin : fopen(list, "r");
    if (f == NULL) {
        fprintf(stderr, "ingestctl dict: --from %s: %s\n", list, strerror(errno));
        return 1;
    }
    char line[4098];
    unsigned long no = 0;
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f) != NULL) {
        no++;
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\n')
            line[--n] = '\0';
        else if (!feof(f)) {
            fprintf(stderr, "ingestctl dict: --from %s:%lu: a name longer than %zu bytes\n", list, no,
                    sizeof(line) - 2);
            rc = 1;
            break;
        }
        if (n == 0)
            continue;
        const int r = read_sample(s, line);
        if (r < 0)
            rc = -1;
        *files += r == 0;
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "ingestctl dict: --from %s: read error\n", list);
        rc = 1;
    }
    if (f != stdin)
        fclose(f);
    return rc;
}

/*
 * The samples of --from (if any) and of the command line: 0, or 1 after
 * saying why not (none read is one, unless empty_ok).
 */
static int read_all(struct samples *s, const char *from, int argc, char **argv, unsigned *files, int empty_ok)
{
    int r = from != NULL ? read_list(s, from, files) : 0;
    for (int k = 0; r == 0 && k < argc; k++) {
        const int one = read_sample(s, argv[k]);
        if (one < 0)
            r = -1;
        *files += one == 0;
    }
    if (r < 0)
        fprintf(stderr, "ingestctl dict: out of memory reading samples\n");
    else if (r == 0 && s->n == 0 && !empty_ok) {
        fprintf(stderr, "ingestctl dict: no readable samples\n");
        r = 1;
    }
    return r != 0;
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

/* A size as the configuration writes it (a whole number, then B, KiB.. or kB..: ingest_parse_size). */
static int parse_size(const char *s, size_t *out)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    uint64_t v = 0;
    const int ok = ctx != NULL && ingest_parse_size(ctx, s, &v) == INGEST_OK && v <= SIZE_MAX;
    ingest_ctx_destroy(ctx);
    if (!ok)
        return -1;
    *out = (size_t)v;
    return 0;
}

static int dict_train(int argc, char **argv)
{
    const char *out = NULL, *from = NULL, *parts[INGEST_DICT_PARTS_MAX];
    unsigned nparts = 0;
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
                fprintf(stderr,
                        "ingestctl dict: --size must be 256..%u bytes (units as in the configuration: 1KiB, "
                        "64KiB), not '%s'\n",
                        INGEST_DICT_MAX_BYTES, argv[i]);
                return 2;
            }
        } else if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--from") == 0 && i + 1 < argc) {
            from = argv[++i];
        } else if (strcmp(argv[i], "--part") == 0 && i + 1 < argc) {
            if (nparts == INGEST_DICT_PARTS_MAX - 1) {
                fprintf(stderr, "ingestctl dict: at most %u --part lists\n", INGEST_DICT_PARTS_MAX - 1);
                return 2;
            }
            parts[nparts++] = argv[++i];
        } else {
            return help_or_unknown(argv[i]);
        }
    }
    if (out == NULL || (i >= argc && from == NULL && nparts == 0)) {
        fprintf(stderr, "ingestctl dict: train needs --out FILE and at least one SAMPLE, --from LIST or --part LIST\n");
        dict_usage(stderr);
        return 2;
    }
    struct stat st;
    if (!force && lstat(out, &st) == 0) {
        fprintf(stderr, "ingestctl dict: refusing to overwrite %s (use --force)\n", out);
        return 1;
    }
    /* part 0: the command line's samples and --from's (when there are any), then one per --part */
    unsigned counts[INGEST_DICT_PARTS_MAX], nc = 0;
    if (from != NULL || i < argc) {
        if (read_all(&s, from, argc - i, argv + i, &files, nparts > 0) != 0)
            goto out;
        counts[nc++] = s.n;
    }
    for (unsigned k = 0; k < nparts; k++) {
        const unsigned n0 = s.n;
        if (read_all(&s, parts[k], 0, NULL, &files, 1) != 0)
            goto out;
        counts[nc++] = s.n - n0;
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
    const int trc = ingest_dict_train_parts(ctx, s.buf, s.sizes, s.n, counts, nc, size, &dict, &dlen, &id);
    if (trc != 0) {
        fprintf(stderr, "ingestctl dict: training failed: %s (%s)\n", ingest_ctx_errmsg(ctx), ingest_strerror(trc));
        goto out;
    }
    if (write_dict(out, dict, dlen, force) != 0)
        goto out;
    if (nc > 1)
        printf("dict id %" PRIu32 ", %zu bytes, from %u samples in %u parts\n", id, dlen, s.n, nc);
    else
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

/*
 * Read a dictionary file and load it as the codec would (so a damaged one
 * shows here): 0 with *buf (malloc'd), *len and *id set, 1 after saying why.
 */
static int read_dict(const char *path, unsigned char **buf, size_t *len, uint32_t *id)
{
    int rc = 1;
    ingest_ctx *ctx = NULL;
    ingest_codec *c = NULL;
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "ingestctl dict: %s: %s\n", path, strerror(errno));
        return 1;
    }
    unsigned char *b = malloc(INGEST_DICT_MAX_BYTES + 1u);
    if (b == NULL) {
        fprintf(stderr, "ingestctl dict: out of memory\n");
        goto out;
    }
    const size_t n = fread(b, 1, INGEST_DICT_MAX_BYTES + 1u, f);
    if (ferror(f)) {
        fprintf(stderr, "ingestctl dict: %s: read error\n", path);
        goto out;
    }
    if (n > INGEST_DICT_MAX_BYTES) {
        fprintf(stderr, "ingestctl dict: %s: larger than %u bytes\n", path, INGEST_DICT_MAX_BYTES);
        goto out;
    }
    *id = ingest_dict_id(b, n);
    if (*id == 0) {
        fprintf(stderr, "ingestctl dict: %s: not a zstd dictionary\n", path);
        goto out;
    }
    ctx = ingest_ctx_create(NULL);
    int r = ctx == NULL ? INGEST_ENOMEM : ingest_codec_create(ctx, 3, &c);
    if (r == 0)
        r = ingest_codec_add_dict(c, b, n, NULL);
    if (r != 0) {
        fprintf(stderr, "ingestctl dict: %s: %s (%s)\n", path, ctx ? ingest_ctx_errmsg(ctx) : "", ingest_strerror(r));
        goto out;
    }
    *buf = b;
    *len = n;
    b = NULL;
    rc = 0;
out:
    ingest_codec_destroy(c);
    ingest_ctx_destroy(ctx);
    free(b);
    fclose(f);
    return rc;
}

static int dict_info(int argc, char **argv)
{
    if (argc != 2) {
        dict_usage(stderr);
        return 2;
    }
    unsigned char *buf;
    size_t len;
    uint32_t id;
    if (read_dict(argv[1], &buf, &len, &id) != 0)
        return 1;
    printf("dict id %" PRIu32 ", %zu bytes\n", id, len);
    free(buf);
    return 0;
}

/*
 * What a dictionary saves on sample files: each sample compressed alone at
 * the level, with it and without it (the codec's whole encoding, header
 * included, as the chunk would travel), summed.
 */
static int dict_test(int argc, char **argv)
{
    int level = TEST_LEVEL_DEFAULT, i, rc = 1;
    const char *from = NULL;
    for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        } else if (strcmp(argv[i], "--level") == 0 && i + 1 < argc) {
            char *end;
            errno = 0;
            const long v = strtol(argv[++i], &end, 10);
            if (errno != 0 || end == argv[i] || *end != '\0' || v < TEST_LEVEL_MIN || v > TEST_LEVEL_MAX) {
                fprintf(stderr, "ingestctl dict: --level must be %d..%d, not '%s'\n", TEST_LEVEL_MIN, TEST_LEVEL_MAX,
                        argv[i]);
                return 2;
            }
            level = (int)v;
        } else if (strcmp(argv[i], "--from") == 0 && i + 1 < argc) {
            from = argv[++i];
        } else {
            return help_or_unknown(argv[i]);
        }
    }
    if (i >= argc || (argc - i < 2 && from == NULL)) {
        fprintf(stderr, "ingestctl dict: test needs a dictionary FILE and at least one SAMPLE or --from LIST\n");
        dict_usage(stderr);
        return 2;
    }
    unsigned char *dict = NULL, *dst = NULL;
    size_t dlen = 0;
    uint32_t id = 0;
    struct samples s = { NULL, 0, 0, NULL, 0, 0 };
    ingest_ctx *ctx = NULL;
    ingest_codec *plain = NULL, *with = NULL;
    unsigned files = 0;
    if (read_dict(argv[i++], &dict, &dlen, &id) != 0)
        return 1;
    if (read_all(&s, from, argc - i, argv + i, &files, 0) != 0)
        goto out;
    const size_t cap = ingest_codec_bound(SAMPLE_PIECE_MAX);
    ctx = ingest_ctx_create(NULL);
    dst = malloc(cap);
    int r = ctx == NULL || dst == NULL ? INGEST_ENOMEM : ingest_codec_create(ctx, level, &plain);
    if (r == 0)
        r = ingest_codec_create(ctx, level, &with);
    if (r == 0)
        r = ingest_codec_add_dict(with, dict, dlen, NULL);
    if (r == 0)
        r = ingest_codec_use_dict(with, id);
    uint64_t without_bytes = 0, with_bytes = 0;
    size_t off = 0;
    for (unsigned k = 0; r == 0 && k < s.n; off += s.sizes[k++]) {
        size_t a = 0, b = 0;
        r = ingest_codec_encode(plain, s.buf + off, s.sizes[k], dst, cap, &a);
        if (r == 0)
            r = ingest_codec_encode(with, s.buf + off, s.sizes[k], dst, cap, &b);
        without_bytes += a;
        with_bytes += b;
    }
    if (r != 0) {
        fprintf(stderr, "ingestctl dict: %s (%s)\n", ctx ? ingest_ctx_errmsg(ctx) : "out of memory", ingest_strerror(r));
        goto out;
    }
    printf("dict id %" PRIu32 ", %zu bytes, level %d: %u files, %u samples, %zu bytes; %" PRIu64
           " bytes without it, %" PRIu64 " with it; saves %.1f%%\n",
           id, dlen, level, files, s.n, s.len, without_bytes, with_bytes,
           without_bytes ? 100.0 * ((double)without_bytes - (double)with_bytes) / (double)without_bytes : 0.0);
    rc = 0;
out:
    ingest_codec_destroy(plain);
    ingest_codec_destroy(with);
    ingest_ctx_destroy(ctx);
    free(dst);
    free(dict);
    free(s.buf);
    free(s.sizes);
    return rc;
}

int cmd_dict(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "train") == 0)
        return dict_train(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "info") == 0)
        return dict_info(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "test") == 0)
        return dict_test(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        dict_usage(stdout);
        return 0;
    }
    dict_usage(stderr);
    return 2;
}
