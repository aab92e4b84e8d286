/*
 * The landing engine: manifest -> want list -> chunks -> files written once,
 * sequentially, to temporary names -> durable -> renamed -> manifest ->
 * index.  See include/ingest/lander.h and docs/landing.md.
 *
 * Memory.  Per chunk: its manifest entry {id, len} (36 bytes, kept as one
 * array so the manifest writer takes a file's chunks in place), a u64
 * position (offset in the spill file before it is written, offset in its
 * landed file after), a u32 (first occurrence of a duplicate) and a state
 * byte.  Per file: its paths.  Two chunk buffers of the largest chunk
 * seen.  Nothing else grows with the batch.
 *
 * Landing is a cursor over the chunk list.  A chunk is landed when the
 * cursor reaches it and its bytes are available: received (straight from
 * put_chunk, or from the spill file when it arrived early), copied from a
 * landed file named by the index (known), or copied from the temporary
 * file where its first occurrence in this batch was written (dup).  Every
 * copied range is read into memory and hashed before it is written, so the
 * id check and the copy see the same bytes.
 */
#include "ingest/catalog.h"
#include "ingest/lander.h"
#include "ingest/manifest.h"
#include "internal.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LANDED_MAX 4096      /* bytes of a landed path, NUL included */
#define NAME_MAX_BYTES 255   /* bytes of one path component */
#define MANIFEST_FLUSH (1u << 20)
/*
 * Temporary files are named ".{name}.ingest-tmp-{tag}.{batch}" (or
 * ".ingest-tmp-{tag}.{batch}.{n}" when that is too long), where {tag} is
 * TMP_TAG_HEX random hex digits kept in {bronze}/_manifests/TMP_TAG_FILE,
 * made once per bronze tree.  A device cannot guess it, so no name a device
 * sends is ever taken for a temporary file: neither truncated by one, nor
 * removed by the sweep after a crash.
 */
#define TMP_TAG_FILE ".tmp-tag"
#define TMP_TAG_HEX 16
#define TMP_MARK_MAX (sizeof ".ingest-tmp-." + TMP_TAG_HEX)
/* Batches of at least this many files are made durable with syncfs(). */
#define INGEST_LANDER_SYNCFS_MIN 16u

enum { K_RECV = 0, K_KNOWN = 1, K_DUP = 2, K_MASK = 3 };
enum { F_ARRIVED = 4, F_INBUF = 8, F_DONE = 16 };
/*
 * Batch states.  ACTIVE: landing, may still ask the device for chunks.
 * PREPARED (commit_prepare done): every file complete under its temporary
 * name, only commit_finish or destroy remain.  DEAD: aborted.
 */
enum { B_ACTIVE = 0, B_DEAD = 1, B_COMMITTED = 2, B_PREPARED = 3 };

struct ingest_lander_s {
    ingest_ctx *ctx;
    ingest_store *st;
    ingest_index *idx;
    ingest_codec *codec;
    char *root;
    int rootfd;
    char *layout;
    uint8_t key[INGEST_KEY_BYTES];
    uint8_t tabkey[crypto_shorthash_KEYBYTES];
    uint32_t max_files, max_chunks;
    bool direct_io; /* write temporary files with O_DIRECT where the filesystem takes it */
    ingest__dbi vdb;
    bool vdb_open;
    ingest_lander_batch *busy;
    char tmp_mark[TMP_MARK_MAX]; /* ".ingest-tmp-{tag}." : in every temporary file's name */
    ingest_catalog *catalog;     /* batches are added to it once durable (ingest_lander_set_catalog), or NULL */
};

typedef struct lfile {
    char *path;   /* relative path at the device */
    char *landed; /* relative to the bronze root */
    uint64_t size;
    int64_t mtime_ns;
    uint32_t mode;
    uint8_t hash[INGEST_ID_BYTES];
    uint32_t first, nchunks;
    uint64_t version;
    ingest_file_identity ident;
    bool created; /* its temporary file exists */
    bool renamed; /* moved to its final name */
    bool fresh;   /* nothing was at its final name when the renames began */
} lfile;

struct ingest_lander_batch_s {
    ingest_lander *l;
    ingest_ctx *ctx;
    int state;
    char *device;
    char *name;
    lfile *files;
    uint32_t nfiles, nfiles_read;
    ingest_manifest_chunk *mc;
    uint64_t *pos;
    uint32_t *src;
    uint8_t *cst;
    uint32_t nchunks, chunk_cap;
    uint32_t *wants;
    size_t nwants;
    uint32_t *rew;
    size_t nrew, rew_reported;
    uint32_t awaited;
    bool lookahead_done;
    bool syncfs; /* commit syncs with syncfs() */
    bool wrote;  /* store writes of ours not committed yet (see settle) */
    /* cursor */
    uint32_t cur_file, cur_chunk;
    int fd;           /* temporary file being written, -1 */
    /* O_DIRECT writing (fd opened so): chunks gather in dio, written whole
     * at dio_base, the tail padded to DIO_ALIGN and the file truncated */
    bool direct;
    uint8_t *dio;     /* DIO_BUF bytes aligned to DIO_ALIGN inside dio_mem, or NULL */
    void *dio_mem;    /* the allocation (context's allocator) dio lies in */
    size_t dio_fill;
    uint64_t dio_base;
    int dirfd;        /* directory of cur_dir, -1 */
    char *cur_dir;    /* relative directory cached in dirfd */
    uint64_t file_off;
    ingest_filehash fh;
    /* known-chunk source cache */
    int srcfd;
    uint64_t src_no;
    /* spill */
    int spillfd;
    uint64_t spill_len;
    /* buffers */
    uint8_t *rbuf, *cbuf;
    size_t bufcap;
    /* directories to fsync at commit (relative, "" = root) */
    char **dirs;
    size_t ndirs, dirs_cap;
    ingest_lander_stats stats;
};

/* ---------------------------------------------------------------- helpers */

static int sys_fail(ingest_ctx *ctx, int err, const char *what, const char *path)
{
    return ingest__fail(ctx, ingest__errno(err), "lander: %s %s: %s", what, path, strerror(err));
}

#define DIO_ALIGN 4096u
#define DIO_BUF (256u * 1024u)

