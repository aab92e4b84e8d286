/* The edge daemon's discovery: sources and filters, inotify watches, the walks that choose files (daemon_int.h). */
#include "daemon_int.h"

/* ---- sources, filters --------------------------------------------------- */

void dmn_sources_free(daemon_t *d)
{
    for (size_t i = 0; i < d->nsrc; i++)
        ingest_filter_destroy(d->src[i].filter);
    free(d->src);
    free(d->ssrc);
    d->src = NULL;
    d->ssrc = NULL;
    d->nsrc = 0;
}

/* Per-source settings from cfg; 0 or -1 (logged). */
int dmn_sources_make(daemon_t *d, const ingest_agent_config *cfg, dsource **out, ingest_sender_source **sout)
{
    dsource *s = calloc(cfg->sources_count, sizeof(*s));
    ingest_sender_source *ss = calloc(cfg->sources_count, sizeof(*ss));
    if (s == NULL || ss == NULL) {
        free(s);
        free(ss);
        return -1;
    }
    for (size_t i = 0; i < cfg->sources_count; i++) {
        const ingest_source_config *c = &cfg->sources[i];
        s[i].name = ss[i].name = c->name;
        s[i].path = ss[i].path = c->path;
        ss[i].symlinks = c->symlinks == INGEST_SYMLINKS_SHIP ? INGEST_SENDER_SYMLINKS_SHIP : INGEST_SENDER_SYMLINKS_SKIP;
        s[i].name_len = strlen(c->name);
        s[i].settle_ns = (int64_t)c->settle_ms * 1000000;
        s[i].after = c->after_ship_mode == INGEST_AFTER_SHIP_DELETE ? AFTER_DELETE
                     : c->after_ship_mode == INGEST_AFTER_SHIP_MOVE ? AFTER_MOVE
                                                                     : AFTER_KEEP;
        s[i].move_dir = c->after_ship_dir;
        s[i].spool = c->spool == INGEST_SPOOL_COPY;
        s[i].filter_rules = agent_filter_rules(c);
        if (agent_filter_create(d->a, c, &s[i].filter) < 0) {
            for (size_t k = 0; k < i; k++)
                ingest_filter_destroy(s[k].filter);
            free(s);
            free(ss);
            return -1;
        }
    }
    *out = s;
    *sout = ss;
    return 0;
}

dsource *dmn_source_of(daemon_t *d, const char *path, const char **rel)
{
    for (size_t i = 0; i < d->nsrc; i++)
        if (strncmp(path, d->src[i].name, d->src[i].name_len) == 0 && path[d->src[i].name_len] == '/') {
            *rel = path + d->src[i].name_len + 1;
            return &d->src[i];
        }
    return NULL;
}

/* ---- inotify -------------------------------------------------------------- */

/*
 * A directory past the depth limit: said once per directory (the walk
 * meets it again every rescan), at most TOO_DEEP_MAX of them remembered
 * (further ones are said at debug level).
 */
static void too_deep(daemon_t *d, const char *dir)
{
    for (size_t i = 0; i < d->ndeep; i++)
        if (strcmp(d->deep[i], dir) == 0)
            return;
    int level = INGEST_LOG_DEBUG;
    if (d->ndeep < TOO_DEEP_MAX) {
        if (d->ndeep == d->capdeep) {
            const size_t nc = d->capdeep ? d->capdeep * 2 : 8;
            char **n = realloc(d->deep, nc * sizeof(*n));
            if (n != NULL) {
                d->deep = n;
                d->capdeep = nc;
            }
        }
        if (d->ndeep < d->capdeep && (d->deep[d->ndeep] = strdup(dir)) != NULL) {
            d->ndeep++;
            level = INGEST_LOG_WARN;
        }
    }
    say_too_deep(level, dir);
}

/*
 * The daemon's walks and batch builds report skips here: a directory past
 * the depth limit once; a file that vanished (a rotating writer's, or
 * deleted while its batch waited) counted and kept for one grouped line
 * (dmn_vanished_say); the rest as --once does.
 */
void dmn_on_skip(void *ud, const char *path, int reason)
{
    daemon_t *d = ((agent *)ud)->userdata;
    if (reason == INGEST_SKIP_DEPTH) {
        too_deep(d, path);
        return;
    }
    if (reason == INGEST_SKIP_VANISHED) {
        d->vanished++;
        if (d->vanish_round < VANISH_NAMES)
            d->vanish_names[d->vanish_round] = strdup(path); /* NULL: the line names one fewer */
        d->vanish_round++;
        if (d->a->report.metrics != NULL)
            ingest_metric_add(d->a->report.m.files_skipped, "vanished", 1);
        return;
    }
    on_skip(ud, path, reason);
}

/* One line for the files that vanished during a walk or a batch build (where: which), with a few names. */
void dmn_vanished_say(daemon_t *d, const char *where)
{
    if (d->vanish_round == 0)
        return;
    char names[3 * 256] = "";
    size_t len = 0;
    for (size_t i = 0; i < VANISH_NAMES && i < d->vanish_round; i++) {
        if (d->vanish_names[i] == NULL)
            continue;
        const int n = snprintf(names + len, sizeof(names) - len, "%s%.200s", len ? ", " : "",
                               prog_esc(d->vanish_names[i]));
        if (n > 0 && (size_t)n < sizeof(names) - len)
            len += (size_t)n;
        free(d->vanish_names[i]);
        d->vanish_names[i] = NULL;
    }
    const uint64_t more = d->vanish_round > VANISH_NAMES ? d->vanish_round - VANISH_NAMES : 0;
    char tail[48] = "";
    if (more > 0)
        snprintf(tail, sizeof(tail), " and %llu more", (unsigned long long)more);
    prog_log(INGEST_LOG_INFO, "%llu file%s vanished before %s shipped (%s): %s%s; dropped, counted (files_vanished)",
             (unsigned long long)d->vanish_round, d->vanish_round == 1 ? "" : "s",
             d->vanish_round == 1 ? "it was" : "they were", where, names, tail);
    d->vanish_round = 0;
}

