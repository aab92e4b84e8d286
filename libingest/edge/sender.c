/*
 * The edge's batch builder: a streaming walk of the sources, chunking and
 * hashing of each file into a batch, the batch manifest, and re-reading
 * and encoding of the chunks the core wants.  See include/ingest/sender.h
 * and docs/sending.md.
 */
#include "../internal.h"
#include "ingest/chunkhash.h"
#include "ingest/manifest.h"
#include "ingest/sender.h"
#include "ingest/wire.h"
#include "sender_int.h"
#include "walkahead.h"
#include "../pathpolicy.h"

#include <dirent.h>
#include <sodium.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAX_FILES 10000u
#define DEFAULT_MAX_BYTES (1024ull * 1024u * 1024u)
#define READ_BUFFER_MIN (4u * 1024u)
#define READ_BUFFER_MAX (64u * 1024u * 1024u)
#define DIR_ARENA_MAX ((size_t)1 << 30) /* bytes of names in one directory */
#define PATH_CAP (INGEST_MANIFEST_PATH_MAX + 2)

/* ------------------------------------------------------------------ */
/* Types */

typedef struct source {
    char *name;
    char *path;
    size_t name_len;
    int fd; /* root directory, open from the time the walk reaches it */
    int ship_links; /* symlinks INGEST_SENDER_SYMLINKS_SHIP: a symlink is an entry, its target its content */
} source;

/* One open directory of the walk: its names, sorted, and a cursor. */
typedef struct frame {
    int fd;
    char *arena;
    char **names;
    size_t n, i;
    size_t prefix_len; /* bytes of s->path that name this directory, with its '/' */
} frame;

typedef struct ingest_sender_batch_s batch_t;

/* What the chunk callback of the pipeline works on: the current file. */
typedef struct file_ctx {
    ingest_sender *s;
    batch_t *b;
    ingest_filehash *fh;
    const char *path;
    uint64_t total;
    int rc; /* a failure of ours inside the callback (fatal) */
} file_ctx;

/* Names stat'ed ahead per block during a walk (shared with the helper thread). */
#define STAT_BLOCK 1024
/* getdents64 buffer of the walking thread */
#define DENTS_BUF (64u * 1024u)

struct ingest_sender_s {
    ingest_ctx *ctx;
    char *device;
    char *prefix;
    uint64_t seq;
    uint8_t key[INGEST_KEY_BYTES];
    ingest_chunk_params params;
    ingest_codec *codec;
    int own_codec;
    int trimmed; /* ingest_sender_trim: no walk or chunking any more, its batches still good */
    source *srcs;
    size_t nsrc;
    uint64_t max_files, max_bytes;
    int recheck; /* INGEST_SENDER_RECHECK_* */
    size_t rbuf;
    void (*on_skip)(void *, const char *, int);
    int (*want_file)(void *, const char *, const ingest_sender_stat *);
    void (*on_read)(void *, const char *, uint64_t);
    void (*on_refuse)(void *, const char *, const ingest_sender_stat *, const char *);
    void *ud;
    /* the receiver's landing rules (ingest_sender_set_landing), set from any thread */
    pthread_mutex_t land_mu;
    ingest_ctx *land_ctx; /* the checks' own messages: the walk's thread must not write the caller's ctx */
    char *land_layout; /* NULL: none known */
    uint32_t land_path_max, land_name_max;

    /* the walk */
    size_t cur_src; /* == nsrc when done */
    int depth;      /* frames in use */
    frame stack[INGEST_SENDER_MAX_DEPTH + 1];
    /* Stat results of the next names of the deepest frame, fetched ahead on two threads. */
    ingest__walkahead *wa;
    uint64_t list_seq; /* tags of listings asked of the helper */
    uint64_t pre_tag;  /* the listing asked for: entry pre_index of the frame at depth pre_depth */
    int pre_depth;
    size_t pre_index;
    uint8_t *dents;    /* DENTS_BUF */
    struct {
        int depth;        /* frame they belong to (0: none) */
        size_t from, to;  /* names [from, to) of that frame */
        struct stat st[STAT_BLOCK];
        int err[STAT_BLOCK];
    } *sc;
    char path[PATH_CAP]; /* "{source}/{relative path}" of the current entry */
    int peeked;          /* the entry at the top frame's cursor is a regular file, counted */
    /* a whole-file hash keyed once (ingest_filehash_init with key), copied to start each file's:
     * a byte array, as the struct is not allocated at its 64-byte alignment */
    uint8_t fh0[sizeof(ingest_filehash)];
    /* next_batch_id of seq land_bid_seq + 1 (0: none yet), for landing_refuses */
    char land_bid[INGEST_WIRE_BATCH_ID_MAX + 32];
    uint64_t land_bid_seq;
    struct stat peek_st;
    int peek_dirfd;          /* where the peeked file is: directory fd and name in it */
    const char *peek_name;
    /* list mode (ingest_sender_scan_list): the given manifest paths, borrowed */
    const char *const *list;
    size_t nlist, ilist;
    char relbuf[PATH_CAP];
    /* list mode: the directory of the last path, opened beneath its source with no symlink followed on the
     * way (lp_fd, -1: none), kept for the next path of the same directory */
    int lp_fd;
    size_t lp_src;
    char lp_dir[PATH_CAP];

    ingest_chunkhash *pipe; /* threads != 1: chunk+hash on two threads */
    file_ctx fc;
    ingest_chunker *chunker; /* threads == 1: serial */
    uint8_t *buf; /* rbuf + params.max, serial only */
    size_t bufcap;
    ingest_sender_stats st;
};

typedef struct bfile {
    size_t path_off; /* in b->paths */
    size_t src;
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    uint32_t mode;
    dev_t dev;
    ino_t ino;
    uint8_t hash[INGEST_ID_BYTES];
    uint64_t first_chunk, nchunks;
    int64_t cache_off; /* its bytes in b->small, -1: not kept (read again to send) */
} bfile;

typedef struct bdrop {
    size_t path_off;
    int reason;
} bdrop;

struct ingest_sender_batch_s {
    ingest_sender *s;
    ingest_ctx *ctx;
    char id[INGEST_SENDER_PREFIX_MAX + 24];
    int64_t created_ns;
    bfile *files;
    size_t nfiles, capfiles;
    ingest__buf paths; /* NUL-terminated paths of files and drops */
    ingest_manifest_chunk *chunks;
    uint64_t *offs;
    size_t nchunks, capchunks;
    uint64_t bytes, unique;
    bdrop *drops;
    size_t ndrops, capdrops;
    /* files the core refused alone (ingest_sender_batch_refuse): per file, NULL until the first */
    struct brefusal {
        char *why;
        int code;
    } *refusals;
    size_t nrefused;
    int *rootfd; /* per source, dup of the sender's, -1 when unused */
    /* chunk access: the batch's own reader (ingest_sender_batch_chunk), with
     * rd.file == SIZE_MAX for none; encoder threads bring their own */
    ingest__sender_reader rd;
    uint64_t hint_file;     /* the file hint is about (UINT64_MAX: none) */
    ingest_codec_hint hint; /* adaptive encoding of that file's chunks */
    ingest__buf small; /* the bytes of small files as chunked (SENDER_SMALL_CACHE) */
    ingest_manifest_writer *mw;
    unsigned mw_flags; /* INGEST_SENDER_MANIFEST_* mw was written with */
    uint32_t mw_push;  /* and its push_max */
};

static int on_chunk(void *ud, const ingest_chunk_info *c);

/* ------------------------------------------------------------------ */
/* Helpers */

/* Files up to this size are chunked and hashed on the calling thread. */
#define SENDER_SMALL_FILE (1024u * 1024u)
/*
 * A batch keeps the bytes of files up to INGEST_SENDER_GROUP_CHUNK_MAX as
 * they were chunked, up to this many bytes in all, and sends them from
 * there: no second open, read and check per small file.  What is sent is
 * then exactly the version that was hashed (a later change is a later
 * version).
 */
#define SENDER_SMALL_CACHE (2u * 1024u * 1024u)