static int write_full(int fd, const void *p, size_t n)
{
    const uint8_t *q = p;
    while (n > 0) {
        const ssize_t w = write(fd, q, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        q += w;
        n -= (size_t)w;
    }
    return 0;
}

/* 0 read all, 1 short (end of file), -1 error (errno). */
static int pread_full(int fd, void *p, size_t n, uint64_t off)
{
    uint8_t *q = p;
    while (n > 0) {
        const ssize_t r = pread(fd, q, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            return 1;
        q += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Device and batch names become path components: keep them plain. */
static int check_name(ingest_ctx *ctx, const char *what, const char *s)
{
    const size_t n = strlen(s);
    if (n == 0 || n > INGEST_MANIFEST_NAME_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "lander: %s name has %zu bytes (1..%u)", what, n,
                            INGEST_MANIFEST_NAME_MAX);
    if (s[0] == '.')
        return ingest__fail(ctx, INGEST_EINVAL, "lander: %s name \"%s\" starts with '.'", what, s);
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                        c == '.' || c == '_' || c == '-' || c == ':' || c == '@' || c == '+' || c == '=';
        if (!ok)
            return ingest__fail(ctx, INGEST_EINVAL, "lander: %s name \"%.*s\": byte 0x%02x at %zu not allowed",
                                what, (int)n, s, c, i);
    }
    return 0;
}

/* A relative path: no leading '/', no empty, "." or ".." component. */
static int check_relpath(ingest_ctx *ctx, const char *what, const char *p)
{
    const size_t n = strlen(p);
    if (n == 0)
        return ingest__fail(ctx, INGEST_EINVAL, "lander: %s: empty path", what);
    if (n >= LANDED_MAX)
        return ingest__fail(ctx, INGEST_EINVAL, "lander: %s: path of %zu bytes is too long", what, n);
    if (p[0] == '/')
        return ingest__fail(ctx, INGEST_EINVAL, "lander: %s \"%s\": absolute path refused", what, p);
    const char *c = p;
    for (;;) {
        const char *e = strchr(c, '/');
        const size_t cl = e ? (size_t)(e - c) : strlen(c);
        if (cl == 0)
            return ingest__fail(ctx, INGEST_EINVAL, "lander: %s \"%s\": empty path component", what, p);
        if ((cl == 1 && c[0] == '.') || (cl == 2 && c[0] == '.' && c[1] == '.'))
            return ingest__fail(ctx, INGEST_EINVAL, "lander: %s \"%s\": \"%.*s\" component refused", what, p,
                                (int)cl, c);
        if (cl > NAME_MAX_BYTES)
            return ingest__fail(ctx, INGEST_EINVAL, "lander: %s \"%s\": component longer than %d bytes", what,
                                p, NAME_MAX_BYTES);
        if (!e)
            break;
        c = e + 1;
    }
    return 0;
}

/* Split a landed path: *name points into p; dir gets the parent ("" for root). */
static void split_path(const char *p, char *dir, size_t cap, const char **name)
{
    const char *s = strrchr(p, '/');
    if (!s) {
        dir[0] = '\0';
        *name = p;
        return;
    }
    size_t n = (size_t)(s - p);
    if (n >= cap)
        n = cap - 1;
    memcpy(dir, p, n);
    dir[n] = '\0';
    *name = s + 1;
}

static void tmp_name(const ingest_lander *l, const char *name, const char *batch, uint32_t fi, char *out,
                     size_t cap)
{
    const int n = snprintf(out, cap, ".%s%s%s", name, l->tmp_mark, batch);
    if (n < 0 || (size_t)n > NAME_MAX_BYTES)
        snprintf(out, cap, "%s%s.%u", l->tmp_mark, batch, fi);
}

static bool is_hex_tag(const char *s, size_t n)
{
    if (n != TMP_TAG_HEX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/*
 * Read the bronze tree's temporary-file tag into mark (".ingest-tmp-{tag}."),
 * making it first if there is none: written to a file of its own, synced,
 * then linked into place (so two processes starting at once agree on one).
 * create false: INGEST_ENOTFOUND when there is none.
 */
static int tmp_tag(ingest_ctx *ctx, int rootfd, const char *root, bool create, char mark[TMP_MARK_MAX])
{
    int mfd = -1, fd = -1, rc = 0;
    char buf[64], tmp[64];
    if (create && mkdirat(rootfd, "_manifests", 0755) < 0 && errno != EEXIST)
        return sys_fail(ctx, errno, "mkdir _manifests under", root);
    mfd = openat(rootfd, "_manifests", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (mfd < 0) {
        if (errno == ENOENT && !create)
            return INGEST_ENOTFOUND;
        return sys_fail(ctx, errno, "open _manifests under", root);
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        fd = openat(mfd, TMP_TAG_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            ssize_t n;
            do
                n = read(fd, buf, sizeof buf - 1);
            while (n < 0 && errno == EINTR);
            close(fd);
            fd = -1;
            size_t len = n > 0 ? (size_t)n : 0;
            while (len > 0 && buf[len - 1] == '\n')
                len--;
            if (!is_hex_tag(buf, len)) {
                rc = ingest__fail(ctx, INGEST_ECORRUPT,
                                  "lander: %s/_manifests/" TMP_TAG_FILE ": expected %d lower-case hex digits and a "
                                  "newline (the tag of temporary files); remove it only when no temporary files are "
                                  "left under the bronze root",
                                  root, TMP_TAG_HEX);
                goto out;
            }
            buf[len] = '\0';
            snprintf(mark, TMP_MARK_MAX, ".ingest-tmp-%.*s.", TMP_TAG_HEX, buf);
            goto out;
        }
        if (errno != ENOENT) {
            rc = sys_fail(ctx, errno, "open _manifests/" TMP_TAG_FILE " under", root);
            goto out;
        }
        if (!create) {
            rc = INGEST_ENOTFOUND;
            goto out;
        }
        uint8_t r[TMP_TAG_HEX / 2];
        randombytes_buf(r, sizeof r);
        ingest_to_hex(r, sizeof r, buf);
        buf[TMP_TAG_HEX] = '\n';
        snprintf(tmp, sizeof tmp, TMP_TAG_FILE ".%08x", randombytes_random());
        fd = openat(mfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 || write_full(fd, buf, TMP_TAG_HEX + 1) < 0 || fsync(fd) < 0) {
            rc = sys_fail(ctx, errno, "write _manifests/" TMP_TAG_FILE " under", root);
            goto out;
        }
        close(fd);
        fd = -1;
        /* EEXIST: another process made one meanwhile; read that one */
        const int lr = linkat(mfd, tmp, mfd, TMP_TAG_FILE, 0);
        const int le = errno;
        unlinkat(mfd, tmp, 0);
        if (lr < 0 && le != EEXIST) {
            rc = sys_fail(ctx, le, "link _manifests/" TMP_TAG_FILE " under", root);
            goto out;
        }
        if (lr == 0 && fsync(mfd) < 0) {
            rc = sys_fail(ctx, errno, "fsync _manifests under", root);
            goto out;
        }
    }
    rc = ingest__fail(ctx, INGEST_EIO, "lander: %s/_manifests/" TMP_TAG_FILE ": cannot be read back", root);
out:
    if (fd >= 0)
        close(fd);
    close(mfd);
    return rc;
}

/* ------------------------------------------------------------- layout */

static const char *const PLACEHOLDERS[] = {"{device}", "{path}", "{yyyy}", "{mm}", "{dd}", "{batch}"};

static int expand(ingest_ctx *ctx, const char *layout, const char *device, const char *batch,
                  const char *relpath, int64_t mtime_ns, char *out, size_t cap)
{
    int64_t secs = mtime_ns / 1000000000;
    if (mtime_ns % 1000000000 < 0)
        secs--;
    const time_t t = (time_t)secs;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "lander: file %s: mtime %lld out of range", relpath,
                            (long long)mtime_ns);
    char yyyy[16], mm[16], dd[16];
    snprintf(yyyy, sizeof yyyy, "%04d", tm.tm_year + 1900);
    snprintf(mm, sizeof mm, "%02d", tm.tm_mon + 1);
    snprintf(dd, sizeof dd, "%02d", tm.tm_mday);
    const char *vals[] = {device, relpath, yyyy, mm, dd, batch};
    size_t o = 0;
    for (const char *p = layout; *p;) {
        const char *v = NULL;
        size_t skip = 1;
        if (*p == '{') {
            for (size_t k = 0; k < sizeof PLACEHOLDERS / sizeof PLACEHOLDERS[0]; k++) {
                const size_t pl = strlen(PLACEHOLDERS[k]);
                if (strncmp(p, PLACEHOLDERS[k], pl) == 0) {
                    v = vals[k];
                    skip = pl;
                    break;
                }
            }
            if (!v)
                return ingest__fail(ctx, INGEST_EINVAL, "lander: layout \"%s\": unknown placeholder at %zu",
                                    layout, (size_t)(p - layout));
        }
        const size_t vl = v ? strlen(v) : 1;
        if (o + vl >= cap)
            return ingest__fail(ctx, INGEST_ETOOBIG, "lander: file %s: landed path longer than %zu bytes",
                                relpath, cap - 1);
        memcpy(out + o, v ? v : p, vl);
        o += vl;
        p += skip;
    }
    out[o] = '\0';
    return 0;
}

static int landed_path(ingest_lander *l, const char *device, const char *batch, const char *relpath,
                       int64_t mtime_ns, char *out, size_t cap)
{
    INGEST__FORWARD(check_relpath(l->ctx, "file", relpath));
    INGEST__FORWARD(expand(l->ctx, l->layout, device, batch, relpath, mtime_ns, out, cap));
    INGEST__FORWARD(check_relpath(l->ctx, "landed path of file", out));
    if (strncmp(out, "_manifests", 10) == 0 && (out[10] == '/' || out[10] == '\0'))
        return ingest__fail(l->ctx, INGEST_EINVAL, "lander: file %s: landed path %s is under _manifests",
                            relpath, out);
    /* A name holding this tree's secret tag could be taken for a temporary
     * file (tmp_name); no device knows the tag, so no honest one sends it. */
    const char *base = strrchr(out, '/');
    if (l->tmp_mark[0] != '\0' && strstr(base ? base + 1 : out, l->tmp_mark) != NULL)
        return ingest__fail(l->ctx, INGEST_EINVAL,
                            "lander: file %s: name contains the bronze tree's temporary-file tag", relpath);
    return 0;
}

int ingest_lander_landed_path(ingest_lander *l, const char *device, const char *batch, const char *relpath,
                              int64_t mtime_ns, char *out, size_t cap)
{
    if (!l || !device || !batch || !relpath || !out || cap == 0)
        return INGEST_EINVAL;
    INGEST__FORWARD(check_name(l->ctx, "device", device));
    INGEST__FORWARD(check_name(l->ctx, "batch", batch));
    return landed_path(l, device, batch, relpath, mtime_ns, out, cap);
}

/* ----------------------------------------------------------- crash sweep */

typedef struct sweep {
    ingest_ctx *ctx;
    int rootfd;
    char mark[TMP_MARK_MAX]; /* "" when the tree has no tag yet */
    char **stack;             /* directories still to read, relative to the root */
    size_t n, cap;
    uint64_t removed, failed;
} sweep;

static int sweep_push(sweep *w, const char *dir, const char *name)
{
    if (w->n == w->cap) {
        const size_t nc = w->cap ? w->cap * 2 : 64;
        char **ns = ingest__malloc(w->ctx, nc * sizeof *ns);
        if (!ns)
            return ingest__fail(w->ctx, INGEST_ENOMEM, "lander: sweep: out of memory");
        if (w->n)
            memcpy(ns, w->stack, w->n * sizeof *ns);
        ingest__free(w->ctx, w->stack);
        w->stack = ns;
        w->cap = nc;
    }
    const size_t dl = strlen(dir), nl = strlen(name);
    char *p = ingest__malloc(w->ctx, dl + nl + 2);
    if (!p)
        return ingest__fail(w->ctx, INGEST_ENOMEM, "lander: sweep: out of memory");
    memcpy(p, dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, name, nl + 1);
    w->stack[w->n++] = p;
    return 0;
}

static bool has_suffix_s(const char *s, const char *suf)
{
    const size_t n = strlen(s), k = strlen(suf);
    return n >= k && memcmp(s + n - k, suf, k) == 0;
}

/*
 * Is name, in directory dir (relative, "." the root), something an
 * unfinished batch left?  Temporary files carry the tree's tag; temporary
 * manifests are exactly _manifests/{device}/.{batch}.jsonl.tmp (devices
 * cannot land under _manifests); the tag's own temporary file is
 * _manifests/.tmp-tag.{hex}.
 */
static bool sweep_match(const sweep *w, const char *dir, int depth, const char *name)
{
    if (name[0] != '.')
        return false;
    if (depth == 1 && strcmp(dir, "./_manifests") == 0)
        return strncmp(name, TMP_TAG_FILE ".", sizeof TMP_TAG_FILE) == 0;
    if (depth == 2 && strncmp(dir, "./_manifests/", 13) == 0)
        return has_suffix_s(name, ".jsonl.tmp");
    return w->mark[0] != '\0' && strstr(name, w->mark) != NULL;
}

static void sweep_dir(sweep *w, char *dir)
{
    int depth = 0;
    for (const char *c = dir; *c; c++)
        depth += *c == '/';
    const int fd = openat(w->rootfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        w->failed++;
        ingest__log(w->ctx, INGEST_LOG_WARN, "lander: sweep: cannot read directory %s: %s", dir, strerror(errno));
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        unsigned char type = de->d_type;
        if (type == DT_UNKNOWN) {
            struct stat sb;
            if (fstatat(dirfd(d), name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
                continue;
            type = S_ISDIR(sb.st_mode) ? DT_DIR : S_ISREG(sb.st_mode) ? DT_REG : DT_LNK;
        }
        if (type == DT_DIR) {
            if (sweep_push(w, dir, name) < 0)
                w->failed++;
        } else if (type == DT_REG && sweep_match(w, dir, depth, name)) {
            if (unlinkat(dirfd(d), name, 0) == 0) {
                w->removed++;
            } else {
                w->failed++;
                ingest__log(w->ctx, INGEST_LOG_WARN, "lander: sweep: cannot remove %s/%s: %s", dir, name,
                            strerror(errno));
            }
        }
    }
    closedir(d);
}

int ingest_lander_sweep(ingest_ctx *ctx, const char *bronze_root, uint64_t *removed, uint64_t *failed)
{
    if (removed)
        *removed = 0;
    if (failed)
        *failed = 0;
    if (!ctx || !bronze_root)
        return INGEST_EINVAL;
    sweep w;
    memset(&w, 0, sizeof w);
    w.ctx = ctx;
    w.rootfd = open(bronze_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w.rootfd < 0)
        return sys_fail(ctx, errno, "open bronze root", bronze_root);
    int rc = tmp_tag(ctx, w.rootfd, bronze_root, false, w.mark);
    if (rc == INGEST_ENOTFOUND) {
        w.mark[0] = '\0'; /* no tag: no temporary file was ever made here, manifests aside */
        rc = 0;
    }
    if (rc == 0) {
        char *top = ingest__strdup(ctx, ".");
        if (!top)
            rc = ingest__fail(ctx, INGEST_ENOMEM, "lander: sweep: out of memory");
        else
            w.stack = ingest__malloc(ctx, sizeof *w.stack);
        if (top && !w.stack) {
            ingest__free(ctx, top);
            rc = ingest__fail(ctx, INGEST_ENOMEM, "lander: sweep: out of memory");
        } else if (top) {
            w.stack[0] = top;
            w.n = w.cap = 1;
        }
    }
    /* depth first, one directory at a time: memory grows with the entries waiting, never the stack */
    while (rc == 0 && w.n > 0) {
        char *dir = w.stack[--w.n];
        sweep_dir(&w, dir);
        ingest__free(ctx, dir);
    }
    while (w.n > 0)
        ingest__free(ctx, w.stack[--w.n]);
    ingest__free(ctx, w.stack);
    close(w.rootfd);
    if (removed)
        *removed = w.removed;
    if (failed)
        *failed = w.failed;
    return rc;
}

/* --------------------------------------------------------- create/destroy */

int ingest_lander_create(ingest_ctx *ctx, ingest_store *st, ingest_index *idx, const char *bronze_root,
                         const char *layout, const uint8_t key[INGEST_KEY_BYTES], ingest_codec *codec,
                         ingest_lander **out)
{
    if (out)
        *out = NULL;
    if (!ctx || !st || !idx || !bronze_root || !key || !codec || !out)
        return ingest__fail(ctx, INGEST_EINVAL, "lander: create: missing argument");
    if (!layout)
        layout = INGEST_LANDER_LAYOUT_DEFAULT;
    if (sodium_init() < 0)
        return ingest__fail(ctx, INGEST_ECRYPTO, "lander: sodium_init failed");
    int rc = 0;
    ingest_lander *l = ingest__calloc(ctx, 1, sizeof *l);
    if (!l)
        return ingest__fail(ctx, INGEST_ENOMEM, "lander: out of memory");
    l->ctx = ctx;
    l->st = st;
    l->idx = idx;
    l->codec = codec;
    l->rootfd = -1;
    l->max_files = INGEST_LANDER_MAX_FILES_DEFAULT;
    l->max_chunks = INGEST_LANDER_MAX_CHUNKS_DEFAULT;
    memcpy(l->key, key, INGEST_KEY_BYTES);
    randombytes_buf(l->tabkey, sizeof l->tabkey);
    l->root = ingest__strdup(ctx, bronze_root);
    l->layout = ingest__strdup(ctx, layout);
    if (!l->root || !l->layout) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "lander: out of memory");
        goto fail;
    }
    if (strstr(layout, "{path}") == NULL) {
        rc = ingest__fail(ctx, INGEST_EINVAL, "lander: layout \"%s\" lacks {path}", layout);
        goto fail;
    }
    {
        char tmp[LANDED_MAX];
        rc = landed_path(l, "device", "batch", "dir/file", 0, tmp, sizeof tmp);
        if (rc < 0) {
            char why[INGEST__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", ingest_ctx_errmsg(ctx));
            rc = ingest__fail(ctx, INGEST_EINVAL, "lander: layout \"%s\" refused: %s", layout, why);
            goto fail;
        }
    }
    l->rootfd = open(bronze_root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (l->rootfd < 0) {
        const int e = errno;
        rc = ingest__fail(ctx, INGEST_EINVAL, "lander: bronze root %s: %s", bronze_root, strerror(e));
        goto fail;
    }
    if ((rc = tmp_tag(ctx, l->rootfd, bronze_root, true, l->tmp_mark)) < 0)
        goto fail;
    *out = l;
    return 0;
fail:
    ingest_lander_destroy(l);
    return rc;
}

void ingest_lander_destroy(ingest_lander *l)
{
    if (!l)
        return;
    if (l->rootfd >= 0)
        close(l->rootfd);
    ingest__free(l->ctx, l->root);
    ingest__free(l->ctx, l->layout);
    sodium_memzero(l->key, sizeof l->key);
    ingest__free(l->ctx, l);
}

void ingest_lander_set_catalog(ingest_lander *l, ingest_catalog *cat)
{
    if (l != NULL)
        l->catalog = cat;
}

int ingest_lander_set_direct_io(ingest_lander *l, int on)
{
    if (l == NULL)
        return INGEST_EINVAL;
    l->direct_io = on != 0;
    return 0;
}

int ingest_lander_set_limits(ingest_lander *l, uint32_t max_files, uint32_t max_chunks)
{
    if (!l)
        return INGEST_EINVAL;
    if (max_files > INGEST_LANDER_MAX_FILES_LIMIT || max_chunks > INGEST_LANDER_MAX_CHUNKS_LIMIT)
        return ingest__fail(l->ctx, INGEST_EINVAL, "lander: limits %u files, %u chunks past the ceilings", max_files,
                            max_chunks);
    if (max_files)
        l->max_files = max_files;
    if (max_chunks)
        l->max_chunks = max_chunks;
    return 0;
}

/* ---------------------------------------------------------- directories */

static int add_dir(ingest_lander_batch *b, const char *dir)
{
    if (b->ndirs > 0 && strcmp(b->dirs[b->ndirs - 1], dir) == 0)
        return 0;
    if (b->ndirs == b->dirs_cap) {
        const size_t nc = b->dirs_cap ? b->dirs_cap * 2 : 16;
        char **nd = ingest__malloc(b->ctx, nc * sizeof *nd);
        if (!nd)
            return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
        if (b->ndirs)
            memcpy(nd, b->dirs, b->ndirs * sizeof *nd);
        ingest__free(b->ctx, b->dirs);
        b->dirs = nd;
        b->dirs_cap = nc;
    }
    char *s = ingest__strdup(b->ctx, dir);
    if (!s)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    b->dirs[b->ndirs++] = s;
    return 0;
}

/*
 * Open directory dir (relative to the root) one component at a time,
 * never following a symlink.  create: make missing components (recording
 * their parents for fsync).  Without create, a missing component gives
 * *fd = -1 and 0.  A symlink or non-directory: INGEST_EINVAL naming file.
 */
static int walk_dir(ingest_lander_batch *b, const char *file, const char *dir, bool create, int *fd)
{
    ingest_lander *l = b->l;
    *fd = -1;
    int cur = openat(l->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return sys_fail(b->ctx, errno, "open", l->root);
    char part[LANDED_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof part)
        n = sizeof part - 1;
    memcpy(part, dir, n);
    part[n] = '\0';
    char *c = part;
    while (*c) {
        char *e = strchr(c, '/');
        if (e)
            *e = '\0';
        int nfd = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(cur, c, 0755) < 0 && errno != EEXIST) {
                const int err = errno;
                close(cur);
                return sys_fail(b->ctx, err, "mkdir under bronze root:", dir);
            }
            /* the new entry lives in the parent directory: sync it */
            char parent[LANDED_MAX];
            const size_t pl = (size_t)(c - part) > 0 ? (size_t)(c - part) - 1 : 0;
            memcpy(parent, dir, pl);
            parent[pl] = '\0';
            const int rc = add_dir(b, parent);
            if (rc < 0) {
                close(cur);
                return rc;
            }
            nfd = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (nfd < 0) {
            const int err = errno;
            close(cur);
            if (err == ENOENT && !create)
                return 0;
            if (err == ELOOP || err == ENOTDIR)
                return ingest__fail(b->ctx, INGEST_EINVAL,
                                    "lander: file %s: \"%s\" in the bronze tree is a symlink or not a directory",
                                    file, c);
            return sys_fail(b->ctx, err, "open directory", dir);
        }
        close(cur);
        cur = nfd;
        if (!e)
            break;
        c = e + 1;
    }
    *fd = cur;
    return 0;
}

/* Make b->dirfd the directory dir (cached by name). */
static int enter_dir(ingest_lander_batch *b, const char *file, const char *dir, bool create)
{
    if (b->dirfd >= 0 && b->cur_dir && strcmp(b->cur_dir, dir) == 0)
        return 0;
    close_fd(&b->dirfd);
    ingest__free(b->ctx, b->cur_dir);
    b->cur_dir = NULL;
    INGEST__FORWARD(walk_dir(b, file, dir, create, &b->dirfd));
    if (b->dirfd < 0)
        return ingest__fail(b->ctx, INGEST_ENOTFOUND, "lander: file %s: directory %s missing", file, dir);
    b->cur_dir = ingest__strdup(b->ctx, dir);
    if (!b->cur_dir)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    return 0;
}

/* ------------------------------------------------------------ batch state */

static int bufs_reserve(ingest_lander_batch *b, size_t n)
{
    if (n <= b->bufcap)
        return 0;
    ingest__free(b->ctx, b->rbuf);
    ingest__free(b->ctx, b->cbuf);
    b->rbuf = ingest__malloc(b->ctx, n);
    b->cbuf = ingest__malloc(b->ctx, n);
    b->bufcap = 0;
    if (!b->rbuf || !b->cbuf)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory for %zu-byte chunk buffers", n);
    b->bufcap = n;
    return 0;
}

static int chunks_grow(ingest_lander_batch *b, uint32_t need)
{
    if (need <= b->chunk_cap)
        return 0;
    if (need > b->l->max_chunks)
        return ingest__fail(b->ctx, INGEST_ETOOBIG, "lander: batch %s has more than %u chunks", b->name,
                            b->l->max_chunks);
    uint64_t nc = b->chunk_cap ? (uint64_t)b->chunk_cap * 2 : 1024;
    while (nc < need)
        nc *= 2;
    if (nc > b->l->max_chunks)
        nc = b->l->max_chunks;
    ingest_manifest_chunk *mc = ingest__malloc(b->ctx, nc * sizeof *mc);
    if (!mc)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory for %llu chunks", (unsigned long long)nc);
    if (b->nchunks)
        memcpy(mc, b->mc, b->nchunks * sizeof *mc);
    ingest__free(b->ctx, b->mc);
    b->mc = mc;
    b->chunk_cap = (uint32_t)nc;
    return 0;
}

static void remove_temps(ingest_lander_batch *b)
{
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    close_fd(&b->fd);
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (!f->created || f->renamed)
            continue;
        const char *name;
        split_path(f->landed, dir, sizeof dir, &name);
        tmp_name(b->l, name, b->name, i, tn, sizeof tn);
        int dfd = -1;
        const int saved_state = b->state;
        /* walk_dir may record an error detail: keep the original one */
        char keep[INGEST__ERRMSG_MAX];
        memcpy(keep, b->ctx->errmsg, sizeof keep);
        if (walk_dir(b, f->landed, dir, false, &dfd) == 0 && dfd >= 0) {
            unlinkat(dfd, tn, 0);
            close(dfd);
        }
        memcpy(b->ctx->errmsg, keep, sizeof keep);
        b->state = saved_state;
        f->created = false;
    }
}

/* A call the batch's state does not allow: INGEST_EINVAL, the batch untouched. */
static int bad_state(ingest_lander_batch *b)
{
    static const char *const names[] = {"active", "aborted", "committed", "prepared"};
    return ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch is %s", names[b->state & 3]);
}

/*
 * Commit the store writes this batch made in the current call (forgotten
 * stale chunks, versions, the index).  LMDB ties a write transaction's
 * lock to the thread that opened it, so one left open when the caller
 * drops its lock could be committed from another thread (the lock is then
 * never released: the next writer hangs).  So no call returns, and
 * commit_finish never unlocks, with writes of ours pending.  Keeps rc
 * unless it is a success and the commit fails.
 */
static int settle(ingest_lander_batch *b, int rc)
{
    if (!b->wrote)
        return rc;
    b->wrote = false;
    const int c = ingest_store_commit(b->l->st);
    if (c < 0 && rc >= 0) {
        char why[INGEST__ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", ingest_ctx_errmsg(ingest__store_ctx(b->l->st)));
        return ingest__fail(b->ctx, c, "lander: batch %s: store commit: %s", b->name, why);
    }
    return rc;
}

/* A failure of the store, its detail (kept in the store's context) copied into the batch's: returns rc. */
static int store_fail(ingest_lander_batch *b, int rc, const char *what, const char *path)
{
    char why[INGEST__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", ingest_ctx_errmsg(ingest__store_ctx(b->l->st)));
    return ingest__fail(b->ctx, rc, "lander: batch %s: cannot %s %s: %s", b->name, what, path,
                        why[0] ? why : ingest_strerror(rc));
}

/* Abort on failure: returns rc so callers can `return fail_batch(b, rc)`. */
static int fail_batch(ingest_lander_batch *b, int rc)
{
    if (b->state == B_ACTIVE || b->state == B_PREPARED) {
        remove_temps(b);
        b->state = B_DEAD;
    }
    return rc;
}

void ingest_lander_abort(ingest_lander_batch *b)
{
    if (!b || b->state == B_COMMITTED)
        return;
    remove_temps(b);
    b->state = B_DEAD;
}

void ingest_lander_batch_destroy(ingest_lander_batch *b)
{
    if (!b)
        return;
    ingest_ctx *ctx = b->ctx;
    ingest_lander_abort(b);
    close_fd(&b->fd);
    close_fd(&b->dirfd);
    close_fd(&b->srcfd);
    close_fd(&b->spillfd);
    ingest__free(ctx, b->dio_mem);
    if (b->files) {
        for (uint32_t i = 0; i < b->nfiles; i++) {
            ingest__free(ctx, b->files[i].path);
            ingest__free(ctx, b->files[i].landed);
        }
    }
    for (size_t i = 0; i < b->ndirs; i++)
        ingest__free(ctx, b->dirs[i]);
    ingest__free(ctx, b->dirs);
    ingest__free(ctx, b->files);
    ingest__free(ctx, b->mc);
    ingest__free(ctx, b->pos);
    ingest__free(ctx, b->src);
    ingest__free(ctx, b->cst);
    ingest__free(ctx, b->wants);
    ingest__free(ctx, b->rew);
    ingest__free(ctx, b->rbuf);
    ingest__free(ctx, b->cbuf);
    ingest__free(ctx, b->cur_dir);
    ingest__free(ctx, b->device);
    ingest__free(ctx, b->name);
    if (b->l && b->l->busy == b)
        b->l->busy = NULL;
    ingest__free(ctx, b);
}

const char *ingest_lander_batch_name(const ingest_lander_batch *b) { return b ? b->name : NULL; }
uint32_t ingest_lander_batch_chunks(const ingest_lander_batch *b) { return b ? b->nchunks : 0; }
uint32_t ingest_lander_awaited(const ingest_lander_batch *b) { return b ? b->awaited : 0; }

void ingest_lander_wants(const ingest_lander_batch *b, const uint32_t **idx, size_t *n)
{
    *idx = b ? b->wants : NULL;
    *n = b ? b->nwants : 0;
}

void ingest_lander_rewants(ingest_lander_batch *b, const uint32_t **idx, size_t *n)
{
    if (!b) {
        *idx = NULL;
        *n = 0;
        return;
    }
    *idx = b->rew ? b->rew + b->rew_reported : NULL;
    *n = b->nrew - b->rew_reported;
    b->rew_reported = b->nrew;
}

void ingest_lander_batch_stats(const ingest_lander_batch *b, ingest_lander_stats *st)
{
    if (b)
        *st = b->stats;
    else
        memset(st, 0, sizeof *st);
}

/* ----------------------------------------------------------------- begin */

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Check every landed path: distinct, and no symlink/non-directory on the way. */
static int check_paths(ingest_lander_batch *b)
{
    int rc = 0;
    char **v = NULL;
    char lastdir[LANDED_MAX] = "";
    int lastfd = -2; /* -2: nothing cached; -1: directory absent */
    if (b->nfiles == 0)
        return 0;
    v = ingest__malloc(b->ctx, b->nfiles * sizeof *v);
    if (!v)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    for (uint32_t i = 0; i < b->nfiles; i++)
        v[i] = b->files[i].landed;
    qsort(v, b->nfiles, sizeof *v, cmp_strp);
    for (uint32_t i = 1; i < b->nfiles; i++) {
        if (strcmp(v[i - 1], v[i]) == 0) {
            rc = ingest__fail(b->ctx, INGEST_EINVAL, "lander: two files of batch %s land at %s", b->name, v[i]);
            goto out;
        }
    }
    /* "a" and "a/b" cannot both be landed: look each parent up */
    for (uint32_t i = 0; i < b->nfiles; i++) {
        char pre[LANDED_MAX];
        snprintf(pre, sizeof pre, "%s", v[i]);
        for (char *s = strchr(pre, '/'); s; s = strchr(s + 1, '/')) {
            *s = '\0';
            const char *key = pre;
            if (bsearch(&key, v, b->nfiles, sizeof *v, cmp_strp)) {
                rc = ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch %s: %s is both a file and a directory",
                                  b->name, pre);
                goto out;
            }
            *s = '/';
        }
    }
    for (uint32_t i = 0; i < b->nfiles; i++) {
        const lfile *f = &b->files[i];
        char dir[LANDED_MAX];
        const char *name;
        split_path(f->landed, dir, sizeof dir, &name);
        if (lastfd == -2 || strcmp(dir, lastdir) != 0) {
            if (lastfd >= 0)
                close(lastfd);
            lastfd = -2;
            rc = walk_dir(b, f->path, dir, false, &lastfd);
            if (rc < 0)
                goto out;
            snprintf(lastdir, sizeof lastdir, "%s", dir);
        }
        if (lastfd >= 0) {
            struct stat sb;
            if (fstatat(lastfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode)) {
                rc = ingest__fail(b->ctx, INGEST_EINVAL,
                                  "lander: file %s: %s exists in the bronze tree and is not a regular file",
                                  f->path, f->landed);
                goto out;
            }
        }
    }
out:
    if (lastfd >= 0)
        close(lastfd);
    ingest__free(b->ctx, v);
    return rc;
}

static uint64_t tab_hash(const ingest_lander *l, const uint8_t *id)
{
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, id, INGEST_ID_BYTES, l->tabkey);
    uint64_t v;
    memcpy(&v, h, sizeof v);
    return v;
}

/* Classify each chunk (recv / known / dup) and build the want list. */
static int compute_wants(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    int rc = 0;
    uint32_t *tab = NULL;
    const uint32_t n = b->nchunks;
    b->pos = ingest__calloc(b->ctx, n ? n : 1, sizeof *b->pos);
    b->src = ingest__calloc(b->ctx, n ? n : 1, sizeof *b->src);
    b->cst = ingest__calloc(b->ctx, n ? n : 1, 1);
    b->wants = ingest__malloc(b->ctx, (n ? n : 1) * sizeof *b->wants);
    b->rew = ingest__malloc(b->ctx, (n ? n : 1) * sizeof *b->rew);
    uint64_t tcap = 16;
    while (tcap < (uint64_t)n * 2)
        tcap *= 2;
    tab = ingest__calloc(b->ctx, tcap, sizeof *tab);
    if (!b->pos || !b->src || !b->cst || !b->wants || !b->rew || !tab) {
        rc = ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory for %u chunks", n);
        goto out;
    }
    uint64_t last_no = UINT64_MAX;
    bool last_ok = false;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *id = b->mc[i].id;
        uint64_t s = tab_hash(l, id) & (tcap - 1);
        bool dup = false;
        while (tab[s] != 0) {
            const uint32_t j = tab[s] - 1;
            if (memcmp(b->mc[j].id, id, INGEST_ID_BYTES) == 0) {
                if (b->mc[j].len != b->mc[i].len) {
                    rc = ingest__fail(b->ctx, INGEST_EMISMATCH,
                                      "lander: batch %s: chunk %u and chunk %u have the same id and lengths %u, %u",
                                      b->name, j, i, b->mc[j].len, b->mc[i].len);
                    goto out;
                }
                b->cst[i] = K_DUP;
                b->src[i] = j;
                dup = true;
                break;
            }
            s = (s + 1) & (tcap - 1);
        }
        if (dup)
            continue;
        tab[s] = i + 1;
        ingest_chunk_loc loc;
        rc = ingest_index_find_for(l->idx, b->device, id, &loc);
        bool known = false;
        if (rc == 0 && loc.length == b->mc[i].len) {
            if (loc.file_no != last_no) {
                char p[LANDED_MAX + 512];
                rc = ingest_index_file_path(l->idx, loc.file_no, p, sizeof p);
                if (rc < 0 && rc != INGEST_ESTALE && rc != INGEST_ENOTFOUND)
                    goto out;
                last_no = loc.file_no;
                last_ok = rc == 0;
            }
            known = last_ok;
        } else if (rc < 0 && rc != INGEST_ENOTFOUND) {
            goto out;
        }
        rc = 0;
        if (known) {
            b->cst[i] = K_KNOWN;
        } else {
            b->cst[i] = K_RECV;
            b->wants[b->nwants++] = i;
        }
    }
    b->awaited = (uint32_t)b->nwants;
out:
    ingest__free(b->ctx, tab);
    return rc;
}

/*
 * (device, batch) was landed before: check that its landed manifest
 * describes the same batch (file count, bytes, first file's path and hash)
 * before calling this a replay.  INGEST_EEXIST when the id was reused for
 * other data; a missing landed manifest cannot be compared and is taken as
 * the same batch.
 */
static int same_landed_batch(ingest_lander_batch *b, const char *device, uint64_t nfiles, uint64_t bytes,
                             const ingest_manifest_rec *first)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/_manifests/%s/%s.jsonl", b->l->root, device, b->name);
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    if (access(path, F_OK) != 0)
        return 0;
    int rc = ingest_manifest_reader_open(b->ctx, path, &r);
    if (rc == 0)
        rc = ingest_manifest_reader_next(r, &rec);
    int same = rc == 1 && rec.type == INGEST_MREC_HEADER && rec.nfiles == nfiles && rec.total_bytes == bytes;
    if (same && first != NULL) {
        /* A wire manifest may leave the hash out: derive it when the first line holds all its chunks. */
        uint8_t h[INGEST_ID_BYTES];
        int have = !first->omit_hash;
        memcpy(h, first->hash, sizeof h);
        if (!have && first->nchunks == first->nchunks_total) {
            ingest_filehash fh;
            ingest_filehash_init(&fh, b->l->key);
            for (uint32_t k = 0; k < first->nchunks; k++)
                ingest_filehash_update(&fh, first->chunks[k].id, INGEST_ID_BYTES);
            ingest_filehash_final(&fh, h);
            have = 1;
        }
        rc = ingest_manifest_reader_next(r, &rec);
        same = rc == 1 && rec.type == INGEST_MREC_FILE && strcmp(rec.path, first->path) == 0 &&
               (!have || memcmp(rec.hash, h, INGEST_ID_BYTES) == 0);
    }
    ingest_manifest_reader_close(r);
    if (!same)
        return ingest__fail(b->ctx, INGEST_EEXIST,
                            "lander: batch id %s of device %s was already used for other data; refusing to treat "
                            "it as a replay (the device must use a new batch id)", b->name, device);
    return 0;
}

static int read_manifest(ingest_lander_batch *b, const char *device, const void *buf, size_t len, bool *already)
{
    ingest_lander *l = b->l;
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    lfile *f = NULL;
    uint64_t fsum = 0, fchunks = 0;
    int derive = 0; /* f's hash is derived from its chunk ids in dh */
    ingest_filehash dh;
    int rc = ingest_manifest_reader_mem(b->ctx, buf, len, &r);
    if (rc < 0)
        return rc;
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL);
    rc = ingest_manifest_reader_next(r, &rec);
    if (rc == 0)
        rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: empty manifest from device %s", device);
    if (rc < 0)
        goto out;
    if (rec.type != INGEST_MREC_HEADER) {
        rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: manifest from device %s does not start with a header",
                          device);
        goto out;
    }
    if (strcmp(rec.device, device) != 0) {
        rc = ingest__fail(b->ctx, INGEST_EPROTO, "lander: manifest names device \"%s\", peer is \"%s\"",
                          rec.device, device);
        goto out;
    }
    if ((rc = check_name(b->ctx, "batch", rec.batch)) < 0)
        goto out;
    b->name = ingest__strdup(b->ctx, rec.batch);
    if (!b->name) {
        rc = ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
        goto out;
    }
    rc = ingest_index_batch_landed(l->idx, device, b->name);
    if (rc < 0)
        goto out;
    if (rc == 1) {
        /* A replay carries the same batch; a device that lost its state may reuse an id for new data. */
        const uint64_t nfiles = rec.nfiles, bytes = rec.total_bytes;
        rc = ingest_manifest_reader_next(r, &rec);
        if (rc < 0)
            goto out;
        rc = same_landed_batch(b, device, nfiles, bytes, rc == 1 && rec.type == INGEST_MREC_FILE ? &rec : NULL);
        if (rc < 0)
            goto out;
        *already = true;
        rc = 0;
        goto out;
    }
    if (rec.nfiles > l->max_files) {
        rc = ingest__fail(b->ctx, INGEST_ETOOBIG, "lander: batch %s announces %llu files (at most %u)", b->name,
                          (unsigned long long)rec.nfiles, l->max_files);
        goto out;
    }
    b->nfiles = (uint32_t)rec.nfiles;
    b->files = ingest__calloc(b->ctx, b->nfiles ? b->nfiles : 1, sizeof *b->files);
    if (!b->files) {
        rc = ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory for %u files", b->nfiles);
        goto out;
    }
    for (;;) {
        rc = ingest_manifest_reader_next(r, &rec);
        if (rc < 0)
            goto out;
        if (rc == 0 || rec.type == INGEST_MREC_FILE) {
            if (f && derive) {
                /* the wire manifest left the hash out: it is that of the chunk ids (docs/manifest.md) */
                ingest_filehash_final(&dh, f->hash);
                derive = 0;
            }
            if (f && fsum != f->size) {
                rc = ingest__fail(b->ctx, INGEST_EMISMATCH,
                                  "lander: file %s: chunk lengths add up to %llu bytes, size is %llu", f->path,
                                  (unsigned long long)fsum, (unsigned long long)f->size);
                goto out;
            }
            if (f && fchunks != f->nchunks) {
                rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: file %s: %llu chunks listed, %u announced",
                                  f->path, (unsigned long long)fchunks, f->nchunks);
                goto out;
            }
            if (rc == 0)
                break;
            if (b->nfiles_read >= b->nfiles) {
                rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: batch %s: more files than the %u announced",
                                  b->name, b->nfiles);
                goto out;
            }
            f = &b->files[b->nfiles_read++];
            if ((rc = check_relpath(b->ctx, "file", rec.path)) < 0)
                goto out;
            f->path = ingest__strdup(b->ctx, rec.path);
            if (!f->path) {
                rc = ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
                goto out;
            }
            f->size = rec.size;
            f->mtime_ns = rec.mtime_ns;
            f->mode = rec.mode;
            memcpy(f->hash, rec.hash, sizeof f->hash);
            if (rec.omit_hash) {
                derive = 1;
                ingest_filehash_init(&dh, l->key);
            }
            if (rec.nchunks_total > l->max_chunks) {
                rc = ingest__fail(b->ctx, INGEST_ETOOBIG, "lander: file %s: %llu chunks (at most %u)", f->path,
                                  (unsigned long long)rec.nchunks_total, l->max_chunks);
                goto out;
            }
            f->first = b->nchunks;
            f->nchunks = (uint32_t)rec.nchunks_total;
            fsum = 0;
            fchunks = 0;
        } else if (rec.type != INGEST_MREC_CHUNKS || !f) {
            rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: batch %s: unexpected record type %d", b->name,
                              rec.type);
            goto out;
        }
        if (rec.nchunks > 0) {
            if ((uint64_t)b->nchunks + rec.nchunks > l->max_chunks) {
                rc = ingest__fail(b->ctx, INGEST_ETOOBIG, "lander: batch %s has more than %u chunks", b->name,
                                  l->max_chunks);
                goto out;
            }
            if ((rc = chunks_grow(b, b->nchunks + rec.nchunks)) < 0)
                goto out;
            for (uint32_t k = 0; k < rec.nchunks; k++) {
                const uint32_t cl = rec.chunks[k].len;
                if (cl == 0 || cl > INGEST_CODEC_MAX_RAW) {
                    rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: file %s: chunk %llu has length %u", f->path,
                                      (unsigned long long)(fchunks + k), cl);
                    goto out;
                }
                fsum += cl;
                if (derive)
                    ingest_filehash_update(&dh, rec.chunks[k].id, INGEST_ID_BYTES);
                b->mc[b->nchunks++] = rec.chunks[k];
            }
            fchunks += rec.nchunks;
        }
    }
    if (b->nfiles_read != b->nfiles) {
        rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: batch %s: %u files listed, %u announced", b->name,
                          b->nfiles_read, b->nfiles);
        goto out;
    }
    rc = 0;
