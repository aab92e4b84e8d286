/* The lander's paths: the layout of landed names, the crash sweep, and the directories a batch writes into. */
#include "lander_int.h"

/* ------------------------------------------------------------- layout */

int lander__landed_path(ingest_lander *l, const char *device, const char *batch, const char *relpath,
                       int64_t mtime_ns, char *out, size_t cap)
{
    /* the rules an agent also applies before shipping (pathpolicy.h); the tag below is the core's alone */
    INGEST__FORWARD(ingest__path_landed(l->ctx, l->layout, device, batch, relpath, mtime_ns, INGEST_PATH_NAME_MAX, out,
                                        cap < LANDED_MAX ? cap : LANDED_MAX));
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
    INGEST__FORWARD(ingest__path_check_id(l->ctx, "device", device));
    INGEST__FORWARD(ingest__path_check_id(l->ctx, "batch", batch));
    return lander__landed_path(l, device, batch, relpath, mtime_ns, out, cap);
}

/* ----------------------------------------------------------- crash sweep */

typedef struct sweep {
    ingest_ctx *ctx;
    int rootfd;
    char mark[TMP_MARK_MAX]; /* "" when the tree has no tag yet */
    /* ".ingest-old-{tag}.": backups of replaced versions, removed when their intent is gone (old_intent_there);
     * "" not to remove any */
    char old_mark[TMP_MARK_MAX];
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
 * Is the replace intent of a backup named ".ingest-old-{tag}." + rest there
 * (rest: "{devtag}.{batch}.{try}.{file index}", the intent
 * "{devtag}.{batch}.{try}")?
 * Intents are made before their backups and go after them: a backup
 * without one was left (a removal not synced), one with it may be needed,
 * by a batch at work in another receiver of the tree or a start to come.
 * Anything else about it (not that shape, cannot tell) counts as there.
 */
static bool old_intent_there(const sweep *w, const char *rest)
{
    const char *dot = strrchr(rest, '.');
    char p[sizeof "_manifests/.replace/" + NAME_MAX_BYTES];
    if (dot == NULL || dot == rest || (size_t)(dot - rest) > NAME_MAX_BYTES)
        return true;
    snprintf(p, sizeof p, "_manifests/.replace/%.*s", (int)(dot - rest), rest);
    struct stat st;
    return fstatat(w->rootfd, p, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT;
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
    /* a replace intent being written (lander_undo.c) */
    if (depth == 2 && strcmp(dir, "./_manifests/.replace") == 0)
        return name[0] == '.' && has_suffix_s(name, ".tmp");
    /* (a device's manifests; not .refused, whose scratch copies of refused files are named like any
     * temporary file) */
    if (depth == 2 && strncmp(dir, "./_manifests/", 13) == 0 && strcmp(dir + 13, ".refused") != 0)
        return has_suffix_s(name, ".jsonl.tmp");
    if (w->old_mark[0] != '\0' && strncmp(name, w->old_mark, strlen(w->old_mark)) == 0)
        return !old_intent_there(w, name + strlen(w->old_mark)); /* a backup whose intent is gone (lander_undo.c) */
    return w->mark[0] != '\0' && strstr(name, w->mark) != NULL;
}

/* Deepest a staged directory's tree is removed (a staged directory holds the batch's files under it). */
#define SWEEP_TREE_DEPTH 64

/*
 * Remove directory name in dfd, a staged directory a batch left (its name
 * holds the tag): everything in it was written by that batch and never put
 * in place.  Symlinks in it are removed, never followed.
 */
static void sweep_tree(sweep *w, int dfd, const char *name, const char *dir, int depth)
{
    const int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d || depth > SWEEP_TREE_DEPTH) {
        if (d)
            closedir(d);
        else if (fd >= 0)
            close(fd);
        w->failed++;
        ingest__log(w->ctx, INGEST_LOG_WARN, "lander: sweep: cannot remove staged directory %s/%s: %s", dir, name,
                    d ? "too deep" : strerror(errno));
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) == 0) {
            w->removed++;
            continue;
        }
        if (errno == EISDIR || errno == EPERM) /* EPERM: what Linux says for unlink of a directory */
            sweep_tree(w, dirfd(d), de->d_name, dir, depth + 1);
        else
            w->failed++;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) == 0) {
        w->removed++;
    } else {
        w->failed++;
        ingest__log(w->ctx, INGEST_LOG_WARN, "lander: sweep: cannot remove staged directory %s/%s: %s", dir, name,
                    strerror(errno));
    }
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
            type = S_ISDIR(sb.st_mode) ? DT_DIR : S_ISREG(sb.st_mode) ? DT_REG : S_ISLNK(sb.st_mode) ? DT_LNK
                                                                                                  : DT_UNKNOWN;
        }
        if (type == DT_DIR && sweep_match(w, dir, depth, name)) {
            sweep_tree(w, dirfd(d), name, dir, 0); /* a staged directory (docs/landing.md, "New directories") */
        } else if (type == DT_DIR) {
            if (sweep_push(w, dir, name) < 0)
                w->failed++;
        } else if ((type == DT_REG || type == DT_LNK) && sweep_match(w, dir, depth, name)) {
            /* a temporary file, or the temporary symlink of a file landing as one (its name holds the tag) */
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

int lander__intent_dir(ingest_lander_batch *b, const char *dir, bool *synced)
{
    const int rootfd = b->l->rootfd;
    if (mkdirat(rootfd, dir, 0700) != 0 && errno != EEXIST)
        return lander__sys_fail(b->ctx, errno, "create", dir);
    if (*synced)
        return 0;
    /* its entry in _manifests must be durable before an intent in it counts: made now, or found (made by a
     * run that died, or whose fsync failed, before that) */
    const int mfd = openat(rootfd, "_manifests", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int bad = mfd < 0 || fsync(mfd) < 0;
    const int e = errno;
    if (mfd >= 0)
        close(mfd);
    if (bad)
        return lander__sys_fail(b->ctx, e, "sync", "_manifests");
    *synced = true; /* (a lander has one batch at a time) */
    return 0;
}

int lander__sweep_intents(ingest_ctx *ctx, int rootfd, const char *dir, lander_intent_fn fn, uint64_t *done,
                          uint64_t *left)
{
    const int dfd = openat(rootfd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : lander__sys_fail(ctx, errno, "open", dir);
    const int dfd2 = dup(dfd);
    DIR *d = dfd2 >= 0 ? fdopendir(dfd2) : NULL;
    if (d == NULL) {
        const int e = errno;
        if (dfd2 >= 0)
            close(dfd2);
        close(dfd);
        return lander__sys_fail(ctx, e, "read", dir);
    }
    const struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            fn(ctx, rootfd, dfd, de->d_name, done, left);
    closedir(d);
    (void)fsync(dfd); /* the intents removed */
    close(dfd);
    return 0;
}

#define SWEEP_MARK "_manifests/.sweep"

lander_mark lander__sweep_mark(int rootfd)
{
    struct stat st;
    lander_mark m = { 0, 0 };
    if (fstatat(rootfd, SWEEP_MARK, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        m.ino = (uint64_t)st.st_ino;
        m.ctime_ns = ingest_time_ns(&st.st_ctim);
    }
    return m;
}

/* Make SWEEP_MARK anew (a new inode, a new ctime): landers of other receivers sharing the tree see it. */
static void renew_sweep_mark(int rootfd)
{
    const int fd = openat(rootfd, SWEEP_MARK ".new", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return; /* (no _manifests: no lander ever made a temporary file here) */
    close(fd);
    (void)renameat(rootfd, SWEEP_MARK ".new", rootfd, SWEEP_MARK);
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
        return lander__sys_fail(ctx, errno, "open bronze root", bronze_root);
    renew_sweep_mark(w.rootfd);
    /* first the replaced versions a batch that did not land leaves kept (lander_undo.c), then the appends
     * a crash interrupted: cut back to their landed length (lander_append.c) */
    uint64_t cut = 0, left = 0, restored = 0, old_left = 0;
    int rc = lander__old_sweep(ctx, w.rootfd, &restored, &old_left);
    if (rc == 0)
        rc = lander__app_sweep(ctx, w.rootfd, &cut, &left);
    if (rc == 0)
        rc = lander__tmp_tag(ctx, w.rootfd, bronze_root, false, w.mark);
    if (rc == INGEST_ENOTFOUND) {
        w.mark[0] = '\0'; /* no tag: no temporary file was ever made here, manifests aside */
        rc = 0;
    }
    if (rc == 0 && w.mark[0] != '\0')
        snprintf(w.old_mark, sizeof w.old_mark, ".ingest-old-%.*s.", TMP_TAG_HEX, w.mark + 12);
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

/* ---------------------------------------------------------- directories */

/* Remember dir[0, n), created by this batch. */
static int made_dir(ingest_lander_batch *b, const char *dir, size_t n)
{
    if (b->nmade == b->made_cap) {
        const size_t nc = b->made_cap ? b->made_cap * 2 : 8;
        char **nm = ingest__malloc(b->ctx, nc * sizeof *nm);
        if (!nm)
            return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
        if (b->nmade)
            memcpy(nm, b->made, b->nmade * sizeof *nm);
        ingest__free(b->ctx, b->made);
        b->made = nm;
        b->made_cap = nc;
    }
    char *s = ingest__malloc(b->ctx, n + 1);
    if (!s)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    memcpy(s, dir, n);
    s[n] = '\0';
    b->made[b->nmade++] = s;
    return 0;
}

/*
 * Remove the directories this batch created that are empty now (its
 * temporary files gone), deepest first; one another batch uses is not
 * empty and stays.  Nothing is reported: an empty directory left is harmless.
 */
/* Remove directory d (bronze-relative) if it is empty: true when it went.  The batch's error text is kept. */
static bool remove_if_empty(ingest_lander_batch *b, const char *d)
{
    char parent[LANDED_MAX];
    const char *name;
    lander__split_path(d, parent, sizeof parent, &name);
    int pfd = -1;
    char keep[INGEST__ERRMSG_MAX];
    memcpy(keep, b->ctx->errmsg, sizeof keep);
    bool gone = false;
    if (lander__walk_dir(b, d, parent, false, &pfd) == 0 && pfd >= 0) {
        ingest__syncs_dir_forget(b->l->syncs, d); /* made again, its name is new */
        gone = unlinkat(pfd, name, AT_REMOVEDIR) == 0;
        if (gone)
            ingest__syncs_dir_forget(b->l->syncs, d); /* and void what was marked meanwhile */
    }
    if (pfd >= 0)
        close(pfd);
    memcpy(b->ctx->errmsg, keep, sizeof keep);
    return gone;
}

void lander__remove_made_dirs(ingest_lander_batch *b)
{
    while (b->nmade > 0) {
        char *d = b->made[--b->nmade];
        /* _manifests/...: shared by every batch (the refused files' scratch copies): kept */
        if (!(strncmp(d, "_manifests", 10) == 0 && (d[10] == '/' || d[10] == '\0')))
            (void)remove_if_empty(b, d);
        ingest__free(b->ctx, d);
    }
}

/*
 * A withdrawn file's temporary file went (the cursor was in it): the
 * directories made last, for it alone, go too when empty (newest first),
 * with their entries among the directories to fsync; the cursor's
 * directory is entered again when needed.
 */
void lander__drop_made_tail(ingest_lander_batch *b)
{
    lander__forget_dir(b);
    while (b->nmade > 0) {
        char *d = b->made[b->nmade - 1];
        if (strncmp(d, "_manifests", 10) == 0 && (d[10] == '/' || d[10] == '\0'))
            break;
        if (!remove_if_empty(b, d))
            break;
        for (size_t s = 0; s < b->nstages; s++)
            if (strcmp(b->stages[s].real, d) == 0)
                b->stages[s].gone = true; /* made for the withdrawn file alone */
        size_t k = 0;
        for (size_t j = 0; j < b->ndirs; j++) {
            if (strcmp(b->dirs[j], d) == 0) {
                ingest__free(b->ctx, b->dirs[j]);
                continue;
            }
            b->dirs[k++] = b->dirs[j];
        }
        b->ndirs = k;
        ingest__free(b->ctx, d);
        b->nmade--;
    }
}

int lander__add_dir(ingest_lander_batch *b, const char *dir)
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
static int walk_once(ingest_lander_batch *b, const char *file, const char *dir, bool create, int *fd, bool *again);

int lander__walk_dir(ingest_lander_batch *b, const char *file, const char *dir, bool create, int *fd)
{
    /* again: making it, a directory on the way went (removed while empty, see lander__reenter_land_dir): anew */
    for (unsigned tries = 0;; tries++) {
        bool again = false;
        const int rc = walk_once(b, file, dir, create, fd, &again);
        if (rc < 0 || !again)
            return rc;
        if (tries >= LANDER_REENTER_TRIES)
            return lander__sys_fail(b->ctx, ENOENT, "make directory", dir);
    }
}

static int walk_once(ingest_lander_batch *b, const char *file, const char *dir, bool create, int *fd, bool *again)
{
    ingest_lander *l = b->l;
    *fd = -1;
    int cur = openat(l->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return lander__sys_fail(b->ctx, errno, "open", l->root);
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
            const int made = mkdirat(cur, c, 0755) == 0;
            if (!made && errno != EEXIST) {
                const int err = errno;
                close(cur);
                if (err == ENOENT) { /* cur was removed */
                    *again = true;
                    return 0;
                }
                return lander__sys_fail(b->ctx, err, "mkdir under bronze root:", dir);
            }
            /* the new entry lives in the parent directory: sync it */
            char parent[LANDED_MAX];
            const size_t pl = (size_t)(c - part) > 0 ? (size_t)(c - part) - 1 : 0;
            memcpy(parent, dir, pl);
            parent[pl] = '\0';
            int rc = lander__add_dir(b, parent);
            if (rc == 0 && made)
                rc = made_dir(b, dir, (size_t)(c - part) + strlen(c));
            if (rc < 0) {
                close(cur);
                return rc;
            }
            nfd = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (nfd < 0) {
            const int err = errno;
            close(cur);
            if (err == ENOENT) { /* missing; or, when making it, made and removed at once */
                *again = create;
                return 0;
            }
            if (err == ELOOP || err == ENOTDIR)
                return ingest__fail(b->ctx, INGEST_EINVAL,
                                    "lander: file %.200s%s: \"%.200s\" on its way in the bronze tree is a symlink or "
                                    "not a directory",
                                    file, strlen(file) > 200 ? "..." : "", c);
            return lander__sys_fail(b->ctx, err, "open directory", dir);
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

int lander__enter_dir_found(ingest_lander_batch *b, const char *file, const char *dir, bool *missing)
{
    *missing = false;
    if (b->dirfd >= 0 && b->cur_dir && strcmp(b->cur_dir, dir) == 0)
        return 0;
    int fd = -1;
    INGEST__FORWARD(lander__walk_dir(b, file, dir, false, &fd));
    if (fd < 0) {
        *missing = true;
        return 0;
    }
    lander__close_fd(&b->dirfd);
    ingest__free(b->ctx, b->cur_dir);
    b->dirfd = fd;
    b->cur_dir = ingest__strdup(b->ctx, dir);
    return b->cur_dir ? 0 : ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
}

void lander__forget_dir(ingest_lander_batch *b)
{
    lander__close_fd(&b->dirfd);
    ingest__free(b->ctx, b->cur_dir);
    b->cur_dir = NULL;
}

/* Make b->dirfd the directory dir (cached by name). */
int lander__enter_dir(ingest_lander_batch *b, const char *file, const char *dir, bool create)
{
    if (b->dirfd >= 0 && b->cur_dir && strcmp(b->cur_dir, dir) == 0)
        return 0;
    lander__forget_dir(b);
    INGEST__FORWARD(lander__walk_dir(b, file, dir, create, &b->dirfd));
    if (b->dirfd < 0)
        return ingest__fail(b->ctx, INGEST_ENOTFOUND, "lander: file %s: directory %s missing", file, dir);
    b->cur_dir = ingest__strdup(b->ctx, dir);
    if (!b->cur_dir)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    return 0;
}


/* ------------------------------------------------------ staged directories */

/* Does path p lie at or under directory d (both bronze-relative)? */
static bool under_dir(const char *p, const char *d)
{
    const size_t n = strlen(d);
    return strncmp(p, d, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

void lander__data_dir(const ingest_lander_batch *b, uint32_t fi, const char *dir, char *out, size_t cap)
{
    const uint32_t s = b->files[fi].stage;
    if (s == 0 || b->stages[s - 1].placed) {
        snprintf(out, cap, "%s", dir);
        return;
    }
    const lstage *st = &b->stages[s - 1];
    snprintf(out, cap, "%s%s", st->real, dir + strlen(st->final));
}

/*
 * The temporary name of a staged directory whose final name is name:
 * ".{name}{mark}{devtag}.{batch}.d", or "{mark}{devtag}.{batch}.{k}.d"
 * past 255 bytes.  It holds the tree's tag, so the sweep removes it, with
 * everything in it, after a crash; the ".d" keeps it apart from the
 * temporary file of a file of that name.
 */
static void stage_name(const ingest_lander_batch *b, const char *name, size_t k, char *out, size_t cap)
{
    const int n = snprintf(out, cap, ".%s%s%s.%s.d", name, b->l->tmp_mark, b->devtag, b->name);
    if (n < 0 || (size_t)n > NAME_MAX_BYTES)
        snprintf(out, cap, "%s%s.%s.%zu.d", b->l->tmp_mark, b->devtag, b->name, k);
}

/* Does a file of name_len bytes in a directory of path dir_len bytes (staged) fit a landed path? */
static bool stage_fits(size_t dir_len, size_t name_len) { return dir_len + 1 + name_len < LANDED_MAX; }

/*
 * Stage dir (final), missing: its parents made as usual (found or made
 * under their final names, as for any file), dir itself under its
 * temporary name.  The deepest directory only: the batch after, landing
 * while this one commits, meets the same missing directory only where a
 * directory's files are split between the two (it then merges).  1: staged
 * (b->nstages grew); 0: nothing staged (dir is there, or the temporary name
 * is taken, left by an earlier try: the usual way is taken); < 0: an error.
 */
static int stage_missing(ingest_lander_batch *b, const lfile *f, const char *dir, size_t name_len)
{
    char parent[LANDED_MAX];
    const char *name;
    lander__split_path(dir, parent, sizeof parent, &name);
    char tn[NAME_MAX_BYTES + 1];
    stage_name(b, name, b->nstages, tn, sizeof tn);
    if (!stage_fits(strlen(parent) + (parent[0] ? 1 : 0) + strlen(tn), name_len))
        return 0;
    int pfd = -1;
    INGEST__FORWARD(lander__walk_dir(b, f->path, parent, true, &pfd));
    if (mkdirat(pfd, tn, 0755) < 0) {
        const int e = errno;
        close(pfd);
        if (e == EEXIST)
            return 0;
        return lander__sys_fail(b->ctx, e, "mkdir under bronze root:", dir);
    }
    /* made after the walk found it missing: if dir appeared meanwhile, the commit merges */
    close(pfd);
    if (b->nstages == b->stages_cap) {
        const size_t nc = b->stages_cap ? b->stages_cap * 2 : 8;
        lstage *ns = ingest__malloc(b->ctx, nc * sizeof *ns);
        if (!ns)
            return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
        if (b->nstages)
            memcpy(ns, b->stages, b->nstages * sizeof *ns);
        ingest__free(b->ctx, b->stages);
        b->stages = ns;
        b->stages_cap = nc;
    }
    char real[LANDED_MAX];
    const int rl = snprintf(real, sizeof real, "%s%s%s", parent, parent[0] ? "/" : "", tn);
    lstage *st = &b->stages[b->nstages];
    memset(st, 0, sizeof *st);
    st->final = ingest__strdup(b->ctx, dir);
    st->real = rl > 0 && (size_t)rl < sizeof real ? ingest__strdup(b->ctx, real) : NULL;
    if (!st->final || !st->real) {
        ingest__free(b->ctx, st->final);
        ingest__free(b->ctx, st->real);
        (void)unlinkat(b->l->rootfd, real, AT_REMOVEDIR);
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    }
    b->nstages++;
    /* its entry lives in the parent: synced with it; removed again with the batch's other directories */
    INGEST__FORWARD(lander__add_dir(b, parent));
    INGEST__FORWARD(made_dir(b, real, strlen(real)));
    return 1;
}

int lander__enter_land_dir(ingest_lander_batch *b, uint32_t fi, const char *dir)
{
    lfile *f = &b->files[fi];
    f->stage = 0;
    /* Only batches made durable by syncfs stage (those of few files sync each file and directory), and
     * never a symlink (made at commit under a name of its own) nor a refused file's scratch copy. */
    if (b->nfiles < INGEST_LANDER_SYNCFS_MIN || f->link || f->refused != NULL || under_dir(dir, "_manifests"))
        return lander__enter_dir(b, f->path, dir, true);
    if (b->dirfd >= 0 && b->cur_dir && strcmp(b->cur_dir, dir) == 0)
        return 0; /* the directory of the file before: there, not staged */
    /* the temporary name is longer than the final one: a path near the bound is landed the usual way */
    const char *base = strrchr(f->landed, '/');
    const size_t name_len = strlen(base ? base + 1 : f->landed);
    for (size_t s = b->nstages; s-- > 0;) {
        const lstage *st = &b->stages[s];
        if (!st->gone && under_dir(dir, st->final)) {
            if (!stage_fits(strlen(st->real) + strlen(dir) - strlen(st->final), name_len))
                break;
            f->stage = (uint32_t)s + 1;
            char real[LANDED_MAX];
            lander__data_dir(b, fi, dir, real, sizeof real);
            return lander__enter_dir(b, f->path, real, true);
        }
    }
    bool missing = false;
    INGEST__FORWARD(lander__enter_dir_found(b, f->path, dir, &missing));
    if (!missing)
        return 0; /* there already */
    const int r = stage_missing(b, f, dir, name_len);
    if (r < 0)
        return r;
    if (r == 1) {
        f->stage = (uint32_t)b->nstages;
        char real[LANDED_MAX];
        lander__data_dir(b, fi, dir, real, sizeof real);
        return lander__enter_dir(b, f->path, real, true);
    }
    return lander__enter_dir(b, f->path, dir, true);
}

int lander__reenter_land_dir(ingest_lander_batch *b, uint32_t fi, const char *dir)
{
    lander__forget_dir(b);
    const size_t before = b->nmade;
    INGEST__FORWARD(lander__enter_land_dir(b, fi, dir));
    if (b->nmade > before) {
        /* new directories: a mark of the old ones as durable (the set of ingest__syncs) is not theirs */
        for (size_t k = before; k < b->nmade; k++)
            ingest__syncs_dir_forget(b->l->syncs, b->made[k]);
        ingest__log(b->ctx, INGEST_LOG_INFO,
                    "lander: batch %s: directory of %s removed before its file was made there: made again", b->name,
                    b->files[fi].landed);
        b->stats.dirs_remade++;
    }
    return lander__add_dir(b, dir);
}

void lander__remove_stage_dirs(ingest_lander_batch *b, size_t s)
{
    const char *real = b->stages[s].real;
    size_t k = 0;
    for (size_t i = b->nmade; i-- > 0;) {
        if (under_dir(b->made[i], real)) {
            (void)remove_if_empty(b, b->made[i]);
            ingest__free(b->ctx, b->made[i]);
            b->made[i] = NULL;
        }
    }
    for (size_t i = 0; i < b->nmade; i++)
        if (b->made[i] != NULL)
            b->made[k++] = b->made[i];
    b->nmade = k;
}