static int name_ok(const char *p, size_t maxlen)
{
    const size_t n = strlen(p);
    if (n > maxlen)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Grow an array of n elements of size sz to hold one more. */
static int grow(ingest_ctx *ctx, void **arr, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return 0;
    const size_t ncap = *cap ? *cap * 2 : 16;
    if (ncap > SIZE_MAX / sz)
        return ingest__fail(ctx, INGEST_ENOMEM, "sender: array of %zu entries too large", ncap);
    void *p = ingest__malloc(ctx, ncap * sz);
    if (p == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory (%zu entries)", ncap);
    if (n)
        memcpy(p, *arr, n * sz);
    ingest__free(ctx, *arr);
    *arr = p;
    *cap = ncap;
    return 0;
}

/* Count and log a file passed over (what: the log's words, NULL: the reason's own), and tell on_skip. */
static void report_as(ingest_sender *s, const char *path, int reason, int err, const char *what_said)
{
    uint64_t *ctr = NULL;
    const char *what = "skipped";
    int level = INGEST_LOG_WARN;
    switch (reason) {
    case INGEST_SKIP_UNREADABLE: ctr = &s->st.skipped_unreadable; what = "unreadable"; break;
    case INGEST_SKIP_SPECIAL: ctr = &s->st.skipped_special; what = "not a regular file"; level = INGEST_LOG_DEBUG; break;
    case INGEST_SKIP_VANISHED: ctr = &s->st.skipped_vanished; what = "vanished"; level = INGEST_LOG_INFO; break;
    case INGEST_SKIP_NAME: ctr = &s->st.skipped_name; what = "path too long"; break;
    case INGEST_SKIP_DIR: ctr = &s->st.skipped_dirs; what = "directory not walked"; break;
    /* said by the embedder (on_skip), which can say it once per directory rather than on every walk */
    case INGEST_SKIP_DEPTH: ctr = &s->st.skipped_dirs; what = "directory too deep, not walked"; level = INGEST_LOG_DEBUG; break;
    case INGEST_SKIP_CHANGED: ctr = &s->st.dropped_changed; what = "changed while chunked, retry later"; level = INGEST_LOG_INFO; break;
    case INGEST_SKIP_TOOBIG: ctr = &s->st.skipped_toobig; what = "too many chunks"; break;
    case INGEST_SKIP_LINK: ctr = &s->st.skipped_links; what = "symlink target cannot be shipped (1..4095 bytes, its lstat size)"; break;
    default: break;
    }
    if (ctr)
        (*ctr)++;
    if (what_said != NULL)
        what = what_said;
    if (err)
        ingest__log(s->ctx, level, "sender: %s: %s (%s)", path, what, strerror(err));
    else
        ingest__log(s->ctx, level, "sender: %s: %s", path, what);
    if (s->on_skip)
        s->on_skip(s->ud, path, reason);
}

static void report(ingest_sender *s, const char *path, int reason, int err) { report_as(s, path, reason, err, NULL); }

/* A symlink, FIFO, socket or device (its st_mode): counted by kind, and reported as INGEST_SKIP_SPECIAL. */
static void report_special(ingest_sender *s, const char *path, mode_t mode)
{
    if (S_ISLNK(mode))
        s->st.skipped_symlinks++;
    else if (S_ISFIFO(mode))
        s->st.skipped_fifos++;
    else if (S_ISSOCK(mode))
        s->st.skipped_sockets++;
    else if (S_ISCHR(mode) || S_ISBLK(mode))
        s->st.skipped_devices++;
    report(s, path, INGEST_SKIP_SPECIAL, 0);
}

/* ------------------------------------------------------------------ */
/* Sender */

int ingest_sender_create(ingest_ctx *ctx, const ingest_sender_opts *o, ingest_sender **out)
{
    int rc = 0;
    ingest_sender *s = NULL;
    if (out == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "sender: out is NULL");
    *out = NULL;
    if (ctx == NULL || o == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "sender: ctx and opts are required");
    /* the one id rule of the wire, authorized_devices, manifests and landing (pathpolicy.h) */
    if (o->device == NULL || !ingest_wire_id_valid(o->device, strlen(o->device)))
        return ingest__fail(ctx, INGEST_EINVAL,
                            "sender: device id must be 1..%d bytes of [A-Za-z0-9._-], starting with a letter or digit",
                            INGEST_MANIFEST_NAME_MAX);
    if (o->dedup_key == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "sender: dedup key is required");
    if (o->sources == NULL || o->nsources == 0 || o->nsources > INGEST_SENDER_MAX_SOURCES)
        return ingest__fail(ctx, INGEST_EINVAL, "sender: 1..%d sources are required", INGEST_SENDER_MAX_SOURCES);
    for (size_t i = 0; i < o->nsources; i++) {
        const ingest_sender_source *src = &o->sources[i];
        if (src->name == NULL || src->path == NULL || src->name[0] == '\0' || src->path[0] == '\0')
            return ingest__fail(ctx, INGEST_EINVAL, "sender: sources[%zu]: name and path are required", i);
        if (!name_ok(src->name, INGEST_SENDER_SOURCE_NAME_MAX) || strcmp(src->name, ".") == 0 ||
            strcmp(src->name, "..") == 0)
            return ingest__fail(ctx, INGEST_EINVAL,
                                "sender: sources[%zu]: name '%s' must be 1..%d bytes of [A-Za-z0-9._-], not . or ..",
                                i, src->name, INGEST_SENDER_SOURCE_NAME_MAX);
        for (size_t j = 0; j < i; j++)
            if (strcmp(o->sources[j].name, src->name) == 0)
                return ingest__fail(ctx, INGEST_EINVAL, "sender: sources[%zu]: duplicate name '%s'", i, src->name);
    }
    if (o->batch_prefix != NULL && (o->batch_prefix[0] == '.' || !name_ok(o->batch_prefix, INGEST_SENDER_PREFIX_MAX)))
        return ingest__fail(ctx, INGEST_EINVAL,
                            "sender: batch prefix must be 0..%d bytes of [A-Za-z0-9._-], not starting with '.'",
                            INGEST_SENDER_PREFIX_MAX);
    if (o->threads < 0 || o->threads > 2)
        return ingest__fail(ctx, INGEST_EINVAL, "sender: threads %d (0 or 2: chunk+hash pipeline, 1: serial)",
                            o->threads);
    if (o->read_buffer != 0 && (o->read_buffer < READ_BUFFER_MIN || o->read_buffer > READ_BUFFER_MAX))
        return ingest__fail(ctx, INGEST_EINVAL, "sender: read_buffer %u out of %u..%u", o->read_buffer,
                            READ_BUFFER_MIN, READ_BUFFER_MAX);

    ingest_chunk_params params = o->chunking;
    if (params.min == 0 && params.avg == 0 && params.max == 0)
        ingest_chunk_params_default(&params);
    rc = ingest_chunk_params_check(ctx, &params);
    if (rc < 0)
        return rc;

    s = ingest__calloc(ctx, 1, sizeof(*s));
    if (s == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory");
    s->ctx = ctx;
    pthread_mutex_init(&s->land_mu, NULL);
    s->depth = 0;
    s->cur_src = o->nsources; /* no walk until ingest_sender_scan */
    for (size_t i = 0; i < sizeof(s->stack) / sizeof(s->stack[0]); i++)
        s->stack[i].fd = -1;
    memcpy(s->key, o->dedup_key, INGEST_KEY_BYTES);
    {
        ingest_filehash fh0;
        ingest_filehash_init(&fh0, s->key);
        memcpy(s->fh0, &fh0, sizeof(fh0));
    }
    s->params = params;
    s->max_files = o->max_files ? o->max_files : DEFAULT_MAX_FILES;
    s->max_bytes = o->max_bytes ? o->max_bytes : DEFAULT_MAX_BYTES;
    s->rbuf = o->read_buffer ? o->read_buffer : INGEST_SENDER_READ_BUFFER_DEFAULT;
    s->seq = o->batch_seq;
    s->on_skip = o->on_skip;
    s->on_read = o->on_read;
    s->on_refuse = o->on_refuse;
    s->want_file = o->want_file;
    s->recheck = o->recheck;
    s->ud = o->userdata;

    s->device = ingest__strdup(ctx, o->device);
    if (o->batch_prefix != NULL) {
        s->prefix = ingest__strdup(ctx, o->batch_prefix);
    } else {
        char tmp[32];
        snprintf(tmp, sizeof(tmp), "%lld-", (long long)time(NULL));
        s->prefix = ingest__strdup(ctx, tmp);
    }
    s->srcs = ingest__calloc(ctx, o->nsources, sizeof(*s->srcs));
    if (s->device == NULL || s->prefix == NULL || s->srcs == NULL) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory");
        goto fail;
    }
    for (size_t i = 0; i < o->nsources; i++) {
        s->srcs[i].fd = -1;
        s->srcs[i].name = ingest__strdup(ctx, o->sources[i].name);
        s->srcs[i].path = ingest__strdup(ctx, o->sources[i].path);
        s->nsrc = i + 1;
        if (s->srcs[i].name == NULL || s->srcs[i].path == NULL) {
            rc = ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory");
            goto fail;
        }
        s->srcs[i].name_len = strlen(s->srcs[i].name);
        s->srcs[i].ship_links = o->sources[i].symlinks == INGEST_SENDER_SYMLINKS_SHIP;
    }
    s->cur_src = s->nsrc;
    s->lp_fd = -1;

    if (o->codec != NULL) {
        s->codec = o->codec;
    } else {
        rc = ingest_codec_create(ctx, o->level ? o->level : 1, &s->codec);
        if (rc < 0)
            goto fail;
        s->own_codec = 1;
    }
    /* The serial path always exists: with two threads it still takes small
     * files, for which handing chunks to another thread costs more than it saves. */
    {
        s->sc = ingest__calloc(ctx, 1, sizeof(*s->sc));
        s->dents = ingest__malloc(ctx, DENTS_BUF);
        if (s->sc == NULL || s->dents == NULL) {
            rc = ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory (stat block)");
            goto fail;
        }
        rc = ingest__wa_create(ctx, &s->wa);
        if (rc < 0)
            goto fail;
        rc = ingest_chunker_create(ctx, &s->params, &s->chunker);
        if (rc < 0)
            goto fail;
        s->bufcap = s->rbuf + s->params.max;
        s->buf = ingest__malloc(ctx, s->bufcap);
        if (s->buf == NULL) {
            rc = ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory (read buffer of %zu bytes)", s->bufcap);
            goto fail;
        }
    }
    if (o->threads != 1) {
        ingest_chunkhash_opts co;
        memset(&co, 0, sizeof(co));
        co.params = &s->params;
        co.key = s->key;
        co.threads = 2;
        rc = ingest_chunkhash_create(ctx, &co, on_chunk, &s->fc, &s->pipe);
        if (rc < 0)
            goto fail;
    }
    *out = s;
    return 0;
fail:
    ingest_sender_destroy(s);
    return rc;
}

static void frame_free(ingest_sender *s, frame *f)
{
    close_fd(&f->fd);
    ingest__free(s->ctx, f->arena);
    ingest__free(s->ctx, f->names);
    f->arena = NULL;
    f->names = NULL;
    f->n = f->i = 0;
}

static void walk_reset(ingest_sender *s)
{
    if (s->wa != NULL)
        ingest__wa_drop(s->wa); /* it may name a directory of a frame */
    while (s->depth > 0)
        frame_free(s, &s->stack[--s->depth]);
    if (s->sc != NULL)
        s->sc->depth = 0;
    for (size_t i = 0; i < s->nsrc; i++)
        close_fd(&s->srcs[i].fd);
    s->peeked = 0;
    s->cur_src = s->nsrc;
    s->list = NULL;
    s->nlist = s->ilist = 0;
    close_fd(&s->lp_fd);
}

void ingest_sender_destroy(ingest_sender *s)
{
    if (s == NULL)
        return;
    ingest_ctx *ctx = s->ctx;
    walk_reset(s);
    for (size_t i = 0; i < s->nsrc; i++) {
        ingest__free(ctx, s->srcs[i].name);
        ingest__free(ctx, s->srcs[i].path);
    }
    ingest__free(ctx, s->srcs);
    ingest__wa_destroy(s->wa);
    ingest__free(ctx, s->sc);
    ingest__free(ctx, s->dents);
    if (s->own_codec)
        ingest_codec_destroy(s->codec);
    ingest_chunker_destroy(s->chunker);
    ingest_chunkhash_destroy(s->pipe);
    ingest__free(ctx, s->buf);
    ingest__free(ctx, s->device);
    ingest__free(ctx, s->prefix);
    ingest__free(ctx, s->land_layout);
    ingest_ctx_destroy(s->land_ctx);
    pthread_mutex_destroy(&s->land_mu);
    ingest__free(ctx, s);
}

/* The id the next batch gets ("{prefix}{seq}", seq at least 6 digits): the landing rules check with it. */
static void next_batch_id(const ingest_sender *s, char *out, size_t cap)
{
    snprintf(out, cap, "%s%06" PRIu64, s->prefix, s->seq);
}

int ingest_sender_set_landing(ingest_sender *s, const char *layout, uint32_t path_max, uint32_t name_max)
{
    char *copy = NULL;
    if (layout != NULL) {
        char why[200];
        if (ingest__path_check_layout(layout, why, sizeof why) != 0)
            return ingest__fail(s->ctx, INGEST_EINVAL, "sender: landing rules: layout \"%.200s\": %s", layout, why);
        if (path_max == 0 || path_max >= INGEST_PATH_LANDED_MAX || name_max == 0 || name_max > INGEST_PATH_NAME_MAX)
            return ingest__fail(s->ctx, INGEST_EINVAL,
                                "sender: landing rules: paths of %u bytes (1..%u), names of %u (1..%u)",
                                (unsigned)path_max, INGEST_PATH_LANDED_MAX - 1, (unsigned)name_max,
                                INGEST_PATH_NAME_MAX);
        if ((copy = ingest__strdup(s->ctx, layout)) == NULL)
            return ingest__fail(s->ctx, INGEST_ENOMEM, "sender: out of memory");
    }
    pthread_mutex_lock(&s->land_mu);
    if (copy != NULL && s->land_ctx == NULL && (s->land_ctx = ingest_ctx_create(NULL)) == NULL) {
        pthread_mutex_unlock(&s->land_mu);
        ingest__free(s->ctx, copy);
        return ingest__fail(s->ctx, INGEST_ENOMEM, "sender: out of memory");
    }
    char *old = s->land_layout;
    s->land_layout = copy;
    s->land_path_max = path_max;
    s->land_name_max = name_max;
    pthread_mutex_unlock(&s->land_mu);
    ingest__free(s->ctx, old);
    return 0;
}

/*
 * The peeked file against the receiver's landing rules, with the batch id
 * it would get: 1 refused (counted, reported), 0 fine.  The same code as
 * the core's (pathpolicy.h), so the message is the one the core would send.
 */
static int landing_refuses(ingest_sender *s)
{
    pthread_mutex_lock(&s->land_mu);
    if (s->land_layout == NULL) {
        pthread_mutex_unlock(&s->land_mu);
        return 0;
    }
    char out[INGEST_PATH_LANDED_MAX];
    if (s->land_bid_seq != s->seq + 1) { /* one snprintf per batch, not per file */
        next_batch_id(s, s->land_bid, sizeof s->land_bid);
        s->land_bid_seq = s->seq + 1;
    }
    const int rc = ingest__path_landed(s->land_ctx, s->land_layout, s->device, s->land_bid, s->path,
                                       ingest_time_ns(&s->peek_st.st_mtim), s->land_name_max, out, (size_t)s->land_path_max + 1);
    char why[INGEST__ERRMSG_MAX];
    if (rc != 0)
        snprintf(why, sizeof why, "%s", ingest_ctx_errmsg(s->land_ctx));
    pthread_mutex_unlock(&s->land_mu);
    if (rc == 0)
        return 0;
    s->st.refused++;
    ingest__log(s->ctx, INGEST_LOG_INFO, "sender: %s: refused at the edge (the receiver's landing rules): %s", s->path,
                why);
    if (s->on_refuse != NULL) {
        const struct stat *st = &s->peek_st;
        const ingest_sender_stat ws = { (uint64_t)st->st_size, ingest_time_ns(&st->st_mtim), ingest_time_ns(&st->st_ctim),
                                        (uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint32_t)st->st_mode };
        s->on_refuse(s->ud, s->path, &ws, why);
    }
    if (s->on_skip != NULL)
        s->on_skip(s->ud, s->path, INGEST_SKIP_REFUSED);
    return 1;
}

uint64_t ingest_sender_next_seq(const ingest_sender *s) { return s->seq; }

void ingest_sender_get_stats(const ingest_sender *s, ingest_sender_stats *st) { *st = s->st; }

size_t ingest_sender_chunk_bound(const ingest_sender *s) { return ingest_codec_bound(s->params.max); }

void ingest_sender_trim(ingest_sender *s)
{
    if (s == NULL)
        return;
    walk_reset(s);
    ingest__wa_destroy(s->wa);
    s->wa = NULL;
    ingest__free(s->ctx, s->sc);
    s->sc = NULL;
    ingest__free(s->ctx, s->dents);
    s->dents = NULL;
    ingest_chunker_destroy(s->chunker);
    s->chunker = NULL;
    ingest_chunkhash_destroy(s->pipe); /* its threads end */
    s->pipe = NULL;
    ingest__free(s->ctx, s->buf);
    s->buf = NULL;
    s->bufcap = 0;
    s->trimmed = 1;
}

int ingest_sender_scan(ingest_sender *s)
{
    if (s->trimmed)
        return ingest__fail(s->ctx, INGEST_EINVAL, "sender: scan after ingest_sender_trim");
    walk_reset(s);
    s->cur_src = 0;
    return 0;
}

int ingest_sender_scan_list(ingest_sender *s, const char *const *paths, size_t n)
{
    if (s->trimmed)
        return ingest__fail(s->ctx, INGEST_EINVAL, "sender: scan_list after ingest_sender_trim");
    walk_reset(s);
    if (n > 0 && paths == NULL)
        return ingest__fail(s->ctx, INGEST_EINVAL, "sender: scan_list: NULL path list");
    s->list = paths;
    s->nlist = n;
    s->ilist = 0;
    return 0;
}

/* ------------------------------------------------------------------ */
/* The walk */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* d_type of name i of a frame: the byte before the name in the arena. */
static unsigned char name_type(const frame *f, size_t i)
{
    return (unsigned char)f->names[i][-1];
}

/* Append the getdents64 records in buf[0, len) to the arena (type byte, name, NUL) and offsets. */
static int frame_parse(const uint8_t *buf, size_t len, ingest__buf *arena, ingest__buf *offs, int *err)
{
    size_t pos = 0;
    while (pos + offsetof(struct dirent64, d_name) < len) {
        struct dirent64 de;
        memcpy(&de, buf + pos, offsetof(struct dirent64, d_name));
        if (de.d_reclen <= offsetof(struct dirent64, d_name) || de.d_reclen > len - pos) {
            *err = EIO;
            return INGEST_EIO;
        }
        const char *nm = (const char *)buf + pos + offsetof(struct dirent64, d_name);
        const size_t room = de.d_reclen - offsetof(struct dirent64, d_name);
        const size_t nlen = strnlen(nm, room);
        pos += de.d_reclen;
        if (nlen == room) {
            *err = EIO;
            return INGEST_EIO;
        }
        if (nm[0] == '.' && (nm[1] == '\0' || (nm[1] == '.' && nm[2] == '\0')))
            continue;
        const size_t off = arena->len + 1;
        int rc = ingest__buf_append(offs, &off, sizeof(off));
        if (rc == 0)
            rc = ingest__buf_append(arena, &de.d_type, 1);
        if (rc == 0)
            rc = ingest__buf_append(arena, nm, nlen + 1);
        if (rc == INGEST_ETOOBIG)
            *err = E2BIG;
        if (rc < 0)
            return rc;
    }
    return 0;
}

/*
 * Read the names of directory fd (taken over by f) into f, sorted, each
 * with its d_type in the byte before it.  pre[0, prelen) are records the
 * helper read ahead from fd (pre_eof: they were all).  Returns 0,
 * INGEST_ENOMEM (fatal), or INGEST_EIO/INGEST_ETOOBIG with errno in *err
 * (the directory is skipped).
 */
static int frame_load(ingest_sender *s, frame *f, int fd, int *err, const uint8_t *pre, size_t prelen, int pre_eof)
{
    ingest_ctx *ctx = s->ctx;
    ingest__buf arena, offs;
    int rc = 0;
    *err = 0;
    memset(f, 0, sizeof(*f));
    f->fd = fd;
    ingest__buf_init(&arena, ctx, DIR_ARENA_MAX);
    ingest__buf_init(&offs, ctx, (size_t)INGEST_SENDER_DIR_MAX_ENTRIES * sizeof(size_t));

    if (prelen > 0 && (rc = frame_parse(pre, prelen, &arena, &offs, err)) < 0)
        goto out;
    while (!pre_eof) {
        const ssize_t r = getdents64(fd, s->dents, DENTS_BUF);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            *err = errno;
            rc = INGEST_EIO;
            goto out;
        }
        if (r == 0)
            break;
        if ((rc = frame_parse(s->dents, (size_t)r, &arena, &offs, err)) < 0)
            goto out;
    }
    f->n = offs.len / sizeof(size_t);
    f->names = ingest__calloc(ctx, f->n ? f->n : 1, sizeof(char *));
    if (f->names == NULL) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory listing a directory of %zu entries", f->n);
        goto out;
    }
    for (size_t i = 0; i < f->n; i++) {
        size_t off;
        memcpy(&off, offs.buf + i * sizeof(size_t), sizeof(off));
        f->names[i] = (char *)arena.buf + off;
    }
    qsort(f->names, f->n, sizeof(char *), cmp_names);
    f->arena = (char *)arena.buf; /* taken over */
    arena.buf = NULL;
    arena.cap = arena.len = 0;
out:
    ingest__buf_free(&arena);
    ingest__buf_free(&offs);
    if (rc < 0) {
        ingest__free(ctx, f->names);
        f->names = NULL;
        f->n = 0;
        f->fd = -1; /* the caller still owns fd */
    }
    return rc;
}