out:
    ingest_manifest_reader_close(r);
    return rc;
}

int ingest_lander_begin(ingest_lander *l, const char *device, const void *manifest, size_t len,
                        ingest_lander_batch **out)
{
    if (out)
        *out = NULL;
    if (!l || !device || !manifest || !out)
        return INGEST_EINVAL;
    if (l->busy)
        return ingest__fail(l->ctx, INGEST_EBUSY, "lander: batch %s still open", l->busy->name);
    INGEST__FORWARD(check_name(l->ctx, "device", device));
    ingest_lander_batch *b = ingest__calloc(l->ctx, 1, sizeof *b);
    if (!b)
        return ingest__fail(l->ctx, INGEST_ENOMEM, "lander: out of memory");
    b->l = l;
    b->ctx = l->ctx;
    b->fd = b->dirfd = b->srcfd = b->spillfd = -1;
    b->src_no = UINT64_MAX;
    b->state = B_DEAD; /* nothing to remove until landing starts */
    bool already = false;
    int rc;
    b->device = ingest__strdup(l->ctx, device);
    if (!b->device) {
        rc = ingest__fail(l->ctx, INGEST_ENOMEM, "lander: out of memory");
        goto fail;
    }
    rc = read_manifest(b, device, manifest, len, &already);
    if (rc < 0)
        goto fail;
    if (already) {
        ingest__log(l->ctx, INGEST_LOG_INFO, "lander: batch %s of %s already landed", b->name, device);
        ingest_lander_batch_destroy(b);
        return INGEST_LANDER_ALREADY;
    }
    uint32_t maxlen = 0;
    for (uint32_t i = 0; i < b->nchunks; i++)
        if (b->mc[i].len > maxlen)
            maxlen = b->mc[i].len;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        char p[LANDED_MAX];
        rc = landed_path(l, device, b->name, f->path, f->mtime_ns, p, sizeof p);
        if (rc < 0)
            goto fail;
        f->landed = ingest__strdup(l->ctx, p);
        if (!f->landed) {
            rc = ingest__fail(l->ctx, INGEST_ENOMEM, "lander: out of memory");
            goto fail;
        }
        b->stats.bytes += f->size;
    }
    if ((rc = check_paths(b)) < 0)
        goto fail;
    if ((rc = compute_wants(b)) < 0)
        goto fail;
    if ((rc = bufs_reserve(b, maxlen ? maxlen : 1)) < 0)
        goto fail;
    b->stats.files = b->nfiles;
    b->stats.chunks = b->nchunks;
    b->state = B_ACTIVE;
    l->busy = b;
    *out = b;
    return 0;
