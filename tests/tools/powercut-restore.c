/*
 * powercut-restore DIR: the second half of a simulated power cut (tests
 * only).  After the program that ran with powercut.so (POWERCUT_DIR=DIR)
 * was killed, undo, newest first, every change in DIR/log that no later
 * sync made durable (see tests/tools/powercut/powercut.c for the model),
 * then empty DIR for the next run.  Prints one line of what it undid;
 * exits 1 when the log is malformed or a change cannot be undone (the
 * message says which record and why).
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
    off_t at; /* where its paths start in the log */
} rec;

static const char *dir;
static int errors;
static int verbose; /* POWERCUT_VERBOSE=1: each change undone, on stderr */

static void bad(size_t i, const char *what, const char *path)
{
    fprintf(stderr, "powercut-restore: record %zu: %s %s: %s\n", i, what, path ? path : "", strerror(errno));
    errors++;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    return (flag == FTW_DP ? rmdir(p) : unlink(p)) < 0 && errno != ENOENT ? -1 : 0;
}

static int rm_tree(const char *p) { return nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT ? -1 : 0; }

static int read_path(int fd, off_t at, uint32_t len, char *out)
{
    if (len >= PC_PATH_MAX)
        return -1;
    if (len && pread(fd, out, len, at) != (ssize_t)len)
        return -1;
    out[len] = '\0';
    return 0;
}

/* The last index (> i) at which a sync of kind k for (dev, ino) appears; -1 if none.  Linear: logs are small. */
typedef struct {
    uint64_t dev, ino;
    size_t last;
} last_t;

static size_t last_of(const last_t *t, size_t n, uint64_t dev, uint64_t ino)
{
    for (size_t j = 0; j < n; j++)
        if (t[j].dev == dev && t[j].ino == ino)
            return t[j].last;
    return 0;
}