/*
 * Push directory fd (owned from now on) whose path is s->path[0, prefix_len);
 * pre[0, prelen) are records the helper listed ahead from fd.
 */
static int walk_push(ingest_sender *s, int fd, size_t prefix_len, const uint8_t *pre, size_t prelen, int pre_eof)
{
    int err = 0;
    frame *f = &s->stack[s->depth];
    const int rc = frame_load(s, f, fd, &err, pre, prelen, pre_eof);
    if (rc == INGEST_ENOMEM) {
        close(fd);
        return rc;
    }
    if (rc < 0) {
        close(fd);
        s->path[prefix_len ? prefix_len - 1 : 0] = '\0';
        report(s, s->path, INGEST_SKIP_DIR, err);
        return 0;
    }
    f->prefix_len = prefix_len;
    s->depth++;
    if (s->sc != NULL)
        s->sc->depth = 0; /* the block belonged to the parent */
    return 0;
}

/*
 * Enter the directory at entry f->i - 1 of frame f (the deepest), whose
 * path is s->path with its '/' at plen - 1: from the listing the helper read
 * ahead when it is this one, else opened and listed here.  Meanwhile the
 * helper lists f's next subdirectory, which the walk enters next unless this
 * one has subdirectories of its own (then that listing is thrown away: one
 * wasted listing per directory that is not a leaf).
 */