fail:
    ingest_lander_batch_destroy(b);
    return rc;
}

/* --------------------------------------------------------------- landing */

static int open_tmp(ingest_lander_batch *b, uint32_t fi)
{
    lfile *f = &b->files[fi];
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    split_path(f->landed, dir, sizeof dir, &name);
    INGEST__FORWARD(enter_dir(b, f->path, dir, true));
    INGEST__FORWARD(add_dir(b, dir));
    tmp_name(b->l, name, b->name, fi, tn, sizeof tn);
    const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC;
    b->direct = false;
    if (b->l->direct_io && f->size >= DIO_ALIGN) {
        if (b->dio == NULL) {
            /* the context's allocator has no alignment: over-allocate and align inside */
            b->dio_mem = ingest__malloc(b->ctx, DIO_BUF + DIO_ALIGN);
            if (b->dio_mem == NULL)
                return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory (direct I/O buffer)");
            const uintptr_t a = (uintptr_t)b->dio_mem;
            b->dio = (uint8_t *)b->dio_mem + ((DIO_ALIGN - a % DIO_ALIGN) % DIO_ALIGN);
        }
        b->fd = openat(b->dirfd, tn, flags | O_DIRECT, 0600);
        if (b->fd >= 0)
            b->direct = true;
        else if (errno != EINVAL) /* EINVAL: the filesystem does not take O_DIRECT; write through the cache */
            return sys_fail(b->ctx, errno, "create temporary file for", f->landed);
    }
    if (b->fd < 0)
        b->fd = openat(b->dirfd, tn, flags, 0600);
    if (b->fd < 0)
        return sys_fail(b->ctx, errno, "create temporary file for", f->landed);
    f->created = true;
    b->file_off = 0;
    b->dio_fill = 0;
    b->dio_base = 0;
    ingest_filehash_init(&b->fh, b->l->key);
    return 0;
}