static void note_last(last_t **t, size_t *n, size_t *cap, uint64_t dev, uint64_t ino, size_t idx)
{
    for (size_t j = 0; j < *n; j++)
        if ((*t)[j].dev == dev && (*t)[j].ino == ino) {
            (*t)[j].last = idx;
            return;
        }
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *t = realloc(*t, *cap * sizeof(**t));
        if (*t == NULL) {
            perror("powercut-restore");
            exit(1);
        }
    }
    (*t)[(*n)++] = (last_t){ dev, ino, idx };
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: powercut-restore DIR\n");
        return 2;
    }
    dir = argv[1];
    verbose = getenv("POWERCUT_VERBOSE") != NULL && strcmp(getenv("POWERCUT_VERBOSE"), "1") == 0;
    char lp[4200];
    snprintf(lp, sizeof(lp), "%s/log", dir);
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
    for (off_t at = 0; at < lst.st_size;) {
        pc_rec h;
        if (pread(fd, &h, sizeof(h), at) != (ssize_t)sizeof(h)) {
            torn = 1; /* killed while logging: the operation had not been made */
            break;
        }
        if (h.magic != PC_MAGIC || h.kind < PC_DATA || h.kind > PC_LINK || h.plen1 >= PC_PATH_MAX ||
            h.plen2 >= PC_PATH_MAX || h.plen3 >= PC_PATH_MAX || h.nold > PC_OLD_MAX) {
            fprintf(stderr, "powercut-restore: %s: record %zu at byte %lld is malformed\n", lp, n, (long long)at);
            return 1;
        }
        const off_t next = at + (off_t)sizeof(h) + h.plen1 + h.plen2 + h.plen3 + (off_t)h.nold;
        if (next > lst.st_size) {
            torn = 1;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 1024;
            if ((r = realloc(r, cap * sizeof(*r))) == NULL) {
                perror("powercut-restore");
                return 1;
            }
        }
        r[n++] = (rec){ h, at + (off_t)sizeof(h) };
        at = next;
    }
    /* what each sync made durable */
    last_t *fs = NULL, *ds = NULL;
    size_t nfs = 0, cfs = 0, nds = 0, cds = 0, all = 0;
    for (size_t i = 0; i < n; i++) {
        if (r[i].h.kind == PC_SYNC)
            note_last(&fs, &nfs, &cfs, r[i].h.dev, r[i].h.ino, i + 1);
        else if (r[i].h.kind == PC_DSYNC)
            note_last(&ds, &nds, &cds, r[i].h.dev, r[i].h.ino, i + 1);
        else if (r[i].h.kind == PC_SYNCALL)
            all = i + 1;
    }
    /* which name changes are durable (their directories synced later, or everything) */
    char *cov = calloc(n ? n : 1, 1);
    if (cov == NULL) {
        perror("powercut-restore");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        const pc_rec *h = &r[i].h;
        if (h->kind < PC_CREATE)
            continue;
        const size_t d1 = last_of(ds, nds, h->p1dev, h->p1ino);
        const size_t d2 = h->kind == PC_RENAME ? last_of(ds, nds, h->p2dev, h->p2ino) : d1;
        cov[i] = all > i || (d1 > i && d2 > i);
    }
    size_t writes = 0, names = 0, durable = 0;
    uint64_t bytes = 0;
    char p1[PC_PATH_MAX], p2[PC_PATH_MAX], p3[PC_PATH_MAX], sh[4400];
    for (size_t i = n; i-- > 0;) {
        const pc_rec *h = &r[i].h;
        if (h->kind == PC_SYNC || h->kind == PC_DSYNC || h->kind == PC_SYNCALL || h->kind == PC_RANGE_SYNC)
            continue;
        if (all > i) {
            durable++;
            continue;
        }
        if (h->kind == PC_DATA) {
            if (last_of(fs, nfs, h->dev, h->ino) > i) {
                durable++;
                continue;
            }
            /* where the file is now: its path then, through the durable renames since (the others are undone) */
            if (read_path(fd, r[i].at, h->plen1, sh) < 0) {
                bad(i, "cannot read its path", NULL);
                continue;
            }
            int gone = 0;
            for (size_t j = i + 1; j < n && !gone; j++) {
                const pc_rec *m = &r[j].h;
                if (!cov[j] || (m->kind != PC_RENAME && m->kind != PC_UNLINK))
                    continue;
                if (read_path(fd, r[j].at, m->plen1, p1) < 0 || read_path(fd, r[j].at + m->plen1, m->plen2, p2) < 0) {
                    bad(j, "cannot read its paths", NULL);
                    break;
                }
                const size_t l1 = strlen(p1);
                if (strncmp(sh, p1, l1) != 0 || (sh[l1] != '\0' && sh[l1] != '/'))
                    continue;
                if (m->kind == PC_UNLINK) {
                    gone = sh[l1] == '\0'; /* removed for good: nothing to put back */
                    continue;
                }
                char moved[sizeof(sh)];
                snprintf(moved, sizeof(moved), "%s%s", p2, sh + l1);
                memcpy(sh, moved, sizeof(sh));
            }
            if (verbose)
                fprintf(stderr, "powercut-restore: undo a write of %" PRIu64 " bytes at %" PRIu64 " to %s%s\n", h->len,
                        h->off, sh, gone ? " (gone)" : "");
            if (gone) {
                writes++;
                continue;
            }
            const int f = open(sh, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
            struct stat fst;
            if (f < 0 && errno == ENOENT) {
                writes++; /* its name was never durable, and is undone */
                continue;
            }
            if (f < 0 || fstat(f, &fst) < 0 || (uint64_t)fst.st_ino != h->ino || (uint64_t)fst.st_dev != h->dev) {
                bad(i, "the file written is no longer at", sh);
                if (f >= 0)
                    close(f);
                continue;
            }
            /* old bytes back, except where a later O_DSYNC write made the new ones durable */
            uint64_t keep_to = h->oldsize;
            const off_t data = r[i].at + h->plen1 + h->plen2 + h->plen3;
            char buf[65536];
            for (uint64_t o = 0; o < h->nold;) {
                uint64_t len = h->nold - o < sizeof(buf) ? h->nold - o : sizeof(buf);
                if (pread(fd, buf, len, data + (off_t)o) != (ssize_t)len) {
                    bad(i, "cannot read its old bytes from the log", NULL);
                    break;
                }
                for (uint64_t b = 0; b < len;) {
                    const uint64_t pos = h->off + o + b;
                    uint64_t run = len - b, skip = 0;
                    for (size_t j = i + 1; j < n; j++) {
                        const pc_rec *s = &r[j].h;
                        if (s->kind != PC_RANGE_SYNC || s->dev != h->dev || s->ino != h->ino)
                            continue;
                        if (s->off <= pos && pos < s->off + s->len) {
                            const uint64_t k = s->off + s->len - pos;
                            if (k > skip)
                                skip = k;
                        } else if (s->off > pos && s->off - pos < run) {
                            run = s->off - pos;
                        }
                    }
                    if (skip) {
                        b += skip < len - b ? skip : len - b;
                        continue;
                    }
                    if (pwrite(f, buf + b, run, (off_t)pos) != (ssize_t)run)
                        bad(i, "cannot put old bytes back into", sh);
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
            if (fstat(f, &st) == 0 && (uint64_t)st.st_size != keep_to && ftruncate(f, (off_t)keep_to) < 0)
                bad(i, "cannot cut back", sh);
            close(f);
            writes++;
            bytes += h->nold;
            continue;
        }
        if (read_path(fd, r[i].at, h->plen1, p1) < 0 || read_path(fd, r[i].at + h->plen1, h->plen2, p2) < 0 ||
            read_path(fd, r[i].at + h->plen1 + h->plen2, h->plen3, p3) < 0) {
            bad(i, "cannot read its paths", NULL);
            continue;
        }
        if (cov[i]) {
            durable++;
            continue;
        }
        names++;
        if (verbose)
            fprintf(stderr, "powercut-restore: undo %s %s%s%s\n",
                    h->kind == PC_CREATE ? "create" : h->kind == PC_MKDIR ? "mkdir" : h->kind == PC_UNLINK ? "unlink"
                    : h->kind == PC_RENAME ? "rename" : "link", p1, h->kind == PC_RENAME ? " -> " : "",
                    h->kind == PC_RENAME ? p2 : "");
        switch (h->kind) {
        case PC_CREATE:
        case PC_LINK:
            if (unlink(p1) < 0 && errno != ENOENT)
                bad(i, "cannot remove the new name", p1);
            break;
        case PC_MKDIR:
            if (rm_tree(p1) < 0)
                bad(i, "cannot remove the new directory", p1);
            break;
        case PC_UNLINK:
            if (p2[0] ? link(p2, p1) < 0 : mkdir(p1, 0755) < 0)
                bad(i, "cannot bring back the removed name", p1);
            break;
        case PC_RENAME:
            if (rename(p2, p1) < 0)
                bad(i, "cannot rename back", p2);
            else if (p3[0] && link(p3, p2) < 0)
                bad(i, "cannot bring back the name renamed over", p2);
            break;
        default:
            break;
        }
    }
    close(fd);
    printf("powercut: undid %zu writes (%" PRIu64 " old bytes) and %zu name changes; %zu changes were durable%s\n",
           writes, bytes, names, durable, torn ? "; the last record was torn (its change was not made)" : "");
    snprintf(sh, sizeof(sh), "%s/shadow", dir);
    if (unlink(lp) < 0 || rm_tree(sh) < 0) {
        fprintf(stderr, "powercut-restore: cannot empty %s: %s\n", dir, strerror(errno));
        errors++;
    }
    free(r);
    free(cov);
    free(fs);
    free(ds);
    return errors ? 1 : 0;
}
