/*
 * powercut-restore DIR: the second half of a simulated power cut (tests
 * only).  After the program that ran with powercut.so (POWERCUT_DIR=DIR)
 * was killed, undo every change in DIR/log that no later sync made durable
 * (see tests/tools/powercut/powercut.c for the model), then empty DIR for
 * the next run.
 *
 * A sync record covers the records that stood in the log when its call
 * started (its off): fsync of a file its data records, fsync of a
 * directory the name changes in it, syncfs those of its filesystem, sync
 * everything; an O_DSYNC write its own range.  Data is put back first, by
 * inode (each written inode is found under the roots or, if its names were
 * removed, under DIR/shadow; one no longer anywhere is gone for good), newest
 * record first; then the name changes are undone, newest first.  A
 * directory removed (empty) where one stands again, made by a later change
 * that was durable, is as it was.
 *
 * Prints one line of what it undid; exits 1 when the log is malformed or a
 * change cannot be undone (the message says which record and why).
 * POWERCUT_VERBOSE=1 prints each change undone on stderr.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "powercut/pclog.h"

typedef struct {
    pc_rec h;
    uint64_t at; /* where the record starts in the log */
} rec;

typedef struct {
    uint64_t dev, ino, upto;
} cover;

typedef struct {
    uint64_t dev, ino;
    char *path;
} inode_at;

static const char *dir;
static int errors, verbose;
static inode_at *inodes;
static size_t ninodes, capinodes;

static void bad(size_t i, const char *what, const char *path, int e)
{
    fprintf(stderr, "powercut-restore: record %zu: %s %s%s%s\n", i, what, path ? path : "", e ? ": " : "",
            e ? strerror(e) : "");
    errors++;
}

static void *grow(void *p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return p;
    *cap = *cap ? *cap * 2 : 256;
    void *q = realloc(p, *cap * size);
    if (q == NULL) {
        perror("powercut-restore");
        exit(1);
    }
    return q;
}

/* the largest upto of the covers of (dev, ino); 0 if none */
static uint64_t upto_of(const cover *c, size_t n, uint64_t dev, uint64_t ino)
{
    uint64_t u = 0;
    for (size_t j = 0; j < n; j++)
        if (c[j].dev == dev && c[j].ino == ino && c[j].upto > u)
            u = c[j].upto;
    return u;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    return (flag == FTW_DP ? rmdir(p) : unlink(p)) < 0 && errno != ENOENT ? -1 : 0;
}

static int rm_tree(const char *p) { return nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT ? -1 : 0; }

static int note_inode(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)f;
    if (flag != FTW_F || !S_ISREG(st->st_mode))
        return 0;
    for (size_t j = 0; j < ninodes; j++)
        if (inodes[j].dev == (uint64_t)st->st_dev && inodes[j].ino == (uint64_t)st->st_ino)
            return 0;
    inodes = grow(inodes, &capinodes, ninodes, sizeof(*inodes));
    inodes[ninodes].dev = (uint64_t)st->st_dev;
    inodes[ninodes].ino = (uint64_t)st->st_ino;
    if ((inodes[ninodes].path = strdup(p)) == NULL)
        return -1;
    ninodes++;
    return 0;
}

static const char *path_of_inode(uint64_t dev, uint64_t ino)
{
    for (size_t j = 0; j < ninodes; j++)
        if (inodes[j].dev == dev && inodes[j].ino == ino)
            return inodes[j].path;
    return NULL;
}