/* Write the direct I/O buffer at dio_base: whole (len DIO_BUF) or, at the end of the file, padded. */
static int dio_flush(ingest_lander_batch *b, bool last)
{
    size_t len = b->dio_fill;
    if (len == 0)
        return 0;
    if (last && (len % DIO_ALIGN) != 0) {
        const size_t pad = DIO_ALIGN - len % DIO_ALIGN;
        memset(b->dio + len, 0, pad);
        len += pad;
    }
    size_t done = 0;
    while (done < len) {
        const ssize_t w = pwrite(b->fd, b->dio + done, len - done, (off_t)(b->dio_base + done));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        done += (size_t)w;
    }
    b->dio_base += b->dio_fill;
    b->dio_fill = 0;
    return 0;
}

/* Append data to the file being written: through the direct I/O buffer, or write(). */
static int file_append(ingest_lander_batch *b, const uint8_t *data, size_t n)
{
    if (!b->direct)
        return write_full(b->fd, data, n);
    while (n > 0) {
        const size_t k = DIO_BUF - b->dio_fill < n ? DIO_BUF - b->dio_fill : n;
        memcpy(b->dio + b->dio_fill, data, k);
        b->dio_fill += k;
        data += k;
        n -= k;
        if (b->dio_fill == DIO_BUF && dio_flush(b, false) < 0)
            return -1;
    }
    return 0;
}

/*
 * Read n bytes at pos of the file being written (a chunk the batch repeats):
 * what is still in the direct I/O buffer comes from there, the rest through
 * fd (a descriptor of the same file, opened for reading).  0, -1 errno, 1 short.
 */
