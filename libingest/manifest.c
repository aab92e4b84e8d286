/*
 * Batch manifests (JSON Lines): a streaming, bounded reader and a writer
 * that checks what it writes with the reader's rules.  Format:
 * docs/manifest.md.
 */
#include "ingest/manifest.h"
#include "ingest/wire.h"

#include "internal.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CHUNK_LEN_MAX (64u * 1024u * 1024u)
/* Values on one line: a full chunk list is 3 per chunk plus the array. */
#define LINE_TOKS_MAX (4u * INGEST_MANIFEST_CHUNKS_PER_LINE + 64u)
#define DEPTH_MAX 8u
#define READ_FIRST (64u * 1024u)
/* The writer's buffer: the caller flushes long before this. */
#define WRITER_MAX ((size_t)1 << 30)

/* --- validation shared by the reader and the writer --------------------- */

/* NULL when s[0..len) is an acceptable relative path, else what is wrong. */
static const char *check_relpath(const char *s, size_t len, int allow_empty)
{
    if (len == 0)
        return allow_empty ? NULL : "empty path";
    if (len > INGEST_MANIFEST_PATH_MAX)
        return "path longer than INGEST_MANIFEST_PATH_MAX (4096) bytes";
    if (memchr(s, '\0', len) != NULL)
        return "NUL byte in path";
    if (s[0] == '/')
        return "absolute path";
    size_t i = 0;
    while (i <= len) {
        const char *slash = memchr(s + i, '/', len - i);
        const size_t e = slash ? (size_t)(slash - s) : len;
        const size_t n = e - i;
        if (n == 0)
            return "empty path component";
        if (n == 1 && s[i] == '.')
            return "'.' path component";
        if (n == 2 && s[i] == '.' && s[i + 1] == '.')
            return "'..' path component";
        i = e + 1;
    }
    return NULL;
}

static const char *check_name(const char *s, size_t len)
{
    if (len == 0)
        return "empty name";
    if (len > INGEST_MANIFEST_NAME_MAX)
        return "name longer than INGEST_MANIFEST_NAME_MAX (128) bytes";
    /* the device and batch id rule of the wire (ingest_wire_id_valid): one rule everywhere */
    if (!ingest_wire_id_valid(s, len))
        return "name is not [A-Za-z0-9._-] starting with a letter or digit";
    return NULL;
}

/* --- reader ------------------------------------------------------------- */

struct ingest_manifest_reader_s {
    ingest_ctx *ctx;
    char *name;
    int fd;              /* -1 for a memory reader */
    /* Memory: the caller's bytes.  File: a buffer holding [start, end). */
    const char *mem;
    size_t mem_len, mem_pos;
    char *buf;
    size_t buf_cap, start, end;
    int eof;
    ingest__json json;
    ingest_manifest_chunk *chunks; /* INGEST_MANIFEST_CHUNKS_PER_LINE */
    uint64_t line;
    int err;             /* sticky failure */
    int done;
    /* Sequence state. */
    int have_header;
    uint64_t nfiles, total_bytes;
    uint64_t files_seen, bytes_seen;
    uint64_t chunks_left;   /* of the current file */
    uint64_t file_size, file_sum;
    unsigned flags;         /* INGEST_MANIFEST_READ_* */
};

void ingest_manifest_reader_set_flags(ingest_manifest_reader *r, unsigned flags)
{
    if (r != NULL)
        r->flags = flags;
}

static int reader_new(ingest_ctx *ctx, const char *name, ingest_manifest_reader **out)
{
    ingest_manifest_reader *r = ingest__calloc(ctx, 1, sizeof(*r));
    if (r == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "manifest: cannot allocate a reader");
    r->ctx = ctx;
    r->fd = -1;
    r->name = ingest__strdup(ctx, name);
    if (r->name == NULL) {
        ingest__free(ctx, r);
        return ingest__fail(ctx, INGEST_ENOMEM, "manifest: cannot allocate a reader");
    }
    ingest__json_init(&r->json, ctx, INGEST_MANIFEST_LINE_MAX, LINE_TOKS_MAX, DEPTH_MAX);
    *out = r;
    return 0;
}

