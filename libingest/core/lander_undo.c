/*
 * The lander's way back for replaced versions (docs/landing.md, "Replaced
 * versions"): a file whose new version is renamed over a landed one keeps
 * that landed one under a second name until the batch's manifest is in
 * place, so a batch that never lands (a crash in or after commit step 2, a
 * failure there) puts it back instead of leaving bytes no manifest lists
 * where an acknowledged version was.
 *
 * Made in commit step 1, with no lock held, for each file whose final name
 * holds a file or symlink then:
 *
 *   1. the intent _manifests/.replace/{devtag}.{batch}.{try} ({try}: 8
 *      random hex digits per try), written and fsynced (and its directory)
 *      before anything else, and kept open under an exclusive flock while
 *      the batch may act on it:
 *
 *        ingest-replace 1\n{device}\n{batch}\n{count}\n
 *        then per file: {ino} {size} {mtime_ns} {landed bytes} {backup bytes}\n{landed}\n{backup}\n
 *
 *      ino, size and mtime are the new version's (its temporary file's);
 *      the backup is a name in the final name's directory:
 *      .ingest-old-{tree tag}.{devtag}.{batch}.{try}.{file index};
 *   2. a hard link of the landed version under the backup name, made
 *      durable with the step's syncfs, or an fsync of its directory.
 *
 * In step 2, under the lock, a backup no longer of the version at its final
 * name (another batch landed the path since) is linked to that one.  Once
 * the manifest is in place the backups and the intent go (no sync: a start
 * that finds them with the manifest there removes them), also when the
 * batch fails after that.  A batch that fails before renames each backup
 * back over its final name where that name holds its new version (inode,
 * size, mtime) and removes the others, but leaves backup and intent where
 * another batch's version is there (that batch may fail yet); the sweep at
 * every start (ingest_lander_sweep_appends) does the same for an unlocked
 * intent whose batch has no manifest, in passes until nothing more is put
 * back (two batches of one path undo in order), so a later version of the
 * path is never undone.  A backup whose undo fails keeps its intent, for
 * the next start; the crash sweep removes a backup only when its intent is
 * gone.
 */
#include "lander_int.h"
#include "ingest/session.h"

#include <sys/file.h>

#define OLD_DIR "_manifests/.replace"
#define OLD_MAGIC "ingest-replace 1\n"
/* Bytes of an intent's lines besides the paths: the header's and each file's numbers. */
#define OLD_HEAD_MAX (sizeof OLD_MAGIC + INGEST_DEVICE_ID_MAX + INGEST_WIRE_BATCH_ID_MAX + 32)
#define OLD_ENTRY_FIXED (5 * 21 + 3)
/* The longest intent: some 400,000 replaced files of 150-byte paths in one batch.  A batch whose intent
 * would be longer keeps no backups (logged), as before intents were made. */
#define OLD_INTENT_MAX (64u * 1024u * 1024u)

static void backup_name(const ingest_lander_batch *b, uint32_t fi, char *out, size_t cap)
{
    /* tmp_mark is ".ingest-tmp-{tag}." */
    snprintf(out, cap, ".ingest-old-%.*s.%s.%s.%s.%u", TMP_TAG_HEX, b->l->tmp_mark + 12, b->devtag, b->name,
             b->old_try, fi);
}

static void intent_name(const ingest_lander_batch *b, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s.%s.%s", OLD_DIR, b->devtag, b->name, b->old_try);
}

/* fsync directory fd, counted; 0 or the failure. */
static int sync_dir_fd(ingest_lander_batch *b, int fd, const char *dir)
{
    if (fsync(fd) < 0)
        return lander__sys_fail(b->ctx, errno, "fsync directory", dir[0] ? dir : ".");
    b->stats.syncs++;
    return 0;
}

