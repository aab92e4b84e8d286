/*
 * The lander (include/ingest/lander.h, docs/landing.md): its handle, the
 * batch's state and the helpers the other parts share.  The engine is
 * split along its stages: lander_paths.c (layout, crash sweep,
 * directories), lander_begin.c (manifest and want list), lander_land.c
 * (landing chunks), lander_commit.c (making a batch durable); their shared
 * definitions are in lander_int.h.
 */
#include "lander_int.h"

/* ---------------------------------------------------------------- helpers */

int lander__sys_fail(ingest_ctx *ctx, int err, const char *what, const char *path)
{
    return ingest__fail(ctx, ingest__errno(err), "lander: %s %s: %s", what, path, strerror(err));
}


int lander__write_full(int fd, const void *p, size_t n)
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
int lander__pread_full(int fd, void *p, size_t n, uint64_t off)
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

void lander__close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Split a landed path: *name points into p; dir gets the parent ("" for root). */
void lander__split_path(const char *p, char *dir, size_t cap, const char **name)
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

/*
 * The temporary name of file fi of batch b (name: its final name):
 * ".{name}{mark}{devtag}.{batch}", or "{mark}{devtag}.{batch}.{fi}" past
 * 255 bytes.  {devtag} stands for the device, so two devices landing the
 * same path at once (a layout without {device}) under the same batch id
 * never share a temporary file.
 */
void lander__tmp_name(const ingest_lander_batch *b, const char *name, uint32_t fi, char *out, size_t cap)
{
    if (b->files[fi].stage != 0) { /* in a staged directory: its final name there (lander__data_dir) */
        snprintf(out, cap, "%s", name);
        return;
    }
    const int n = snprintf(out, cap, ".%s%s%s.%s", name, b->l->tmp_mark, b->devtag, b->name);
    if (n < 0 || (size_t)n > NAME_MAX_BYTES)
        snprintf(out, cap, "%s%s.%s.%u", b->l->tmp_mark, b->devtag, b->name, fi);
}

/*
 * The temporary name of the symlink file fi becomes at commit:
 * "{mark}{devtag}.{batch}.{fi}.l", never the name of a data temporary
 * (those end in the batch or in a number), so a replay's O_TRUNC never
 * meets a symlink.
 */
void lander__tmp_link_name(const ingest_lander_batch *b, uint32_t fi, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s.%s.%u.l", b->l->tmp_mark, b->devtag, b->name, fi);
}

void lander__tmp_of(const ingest_lander_batch *b, const char *name, uint32_t fi, char *out, size_t cap)
{
    if (b->files[fi].linked)
        lander__tmp_link_name(b, fi, out, cap);
    else
        lander__tmp_name(b, name, fi, out, cap);
}