static int walk_enter(ingest_sender *s, frame *f, size_t plen)
{
    const size_t idx = f->i - 1;
    const int depth = s->depth;
    int fd = -1, err = 0, eof = 0;
    const uint8_t *pre = NULL;
    size_t prelen = 0;
    const uint64_t pending = ingest__wa_pending(s->wa);
    if (pending != 0 && pending == s->pre_tag && s->pre_depth == depth && s->pre_index == idx) {
        (void)ingest__wa_take(s->wa, &fd, &err, &pre, &prelen, &eof);
    } else {
        if (pending != 0)
            ingest__wa_drop(s->wa);
        fd = openat(f->fd, f->names[idx], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        err = errno;
    }
    if (fd < 0) {
        report(s, s->path, err == ENOENT ? INGEST_SKIP_VANISHED : INGEST_SKIP_DIR, err);
        return 0;
    }
    for (size_t j = idx + 1; j < f->n; j++) {
        const unsigned char t = name_type(f, j);
        if (t == DT_UNKNOWN)
            break; /* this file system does not say: no listing ahead */
        if (t != DT_DIR)
            continue;
        const uint64_t tag = ++s->list_seq;
        if (ingest__wa_list(s->wa, f->fd, f->names[j], tag) == 0) {
            s->pre_tag = tag;
            s->pre_depth = depth;
            s->pre_index = j;
        }
        break;
    }
    s->path[plen - 1] = '/';
    s->path[plen] = '\0';
    return walk_push(s, fd, plen, pre, prelen, eof);
}

/*
 * Position the walk on the next regular file (not consumed): returns 1 with
 * the top frame's cursor on it and s->path its manifest path, 0 when the
 * walk is done, < 0 on a fatal failure.
 */
static int list_peek(ingest_sender *s);

/*
 * Stat the next STAT_BLOCK names of frame f (the deepest) on both threads:
 * a walk is mostly path lookups in the kernel, and two cores do them about
 * twice as fast.  The results are what the walk would have seen a moment
 * later; the file is checked again when it is opened.
 */
static void stat_ahead(ingest_sender *s, frame *f)
{
    const size_t from = f->i, n = f->n - from < STAT_BLOCK ? f->n - from : STAT_BLOCK;
    ingest__wa_stat(s->wa, f->fd, f->names + from, n, s->sc->st, s->sc->err);
    s->sc->depth = s->depth;
    s->sc->from = from;
    s->sc->to = from + n;
}

/* fstatat of name i of frame f, from the block stat'ed ahead when there is one. */
static int walk_stat(ingest_sender *s, frame *f, struct stat *st)
{
    if (s->sc != NULL) {
        if (s->sc->depth != s->depth || f->i < s->sc->from || f->i >= s->sc->to)
            stat_ahead(s, f);
        const size_t k = f->i - s->sc->from;
        *st = s->sc->st[k];
        errno = s->sc->err[k];
        return errno == 0 ? 0 : -1;
    }
    return fstatat(f->fd, f->names[f->i], st, AT_SYMLINK_NOFOLLOW);
}

static int walk_peek(ingest_sender *s)
{
    if (s->peeked)
        return 1;
    if (s->list != NULL)
        return list_peek(s);
    for (;;) {
        if (s->depth == 0) {
            if (s->cur_src >= s->nsrc)
                return 0;
            source *src = &s->srcs[s->cur_src];
            close_fd(&src->fd);
            src->fd = open(src->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            int dfd = src->fd >= 0 ? dup(src->fd) : -1;
            if (dfd < 0) {
                const int e = errno;
                report(s, src->name, INGEST_SKIP_DIR, e);
                s->cur_src++;
                continue;
            }
            memcpy(s->path, src->name, src->name_len);
            s->path[src->name_len] = '/';
            s->path[src->name_len + 1] = '\0';
            INGEST__FORWARD(walk_push(s, dfd, src->name_len + 1, NULL, 0, 0));
            if (s->depth == 0)
                s->cur_src++;
            continue;
        }
        frame *f = &s->stack[s->depth - 1];
        if (f->i >= f->n) {
            if (s->pre_depth == s->depth && ingest__wa_pending(s->wa) != 0)
                ingest__wa_drop(s->wa); /* it names an entry of f */
            frame_free(s, f);
            s->depth--;
            if (s->sc != NULL)
                s->sc->depth = 0;
            if (s->depth == 0)
                s->cur_src++;
            continue;
        }
        const char *nm = f->names[f->i];
        const size_t nlen = strlen(nm);
        if (f->prefix_len + nlen >= INGEST_MANIFEST_PATH_MAX) {
            memcpy(s->path + f->prefix_len, nm, INGEST_MANIFEST_PATH_MAX - f->prefix_len);
            s->path[INGEST_MANIFEST_PATH_MAX] = '\0';
            f->i++;
            report(s, s->path, INGEST_SKIP_NAME, ENAMETOOLONG);
            continue;
        }
        /* every byte but '/' and NUL may be in a name (readdir gives no others): the
         * manifest escapes control bytes and invalid UTF-8 losslessly (docs/manifest.md) */
        memcpy(s->path + f->prefix_len, nm, nlen + 1);
        struct stat st;
        if (walk_stat(s, f, &st) != 0) {
            const int e = errno;
            f->i++;
            report(s, s->path, e == ENOENT ? INGEST_SKIP_VANISHED : INGEST_SKIP_UNREADABLE, e);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            f->i++;
            if (s->depth >= (int)(sizeof(s->stack) / sizeof(s->stack[0]))) {
                report(s, s->path, INGEST_SKIP_DEPTH, 0);
                continue;
            }
            INGEST__FORWARD(walk_enter(s, f, f->prefix_len + nlen + 1));
            continue;
        }
        if (!S_ISREG(st.st_mode) && !(S_ISLNK(st.st_mode) && s->srcs[s->cur_src].ship_links)) {
            f->i++;
            report_special(s, s->path, st.st_mode);
            continue;
        }
        s->st.files_seen++;
        if (s->want_file != NULL) {
            const ingest_sender_stat ws = { (uint64_t)st.st_size, ingest_time_ns(&st.st_mtim), ingest_time_ns(&st.st_ctim),
                                            (uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint32_t)st.st_mode };
            const int want = s->want_file(s->ud, s->path, &ws);
            if (want < 0)
                return ingest__fail(s->ctx, want, "sender: want_file refused %s", s->path);
            if (want == 0) {
                f->i++;
                s->st.files_unchanged++;
                continue;
            }
        }
        s->peek_st = st;
        s->peek_dirfd = f->fd;
        s->peek_name = nm;
        s->peeked = 1;
        return 1;
    }
}

/*
 * List mode: the next listed path that names a regular file under one of
 * the sources ("{source}/{relative path}"); others are reported and passed
 * over.  want_file is not called: the caller chose the files.
 */
static int list_peek(ingest_sender *s)
{
    while (s->ilist < s->nlist) {
        const char *p = s->list[s->ilist];
        const size_t plen = p != NULL ? strlen(p) : 0;
        if (p == NULL || plen > INGEST_MANIFEST_PATH_MAX) {
            s->ilist++;
            report(s, p != NULL ? "(path too long)" : "(null)", INGEST_SKIP_NAME, 0);
            continue;
        }
        memcpy(s->path, p, plen + 1);
        size_t si = s->nsrc;
        for (size_t i = 0; i < s->nsrc; i++)
            if (plen > s->srcs[i].name_len + 1 && memcmp(p, s->srcs[i].name, s->srcs[i].name_len) == 0 &&
                p[s->srcs[i].name_len] == '/') {
                si = i;
                break;
            }
        if (si == s->nsrc) {
            /* (a journaled file of a source since taken out of the configuration) */
            s->ilist++;
            report_as(s, p, INGEST_SKIP_VANISHED, 0, "not under a configured source (its source was removed from "
                                                     "the configuration?): not shipped");
            continue;
        }
        const char *rel = p + s->srcs[si].name_len + 1;
        int bad = rel[0] == '/' || strstr(rel, "//") != NULL;
        for (size_t k = 0; rel[k] && !bad; k++)
            if ((rel[k] == '.' && (k == 0 || rel[k - 1] == '/') && (rel[k + 1] == '/' || rel[k + 1] == '\0' ||
                                                                    (rel[k + 1] == '.' && (rel[k + 2] == '/' || rel[k + 2] == '\0')))))
                bad = 1;
        if (bad) {
            s->ilist++;
            report_as(s, p, INGEST_SKIP_NAME, 0, "not a path under its source ('.', '..', '//' or a leading '/')");
            continue;
        }
        source *src = &s->srcs[si];
        if (src->fd < 0) {
            src->fd = open(src->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (src->fd < 0) {
                const int e = errno;
                s->ilist++;
                report(s, p, e == ENOENT ? INGEST_SKIP_VANISHED : INGEST_SKIP_DIR, e);
                continue;
            }
        }
        /*
         * Its directory, reached from the source without following a symlink on the way: a directory of the
         * path swapped for a link since the path was named (to a tree outside the source) is not entered.
         * The walk opens each directory itself; a path named by an event is looked at so here.
         */
        const char *last = strrchr(rel, '/');
        const size_t dl = last != NULL ? (size_t)(last - rel) : 0;
        last = last != NULL ? last + 1 : rel;
        if (s->lp_fd < 0 || s->lp_src != si || strlen(s->lp_dir) != dl || memcmp(s->lp_dir, rel, dl) != 0) {
            close_fd(&s->lp_fd);
            const char *ignored;
            s->lp_fd = ingest__open_parent_beneath(src->fd, rel, &ignored);
            if (s->lp_fd < 0) {
                const int e = errno;
                s->ilist++;
                if (e == ELOOP || e == EXDEV)
                    report_as(s, p, INGEST_SKIP_VANISHED, e,
                              "a directory on its path is now a symlink, which is not followed: not shipped");
                else
                    report(s, p, e == ENOENT || e == ENOTDIR ? INGEST_SKIP_VANISHED : INGEST_SKIP_UNREADABLE, e);
                continue;
            }
            s->lp_src = si;
            memcpy(s->lp_dir, rel, dl);
            s->lp_dir[dl] = '\0';
        }
        struct stat st;
        if (fstatat(s->lp_fd, last, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            const int e = errno;
            s->ilist++;
            report(s, p, e == ENOENT || e == ENOTDIR ? INGEST_SKIP_VANISHED : INGEST_SKIP_UNREADABLE, e);
            continue;
        }
        if (!S_ISREG(st.st_mode) && !(S_ISLNK(st.st_mode) && src->ship_links)) {
            s->ilist++;
            report_special(s, p, st.st_mode);
            continue;
        }
        s->st.files_seen++;
        memcpy(s->relbuf, last, strlen(last) + 1);
        s->cur_src = si;
        s->peek_st = st;
        s->peek_dirfd = s->lp_fd;
        s->peek_name = s->relbuf;
        s->peeked = 1;
        return 1;
    }
    return 0;
}

static void walk_advance(ingest_sender *s)
{
    if (s->list != NULL)
        s->ilist++;
    else
        s->stack[s->depth - 1].i++;
    s->peeked = 0;
}

/* ------------------------------------------------------------------ */
/* Batches */

static int batch_add_path(ingest_sender_batch *b, const char *path, size_t *off)
{
    *off = b->paths.len;
    return ingest__buf_append(&b->paths, path, strlen(path) + 1);
}

static int batch_drop(ingest_sender_batch *b, const char *path, int reason)
{
    INGEST__FORWARD(grow(b->ctx, (void **)&b->drops, &b->capdrops, b->ndrops, sizeof(*b->drops)));
    size_t off;
    INGEST__FORWARD(batch_add_path(b, path, &off));
    b->drops[b->ndrops].path_off = off;
    b->drops[b->ndrops].reason = reason;
    b->ndrops++;
    return 0;
}

static int batch_push_chunk(ingest_sender_batch *b, const uint8_t id[INGEST_ID_BYTES], size_t len, uint64_t off)
{
    ingest_ctx *ctx = b->ctx;
    if (b->nchunks == b->capchunks) {
        size_t cap = b->capchunks;
        const size_t n = b->nchunks;
        INGEST__FORWARD(grow(ctx, (void **)&b->chunks, &cap, n, sizeof(*b->chunks)));
        uint64_t *o = ingest__malloc(ctx, cap * sizeof(uint64_t));
        if (o == NULL)
            return ingest__fail(ctx, INGEST_ENOMEM, "sender: out of memory (%zu chunks)", cap);
        if (n)
            memcpy(o, b->offs, n * sizeof(uint64_t));
        ingest__free(ctx, b->offs);
        b->offs = o;
        b->capchunks = cap;
    }
    ingest_manifest_chunk *c = &b->chunks[b->nchunks];
    memcpy(c->id, id, INGEST_ID_BYTES);
    c->len = (uint32_t)len;
    b->offs[b->nchunks] = off;
    b->nchunks++;
    return 0;
}

/* The whole-file hash covers the file's chunk ids in order (docs/manifest.md). */
static int batch_add_chunk(ingest_sender_batch *b, ingest_filehash *fh, const uint8_t *data, size_t len,
                           uint64_t off)
{
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_id(b->s->key, data, len, id);
    ingest_filehash_update(fh, id, INGEST_ID_BYTES);
    return batch_push_chunk(b, id, len, off);
}

/* Chunks from the pipeline, in stream order, on the caller's thread. */
static int on_chunk(void *ud, const ingest_chunk_info *c)
{
    file_ctx *fc = ud;
    ingest_filehash_update(fc->fh, c->id, INGEST_ID_BYTES);
    const int rc = batch_push_chunk(fc->b, c->id, c->len, c->offset);
    if (rc < 0) {
        fc->rc = rc;
        return rc;
    }
    fc->total += c->len;
    if (fc->s->on_read)
        fc->s->on_read(fc->s->ud, fc->path, fc->total);
    return 0;
}

/*
 * Chunk and hash the open file through the serial loop: returns 0 with
 * *total, 1 for a read error (errno in *err; skip the file), < 0 fatal.
 */
static int chunk_serial(ingest_sender *s, ingest_sender_batch *b, int fd, const char *path, ingest_filehash *fh,
                        uint64_t size, uint64_t *total_out, int *err)
{
    ingest_ctx *ctx = s->ctx;
    int rc = 0;
    ingest_chunker_reset(s->chunker);
    uint8_t *const buf = s->buf;
    size_t start = 0, end = 0;
    uint64_t total = 0, chunk_off = 0;
    for (;;) {
        if (s->bufcap - end < s->rbuf) {
            /* Keep the pending chunk (< params.max bytes) and make room. */
            memmove(buf, buf + start, end - start);
            end -= start;
            start = 0;
            if (s->bufcap - end < s->rbuf)
                return ingest__fail(ctx, INGEST_EINVAL, "sender: %s: chunker passed max without a cut", path);
        }
        /* A file read to its size is not read again for the end: the fstat after
         * chunking (batch_add_file) catches one that grew meanwhile. */
        const ssize_t n = total == size && total > 0 ? 0 : read(fd, buf + end, s->rbuf);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            *err = errno;
            return 1;
        }
        if (n == 0)
            break;
        size_t scan = end;
        end += (size_t)n;
        total += (uint64_t)n;
        while (scan < end) {
            size_t used = 0;
            const int cut = ingest_chunker_scan(s->chunker, buf + scan, end - scan, &used);
            scan += used;
            if (cut != 1)
                break;
            rc = batch_add_chunk(b, fh, buf + start, scan - start, chunk_off);
            if (rc < 0)
                return rc;
            chunk_off += scan - start;
            start = scan;
        }
        if (s->on_read)
            s->on_read(s->ud, path, total);
    }
    const uint64_t tail = ingest_chunker_finish(s->chunker);
    if (tail != end - start)
        return ingest__fail(ctx, INGEST_EINVAL, "sender: %s: chunker left %" PRIu64 " bytes pending, expected %zu",
                            path, tail, end - start);
    if (tail > 0) {
        rc = batch_add_chunk(b, fh, buf + start, end - start, chunk_off);
        if (rc < 0)
            return rc;
    }
    *total_out = total;
    return 0;
}

/* The same through the two-thread pipeline. */
static int chunk_pipe(ingest_sender *s, ingest_sender_batch *b, int fd, const char *path, ingest_filehash *fh,
                      uint64_t *total_out, int *err)
{
    s->fc.s = s;
    s->fc.b = b;
    s->fc.fh = fh;
    s->fc.path = path;
    s->fc.total = 0;
    s->fc.rc = 0;
    errno = 0;
    const int rc = ingest_chunkhash_fd(s->pipe, fd);
    const int e = errno;
    s->fc.b = NULL;
    s->fc.fh = NULL;
    if (s->fc.rc < 0)
        return s->fc.rc;
    if (rc == INGEST_ENOMEM || rc == INGEST_EINVAL)
        return rc;
    if (rc < 0) {
        *err = e ? e : EIO;
        return 1; /* a read error: skip the file */
    }
    *total_out = s->fc.total;
    return 0;
}

static int same_stat(const struct stat *a, const struct stat *b)
{
    return a->st_size == b->st_size && a->st_dev == b->st_dev && a->st_ino == b->st_ino &&
           ingest_time_ns(&a->st_mtim) == ingest_time_ns(&b->st_mtim) && ingest_time_ns(&a->st_ctim) == ingest_time_ns(&b->st_ctim);
}

/*
 * Record the entry just chunked (chunks [first, b->nchunks), its version
 * st) as file b->nfiles of the batch; keep, when not NULL, holds its bytes
 * (st_size of them), kept for sending while the batch's budget allows.
 * 0 or < 0 (fatal).
 */
static int batch_record(ingest_sender *s, ingest_sender_batch *b, const struct stat *st, ingest_filehash *fh,
                        size_t first, const uint8_t *keep)
{
    ingest_ctx *ctx = s->ctx;
    INGEST__FORWARD(grow(ctx, (void **)&b->files, &b->capfiles, b->nfiles, sizeof(*b->files)));
    bfile *bf = &b->files[b->nfiles];
    memset(bf, 0, sizeof(*bf));
    INGEST__FORWARD(batch_add_path(b, s->path, &bf->path_off));
    bf->src = s->cur_src;
    if (b->rootfd[bf->src] < 0) {
        b->rootfd[bf->src] = dup(s->srcs[bf->src].fd);
        if (b->rootfd[bf->src] < 0)
            return ingest__fail(ctx, ingest__errno(errno), "sender: dup: %s", strerror(errno));
    }
    bf->size = (uint64_t)st->st_size;
    bf->mtime_ns = ingest_time_ns(&st->st_mtim);
    bf->ctime_ns = ingest_time_ns(&st->st_ctim);
    bf->mode = (uint32_t)st->st_mode;
    bf->dev = st->st_dev;
    bf->ino = st->st_ino;
    ingest_filehash_final(fh, bf->hash);
    bf->first_chunk = first;
    bf->nchunks = b->nchunks - first;
    bf->cache_off = -1;
    if (keep != NULL && bf->size > 0 && b->small.len + bf->size <= SENDER_SMALL_CACHE) {
        const size_t at = b->small.len;
        if (ingest__buf_append(&b->small, keep, (size_t)bf->size) == 0)
            bf->cache_off = (int64_t)at;
    }
    b->nfiles++;
    b->bytes += bf->size;
    s->st.files_batched++;
    s->st.bytes_batched += bf->size;
    if (S_ISLNK(st->st_mode))
        s->st.symlinks_batched++;
    return 0;
}

/* Chunk and hash data[0, len) held in memory (a symlink's target) into b, as chunk_serial would a file. */
static int chunk_mem(ingest_sender *s, ingest_sender_batch *b, ingest_filehash *fh, const uint8_t *data, size_t len)
{
    ingest_chunker_reset(s->chunker);
    size_t start = 0, scan = 0;
    while (scan < len) {
        size_t used = 0;
        const int cut = ingest_chunker_scan(s->chunker, data + scan, len - scan, &used);
        scan += used;
        if (cut != 1)
            break;
        INGEST__FORWARD(batch_add_chunk(b, fh, data + start, scan - start, start));
        start = scan;
    }
    const uint64_t tail = ingest_chunker_finish(s->chunker);
    if (tail != len - start)
        return ingest__fail(s->ctx, INGEST_EINVAL, "sender: %s: chunker left %" PRIu64 " bytes pending, expected %zu",
                            s->path, tail, len - start);
    if (tail > 0)
        INGEST__FORWARD(batch_add_chunk(b, fh, data + start, len - start, start));
    return 0;
}

/*
 * The peeked entry is a symlink of a source that ships them: its target
 * (readlinkat; never followed, never opened) is its content.  Returns as
 * batch_add_file.
 */
static int batch_add_link(ingest_sender *s, ingest_sender_batch *b)
{
    const char *path = s->path;
    const size_t first = b->nchunks;
    struct stat st0, st1;
    uint8_t target[INGEST_SENDER_LINK_MAX + 1];
    if (fstatat(s->peek_dirfd, s->peek_name, &st0, AT_SYMLINK_NOFOLLOW) != 0) {
        const int e = errno;
        report(s, path, e == ENOENT ? INGEST_SKIP_VANISHED : INGEST_SKIP_UNREADABLE, e);
        return 0;
    }
    if (!S_ISLNK(st0.st_mode)) {
        /* replaced since the walk saw it: the next walk takes what is there now */
        INGEST__FORWARD(batch_drop(b, path, INGEST_SKIP_CHANGED));
        report(s, path, INGEST_SKIP_CHANGED, 0);
        return 0;
    }
    if (b->nfiles > 0 && b->bytes + (uint64_t)st0.st_size > s->max_bytes)
        return 1;
    const ssize_t n = readlinkat(s->peek_dirfd, s->peek_name, (char *)target, sizeof(target));
    if (n < 0) {
        const int e = errno;
        report(s, path, e == ENOENT ? INGEST_SKIP_VANISHED : INGEST_SKIP_UNREADABLE, e);
        return 0;
    }
    if (fstatat(s->peek_dirfd, s->peek_name, &st1, AT_SYMLINK_NOFOLLOW) != 0 || !same_stat(&st0, &st1)) {
        INGEST__FORWARD(batch_drop(b, path, INGEST_SKIP_CHANGED));
        report(s, path, INGEST_SKIP_CHANGED, 0);
        return 0;
    }
    if (n == 0 || (size_t)n > INGEST_SENDER_LINK_MAX || (uint64_t)n != (uint64_t)st0.st_size) {
        if ((size_t)n > INGEST_SENDER_LINK_MAX)
            ingest__log(s->ctx, INGEST_LOG_WARN, "sender: %s: symlink target of more than %d bytes (lstat size "
                        "%lld): not shipped", path, INGEST_SENDER_LINK_MAX, (long long)st0.st_size);
        else
            ingest__log(s->ctx, INGEST_LOG_WARN, "sender: %s: symlink target of %zd bytes, lstat size %lld: not "
                        "shipped (a target is 1..%d bytes, its lstat size)", path, n, (long long)st0.st_size,
                        INGEST_SENDER_LINK_MAX);
        report(s, path, INGEST_SKIP_LINK, 0);
        return 0;
    }
    ingest_filehash fh;
    memcpy(&fh, s->fh0, sizeof(fh)); /* ingest_filehash_init(&fh, s->key) */
    int rc = chunk_mem(s, b, &fh, target, (size_t)n);
    if (rc == 0)
        rc = batch_record(s, b, &st0, &fh, first, target);
    if (rc < 0)
        b->nchunks = first;
    return rc;
}

/*
 * Chunk the peeked file into b.  Returns 0 when it was handled (added,
 * skipped or dropped: consume it), 1 when it no longer fits the batch
 * (leave it for the next), < 0 on a fatal failure.
 */
static int batch_add_file(ingest_sender *s, ingest_sender_batch *b)
{
    const char *path = s->path;
    int rc = 0;
    const size_t first = b->nchunks;
    if (landing_refuses(s))
        return 0; /* never opened */
    if (S_ISLNK(s->peek_st.st_mode))
        return batch_add_link(s, b); /* never opened */

    int fd = openat(s->peek_dirfd, s->peek_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        const int e = errno;
        if (e == ELOOP) /* replaced by a symlink since the walk saw it */
            report_special(s, path, S_IFLNK);
        else
            report(s, path, e == ENOENT ? INGEST_SKIP_VANISHED : INGEST_SKIP_UNREADABLE, e);
        return 0;
    }
    struct stat st0, st1;
    if (fstat(fd, &st0) != 0) {
        const int e = errno;
        report(s, path, INGEST_SKIP_UNREADABLE, e);
        goto out;
    }
    if (!S_ISREG(st0.st_mode)) {
        report_special(s, path, st0.st_mode);
        goto out;
    }
    if (b->nfiles > 0 && b->bytes + (uint64_t)st0.st_size > s->max_bytes) {
        rc = 1;
        goto out;
    }

    ingest_filehash fh;
    memcpy(&fh, s->fh0, sizeof(fh)); /* ingest_filehash_init(&fh, s->key) */
    uint64_t total = 0;
    int err = 0;
    rc = s->pipe && (uint64_t)st0.st_size > SENDER_SMALL_FILE ? chunk_pipe(s, b, fd, path, &fh, &total, &err)
                                                              : chunk_serial(s, b, fd, path, &fh,
                                                                             (uint64_t)st0.st_size, &total, &err);
    if (rc < 0)
        goto fatal;
    if (rc == 1) {
        rc = 0;
        b->nchunks = first;
        report(s, path, INGEST_SKIP_UNREADABLE, err);
        goto out;
    }
    if (fstat(fd, &st1) != 0 || !same_stat(&st0, &st1) || total != (uint64_t)st0.st_size) {
        b->nchunks = first;
        rc = batch_drop(b, path, INGEST_SKIP_CHANGED);
        if (rc < 0)
            goto fatal;
        report(s, path, INGEST_SKIP_CHANGED, 0);
        goto out;
    }
    if (b->nchunks - first > UINT32_MAX) {
        b->nchunks = first;
        report(s, path, INGEST_SKIP_TOOBIG, 0);
        goto out;
    }
    {
        /* chunk_serial read a small file whole into s->buf with one read: keep it for sending */
        const uint64_t sz = (uint64_t)st0.st_size;
        const int keep = sz <= INGEST_SENDER_GROUP_CHUNK_MAX && sz <= s->rbuf && !(s->pipe && sz > SENDER_SMALL_FILE);
        rc = batch_record(s, b, &st0, &fh, first, keep ? s->buf : NULL);
        if (rc < 0)
            goto fatal;
    }
out:
    close(fd);
    return rc;
fatal:
    b->nchunks = first;
    close(fd);
    return rc;
}

static int cmp_ids(const void *a, const void *b) { return memcmp(a, b, INGEST_ID_BYTES); }

static int batch_count_unique(ingest_sender_batch *b)
{
    b->unique = 0;
    if (b->nchunks == 0)
        return 0;
    uint8_t *ids = ingest__calloc(b->ctx, b->nchunks, INGEST_ID_BYTES);
    if (ids == NULL)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "sender: out of memory (%zu chunk ids)", b->nchunks);
    for (size_t i = 0; i < b->nchunks; i++)
        memcpy(ids + i * INGEST_ID_BYTES, b->chunks[i].id, INGEST_ID_BYTES);
    qsort(ids, b->nchunks, INGEST_ID_BYTES, cmp_ids);
    b->unique = 1;
    for (size_t i = 1; i < b->nchunks; i++)
        if (memcmp(ids + (i - 1) * INGEST_ID_BYTES, ids + i * INGEST_ID_BYTES, INGEST_ID_BYTES) != 0)
            b->unique++;
    ingest__free(b->ctx, ids);
    return 0;
}

void ingest_sender_batch_destroy(ingest_sender_batch *b)
{
    if (b == NULL)
        return;
    ingest_ctx *ctx = b->ctx;
    ingest__sender_reader_free(&b->rd);
    if (b->rootfd != NULL)
        for (size_t i = 0; i < b->s->nsrc; i++)
            close_fd(&b->rootfd[i]);
    ingest__free(ctx, b->rootfd);
    if (b->refusals != NULL)
        for (size_t i = 0; i < b->nfiles; i++)
            ingest__free(ctx, b->refusals[i].why);
    ingest__free(ctx, b->refusals);
    ingest__free(ctx, b->files);
    ingest__free(ctx, b->chunks);
    ingest__free(ctx, b->offs);
    ingest__free(ctx, b->drops);
    ingest__buf_free(&b->paths);
    ingest__buf_free(&b->small);
    ingest_manifest_writer_destroy(b->mw);
    ingest__free(ctx, b);
}

static ingest_sender_batch *batch_new(ingest_sender *s)
{
    ingest_sender_batch *b = ingest__calloc(s->ctx, 1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->s = s;
    b->ctx = s->ctx;
    ingest__sender_reader_init(&b->rd, s->codec, s->ctx);
    b->hint_file = UINT64_MAX;
    ingest__buf_init(&b->paths, s->ctx, SIZE_MAX / 2);
    ingest__buf_init(&b->small, s->ctx, SENDER_SMALL_CACHE);
    b->rootfd = ingest__malloc(s->ctx, s->nsrc * sizeof(int));
    if (b->rootfd == NULL) {
        ingest__free(s->ctx, b);
        return NULL;
    }
    for (size_t i = 0; i < s->nsrc; i++)
        b->rootfd[i] = -1;
    return b;
}

int ingest_sender_next_batch(ingest_sender *s, ingest_sender_batch **out)
{
    int rc = 0;
    *out = NULL;
    if (s->trimmed)
        return ingest__fail(s->ctx, INGEST_EINVAL, "sender: next_batch after ingest_sender_trim");
    ingest_sender_batch *b = batch_new(s);
    if (b == NULL)
        return ingest__fail(s->ctx, INGEST_ENOMEM, "sender: out of memory");
    for (;;) {
        rc = walk_peek(s);
        if (rc < 0)
            goto fail;
        if (rc == 0)
            break;
        if (b->nfiles >= s->max_files)
            break;
        if (b->nfiles > 0 && b->bytes + (uint64_t)s->peek_st.st_size > s->max_bytes)
            break;
        rc = batch_add_file(s, b);
        if (rc < 0)
            goto fail;
        if (rc == 1)
            break;
        walk_advance(s);
    }
    if (b->nfiles == 0) {
        ingest_sender_batch_destroy(b);
        return 0;
    }
    rc = batch_count_unique(b);
    if (rc < 0)
        goto fail;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    b->created_ns = ingest_time_ns(&now);
    next_batch_id(s, b->id, sizeof(b->id));
    s->seq++;
    s->st.batches++;
    *out = b;
    return 1;
fail:
    ingest_sender_batch_destroy(b);
    return rc;
}

const char *ingest_sender_batch_id(const ingest_sender_batch *b) { return b->id; }

int ingest_sender_batch_manifest(ingest_sender_batch *b, const void **ptr, size_t *len)
{
    return ingest_sender_batch_manifest_ex(b, 0, ptr, len);
}

int ingest_sender_batch_manifest_ex(ingest_sender_batch *b, unsigned flags, const void **ptr, size_t *len)
{
    return ingest_sender_batch_manifest_push(b, flags, 0, NULL, NULL, ptr, len);
}

/* File f is pushed: at most push_max bytes, some chunk, a path this device never shipped. */
static bool file_pushed(const ingest_sender_batch *b, const bfile *f, uint32_t push_max,
                        int (*fresh)(void *, const char *), void *ud)
{
    if (f->nchunks == 0 || f->size > push_max)
        return false;
    return fresh == NULL || fresh(ud, (const char *)b->paths.buf + f->path_off) == 1;
}

int ingest_sender_batch_manifest_push(ingest_sender_batch *b, unsigned flags, uint32_t push_max,
                                      int (*fresh)(void *ud, const char *path), void *ud, const void **ptr,
                                      size_t *len)
{
    bool *pushed = NULL;
    int rc = 0;
    if (!(flags & INGEST_SENDER_MANIFEST_NO_HASH))
        push_max = 0; /* a pushed file's hash is the receiver's to work out */
    if (b->mw != NULL && (b->mw_flags != flags || b->mw_push != push_max)) {
        ingest_manifest_writer_destroy(b->mw);
        b->mw = NULL;
    }
    if (b->mw == NULL) {
        ingest_manifest_writer *w = NULL;
        INGEST__FORWARD(ingest_manifest_writer_create(b->ctx, &w));
        ingest_manifest_rec rec;
        memset(&rec, 0, sizeof(rec));
        rec.type = INGEST_MREC_HEADER;
        rec.format = INGEST_MANIFEST_FORMAT;
        rec.device = b->s->device;
        rec.batch = b->id;
        rec.nfiles = b->nfiles;
        rec.total_bytes = b->bytes;
        rec.created_ns = b->created_ns;
        bool pushing = false;
        if (push_max > 0 && b->nfiles > 0) {
            if ((pushed = ingest__calloc(b->ctx, b->nfiles, sizeof *pushed)) == NULL) {
                ingest_manifest_writer_destroy(w);
                return ingest__fail(b->ctx, INGEST_ENOMEM, "sender: out of memory for the manifest of %s", b->id);
            }
            for (size_t i = 0; i < b->nfiles; i++)
                pushing |= pushed[i] = file_pushed(b, &b->files[i], push_max, fresh, ud);
        }
        if (pushing) {
            /* the replay check's stand-in for the hashes the receiver cannot know before the bytes arrive */
            ingest_filehash dg;
            ingest_filehash_init(&dg, b->s->key);
            for (size_t i = 0; i < b->nfiles; i++)
                ingest_manifest_digest_add(&dg, (const char *)b->paths.buf + b->files[i].path_off, b->files[i].hash);
            ingest_filehash_final(&dg, rec.digest);
            rec.has_digest = 1;
        }
        rc = ingest_manifest_writer_add(w, &rec);
        for (size_t i = 0; rc == 0 && i < b->nfiles; i++) {
            const bfile *f = &b->files[i];
            memset(&rec, 0, sizeof(rec));
            rec.type = INGEST_MREC_FILE;
            rec.path = (const char *)b->paths.buf + f->path_off;
            rec.landed = "";
            rec.size = f->size;
            rec.mtime_ns = f->mtime_ns;
            rec.mode = f->mode;
            rec.version = 0;
            memcpy(rec.hash, f->hash, INGEST_ID_BYTES);
            rec.omit_hash = (flags & INGEST_SENDER_MANIFEST_NO_HASH) != 0;
            if (pushed != NULL && pushed[i])
                rec.push_max = push_max; /* every chunk of it: none is longer than the file */
            rec.nchunks_total = f->nchunks;
            rec.chunks = f->nchunks ? &b->chunks[f->first_chunk] : NULL;
            rec.nchunks = (uint32_t)f->nchunks;
            rc = ingest_manifest_writer_add(w, &rec);
        }
        ingest__free(b->ctx, pushed);
        if (rc < 0) {
            ingest_manifest_writer_destroy(w);
            return rc;
        }
        b->mw = w;
        b->mw_flags = flags;
        b->mw_push = push_max;
    }
    *ptr = ingest_manifest_writer_data(b->mw, len);
    return 0;
}

void ingest_sender_batch_stats_get(const ingest_sender_batch *b, ingest_sender_batch_stats *st)
{
    st->files = b->nfiles;
    st->bytes = b->bytes;
    st->chunks = b->nchunks;
    st->unique_chunks = b->unique;
    st->dropped = b->ndrops;
    st->refused = b->nrefused;
}

int ingest_sender_batch_refuse(ingest_sender_batch *b, uint64_t i, int code, const char *reason)
{
    if (b == NULL || reason == NULL)
        return INGEST_EINVAL;
    if (i >= b->nfiles)
        return ingest__fail(b->ctx, INGEST_EINVAL, "sender: batch %s has no file %" PRIu64 " (it has %zu)", b->id, i,
                            b->nfiles);
    if (b->refusals == NULL) {
        b->refusals = ingest__calloc(b->ctx, b->nfiles, sizeof(*b->refusals));
        if (b->refusals == NULL)
            return ingest__fail(b->ctx, INGEST_ENOMEM, "sender: out of memory");
    }
    if (b->refusals[i].why != NULL)
        return ingest__fail(b->ctx, INGEST_EINVAL, "sender: batch %s: file %" PRIu64 " was refused already", b->id, i);
    b->refusals[i].why = ingest__strdup(b->ctx, reason[0] != '\0' ? reason : "refused");
    if (b->refusals[i].why == NULL)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "sender: out of memory");
    b->refusals[i].code = code < 0 ? code : INGEST_EINVAL;
    b->nrefused++;
    return 0;
}

int ingest_sender_batch_file(const ingest_sender_batch *b, uint64_t i, ingest_sender_file_info *info)
{
    if (i >= b->nfiles)
        return ingest__fail(b->ctx, INGEST_ENOTFOUND, "sender: batch %s has no file %" PRIu64, b->id, i);
    const bfile *f = &b->files[i];
    info->path = (const char *)b->paths.buf + f->path_off;
    info->size = f->size;
    info->mtime_ns = f->mtime_ns;
    info->ctime_ns = f->ctime_ns;
    info->mode = f->mode;
    memcpy(info->hash, f->hash, INGEST_ID_BYTES);
    info->first_chunk = f->first_chunk;
    info->nchunks = f->nchunks;
    info->dev = (uint64_t)f->dev;
    info->ino = (uint64_t)f->ino;
    info->refused = b->refusals != NULL ? b->refusals[i].why : NULL;
    info->refused_code = b->refusals != NULL ? b->refusals[i].code : 0;
    return 0;
}

int ingest_sender_batch_chunk_file(const ingest_sender_batch *b, uint64_t ci, uint64_t *file_index)
{
    if (ci >= b->nchunks)
        return ingest__fail(b->ctx, INGEST_ENOTFOUND, "sender: batch %s has no chunk %" PRIu64, b->id, ci);
    /* (No cache of the last file: encoder threads ask at once.) */
    /* Last file whose first chunk is <= ci: empty files share the first
     * chunk index of the next file, so the last one among equals owns it. */
    size_t lo = 0, hi = b->nfiles;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (b->files[mid].first_chunk <= ci)
            lo = mid + 1;
        else
            hi = mid;
    }
    *file_index = lo - 1;
    return 0;
}

int ingest_sender_batch_chunk_info(const ingest_sender_batch *b, uint64_t ci, uint8_t id[INGEST_ID_BYTES],
                                   uint32_t *len, uint64_t *offset)
{
    if (ci >= b->nchunks)
        return ingest__fail(b->ctx, INGEST_ENOTFOUND, "sender: batch %s has no chunk %" PRIu64, b->id, ci);
    if (id)
        memcpy(id, b->chunks[ci].id, INGEST_ID_BYTES);
    if (len)
        *len = b->chunks[ci].len;
    if (offset)
        *offset = b->offs[ci];
    return 0;
}

int ingest_sender_batch_dropped(const ingest_sender_batch *b, uint64_t i, const char **path, int *reason)
{
    if (i >= b->ndrops)
        return ingest__fail(b->ctx, INGEST_ENOTFOUND, "sender: batch %s has no dropped file %" PRIu64, b->id, i);
    *path = (const char *)b->paths.buf + b->drops[i].path_off;
    *reason = b->drops[i].reason;
    return 0;
}

/* Make r->fd the open file fi, checking it is still the file chunked. */
static int batch_open(ingest_sender_batch *b, ingest__sender_reader *r, size_t fi)
{
    if (r->file == fi && r->fd >= 0)
        return 0;
    close_fd(&r->fd);
    r->file = SIZE_MAX;
    const bfile *f = &b->files[fi];
    const char *path = (const char *)b->paths.buf + f->path_off;
    const char *rel = path + b->s->srcs[f->src].name_len + 1;
    const int fd = openat(b->rootfd[f->src], rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        const int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: vanished since it was chunked (%s)", path,
                                strerror(e));
        if (e == ELOOP)
            return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: replaced by a symlink since it was chunked", path);
        return ingest__fail(r->ctx, ingest__errno(e), "sender: open %s: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        return ingest__fail(r->ctx, ingest__errno(e), "sender: fstat %s: %s", path, strerror(e));
    }
    if (st.st_dev != f->dev || st.st_ino != f->ino) {
        close(fd);
        return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: replaced since it was chunked", path);
    }
    r->fd = fd;
    r->file = fi;
    return 0;
}

/*
 * Chunk ci of symlink fi, re-read with readlinkat (never opened): the
 * link must be the one chunked (device, inode, size, mtime, ctime) and the
 * chunk's bytes must still hash to its id, else INGEST_ESTALE (a changed
 * target ships later as a new version, as a changed file does).
 */
static int read_link_chunk(ingest_sender_batch *b, ingest__sender_reader *r, uint64_t ci, uint64_t fi, uint8_t *dst)
{
    const bfile *f = &b->files[fi];
    const ingest_manifest_chunk *c = &b->chunks[ci];
    const char *path = (const char *)b->paths.buf + f->path_off;
    const char *rel = path + b->s->srcs[f->src].name_len + 1;
    const int dfd = b->rootfd[f->src];
    struct stat st;
    char target[INGEST_SENDER_LINK_MAX + 1];
    if (fstatat(dfd, rel, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        const int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: %s", path, strerror(e));
        return ingest__fail(r->ctx, ingest__errno(e), "sender: lstat %s: %s", path, strerror(e));
    }
    if (!S_ISLNK(st.st_mode) || st.st_dev != f->dev || st.st_ino != f->ino || (uint64_t)st.st_size != f->size ||
        ingest_time_ns(&st.st_mtim) != f->mtime_ns || ingest_time_ns(&st.st_ctim) != f->ctime_ns)
        return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: symlink replaced or changed since it was chunked",
                            path);
    const ssize_t n = readlinkat(dfd, rel, target, sizeof(target));
    if (n < 0) {
        const int e = errno;
        return ingest__fail(r->ctx, e == ENOENT || e == EINVAL ? INGEST_ESTALE : ingest__errno(e),
                            "sender: readlink %s: %s", path, strerror(e));
    }
    if ((uint64_t)n != f->size || b->offs[ci] + c->len > (uint64_t)n)
        return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: symlink target changed since it was chunked", path);
    memcpy(dst, target + b->offs[ci], c->len);
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_id(b->s->key, dst, c->len, id);
    if (memcmp(id, c->id, INGEST_ID_BYTES) != 0)
        return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: symlink target changed since it was chunked", path);
    return 0;
}

/*
 * Re-read chunk ci (of file fi) into dst and check it is still the chunk
 * of the manifest (INGEST_ESTALE otherwise).
 */
static int read_chunk(ingest_sender_batch *b, ingest__sender_reader *r, uint64_t ci, uint64_t fi, uint8_t *dst)
{
    const ingest_manifest_chunk *c = &b->chunks[ci];
    if (b->files[fi].cache_off >= 0) {
        /* a small file, kept as it was hashed */
        memcpy(dst, b->small.buf + b->files[fi].cache_off + (b->offs[ci]), c->len);
        return 0;
    }
    if (S_ISLNK(b->files[fi].mode))
        return read_link_chunk(b, r, ci, fi, dst);
    INGEST__FORWARD(batch_open(b, r, (size_t)fi));
    const char *path = (const char *)b->paths.buf + b->files[fi].path_off;
    size_t got = 0;
    while (got < c->len) {
        const ssize_t n = pread(r->fd, dst + got, c->len - got, (off_t)(b->offs[ci] + got));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            const int e = errno;
            return ingest__fail(r->ctx, ingest__errno(e), "sender: read %s: %s", path, strerror(e));
        }
        if (n == 0)
            return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: shorter than when chunked (chunk %" PRIu64 ")",
                                path, ci);
        got += (size_t)n;
    }
    if (b->s->recheck == INGEST_SENDER_RECHECK_STAT) {
        /* Size, mtime and ctime as when chunked, before (batch_open) and after the read. */
        struct stat st;
        const bfile *bf = &b->files[fi];
        if (fstat(r->fd, &st) != 0 || (uint64_t)st.st_size != bf->size || ingest_time_ns(&st.st_mtim) != bf->mtime_ns ||
            ingest_time_ns(&st.st_ctim) != bf->ctime_ns)
            return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: changed since it was chunked (chunk %" PRIu64
                                " at offset %" PRIu64 ")", path, ci, b->offs[ci]);
    } else {
        uint8_t id[INGEST_ID_BYTES];
        ingest_chunk_id(b->s->key, dst, c->len, id);
        if (memcmp(id, c->id, INGEST_ID_BYTES) != 0)
            return ingest__fail(r->ctx, INGEST_ESTALE, "sender: %s: changed since it was chunked (chunk %" PRIu64
                                " at offset %" PRIu64 ")", path, ci, b->offs[ci]);
    }
    return 0;
}