static int read_current(ingest_lander_batch *b, int fd, uint64_t pos, size_t n, uint8_t *out)
{
    size_t from_file = n;
    if (b->direct && pos + n > b->dio_base) {
        const size_t head = pos < b->dio_base ? (size_t)(b->dio_base - pos) : 0;
        const size_t boff = pos < b->dio_base ? 0 : (size_t)(pos - b->dio_base);
        if (boff + (n - head) > b->dio_fill)
            return 1;
        memcpy(out + head, b->dio + boff, n - head);
        from_file = head;
    }
    return from_file > 0 ? pread_full(fd, out, from_file, pos) : 0;
}

static uint32_t landed_mode(uint32_t mode)
{
    return (mode & 0111) ? 0755 : 0644;
}

static int finish_file(ingest_lander_batch *b, uint32_t fi)
{
    lfile *f = &b->files[fi];
    if (b->direct) {
        /* the padded last block, then the exact size (before the mtime: truncating sets it) */
        if (dio_flush(b, true) < 0)
            return sys_fail(b->ctx, errno, "write", f->landed);
        if (ftruncate(b->fd, (off_t)b->file_off) < 0)
            return sys_fail(b->ctx, errno, "truncate", f->landed);
    }
    uint8_t h[INGEST_ID_BYTES];
    ingest_filehash_final(&b->fh, h);
    if (b->file_off != f->size)
        return ingest__fail(b->ctx, INGEST_EMISMATCH, "lander: file %s: wrote %llu bytes, size is %llu", f->path,
                            (unsigned long long)b->file_off, (unsigned long long)f->size);
    if (sodium_memcmp(h, f->hash, sizeof h) != 0)
        return ingest__fail(b->ctx, INGEST_EMISMATCH, "lander: file %s: whole-file hash differs from the manifest",
                            f->path);
    if (fchmod(b->fd, (mode_t)landed_mode(f->mode)) < 0)
        return sys_fail(b->ctx, errno, "chmod", f->landed);
    struct timespec ts[2];
    int64_t s = f->mtime_ns / 1000000000, ns = f->mtime_ns % 1000000000;
    if (ns < 0) {
        s--;
        ns += 1000000000;
    }
    ts[0].tv_sec = ts[1].tv_sec = (time_t)s;
    ts[0].tv_nsec = ts[1].tv_nsec = (long)ns;
    if (futimens(b->fd, ts) < 0)
        return sys_fail(b->ctx, errno, "set mtime of", f->landed);
    /* start writeback now; commit waits for it with one fsync per file */
    (void)sync_file_range(b->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    if (close(b->fd) < 0) {
        b->fd = -1;
        return sys_fail(b->ctx, errno, "close", f->landed);
    }
    b->fd = -1;
    return 0;
}

static int write_chunk(ingest_lander_batch *b, uint32_t i, const uint8_t *data)
{
    const uint32_t n = b->mc[i].len;
    if (file_append(b, data, n) < 0)
        return sys_fail(b->ctx, errno, "write", b->files[b->cur_file].landed);
    /* data was checked against its id: the file hash covers the ids in order (docs/manifest.md) */
    ingest_filehash_update(&b->fh, b->mc[i].id, INGEST_ID_BYTES);
    b->pos[i] = b->file_off;
    b->file_off += n;
    b->cst[i] = (uint8_t)((b->cst[i] & ~(F_ARRIVED | F_INBUF)) | F_DONE);
    b->stats.bytes_written += n;
    return 0;
}

static bool id_matches(const ingest_lander_batch *b, uint32_t i, const uint8_t *data)
{
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_id(b->l->key, data, b->mc[i].len, id);
    return sodium_memcmp(id, b->mc[i].id, INGEST_ID_BYTES) == 0;
}

static int rewant(ingest_lander_batch *b, uint32_t i, const char *why)
{
    char hex[2 * INGEST_ID_BYTES + 1];
    ingest_to_hex(b->mc[i].id, INGEST_ID_BYTES, hex);
    ingest__log(b->ctx, INGEST_LOG_INFO, "lander: batch %s: known chunk %u (%s) %s: wanted again", b->name, i, hex,
                why);
    b->wrote = true;
    const int rc = ingest_index_forget_chunk_for(b->l->idx, b->device, b->mc[i].id);
    if (rc < 0 && rc != INGEST_ENOTFOUND)
        return rc;
    b->cst[i] = K_RECV;
    b->rew[b->nrew++] = i;
    b->awaited++;
    b->stats.chunks_rewanted++;
    return 0;
}

/*
 * Check where a known chunk lives without reading it: 1 usable, 0 stale
 * (already re-wanted), < 0 error.
 */
static int known_source(ingest_lander_batch *b, uint32_t i, ingest_chunk_loc *loc)
{
    int rc = ingest_index_find_for(b->l->idx, b->device, b->mc[i].id, loc);
    if (rc == INGEST_ENOTFOUND || (rc == 0 && loc->length != b->mc[i].len)) {
        INGEST__FORWARD(rewant(b, i, "left the index"));
        return 0;
    }
    if (rc < 0)
        return rc;
    if (b->srcfd >= 0 && b->src_no == loc->file_no)
        return 1;
    close_fd(&b->srcfd);
    b->src_no = UINT64_MAX;
    char p[LANDED_MAX + 512];
    rc = ingest_index_file_path(b->l->idx, loc->file_no, p, sizeof p);
    if (rc == INGEST_ESTALE || rc == INGEST_ENOTFOUND) {
        INGEST__FORWARD(rewant(b, i, "has a missing or changed landed file"));
        return 0;
    }
    if (rc < 0)
        return rc;
    b->srcfd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (b->srcfd < 0) {
        const int e = errno;
        if (e == ENOENT || e == ELOOP || e == ENOTDIR) {
            INGEST__FORWARD(rewant(b, i, "has a missing landed file"));
            return 0;
        }
        return sys_fail(b->ctx, e, "open", p);
    }
    b->src_no = loc->file_no;
    return 1;
}

/* Once per batch, after a first stale chunk: re-want every later stale one now, in one round. */
static int lookahead(ingest_lander_batch *b, uint32_t from)
{
    b->lookahead_done = true;
    uint64_t last_no = UINT64_MAX;
    bool last_ok = false;
    for (uint32_t j = from; j < b->nchunks; j++) {
        if ((b->cst[j] & K_MASK) != K_KNOWN || (b->cst[j] & F_DONE))
            continue;
        ingest_chunk_loc loc;
        int rc = ingest_index_find_for(b->l->idx, b->device, b->mc[j].id, &loc);
        if (rc == INGEST_ENOTFOUND || (rc == 0 && loc.length != b->mc[j].len)) {
            INGEST__FORWARD(rewant(b, j, "left the index"));
            continue;
        }
        if (rc < 0)
            return rc;
        if (loc.file_no != last_no) {
            char p[LANDED_MAX + 512];
            rc = ingest_index_file_path(b->l->idx, loc.file_no, p, sizeof p);
            if (rc < 0 && rc != INGEST_ESTALE && rc != INGEST_ENOTFOUND)
                return rc;
            last_no = loc.file_no;
            last_ok = rc == 0;
        }
        if (!last_ok)
            INGEST__FORWARD(rewant(b, j, "has a missing or changed landed file"));
    }
    return 0;
}

/* Land chunk i at the cursor: 0 landed, 1 blocked (awaited), < 0 error. */
static int land_one(ingest_lander_batch *b, uint32_t i)
{
    const uint32_t n = b->mc[i].len;
    const int kind = b->cst[i] & K_MASK;
    if (kind == K_RECV) {
        if (b->cst[i] & F_INBUF)
            return write_chunk(b, i, b->rbuf);
        if (!(b->cst[i] & F_ARRIVED))
            return 1;
        const int r = pread_full(b->spillfd, b->cbuf, n, b->pos[i]);
        if (r != 0)
            return ingest__fail(b->ctx, r < 0 ? ingest__errno(errno) : INGEST_EIO,
                                "lander: batch %s: reading chunk %u back from the spill file failed", b->name, i);
        if (!id_matches(b, i, b->cbuf))
            return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: chunk %u changed in the spill file", b->name,
                                i);
        return write_chunk(b, i, b->cbuf);
    }
    if (kind == K_DUP) {
        const uint32_t j = b->src[i];
        /* the file holding chunk j: the last whose first chunk is <= j */
        uint32_t lo = 0, hi = b->nfiles;
        while (hi - lo > 1) {
            const uint32_t mid = lo + (hi - lo) / 2;
            if (b->files[mid].first <= j)
                lo = mid;
            else
                hi = mid;
        }
        while (lo > 0 && b->files[lo].nchunks == 0)
            lo--;
        const lfile *sf = &b->files[lo];
        int fd = -1;
        bool own = false;
        if (lo == b->cur_file) {
            /* written through a write-only descriptor: read it through a new one */
            char tn[NAME_MAX_BYTES + 1], dir[LANDED_MAX];
            const char *name;
            split_path(sf->landed, dir, sizeof dir, &name);
            tmp_name(b->l, name, b->name, lo, tn, sizeof tn);
            fd = openat(b->dirfd, tn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        } else {
            char tn[NAME_MAX_BYTES + 1], dir[LANDED_MAX];
            const char *name;
            split_path(sf->landed, dir, sizeof dir, &name);
            tmp_name(b->l, name, b->name, lo, tn, sizeof tn);
            int dfd = -1;
            INGEST__FORWARD(walk_dir(b, sf->path, dir, false, &dfd));
            if (dfd >= 0) {
                fd = openat(dfd, tn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                close(dfd);
            }
        }
        own = fd >= 0;
        if (!own)
            return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: temporary file of %s vanished", b->name,
                                sf->landed);
        const int r = lo == b->cur_file ? read_current(b, fd, b->pos[j], n, b->cbuf) : pread_full(fd, b->cbuf, n, b->pos[j]);
        const int e = errno;
        close(fd);
        if (r != 0)
            return ingest__fail(b->ctx, r < 0 ? ingest__errno(e) : INGEST_EIO,
                                "lander: batch %s: reading chunk %u back from %s failed", b->name, j, sf->landed);
        if (!id_matches(b, i, b->cbuf))
            return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: chunk %u changed in temporary file of %s",
                                b->name, j, sf->landed);
        b->stats.copies++;
        b->stats.chunks_known++;
        return write_chunk(b, i, b->cbuf);
    }
    /* known: copy from the landed file named by the index, verifying it */
    ingest_chunk_loc loc;
    int rc = known_source(b, i, &loc);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        const int r = pread_full(b->srcfd, b->cbuf, n, loc.offset);
        if (r < 0)
            return sys_fail(b->ctx, errno, "read", "landed file");
        if (r == 0 && id_matches(b, i, b->cbuf)) {
            b->stats.copies++;
            b->stats.chunks_known++;
            return write_chunk(b, i, b->cbuf);
        }
        close_fd(&b->srcfd);
        b->src_no = UINT64_MAX;
        INGEST__FORWARD(rewant(b, i, r ? "is past the end of its landed file" : "does not match its landed bytes"));
    }
    if (!b->lookahead_done)
        INGEST__FORWARD(lookahead(b, i + 1));
    return 1;
}