/* The intent of b's files marked old, durable (the file and its name). */
static int write_intent(ingest_lander_batch *b, uint32_t n)
{
    /* Each try of a batch has its own intent and backups: one an earlier try left (an undo that failed, or
     * waits for a sweep) is never taken for this one's, and never holds this one up */
    snprintf(b->old_try, sizeof b->old_try, "%08x", (unsigned)randombytes_random());
    const int rootfd = b->l->rootfd;
    INGEST__FORWARD(lander__intent_dir(b, OLD_DIR, &b->l->old_dir_synced));
    ingest__buf t;
    ingest__buf_init(&t, b->ctx, (size_t)OLD_INTENT_MAX);
    char line[OLD_HEAD_MAX + OLD_ENTRY_FIXED + NAME_MAX_BYTES + 8];
    int k = snprintf(line, sizeof line, OLD_MAGIC "%s\n%s\n%u\n", b->device, b->name, n);
    int rc = ingest__buf_append(&t, line, (size_t)k);
    for (uint32_t i = 0; rc == 0 && i < b->nfiles; i++) {
        const lfile *f = &b->files[i];
        if (!f->old)
            continue;
        char bak[NAME_MAX_BYTES + 1];
        backup_name(b, i, bak, sizeof bak);
        const size_t ll = strlen(f->landed);
        k = snprintf(line, sizeof line, "%llu %llu %lld %zu %zu\n", (unsigned long long)f->ident.ino,
                     (unsigned long long)f->ident.size, (long long)f->ident.mtime_ns, ll, strlen(bak));
        rc = ingest__buf_append(&t, line, (size_t)k);
        if (rc == 0)
            rc = ingest__buf_append(&t, f->landed, ll);
        k = snprintf(line, sizeof line, "\n%s\n", bak);
        if (rc == 0)
            rc = ingest__buf_append(&t, line, (size_t)k);
    }
    if (rc == INGEST_ETOOBIG) {
        ingest__buf_free(&t);
        ingest__log(b->ctx, INGEST_LOG_WARN,
                    "lander: batch %s: its %u replaced files make an intent longer than %u MiB: their landed versions "
                    "are not kept, and a crash before the batch lands leaves its newer versions in their place",
                    b->name, n, OLD_INTENT_MAX >> 20);
        return 1;
    }
    if (rc < 0) {
        ingest__buf_free(&t);
        return ingest__fail(b->ctx, rc, "lander: batch %s: out of memory for its replace intent", b->name);
    }
    char name[80 + INGEST_WIRE_BATCH_ID_MAX], tmp[96 + INGEST_WIRE_BATCH_ID_MAX];
    intent_name(b, name, sizeof name);
    snprintf(tmp, sizeof tmp, "%s/.%s.%s.%s.tmp", OLD_DIR, b->devtag, b->name, b->old_try);
    const int dfd = openat(rootfd, OLD_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    /* Written and locked under a name the sweep passes over, then renamed into place: a sweep of another
     * receiver of the tree never sees it unlocked or part-written.  (A filesystem without flock: unlocked.) */
    const int fd = dfd >= 0 ? openat(rootfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
    if (fd >= 0)
        (void)flock(fd, LOCK_EX | LOCK_NB);
    if (fd < 0 || lander__write_full(fd, t.buf, t.len) < 0 || fsync(fd) < 0)
        rc = lander__sys_fail(b->ctx, errno, "write the replace intent", tmp);
    if (rc == 0) {
        /* never over another intent (the same random tag drawn twice: the next try draws another) */
        int r = renameat2(rootfd, tmp, rootfd, name, RENAME_NOREPLACE), e = errno;
        if (r < 0 && e == EINVAL) { /* no RENAME_NOREPLACE on this filesystem: looked at first */
            if (faccessat(rootfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
                e = EEXIST;
            } else {
                r = renameat(rootfd, tmp, rootfd, name);
                e = errno;
            }
        }
        if (r < 0 && e == EEXIST)
            rc = ingest__fail(b->ctx, INGEST_EEXIST,
                              "lander: batch %s: its replace intent %s is there already (try again)", b->name, name);
        else if (r < 0)
            rc = lander__sys_fail(b->ctx, e, "put in place the replace intent", name);
        else if (fsync(dfd) < 0)
            rc = lander__sys_fail(b->ctx, errno, "sync the replace intent", name);
        else
            b->stats.syncs += 2;
    }
    if (fd >= 0 && rc < 0) {
        (void)unlinkat(rootfd, tmp, 0); /* made by this try, and no backup was made: nothing to keep */
        close(fd);
    } else if (fd >= 0) {
        b->old_fd = fd; /* open, locked, until the intent goes: a sweep of another process leaves it alone */
    }
    if (dfd >= 0)
        close(dfd);
    ingest__buf_free(&t);
    return rc;
}

int lander__old_keep(ingest_lander_batch *b, bool dir_sync)
{
    char dir[LANDED_MAX], miss[LANDED_MAX] = "";
    bool missed = false;
    const char *name;
    uint32_t n = 0;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        f->old = false;
        if (f->refused != NULL || f->append)
            continue;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        if (missed && strcmp(dir, miss) == 0)
            continue; /* (a new directory's files: one look) */
        /* No earlier version where the way to it is not a directory (or cannot be looked at): commit step 2
         * finds out and says why, before any rename */
        bool missing = false;
        char keep[INGEST__ERRMSG_MAX];
        memcpy(keep, b->ctx->errmsg, sizeof keep);
        if (lander__enter_dir_found(b, f->path, dir, &missing) < 0) {
            memcpy(b->ctx->errmsg, keep, sizeof keep);
            missing = true;
        }
        if (missing) {
            snprintf(miss, sizeof miss, "%s", dir);
            missed = true;
            continue;
        }
        struct stat sb;
        if (fstatat(b->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (!S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
            continue; /* (refused before any rename: check_final_names) */
        if (f->link) {
            /* the new version is the symlink made from its data file: its identity, not the data file's */
            char ddir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
            struct stat lb;
            lander__data_dir(b, i, dir, ddir, sizeof ddir);
            lander__data_name(b, name, i, tn, sizeof tn);
            INGEST__FORWARD(lander__enter_dir(b, f->path, ddir, false));
            if (fstatat(b->dirfd, tn, &lb, AT_SYMLINK_NOFOLLOW) != 0)
                return lander__sys_fail(b->ctx, errno, "stat the temporary symlink of", f->landed);
            lander__ident_of(f, &lb);
        }
        f->old = true;
        n++;
    }
    if (n == 0)
        return 0;
    const int w = write_intent(b, n);
    if (w != 0) {
        for (uint32_t i = 0; i < b->nfiles; i++)
            b->files[i].old = false;
        return w < 0 ? w : 0;
    }
    b->old_intent = true;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (!f->old)
            continue;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        if (dir_sync && b->dirfd >= 0 && b->cur_dir != NULL && strcmp(b->cur_dir, dir) != 0 && b->old_dirty) {
            INGEST__FORWARD(sync_dir_fd(b, b->dirfd, b->cur_dir));
            b->old_dirty = false;
        }
        INGEST__FORWARD(lander__enter_dir(b, f->path, dir, false));
        char bak[NAME_MAX_BYTES + 1];
        backup_name(b, i, bak, sizeof bak);
        int r = linkat(b->dirfd, name, b->dirfd, bak, 0);
        if (r < 0 && errno == EEXIST && unlinkat(b->dirfd, bak, 0) == 0)
            r = linkat(b->dirfd, name, b->dirfd, bak, 0); /* (left by an earlier try of this batch) */
        if (r < 0 && errno == ENOENT)
            continue; /* gone since it was looked at: nothing to keep */
        if (r < 0)
            return lander__sys_fail(b->ctx, errno, "keep the landed version of", f->landed);
        f->backed = true;
        b->old_dirty = true;
    }
    if (dir_sync && b->old_dirty && b->dirfd >= 0 && b->cur_dir != NULL) {
        INGEST__FORWARD(sync_dir_fd(b, b->dirfd, b->cur_dir));
        b->old_dirty = false;
    }
    return 0;
}

/* Does the file st hold the new version of f (the batch's own, renamed in place)? */
static bool is_new_version(const lfile *f, const struct stat *st)
{
    return (uint64_t)st->st_ino == f->ident.ino && (uint64_t)st->st_size == f->ident.size &&
           ingest_time_ns(&st->st_mtim) == f->ident.mtime_ns;
}

bool lander__old_restore(ingest_lander_batch *b, uint32_t i)
{
    lfile *f = &b->files[i];
    if (!f->backed || !f->renamed)
        return false;
    char dir[LANDED_MAX], bak[NAME_MAX_BYTES + 1];
    const char *name;
    lander__split_path(f->landed, dir, sizeof dir, &name);
    backup_name(b, i, bak, sizeof bak);
    const char *what = "enter its directory";
    int e = 0;
    struct stat st;
    if (lander__enter_dir(b, f->path, dir, false) < 0) {
        e = EIO;
    } else if (fstatat(b->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !is_new_version(f, &st)) {
        /* Another batch put a version there since: it stays.  Whether that batch lands is not known yet (one
         * that fails puts this batch's version back): the backup and the intent are left to the next sweep,
         * whose passes undo such batches in order */
        ingest__log(b->ctx, INGEST_LOG_INFO,
                    "lander: batch %s failed after %s was put in place; another batch has put a version there since, "
                    "which stays (the landed version is kept until a sweep of the replace intents)",
                    b->name, f->landed);
        return false;
    } else {
        what = "put it back";
        if (renameat(b->dirfd, bak, b->dirfd, name) < 0 || fsync(b->dirfd) < 0)
            e = errno;
    }
    if (e != 0) {
        ingest__log(b->ctx, INGEST_LOG_WARN,
                    "lander: batch %s failed after %s was put in place, and its landed version could not be put "
                    "back (%s: %s); the next start tries again",
                    b->name, f->landed, what, strerror(e));
        return false;
    }
    f->backed = false;
    f->renamed = false;
    ingest__log(b->ctx, INGEST_LOG_WARN,
                "lander: batch %s failed after %s was put in place: its landed version is back", b->name, f->landed);
    return true;
}

int lander__old_check(ingest_lander_batch *b, uint32_t i, const char *name)
{
    lfile *f = &b->files[i];
    if (!f->backed)
        return 0;
    char bak[NAME_MAX_BYTES + 1];
    backup_name(b, i, bak, sizeof bak);
    struct stat fs, bs;
    if (fstatat(b->dirfd, name, &fs, AT_SYMLINK_NOFOLLOW) != 0 || fstatat(b->dirfd, bak, &bs, AT_SYMLINK_NOFOLLOW) != 0 ||
        fs.st_ino == bs.st_ino)
        return 0;
    /* Another batch put a version there since step 1 (it landed, or is landing: either way the one to keep):
     * kept instead, its link not synced, so made durable only in the journal's order with the rename */
    if ((unlinkat(b->dirfd, bak, 0) < 0 && errno != ENOENT) || linkat(b->dirfd, name, b->dirfd, bak, 0) < 0)
        return lander__sys_fail(b->ctx, errno, "keep the landed version of", f->landed);
    return 0;
}

/* Remove the backups of b's files (restore: put those renamed in place back first), then, when every one went,
 * the intent (and its lock). */
static void drop_backups(ingest_lander_batch *b, bool restore)
{
    if (!b->old_intent)
        return;
    char keep[INGEST__ERRMSG_MAX];
    memcpy(keep, b->ctx->errmsg, sizeof keep);
    bool all = true;
    char dir[LANDED_MAX], bak[NAME_MAX_BYTES + 1];
    const char *name;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        if (!f->backed)
            continue;
        if (restore && f->renamed) {
            all &= lander__old_restore(b, i);
            continue;
        }
        lander__split_path(f->landed, dir, sizeof dir, &name);
        backup_name(b, i, bak, sizeof bak);
        if (lander__enter_dir(b, f->path, dir, false) < 0 || (unlinkat(b->dirfd, bak, 0) < 0 && errno != ENOENT)) {
            ingest__log(b->ctx, INGEST_LOG_WARN,
                        "lander: batch %s: cannot remove %s, the kept version of %s: %s; the next start tries again",
                        b->name, bak, f->landed, strerror(errno));
            all = false;
            continue;
        }
        f->backed = false;
    }
    if (all) {
        char in[80 + INGEST_WIRE_BATCH_ID_MAX];
        intent_name(b, in, sizeof in);
        (void)unlinkat(b->l->rootfd, in, 0);
        b->old_intent = false;
    }
    lander__close_fd(&b->old_fd); /* (its lock: a sweep may act on an intent left) */
    memcpy(b->ctx->errmsg, keep, sizeof keep);
}

void lander__old_done(ingest_lander_batch *b) { drop_backups(b, false); }

void lander__old_undo(ingest_lander_batch *b) { drop_backups(b, true); }

/* ---------------------------------------------------------------- sweep */

/* Take the next line of t (up to '\n') at *pos: its start, NUL-terminated, or NULL. */
static char *next_line(char *t, size_t len, size_t *pos)
{
    char *s = t + *pos;
    char *nl = memchr(s, '\n', len - *pos);
    if (nl == NULL)
        return NULL;
    *nl = '\0';
    *pos = (size_t)(nl - t) + 1;
    return s;
}

/* Take n bytes and a '\n' at *pos: their start, NUL-terminated, or NULL. */
static char *take_bytes(char *t, size_t len, size_t *pos, size_t n)
{
    if (len - *pos < n + 1 || t[*pos + n] != '\n' || memchr(t + *pos, '\0', n) != NULL)
        return NULL;
    char *s = t + *pos;
    s[n] = '\0';
    *pos += n + 1;
    return s;
}

static bool gone_err(int e) { return e == ENOENT || e == ENOTDIR || e == ELOOP || e == EXDEV; }

/*
 * One entry of an intent.  Its batch not landed and the new version at the
 * final name: the backup is renamed back over it (fsynced).  Otherwise,
 * with finish, the backup is removed.  false: it could not be acted on
 * (logged), the intent stays.
 */
static bool sweep_entry(ingest_ctx *ctx, int rootfd, const char *iname, bool finish, bool landed_batch,
                        const char *landed, const char *bak, unsigned long long ino, unsigned long long size,
                        long long mtime, const char *device, const char *batch, uint64_t *restored)
{
    const char *last = NULL;
    const int pfd = ingest__open_parent_beneath(rootfd, landed, &last);
    if (pfd < 0) {
        if (gone_err(errno))
            return true; /* the directory went, and the backup with it */
        ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: cannot open the directory of %s: %s", OLD_DIR,
                    iname, landed, strerror(errno));
        return false;
    }
    struct stat bs, fs;
    bool ok = true;
    if (fstatat(pfd, bak, &bs, AT_SYMLINK_NOFOLLOW) != 0) {
        ok = errno == ENOENT;
        if (!ok)
            ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: cannot look at the kept version of %s: %s",
                        OLD_DIR, iname, landed, strerror(errno));
        close(pfd);
        return ok;
    }
    const bool newer_there = !landed_batch && fstatat(pfd, last, &fs, AT_SYMLINK_NOFOLLOW) == 0 &&
                             (unsigned long long)fs.st_ino == ino && (unsigned long long)fs.st_size == size &&
                             ingest_time_ns(&fs.st_mtim) == (int64_t)mtime;
    if (newer_there) {
        if (renameat(pfd, bak, pfd, last) != 0 || fsync(pfd) != 0) {
            ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: cannot put the landed version of %s back: %s",
                        OLD_DIR, iname, landed, strerror(errno));
            ok = false;
        } else {
            ingest__log(ctx, INGEST_LOG_WARN,
                        "lander: sweep: %s: its landed version is back (batch %s of %s put a newer one in place and "
                        "did not land)",
                        landed, batch, device);
            (*restored)++;
        }
    } else if (finish && unlinkat(pfd, bak, 0) != 0 && errno != ENOENT) {
        ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: cannot remove the kept version of %s: %s", OLD_DIR,
                    iname, landed, strerror(errno));
        ok = false;
    }
    close(pfd);
    return ok;
}