/* r->raw holds at least need bytes (and chunking.max): a chunk, or a group of small ones up to 1 MiB. */
static int raw_buffer(ingest_sender_batch *b, ingest__sender_reader *r, size_t need)
{
    if (need < b->s->params.max)
        need = b->s->params.max;
    if (r->raw == NULL || r->raw_cap < need) {
        ingest__free(r->ctx, r->raw);
        r->raw_cap = 0;
        r->raw = ingest__malloc(r->ctx, need);
        if (r->raw == NULL)
            return ingest__fail(r->ctx, INGEST_ENOMEM, "sender: out of memory (%zu bytes)", need);
        r->raw_cap = need;
    }
    return 0;
}

void ingest__sender_reader_init(ingest__sender_reader *r, ingest_codec *codec, ingest_ctx *ctx)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    r->file = SIZE_MAX;
    r->codec = codec;
    r->ctx = ctx;
}

void ingest__sender_reader_reset(ingest__sender_reader *r)
{
    close_fd(&r->fd);
    r->file = SIZE_MAX;
}

void ingest__sender_reader_free(ingest__sender_reader *r)
{
    ingest__sender_reader_reset(r);
    ingest__free(r->ctx, r->raw);
    r->raw = NULL;
    r->raw_cap = 0;
}

/* The file of chunk ci in *fi: the reader's open one when it holds ci (no search), else looked up. */
static int reader_file(const ingest_sender_batch *b, const ingest__sender_reader *r, uint64_t ci, uint64_t *fi)
{
    if (ci >= b->nchunks)
        return ingest__fail(r->ctx, INGEST_ENOTFOUND, "sender: batch %s has no chunk %" PRIu64, b->id, ci);
    if (r->file < b->nfiles && ci >= b->files[r->file].first_chunk &&
        ci < b->files[r->file].first_chunk + b->files[r->file].nchunks) {
        *fi = r->file;
        return 0;
    }
    return ingest_sender_batch_chunk_file(b, ci, fi);
}