/*
 * The directory watched as w[i] is now rel of source si (renamed, or moved
 * within the sources: inotify keeps its watch, and its subdirectories'):
 * its name and those under it follow, so their events name where the files
 * are now.  0, or -1 (out of memory: the old names stay, the walks find the
 * files).
 */
static int watch_renamed(daemon_t *d, size_t i, size_t si, const char *rel)
{
    char *old = strdup(d->w[i].rel);
    if (old == NULL)
        return -1;
    const size_t os = d->w[i].src, ol = strlen(old), nl = strlen(rel);
    for (size_t k = 0; k < d->nw; k++) {
        watch *w = &d->w[k];
        /* the directory itself and those under it (a source root has none under it by name: only itself) */
        const int under = strncmp(w->rel, old, ol) == 0 && (w->rel[ol] == '\0' || (ol > 0 && w->rel[ol] == '/'));
        if (w->src != os || !under)
            continue;
        const size_t tl = strlen(w->rel + ol);
        char *n = malloc(nl + tl + 1);
        if (n == NULL) {
            free(old);
            return -1;
        }
        memcpy(n, rel, nl);
        memcpy(n + nl, w->rel + ol, tl + 1);
        free(w->rel);
        w->rel = n;
        w->src = si;
    }
    free(old);
    return 0;
}

/*
 * Drop the watches of directory rel of source si and of those under it (by
 * name): it left the sources, or another directory has its name now.  Their
 * IN_IGNORED then finds no watch.  Watches freed while they had run out let
 * the next walk watch again.
 */
static void unwatch_subtree(daemon_t *d, size_t si, const char *rel, int except_wd)
{
    const size_t rl = strlen(rel);
    int any = 0;
    for (size_t i = d->nw; i-- > 0;) {
        watch *w = &d->w[i];
        if (w->src != si || w->wd == except_wd || strncmp(w->rel, rel, rl) != 0 ||
            (w->rel[rl] != '\0' && w->rel[rl] != '/') || rl == 0)
            continue;
        (void)inotify_rm_watch(d->ino, w->wd);
        free(w->rel);
        *w = d->w[--d->nw];
        any = 1;
    }
    if (any && d->ino_full) {
        d->ino_full = 0;
        d->rewatch = 1;
        dmn_schedule_scan(d, d->now);
    }
}

/* Watch directory rel of source si: 0 watched now, 1 before (its name updated), -1 not (full, gone, path too long). */
static int watch_one(daemon_t *d, size_t si, const char *rel)
{
    if (d->ino < 0 || d->ino_full)
        return -1;
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof(p), "%s%s%s", d->src[si].path, rel[0] ? "/" : "", rel) >= sizeof(p))
        return -1;
    /* The source directory itself may be a symlink (walks follow it) and may be renamed away, a new one
     * made in its place (IN_MOVE_SELF: watched again, dmn_inotify_drain); below it links are not followed. */
    const uint32_t mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_ONLYDIR |
                          (rel[0] != '\0' ? (uint32_t)IN_DONT_FOLLOW : (uint32_t)IN_MOVE_SELF);
    const int wd = inotify_add_watch(d->ino, p, mask);
    if (wd < 0) {
        if (errno == ENOSPC) {
            long lim = -1;
            FILE *f = fopen("/proc/sys/fs/inotify/max_user_watches", "r");
            if (f != NULL) {
                if (fscanf(f, "%ld", &lim) != 1)
                    lim = -1;
                fclose(f);
            }
            prog_log(INGEST_LOG_WARN,
                     "inotify watches ran out (fs.inotify.max_user_watches = %ld, %zu in use): "
                     "falling back to rescans every %llu ms",
                     lim, d->nw, (unsigned long long)d->rescan_ms);
            d->ino_full = 1;
        }
        return -1;
    }
    for (size_t i = 0; i < d->nw; i++)
        if (d->w[i].wd == wd) {
            /* already watched (with its subdirectories): under another name when it was renamed since */
            if (d->w[i].src != si || strcmp(d->w[i].rel, rel) != 0)
                (void)watch_renamed(d, i, si, rel);
            return 1;
        }
    /* another directory had this name (moved away or removed, its events not read yet): its watches go, so
     * that a later rename of it does not rename this one's */
    unwatch_subtree(d, si, rel, wd);
    if (d->nw == d->capw) {
        const size_t nc = d->capw ? d->capw * 2 : 64;
        watch *nw = realloc(d->w, nc * sizeof(*nw));
        if (nw == NULL)
            return -1;
        d->w = nw;
        d->capw = nc;
    }
    struct stat ws;
    const int known = stat(p, &ws) == 0;
    d->w[d->nw].wd = wd;
    d->w[d->nw].src = si;
    d->w[d->nw].dev = known ? (uint64_t)ws.st_dev : 0;
    d->w[d->nw].ino = known ? (uint64_t)ws.st_ino : 0;
    d->w[d->nw].rel = strdup(rel);
    if (d->w[d->nw].rel == NULL)
        return -1;
    d->nw++;
    if (rel[0] == '\0') {
        struct stat rs;
        d->src[si].root_watched = 1;
        d->src[si].root_dev = stat(p, &rs) == 0 ? (uint64_t)rs.st_dev : 0;
        d->src[si].root_ino = d->src[si].root_dev != 0 ? (uint64_t)rs.st_ino : 0;
    }
    return 0;
}