/* The most bytes of a manifest the sweep reads for its landed paths (a bigger one: the intent stays). */
#define OLD_MANIFEST_MAX (512u * 1024u * 1024u)

void lander__free_paths(ingest_ctx *ctx, char **v, size_t n)
{
    for (size_t k = 0; k < n; k++)
        ingest__free(ctx, v[k]);
    ingest__free(ctx, v);
}

int lander__manifest_landed_paths(ingest_ctx *ctx, int rootfd, const char *mp, char ***out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    const int fd = openat(rootfd, mp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        const int e = errno;
        if (fd >= 0)
            close(fd);
        return ingest__fail(ctx, ingest__errno(e), "%s", strerror(e));
    }
    if ((uint64_t)st.st_size > OLD_MANIFEST_MAX) {
        close(fd);
        return ingest__fail(ctx, INGEST_ETOOBIG, "%llu bytes, more than the sweep reads",
                            (unsigned long long)st.st_size);
    }
    char *buf = ingest__malloc(ctx, (size_t)st.st_size + 1);
    size_t len = 0;
    while (buf != NULL && len < (size_t)st.st_size) {
        const ssize_t r = read(fd, buf + len, (size_t)st.st_size - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    const int e = errno;
    close(fd);
    if (buf == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "out of memory");
    if (len < (size_t)st.st_size) {
        ingest__free(ctx, buf);
        return ingest__fail(ctx, INGEST_EIO, "%s", strerror(e));
    }
    ingest_manifest_reader *r = NULL;
    int rc = ingest_manifest_reader_mem(ctx, buf, len, &r);
    char **v = NULL;
    size_t n = 0, cap = 0;
    ingest_manifest_rec rec;
    while (rc == 0 && (rc = ingest_manifest_reader_next(r, &rec)) == 1) {
        rc = 0;
        if (rec.type != INGEST_MREC_FILE || rec.refused != NULL || rec.landed == NULL || rec.landed[0] == '\0')
            continue;
        if (n == cap) {
            const size_t nc = cap ? cap * 2 : 64;
            char **nv = ingest__realloc(ctx, v, cap * sizeof *v, nc * sizeof *v);
            if (nv == NULL) {
                rc = ingest__fail(ctx, INGEST_ENOMEM, "out of memory");
                break;
            }
            v = nv;
            cap = nc;
        }
        if ((v[n] = ingest__strdup(ctx, rec.landed)) == NULL) {
            rc = ingest__fail(ctx, INGEST_ENOMEM, "out of memory");
            break;
        }
        n++;
    }
    ingest_manifest_reader_close(r);
    ingest__free(ctx, buf);
    if (rc < 0) {
        lander__free_paths(ctx, v, n);
        return rc;
    }
    if (n > 0)
        qsort(v, n, sizeof *v, lander__cmp_strp);
    *out = v;
    *nout = n;
    return 0;
}

/* The least bytes an entry takes: "0 0 0 1 13\n", a 1-byte path, '\n', ".ingest-old-x" and '\n'. */
#define OLD_ENTRY_MIN 27

/*
 * One intent (name, in dfd), locked while it is acted on; one locked by
 * its batch (in this process or another: a receiver sharing the tree) is
 * left alone.  Without finish (a restore pass): only the backups of
 * batches not landed whose new versions are at their final names are put
 * back.  With finish: then every other backup goes, and the intent unless
 * one could not be acted on (*left).
 */
static void sweep_intent(ingest_ctx *ctx, int rootfd, int dfd, const char *name, bool finish, uint64_t *restored,
                         uint64_t *left)
{
    char *t = NULL;
    const int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(fd); /* its batch is at work: its backups stay (and *left says some do) */
        *left += finish;
        return;
    }
    struct stat at;
    if (fd >= 0 && (fstat(fd, &st) != 0 || fstatat(dfd, name, &at, AT_SYMLINK_NOFOLLOW) != 0 ||
                    at.st_ino != st.st_ino)) {
        close(fd); /* removed by its batch (done with it) once opened here */
        return;
    }
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd < 0 && errno == ENOENT)
            return;
        if (finish)
            ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: cannot read it: %s; it stays, for the next start",
                        OLD_DIR, name, strerror(errno));
        if (fd >= 0)
            close(fd);
        *left += finish;
        return;
    }
    const char *bad = NULL;
    size_t len = 0;
    if ((uint64_t)st.st_size > OLD_INTENT_MAX) {
        bad = "longer than any batch's intent";
    } else if ((t = ingest__malloc(ctx, (size_t)st.st_size + 1)) == NULL) {
        close(fd);
        if (finish)
            ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: out of memory; it stays, for the next start",
                        OLD_DIR, name);
        *left += finish;
        return;
    } else {
        while (len < (size_t)st.st_size) {
            const ssize_t r = read(fd, t + len, (size_t)st.st_size - len);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                /* not a torn intent: one that cannot be read now (an I/O error) stays */
                if (finish)
                    ingest__log(ctx, INGEST_LOG_WARN,
                                "lander: sweep: %s/%s: cannot read it: %s; it stays, for the next start", OLD_DIR,
                                name, strerror(errno));
                close(fd);
                ingest__free(ctx, t);
                *left += finish;
                return;
            }
            if (r == 0)
                break;
            len += (size_t)r;
        }
        t[len] = '\0';
    }
    size_t pos = 0;
    char *device = NULL, *batch = NULL, *cnt = NULL;
    unsigned long n = 0;
    char extra;
    if (bad == NULL) {
        if (len < sizeof OLD_MAGIC - 1 || memcmp(t, OLD_MAGIC, sizeof OLD_MAGIC - 1) != 0)
            bad = "no 'ingest-replace 1' first line";
        pos = sizeof OLD_MAGIC - 1;
    }
    if (bad == NULL && ((device = next_line(t, len, &pos)) == NULL || (batch = next_line(t, len, &pos)) == NULL ||
                        (cnt = next_line(t, len, &pos)) == NULL || sscanf(cnt, "%lu%c", &n, &extra) != 1 || n == 0))
        bad = "its header (device, batch, count) is incomplete";
    if (bad == NULL && n > (len - pos) / OLD_ENTRY_MIN)
        bad = "more entries than its bytes can hold";
    if (bad == NULL && (ingest__path_check_id(ctx, "device", device) < 0 ||
                        ingest__path_check_id(ctx, "batch", batch) < 0))
        bad = "its device or batch is not a valid name";
    /* every entry complete before any is acted on: a torn intent was cut before any backup was made */
    typedef struct {
        unsigned long long ino, size;
        long long mtime;
        const char *landed, *bak;
    } entry;
    entry *ent = NULL;
    if (bad == NULL && (ent = ingest__calloc(ctx, n, sizeof *ent)) == NULL) {
        if (finish)
            ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: out of memory; it stays, for the next start",
                        OLD_DIR, name);
        *left += finish;
        close(fd);
        ingest__free(ctx, t);
        return;
    }
    for (unsigned long k = 0; bad == NULL && k < n; k++) {
        size_t ll, bl;
        char *l = next_line(t, len, &pos), *landed, *bak;
        if (l == NULL ||
            sscanf(l, "%llu %llu %lld %zu %zu%c", &ent[k].ino, &ent[k].size, &ent[k].mtime, &ll, &bl, &extra) != 5 ||
            ll == 0 || ll >= LANDED_MAX || bl == 0 || bl > NAME_MAX_BYTES ||
            (landed = take_bytes(t, len, &pos, ll)) == NULL || (bak = take_bytes(t, len, &pos, bl)) == NULL) {
            bad = "an entry is incomplete";
            break;
        }
        if (ingest__path_check_rel(ctx, "landed path", landed) < 0 || strncmp(bak, ".ingest-old-", 12) != 0 ||
            strchr(bak, '/') != NULL)
            bad = "an entry names a path outside bronze or a backup not of ours";
        ent[k].landed = landed;
        ent[k].bak = bak;
    }
    if (bad == NULL && pos != len)
        bad = "bytes after its last entry";
    if (bad != NULL) {
        /* written whole and synced before any backup was made: one that is not whole kept nothing */
        if (finish) {
            ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s is not a complete replace intent (%s): removed",
                        OLD_DIR, name, bad);
            (void)unlinkat(dfd, name, 0);
        }
        close(fd);
        ingest__free(ctx, ent);
        ingest__free(ctx, t);
        return;
    }
    char mp[INGEST_DEVICE_ID_MAX + INGEST_WIRE_BATCH_ID_MAX + 32];
    snprintf(mp, sizeof mp, "_manifests/%s/%s.jsonl", device, batch);
    struct stat ms;
    /* the batch landed: its manifest in place (an empty one was renamed in place before the syncfs that would
     * have written it, cut by a crash: its batch did not land) */
    const int mr = fstatat(rootfd, mp, &ms, AT_SYMLINK_NOFOLLOW), me = errno;
    /* The batch landed (a try of it: maybe a later one, the intent being an earlier try's) when its manifest
     * is in place; an entry is landed when that manifest lists its path, and only then is its backup of no
     * more use whatever the final name holds */
    char **listed = NULL;
    size_t nlisted = 0;
    const char *cannot = NULL;
    if (mr != 0 && me != ENOENT)
        cannot = strerror(me);
    else if (mr == 0 && ms.st_size > 0 && lander__manifest_landed_paths(ctx, rootfd, mp, &listed, &nlisted) < 0)
        cannot = ingest_ctx_errmsg(ctx);
    if (cannot != NULL) {
        if (finish)
            ingest__log(ctx, INGEST_LOG_WARN, "lander: sweep: %s/%s: cannot read %s: %s; it stays, for the next start",
                        OLD_DIR, name, mp, cannot);
        *left += finish;
        close(fd);
        ingest__free(ctx, ent);
        ingest__free(ctx, t);
        return;
    }
    bool all = true;
    for (unsigned long k = 0; k < n; k++) {
        const bool landed = listed != NULL && bsearch(&ent[k].landed, listed, nlisted, sizeof *listed, lander__cmp_strp);
        if (finish || !landed)
            all &= sweep_entry(ctx, rootfd, name, finish, landed, ent[k].landed, ent[k].bak, ent[k].ino,
                               ent[k].size, ent[k].mtime, device, batch, restored);
    }
    lander__free_paths(ctx, listed, nlisted);
    if (finish && all)
        (void)unlinkat(dfd, name, 0);
    else if (finish)
        (*left)++;
    close(fd);
    ingest__free(ctx, ent);
    ingest__free(ctx, t);
}