/* Re-read chunk ci into r->raw (checked against its id); *fi gets its file. */
static int chunk_read(ingest_sender_batch *b, ingest__sender_reader *r, uint64_t ci, size_t cap, uint64_t *fi)
{
    INGEST__FORWARD(reader_file(b, r, ci, fi));
    const ingest_manifest_chunk *c = &b->chunks[ci];
    const size_t need = ingest_codec_bound(c->len);
    if (cap < need)
        return ingest__fail(r->ctx, INGEST_ETOOBIG, "sender: output of %zu bytes, chunk %" PRIu64 " needs %zu",
                            cap, ci, need);
    INGEST__FORWARD(raw_buffer(b, r, 0));
    return read_chunk(b, r, ci, *fi, r->raw);
}

int ingest__sender_batch_chunk_r(ingest_sender_batch *b, ingest__sender_reader *r, uint64_t ci, void *out, size_t cap,
                                 size_t *out_len, ingest_codec_hint *hint)
{
    *out_len = 0;
    uint64_t fi = 0;
    if (hint != NULL && ci < b->nchunks && cap >= ingest_codec_bound(b->chunks[ci].len) &&
        hint->mode == INGEST_CODEC_HINT_STORE && hint->left > 0) {
        /* stored raw: read straight into the encoding, after its header (no copy); the hint counts
         * the chunk once it is read, as ingest_codec_encode_adaptive would */
        uint8_t *const d = out;
        const uint32_t len = b->chunks[ci].len;
        INGEST__FORWARD(reader_file(b, r, ci, &fi));
        INGEST__FORWARD(read_chunk(b, r, ci, fi, d + INGEST_CODEC_HEADER));
        (void)ingest__codec_hint_take_store(hint);
        ingest__codec_put_raw(d, len);
        *out_len = INGEST_CODEC_HEADER + (size_t)len;
        return 0;
    }
    INGEST__FORWARD(chunk_read(b, r, ci, cap, &fi));
    return ingest_codec_encode_adaptive(r->codec, r->raw, b->chunks[ci].len, out, cap, out_len, hint);
}