static int pump(ingest_lander_batch *b)
{
    while (b->cur_file < b->nfiles) {
        const lfile *f = &b->files[b->cur_file];
        if (b->fd < 0)
            INGEST__FORWARD(open_tmp(b, b->cur_file));
        while (b->cur_chunk < f->first + f->nchunks) {
            const int r = land_one(b, b->cur_chunk);
            if (r < 0)
                return r;
            if (r > 0)
                return 0;
            b->cur_chunk++;
        }
        INGEST__FORWARD(finish_file(b, b->cur_file));
        b->cur_file++;
    }
    return 0;
}

int ingest_lander_advance(ingest_lander_batch *b)
{
    if (!b || b->state != B_ACTIVE)
        return b ? bad_state(b) : INGEST_EINVAL;
    const int rc = settle(b, pump(b));
    if (rc < 0)
        return fail_batch(b, rc);
    return (int)b->awaited;
}

static int spill(ingest_lander_batch *b, uint32_t i)
{
    if (b->spillfd < 0) {
        b->spillfd = openat(b->l->rootfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (b->spillfd < 0) {
            /* no O_TMPFILE here: a named file, unlinked at once */
            char name[64];
            for (int k = 0; k < 100 && b->spillfd < 0; k++) {
                snprintf(name, sizeof name, ".ingest-spill.%08x", randombytes_random());
                b->spillfd = openat(b->l->rootfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            }
            if (b->spillfd < 0)
                return sys_fail(b->ctx, errno, "create spill file in", b->l->root);
            unlinkat(b->l->rootfd, name, 0);
        }
        b->spill_len = 0;
    }
    const uint32_t n = b->mc[i].len;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = pwrite(b->spillfd, b->rbuf + done, n - done, (off_t)(b->spill_len + done));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return sys_fail(b->ctx, errno, "write spill file in", b->l->root);
        }
        done += (size_t)w;
    }
    b->pos[i] = b->spill_len;
    b->spill_len += n;
    b->cst[i] |= F_ARRIVED;
    b->stats.chunks_spilled++;
    return 0;
}

int ingest_lander_chunk_expect(const ingest_lander_batch *b, uint32_t i, uint8_t id[INGEST_ID_BYTES],
                               uint32_t *len)
{
    if (b == NULL || i >= b->nchunks)
        return INGEST_EINVAL;
    memcpy(id, b->mc[i].id, INGEST_ID_BYTES);
    *len = b->mc[i].len;
    return 0;
}

/* Checks shared by put_chunk and put_verified: is chunk i awaited? */
static int put_check(ingest_lander_batch *b, uint32_t i, const void *data, size_t len)
{
    if (!b || b->state != B_ACTIVE)
        return b ? bad_state(b) : INGEST_EINVAL;
    if (!data && len > 0)
        return fail_batch(b, ingest__fail(b->ctx, INGEST_EINVAL, "lander: put_chunk: no data"));
    if (i >= b->nchunks)
        return fail_batch(b, ingest__fail(b->ctx, INGEST_EPROTO, "lander: batch %s: chunk index %u past %u chunks",
                                          b->name, i, b->nchunks));
    if ((b->cst[i] & K_MASK) != K_RECV || (b->cst[i] & (F_ARRIVED | F_INBUF | F_DONE)))
        return fail_batch(b, ingest__fail(b->ctx, INGEST_EPROTO, "lander: batch %s: chunk %u was not %s", b->name,
                                          i, (b->cst[i] & K_MASK) != K_RECV ? "requested" : "awaited any more"));
    return 0;
}

/* The chunk's bytes are in b->rbuf, verified: land them (or spill them). */
static int put_tail(ingest_lander_batch *b, uint32_t i, size_t received)
{
    int rc;
    b->stats.bytes_received += received;
    b->stats.chunks_new++;
    b->awaited--;
    /* land what precedes it, then it straight from memory if the cursor is there */
    if ((rc = pump(b)) == 0) {
        if (b->cur_chunk == i && b->cur_file < b->nfiles) {
            b->cst[i] |= F_INBUF;
            rc = pump(b);
        } else {
            rc = spill(b, i);
        }
    }
    rc = settle(b, rc);
    return rc < 0 ? fail_batch(b, rc) : 0;
}

int ingest_lander_put_chunk(ingest_lander_batch *b, uint32_t i, const void *encoded, size_t len)
{
    int rc = put_check(b, i, encoded, len);
    if (rc < 0)
        return rc;
    size_t got = 0;
    rc = ingest_codec_decode(b->l->codec, encoded, len, b->rbuf, b->mc[i].len, &got, b->l->key, b->mc[i].id);
    if (rc < 0) {
        char keep[INGEST__ERRMSG_MAX];
        memcpy(keep, b->ctx->errmsg, sizeof keep);
        return fail_batch(b, ingest__fail(b->ctx, rc, "lander: batch %s: chunk %u refused: %s", b->name, i, keep));
    }
    if (got != b->mc[i].len)
        return fail_batch(b, ingest__fail(b->ctx, INGEST_EMISMATCH,
                                          "lander: batch %s: chunk %u decodes to %zu bytes, manifest says %u", b->name,
                                          i, got, b->mc[i].len));
    return put_tail(b, i, len);
}

int ingest_lander_put_verified(ingest_lander_batch *b, uint32_t i, const void *raw, size_t len, size_t received,
                               const uint8_t id[INGEST_ID_BYTES])
{
    int rc = put_check(b, i, raw, len);
    if (rc < 0)
        return rc;
    if (id == NULL || sodium_memcmp(id, b->mc[i].id, INGEST_ID_BYTES) != 0)
        return fail_batch(b, ingest__fail(b->ctx, INGEST_EMISMATCH,
                                          "lander: batch %s: chunk %u was verified against another id than the "
                                          "manifest's (sent before the WANT that asked for it?)",
                                          b->name, i));
    if (len != b->mc[i].len)
        return fail_batch(b, ingest__fail(b->ctx, INGEST_EMISMATCH,
                                          "lander: batch %s: chunk %u has %zu bytes, manifest says %u", b->name, i,
                                          len, b->mc[i].len));
    memcpy(b->rbuf, raw, len);
    return put_tail(b, i, received);
}

/* ---------------------------------------------------------------- commit */

static int write_manifest(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    ingest_manifest_writer *w = NULL;
    int fd = -1, dfd = -1, rc;
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1], fn[NAME_MAX_BYTES + 1];
    snprintf(dir, sizeof dir, "_manifests/%s", b->device);
    snprintf(tn, sizeof tn, ".%s.jsonl.tmp", b->name);
    snprintf(fn, sizeof fn, "%s.jsonl", b->name);
    if ((rc = walk_dir(b, fn, dir, true, &dfd)) < 0)
        goto out;
    if ((rc = add_dir(b, dir)) < 0)
        goto out;
    if ((rc = ingest_manifest_writer_create(b->ctx, &w)) < 0)
        goto out;
    fd = openat(dfd, tn, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = sys_fail(b->ctx, errno, "create manifest in", dir);
        goto out;
    }
    ingest_manifest_rec rec;
    memset(&rec, 0, sizeof rec);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    rec.type = INGEST_MREC_HEADER;
    rec.format = INGEST_MANIFEST_FORMAT;
    rec.device = b->device;
    rec.batch = b->name;
    rec.nfiles = b->nfiles;
    rec.total_bytes = b->stats.bytes;
    rec.created_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    for (uint32_t i = 0; i <= b->nfiles; i++) {
        if ((rc = ingest_manifest_writer_add(w, &rec)) < 0)
            goto out;
        size_t n;
        const void *d = ingest_manifest_writer_data(w, &n);
        if (n >= MANIFEST_FLUSH || i == b->nfiles) {
            if (write_full(fd, d, n) < 0) {
                rc = sys_fail(b->ctx, errno, "write manifest in", dir);
                goto out;
            }
            b->stats.bytes_written += n;
            ingest_manifest_writer_reset(w);
        }
        if (i == b->nfiles)
            break;
        const lfile *f = &b->files[i];
        memset(&rec, 0, sizeof rec);
        rec.type = INGEST_MREC_FILE;
        rec.path = f->path;
        rec.landed = f->landed;
        rec.size = f->size;
        rec.mtime_ns = f->mtime_ns;
        rec.mode = f->mode;
        rec.version = f->version;
        memcpy(rec.hash, f->hash, sizeof rec.hash);
        rec.nchunks_total = f->nchunks;
        rec.chunks = f->nchunks ? &b->mc[f->first] : NULL;
        rec.nchunks = f->nchunks;
    }
    if (!b->syncfs) {
        if (fsync(fd) < 0) {
            rc = sys_fail(b->ctx, errno, "fsync manifest in", dir);
            goto out;
        }
        b->stats.syncs++;
    }
    if (close(fd) < 0) {
        fd = -1;
        rc = sys_fail(b->ctx, errno, "close manifest in", dir);
        goto out;
    }
    fd = -1;
    if (renameat(dfd, tn, dfd, fn) < 0) {
        rc = sys_fail(b->ctx, errno, "rename manifest in", dir);
        goto out;
    }
    rc = 0;
out:
    if (fd >= 0) {
        close(fd);
        unlinkat(dfd, tn, 0);
    }
    if (dfd >= 0)
        close(dfd);
    ingest_manifest_writer_destroy(w);
    (void)l;
    return rc;
}

static int sync_dirs(ingest_lander_batch *b)
{
    qsort(b->dirs, b->ndirs, sizeof *b->dirs, cmp_strp);
    for (size_t i = 0; i < b->ndirs; i++) {
        if (i > 0 && strcmp(b->dirs[i], b->dirs[i - 1]) == 0)
            continue;
        int dfd = -1;
        INGEST__FORWARD(walk_dir(b, b->dirs[i], b->dirs[i], false, &dfd));
        if (dfd < 0)
            return ingest__fail(b->ctx, INGEST_EIO, "lander: directory %s vanished", b->dirs[i]);
        const int r = fsync(dfd);
        const int e = errno;
        close(dfd);
        if (r < 0)
            return sys_fail(b->ctx, e, "fsync directory", b->dirs[i][0] ? b->dirs[i] : ".");
        b->stats.syncs++;
    }
    return 0;
}

static int versions_db(ingest_lander *l)
{
    if (l->vdb_open)
        return 0;
    INGEST__FORWARD(ingest__store_db(l->st, INGEST__VERSIONS_TABLE, &l->vdb));
    l->vdb_open = true;
    return 0;
}

/*
 * Commit step 1, run with the caller's lock released: every file's data
 * on disk under its temporary name, and its identity (recorded in the
 * index).  Few files, or not all on the bronze root's filesystem: an fsync
 * per file (and per directory in step 3).  A batch of many files on one
 * filesystem: each file's data written and waited for with
 * sync_file_range(), no journal commit; the one syncfs() of step 3 then
 * commits the files' blocks, sizes and final names in one journal
 * transaction, its cache flush covering the data written before.  A
 * rename can reach the journal before that syncfs (another fsync on the
 * filesystem, the journal's timer) but only after the data it names is
 * written.  syncfs reports the writeback errors of the filesystem since
 * Linux 5.8.  Touches only the batch and its files.
 */