int ingest_manifest_reader_open(ingest_ctx *ctx, const char *path, ingest_manifest_reader **out)
{
    if (out == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest: no output handle");
    *out = NULL;
    if (ctx == NULL || path == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest: no context or path");
    ingest_manifest_reader *r = NULL;
    INGEST__FORWARD(reader_new(ctx, path, &r));
    /* a manifest is a regular file: never a symlink followed out of the tree, never a FIFO waited on */
    r->fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (r->fd < 0) {
        const int e = errno;
        ingest_manifest_reader_close(r);
        if (e == ELOOP)
            return ingest__fail(ctx, INGEST_EINVAL, "manifest %s: a symbolic link, not a manifest; not read", path);
        return ingest__fail(ctx, ingest__errno(e), "manifest %s: open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(r->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ingest_manifest_reader_close(r);
        return ingest__fail(ctx, INGEST_EINVAL, "manifest %s: not a regular file; not read", path);
    }
    *out = r;
    return 0;
}

int ingest_manifest_reader_mem(ingest_ctx *ctx, const void *buf, size_t len, ingest_manifest_reader **out)
{
    if (out == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest: no output handle");
    *out = NULL;
    if (ctx == NULL || (buf == NULL && len != 0))
        return ingest__fail(ctx, INGEST_EINVAL, "manifest: no context or buffer");
    ingest_manifest_reader *r = NULL;
    INGEST__FORWARD(reader_new(ctx, "<memory>", &r));
    r->mem = buf;
    r->mem_len = len;
    *out = r;
    return 0;
}

void ingest_manifest_reader_close(ingest_manifest_reader *r)
{
    if (r == NULL)
        return;
    ingest_ctx *const ctx = r->ctx;
    if (r->fd >= 0)
        close(r->fd);
    ingest__json_free(&r->json);
    ingest__free(ctx, r->chunks);
    ingest__free(ctx, r->buf);
    ingest__free(ctx, r->name);
    ingest__free(ctx, r);
}

/* Fail at line:column of the current line (column counts bytes from 1). */
static int bad(ingest_manifest_reader *r, int code, size_t col0, const char *what)
{
    r->err = ingest__fail(r->ctx, code, "manifest %s:%llu:%zu: %s", r->name, (unsigned long long)r->line,
                          col0 + 1, what);
    return r->err;
}

static int badf(ingest_manifest_reader *r, int code, size_t col0, const char *what, const char *key)
{
    r->err = ingest__fail(r->ctx, code, "manifest %s:%llu:%zu: \"%s\": %s", r->name,
                          (unsigned long long)r->line, col0 + 1, key, what);
    return r->err;
}

/*
 * Next line without its '\n' into *line and *len: 1, 0 at the end, < 0 on
 * error.  A line may be at most INGEST_MANIFEST_LINE_MAX bytes.
 */
static int next_line(ingest_manifest_reader *r, const char **line, size_t *len)
{
    if (r->fd < 0) {
        if (r->mem_pos >= r->mem_len)
            return 0;
        const char *p = r->mem + r->mem_pos;
        const size_t avail = r->mem_len - r->mem_pos;
        const size_t look = avail < (size_t)INGEST_MANIFEST_LINE_MAX + 1 ? avail : INGEST_MANIFEST_LINE_MAX + 1;
        const char *nl = memchr(p, '\n', look);
        r->line++;
        if (nl == NULL && avail > INGEST_MANIFEST_LINE_MAX)
            return bad(r, INGEST_ETOOBIG, INGEST_MANIFEST_LINE_MAX,
                       "line longer than INGEST_MANIFEST_LINE_MAX (262144) bytes");
        *line = p;
        *len = nl ? (size_t)(nl - p) : avail;
        r->mem_pos += *len + (nl != NULL);
        return 1;
    }
    for (;;) {
        const char *nl = r->end > r->start ? memchr(r->buf + r->start, '\n', r->end - r->start) : NULL;
        if (nl != NULL || (r->eof && r->end > r->start)) {
            r->line++;
            *line = r->buf + r->start;
            *len = nl ? (size_t)(nl - *line) : r->end - r->start;
            if (*len > INGEST_MANIFEST_LINE_MAX)
                return bad(r, INGEST_ETOOBIG, INGEST_MANIFEST_LINE_MAX,
                           "line longer than INGEST_MANIFEST_LINE_MAX (262144) bytes");
            r->start += *len + (nl != NULL);
            return 1;
        }
        if (r->eof)
            return 0;
        if (r->end - r->start > INGEST_MANIFEST_LINE_MAX) {
            r->line++;
            return bad(r, INGEST_ETOOBIG, INGEST_MANIFEST_LINE_MAX,
                       "line longer than INGEST_MANIFEST_LINE_MAX (262144) bytes");
        }
        /* Make room: move the partial line down, grow up to LINE_MAX + 1. */
        if (r->start > 0) {
            memmove(r->buf, r->buf + r->start, r->end - r->start);
            r->end -= r->start;
            r->start = 0;
        }
        if (r->end == r->buf_cap) {
            size_t cap = r->buf_cap ? r->buf_cap * 2 : READ_FIRST;
            if (cap > (size_t)INGEST_MANIFEST_LINE_MAX + 1)
                cap = (size_t)INGEST_MANIFEST_LINE_MAX + 1;
            char *p = ingest__malloc(r->ctx, cap);
            if (p == NULL) {
                r->err = ingest__fail(r->ctx, INGEST_ENOMEM, "manifest %s: cannot allocate %zu bytes",
                                      r->name, cap);
                return r->err;
            }
            if (r->end)
                memcpy(p, r->buf, r->end);
            ingest__free(r->ctx, r->buf);
            r->buf = p;
            r->buf_cap = cap;
        }
        const ssize_t n = read(r->fd, r->buf + r->end, r->buf_cap - r->end);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            const int e = errno;
            r->err = ingest__fail(r->ctx, ingest__errno(e), "manifest %s: read: %s", r->name, strerror(e));
            return r->err;
        }
        if (n == 0)
            r->eof = 1;
        r->end += (size_t)n;
    }
}

/* Keys of each record type, with a bit each. */
#define MANIFEST_KEYS(X)                                                                                           \
    X(TYPE, type) X(FORMAT, format) X(DEVICE, device) X(BATCH, batch) X(FILES, files) X(BYTES, bytes)            \
    X(CREATED, created_ns) X(PATH, path) X(LANDED, landed) X(SIZE, size) X(MTIME, mtime_ns) X(MODE, mode)       \
    X(VERSION, version) X(HASH, hash) X(NCHUNKS, nchunks) X(CHUNKS, chunks) X(REFUSED, refused) X(DIGEST, digest)
#define KEY_ENUM(id, name) K_##id,
#define KEY_NAME(id, name) #name,
#define KEY_LEN(id, name) sizeof(#name) - 1,
enum { MANIFEST_KEYS(KEY_ENUM) K_COUNT };
static const char *const key_names[K_COUNT] = {MANIFEST_KEYS(KEY_NAME)};
/* their lengths: a key is looked up for every key of every line */
static const uint8_t key_lens[K_COUNT] = {MANIFEST_KEYS(KEY_LEN)};
#define BIT(k) (1u << (k))
static const unsigned keys_header =
    BIT(K_TYPE) | BIT(K_FORMAT) | BIT(K_DEVICE) | BIT(K_BATCH) | BIT(K_FILES) | BIT(K_BYTES) | BIT(K_CREATED);
static const unsigned keys_file = BIT(K_TYPE) | BIT(K_PATH) | BIT(K_LANDED) | BIT(K_SIZE) | BIT(K_MTIME) |
                                  BIT(K_MODE) | BIT(K_VERSION) | BIT(K_HASH) | BIT(K_NCHUNKS) | BIT(K_CHUNKS);
static const unsigned keys_chunks = BIT(K_TYPE) | BIT(K_CHUNKS);

static int key_index(const char *s, size_t len)
{
    for (int k = 0; k < K_COUNT; k++)
        if (key_lens[k] == len && s[0] == key_names[k][0] && memcmp(key_names[k], s, len) == 0)
            return k;
    return -1;
}

static int get_u64(ingest_manifest_reader *r, uint32_t ti, int k, uint64_t max, uint64_t *out)
{
    const ingest__json_tok *t = &r->json.toks[ti];
    if (t->type != INGEST__JSON_INT || t->neg)
        return badf(r, INGEST_ECORRUPT, t->pos, "expected a non-negative integer", key_names[k]);
    if (t->u > max)
        return badf(r, INGEST_ECORRUPT, t->pos, "integer out of range", key_names[k]);
    *out = t->u;
    return 0;
}

static int get_i64(ingest_manifest_reader *r, uint32_t ti, int k, int64_t *out)
{
    const ingest__json_tok *t = &r->json.toks[ti];
    if (t->type != INGEST__JSON_INT)
        return badf(r, INGEST_ECORRUPT, t->pos, "expected an integer", key_names[k]);
    if (ingest__json_get_i64(t, out) != 0)
        return badf(r, INGEST_ECORRUPT, t->pos, "integer out of range", key_names[k]);
    return 0;
}

static int get_str(ingest_manifest_reader *r, uint32_t ti, int k, const char **s, size_t *len)
{
    const ingest__json_tok *t = &r->json.toks[ti];
    if (t->type != INGEST__JSON_STRING)
        return badf(r, INGEST_ECORRUPT, t->pos, "expected a string", key_names[k]);
    *s = ingest__json_str(&r->json, t);
    *len = t->len;
    return 0;
}

static int get_hex(ingest_manifest_reader *r, uint32_t ti, int k, uint8_t out[INGEST_ID_BYTES])
{
    const ingest__json_tok *t = &r->json.toks[ti];
    if (t->type != INGEST__JSON_STRING)
        return badf(r, INGEST_ECORRUPT, t->pos, "expected a string of 64 hex digits", key_names[k]);
    if (t->len != 2 * INGEST_ID_BYTES ||
        ingest_from_hex(ingest__json_str(&r->json, t), t->len, out, INGEST_ID_BYTES) != 0)
        return badf(r, INGEST_ECORRUPT, t->pos, "expected exactly 64 hex digits", key_names[k]);
    return 0;
}

static int get_path(ingest_manifest_reader *r, uint32_t ti, int k, int allow_empty, const char **out)
{
    const char *s = NULL;
    size_t len = 0;
    INGEST__FORWARD(get_str(r, ti, k, &s, &len));
    const char *what = check_relpath(s, len, allow_empty);
    if (what != NULL) {
        /* Name the refused path, shortened and with unprintable bytes as '?'. */
        char shown[200], msg[300];
        size_t n = 0;
        for (size_t i = 0; i < len && n < 80; i++)
            shown[n++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
        shown[n] = '\0';
        snprintf(msg, sizeof(msg), "%s in '%s%s'", what, shown, len > 80 ? "..." : "");
        return badf(r, INGEST_ECORRUPT, r->json.toks[ti].pos, msg, key_names[k]);
    }
    *out = s;
    return 0;
}

static int get_name(ingest_manifest_reader *r, uint32_t ti, int k, const char **out)
{
    const char *s = NULL;
    size_t len = 0;
    INGEST__FORWARD(get_str(r, ti, k, &s, &len));
    const char *what = check_name(s, len);
    if (what != NULL)
        return badf(r, INGEST_ECORRUPT, r->json.toks[ti].pos, what, key_names[k]);
    *out = s;
    return 0;
}

/* The chunk list at token ti into r->chunks; adds to the current file. */
static int get_chunks(ingest_manifest_reader *r, uint32_t ti, ingest_manifest_rec *rec)
{
    const ingest__json *j = &r->json;
    const ingest__json_tok *arr = &j->toks[ti];
    if (arr->type != INGEST__JSON_ARRAY)
        return badf(r, INGEST_ECORRUPT, arr->pos, "expected an array", "chunks");
    if (arr->len > INGEST_MANIFEST_CHUNKS_PER_LINE)
        return badf(r, INGEST_ECORRUPT, arr->pos,
                    "too many chunks on one line (at most INGEST_MANIFEST_CHUNKS_PER_LINE, 1024)", "chunks");
    if (arr->len > r->chunks_left)
        return badf(r, INGEST_ECORRUPT, arr->pos, "more chunks than the file's nchunks", "chunks");
    if (r->chunks == NULL && arr->len > 0) {
        r->chunks = ingest__calloc(r->ctx, INGEST_MANIFEST_CHUNKS_PER_LINE, sizeof(*r->chunks));
        if (r->chunks == NULL) {
            r->err = ingest__fail(r->ctx, INGEST_ENOMEM, "manifest %s: cannot allocate the chunk list", r->name);
            return r->err;
        }
    }
    uint32_t e = ti + 1;
    rec->npushed = 0;
    for (uint32_t i = 0; i < arr->len; i++) {
        const ingest__json_tok *c = &j->toks[e];
        const ingest__json_tok *l;
        if ((r->flags & INGEST_MANIFEST_READ_ID_OPTIONAL) && c->type == INGEST__JSON_ARRAY && c->len == 1 &&
            j->toks[e + 1].type == INGEST__JSON_INT) {
            /* pushed: its id is taken from its bytes when they arrive */
            memset(r->chunks[i].id, 0, INGEST_ID_BYTES);
            rec->npushed++;
            l = &j->toks[e + 1];
        } else {
            if (c->type != INGEST__JSON_ARRAY || c->len != 2 || j->toks[e + 1].type != INGEST__JSON_STRING ||
                j->toks[e + 2].type != INGEST__JSON_INT)
                return badf(r, INGEST_ECORRUPT, c->pos,
                            (r->flags & INGEST_MANIFEST_READ_ID_OPTIONAL)
                                ? "a chunk must be [\"64 hex digits\", length] or [length]"
                                : "a chunk must be [\"64 hex digits\", length]",
                            "chunks");
            INGEST__FORWARD(get_hex(r, e + 1, K_CHUNKS, r->chunks[i].id));
            l = &j->toks[e + 2];
        }
        if (l->neg || l->u == 0 || l->u > CHUNK_LEN_MAX)
            return badf(r, INGEST_ECORRUPT, l->pos, "chunk length must be 1..67108864", "chunks");
        r->chunks[i].len = (uint32_t)l->u;
        r->file_sum += l->u;
        if (r->file_sum > r->file_size)
            return badf(r, INGEST_ECORRUPT, l->pos, "chunk lengths add up to more than the file's size",
                        "chunks");
        e = c->end;
    }
    r->chunks_left -= arr->len;
    rec->chunks = r->chunks;
    rec->nchunks = arr->len;
    if (r->chunks_left == 0 && r->file_sum != r->file_size)
        return badf(r, INGEST_ECORRUPT, arr->pos, "chunk lengths do not add up to the file's size", "chunks");
    return 0;
}

static int parse_line(ingest_manifest_reader *r, const char *line, size_t len, ingest_manifest_rec *rec)
{
    ingest__json *j = &r->json;
    if (len == 0)
        return bad(r, INGEST_ECORRUPT, 0, "empty line");
    int rc = ingest__json_parse(j, line, len);
    if (rc == INGEST_ENOMEM) {
        r->err = rc;
        return rc;
    }
    if (rc < 0)
        return bad(r, rc, j->err_pos, j->err_what);
    if (j->toks[0].type != INGEST__JSON_OBJECT)
        return bad(r, INGEST_ECORRUPT, j->toks[0].pos, "a line must be a JSON object");

    /* Which member holds each known key. */
    uint32_t at[K_COUNT];
    unsigned seen = 0;
    uint32_t k = 1;
    for (uint32_t m = 0; m < j->toks[0].len; m++) {
        const int ki = key_index(ingest__json_str(j, &j->toks[k]), j->toks[k].len);
        if (ki >= 0) {
            at[ki] = k + 1;
            seen |= BIT(ki);
        }
        k = j->toks[k + 1].end;
    }
    if (!(seen & BIT(K_TYPE)))
        return bad(r, INGEST_ECORRUPT, 0, "missing key \"type\"");
    const char *type = NULL;
    size_t tlen = 0;
    INGEST__FORWARD(get_str(r, at[K_TYPE], K_TYPE, &type, &tlen));
    unsigned need;
    if (tlen == 5 && memcmp(type, "batch", 5) == 0) {
        rec->type = INGEST_MREC_HEADER;
        need = keys_header;
    } else if (tlen == 4 && memcmp(type, "file", 4) == 0) {
        rec->type = INGEST_MREC_FILE;
        need = keys_file;
        if (r->flags & INGEST_MANIFEST_READ_HASH_OPTIONAL)
            need &= ~(unsigned)BIT(K_HASH);
    } else if (tlen == 6 && memcmp(type, "chunks", 6) == 0) {
        rec->type = INGEST_MREC_CHUNKS;
        need = keys_chunks;
    } else {
        return badf(r, INGEST_ECORRUPT, j->toks[at[K_TYPE]].pos,
                    "unknown record type (expected batch, file or chunks)", "type");
    }
    /* Keys of other record types are unknown keys here: ignored. */
    for (int ki = 0; ki < K_COUNT; ki++) {
        if ((need & BIT(ki)) && !(seen & BIT(ki))) {
            r->err = ingest__fail(r->ctx, INGEST_ECORRUPT, "manifest %s:%llu:1: missing key \"%s\"", r->name,
                                  (unsigned long long)r->line, key_names[ki]);
            return r->err;
        }
    }

    /* Sequence rules before the fields, so a misplaced line says so. */
    if (rec->type == INGEST_MREC_HEADER) {
        if (r->have_header)
            return bad(r, INGEST_ECORRUPT, 0, "a second batch header");
    } else if (!r->have_header) {
        return bad(r, INGEST_ECORRUPT, 0, "the first line must be the batch header");
    }
    if (rec->type == INGEST_MREC_FILE && r->chunks_left > 0)
        return bad(r, INGEST_ECORRUPT, 0, "file record before the previous file's chunk list is complete");
    if (rec->type == INGEST_MREC_CHUNKS && r->chunks_left == 0)
        return bad(r, INGEST_ECORRUPT, 0, "chunks record without a file that needs more chunks");

    switch (rec->type) {
    case INGEST_MREC_HEADER: {
        uint64_t v;
        INGEST__FORWARD(get_u64(r, at[K_FORMAT], K_FORMAT, UINT32_MAX, &v));
        if (v != INGEST_MANIFEST_FORMAT)
            return badf(r, INGEST_EVERSION, j->toks[at[K_FORMAT]].pos,
                        v == 1 ? "unsupported manifest format 1 (keyed BLAKE2b chunk ids, before chunk id format 2; "
                                 "this reader knows format 2)"
                               : "unsupported manifest format (this reader knows format 2)",
                        "format");
        rec->format = (uint32_t)v;
        INGEST__FORWARD(get_name(r, at[K_DEVICE], K_DEVICE, &rec->device));
        INGEST__FORWARD(get_name(r, at[K_BATCH], K_BATCH, &rec->batch));
        INGEST__FORWARD(get_u64(r, at[K_FILES], K_FILES, UINT64_MAX, &rec->nfiles));
        INGEST__FORWARD(get_u64(r, at[K_BYTES], K_BYTES, UINT64_MAX, &rec->total_bytes));
        INGEST__FORWARD(get_i64(r, at[K_CREATED], K_CREATED, &rec->created_ns));
        if (seen & BIT(K_DIGEST)) {
            INGEST__FORWARD(get_hex(r, at[K_DIGEST], K_DIGEST, rec->digest));
            rec->has_digest = 1;
        }
        r->have_header = 1;
        r->nfiles = rec->nfiles;
        r->total_bytes = rec->total_bytes;
        return 0;
    }
    case INGEST_MREC_FILE: {
        uint64_t v;
        if (r->files_seen >= r->nfiles)
            return bad(r, INGEST_ECORRUPT, 0, "more file records than the header's \"files\"");
        INGEST__FORWARD(get_path(r, at[K_PATH], K_PATH, 0, &rec->path));
        INGEST__FORWARD(get_path(r, at[K_LANDED], K_LANDED, 1, &rec->landed));
        INGEST__FORWARD(get_u64(r, at[K_SIZE], K_SIZE, UINT64_MAX, &rec->size));
        INGEST__FORWARD(get_i64(r, at[K_MTIME], K_MTIME, &rec->mtime_ns));
        INGEST__FORWARD(get_u64(r, at[K_MODE], K_MODE, UINT32_MAX, &v));
        rec->mode = (uint32_t)v;
        INGEST__FORWARD(get_u64(r, at[K_VERSION], K_VERSION, UINT64_MAX, &rec->version));
        if (seen & BIT(K_HASH))
            INGEST__FORWARD(get_hex(r, at[K_HASH], K_HASH, rec->hash));
        else
            rec->omit_hash = 1; /* allowed by INGEST_MANIFEST_READ_HASH_OPTIONAL (the need check above) */
        INGEST__FORWARD(get_u64(r, at[K_NCHUNKS], K_NCHUNKS, UINT64_MAX, &rec->nchunks_total));
        if (seen & BIT(K_REFUSED)) {
            /* A file the core did not land: the reason, never empty; nothing landed, no version. */
            const char *why = NULL;
            size_t wl = 0;
            INGEST__FORWARD(get_str(r, at[K_REFUSED], K_REFUSED, &why, &wl));
            if (wl == 0 || wl > INGEST_MANIFEST_REFUSED_MAX || memchr(why, '\0', wl) != NULL)
                return badf(r, INGEST_ECORRUPT, j->toks[at[K_REFUSED]].pos,
                            "a refusal reason must be 1..1024 bytes without NUL", "refused");
            if (rec->landed[0] != '\0' || rec->version != 0)
                return badf(r, INGEST_ECORRUPT, j->toks[at[K_REFUSED]].pos,
                            "a refused file has landed \"\" and version 0", "refused");
            rec->refused = why;
        }
        /* Every chunk holds at least one byte. */
        if (rec->nchunks_total > rec->size)
            return badf(r, INGEST_ECORRUPT, j->toks[at[K_NCHUNKS]].pos, "more chunks than bytes", "nchunks");
        if (rec->size > 0 && rec->nchunks_total == 0)
            return badf(r, INGEST_ECORRUPT, j->toks[at[K_NCHUNKS]].pos, "a non-empty file needs chunks",
                        "nchunks");
        if (rec->size > r->total_bytes - r->bytes_seen)
            return badf(r, INGEST_ECORRUPT, j->toks[at[K_SIZE]].pos,
                        "file sizes add up to more than the header's \"bytes\"", "size");
        r->files_seen++;
        r->bytes_seen += rec->size;
        r->file_size = rec->size;
        r->file_sum = 0;
        r->chunks_left = rec->nchunks_total;
        return get_chunks(r, at[K_CHUNKS], rec);
    }
    default: {
        const ingest__json_tok *arr = &j->toks[at[K_CHUNKS]];
        if (arr->type == INGEST__JSON_ARRAY && arr->len == 0)
            return badf(r, INGEST_ECORRUPT, arr->pos, "empty chunks record", "chunks");
        return get_chunks(r, at[K_CHUNKS], rec);
    }
    }
}

int ingest_manifest_reader_next(ingest_manifest_reader *r, ingest_manifest_rec *rec)
{
    if (r == NULL || rec == NULL)
        return INGEST_EINVAL;
    if (r->err < 0)
        return r->err;
    memset(rec, 0, sizeof(*rec));
    if (r->done)
        return 0;
    const char *line = NULL;
    size_t len = 0;
    const int rc = next_line(r, &line, &len);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        INGEST__FORWARD(parse_line(r, line, len, rec));
        return 1;
    }
    /* End of input: everything announced must have arrived. */
    r->line++;
    memset(rec, 0, sizeof(*rec));
    if (!r->have_header)
        return bad(r, INGEST_ECORRUPT, 0, "empty manifest (no batch header)");
    if (r->chunks_left > 0)
        return bad(r, INGEST_ECORRUPT, 0, "end of manifest before the last file's chunk list is complete");
    if (r->files_seen != r->nfiles)
        return bad(r, INGEST_ECORRUPT, 0, "end of manifest: fewer file records than the header's \"files\"");
    if (r->bytes_seen != r->total_bytes)
        return bad(r, INGEST_ECORRUPT, 0, "end of manifest: file sizes do not add up to the header's \"bytes\"");
    r->done = 1;
    return 0;
}

void ingest_manifest_digest_add(ingest_filehash *h, const char *path, const uint8_t hash[INGEST_ID_BYTES])
{
    const size_t n = strlen(path);
    const uint8_t len[4] = { (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24) };
    ingest_filehash_update(h, len, sizeof len);
    ingest_filehash_update(h, path, n);
    ingest_filehash_update(h, hash, INGEST_ID_BYTES);
}

/* --- writer -------------------------------------------------------------- */

struct ingest_manifest_writer_s {
    ingest_ctx *ctx;
    ingest__buf out;
    int have_header;
    uint64_t nfiles, total_bytes, files_seen, bytes_seen;
};

int ingest_manifest_writer_create(ingest_ctx *ctx, ingest_manifest_writer **out)
{
    if (out == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: no output handle");
    *out = NULL;
    if (ctx == NULL)
        return INGEST_EINVAL;
    ingest_manifest_writer *w = ingest__calloc(ctx, 1, sizeof(*w));
    if (w == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "manifest writer: cannot allocate");
    w->ctx = ctx;
    ingest__buf_init(&w->out, ctx, WRITER_MAX);
    *out = w;
    return 0;
}

void ingest_manifest_writer_destroy(ingest_manifest_writer *w)
{
    if (w == NULL)
        return;
    ingest__buf_free(&w->out);
    ingest__free(w->ctx, w);
}

const void *ingest_manifest_writer_data(const ingest_manifest_writer *w, size_t *len)
{
    if (len != NULL)
        *len = w ? w->out.len : 0;
    return w && w->out.buf ? (const void *)w->out.buf : (const void *)"";
}

void ingest_manifest_writer_reset(ingest_manifest_writer *w)
{
    if (w != NULL)
        ingest__buf_reset(&w->out);
}

int ingest_manifest_writer_finish(const ingest_manifest_writer *w)
{
    if (w == NULL)
        return INGEST_EINVAL;
    if (!w->have_header)
        return ingest__fail(w->ctx, INGEST_EINVAL, "manifest writer: no batch header");
    if (w->files_seen != w->nfiles)
        return ingest__fail(w->ctx, INGEST_EINVAL, "manifest writer: %llu file records, header announced %llu",
                            (unsigned long long)w->files_seen, (unsigned long long)w->nfiles);
    if (w->bytes_seen != w->total_bytes)
        return ingest__fail(w->ctx, INGEST_EINVAL, "manifest writer: files hold %llu bytes, header announced %llu",
                            (unsigned long long)w->bytes_seen, (unsigned long long)w->total_bytes);
    return 0;
}

static int put(ingest__buf *b, const char *s) { return ingest__buf_append(b, s, strlen(s)); }

static int put_hex(ingest__buf *b, const uint8_t id[INGEST_ID_BYTES])
{
    char hex[2 * INGEST_ID_BYTES + 3];
    hex[0] = '"';
    ingest_to_hex(id, INGEST_ID_BYTES, hex + 1);
    hex[2 * INGEST_ID_BYTES + 1] = '"';
    return ingest__buf_append(b, hex, 2 * INGEST_ID_BYTES + 2);
}

static int put_chunks(ingest__buf *b, const ingest_manifest_chunk *c, size_t n, uint32_t push_max)
{
    INGEST__FORWARD(put(b, "\"chunks\":["));
    for (size_t i = 0; i < n; i++) {
        INGEST__FORWARD(put(b, i ? ",[" : "["));
        if (c[i].len > push_max) {
            INGEST__FORWARD(put_hex(b, c[i].id));
            INGEST__FORWARD(put(b, ","));
        }
        INGEST__FORWARD(ingest__json_put_u64(b, c[i].len));
        INGEST__FORWARD(put(b, "]"));
    }
    return put(b, "]}\n");
}

static int write_header(ingest_manifest_writer *w, const ingest_manifest_rec *rec)
{
    ingest__buf *b = &w->out;
    INGEST__FORWARD(put(b, "{\"type\":\"batch\",\"format\":"));
    INGEST__FORWARD(ingest__json_put_u64(b, INGEST_MANIFEST_FORMAT));
    INGEST__FORWARD(put(b, ",\"device\":"));
    INGEST__FORWARD(ingest__json_put_str(b, rec->device, strlen(rec->device)));
    INGEST__FORWARD(put(b, ",\"batch\":"));
    INGEST__FORWARD(ingest__json_put_str(b, rec->batch, strlen(rec->batch)));
    INGEST__FORWARD(put(b, ",\"files\":"));
    INGEST__FORWARD(ingest__json_put_u64(b, rec->nfiles));
    INGEST__FORWARD(put(b, ",\"bytes\":"));
    INGEST__FORWARD(ingest__json_put_u64(b, rec->total_bytes));
    INGEST__FORWARD(put(b, ",\"created_ns\":"));
    INGEST__FORWARD(ingest__json_put_i64(b, rec->created_ns));
    if (rec->has_digest) {
        INGEST__FORWARD(put(b, ",\"digest\":"));
        INGEST__FORWARD(put_hex(b, rec->digest));
    }
    return put(b, "}\n");
}

static int write_file(ingest__buf *b, const ingest_manifest_rec *rec, const char *landed)
{
    INGEST__FORWARD(put(b, "{\"type\":\"file\",\"path\":"));
    INGEST__FORWARD(ingest__json_put_str(b, rec->path, strlen(rec->path)));
    INGEST__FORWARD(put(b, ",\"landed\":"));
    INGEST__FORWARD(ingest__json_put_str(b, landed, strlen(landed)));
    INGEST__FORWARD(put(b, ",\"size\":"));
    INGEST__FORWARD(ingest__json_put_u64(b, rec->size));
    INGEST__FORWARD(put(b, ",\"mtime_ns\":"));
    INGEST__FORWARD(ingest__json_put_i64(b, rec->mtime_ns));
    INGEST__FORWARD(put(b, ",\"mode\":"));
    INGEST__FORWARD(ingest__json_put_u64(b, rec->mode));
    INGEST__FORWARD(put(b, ",\"version\":"));
    INGEST__FORWARD(ingest__json_put_u64(b, rec->version));
    if (!rec->omit_hash) {
        INGEST__FORWARD(put(b, ",\"hash\":"));
        INGEST__FORWARD(put_hex(b, rec->hash));
    }
    if (rec->refused != NULL) {
        INGEST__FORWARD(put(b, ",\"refused\":"));
        INGEST__FORWARD(ingest__json_put_str(b, rec->refused, strlen(rec->refused)));
    }
    INGEST__FORWARD(put(b, ",\"nchunks\":"));
    INGEST__FORWARD(ingest__json_put_u64(b, rec->nchunks));
    INGEST__FORWARD(put(b, ","));
    size_t done = rec->nchunks < INGEST_MANIFEST_CHUNKS_PER_LINE ? rec->nchunks : INGEST_MANIFEST_CHUNKS_PER_LINE;
    INGEST__FORWARD(put_chunks(b, rec->chunks, done, rec->push_max));
    while (done < rec->nchunks) {
        size_t n = rec->nchunks - done;
        if (n > INGEST_MANIFEST_CHUNKS_PER_LINE)
            n = INGEST_MANIFEST_CHUNKS_PER_LINE;
        INGEST__FORWARD(put(b, "{\"type\":\"chunks\","));
        INGEST__FORWARD(put_chunks(b, rec->chunks + done, n, rec->push_max));
        done += n;
    }
    return 0;
}

int ingest_manifest_writer_add(ingest_manifest_writer *w, const ingest_manifest_rec *rec)
{
    if (w == NULL || rec == NULL)
        return INGEST_EINVAL;
    ingest_ctx *const ctx = w->ctx;
    const char *what = NULL;
    if (rec->type == INGEST_MREC_HEADER) {
        if (w->have_header)
            return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: a second batch header");
        if (rec->format != 0 && rec->format != INGEST_MANIFEST_FORMAT)
            return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: format %u is not %d", rec->format,
                                INGEST_MANIFEST_FORMAT);
        if (rec->device == NULL || (what = check_name(rec->device, strlen(rec->device))) != NULL)
            return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: device: %s",
                                rec->device ? what : "missing");
        if (rec->batch == NULL || (what = check_name(rec->batch, strlen(rec->batch))) != NULL)
            return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: batch: %s", rec->batch ? what : "missing");
        const size_t mark = w->out.len;
        const int rc = write_header(w, rec);
        if (rc < 0) {
            w->out.len = mark;
            return rc;
        }
        w->have_header = 1;
        w->nfiles = rec->nfiles;
        w->total_bytes = rec->total_bytes;
        return 0;
    }
    if (rec->type != INGEST_MREC_FILE)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: record type %d (give HEADER or FILE)", rec->type);
    if (!w->have_header)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: file record before the batch header");
    if (w->files_seen >= w->nfiles)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: more files than the header's %llu",
                            (unsigned long long)w->nfiles);
    if (rec->path == NULL || (what = check_relpath(rec->path, strlen(rec->path), 0)) != NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: path: %s", rec->path ? what : "missing");
    const char *landed = rec->landed ? rec->landed : "";
    if ((what = check_relpath(landed, strlen(landed), 1)) != NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: landed: %s", what);
    if (rec->refused != NULL &&
        (rec->refused[0] == '\0' || strlen(rec->refused) > INGEST_MANIFEST_REFUSED_MAX || landed[0] != '\0' ||
         rec->version != 0))
        return ingest__fail(ctx, INGEST_EINVAL,
                            "manifest writer: a refused file needs a reason of 1..%u bytes, landed \"\" and version 0",
                            INGEST_MANIFEST_REFUSED_MAX);
    if (rec->nchunks_total != 0 && rec->nchunks_total != rec->nchunks)
        return ingest__fail(ctx, INGEST_EINVAL,
                            "manifest writer: nchunks_total %llu differs from the %u chunks given",
                            (unsigned long long)rec->nchunks_total, rec->nchunks);
    if (rec->nchunks > 0 && rec->chunks == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: no chunk array");
    uint64_t sum = 0;
    for (uint32_t i = 0; i < rec->nchunks; i++) {
        if (rec->chunks[i].len == 0 || rec->chunks[i].len > CHUNK_LEN_MAX)
            return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: chunk %u has length %u (1..67108864)", i,
                                rec->chunks[i].len);
        sum += rec->chunks[i].len;
    }
    if (sum != rec->size)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: chunk lengths add up to %llu, size is %llu",
                            (unsigned long long)sum, (unsigned long long)rec->size);
    if (rec->size > w->total_bytes - w->bytes_seen)
        return ingest__fail(ctx, INGEST_EINVAL, "manifest writer: file sizes exceed the header's bytes");
    const size_t mark = w->out.len;
    const int rc = write_file(&w->out, rec, landed);
    if (rc < 0) {
        w->out.len = mark;
        return rc;
    }
    w->files_seen++;
    w->bytes_seen += rec->size;
    return 0;
}