static void restore_one(ingest_ctx *ctx, int rootfd, int dfd, const char *name, uint64_t *restored, uint64_t *left)
{
    sweep_intent(ctx, rootfd, dfd, name, false, restored, left);
}

static void finish_one(ingest_ctx *ctx, int rootfd, int dfd, const char *name, uint64_t *restored, uint64_t *left)
{
    sweep_intent(ctx, rootfd, dfd, name, true, restored, left);
}

/* Most restore passes: each restore takes a backup away, so they end; this bounds a tree changed meanwhile. */
#define OLD_PASSES_MAX 64

int lander__old_sweep(ingest_ctx *ctx, int rootfd, uint64_t *restored, uint64_t *left)
{
    /* Restore passes until one puts nothing back, then one that removes the rest.  Two batches that replaced
     * the same path (v1 by v2, then v2 by v3) and did not land: the later one's backup is put back first (v2,
     * its new version v3 being there), then the earlier one's (v1), whatever order the directory lists them in */
    for (int p = 0; p < OLD_PASSES_MAX; p++) {
        uint64_t got = 0, ignored = 0;
        INGEST__FORWARD(lander__sweep_intents(ctx, rootfd, OLD_DIR, restore_one, &got, &ignored));
        *restored += got;
        if (got == 0)
            break;
    }
    return lander__sweep_intents(ctx, rootfd, OLD_DIR, finish_one, restored, left);
}

void ingest__lander_release_intent(ingest_lander *l)
{
    if (l != NULL && l->busy != NULL)
        lander__close_fd(&l->busy->old_fd);
}