void lander__dev_tag(const char *device, char tag[DEV_TAG_HEX + 1])
{
    uint8_t h[DEV_TAG_HEX / 2];
    crypto_generichash(h, sizeof h, (const uint8_t *)device, strlen(device), NULL, 0);
    ingest_to_hex(h, sizeof h, tag);
    tag[DEV_TAG_HEX] = '\0';
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
int lander__tmp_tag(ingest_ctx *ctx, int rootfd, const char *root, bool create, char mark[TMP_MARK_MAX])
{
    int mfd = -1, fd = -1, rc = 0;
    char buf[64], tmp[64];
    if (create && mkdirat(rootfd, "_manifests", 0755) < 0 && errno != EEXIST)
        return lander__sys_fail(ctx, errno, "mkdir _manifests under", root);
    mfd = openat(rootfd, "_manifests", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (mfd < 0) {
        if (errno == ENOENT && !create)
            return INGEST_ENOTFOUND;
        return lander__sys_fail(ctx, errno, "open _manifests under", root);
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
            rc = lander__sys_fail(ctx, errno, "open _manifests/" TMP_TAG_FILE " under", root);
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
        if (fd < 0 || lander__write_full(fd, buf, TMP_TAG_HEX + 1) < 0 || fsync(fd) < 0) {
            rc = lander__sys_fail(ctx, errno, "write _manifests/" TMP_TAG_FILE " under", root);
            goto out;
        }
        close(fd);
        fd = -1;
        /* EEXIST: another process made one meanwhile; read that one */
        const int lr = linkat(mfd, tmp, mfd, TMP_TAG_FILE, 0);
        const int le = errno;
        unlinkat(mfd, tmp, 0);
        if (lr < 0 && le != EEXIST) {
            rc = lander__sys_fail(ctx, le, "link _manifests/" TMP_TAG_FILE " under", root);
            goto out;
        }
        if (lr == 0 && fsync(mfd) < 0) {
            rc = lander__sys_fail(ctx, errno, "fsync _manifests under", root);
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
    ingest__syncs_init(&l->own_syncs);
    l->syncs = &l->own_syncs;
    l->max_files = INGEST_LANDER_MAX_FILES_DEFAULT;
    l->max_chunks = INGEST_LANDER_MAX_CHUNKS_DEFAULT;
    l->dio_min = LANDER_DIO_MIN;
    memcpy(l->key, key, INGEST_KEY_BYTES);
    randombytes_buf(l->tabkey, sizeof l->tabkey);
    l->root = ingest__strdup(ctx, bronze_root);
    l->layout = ingest__strdup(ctx, layout);
    if (!l->root || !l->layout) {
        rc = ingest__fail(ctx, INGEST_ENOMEM, "lander: out of memory");
        goto fail;
    }
    {
        char why[200];
        if (ingest__path_check_layout(layout, why, sizeof why) != 0) {
            rc = ingest__fail(ctx, INGEST_EINVAL, "lander: layout \"%.200s\": %s", layout, why);
            goto fail;
        }
    }
    {
        char tmp[LANDED_MAX];
        rc = lander__landed_path(l, "device", "batch", "dir/file", 0, tmp, sizeof tmp);
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
    if ((rc = lander__tmp_tag(ctx, l->rootfd, bronze_root, true, l->tmp_mark)) < 0)
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
    ingest__syncs_destroy(&l->own_syncs);
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

int ingest_lander_set_lock(ingest_lander *l, const ingest_lander_lock *lk)
{
    if (l == NULL || (lk != NULL && (lk->lock == NULL || lk->unlock == NULL)))
        return INGEST_EINVAL;
    if (l->busy != NULL)
        return ingest__fail(l->ctx, INGEST_EBUSY, "lander: set_lock with batch %s open", l->busy->name);
    l->own_lock = lk != NULL;
    if (lk != NULL)
        l->lk = *lk;
    return 0;
}

void ingest__lander_set_hook(ingest_lander *l, ingest__lander_hook_fn fn, void *ud)
{
    l->hook = fn;
    l->hook_ud = ud;
}

void ingest__lander_set_dio_min(ingest_lander *l, uint64_t bytes)
{
    l->dio_min = bytes < DIO_ALIGN ? DIO_ALIGN : bytes;
}

void ingest__syncs_init(ingest__syncs *sy)
{
    atomic_init(&sy->started, 0);
    atomic_init(&sy->done, 0);
    atomic_init(&sy->failed, false);
    pthread_mutex_init(&sy->dir_mu, NULL);
    randombytes_buf(sy->dir_key, sizeof sy->dir_key);
    sy->ndirs = 0;
    sy->dir_gen = 0;
    memset(sy->dirs, 0, sizeof sy->dirs);
}

void ingest__syncs_destroy(ingest__syncs *sy) { pthread_mutex_destroy(&sy->dir_mu); }

static uint64_t dir_hash(const ingest__syncs *sy, const char *dir)
{
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, (const uint8_t *)dir, strlen(dir), sy->dir_key);
    uint64_t v = 0;
    memcpy(&v, h, sizeof v);
    return v != 0 ? v : 1;
}

/* The slot of hash v: where it is, or the empty one where it would go.  Under dir_mu. */
static uint32_t dir_slot(const ingest__syncs *sy, uint64_t v)
{
    uint32_t i = (uint32_t)(v % INGEST__DURABLE_DIRS);
    while (sy->dirs[i] != 0 && sy->dirs[i] != v)
        i = (i + 1) % INGEST__DURABLE_DIRS;
    return i;
}

bool ingest__syncs_dir_durable(ingest__syncs *sy, const char *dir)
{
    const uint64_t v = dir_hash(sy, dir);
    pthread_mutex_lock(&sy->dir_mu);
    const bool yes = sy->dirs[dir_slot(sy, v)] == v;
    pthread_mutex_unlock(&sy->dir_mu);
    return yes;
}

uint64_t ingest__syncs_dir_gen(ingest__syncs *sy)
{
    pthread_mutex_lock(&sy->dir_mu);
    const uint64_t g = sy->dir_gen;
    pthread_mutex_unlock(&sy->dir_mu);
    return g;
}

void ingest__syncs_dir_mark(ingest__syncs *sy, const char *dir, uint64_t gen)
{
    const uint64_t v = dir_hash(sy, dir);
    pthread_mutex_lock(&sy->dir_mu);
    if (gen != sy->dir_gen) { /* a directory was removed since the caller looked: its finding may be stale */
        pthread_mutex_unlock(&sy->dir_mu);
        return;
    }
    if (sy->ndirs >= INGEST__DURABLE_DIRS / 4 * 3) { /* full: start over (costs fsyncs, nothing else) */
        memset(sy->dirs, 0, sizeof sy->dirs);
        sy->ndirs = 0;
    }
    const uint32_t i = dir_slot(sy, v);
    if (sy->dirs[i] == 0) {
        sy->dirs[i] = v;
        sy->ndirs++;
    }
    pthread_mutex_unlock(&sy->dir_mu);
}

void ingest__syncs_dir_forget(ingest__syncs *sy, const char *dir)
{
    const uint64_t v = dir_hash(sy, dir);
    pthread_mutex_lock(&sy->dir_mu);
    sy->dir_gen++;
    uint32_t i = dir_slot(sy, v);
    if (sy->dirs[i] == v) {
        /* linear probing: take it out and move back the entries after it that would no longer be found */
        sy->dirs[i] = 0;
        sy->ndirs--;
        for (uint32_t j = (i + 1) % INGEST__DURABLE_DIRS; sy->dirs[j] != 0; j = (j + 1) % INGEST__DURABLE_DIRS) {
            const uint32_t home = (uint32_t)(sy->dirs[j] % INGEST__DURABLE_DIRS);
            const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
            if (!stays) {
                sy->dirs[i] = sy->dirs[j];
                sy->dirs[j] = 0;
                i = j;
            }
        }
    }
    pthread_mutex_unlock(&sy->dir_mu);
}

void ingest__lander_share_syncs(ingest_lander *l, ingest__syncs *sy)
{
    l->syncs = sy != NULL ? sy : &l->own_syncs;
}

void lander__hook(ingest_lander_batch *b, int phase)
{
    if (b->l->hook != NULL)
        b->l->hook(b->l->hook_ud, b->device, phase);
}

/*
 * What the lock serialises: the store (one LMDB write transaction at a
 * time, tied to its thread; the store's one read handle and its deferred
 * writes) and the index over it, and the path versions together with the
 * renames they order.  Nothing of the lander's own files needs it.
 */
void lander__ident_of(lfile *f, const struct stat *sb)
{
    f->ident.dev = (uint64_t)sb->st_dev;
    f->ident.ino = (uint64_t)sb->st_ino;
    f->ident.size = (uint64_t)sb->st_size;
    f->ident.mtime_ns = ingest_time_ns(&sb->st_mtim);
}

void lander__enter(ingest_lander *l)
{
    if (l->own_lock)
        l->lk.lock(l->lk.ud);
}

int lander__leave(ingest_lander_batch *b, int rc)
{
    if (!b->l->own_lock)
        return rc;
    rc = lander__settle(b, rc); /* no write transaction outlives the lock */
    b->l->lk.unlock(b->l->lk.ud);
    return rc;
}

int ingest_lander_set_share_inflight(ingest_lander *l, int on, int wait_ms)
{
    if (l == NULL || wait_ms < 0)
        return INGEST_EINVAL;
    if (l->busy)
        return ingest__fail(l->ctx, INGEST_EBUSY, "lander: set_share_inflight with batch %s open", l->busy->name);
    if (on && !l->own_lock)
        return ingest__fail(l->ctx, INGEST_EINVAL, "lander: sharing chunks in flight needs the lander's own lock");
    l->share_inflight = on != 0;
    l->peer_wait_ms = wait_ms;
    return 0;
}

/*
 * The batch's wanted chunks leave the in-flight table (landed, or the batch
 * ended): locked says whether the caller holds the land lock already.
 */
void lander__inflight_release(ingest_lander_batch *b, bool locked)
{
    if (!b->registered)
        return;
    if (!locked)
        b->l->lk.lock(b->l->lk.ud);
    for (size_t k = 0; k < b->nwants; k++)
        if (b->pushed == NULL || !b->pushed[b->wants[k]]) /* (a pushed chunk was never registered) */
            ingest__inflight_del(b->l->idx, b->device, b->mc[b->wants[k]].id, b);
    b->registered = false;
    if (!locked)
        b->l->lk.unlock(b->l->lk.ud);
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

/* ------------------------------------------------------------ batch state */

int lander__bufs_reserve(ingest_lander_batch *b, size_t n)
{
    if (n <= b->bufcap)
        return 0;
    ingest__free(b->ctx, b->rbuf);
    ingest__free(b->ctx, b->cbuf);
    b->rbuf = ingest__malloc(b->ctx, n);
    b->cbuf = ingest__malloc(b->ctx, n);
    b->inbuf = b->rbuf;
    b->bufcap = 0;
    if (!b->rbuf || !b->cbuf)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory for %zu-byte chunk buffers", n);
    b->bufcap = n;
    return 0;
}

int lander__chunks_grow(ingest_lander_batch *b, uint32_t need)
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

void lander__remove_temps(ingest_lander_batch *b)
{
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    lander__dw_stop(b); /* no write in flight into a file closed or removed below */
    lander__sf_stop(b); /* no small file being made either */
    lander__close_fd(&b->fd);
    lander__app_undo(b); /* files appended in place: cut back (nothing durable records their new bytes) */
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (!f->created || f->renamed)
            continue;
        const char *name;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        lander__tmp_name(b, name, i, tn, sizeof tn);
        char ddir[LANDED_MAX];
        lander__data_dir(b, i, dir, ddir, sizeof ddir);
        int dfd = -1;
        const int saved_state = b->state;
        /* walk_dir may record an error detail: keep the original one */
        char keep[INGEST__ERRMSG_MAX];
        memcpy(keep, b->ctx->errmsg, sizeof keep);
        if (lander__walk_dir(b, f->landed, ddir, false, &dfd) == 0 && dfd >= 0) {
            unlinkat(dfd, tn, 0);
            if (f->link) { /* its symlink, made at commit (or half made) */
                lander__tmp_link_name(b, i, tn, sizeof tn);
                unlinkat(dfd, tn, 0);
            }
            close(dfd);
        }
        memcpy(b->ctx->errmsg, keep, sizeof keep);
        b->state = saved_state;
        f->created = false;
    }
    lander__remove_made_dirs(b);
}

/* A call the batch's state does not allow: INGEST_EINVAL, the batch untouched. */
int lander__bad_state(ingest_lander_batch *b)
{
    static const char *const names[] = {"active", "aborted", "committed", "prepared", "parsed"};
    return ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch is %s", names[(unsigned)b->state % 5u]);
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
int lander__settle(ingest_lander_batch *b, int rc)
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
int lander__store_fail(ingest_lander_batch *b, int rc, const char *what, const char *path)
{
    char why[INGEST__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", ingest_ctx_errmsg(ingest__store_ctx(b->l->st)));
    return ingest__fail(b->ctx, rc, "lander: batch %s: cannot %s %s: %s", b->name, what, path,
                        why[0] ? why : ingest_strerror(rc));
}

/* Abort on failure: returns rc so callers can `return lander__fail_batch(b, rc)`. */
int lander__fail_batch(ingest_lander_batch *b, int rc)
{
    lander__inflight_release(b, false);
    if (b->state == B_ACTIVE || b->state == B_PREPARED) {
        /* the landed versions its renames replaced, put back; once its manifest is in place it is a landed
         * batch (for the start's sweep, the index's catch-up and the catalog), and they go */
        if (b->manifest_placed)
            lander__old_done(b);
        else
            lander__old_undo(b);
        lander__remove_temps(b);
        b->state = B_DEAD;
    }
    lander__app_release(b, false); /* after the undo: no other batch appends to the file before it is cut back */
    return rc;
}

void ingest_lander_abort(ingest_lander_batch *b)
{
    if (!b)
        return;
    lander__inflight_release(b, false);
    if (b->state == B_COMMITTED) {
        lander__app_release(b, false);
        return;
    }
    if ((b->state == B_ACTIVE || b->state == B_PREPARED) && b->manifest_placed)
        lander__old_done(b);
    else if (b->state == B_ACTIVE || b->state == B_PREPARED)
        lander__old_undo(b);
    lander__remove_temps(b);
    b->state = B_DEAD;
    lander__app_release(b, false);
}

void ingest_lander_batch_destroy(ingest_lander_batch *b)
{
    if (!b)
        return;
    ingest_ctx *ctx = b->ctx;
    ingest_lander_abort(b);
    lander__dw_stop(b);
    lander__sf_stop(b);
    lander__close_fd(&b->fd);
    lander__close_fd(&b->dirfd);
    lander__close_fd(&b->sdirfd);
    lander__close_fd(&b->srcfd);
    lander__close_fd(&b->run_fd);
    lander__close_fd(&b->spillfd);
    lander__close_fd(&b->base_fd);
    lander__close_fd(&b->old_fd);
    lander__app_unlock(b);
    ingest__free(ctx, b->dio_mem);
    for (size_t i = 0; i < b->nstages; i++) {
        ingest__free(ctx, b->stages[i].final);
        ingest__free(ctx, b->stages[i].real);
    }
    ingest__free(ctx, b->stages);
    ingest__free(ctx, b->s_dir);
    if (b->files) {
        for (uint32_t i = 0; i < b->nfiles; i++) {
            ingest__free(ctx, b->files[i].path);
            ingest__free(ctx, b->files[i].landed);
            ingest__free(ctx, b->files[i].refused);
        }
    }
    for (size_t i = 0; i < b->ndirs; i++)
        ingest__free(ctx, b->dirs[i]);
    for (size_t i = 0; i < b->nmade; i++)
        ingest__free(ctx, b->made[i]);
    ingest__free(ctx, b->made);
    ingest__free(ctx, b->dirs);
    ingest__free(ctx, b->files);
    ingest__free(ctx, b->refused_idx);
    ingest__free(ctx, b->mc);
    ingest__free(ctx, b->pos);
    ingest__free(ctx, b->src);
    ingest__free(ctx, b->cst);
    ingest__free(ctx, b->pushed);
    ingest__free(ctx, b->wants);
    ingest__free(ctx, b->rew);
    ingest__free(ctx, b->rbuf);
    ingest__free(ctx, b->cbuf);
    ingest__free(ctx, b->cur_dir);
    ingest__free(ctx, b->device);
    ingest__free(ctx, b->name);
    if (b->l && b->l->busy == b)
        b->l->busy = NULL;
    ingest__free(ctx, b->mem);
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


/* The index of the file holding chunk j: the last whose first chunk is <= j (files in manifest order). */
uint32_t lander__file_of_chunk(const ingest_lander_batch *b, uint32_t j)
{
    uint32_t lo = 0, hi = b->nfiles;
    while (hi - lo > 1) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (b->files[mid].first <= j)
            lo = mid;
        else
            hi = mid;
    }
    while (lo > 0 && b->files[lo].nchunks == 0) /* an empty file shares the next one's start */
        lo--;
    return lo;
}

/* ----------------------------------------------------- refused files */

/*
 * File i cannot land (its path, or its place in the bronze tree: the
 * detail is the context's errmsg): refuse it alone.  Its bytes are still
 * received and checked, written under REFUSED_DIR (a later file of the
 * batch may copy a chunk from them) and removed at commit; the batch's
 * manifest records it with the reason.  ENOMEM only.
 */
int lander__refuse_file(ingest_lander_batch *b, uint32_t i, int code)
{
    lfile *f = &b->files[i];
    if (f->refused != NULL)
        return 0;
    char why[INGEST__ERRMSG_MAX];
    const char *msg = ingest_ctx_errmsg(b->ctx);
    if (strncmp(msg, "lander: ", 8) == 0)
        msg += 8;
    snprintf(why, sizeof why, "%s", msg[0] != '\0' ? msg : "refused by the receiver");
    if (b->refused_idx == NULL) {
        b->refused_idx = ingest__malloc(b->ctx, (size_t)b->nfiles * sizeof *b->refused_idx);
        if (b->refused_idx == NULL)
            return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    }
    char scratch[64];
    snprintf(scratch, sizeof scratch, REFUSED_DIR "/f%u", i);
    char *landed = ingest__strdup(b->ctx, scratch);
    char *r = ingest__strdup(b->ctx, why);
    if (landed == NULL || r == NULL) {
        ingest__free(b->ctx, landed);
        ingest__free(b->ctx, r);
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    }
    ingest__free(b->ctx, f->landed);
    f->landed = landed;
    f->refused = r;
    f->refused_code = code < 0 ? code : INGEST_EINVAL;
    /* files are refused in manifest order, except by check_paths after landed_path: keep the list sorted */
    uint32_t k = b->nrefused;
    while (k > 0 && b->refused_idx[k - 1] > i) {
        b->refused_idx[k] = b->refused_idx[k - 1];
        k--;
    }
    b->refused_idx[k] = i;
    b->nrefused++;
    ingest__log(b->ctx, INGEST_LOG_WARN, "lander: batch %s of %s: file refused: %s", b->name, b->device, why);
    return 0;
}

int64_t ingest_lander_file_of_path(const ingest_lander_batch *b, const char *path)
{
    if (b == NULL || path == NULL)
        return -1;
    for (uint32_t i = 0; i < b->nfiles; i++)
        if (b->files[i].path != NULL && strcmp(b->files[i].path, path) == 0)
            return i;
    return -1;
}

uint32_t ingest_lander_refused_count(const ingest_lander_batch *b)
{
    return b ? b->nrefused : 0;
}

int ingest_lander_refused(const ingest_lander_batch *b, uint32_t k, uint32_t *file_index, int *code,
                          const char **reason)
{
    if (!b || k >= b->nrefused)
        return INGEST_EINVAL;
    const lfile *f = &b->files[b->refused_idx[k]];
    if (file_index)
        *file_index = b->refused_idx[k];
    if (code)
        *code = f->refused_code;
    if (reason)
        *reason = f->refused;
    return 0;
}