static int is_dir(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/*
 * Is the directory (dev, ino) that a name change was made in no longer at the parent path of p (nothing
 * there, or another directory)?  Then it was removed or moved away since, or its making undone: nothing of
 * the change is left to undo there, and undoing it by path would hit the directory standing there now (a
 * directory removed and made again: the soak's lost batches).  A removal that a later durable change
 * replaced was durable itself (the same parent directory's sync covers both).
 */
static int dir_gone(const char *p, uint64_t dev, uint64_t ino)
{
    char d[PC_PATH_MAX];
    snprintf(d, sizeof(d), "%s", p);
    char *s = strrchr(d, '/');
    if (s == NULL || s == d || dev == 0)
        return 0;
    *s = '\0';
    struct stat st;
    if (stat(d, &st) < 0)
        return errno == ENOENT;
    return S_ISDIR(st.st_mode) && ((uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino);
}

static int read_path(int fd, uint64_t at, uint32_t len, char *out)
{
    if (len >= PC_PATH_MAX)
        return -1;
    if (len && pread(fd, out, len, (off_t)at) != (ssize_t)len)
        return -1;
    out[len] = '\0';
    return 0;
}

/* Put back the old bytes of data record i (file f), but not where a later O_DSYNC write (RANGE_SYNC) is durable. */
static uint64_t undo_data(int logfd, const rec *r, size_t n, size_t i, int f, const char *path)
{
    const pc_rec *h = &r[i].h;
    const uint64_t data = r[i].at + sizeof(pc_rec) + h->plen1 + h->plen2 + h->plen3;
    uint64_t keep_to = h->oldsize, undone = 0;
    static char buf[65536];
    for (uint64_t o = 0; o < h->nold;) {
        const uint64_t len = h->nold - o < sizeof(buf) ? h->nold - o : sizeof(buf);
        if (pread(logfd, buf, len, (off_t)(data + o)) != (ssize_t)len) {
            bad(i, "cannot read its old bytes from the log", NULL, errno);
            return undone;
        }
        for (uint64_t b = 0; b < len;) {
            const uint64_t pos = h->off + o + b;
            uint64_t run = len - b, skip = 0;
            for (size_t j = i + 1; j < n; j++) {
                const pc_rec *s = &r[j].h;
                if (s->kind != PC_RANGE_SYNC || s->dev != h->dev || s->ino != h->ino)
                    continue;
                if (s->off <= pos && pos < s->off + s->len) {
                    if (s->off + s->len - pos > skip)
                        skip = s->off + s->len - pos;
                } else if (s->off > pos && s->off - pos < run) {
                    run = s->off - pos;
                }
            }
            if (skip) {
                b += skip < len - b ? skip : len - b;
                continue;
            }
            if (pwrite(f, buf + b, run, (off_t)pos) != (ssize_t)run)
                bad(i, "cannot put old bytes back into", path, errno);
            undone += run;
            b += run;
        }
        o += len;
    }
    for (size_t j = i + 1; j < n; j++) {
        const pc_rec *s = &r[j].h;
        if (s->kind == PC_RANGE_SYNC && s->dev == h->dev && s->ino == h->ino && s->off + s->len > keep_to)
            keep_to = s->off + s->len;
    }
    struct stat st;
    if (fstat(f, &st) == 0 && (uint64_t)st.st_size != keep_to) {
        if (ftruncate(f, (off_t)keep_to) < 0)
            bad(i, "cannot cut back", path, errno);
        undone += 1;
    }
    return undone;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: powercut-restore DIR\n");
        return 2;
    }
    dir = argv[1];
    verbose = getenv("POWERCUT_VERBOSE") != NULL && strcmp(getenv("POWERCUT_VERBOSE"), "1") == 0;
    char lp[4200], sh[4200];
    snprintf(lp, sizeof(lp), "%s/log", dir);
    snprintf(sh, sizeof(sh), "%s/shadow", dir);
    const int fd = open(lp, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            printf("powercut: nothing logged\n");
            return 0;
        }
        fprintf(stderr, "powercut-restore: %s: %s\n", lp, strerror(errno));
        return 1;
    }
    struct stat lst;
    if (fstat(fd, &lst) < 0)
        return 1;
    rec *r = NULL;
    size_t n = 0, cap = 0, torn = 0;
    for (uint64_t at = 0; at < (uint64_t)lst.st_size;) {
        pc_rec h;
        if (pread(fd, &h, sizeof(h), (off_t)at) != (ssize_t)sizeof(h)) {
            torn = 1; /* killed while logging: the change had not been made */
            break;
        }
        if (h.magic != PC_MAGIC || h.kind < PC_DATA || h.kind > PC_LINK || h.plen1 >= PC_PATH_MAX ||
            h.plen2 >= PC_PATH_MAX || h.plen3 >= PC_PATH_MAX || h.nold > PC_OLD_MAX) {
            fprintf(stderr, "powercut-restore: %s: record %zu at byte %" PRIu64 " is malformed\n", lp, n, at);
            return 1;
        }
        const uint64_t next = at + sizeof(h) + h.plen1 + h.plen2 + h.plen3 + h.nold;
        if (next > (uint64_t)lst.st_size) {
            torn = 1;
            break;
        }
        r = grow(r, &cap, n, sizeof(*r));
        r[n++] = (rec){ h, at };
        at = next;
    }
    /* what each sync covers: the records before where the log stood when it started */
    cover *fs = NULL, *ds = NULL, *all = NULL;
    size_t nfs = 0, cfs = 0, nds = 0, cds = 0, nall = 0, call = 0;
    for (size_t i = 0; i < n; i++) {
        const pc_rec *h = &r[i].h;
        if (h->kind == PC_SYNC || h->kind == PC_DSYNC || h->kind == PC_SYNCALL) {
            cover **t = h->kind == PC_SYNC ? &fs : h->kind == PC_DSYNC ? &ds : &all;
            size_t *nt = h->kind == PC_SYNC ? &nfs : h->kind == PC_DSYNC ? &nds : &nall;
            size_t *ct = h->kind == PC_SYNC ? &cfs : h->kind == PC_DSYNC ? &cds : &call;
            *t = grow(*t, ct, *nt, sizeof(**t));
            (*t)[(*nt)++] = (cover){ h->dev, h->kind == PC_SYNCALL ? 0 : h->ino, h->off };
        }
    }
    /* syncfs of dev, or sync (dev 0) */
    uint64_t every = 0;
    for (size_t j = 0; j < nall; j++)
        if (all[j].dev == 0 && all[j].upto > every)
            every = all[j].upto;
#define FS_UPTO(d) (upto_of(all, nall, (d), 0) > every ? upto_of(all, nall, (d), 0) : every)

    /* the inodes under the roots and in the shadow directory */
    char rp[4200], line[4200];
    snprintf(rp, sizeof(rp), "%s/roots", dir);
    FILE *rf = fopen(rp, "re");
    if (rf == NULL) {
        fprintf(stderr, "powercut-restore: %s: %s\n", rp, strerror(errno));
        return 1;
    }
    while (fgets(line, sizeof(line), rf) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] && nftw(line, note_inode, 16, FTW_PHYS) < 0 && errno != ENOENT) {
            fprintf(stderr, "powercut-restore: walking %s: %s\n", line, strerror(errno));
            return 1;
        }
    }
    fclose(rf);
    if (nftw(sh, note_inode, 16, FTW_PHYS) < 0 && errno != ENOENT) {
        fprintf(stderr, "powercut-restore: walking %s: %s\n", sh, strerror(errno));
        return 1;
    }

    size_t writes = 0, names = 0, durable = 0, gone = 0, moot = 0;
    uint64_t bytes = 0;
    /* 1. data, newest first, by inode */
    for (size_t i = n; i-- > 0;) {
        const pc_rec *h = &r[i].h;
        if (h->kind != PC_DATA)
            continue;
        if (r[i].at < FS_UPTO(h->dev) || r[i].at < upto_of(fs, nfs, h->dev, h->ino)) {
            durable++;
            continue;
        }
        const char *path = path_of_inode(h->dev, h->ino);
        if (path == NULL) {
            gone++; /* no name left anywhere: nothing can read it after the cut */
            continue;
        }
        const int f = open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (f < 0) {
            bad(i, "cannot open", path, errno);
            continue;
        }
        const uint64_t u = undo_data(fd, r, n, i, f, path);
        close(f);
        if (u > 0) {
            writes++;
            bytes += u;
            if (verbose)
                fprintf(stderr, "powercut-restore: undo a write of %" PRIu64 " bytes at %" PRIu64 " to %s\n", h->len,
                        h->off, path);
        } else {
            durable++; /* all of it covered by O_DSYNC writes */
        }
    }
    /* 2. names, newest first */
    char p1[PC_PATH_MAX], p2[PC_PATH_MAX], p3[PC_PATH_MAX];
    for (size_t i = n; i-- > 0;) {
        const pc_rec *h = &r[i].h;
        if (h->kind < PC_CREATE)
            continue;
        const uint64_t fsu = FS_UPTO(h->p1dev);
        const int c1 = r[i].at < fsu || r[i].at < upto_of(ds, nds, h->p1dev, h->p1ino);
        const int c2 = h->kind != PC_RENAME || r[i].at < FS_UPTO(h->p2dev) ||
                       r[i].at < upto_of(ds, nds, h->p2dev, h->p2ino);
        if (c1 && c2) {
            durable++;
            continue;
        }
        if (read_path(fd, r[i].at + sizeof(pc_rec), h->plen1, p1) < 0 ||
            read_path(fd, r[i].at + sizeof(pc_rec) + h->plen1, h->plen2, p2) < 0 ||
            read_path(fd, r[i].at + sizeof(pc_rec) + h->plen1 + h->plen2, h->plen3, p3) < 0) {
            bad(i, "cannot read its paths", NULL, 0);
            continue;
        }
        /* the name to undo lives in p2's parent after a rename, in p1's otherwise */
        if (h->kind == PC_RENAME ? dir_gone(p2, h->p2dev, h->p2ino) : dir_gone(p1, h->p1dev, h->p1ino)) {
            moot++;
            if (verbose)
                fprintf(stderr, "powercut-restore: record %zu: made in a directory removed since: %s\n", i,
                        h->kind == PC_RENAME ? p2 : p1);
            continue;
        }
        names++;
        if (verbose)
            fprintf(stderr, "powercut-restore: undo %s %s%s%s\n",
                    h->kind == PC_CREATE  ? "create"
                    : h->kind == PC_MKDIR  ? "mkdir"
                    : h->kind == PC_UNLINK ? "unlink"
                    : h->kind == PC_RENAME ? "rename"
                                           : "link",
                    p1, h->kind == PC_RENAME ? " -> " : "", h->kind == PC_RENAME ? p2 : "");
        switch (h->kind) {
        case PC_CREATE:
        case PC_LINK:
            if (unlink(p1) < 0 && errno != ENOENT)
                bad(i, "cannot remove the new name", p1, errno);
            break;
        case PC_MKDIR:
            if (rm_tree(p1) < 0)
                bad(i, "cannot remove the new directory", p1, errno);
            break;
        case PC_UNLINK:
            /* a directory there already: made again by a durable change; this one was empty when removed */
            if (p2[0] ? link(p2, p1) < 0 : mkdir(p1, 0755) < 0 && !(errno == EEXIST && is_dir(p1)))
                bad(i, "cannot bring back the removed name", p1, errno);
            break;
        case PC_RENAME:
            if (rename(p2, p1) < 0)
                bad(i, "cannot rename back", p2, errno);
            else if (p3[0] && link(p3, p2) < 0)
                bad(i, "cannot bring back the name renamed over", p2, errno);
            break;
        default:
            break;
        }
    }
    close(fd);
    printf("powercut: undid %zu writes (%" PRIu64 " bytes) and %zu name changes; %zu changes were durable, %zu "
           "made in directories removed since, %zu written to files no longer anywhere%s\n",
           writes, bytes, names, durable, moot, gone, torn ? "; the last record was torn (its change was not made)" : "");
    if (unlink(lp) < 0 || rm_tree(sh) < 0) {
        fprintf(stderr, "powercut-restore: cannot empty %s: %s\n", dir, strerror(errno));
        errors++;
    }
    for (size_t j = 0; j < ninodes; j++)
        free(inodes[j].path);
    free(inodes);
    free(r);
    free(fs);
    free(ds);
    free(all);
    return errors ? 1 : 0;
}