static int sync_temps(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    struct stat rs;
    if (fstat(l->rootfd, &rs) < 0)
        return sys_fail(b->ctx, errno, "stat", l->root);
    bool use_syncfs = b->nfiles >= INGEST_LANDER_SYNCFS_MIN;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        split_path(f->landed, dir, sizeof dir, &name);
        tmp_name(b->l, name, b->name, i, tn, sizeof tn);
        INGEST__FORWARD(enter_dir(b, f->path, dir, false));
        struct stat sb;
        if (fstatat(b->dirfd, tn, &sb, AT_SYMLINK_NOFOLLOW) < 0)
            return sys_fail(b->ctx, errno, "stat temporary file of", f->landed);
        if (sb.st_dev != rs.st_dev)
            use_syncfs = false;
        f->ident.dev = (uint64_t)sb.st_dev;
        f->ident.ino = (uint64_t)sb.st_ino;
        f->ident.size = (uint64_t)sb.st_size;
        f->ident.mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    }
    b->syncfs = use_syncfs;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        split_path(f->landed, dir, sizeof dir, &name);
        tmp_name(b->l, name, b->name, i, tn, sizeof tn);
        INGEST__FORWARD(enter_dir(b, f->path, dir, false));
        const int fd = openat(b->dirfd, tn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
            return sys_fail(b->ctx, errno, "open temporary file of", f->landed);
        const int r = use_syncfs ? sync_file_range(fd, 0, 0,
                                                    SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                                        SYNC_FILE_RANGE_WAIT_AFTER)
                                 : fsync(fd);
        const int e = errno;
        close(fd);
        if (r < 0)
            return sys_fail(b->ctx, e, use_syncfs ? "write out" : "fsync", f->landed);
        if (!use_syncfs)
            b->stats.syncs++;
    }
    return 0;
}

/*
 * Commit step 2, under the caller's lock: each file's version (the path's
 * counter + 1) is read, stored and the file renamed over its final name,
 * in one locked step, so a batch landing the same path later gets the next
 * version and renames after us: the newest version is the one left in
 * place.  The counter is stored before the rename: a rename that fails
 * leaves a gap in the numbers, never a landed version without a record
 * (in a store that defers the index's writes, until a crash: see
 * docs/landing.md).
 * commit_now: commit the store before the caller's lock is released (see
 * settle).
 */
/*
 * Before the first rename: every final name must be free or a regular file
 * (an earlier version).  A directory, symlink or other file there would
 * fail its rename halfway through the batch; refusing here leaves nothing
 * of the batch under a final name.
 */
static int check_final_names(ingest_lander_batch *b)
{
    char dir[LANDED_MAX];
    const char *name;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        split_path(f->landed, dir, sizeof dir, &name);
        INGEST__FORWARD(enter_dir(b, f->path, dir, false));
        struct stat sb;
        if (fstatat(b->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno != ENOENT)
                return sys_fail(b->ctx, errno, "stat the final name of", f->landed);
            f->fresh = true;
            continue;
        }
        f->fresh = false;
        if (!S_ISREG(sb.st_mode))
            return ingest__fail(b->ctx, INGEST_EEXIST,
                                "lander: file %s: cannot land at %s: a %s is there (nothing of batch %s was put in "
                                "place)",
                                f->path, f->landed, S_ISDIR(sb.st_mode) ? "directory" : S_ISLNK(sb.st_mode) ? "symlink"
                                                                                                             : "special file",
                                b->name);
    }
    return 0;
}

/*
 * A rename failed after others succeeded (an I/O error: check_final_names
 * found every name usable): take back the files that had no earlier
 * version, so the batch leaves nothing new under a final name.  A file
 * that replaced an earlier version stays (that version is gone); the batch
 * is not acknowledged, and its replay lands it again as a newer version.
 */
static void undo_renames(ingest_lander_batch *b)
{
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    char keep[INGEST__ERRMSG_MAX];
    memcpy(keep, b->ctx->errmsg, sizeof keep);
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (!f->renamed)
            continue;
        split_path(f->landed, dir, sizeof dir, &name);
        if (!f->fresh) {
            ingest__log(b->ctx, INGEST_LOG_WARN,
                        "lander: batch %s failed during its renames: %s stays as the newer version", b->name,
                        f->landed);
            continue;
        }
        tmp_name(b->l, name, b->name, i, tn, sizeof tn);
        if (enter_dir(b, f->path, dir, false) == 0 && renameat(b->dirfd, name, b->dirfd, tn) == 0)
            f->renamed = false; /* a temporary again: removed with the others */
    }
    memcpy(b->ctx->errmsg, keep, sizeof keep);
}

static int place_files(ingest_lander_batch *b, bool commit_now)
{
    ingest_lander *l = b->l;
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    INGEST__FORWARD(versions_db(l));
    INGEST__FORWARD(check_final_names(b));
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        uint8_t v[8];
        size_t vl = 0;
        uint8_t key[INGEST__PATH_KEY_MAX];
        const size_t kl = ingest__landed_key(f->landed, key);
        int r = ingest__store_get(l->st, l->vdb, key, kl, v, sizeof v, &vl);
        if (r < 0 && r != INGEST_ENOTFOUND) {
            r = store_fail(b, r, "read the version of", f->landed);
            goto fail;
        }
        f->version = (r == 0 && vl == 8) ? ingest__get_u64(v) + 1 : 1;
        ingest__put_u64(v, f->version);
        b->wrote = true;
        if ((r = ingest__store_put(l->st, l->vdb, key, kl, v, sizeof v)) < 0) {
            r = store_fail(b, r, "store the version of", f->landed);
            goto fail;
        }
        split_path(f->landed, dir, sizeof dir, &name);
        tmp_name(b->l, name, b->name, i, tn, sizeof tn);
        if ((r = enter_dir(b, f->path, dir, false)) < 0)
            goto fail;
        if (renameat(b->dirfd, tn, b->dirfd, name) < 0) {
            r = sys_fail(b->ctx, errno, "rename into place", f->landed);
            goto fail;
        }
        f->renamed = true;
        continue;
    fail:
        undo_renames(b);
        return r;
    }
    return commit_now ? settle(b, 0) : 0;
}

/*
 * Commit step 3, run with the caller's lock released: the batch manifest
 * (written, fsynced, renamed), then every touched directory once, or one
 * syncfs.  Touches only the batch and its files.
 */
static int sync_landed(ingest_lander_batch *b)
{
    INGEST__FORWARD(write_manifest(b));
    close_fd(&b->dirfd);
    if (b->syncfs) {
        if (syncfs(b->l->rootfd) < 0)
            return sys_fail(b->ctx, errno, "syncfs", b->l->root);
        b->stats.syncs++;
        return 0;
    }
    return sync_dirs(b);
}

/*
 * Commit step 4, under the caller's lock: the index (files, chunks at their
 * new place: first occurrences, copied chunks re-pointed at the newest
 * copy), the batch mark, the store commit.  A file whose path a later batch
 * landed again since step 2 (its counter is past our version) was replaced
 * on disk: it is not indexed, lest its record replace the newer file's.
 */
static int index_batch(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    b->wrote = true;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        uint8_t v[8];
        size_t vl = 0;
        uint8_t key[INGEST__PATH_KEY_MAX];
        const int r = ingest__store_get(l->st, l->vdb, key, ingest__landed_key(f->landed, key), v, sizeof v, &vl);
        if (r < 0 && r != INGEST_ENOTFOUND)
            return store_fail(b, r, "read the version of", f->landed);
        if (r == 0 && vl == 8 && ingest__get_u64(v) > f->version) {
            ingest__log(b->ctx, INGEST_LOG_INFO,
                        "lander: batch %s: %s version %llu was replaced by version %llu before it was indexed",
                        b->name, f->landed, (unsigned long long)f->version,
                        (unsigned long long)ingest__get_u64(v));
            continue;
        }
        uint64_t file_no = 0;
        INGEST__FORWARD(ingest_index_add_file(l->idx, f->landed, &f->ident, &file_no));
        for (uint32_t k = f->first; k < f->first + f->nchunks; k++) {
            if ((b->cst[k] & K_MASK) == K_DUP)
                continue;
            const ingest_chunk_loc loc = {file_no, b->pos[k], b->mc[k].len};
            INGEST__FORWARD(ingest_index_add_chunk_for(l->idx, b->device, b->mc[k].id, &loc));
        }
    }
    INGEST__FORWARD(ingest_index_batch_mark(l->idx, b->device, b->name));
    return settle(b, 0);
}

static void lk_unlock(const ingest_lander_lock *lk)
{
    if (lk)
        lk->unlock(lk->ud);
}

static void lk_lock(const ingest_lander_lock *lk)
{
    if (lk)
        lk->lock(lk->ud);
}

/* Called and returns with the caller's lock held; drops it around the disk waits. */
static int do_commit(ingest_lander_batch *b, const ingest_lander_lock *lk)
{
    lk_unlock(lk);
    int rc = sync_temps(b);
    lk_lock(lk);
    if (rc < 0)
        return rc;
    INGEST__FORWARD(place_files(b, lk != NULL));
    lk_unlock(lk);
    rc = sync_landed(b);
    if (rc == 0 && b->l->catalog != NULL) /* the manifest is durable; the catalog locks itself */
        (void)ingest_catalog_add_batch(b->l->catalog, b->device, b->name);
    lk_lock(lk);
    if (rc < 0)
        return rc;
    return index_batch(b);
}

int ingest_lander_commit_prepare(ingest_lander_batch *b)
{
    if (b && b->state == B_PREPARED)
        return 0;
    if (!b || b->state != B_ACTIVE)
        return b ? bad_state(b) : INGEST_EINVAL;
    const int rc = settle(b, pump(b));
    if (rc < 0)
        return fail_batch(b, rc);
    if (b->awaited > 0 || b->cur_file < b->nfiles)
        return ingest__fail(b->ctx, INGEST_EBUSY, "lander: batch %s: %u chunks still awaited (%zu re-wanted)",
                            b->name, b->awaited, b->nrew);
    /* nothing more is read: release the sources and the chunk buffers now */
    close_fd(&b->srcfd);
    b->src_no = UINT64_MAX;
    close_fd(&b->spillfd);
    ingest__free(b->ctx, b->rbuf);
    ingest__free(b->ctx, b->cbuf);
    b->rbuf = b->cbuf = NULL;
    b->bufcap = 0;
    b->state = B_PREPARED;
    return 0;
}

int ingest_lander_commit_finish(ingest_lander_batch *b, const ingest_lander_lock *lk)
{
    if (!b)
        return INGEST_EINVAL;
    if (b->state != B_PREPARED)
        return bad_state(b);
    if (lk && (!lk->lock || !lk->unlock))
        return ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch %s: lock without its callbacks", b->name);
    const int rc = settle(b, do_commit(b, lk));
    close_fd(&b->dirfd);
    if (rc < 0)
        return fail_batch(b, rc);
    b->state = B_COMMITTED;
    ingest__log(b->ctx, INGEST_LOG_INFO, "lander: batch %s of %s landed: %u files, %llu bytes", b->name, b->device,
                b->nfiles, (unsigned long long)b->stats.bytes);
    return 0;
}

int ingest_lander_commit(ingest_lander_batch *b)
{
    const int rc = ingest_lander_commit_prepare(b);
    return rc < 0 ? rc : ingest_lander_commit_finish(b, NULL);
}