/* The names of the subdirectories of rel (symlinks not followed), each NUL-terminated, in *len bytes; NULL: none. */
static char *subdirs(daemon_t *d, size_t si, const char *rel, size_t *len)
{
    *len = 0;
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof(p), "%s%s%s", d->src[si].path, rel[0] ? "/" : "", rel) >= sizeof(p))
        return NULL;
    const int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (rel[0] != '\0' ? O_NOFOLLOW : 0));
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (dir == NULL) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *names = NULL;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN)
            continue;
        struct stat st;
        if (fstatat(dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
            continue;
        const size_t nl = strlen(e->d_name) + 1;
        if (*len + nl > cap) {
            const size_t nc = cap ? cap * 2 + nl : 256 + nl;
            char *n = realloc(names, nc);
            if (n == NULL)
                break;
            names = n;
            cap = nc;
        }
        memcpy(names + *len, e->d_name, nl);
        *len += nl;
    }
    closedir(dir);
    return names;
}

/* Path components of rel ("" is the source itself: 0). */
static int rel_level(const char *rel)
{
    if (rel[0] == '\0')
        return 0;
    int n = 1;
    for (const char *c = rel; *c; c++)
        n += *c == '/';
    return n;
}

/*
 * Watch directory rel0 of source si and the directories under it, down to
 * INGEST_SENDER_MAX_DEPTH levels below the source, the walk's limit; a
 * directory past it is said once (too_deep, as the walk says it) and
 * neither watched nor entered.  Depth first without recursion: one frame
 * per level being visited (the subdirectory names of that directory), at
 * most INGEST_SENDER_MAX_DEPTH + 1 frames, so neither the stack nor the
 * heap grows with the depth of the tree.  A directory already watched is
 * not entered again, unless all (after an inotify queue overflow: the
 * events that made directories under watched ones may be lost).
 */
static void watch_tree(daemon_t *d, size_t si, const char *rel0, int all)
{
    struct wframe {
        char *names; /* subdirectory names, NUL-terminated */
        size_t len, pos;
        size_t rel_len; /* bytes of rel naming this directory */
        int level;
    } fr[INGEST_SENDER_MAX_DEPTH + 1];
    char rel[PATH_MAX], shown[PATH_MAX];
    const size_t len0 = strlen(rel0);
    if (len0 >= sizeof(rel) || d->ino < 0 || d->ino_full)
        return;
    memcpy(rel, rel0, len0 + 1);
    int level = rel_level(rel);
    if (level > INGEST_SENDER_MAX_DEPTH) {
        if ((size_t)snprintf(shown, sizeof(shown), "%s/%s", d->src[si].name, rel) < sizeof(shown))
            too_deep(d, shown);
        return;
    }
    const int w0 = watch_one(d, si, rel);
    if (w0 < 0 || (w0 > 0 && !all))
        return;
    int n = 0;
    fr[n].names = subdirs(d, si, rel, &fr[n].len);
    fr[n].pos = 0;
    fr[n].rel_len = len0;
    fr[n].level = level;
    n++;
    while (n > 0) {
        struct wframe *f = &fr[n - 1];
        if (f->pos >= f->len || d->ino_full) {
            free(f->names);
            n--;
            continue;
        }
        const char *nm = f->names + f->pos;
        const size_t nl = strlen(nm);
        f->pos += nl + 1;
        const size_t at = f->rel_len + (f->rel_len > 0);
        if (at + nl >= sizeof(rel))
            continue; /* the path is too long to watch (the walk skips what is under it too) */
        if (f->rel_len > 0)
            rel[f->rel_len] = '/';
        memcpy(rel + at, nm, nl + 1);
        if (f->level + 1 > INGEST_SENDER_MAX_DEPTH) {
            if ((size_t)snprintf(shown, sizeof(shown), "%s/%s", d->src[si].name, rel) < sizeof(shown))
                too_deep(d, shown);
            continue;
        }
        const int w1 = watch_one(d, si, rel);
        if (w1 < 0 || (w1 > 0 && !all))
            continue;
        /* f->level < INGEST_SENDER_MAX_DEPTH here, so n <= INGEST_SENDER_MAX_DEPTH */
        fr[n].names = subdirs(d, si, rel, &fr[n].len);
        fr[n].pos = 0;
        fr[n].rel_len = at + nl;
        fr[n].level = f->level + 1;
        n++;
    }
}

void dmn_watches_clear(daemon_t *d)
{
    for (size_t i = 0; i < d->nw; i++) {
        if (d->ino >= 0)
            inotify_rm_watch(d->ino, d->w[i].wd);
        free(d->w[i].rel);
    }
    d->nw = 0;
    for (size_t i = 0; i < d->nsrc; i++)
        d->src[i].root_watched = 0;
}