int ingest_sender_batch_chunk(ingest_sender_batch *b, uint64_t ci, void *out, size_t cap, size_t *out_len)
{
    *out_len = 0;
    uint64_t fi = 0;
    INGEST__FORWARD(chunk_read(b, &b->rd, ci, cap, &fi));
    if (b->hint_file != fi) {
        b->hint_file = fi;
        memset(&b->hint, 0, sizeof(b->hint));
    }
    return ingest_codec_encode_adaptive(b->s->codec, b->rd.raw, b->chunks[ci].len, out, cap, out_len, &b->hint);
}

/*
 * How many of idx[0, n) form a group: the longest prefix of small chunks
 * (each at most INGEST_SENDER_GROUP_CHUNK_MAX bytes) adding up to at most
 * raw_max (capped at INGEST_WIRE_GROUP_MAX_RAW) bytes, in *k; -1 when an index of that
 * prefix is not above the one before it (*k is its position).
 */
static int group_prefix(const ingest_sender_batch *b, const uint32_t *idx, size_t n, size_t raw_max, size_t *k)
{
    if (raw_max > INGEST_WIRE_GROUP_MAX_RAW)
        raw_max = INGEST_WIRE_GROUP_MAX_RAW;
    if (n > INGEST_SENDER_GROUP_MAX_CHUNKS)
        n = INGEST_SENDER_GROUP_MAX_CHUNKS;
    size_t total = 0;
    *k = 0;
    while (*k < n && idx[*k] < b->nchunks && b->chunks[idx[*k]].len <= INGEST_SENDER_GROUP_CHUNK_MAX &&
           b->chunks[idx[*k]].len <= raw_max - total) {
        if (*k > 0 && idx[*k] <= idx[*k - 1])
            return -1;
        total += b->chunks[idx[*k]].len;
        (*k)++;
    }
    return 0;
}

size_t ingest__sender_batch_group_take(const ingest_sender_batch *b, const uint32_t *idx, size_t n, size_t raw_max)
{
    size_t k = 0;
    group_prefix(b, idx, n, raw_max, &k);
    return k;
}

ingest__sender_reader *ingest__sender_batch_reader(ingest_sender_batch *b) { return &b->rd; }

void ingest__sender_batch_sent(ingest_sender_batch *b)
{
    for (size_t i = 0; i < b->nfiles; i++)
        b->files[i].cache_off = -1; /* read again, should a chunk ever be wanted again */
    ingest__buf_free(&b->small);
    ingest__sender_reader_free(&b->rd); /* its buffer (up to a 1 MiB group) and open file, made again on use */
}

void ingest__sender_batch_hint(ingest_sender_batch *b, uint64_t **file, ingest_codec_hint **hint)
{
    *file = &b->hint_file;
    *hint = &b->hint;
}

/* The group of small chunks idx[0, k) (k >= 2, checked by the caller), encoded with r. */
static int group_encode(ingest_sender_batch *b, ingest__sender_reader *r, const uint32_t *idx, size_t k, void *out,
                        size_t cap, size_t *out_len, size_t *taken)
{
    size_t total = 0;
    for (size_t i = 0; i < k; i++)
        total += b->chunks[idx[i]].len;
    if (cap < ingest_codec_bound(total))
        return ingest__fail(r->ctx, INGEST_ETOOBIG, "sender: output of %zu bytes, a group of %zu needs %zu", cap,
                            total, ingest_codec_bound(total));
    INGEST__FORWARD(raw_buffer(b, r, total));
    size_t at = 0;
    for (size_t i = 0; i < k; i++) {
        uint64_t fi = 0;
        INGEST__FORWARD(ingest_sender_batch_chunk_file(b, idx[i], &fi));
        const int rc = read_chunk(b, r, idx[i], fi, r->raw + at);
        if (rc < 0) {
            *taken = i; /* which chunk failed (its file changed: INGEST_ESTALE) */
            return rc;
        }
        at += b->chunks[idx[i]].len;
    }
    /* Text compresses across files: plain zstd, no probing (hints are per file). */
    INGEST__FORWARD(ingest_codec_encode(r->codec, r->raw, total, out, cap, out_len));
    *taken = k;
    return 0;
}

int ingest__sender_batch_group_r(ingest_sender_batch *b, ingest__sender_reader *r, const uint32_t *idx, size_t k,
                                 void *out, size_t cap, size_t *out_len, size_t *taken)
{
    *out_len = 0;
    *taken = 0;
    if (k < 2 || ingest__sender_batch_group_take(b, idx, k, INGEST_WIRE_GROUP_MAX_RAW) != k)
        return ingest__fail(r->ctx, INGEST_EINVAL, "sender: not a group of %zu small chunks", k);
    return group_encode(b, r, idx, k, out, cap, out_len, taken);
}

int ingest__sender_batch_chunk_delta_r(ingest_sender_batch *b, ingest__sender_reader *r, uint64_t ci, const uint8_t *key,
                                       const uint8_t *hashes, uint32_t base_len, uint8_t *map, size_t map_cap,
                                       void *out, size_t cap, size_t *out_len, uint32_t *nblocks)
{
    *out_len = 0;
    *nblocks = 0;
    uint64_t fi = 0;
    INGEST__FORWARD(reader_file(b, r, ci, &fi));
    const ingest_manifest_chunk *c = &b->chunks[ci];
    const uint32_t nb = INGEST_WIRE_DELTA_BLOCKS(c->len);
    if (base_len == 0 || base_len > c->len || nb > INGEST_WIRE_DELTA_MAX_BLOCKS || map_cap < (nb + 7u) / 8u)
        return ingest__fail(r->ctx, INGEST_EINVAL, "sender: delta of chunk %" PRIu64 " (%u bytes) against %u bytes",
                            ci, c->len, base_len);
    if (cap < ingest_codec_bound(c->len))
        return ingest__fail(r->ctx, INGEST_ETOOBIG, "sender: output of %zu bytes, chunk %" PRIu64 " needs %zu", cap,
                            ci, ingest_codec_bound(c->len));
    INGEST__FORWARD(raw_buffer(b, r, 0));
    INGEST__FORWARD(read_chunk(b, r, ci, fi, r->raw));
    memset(map, 0, (nb + 7u) / 8u);
    /* the literal blocks move down over the copied ones (never past where they were) */
    size_t copied = 0, lit = 0;
    for (uint32_t j = 0; j < nb; j++) {
        const size_t at = (size_t)j * INGEST_WIRE_DELTA_BLOCK;
        const size_t bl = c->len - at < INGEST_WIRE_DELTA_BLOCK ? c->len - at : INGEST_WIRE_DELTA_BLOCK;
        uint8_t h[crypto_shorthash_BYTES];
        if (at + bl <= base_len && (at + bl == base_len || bl == INGEST_WIRE_DELTA_BLOCK)) {
            crypto_shorthash(h, r->raw + at, bl, key);
            if (memcmp(h, hashes + (size_t)j * INGEST_WIRE_DELTA_HASH_BYTES, sizeof(h)) == 0) {
                map[j / 8] |= (uint8_t)(1u << (j % 8));
                copied += bl;
                continue;
            }
        }
        if (lit != at)
            memmove(r->raw + lit, r->raw + at, bl);
        lit += bl;
    }
    if (copied * 4 < c->len)
        return 1;
    *nblocks = nb;
    return ingest_codec_encode(r->codec, r->raw, lit, out, cap, out_len);
}

int ingest_sender_batch_chunk_delta(ingest_sender_batch *b, uint64_t ci, const uint8_t *key, const uint8_t *hashes,
                                    uint32_t base_len, uint8_t *map, size_t map_cap, void *out, size_t cap,
                                    size_t *out_len, uint32_t *nblocks)
{
    return ingest__sender_batch_chunk_delta_r(b, &b->rd, ci, key, hashes, base_len, map, map_cap, out, cap, out_len,
                                              nblocks);
}

int ingest_sender_batch_group(ingest_sender_batch *b, const uint32_t *idx, size_t n, size_t raw_max, void *out,
                              size_t cap, size_t *out_len, size_t *taken)
{
    *out_len = 0;
    *taken = 0;
    if (n == 0)
        return ingest__fail(b->ctx, INGEST_EINVAL, "sender: group of no chunks");
    /* How many of idx[] form the group: small chunks, together at most raw_max (and chunking.max) bytes. */
    if (raw_max > b->s->params.max)
        raw_max = b->s->params.max;
    size_t k = 0;
    if (group_prefix(b, idx, n, raw_max, &k) != 0)
        return ingest__fail(b->ctx, INGEST_EINVAL, "sender: group indexes not increasing at %zu", k);
    if (k < 2) {
        /* Not worth a group: the first chunk alone, encoded as ever. */
        INGEST__FORWARD(ingest_sender_batch_chunk(b, idx[0], out, cap, out_len));
        *taken = 1;
        return 0;
    }
    return group_encode(b, &b->rd, idx, k, out, cap, out_len, taken);
}