/* 0 when source s's directory is not there (absent, or not a directory), else 1 (unreadable: the walk says so). */
static int source_present(const dsource *s)
{
    struct stat st;
    if (stat(s->path, &st) != 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : 1;
    return S_ISDIR(st.st_mode) ? 1 : 0;
}

/*
 * A source whose directory is not there is neither walked nor watched
 * (said once, when it goes missing); every walk looks again, and one that
 * is back is watched and walked at once, without a restart.  A source
 * directory removed and made again between two walks lost its watches
 * (IN_IGNORED): it is watched again too.
 */
void dmn_sources_check(daemon_t *d)
{
    const int rewatch = d->rewatch;
    d->rewatch = 0;
    for (size_t i = 0; i < d->nsrc; i++) {
        dsource *s = &d->src[i];
        const int present = source_present(s);
        if (rewatch && present && !s->missing && s->root_watched && d->ino >= 0 && !d->ino_full)
            watch_tree(d, i, "", 1);
        if (present && !s->missing && d->ino >= 0 && !d->ino_full && !s->root_watched) {
            watch_tree(d, i, "", 0);
            continue;
        }
        if (!present && !s->missing) {
            prog_log(INGEST_LOG_WARN,
                     "source %s: %s does not exist: not walked; it is watched as soon as it appears "
                     "(checked at every walk, rescan_interval at the latest)",
                     s->name, prog_esc(s->path));
            s->missing = 1;
        } else if (present && s->missing) {
            prog_log(INGEST_LOG_INFO, "source %s: %s is here now: watching and walking it", s->name,
                     prog_esc(s->path));
            s->missing = 0;
            if (!d->ino_full)
                watch_tree(d, i, "", 0);
            dmn_schedule_scan(d, d->now);
        }
    }
}

/* Drop every watch of source si (renamed away): what it watches is no longer that source. */
static void unwatch_source(daemon_t *d, size_t si)
{
    for (size_t i = d->nw; i-- > 0;) {
        if (d->w[i].src != si)
            continue;
        (void)inotify_rm_watch(d->ino, d->w[i].wd); /* (its IN_IGNORED then finds no watch) */
        free(d->w[i].rel);
        d->w[i] = d->w[--d->nw];
    }
    d->src[si].root_watched = 0;
}

/*
 * Once a second, a stat per source: a source directory that came back, or
 * was replaced (renamed away and made again, a symlink pointed elsewhere, a
 * directory above renamed), is watched and walked at once, not at the next
 * rescan (IN_MOVE_SELF tells of the first only, and a walk that came before
 * the new directory left the source missing).
 */
void dmn_sources_poll(daemon_t *d)
{
    if (d->ino < 0 || d->ino_full || d->now < d->src_poll_at)
        return;
    d->src_poll_at = d->now + 1.0;
    for (size_t i = 0; i < d->nsrc; i++) {
        dsource *s = &d->src[i];
        struct stat st;
        if (stat(s->path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue; /* (missing: the walks say so) */
        const int replaced = s->root_watched && s->root_dev != 0 &&
                             ((uint64_t)st.st_dev != s->root_dev || (uint64_t)st.st_ino != s->root_ino);
        if (!replaced && !s->missing)
            continue; /* watched (or unwatchable: the walks try again) */
        if (replaced)
            unwatch_source(d, i);
        if (s->missing) {
            prog_log(INGEST_LOG_INFO, "source %s: %s is here now: watching and walking it", s->name,
                     prog_esc(s->path));
            s->missing = 0;
        }
        watch_tree(d, i, "", 0);
        dmn_schedule_scan(d, d->now);
    }
}

void dmn_watches_setup(daemon_t *d)
{
    dmn_watches_clear(d);
    d->ino_full = 0;
    for (size_t i = 0; i < d->nsrc; i++)
        d->src[i].missing = 0;
    dmn_sources_check(d); /* says each missing source once and marks it; watches the others */
}

static watch *watch_find(daemon_t *d, int wd)
{
    for (size_t i = 0; i < d->nw; i++)
        if (d->w[i].wd == wd)
            return &d->w[i];
    return NULL;
}

/* A directory renamed away from a watched one (IN_MOVED_FROM): looked at once the queue is read. */
typedef struct moved_out {
    int wd; /* its watch */
} moved_out;
#define MOVED_OUT_MAX 16

void dmn_inotify_drain(daemon_t *d)
{
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    /*
     * A directory renamed within the sources comes as IN_MOVED_FROM then IN_MOVED_TO (queued together: both
     * are read before the queue is empty); its watches are kept and renamed (watch_one).  Once the queue is
     * read, each directory an IN_MOVED_FROM named that is not at its watch's name any more (device and inode)
     * left the sources, perhaps after a rename within them: its watches go, or they would leak (watches
     * running out) and map events of a tree outside to paths inside.
     */
    moved_out out[MOVED_OUT_MAX];
    size_t nout = 0;
    for (;;) {
        const ssize_t n = read(d->ino, buf, sizeof(buf));
        if (n <= 0) {
            for (size_t k = 0; k < nout; k++) {
                /* (gone already when a directory made since under its name took its place: watch_one) */
                const watch *m = watch_find(d, out[k].wd);
                char mrel[PATH_MAX], full[PATH_MAX];
                struct stat ms;
                if (m == NULL || m->rel[0] == '\0' || strlen(m->rel) >= sizeof(mrel) ||
                    (size_t)snprintf(full, sizeof(full), "%s/%s", d->src[m->src].path, m->rel) >= sizeof(full))
                    continue;
                /* back in the sources under the name its watch has now (moved out and back, or a directory
                 * moved in with it inside): kept */
                if (lstat(full, &ms) == 0 && S_ISDIR(ms.st_mode) && (uint64_t)ms.st_dev == m->dev &&
                    (uint64_t)ms.st_ino == m->ino)
                    continue;
                memcpy(mrel, m->rel, strlen(m->rel) + 1);
                unwatch_subtree(d, m->src, mrel, -1);
            }
            return;
        }
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof(*ev) + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                d->rewatch = 1; /* directories made meanwhile were not seen: the next walk watches them */
                dmn_schedule_scan(d, d->now);
                continue;
            }
            watch *w = watch_find(d, ev->wd);
            if (w == NULL)
                continue;
            if ((ev->mask & IN_MOVE_SELF) && w->rel[0] == '\0' && w->src < d->nsrc) {
                /* the source directory was renamed away (a new one perhaps made in its place): its watches
                 * go, and a walk now watches whatever is at its path */
                unwatch_source(d, w->src);
                dmn_schedule_scan(d, d->now);
                continue;
            }
            if (ev->mask & IN_IGNORED) {
                if (w->rel[0] == '\0' && w->src < d->nsrc)
                    d->src[w->src].root_watched = 0; /* the source directory went: watched again once back */
                free(w->rel);
                *w = d->w[--d->nw];
                continue;
            }
            if (ev->len == 0)
                continue;
            char rel[PATH_MAX];
            if ((size_t)snprintf(rel, sizeof(rel), "%s%s%s", w->rel, w->rel[0] ? "/" : "", ev->name) >= sizeof(rel))
                continue;
            if (ev->mask & IN_MOVED_FROM) {
                if (ev->mask & IN_ISDIR) {
                    const watch *m = NULL;
                    for (size_t k = 0; k < d->nw && m == NULL; k++)
                        if (d->w[k].src == w->src && strcmp(d->w[k].rel, rel) == 0)
                            m = &d->w[k];
                    if (m != NULL && nout < MOVED_OUT_MAX) {
                        out[nout].wd = m->wd;
                        nout++;
                    } else if (m != NULL) {
                        unwatch_subtree(d, w->src, rel, -1); /* (watched again by its IN_MOVED_TO, if any) */
                    }
                    dmn_schedule_scan(d, d->now + DEBOUNCE_MS / 1000.0);
                }
                continue;
            }
            if (ev->mask & IN_ISDIR) {
                if (ev->mask & (IN_CREATE | IN_MOVED_TO))
                    watch_tree(d, w->src, rel, 0);
                dmn_schedule_scan(d, d->now + DEBOUNCE_MS / 1000.0);
                continue;
            }
            if (ev->mask & IN_MOVED_TO) {
                /* renamed into the tree: complete by convention, no settle time */
                char full[PATH_MAX], mpath[PATH_MAX];
                struct stat st;
                if ((size_t)snprintf(full, sizeof(full), "%s/%s", d->src[w->src].path, rel) < sizeof(full) &&
                    (size_t)snprintf(mpath, sizeof(mpath), "%s/%s", d->src[w->src].name, rel) < sizeof(mpath) &&
                    lstat(full, &st) == 0 && S_ISREG(st.st_mode))
                    (void)ingest_journal_mark_renamed(d->j, mpath, (uint64_t)st.st_size,
                                                      ingest_time_ns(&st.st_mtim),
                                                      dmn_wall_now_ns());
            }
            char mp[PATH_MAX];
            const int mp_ok = (size_t)snprintf(mp, sizeof(mp), "%s/%s", d->src[w->src].name, rel) < sizeof(mp);
            if (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) {
                /* that file alone is looked at (a walk of everything per event cost a CPU's third: issue 18) */
                if (mp_ok)
                    dmn_mark_dirty(d, mp, d->now + DEBOUNCE_MS / 1000.0);
                else
                    dmn_schedule_scan(d, d->now + DEBOUNCE_MS / 1000.0);
            } else if ((ev->mask & IN_CREATE) && d->ssrc[w->src].symlinks == INGEST_SENDER_SYMLINKS_SHIP) {
                /* a symlink is made complete (no close_write follows): look at it now */
                char full[PATH_MAX];
                struct stat st;
                if ((size_t)snprintf(full, sizeof(full), "%s/%s", d->src[w->src].path, rel) < sizeof(full) &&
                    lstat(full, &st) == 0 && S_ISLNK(st.st_mode) && mp_ok)
                    dmn_mark_dirty(d, mp, d->now + DEBOUNCE_MS / 1000.0);
            }
        }
    }
}

/* ---- discovery -------------------------------------------------------------- */

typedef struct fhash_ud {
    ingest_filehash fh;
} fhash_ud;

static int fhash_chunk(void *ud, const ingest_chunk_info *c)
{
    ingest_filehash_update(&((fhash_ud *)ud)->fh, c->id, INGEST_ID_BYTES);
    return 0;
}

/*
 * The whole-file hash of file rel of source s, as its manifest would carry
 * it (the dedup key's HMAC over its chunk ids): 0, or -1 when it cannot be
 * read or is not the version st any more.
 */
static int file_hash(daemon_t *d, const dsource *s, const char *rel, const ingest_sender_stat *st,
                     uint8_t out[INGEST_ID_BYTES])
{
    char full[PATH_MAX];
    if ((size_t)snprintf(full, sizeof(full), "%s/%s", s->path, rel) >= sizeof(full))
        return -1;
    const int fd = open(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -1;
    ingest_chunk_params params = d->base.chunking;
    if (params.min == 0 && params.avg == 0 && params.max == 0)
        ingest_chunk_params_default(&params);
    const ingest_chunkhash_opts o = { &params, d->base.dedup_key, 0, 1 };
    fhash_ud u;
    ingest_filehash_init(&u.fh, d->base.dedup_key);
    ingest_chunkhash *ch = NULL;
    struct stat a, b;
    int rc = -1;
    if (fstat(fd, &a) == 0 && S_ISREG(a.st_mode) && (uint64_t)a.st_size == st->size &&
        ingest_time_ns(&a.st_mtim) == st->mtime_ns &&
        ingest_chunkhash_create(d->a->ctx, &o, fhash_chunk, &u, &ch) == 0 && ingest_chunkhash_fd(ch, fd) == 0 &&
        fstat(fd, &b) == 0 && b.st_size == a.st_size && b.st_mtim.tv_sec == a.st_mtim.tv_sec &&
        b.st_mtim.tv_nsec == a.st_mtim.tv_nsec && b.st_ctim.tv_sec == a.st_ctim.tv_sec &&
        b.st_ctim.tv_nsec == a.st_ctim.tv_nsec) {
        ingest_filehash_final(&u.fh, out);
        rc = 0;
    }
    ingest_chunkhash_destroy(ch);
    close(fd);
    return rc;
}

/*
 * A file whose size and mtime are those of the version shipped and whose
 * ctime alone changed (chmod, chown, a new hard link, a copy with the same
 * times renamed over it): when its whole-file hash is that of the version
 * shipped, the new ctime is recorded and nothing is shipped (1); else 0
 * (a new version, or the version shipped has no hash recorded).  The mode
 * in the manifests stays that of the version shipped.
 */
static int same_bytes(daemon_t *d, const dsource *s, const char *rel, const char *path, const ingest_sender_stat *st,
                      ingest_file_state *fs)
{
    ingest_filetable *ft = d->a->state.ft;
    uint8_t was[INGEST_ID_BYTES], now[INGEST_ID_BYTES];
    if (ingest_filetable_get_hash(ft, path, was) != 0 || file_hash(d, s, rel, st, now) != 0 ||
        sodium_memcmp(was, now, INGEST_ID_BYTES) != 0)
        return 0;
    fs->ctime_ns = st->ctime_ns;
    if (ingest_filetable_put(ft, path, fs) < 0 || ingest_filetable_set_hash(ft, path, now) < 0)
        return 0;
    d->same_bytes++;
    prog_log(INGEST_LOG_DEBUG, "%s: only its ctime changed, same bytes as the version shipped: recorded, not shipped",
             prog_esc(path));
    return 1;
}

/* The walk's want_file: choose files for the open batch; never let the sender chunk. */
static int select_file(void *ud, const char *path, const ingest_sender_stat *st)
{
    daemon_t *d = ((agent *)ud)->userdata;
    const char *rel = NULL;
    dsource *s = dmn_source_of(d, path, &rel);
    if (s == NULL || stopping || agent_is_claim_name(path))
        return 0; /* (a claimed file: an after-ship action is deleting or moving it, daemon_spool.c) */
    agent *a = d->a;
    if (a->report.metrics != NULL)
        ingest_metric_add(a->report.m.files_seen, s->name, 1);
    if (d->store_full)
        return 0; /* backpressure: nothing can be recorded nor journaled (dmn_store_check) */
    ingest_file_state fs;
    const int shipped = ingest_filetable_get(d->a->state.ft, path, &fs) == 0 && fs.size == st->size &&
                        fs.mtime_ns == st->mtime_ns;
    if (shipped && fs.ctime_ns == st->ctime_ns) {
        if (a->report.metrics != NULL)
            ingest_metric_add(a->report.m.files_unchanged, NULL, 1);
        return 0; /* unchanged since its ack */
    }
    int rc = ingest_journal_inflight(d->j, path, NULL);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    if (shipped && same_bytes(d, s, rel, path, st, &fs)) {
        if (a->report.metrics != NULL)
            ingest_metric_add(a->report.m.files_unchanged, NULL, 1);
        return 0;
    }
    if (s->filter != NULL) {
        if (ingest_journal_skipped(d->j, path, st->size, st->mtime_ns, st->ctime_ns, s->filter_rules) > 0)
            return 0; /* this version was counted already */
        const int r = agent_filter_check(s->filter, s->path, rel, st, d->wall_ns);
        if (r != INGEST_FILTER_TAKE) {
            if (r > 0 && r < INGEST_FILTER_NREASONS) {
                d->skipped[r]++;
                if (a->report.metrics != NULL)
                    ingest_metric_add(a->report.m.files_skipped, ingest_filter_reason_name(r), 1);
            }
            prog_log(INGEST_LOG_DEBUG, "skipped %s: filter %s", prog_esc(path), ingest_filter_reason_name(r));
            if (ingest_journal_mark_skipped(d->j, path, st->size, st->mtime_ns, st->ctime_ns, s->filter_rules, r,
                                            d->wall_ns) == INGEST_ENOSPC)
                (void)dmn_store_check(d, INGEST_ENOSPC, "state store (filter records)");
            return 0;
        }
    }
    int64_t wait_ns = 0;
    rc = ingest_journal_stable(d->j, path, st->size, st->mtime_ns, d->wall_ns, s->settle_ns, &wait_ns);
    if (rc == INGEST_ENOSPC) { /* its settle record could not be committed: backpressure, said once */
        (void)dmn_store_check(d, rc, "state store (settle records)");
        return 0;
    }
    if (rc < 0)
        return rc;
    if (rc == 0) {
        d->not_stable++;
        dmn_mark_dirty(d, path, d->now + (double)wait_ns / 1e9 + 0.05); /* looked at again alone */
        return 0;
    }
    if (d->q_files >= d->queue_files || d->q_bytes + st->size > d->queue_bytes) {
        if (!d->backpressure)
            prog_log(INGEST_LOG_WARN,
                     "backpressure: the queue is full (%llu files, %llu bytes queued; limits %llu files, %llu bytes): "
                     "not taking new files until batches are acknowledged",
                     (unsigned long long)d->q_files, (unsigned long long)d->q_bytes,
                     (unsigned long long)d->queue_files, (unsigned long long)d->queue_bytes);
        d->backpressure = 1;
        return 0;
    }
    if (s->spool) {
        if (st->size > d->spool_quota) {
            prog_log(d->spool_big_logged ? INGEST_LOG_DEBUG : INGEST_LOG_WARN,
                     "%s (%llu bytes) is larger than spool.quota (%llu bytes): not taken", prog_esc(path),
                     (unsigned long long)st->size, (unsigned long long)d->spool_quota);
            d->spool_big_logged = 1;
            return 0;
        }
        if (d->spool_bytes + st->size > d->spool_room) {
            if (!d->spool_full) {
                prog_log(INGEST_LOG_WARN,
                         "backpressure: the spool is full (%llu files, %llu bytes; room for %llu bytes: spool.quota "
                         "%llu, %llu bytes free on the state filesystem, %llu kept in reserve): not taking new files "
                         "from spool sources until batches are acknowledged",
                         (unsigned long long)d->spool_files, (unsigned long long)d->spool_bytes,
                         (unsigned long long)d->spool_room, (unsigned long long)d->spool_quota,
                         (unsigned long long)d->fs_free, (unsigned long long)d->fs_reserve);
                d->spool_want = st->size;
            }
            d->spool_full = 1;
            if (st->size < d->spool_want_walk)
                d->spool_want_walk = st->size;
            return 0;
        }
    }
    (void)agent_dict_auto_sample(a, s->path, rel, st->size);
    return dmn_open_add(d, s, rel, path, st) < 0 ? INGEST_ENOMEM : 0;
}

/* Prune callback: 1 when the file of manifest path no longer exists (a source missing or no longer configured: 0). */
static int file_gone(void *ud, const char *path)
{
    daemon_t *d = ud;
    const char *rel = NULL;
    const dsource *s = dmn_source_of(d, path, &rel);
    if (s == NULL || s->missing || rel[0] == '\0')
        return 0;
    char full[PATH_MAX];
    if ((size_t)snprintf(full, sizeof(full), "%s/%s", s->path, rel) >= sizeof(full))
        return 0;
    struct stat st;
    if (lstat(full, &st) == 0)
        return 0;
    return errno == ENOENT || errno == ENOTDIR;
}

/*
 * The records of files that no longer exist go, once per rescan_interval:
 * stability and filter records (a file renamed or deleted before it
 * settled, a temporary file passed over by a filter), and shipped states
 * (a file deleted or moved after its ack, by after_ship or anyone).  None
 * of them matters to a file that is gone; one that comes back is a new
 * file.  A file in a journaled batch keeps its in-flight mark (the batch
 * drops it when it is rebuilt); a missing source keeps its records.
 */
static void prune(daemon_t *d)
{
    uint64_t seen = 0, files = 0;
    const double t0 = prog_now();
    if (ingest_journal_prune_seen(d->j, file_gone, d, &seen) < 0 ||
        ingest_filetable_prune(d->a->state.ft, file_gone, d, &files) < 0) {
        prog_log(INGEST_LOG_WARN, "state store: dropping the records of files gone: %s", ingest_ctx_errmsg(d->a->ctx));
        return;
    }
    d->pruned += seen + files;
    prog_log(INGEST_LOG_DEBUG, "records of files gone dropped: %llu settle/filter, %llu shipped, in %.3f s",
             (unsigned long long)seen, (unsigned long long)files, prog_now() - t0);
}

void dmn_mark_dirty(daemon_t *d, const char *path, double at)
{
    if (d->dirty_at == 0 || at < d->dirty_at)
        d->dirty_at = at;
    for (size_t i = d->ndirty; i > 0 && i + 64 > d->ndirty; i--) /* the same file written again and again */
        if (strcmp(d->dirty[i - 1], path) == 0)
            return;
    if (d->ndirty >= DIRTY_MAX) {
        dmn_schedule_scan(d, at); /* too many at once: a walk of everything is cheaper */
        return;
    }
    if (d->ndirty == d->capdirty) {
        const size_t nc = d->capdirty ? d->capdirty * 2 : 64;
        char **nd = realloc(d->dirty, nc * sizeof(*nd));
        if (nd == NULL) {
            dmn_schedule_scan(d, at);
            return;
        }
        d->dirty = nd;
        d->capdirty = nc;
    }
    char *p = strdup(path);
    if (p == NULL) {
        dmn_schedule_scan(d, at);
        return;
    }
    d->dirty[d->ndirty++] = p;
}

static void dirty_clear(daemon_t *d)
{
    for (size_t i = 0; i < d->ndirty; i++)
        free(d->dirty[i]);
    d->ndirty = 0;
    d->dirty_at = 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/*
 * The paths events named (and files still settling), each looked at as a
 * walk would (select_file), without walking the sources.  A path that is
 * gone, or no longer a regular file (or a symlink its source ships), is
 * passed over: the walk of everything every rescan_interval still finds
 * whatever an event did not name.
 */
int dmn_walk_paths(daemon_t *d)
{
    char **v = d->dirty;
    const size_t n = d->ndirty;
    d->dirty = NULL;
    d->ndirty = d->capdirty = 0;
    d->dirty_at = 0;
    d->path_walks++;
    d->wall_ns = dmn_wall_now_ns();
    dmn_spool_size(d);
    const double t0 = prog_now();
    qsort(v, n, sizeof(*v), cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n && rc >= 0 && !stopping; i++) {
        if (i > 0 && strcmp(v[i], v[i - 1]) == 0)
            continue;
        const char *rel = NULL;
        dsource *s = dmn_source_of(d, v[i], &rel);
        if (s == NULL || s->missing || rel == NULL || rel[0] == '\0')
            continue;
        char full[PATH_MAX];
        struct stat st;
        if ((size_t)snprintf(full, sizeof(full), "%s/%s", s->path, rel) >= sizeof(full) || lstat(full, &st) != 0)
            continue;
        const size_t si = (size_t)(s - d->src);
        if (!S_ISREG(st.st_mode) && !(S_ISLNK(st.st_mode) && d->ssrc[si].symlinks == INGEST_SENDER_SYMLINKS_SHIP))
            continue;
        const ingest_sender_stat sst = { (uint64_t)st.st_size,
                                         ingest_time_ns(&st.st_mtim),
                                         ingest_time_ns(&st.st_ctim),
                                         (uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint32_t)st.st_mode };
        rc = select_file(d->a, v[i], &sst);
    }
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
    d->a->report.t.walk_s += prog_now() - t0;
    dmn_vanished_say(d, "looking at changed files");
    if (rc < 0)
        prog_log(INGEST_LOG_ERROR, "looking at changed files: %s", ingest_ctx_errmsg(d->a->ctx));
    if (dmn_open_journal(d) < 0)
        rc = -1;
    (void)dmn_store_check(d, ingest_journal_flush(d->j), "state store");
    dmn_queue_recount(d);
    d->settling = d->ndirty; /* those still settling were marked to be looked at again */
    dmn_count_records(d);
    return rc < 0 ? rc : 0;
}

void dmn_count_records(daemon_t *d)
{
    d->seen_records = ingest_journal_seen_count(d->j);
    d->file_records = ingest_filetable_count(d->a->state.ft);
}

int dmn_walk(daemon_t *d)
{
    ingest_sender_opts o = d->base;
    dmn_sources_check(d);
    /* the sources that are there (a missing one would be said twice per walk) */
    ingest_sender_source *present = calloc(d->nsrc ? d->nsrc : 1, sizeof(*present));
    if (present == NULL)
        return INGEST_ENOMEM;
    size_t np = 0;
    for (size_t i = 0; i < d->nsrc; i++)
        if (!d->src[i].missing)
            present[np++] = d->ssrc[i];
    o.sources = present;
    o.nsources = np;
    o.want_file = select_file;
    o.on_skip = dmn_on_skip;
    o.batch_seq = 1;
    o.threads = 1;
    ingest_sender *s = NULL;
    const double t0 = prog_now();
    d->scan_at = 0;
    d->last_full = d->now;
    d->not_stable = 0;
    d->spool_want_walk = UINT64_MAX;
    dmn_spool_size(d); /* the spool's room, from the free space now */
    dirty_clear(d); /* everything is looked at (the files still settling are marked again) */
    d->wall_ns = dmn_wall_now_ns();
    int rc = np > 0 ? ingest_sender_create(d->a->ctx, &o, &s) : 0;
    if (rc == 0 && s != NULL)
        rc = ingest_sender_scan(s);
    ingest_sender_batch *b = NULL;
    if (rc == 0 && s != NULL)
        rc = ingest_sender_next_batch(s, &b); /* select_file takes nothing: the walk runs to its end */
    ingest_sender_batch_destroy(b);
    d->files_seen = 0;
    if (s != NULL) {
        ingest_sender_stats ss;
        ingest_sender_get_stats(s, &ss);
        d->files_seen = ss.files_seen;
        if (rc == 0)
            agent_walk_special(d->a, &ss); /* a whole walk's counts */
    }
    d->walks++;
    d->settling = d->not_stable;
    d->walk_seconds = prog_now() - t0;
    d->a->report.t.walk_s += d->walk_seconds;
    /* The first walk after a start, and any slow one, is worth a line. */
    prog_log(d->walks == 1 || d->walk_seconds >= 10.0 ? INGEST_LOG_INFO : INGEST_LOG_DEBUG,
             "walk %llu: %llu files seen in %.3f s", (unsigned long long)d->walks, (unsigned long long)d->files_seen,
             d->walk_seconds);
    ingest_sender_destroy(s);
    free(present);
    {
        char where[40];
        snprintf(where, sizeof(where), "walk %llu", (unsigned long long)d->walks);
        dmn_vanished_say(d, where);
    }
    if (rc < 0)
        prog_log(INGEST_LOG_ERROR, "scan: %s", ingest_ctx_errmsg(d->a->ctx));
    if (dmn_open_journal(d) < 0)
        rc = -1;
    (void)dmn_store_check(d, ingest_journal_flush(d->j), "state store");
    dmn_queue_recount(d); /* the batches closed and journaled by this walk */
    /* the smallest spool file this walk found no room for (none: nothing waits) */
    d->spool_want = d->spool_want_walk == UINT64_MAX ? 0 : d->spool_want_walk;
    dmn_spool_resume_check(d);
    if (d->now >= d->prune_next && !stopping) {
        prune(d);
        d->prune_next = prog_now() + d->rescan_ms / 1000.0;
    }
    dmn_count_records(d);
    return rc < 0 ? rc : 0;
}

