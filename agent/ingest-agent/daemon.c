/*
 * ingest-agent without --once: the edge daemon (docs/operations.md).
 *
 * One thread runs a loop:
 *   - discovery: a walk of the sources whose want_file hook never lets the
 *     sender chunk anything: it only chooses files (filters, unchanged since
 *     their ack, not in flight, stable for `settle`) and appends them to the
 *     open batch, journaled PENDING (include/ingest/journal.h).  Walks run
 *     when inotify reports a change (debounced), when a file still settling
 *     is due, and every rescan_interval as the safety net.
 *   - shipping: the oldest closed batch of the journal is rebuilt from its
 *     file list (ingest_sender_scan_list: same files, same order, same
 *     batch id; a file that changed since it was taken leaves the batch and
 *     settles again), marked SENT, shipped, and marked ACKED together with
 *     the file table; then the after-ship action runs and the record goes
 *     (it stays, retried, while a file to delete or move is open elsewhere).
 *   - the core unreachable: batches stay queued in the journal (bounded:
 *     when the queue is full discovery stops taking files = backpressure)
 *     and connections are retried with exponential backoff and jitter.
 * Nothing per file is held in RAM beyond the open batch.
 */
#include "agent.h"
#include "../common/fsmove.h"
#include "../common/status.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEBOUNCE_MS 200
#define RESCAN_DEFAULT_MS 60000
#define QUEUE_FILES_DEFAULT 100000
#define QUEUE_BYTES_DEFAULT (4ull << 30)
#define BACKOFF_MIN_MS 500
#define BACKOFF_MAX_MS 60000
#define TOO_DEEP_MAX 1024 /* directories past the depth limit remembered (each said once) */
#define DEFER_RETRY_S 1.0 /* retry of an after-ship action deferred while the file is open */

enum { AFTER_KEEP = 0, AFTER_DELETE = 1, AFTER_MOVE = 2 };

/* Per-source settings of the daemon. */
typedef struct dsource {
    const char *name, *path; /* borrowed from the config */
    size_t name_len;
    int64_t settle_ns;
    int after;               /* AFTER_* */
    const char *move_dir;    /* AFTER_MOVE */
    ingest_filter *filter;   /* NULL: take everything */
    int spool;               /* spool: copy */
} dsource;

typedef struct watch {
    int wd;
    size_t src;
    char *rel; /* directory relative to the source, "" for its root */
} watch;

#define RATE_SAMPLES 64
#define RATE_WINDOW_S 5.0

/* One source as the status shows it. */
typedef struct snap_source {
    char *name, *path;
    int spool;
} snap_source;

/*
 * The figures the status thread renders: a copy the main thread publishes
 * (publish()) under the daemon's status lock; the status thread reads only
 * this, under the same lock.
 */
typedef struct snap {
    char device[128], core[256], window[16];
    int connected, watching, backpressure, spool_full, window_closed;
    snap_source *src;
    size_t nsrc;
    uint64_t q_batches, q_files, q_bytes, queue_files, queue_bytes;
    uint64_t spool_bytes, spool_files, spool_quota;
    char inflight[INGEST_JOURNAL_ID_MAX + 1];
    int64_t last_ack_ns; /* wall clock; 0: none yet */
    uint64_t files_seen, files_taken, bytes_taken, files_shipped, bytes_shipped, bytes_read;
    uint64_t walks;
    double walk_seconds; /* of the last walk */
    uint64_t chunks_new, chunks_dedup, chunk_bytes_sent, wire_out, wire_in;
    uint64_t batches_acked, batches_replayed, deleted, moved;
    uint64_t skipped[INGEST_FILTER_NREASONS];
    uint64_t throttle_rate, throttle_wait_ms;
    double started;
    /* wire byte totals sampled at least 0.2 s apart, for the rate */
    double rate_t[RATE_SAMPLES];
    uint64_t rate_w[RATE_SAMPLES];
    size_t rate_n, rate_head;
} snap;

typedef struct daemon {
    agent *a;
    const char *config_path;
    ingest_sender_opts base;
    ingest_sender_source *ssrc;
    dsource *src;
    size_t nsrc;
    ingest_journal *j;

    int ino;             /* inotify fd, -1 when off */
    int ino_full;        /* watches ran out: rescans only */
    watch *w;
    size_t nw, capw;
    char **deep;         /* directories said to be past the depth limit ("{source}/{path}") */
    size_t ndeep, capdeep;

    uint64_t rescan_ms, max_wait_ms, queue_files, queue_bytes;
    double scan_at;      /* monotonic seconds of the next walk (0: none due) */
    double last_full;    /* time of the last walk */

    /* the open batch: journaled PENDING, still taking files */
    uint64_t open_seq;   /* 0: none */
    double open_at;
    ingest_journal_file *of;
    size_t nof, capof;
    uint64_t of_bytes;
    int of_dirty;        /* files added since it was journaled */

    uint64_t q_files, q_bytes; /* journaled, not acked (open batch included) */
    int backpressure;

    double next_connect;
    unsigned backoff_ms;
    int core_down_logged;

    /* spool: state_dir/spool/{batch seq}/{source name}/{path in the source} */
    char spool_dir[PATH_MAX];
    uint64_t spool_bytes, spool_files, spool_quota;
    int spool_full;
    int spool_big_logged;

    /* status */
    status_server *status;
    pthread_mutex_t slock;
    snap sn;             /* guarded by slock */
    uint64_t q_batches, files_seen, files_taken, bytes_taken, bytes_read;
    uint64_t walks;
    double walk_seconds; /* of the last walk */
    char inflight[INGEST_JOURNAL_ID_MAX + 1];
    int64_t last_ack_ns;

    /* after-ship actions deferred while a file is open elsewhere (ACKED batches kept in the journal) */
    double defer_next;   /* retry them from then on */
    int defer_pending;   /* one was deferred in this loop: retry in a second */
    uint64_t *defer_seq; /* batches whose deferral was logged */
    size_t ndefer, capdefer;
    int lease_warned;    /* said once: leases unavailable, actions run unchecked */

    /* counters (logged at shutdown) */
    uint64_t skipped[INGEST_FILTER_NREASONS];
    uint64_t shipped_files, shipped_bytes, batches_acked, batches_replayed, deleted, moved, not_stable;
    double now;          /* monotonic, refreshed per loop and per walk */
    int64_t wall_ns;
} daemon_t;

static int64_t wall_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void schedule_scan(daemon_t *d, double at)
{
    if (d->scan_at == 0 || at < d->scan_at)
        d->scan_at = at;
}

/* ---- sources, filters --------------------------------------------------- */

static void sources_free(daemon_t *d)
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
static int sources_make(daemon_t *d, const ingest_agent_config *cfg, dsource **out, ingest_sender_source **sout)
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
        s[i].name_len = strlen(c->name);
        s[i].settle_ns = (int64_t)c->settle_ms * 1000000;
        s[i].after = c->after_ship_mode == INGEST_AFTER_SHIP_DELETE ? AFTER_DELETE
                     : c->after_ship_mode == INGEST_AFTER_SHIP_MOVE ? AFTER_MOVE
                                                                     : AFTER_KEEP;
        s[i].move_dir = c->after_ship_dir;
        s[i].spool = c->spool == INGEST_SPOOL_COPY;
        if (c->include_count || c->exclude_count || c->min_size || c->max_size || c->max_age_ms ||
            c->sample_every > 1 || c->drop_if_prefix[0]) {
            ingest_filter_spec fs;
            memset(&fs, 0, sizeof(fs));
            fs.include = (const char *const *)c->include;
            fs.include_count = c->include_count;
            fs.exclude = (const char *const *)c->exclude;
            fs.exclude_count = c->exclude_count;
            fs.min_size = c->min_size;
            fs.max_size = c->max_size;
            fs.max_age_ms = c->max_age_ms;
            fs.sample_every = c->sample_every;
            fs.drop_if_prefix = c->drop_if_prefix;
            if (ingest_filter_create(d->a->ctx, &fs, &s[i].filter) < 0) {
                prog_log(INGEST_LOG_ERROR, "source %s: filter: %s", c->name, ingest_ctx_errmsg(d->a->ctx));
                for (size_t k = 0; k < i; k++)
                    ingest_filter_destroy(s[k].filter);
                free(s);
                free(ss);
                return -1;
            }
        }
    }
    *out = s;
    *sout = ss;
    return 0;
}

static dsource *source_of(daemon_t *d, const char *path, const char **rel)
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

/* The daemon's walks report skips here: a directory past the depth limit once, the rest as --once does. */
static void daemon_on_skip(void *ud, const char *path, int reason)
{
    if (reason == INGEST_SKIP_DEPTH) {
        too_deep(((agent *)ud)->userdata, path);
        return;
    }
    on_skip(ud, path, reason);
}

/* Watch directory rel of source si: 0 watched (now or before), -1 not (full, gone, path too long). */
static int watch_one(daemon_t *d, size_t si, const char *rel)
{
    if (d->ino < 0 || d->ino_full)
        return -1;
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof(p), "%s%s%s", d->src[si].path, rel[0] ? "/" : "", rel) >= sizeof(p))
        return -1;
    const int wd = inotify_add_watch(d->ino, p, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_DONT_FOLLOW | IN_ONLYDIR);
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
        if (d->w[i].wd == wd)
            return 1; /* already watched (with its subdirectories) */
    if (d->nw == d->capw) {
        const size_t nc = d->capw ? d->capw * 2 : 64;
        watch *nw = realloc(d->w, nc * sizeof(*nw));
        if (nw == NULL)
            return -1;
        d->w = nw;
        d->capw = nc;
    }
    d->w[d->nw].wd = wd;
    d->w[d->nw].src = si;
    d->w[d->nw].rel = strdup(rel);
    if (d->w[d->nw].rel == NULL)
        return -1;
    d->nw++;
    return 0;
}

/* The names of the subdirectories of rel (symlinks not followed), each NUL-terminated, in *len bytes; NULL: none. */
static char *subdirs(daemon_t *d, size_t si, const char *rel, size_t *len)
{
    *len = 0;
    char p[PATH_MAX];
    if ((size_t)snprintf(p, sizeof(p), "%s%s%s", d->src[si].path, rel[0] ? "/" : "", rel) >= sizeof(p))
        return NULL;
    const int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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
 * not entered again.
 */
static void watch_tree(daemon_t *d, size_t si, const char *rel0)
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
    if (watch_one(d, si, rel) != 0)
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
        if (watch_one(d, si, rel) != 0)
            continue;
        /* f->level < INGEST_SENDER_MAX_DEPTH here, so n <= INGEST_SENDER_MAX_DEPTH */
        fr[n].names = subdirs(d, si, rel, &fr[n].len);
        fr[n].pos = 0;
        fr[n].rel_len = at + nl;
        fr[n].level = f->level + 1;
        n++;
    }
}

static void watches_clear(daemon_t *d)
{
    for (size_t i = 0; i < d->nw; i++) {
        if (d->ino >= 0)
            inotify_rm_watch(d->ino, d->w[i].wd);
        free(d->w[i].rel);
    }
    d->nw = 0;
}

static void watches_setup(daemon_t *d)
{
    watches_clear(d);
    d->ino_full = 0;
    for (size_t i = 0; i < d->nsrc && !d->ino_full; i++)
        watch_tree(d, i, "");
}

static watch *watch_find(daemon_t *d, int wd)
{
    for (size_t i = 0; i < d->nw; i++)
        if (d->w[i].wd == wd)
            return &d->w[i];
    return NULL;
}

static void inotify_drain(daemon_t *d)
{
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        const ssize_t n = read(d->ino, buf, sizeof(buf));
        if (n <= 0)
            return;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof(*ev) + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                schedule_scan(d, d->now);
                continue;
            }
            watch *w = watch_find(d, ev->wd);
            if (w == NULL)
                continue;
            if (ev->mask & IN_IGNORED) {
                free(w->rel);
                *w = d->w[--d->nw];
                continue;
            }
            if (ev->len == 0)
                continue;
            char rel[PATH_MAX];
            if ((size_t)snprintf(rel, sizeof(rel), "%s%s%s", w->rel, w->rel[0] ? "/" : "", ev->name) >= sizeof(rel))
                continue;
            if (ev->mask & IN_ISDIR) {
                if (ev->mask & (IN_CREATE | IN_MOVED_TO))
                    watch_tree(d, w->src, rel);
                schedule_scan(d, d->now + DEBOUNCE_MS / 1000.0);
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
                                                      (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                                                      wall_now_ns());
            }
            if (ev->mask & (IN_CLOSE_WRITE | IN_MOVED_TO))
                schedule_scan(d, d->now + DEBOUNCE_MS / 1000.0);
        }
    }
}

/* ---- spool ------------------------------------------------------------------ */

static int mkdirs(char *p);

/* Bytes and files under dirfd/name (a directory or a file); removed when rm. */
static void tree_walk(int at, const char *name, int rm, uint64_t *bytes, uint64_t *files)
{
    struct stat st;
    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        const int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
        if (dir == NULL) {
            if (fd >= 0)
                close(fd);
            return;
        }
        struct dirent *e;
        while ((e = readdir(dir)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                tree_walk(dirfd(dir), e->d_name, rm, bytes, files);
        closedir(dir);
        if (rm && unlinkat(at, name, AT_REMOVEDIR) != 0)
            prog_log(INGEST_LOG_WARN, "spool: cannot remove directory %s: %s", prog_esc(name), strerror(errno));
        return;
    }
    if (S_ISREG(st.st_mode)) {
        *bytes += (uint64_t)st.st_size;
        *files += 1;
    }
    if (rm && unlinkat(at, name, 0) != 0)
        prog_log(INGEST_LOG_WARN, "spool: cannot remove %s: %s", prog_esc(name), strerror(errno));
}

static void spool_resume_check(daemon_t *d)
{
    if (d->spool_full && d->spool_bytes < d->spool_quota) {
        prog_log(INGEST_LOG_INFO, "spool backpressure off: %llu of %llu bytes in use",
                 (unsigned long long)d->spool_bytes, (unsigned long long)d->spool_quota);
        d->spool_full = 0;
        schedule_scan(d, d->now);
    }
}

/* Remove the spool copies of batch seq (acked, dropped or never journaled). */
static void spool_drop(daemon_t *d, uint64_t seq)
{
    char name[32];
    snprintf(name, sizeof(name), "%llu", (unsigned long long)seq);
    const int dfd = open(d->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    uint64_t bytes = 0, files = 0;
    tree_walk(dfd, name, 1, &bytes, &files);
    close(dfd);
    d->spool_bytes = d->spool_bytes > bytes ? d->spool_bytes - bytes : 0;
    d->spool_files = d->spool_files > files ? d->spool_files - files : 0;
    spool_resume_check(d);
}

/*
 * At start: make the spool directory, remove what belongs to no journaled
 * batch (copies made for a batch that was never journaled before a crash)
 * and count the rest against the quota.
 */
static int spool_init(daemon_t *d)
{
    snprintf(d->spool_dir, sizeof(d->spool_dir), "%s/spool", d->a->cfg->state_dir);
    if (mkdir(d->spool_dir, 0700) != 0 && errno != EEXIST) {
        prog_log(INGEST_LOG_ERROR, "spool %s: %s", d->spool_dir, strerror(errno));
        return -1;
    }
    const int dfd = open(d->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (dir == NULL) {
        prog_log(INGEST_LOG_ERROR, "spool %s: %s", d->spool_dir, strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *end = NULL;
        const unsigned long long seq = strtoull(e->d_name, &end, 10);
        ingest_journal_batch *jb = NULL;
        const int known = seq > 0 && end != NULL && *end == '\0' && ingest_journal_get(d->j, seq, &jb) == 0;
        ingest_journal_batch_free(d->j, jb);
        uint64_t bytes = 0, files = 0;
        tree_walk(dirfd(dir), e->d_name, !known, &bytes, &files);
        if (known) {
            d->spool_bytes += bytes;
            d->spool_files += files;
        } else {
            prog_log(INGEST_LOG_INFO, "spool: removed %s (no journaled batch): %llu files, %llu bytes", e->d_name,
                     (unsigned long long)files, (unsigned long long)bytes);
        }
    }
    closedir(dir);
    return 0;
}

static int same_version(const struct stat *st, const ingest_sender_stat *w)
{
    return (uint64_t)st->st_size == w->size &&
           (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec == w->mtime_ns &&
           (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec == w->ctime_ns;
}

/*
 * Copy source file rel (the version st) into the spool of batch seq, with
 * its mtime and permission bits, and fsync it.  0 copied; 1 the file
 * changed or vanished meanwhile (not taken: the next walk sees it again);
 * -1 a local failure (logged; not taken).
 */
static int spool_copy(daemon_t *d, uint64_t seq, const dsource *s, const char *rel, const ingest_sender_stat *st)
{
    char src[PATH_MAX], dst[PATH_MAX];
    if ((size_t)snprintf(src, sizeof(src), "%s/%s", s->path, rel) >= sizeof(src) ||
        (size_t)snprintf(dst, sizeof(dst), "%s/%llu/%s/%s", d->spool_dir, (unsigned long long)seq, s->name, rel) >=
            sizeof(dst)) {
        prog_log(INGEST_LOG_WARN, "spool: path too long for %s/%s", s->name, prog_esc(rel));
        return -1;
    }
    const int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (in < 0)
        return errno == ENOENT ? 1 : -1;
    struct stat a, b;
    int rc = -1, out = -1;
    char *buf = NULL;
    if (fstat(in, &a) != 0 || !S_ISREG(a.st_mode) || !same_version(&a, st)) {
        rc = 1;
        goto done;
    }
    if (mkdirs(dst) != 0 || (buf = malloc(1u << 20)) == NULL) {
        prog_log(INGEST_LOG_WARN, "spool: %s: %s", prog_esc(dst), strerror(errno));
        goto done;
    }
    out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (out < 0) {
        prog_log(INGEST_LOG_WARN, "spool: %s: %s", prog_esc(dst), strerror(errno));
        goto done;
    }
    uint64_t total = 0;
    for (;;) {
        const ssize_t n = read(in, buf, 1u << 20);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto io_error;
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            const ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                goto io_error;
            off += w;
        }
        total += (uint64_t)n;
    }
    if (fstat(in, &b) != 0 || !same_version(&b, st) || total != st->size) {
        rc = 1; /* changed while copied */
        goto done;
    }
    const struct timespec times[2] = { a.st_atim, a.st_mtim };
    if (fchmod(out, (a.st_mode & 0777) | 0400) != 0 || futimens(out, times) != 0 || fsync(out) != 0)
        goto io_error;
    rc = 0;
    d->spool_bytes += total;
    d->spool_files++;
    goto done;
io_error:
    prog_log(INGEST_LOG_WARN, "spool: copying %s to %s: %s", prog_esc(src), prog_esc(dst), strerror(errno));
done:
    if (out >= 0) {
        close(out);
        if (rc != 0)
            unlink(dst);
    }
    close(in);
    free(buf);
    return rc;
}

/* ---- the open batch ------------------------------------------------------- */

static void open_reset(daemon_t *d)
{
    for (size_t i = 0; i < d->nof; i++)
        free((char *)d->of[i].path);
    d->nof = 0;
    d->of_bytes = 0;
    d->open_seq = 0;
    d->of_dirty = 0;
}

/* Journal the open batch's file list (PENDING). */
static int open_journal(daemon_t *d)
{
    if (d->open_seq == 0 || !d->of_dirty || d->nof == 0)
        return 0;
    char id[INGEST_JOURNAL_ID_MAX + 1];
    snprintf(id, sizeof(id), "%s%06llu", d->a->prefix, (unsigned long long)d->open_seq);
    if (ingest_journal_add(d->j, d->open_seq, id, d->of, d->nof) < 0) {
        prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(d->a->ctx));
        return -1;
    }
    d->of_dirty = 0;
    return 0;
}

static int open_close(daemon_t *d)
{
    const int rc = open_journal(d);
    if (d->open_seq != 0 && d->nof == 0)
        spool_drop(d, d->open_seq); /* never journaled: nothing may stay in its spool */
    if (d->open_seq != 0)
        prog_log(INGEST_LOG_DEBUG, "batch %s%06llu closed: %zu files, %llu bytes", d->a->prefix,
                 (unsigned long long)d->open_seq, d->nof, (unsigned long long)d->of_bytes);
    open_reset(d);
    return rc;
}

static int open_add(daemon_t *d, const dsource *s, const char *rel, const char *path, const ingest_sender_stat *st)
{
    const uint64_t maxf = d->a->cfg->batch_max_files, maxb = d->a->cfg->batch_max_bytes;
    if (d->open_seq != 0 && (d->nof >= maxf || (d->nof > 0 && d->of_bytes + st->size > maxb)))
        if (open_close(d) < 0)
            return -1;
    if (d->open_seq == 0) {
        d->open_seq = d->a->seq++;
        if (save_seq(d->a->cfg->state_dir, d->a->seq) != 0) {
            prog_log(INGEST_LOG_ERROR, "cannot save the batch sequence in %s: %s", d->a->cfg->state_dir,
                     strerror(errno));
            return -1;
        }
        d->open_at = d->now;
    }
    if (s->spool) {
        const int c = spool_copy(d, d->open_seq, s, rel, st);
        if (c != 0) {
            if (c > 0)
                schedule_scan(d, d->now + DEBOUNCE_MS / 1000.0);
            return 0; /* not taken now; a later walk tries again */
        }
    }
    if (d->nof == d->capof) {
        const size_t nc = d->capof ? d->capof * 2 : 256;
        ingest_journal_file *nf = realloc(d->of, nc * sizeof(*nf));
        if (nf == NULL)
            return -1;
        d->of = nf;
        d->capof = nc;
    }
    char *p = strdup(path);
    if (p == NULL)
        return -1;
    d->of[d->nof].path = p;
    d->of[d->nof].size = st->size;
    d->of[d->nof].mtime_ns = st->mtime_ns;
    d->of[d->nof].ctime_ns = st->ctime_ns;
    d->of[d->nof].ino = st->ino;
    d->nof++;
    d->of_bytes += st->size;
    d->of_dirty = 1;
    d->q_files++;
    d->q_bytes += st->size;
    d->files_taken++;
    d->bytes_taken += st->size;
    if (d->nof >= maxf || d->of_bytes >= maxb)
        return open_close(d);
    return 0;
}

/* ---- discovery -------------------------------------------------------------- */

static int read_head(const dsource *s, const char *rel, uint8_t *buf, size_t cap, size_t *len)
{
    char full[PATH_MAX];
    snprintf(full, sizeof(full), "%s/%s", s->path, rel);
    const int fd = open(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -1;
    size_t n = 0;
    while (n < cap) {
        const ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    *len = n;
    return 0;
}

/* The walk's want_file: choose files for the open batch; never let the sender chunk. */
static int select_file(void *ud, const char *path, const ingest_sender_stat *st)
{
    daemon_t *d = ((agent *)ud)->userdata;
    const char *rel = NULL;
    dsource *s = source_of(d, path, &rel);
    if (s == NULL || stopping)
        return 0;
    agent *a = d->a;
    if (a->metrics != NULL)
        ingest_metric_add(a->m.files_seen, s->name, 1);
    ingest_file_state fs;
    if (ingest_filetable_get(d->a->ft, path, &fs) == 0 && fs.size == st->size && fs.mtime_ns == st->mtime_ns &&
        fs.ctime_ns == st->ctime_ns) {
        if (a->metrics != NULL)
            ingest_metric_add(a->m.files_unchanged, NULL, 1);
        return 0; /* unchanged since its ack */
    }
    int rc = ingest_journal_inflight(d->j, path, NULL);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    if (s->filter != NULL) {
        if (ingest_journal_skipped(d->j, path, st->size, st->mtime_ns) > 0)
            return 0; /* this version was counted already */
        int r = ingest_filter_check_stat(s->filter, rel, st->size, st->mtime_ns, d->wall_ns);
        const size_t hl = ingest_filter_head_len(s->filter);
        if (r == INGEST_FILTER_TAKE && hl > 0) {
            uint8_t head[INGEST_FILTER_MAX_PREFIX];
            size_t n = 0;
            if (read_head(s, rel, head, hl < sizeof(head) ? hl : sizeof(head), &n) == 0)
                r = ingest_filter_check_head(s->filter, head, n);
        }
        if (r != INGEST_FILTER_TAKE) {
            if (r > 0 && r < INGEST_FILTER_NREASONS) {
                d->skipped[r]++;
                if (a->metrics != NULL)
                    ingest_metric_add(a->m.files_skipped, ingest_filter_reason_name(r), 1);
            }
            prog_log(INGEST_LOG_DEBUG, "skipped %s: filter %s", prog_esc(path), ingest_filter_reason_name(r));
            (void)ingest_journal_mark_skipped(d->j, path, st->size, st->mtime_ns, r, d->wall_ns);
            return 0;
        }
    }
    int64_t wait_ns = 0;
    rc = ingest_journal_stable(d->j, path, st->size, st->mtime_ns, d->wall_ns, s->settle_ns, &wait_ns);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        d->not_stable++;
        schedule_scan(d, d->now + (double)wait_ns / 1e9 + 0.05);
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
        if (d->spool_bytes + st->size > d->spool_quota) {
            if (!d->spool_full)
                prog_log(INGEST_LOG_WARN,
                         "backpressure: the spool is full (%llu files, %llu bytes; spool.quota %llu bytes): not "
                         "taking new files from spool sources until batches are acknowledged",
                         (unsigned long long)d->spool_files, (unsigned long long)d->spool_bytes,
                         (unsigned long long)d->spool_quota);
            d->spool_full = 1;
            return 0;
        }
    }
    return open_add(d, s, rel, path, st) < 0 ? INGEST_ENOMEM : 0;
}

static int walk(daemon_t *d)
{
    ingest_sender_opts o = d->base;
    o.want_file = select_file;
    o.on_skip = daemon_on_skip;
    o.batch_seq = 1;
    o.threads = 1;
    ingest_sender *s = NULL;
    const double t0 = prog_now();
    d->scan_at = 0;
    d->last_full = d->now;
    d->wall_ns = wall_now_ns();
    int rc = ingest_sender_create(d->a->ctx, &o, &s);
    if (rc == 0)
        rc = ingest_sender_scan(s);
    ingest_sender_batch *b = NULL;
    if (rc == 0)
        rc = ingest_sender_next_batch(s, &b); /* select_file takes nothing: the walk runs to its end */
    ingest_sender_batch_destroy(b);
    if (s != NULL) {
        ingest_sender_stats ss;
        ingest_sender_get_stats(s, &ss);
        d->files_seen = ss.files_seen;
    }
    d->walks++;
    d->walk_seconds = prog_now() - t0;
    d->a->t.walk_s += d->walk_seconds;
    /* The first walk after a start, and any slow one, is worth a line. */
    prog_log(d->walks == 1 || d->walk_seconds >= 10.0 ? INGEST_LOG_INFO : INGEST_LOG_DEBUG,
             "walk %llu: %llu files seen in %.3f s", (unsigned long long)d->walks, (unsigned long long)d->files_seen,
             d->walk_seconds);
    ingest_sender_destroy(s);
    if (rc < 0)
        prog_log(INGEST_LOG_ERROR, "scan: %s", ingest_ctx_errmsg(d->a->ctx));
    if (open_journal(d) < 0)
        rc = -1;
    (void)ingest_journal_flush(d->j);
    return rc < 0 ? rc : 0;
}

/* ---- after-ship ------------------------------------------------------------- */

static int mkdirs(char *p)
{
    for (char *q = p + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        const int r = mkdir(p, 0755);
        *q = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    return 0;
}

/* The acked batches whose deferred after-ship actions were logged: each is said once. */
static int defer_logged(const daemon_t *d, uint64_t seq)
{
    for (size_t i = 0; i < d->ndefer; i++)
        if (d->defer_seq[i] == seq)
            return 1;
    return 0;
}

static void defer_log_add(daemon_t *d, uint64_t seq)
{
    if (d->ndefer == d->capdefer) {
        const size_t nc = d->capdefer ? d->capdefer * 2 : 16;
        uint64_t *n = realloc(d->defer_seq, nc * sizeof(*n));
        if (n == NULL)
            return; /* it is only said again */
        d->defer_seq = n;
        d->capdefer = nc;
    }
    d->defer_seq[d->ndefer++] = seq;
}

static void defer_log_drop(daemon_t *d, uint64_t seq)
{
    for (size_t i = 0; i < d->ndefer; i++)
        if (d->defer_seq[i] == seq) {
            d->defer_seq[i] = d->defer_seq[--d->ndefer];
            return;
        }
}

/* st is the version f shipped (an inode of 0 in f is unknown). */
static int is_shipped_version(const struct stat *st, const ingest_journal_file *f)
{
    return S_ISREG(st->st_mode) && (uint64_t)st->st_size == f->size &&
           (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec == f->mtime_ns &&
           (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec == f->ctime_ns &&
           (f->ino == 0 || (uint64_t)st->st_ino == f->ino);
}

/*
 * Delete or move (s->after) the acked file rel of source s, when it is
 * still the version shipped (f) and no other process has it open.
 * Returns 1 when it was left for later because some process holds it open
 * (logged unless quiet), else 0 (done, or nothing to do: gone, or a newer
 * version, which ships in its turn).
 *
 * "Nobody has it open" is a write lease (F_SETLEASE F_WRLCK on a read-only
 * descriptor): the kernel grants it only while no other open file
 * description of the file exists, in any process, so a writer that paused
 * with its file open keeps it from being deleted under it.  Under the lease
 * the file is checked again (the version shipped, and still the one at
 * this path) before it goes.  Where the lease cannot be taken at all
 * (EINVAL: the filesystem has no leases; EACCES: the agent neither owns the
 * file nor has CAP_LEASE) the action runs without that check, as it always
 * did, and a warning says so once (docs/operations.md).
 */
static int release_file(daemon_t *d, const dsource *s, const char *rel, const ingest_journal_file *f, int quiet)
{
    const char *what = s->after == AFTER_DELETE ? "delete" : "move";
    char full[PATH_MAX];
    struct stat st, at;
    if ((size_t)snprintf(full, sizeof(full), "%s/%s", s->path, rel) >= sizeof(full))
        return 0;
    if (lstat(full, &st) != 0 || !is_shipped_version(&st, f))
        return 0; /* gone, or a newer version: leave it */
    const int fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 && (errno == ENOENT || errno == ELOOP))
        return 0; /* gone, or replaced by a symlink, since */
    int leased = 0;
    if (fd >= 0 && fcntl(fd, F_SETLEASE, F_WRLCK) == 0) {
        leased = 1;
    } else if (fd >= 0 ? errno == EAGAIN : errno == EWOULDBLOCK) {
        /* open elsewhere (or another process holds a lease on it) */
        if (fd >= 0)
            close(fd);
        if (!quiet)
            prog_log(INGEST_LOG_INFO,
                     "after_ship %s of %s deferred: another process still has it open (a writer may not be done "
                     "with it); retried every second until it is closed",
                     what, prog_esc(full));
        return 1;
    } else if (!d->lease_warned) {
        d->lease_warned = 1;
        prog_log(INGEST_LOG_WARN,
                 "after_ship: cannot tell whether %s is still open in another process (%s: %s); acked files are "
                 "%s without that check, and a writer still holding one open loses what it writes next "
                 "(docs/operations.md)",
                 prog_esc(full), fd >= 0 ? "F_SETLEASE" : "open", strerror(errno),
                 s->after == AFTER_DELETE ? "deleted" : "moved");
    }
    /* (under the lease) still the version shipped, still at this path */
    const int same = (fd < 0 || (fstat(fd, &st) == 0 && is_shipped_version(&st, f))) && lstat(full, &at) == 0 &&
                     at.st_dev == st.st_dev && at.st_ino == st.st_ino && is_shipped_version(&at, f);
    if (same) {
        if (s->after == AFTER_DELETE) {
            if (unlink(full) == 0) {
                d->deleted++;
                if (quiet)
                    prog_log(INGEST_LOG_INFO, "after_ship: %s deleted (no process has it open any more)",
                             prog_esc(full));
            } else {
                prog_log(INGEST_LOG_WARN, "after_ship delete %s: %s", prog_esc(full), strerror(errno));
            }
        } else {
            char dst[PATH_MAX];
            snprintf(dst, sizeof(dst), "%s/%s", s->move_dir, rel);
            if (mkdirs(dst) == 0 && prog_move_file(full, fd, dst) == 0) { /* across filesystems too */
                d->moved++;
                if (quiet)
                    prog_log(INGEST_LOG_INFO, "after_ship: %s moved to %s (no process has it open any more)",
                             prog_esc(full), prog_esc(dst));
            } else {
                prog_log(INGEST_LOG_WARN, "after_ship move %s -> %s: %s", prog_esc(full), prog_esc(dst),
                         strerror(errno));
            }
        }
    }
    if (leased)
        (void)fcntl(fd, F_SETLEASE, F_UNLCK);
    if (fd >= 0)
        close(fd);
    return 0;
}

/*
 * Apply the source's after-ship action to the acked files f[0, n) of batch
 * seq (only to files still the version shipped, and nobody has open);
 * returns how many were deferred because some process still has them open.
 * The file table entry is kept: a file put back unchanged is not shipped
 * again.
 */
static size_t after_ship(daemon_t *d, uint64_t seq, const ingest_journal_file *f, size_t n)
{
    const int quiet = defer_logged(d, seq);
    size_t deferred = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rel = NULL;
        const dsource *s = source_of(d, f[i].path, &rel);
        if (s != NULL && s->after != AFTER_KEEP)
            deferred += (size_t)release_file(d, s, rel, &f[i], quiet);
    }
    if (deferred > 0 && !quiet)
        defer_log_add(d, seq);
    return deferred;
}

/* ---- status ------------------------------------------------------------------- */

static void snap_sources_free(snap *sn)
{
    for (size_t i = 0; i < sn->nsrc; i++) {
        free(sn->src[i].name);
        free(sn->src[i].path);
    }
    free(sn->src);
    sn->src = NULL;
    sn->nsrc = 0;
}

/* The sources as the status shows them (at start and after a reload). */
static void publish_sources(daemon_t *d)
{
    snap_source *ns = calloc(d->nsrc ? d->nsrc : 1, sizeof(*ns));
    size_t n = 0;
    for (size_t i = 0; ns != NULL && i < d->nsrc; i++) {
        ns[n].name = strdup(d->src[i].name);
        ns[n].path = strdup(d->src[i].path);
        ns[n].spool = d->src[i].spool;
        if (ns[n].name == NULL || ns[n].path == NULL) {
            free(ns[n].name);
            free(ns[n].path);
            continue;
        }
        n++;
    }
    pthread_mutex_lock(&d->slock);
    snap_sources_free(&d->sn);
    d->sn.src = ns;
    d->sn.nsrc = n;
    const ingest_agent_config *cfg = d->a->cfg;
    snprintf(d->sn.device, sizeof(d->sn.device), "%s", cfg->device_id);
    snprintf(d->sn.core, sizeof(d->sn.core), "%s", cfg->core_address);
    snprintf(d->sn.window, sizeof(d->sn.window), "%s", cfg->throttle_window);
    d->sn.throttle_rate = cfg->throttle_rate;
    d->sn.queue_files = d->queue_files;
    d->sn.queue_bytes = d->queue_bytes;
    d->sn.spool_quota = d->spool_quota;
    pthread_mutex_unlock(&d->slock);
}

/* Copy the main thread's figures for the status thread. */
static void publish(daemon_t *d)
{
    agent *a = d->a;
    const double now = prog_now();
    if (a->metrics != NULL) {
        agent_metrics_sync(a);
        ingest_metric_set(a->m.queue_files, NULL, (int64_t)d->q_files);
        ingest_metric_set(a->m.queue_bytes, NULL, (int64_t)d->q_bytes);
        ingest_metric_set(a->m.queue_batches, NULL, (int64_t)d->q_batches);
        ingest_metric_set(a->m.backpressure, NULL, d->backpressure || d->spool_full);
        ingest_metric_set(a->m.spool_bytes, NULL, (int64_t)d->spool_bytes);
    }
    pthread_mutex_lock(&d->slock);
    snap *sn = &d->sn;
    sn->connected = a->fd >= 0;
    sn->watching = d->ino >= 0 && !d->ino_full;
    sn->backpressure = d->backpressure;
    sn->spool_full = d->spool_full;
    sn->window_closed = a->window_closed;
    sn->q_batches = d->q_batches;
    sn->q_files = d->q_files;
    sn->q_bytes = d->q_bytes;
    sn->spool_bytes = d->spool_bytes;
    sn->spool_files = d->spool_files;
    memcpy(sn->inflight, d->inflight, sizeof(sn->inflight));
    sn->last_ack_ns = d->last_ack_ns;
    sn->files_seen = d->files_seen;
    sn->walks = d->walks;
    sn->walk_seconds = d->walk_seconds;
    sn->files_taken = d->files_taken;
    sn->bytes_taken = d->bytes_taken;
    sn->files_shipped = d->shipped_files;
    sn->bytes_shipped = d->shipped_bytes;
    sn->bytes_read = d->bytes_read;
    sn->chunks_new = a->t.chunks_sent;
    sn->chunks_dedup = a->t.chunks_dedup;
    sn->chunk_bytes_sent = a->t.chunk_bytes_sent;
    sn->wire_out = a->t.wire_out;
    sn->wire_in = a->t.wire_in;
    sn->batches_acked = d->batches_acked;
    sn->batches_replayed = d->batches_replayed;
    sn->deleted = d->deleted;
    sn->moved = d->moved;
    memcpy(sn->skipped, d->skipped, sizeof(sn->skipped));
    sn->throttle_wait_ms = a->throttle_wait_ms;
    const size_t last = (sn->rate_head + RATE_SAMPLES - 1) % RATE_SAMPLES;
    if (sn->rate_n == 0 || now - sn->rate_t[last] >= 0.2) {
        sn->rate_t[sn->rate_head] = now;
        sn->rate_w[sn->rate_head] = a->t.wire_out + a->t.wire_in;
        sn->rate_head = (sn->rate_head + 1) % RATE_SAMPLES;
        if (sn->rate_n < RATE_SAMPLES)
            sn->rate_n++;
    }
    pthread_mutex_unlock(&d->slock);
}

static void publish_hook(agent *a)
{
    publish(a->userdata);
}

/* Wire bytes per second over the last RATE_WINDOW_S seconds (caller holds slock). */
static double wire_rate(const snap *sn, double now)
{
    if (sn->rate_n == 0)
        return 0.0;
    const uint64_t cur = sn->wire_out + sn->wire_in;
    /* the newest sample at least RATE_WINDOW_S old, else the oldest one */
    size_t base = (sn->rate_head + RATE_SAMPLES - sn->rate_n) % RATE_SAMPLES;
    for (size_t k = 0; k < sn->rate_n; k++) {
        const size_t i = (sn->rate_head + RATE_SAMPLES - 1 - k) % RATE_SAMPLES;
        if (now - sn->rate_t[i] >= RATE_WINDOW_S) {
            base = i;
            break;
        }
    }
    double dt = now - sn->rate_t[base];
    if (dt < RATE_WINDOW_S)
        dt = RATE_WINDOW_S < now - sn->started ? RATE_WINDOW_S : now - sn->started;
    if (dt < 0.001 || cur < sn->rate_w[base])
        return 0.0;
    return (double)(cur - sn->rate_w[base]) / dt;
}

typedef struct outbuf {
    char *p;
    size_t cap, len;
} outbuf;

static void PROG_PRINTF(2, 3) put(outbuf *o, const char *fmt, ...)
{
    if (o->len + 1 >= o->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len = o->len + (size_t)n < o->cap ? o->len + (size_t)n : o->cap - 1;
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_jstr(outbuf *o, const char *s)
{
    put(o, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            put(o, "\\%c", *c);
        else if (*c < 0x20 || *c == 0x7f)
            put(o, "\\u%04x", *c);
        else
            put(o, "%c", *c);
    }
    put(o, "\"");
}

static const char *const skip_names[INGEST_FILTER_NREASONS] = { "", "include", "exclude", "min_size",
                                                                "max_size", "max_age", "sample", "prefix" };

static void fmt_time(int64_t ns, char *buf, size_t cap)
{
    const time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    if (ns == 0 || gmtime_r(&t, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "-");
}

static void render_json(const snap *sn, double now, int64_t wall, outbuf *o)
{
    put(o, "{\"device\":");
    put_jstr(o, sn->device);
    put(o, ",\"uptime_s\":%.1f,\"core\":{\"address\":", now - sn->started);
    put_jstr(o, sn->core);
    put(o, ",\"connected\":%s},\"sources\":[", sn->connected ? "true" : "false");
    for (size_t i = 0; i < sn->nsrc; i++) {
        put(o, "%s{\"name\":", i ? "," : "");
        put_jstr(o, sn->src[i].name);
        put(o, ",\"path\":");
        put_jstr(o, sn->src[i].path);
        put(o, ",\"state\":\"%s\",\"spool\":\"%s\"}", sn->watching ? "watching" : "rescan-only",
            sn->src[i].spool ? "copy" : "none");
    }
    put(o, "],\"queue\":{\"batches\":%llu,\"files\":%llu,\"bytes\":%llu,\"max_files\":%llu,\"max_bytes\":%llu}",
        (unsigned long long)sn->q_batches, (unsigned long long)sn->q_files, (unsigned long long)sn->q_bytes,
        (unsigned long long)sn->queue_files, (unsigned long long)sn->queue_bytes);
    put(o, ",\"in_flight\":");
    if (sn->inflight[0])
        put_jstr(o, sn->inflight);
    else
        put(o, "null");
    char ts[40];
    fmt_time(sn->last_ack_ns, ts, sizeof(ts));
    if (sn->last_ack_ns)
        put(o, ",\"last_ack\":{\"time\":\"%s\",\"age_s\":%.1f}", ts, (double)(wall - sn->last_ack_ns) / 1e9);
    else
        put(o, ",\"last_ack\":null");
    put(o,
        ",\"totals\":{\"files_seen\":%llu,\"files_taken\":%llu,\"bytes_taken\":%llu,\"files_shipped\":%llu,"
        "\"bytes_shipped\":%llu,\"bytes_read\":%llu,\"chunks_new\":%llu,\"chunks_dedup\":%llu,"
        "\"chunk_bytes_sent\":%llu,\"wire_bytes_out\":%llu,\"wire_bytes_in\":%llu,\"batches_acked\":%llu,"
        "\"batches_replayed\":%llu,\"after_ship_deleted\":%llu,\"after_ship_moved\":%llu}",
        (unsigned long long)sn->files_seen, (unsigned long long)sn->files_taken, (unsigned long long)sn->bytes_taken,
        (unsigned long long)sn->files_shipped, (unsigned long long)sn->bytes_shipped,
        (unsigned long long)sn->bytes_read, (unsigned long long)sn->chunks_new, (unsigned long long)sn->chunks_dedup,
        (unsigned long long)sn->chunk_bytes_sent, (unsigned long long)sn->wire_out, (unsigned long long)sn->wire_in,
        (unsigned long long)sn->batches_acked, (unsigned long long)sn->batches_replayed,
        (unsigned long long)sn->deleted, (unsigned long long)sn->moved);
    put(o, ",\"walks\":{\"count\":%llu,\"last_seconds\":%.3f}", (unsigned long long)sn->walks, sn->walk_seconds);
    put(o, ",\"skipped\":{");
    for (int r = 1; r < INGEST_FILTER_NREASONS; r++)
        put(o, "%s\"%s\":%llu", r > 1 ? "," : "", skip_names[r], (unsigned long long)sn->skipped[r]);
    put(o, "},\"backpressure\":{\"on\":%s,\"queue\":%s,\"spool\":%s}",
        sn->backpressure || sn->spool_full ? "true" : "false", sn->backpressure ? "true" : "false",
        sn->spool_full ? "true" : "false");
    put(o, ",\"spool\":{\"files\":%llu,\"bytes\":%llu,\"quota\":%llu}", (unsigned long long)sn->spool_files,
        (unsigned long long)sn->spool_bytes, (unsigned long long)sn->spool_quota);
    put(o, ",\"throttle\":{\"rate\":%llu,\"window\":", (unsigned long long)sn->throttle_rate);
    put_jstr(o, sn->window);
    put(o, ",\"window_open\":%s,\"waited_s\":%.3f}", sn->window_closed ? "false" : "true",
        (double)sn->throttle_wait_ms / 1000.0);
    put(o, ",\"wire_rate_bps\":%.0f", wire_rate(sn, now));
}

static void render_text(const snap *sn, double now, int64_t wall, outbuf *o)
{
    put(o, "device %s   core %s (%s)   up %.0f s\n", sn->device, sn->core,
        sn->connected ? "connected" : "not connected", now - sn->started);
    put(o, "\n%-20s %-12s %-6s %s\n", "SOURCE", "STATE", "SPOOL", "PATH");
    for (size_t i = 0; i < sn->nsrc; i++)
        put(o, "%-20s %-12s %-6s %s\n", sn->src[i].name, sn->watching ? "watching" : "rescan-only",
            sn->src[i].spool ? "copy" : "none", sn->src[i].path);
    char ts[40];
    fmt_time(sn->last_ack_ns, ts, sizeof(ts));
    put(o, "\n%-20s %llu batches, %llu files, %llu bytes (limits %llu files, %llu bytes)\n", "queued",
        (unsigned long long)sn->q_batches, (unsigned long long)sn->q_files, (unsigned long long)sn->q_bytes,
        (unsigned long long)sn->queue_files, (unsigned long long)sn->queue_bytes);
    put(o, "%-20s %s\n", "in flight", sn->inflight[0] ? sn->inflight : "-");
    if (sn->last_ack_ns)
        put(o, "%-20s %s (%.0f s ago)\n", "last ack", ts, (double)(wall - sn->last_ack_ns) / 1e9);
    else
        put(o, "%-20s -\n", "last ack");
    put(o, "%-20s %s (queue %s, spool %s)\n", "backpressure", sn->backpressure || sn->spool_full ? "ON" : "off",
        sn->backpressure ? "full" : "ok", sn->spool_full ? "full" : "ok");
    put(o, "%-20s %llu files, %llu of %llu bytes\n", "spool", (unsigned long long)sn->spool_files,
        (unsigned long long)sn->spool_bytes, (unsigned long long)sn->spool_quota);
    put(o, "%-20s rate %llu B/s, window %s (%s), waited %.1f s\n", "throttle",
        (unsigned long long)sn->throttle_rate, sn->window[0] ? sn->window : "always",
        sn->window_closed ? "CLOSED" : "open", (double)sn->throttle_wait_ms / 1000.0);
    put(o, "%-20s %.0f B/s (last %.0f s)\n", "wire rate", wire_rate(sn, now), RATE_WINDOW_S);
    put(o, "%-20s %llu, the last took %.3f s\n", "walks", (unsigned long long)sn->walks, sn->walk_seconds);
    put(o, "\n%-20s %14s %16s\n", "STAGE", "FILES", "BYTES");
    put(o, "%-20s %14llu %16s\n", "seen (last walk)", (unsigned long long)sn->files_seen, "-");
    put(o, "%-20s %14llu %16llu\n", "taken", (unsigned long long)sn->files_taken,
        (unsigned long long)sn->bytes_taken);
    put(o, "%-20s %14s %16llu\n", "read", "-", (unsigned long long)sn->bytes_read);
    put(o, "%-20s %14llu %16llu\n", "shipped (acked)", (unsigned long long)sn->files_shipped,
        (unsigned long long)sn->bytes_shipped);
    put(o, "%-20s %14s %16llu\n", "wire out", "-", (unsigned long long)sn->wire_out);
    put(o, "%-20s %14s %16llu\n", "wire in", "-", (unsigned long long)sn->wire_in);
    put(o, "%-20s %llu new (%llu bytes sent), %llu dedup\n", "chunks", (unsigned long long)sn->chunks_new,
        (unsigned long long)sn->chunk_bytes_sent, (unsigned long long)sn->chunks_dedup);
    put(o, "%-20s %llu acked, %llu replayed; after_ship %llu deleted, %llu moved\n", "batches",
        (unsigned long long)sn->batches_acked, (unsigned long long)sn->batches_replayed,
        (unsigned long long)sn->deleted, (unsigned long long)sn->moved);
    put(o, "%-20s", "skipped");
    for (int r = 1; r < INGEST_FILTER_NREASONS; r++)
        put(o, " %s=%llu", skip_names[r], (unsigned long long)sn->skipped[r]);
    put(o, "\n");
}

/* The status thread's callback. */
static void render(void *ud, int json, char *buf, size_t cap)
{
    daemon_t *d = ud;
    outbuf o = { buf, cap, 0 };
    const double now = prog_now();
    const int64_t wall = wall_now_ns();
    pthread_mutex_lock(&d->slock);
    if (json)
        render_json(&d->sn, now, wall, &o);
    else
        render_text(&d->sn, now, wall, &o);
    pthread_mutex_unlock(&d->slock);
    if (json) {
        /* the metrics (when on) as they are now: their updates are atomic, no lock needed */
        if (d->a->metrics != NULL && o.len + 16 < o.cap) {
            put(&o, ",\"metrics\":");
            const size_t need = ingest_metrics_render_json(d->a->metrics, o.p + o.len, o.cap - o.len);
            o.len = o.len + need < o.cap ? o.len + need : o.cap - 1;
        }
        put(&o, "}\n");
    }
}

/* ---- shipping ----------------------------------------------------------------- */

static void backoff(daemon_t *d)
{
    d->backoff_ms = d->backoff_ms == 0 ? BACKOFF_MIN_MS : d->backoff_ms * 2;
    if (d->backoff_ms > BACKOFF_MAX_MS)
        d->backoff_ms = BACKOFF_MAX_MS;
    /* jitter: 50%..100% of the step */
    const double ms = d->backoff_ms * (0.5 + 0.5 * (double)rand() / RAND_MAX);
    d->next_connect = d->now + ms / 1000.0;
    prog_log(INGEST_LOG_WARN, "core unreachable; next attempt in %.1f s (%llu files, %llu bytes queued)", ms / 1000.0,
             (unsigned long long)d->q_files, (unsigned long long)d->q_bytes);
}

static int files_differ(const ingest_journal_batch *jb, const ingest_journal_file *f, size_t n)
{
    if (n != jb->nfiles)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].path, jb->files[i].path) != 0 || f[i].size != jb->files[i].size ||
            f[i].mtime_ns != jb->files[i].mtime_ns || f[i].ctime_ns != jb->files[i].ctime_ns)
            return 1;
    return 0;
}

static void queue_recount(daemon_t *d)
{
    uint64_t nb = 0;
    if (ingest_journal_queued(d->j, &nb, &d->q_files, &d->q_bytes) < 0)
        return;
    d->q_batches = nb;
    if (d->backpressure && d->q_files < d->queue_files && d->q_bytes < d->queue_bytes) {
        prog_log(INGEST_LOG_INFO, "backpressure off: %llu files, %llu bytes queued", (unsigned long long)d->q_files,
                 (unsigned long long)d->q_bytes);
        d->backpressure = 0;
        schedule_scan(d, d->now);
    }
}

static int forget(daemon_t *d, uint64_t seq)
{
    const int rc = ingest_journal_remove(d->j, seq);
    if (rc < 0)
        prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(d->a->ctx));
    else
        spool_drop(d, seq); /* after the ack (or the drop) is journaled */
    queue_recount(d);
    return rc;
}

/* A file built into a batch is the version taken (journaled); an inode of 0 is unknown (older records). */
static int same_as_taken(const ingest_journal_file *taken, const ingest_journal_file *built)
{
    return taken->size == built->size && taken->mtime_ns == built->mtime_ns && taken->ctime_ns == built->ctime_ns &&
           (taken->ino == 0 || taken->ino == built->ino);
}

/*
 * Build journaled batch jb from paths[0, n) (its files, or the part of
 * them still to ship, in its order): 1 with *sp, *bp and got[0, *ngot)
 * (the versions chunked; their paths point into *bp), 0 when none of the
 * files is left, < 0 a failure (logged).
 */
static int build_batch(daemon_t *d, const ingest_journal_batch *jb, const ingest_sender_source *bsrc,
                       char *const *spooled, const char **paths, size_t n, ingest_sender **sp,
                       ingest_sender_batch **bp, ingest_journal_file *got, size_t *ngot)
{
    agent *a = d->a;
    ingest_sender_opts o = d->base;
    o.want_file = NULL;
    o.sources = bsrc;
    o.batch_seq = jb->seq;
    o.max_files = n;
    o.max_bytes = UINT64_MAX / 4;
    *ngot = 0;
    int rc = ingest_sender_create(a->ctx, &o, sp);
    if (rc == 0 && a->chunkbuf == NULL) {
        a->chunkcap = ingest_sender_chunk_bound(*sp);
        a->chunkbuf = malloc(a->chunkcap);
        if (a->chunkbuf == NULL)
            rc = INGEST_ENOMEM;
    }
    if (rc == 0)
        rc = ingest_sender_scan_list(*sp, paths, n);
    if (rc == 0)
        rc = ingest_sender_next_batch(*sp, bp);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "batch %s: %s", jb->id, ingest_ctx_errmsg(a->ctx));
        return rc;
    }
    if (rc == 0)
        return 0;
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(*bp, &bs);
    for (uint64_t i = 0; i < bs.files; i++) {
        ingest_sender_file_info info;
        if (ingest_sender_batch_file(*bp, i, &info) != 0)
            continue;
        got[*ngot].path = info.path;
        got[*ngot].size = info.size;
        got[*ngot].mtime_ns = info.mtime_ns;
        got[*ngot].ctime_ns = info.ctime_ns;
        got[*ngot].ino = info.ino;
        (*ngot)++;
    }
    /* A spool copy has its own ctime and inode: the version shipped is the original's (journaled) one. */
    for (size_t i = 0, k = 0; i < *ngot && k < jb->nfiles; i++) {
        while (k < jb->nfiles && strcmp(jb->files[k].path, got[i].path) != 0)
            k++;
        const char *rel = NULL;
        const dsource *src = k < jb->nfiles ? source_of(d, got[i].path, &rel) : NULL;
        if (src != NULL && spooled[src - d->src] != NULL && got[i].size == jb->files[k].size &&
            got[i].mtime_ns == jb->files[k].mtime_ns) {
            got[i].ctime_ns = jb->files[k].ctime_ns;
            got[i].ino = jb->files[k].ino;
        }
        if (k < jb->nfiles)
            k++;
    }
    return 1;
}

/*
 * The files of jb that changed since they were taken (size, mtime, ctime
 * or inode differ between got, as just built, and the journal) leave the
 * batch: paths[0, *n) becomes the files still as taken, and the number of
 * files that left is returned.  They go back to discovery, which sees them
 * settle again before taking them: a batch never carries a version of a
 * file that did not settle (the file may have been taken between two
 * writes of a writer that paused, and written again while the batch
 * waited for batch.max_wait or for the core).
 */
static size_t drop_changed(const ingest_journal_batch *jb, const ingest_journal_file *got, size_t ngot,
                           const char **paths, size_t *n)
{
    size_t keep = 0, changed = 0;
    for (size_t i = 0, k = 0; i < ngot; i++) {
        while (k < jb->nfiles && strcmp(jb->files[k].path, got[i].path) != 0)
            k++;
        if (k < jb->nfiles && same_as_taken(&jb->files[k], &got[i])) {
            paths[keep++] = jb->files[k].path;
        } else {
            changed++;
            prog_log(INGEST_LOG_INFO, "batch %s: %s changed since it was taken; it leaves the batch and settles again",
                     jb->id, prog_esc(got[i].path));
        }
        if (k < jb->nfiles)
            k++;
    }
    *n = keep;
    return changed;
}

/* Files of jb not in got[0, n) start settling afresh when discovery sees them again. */
static void resettle_missing(daemon_t *d, const ingest_journal_batch *jb, const ingest_journal_file *got, size_t n)
{
    int any = 0;
    for (size_t i = 0, k = 0; i < jb->nfiles; i++) {
        if (k < n && strcmp(jb->files[i].path, got[k].path) == 0) {
            k++;
            continue;
        }
        (void)ingest_journal_forget_seen(d->j, jb->files[i].path);
        any = 1;
    }
    if (any) {
        (void)ingest_journal_flush(d->j);
        schedule_scan(d, d->now);
    }
}

/*
 * The after-ship action of acked batch jb, then its record goes.  While a
 * file's action is deferred (some process has it open) the ACKED record
 * stays in the journal and is retried (ship_queue, at most once a second,
 * and after a restart); its spool copies go at once.
 */
static int finish_acked(daemon_t *d, const ingest_journal_batch *jb)
{
    if (after_ship(d, jb->seq, jb->files, jb->nfiles) == 0) {
        defer_log_drop(d, jb->seq);
        return forget(d, jb->seq);
    }
    spool_drop(d, jb->seq);
    d->defer_pending = 1;
    return 0;
}

/*
 * Ship journaled batch seq.  Returns 0 done (acked, or dropped and its files
 * left to discovery), 1 the connection failed (the batch stays queued),
 * < 0 a local failure.
 */
static int ship_one(daemon_t *d, uint64_t seq)
{
    agent *a = d->a;
    ingest_journal_batch *jb = NULL;
    int rc = ingest_journal_get(d->j, seq, &jb);
    if (rc < 0) {
        prog_log(INGEST_LOG_ERROR, "journal: batch %llu: %s", (unsigned long long)seq, ingest_ctx_errmsg(a->ctx));
        return rc == INGEST_ECORRUPT ? forget(d, seq) : rc;
    }
    if (jb->state == INGEST_JOURNAL_ACKED) {
        /* acked before a restart, or a file's after-ship action deferred: (re)try, at most once a second */
        rc = d->now >= d->defer_next ? finish_acked(d, jb) : 0;
        ingest_journal_batch_free(d->j, jb);
        return rc;
    }
    if (a->fd < 0) {
        if (d->now < d->next_connect) {
            ingest_journal_batch_free(d->j, jb);
            return 1;
        }
        if (connect_core(a) != 0) {
            backoff(d);
            ingest_journal_batch_free(d->j, jb);
            return 1;
        }
        if (d->backoff_ms)
            prog_log(INGEST_LOG_INFO, "connected to the core again");
        d->backoff_ms = 0;
    }
    const char **paths = calloc(jb->nfiles, sizeof(*paths));
    ingest_journal_file *got = calloc(jb->nfiles, sizeof(*got));
    ingest_sender_source *bsrc = calloc(d->nsrc, sizeof(*bsrc));
    char **spooled = calloc(d->nsrc, sizeof(*spooled));
    ingest_sender *s = NULL;
    ingest_sender_batch *b = NULL;
    size_t ngot = 0;
    int acked = 0;
    if (paths == NULL || got == NULL || bsrc == NULL || spooled == NULL) {
        rc = INGEST_ENOMEM;
        goto out;
    }
    /* a source whose files were spooled for this batch is read from the spool */
    for (size_t i = 0; i < d->nsrc; i++) {
        bsrc[i] = d->ssrc[i];
        char sp[PATH_MAX];
        struct stat st;
        if ((size_t)snprintf(sp, sizeof(sp), "%s/%llu/%s", d->spool_dir, (unsigned long long)seq, d->src[i].name) <
                sizeof(sp) &&
            lstat(sp, &st) == 0 && S_ISDIR(st.st_mode)) {
            if ((spooled[i] = strdup(sp)) == NULL) {
                rc = INGEST_ENOMEM;
                goto out;
            }
            bsrc[i].path = spooled[i];
        }
    }
    size_t npaths = jb->nfiles;
    for (size_t i = 0; i < jb->nfiles; i++)
        paths[i] = jb->files[i].path;
    /* Build it from its files as they were taken; each round drops at least one file, so this ends. */
    for (;;) {
        rc = build_batch(d, jb, bsrc, spooled, paths, npaths, &s, &b, got, &ngot);
        if (rc <= 0 || drop_changed(jb, got, ngot, paths, &npaths) == 0)
            break;
        ingest_sender_batch_destroy(b);
        ingest_sender_destroy(s);
        b = NULL;
        s = NULL;
        ngot = 0;
        if (npaths == 0) {
            rc = 0;
            break;
        }
    }
    if (rc < 0)
        goto out;
    resettle_missing(d, jb, got, ngot);
    if (rc == 0) {
        prog_log(INGEST_LOG_INFO, "batch %s: none of its %zu files is left to ship", jb->id, jb->nfiles);
        rc = forget(d, seq);
        goto out;
    }
    if (strcmp(ingest_sender_batch_id(b), jb->id) != 0) {
        prog_log(INGEST_LOG_ERROR, "batch %s rebuilt as %s: dropped (its files will be found again)", jb->id,
                 ingest_sender_batch_id(b));
        rc = forget(d, seq);
        goto out;
    }
    ingest_sender_batch_stats bs;
    ingest_sender_batch_stats_get(b, &bs);
    d->bytes_read += bs.bytes;
    a->t.bytes_read += bs.bytes;
    if (files_differ(jb, got, ngot)) {
        if (jb->state == INGEST_JOURNAL_PENDING) {
            /* never sent: record what will really go, so a replay after a crash is the same batch */
            if ((rc = ingest_journal_add(d->j, seq, jb->id, got, ngot)) < 0) {
                prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(a->ctx));
                goto out;
            }
            queue_recount(d);
        } else {
            prog_log(INGEST_LOG_WARN,
                     "batch %s: replaying %zu of its %zu files (the others changed or vanished since it was sent)",
                     jb->id, ngot, jb->nfiles);
        }
    }
    if (jb->state == INGEST_JOURNAL_SENT)
        d->batches_replayed++;
    else if ((rc = ingest_journal_set_state(d->j, seq, INGEST_JOURNAL_SENT, NULL, 0)) < 0) {
        prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(a->ctx));
        goto out;
    }
    a->t.batches++;
    snprintf(d->inflight, sizeof(d->inflight), "%s", jb->id);
    publish(d);
    rc = send_manifest(a, b);
    if (rc == 0)
        rc = finish_batch(a, b);
    d->inflight[0] = '\0';
    if (rc == 0) {
        d->last_ack_ns = wall_now_ns();
        if ((rc = ingest_journal_set_state(d->j, seq, INGEST_JOURNAL_ACKED, got, ngot)) < 0) {
            prog_log(INGEST_LOG_ERROR, "journal: %s", ingest_ctx_errmsg(a->ctx));
            goto out;
        }
        for (uint64_t i = 0; i < bs.chunks; i++) {
            uint8_t id[INGEST_ID_BYTES];
            uint32_t len;
            uint64_t off;
            if (ingest_sender_batch_chunk_info(b, i, id, &len, &off) == 0 && ingest_havecache_add(a->have, id) < 0)
                break;
        }
        (void)ingest_store_commit(a->st);
        agent_metrics_latency(a, (double)(wall_now_ns() - jb->created_ns) / 1e9, bs.files);
        d->batches_acked++;
        d->shipped_files += bs.files;
        d->shipped_bytes += bs.bytes;
        prog_log(INGEST_LOG_INFO, "batch %s acked: %llu files, %llu bytes", jb->id, (unsigned long long)bs.files,
                 (unsigned long long)bs.bytes);
        acked = 1;
    } else if (rc == 1 || rc == 2) {
        /* abandoned (a file changed) or refused: its files go back to discovery */
        disconnect_core(a);
        rc = forget(d, seq);
        schedule_scan(d, d->now);
    } else {
        disconnect_core(a);
        if (!stopping && !reload_requested && !a->window_closed)
            backoff(d);
        rc = 1;
    }
out:
    ingest_sender_batch_destroy(b);
    ingest_sender_destroy(s);
    /* After the batch closed its files: a lease is refused while any descriptor is open, ours too.  The
     * journaled versions are those shipped (a file that changed left the batch), or files now gone. */
    if (acked)
        rc = finish_acked(d, jb);
    for (size_t i = 0; spooled != NULL && i < d->nsrc; i++)
        free(spooled[i]);
    free(spooled);
    free(bsrc);
    free(paths);
    free(got);
    ingest_journal_batch_free(d->j, jb);
    return rc;
}

/* Ship the queue, oldest first, until it is empty (0), the core fails (1) or a walk is due. */
static int ship_queue(daemon_t *d)
{
    uint64_t seq = 0;
    for (;;) {
        if (stopping || reload_requested)
            return 0;
        d->now = prog_now();
        if (d->scan_at != 0 && d->now >= d->scan_at)
            return 0;
        const int r = ingest_journal_next(d->j, seq, &seq);
        if (r <= 0)
            return r;
        if (seq == d->open_seq)
            continue;
        int in = 0;
        if (!throttle_window_open(d->a, &in)) {
            if (!d->a->window_closed)
                prog_log(INGEST_LOG_INFO, "throttle.window %s is closed: nothing is sent for %d min (%llu files queued)",
                         d->a->cfg->throttle_window, in, (unsigned long long)d->q_files);
            d->a->window_closed = 1;
            disconnect_core(d->a);
            return 0;
        }
        if (d->a->window_closed)
            prog_log(INGEST_LOG_INFO, "throttle.window %s is open: shipping", d->a->cfg->throttle_window);
        d->a->window_closed = 0;
        const int rc = ship_one(d, seq);
        if (rc != 0)
            return rc;
    }
}

/* ---- configuration ------------------------------------------------------------ */

static void apply_config(daemon_t *d)
{
    const ingest_agent_config *cfg = d->a->cfg;
    d->base.sources = d->ssrc;
    d->base.nsources = d->nsrc;
    d->base.device = cfg->device_id;
    d->base.chunking = cfg->chunking;
    d->base.max_files = cfg->batch_max_files;
    d->base.max_bytes = cfg->batch_max_bytes;
    d->max_wait_ms = cfg->batch_max_wait_ms;
    d->rescan_ms = cfg->rescan_interval_ms ? cfg->rescan_interval_ms : RESCAN_DEFAULT_MS;
    d->queue_files = cfg->queue_max_files ? cfg->queue_max_files : QUEUE_FILES_DEFAULT;
    d->queue_bytes = cfg->queue_max_bytes ? cfg->queue_max_bytes : QUEUE_BYTES_DEFAULT;
    d->spool_quota = cfg->spool_quota;
}

static void reload(daemon_t *d)
{
    reload_requested = 0;
    agent *a = d->a;
    ingest_agent_config *ncfg = NULL;
    if (ingest_agent_config_load(a->ctx, d->config_path, &ncfg) < 0) {
        prog_log(INGEST_LOG_ERROR, "config reload rejected: %s; the current configuration stays in force",
                 ingest_ctx_errmsg(a->ctx));
        return;
    }
    if (strcmp(ncfg->device_id, a->cfg->device_id) != 0 || strcmp(ncfg->state_dir, a->cfg->state_dir) != 0) {
        prog_log(INGEST_LOG_ERROR, "config reload rejected: device.id and state_dir cannot change while running; "
                                   "the current configuration stays in force");
        ingest_agent_config_free(ncfg);
        return;
    }
    dsource *ns = NULL;
    ingest_sender_source *nss = NULL;
    if (sources_make(d, ncfg, &ns, &nss) < 0) {
        prog_log(INGEST_LOG_ERROR, "config reload rejected: the sources could not be set up");
        ingest_agent_config_free(ncfg);
        return;
    }
    /* the open batch is journaled under the old sources: close it */
    open_close(d);
    if (strcmp(ncfg->core_address, a->cfg->core_address) != 0)
        disconnect_core(a);
    sources_free(d);
    ingest_agent_config_free(a->cfg);
    a->cfg = ncfg;
    d->src = ns;
    d->ssrc = nss;
    d->nsrc = ncfg->sources_count;
    apply_config(d);
    if (throttle_setup(a) != 0)
        prog_log(INGEST_LOG_ERROR, "throttle: the new settings could not be applied; sending unthrottled");
    a->window_closed = 0;
    spool_resume_check(d);
    publish_sources(d);
    prog_log_set_level(ncfg->log_level);
    watches_setup(d);
    schedule_scan(d, d->now);
    prog_log(INGEST_LOG_INFO, "configuration reloaded from %s (%zu sources)", d->config_path, d->nsrc);
}

/* ---- the loop --------------------------------------------------------------------- */

int daemon_run(agent *a, const char *config_path, const ingest_sender_opts *base)
{
    daemon_t d;
    memset(&d, 0, sizeof(d));
    d.a = a;
    d.config_path = config_path;
    d.base = *base;
    d.ino = -1;
    a->userdata = &d;
    pthread_mutex_init(&d.slock, NULL);
    d.sn.started = prog_now();
    int status = 1;
    srand((unsigned)(getpid() ^ (unsigned)wall_now_ns()));
    /* A process opening a file while the after-ship action holds its lease sends us SIGIO (default: exit);
     * it just waits until the lease goes, a moment later. */
    signal(SIGIO, SIG_IGN);
    if (ingest_journal_open(a->st, a->ft, &d.j) < 0) {
        prog_log(INGEST_LOG_ERROR, "journal in %s: %s", a->cfg->state_dir, ingest_ctx_errmsg(a->ctx));
        return 1;
    }
    if (sources_make(&d, a->cfg, &d.src, &d.ssrc) < 0)
        goto out;
    d.nsrc = a->cfg->sources_count;
    apply_config(&d);
    d.base.userdata = a;
    /* batch ids stay unique: continue after the last journaled batch */
    uint64_t last = 0, s = 0;
    while (ingest_journal_next(d.j, s, &s) == 1)
        last = s;
    if (a->seq <= last)
        a->seq = last + 1;
    queue_recount(&d);
    if (d.q_files)
        prog_log(INGEST_LOG_INFO, "resuming: %llu files, %llu bytes queued in the journal",
                 (unsigned long long)d.q_files, (unsigned long long)d.q_bytes);
    if (spool_init(&d) != 0)
        goto out;
    if (d.spool_files)
        prog_log(INGEST_LOG_INFO, "spool: %llu files, %llu bytes waiting to ship", (unsigned long long)d.spool_files,
                 (unsigned long long)d.spool_bytes);
    d.ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (d.ino < 0)
        prog_log(INGEST_LOG_WARN, "inotify unavailable (%s): rescans only", strerror(errno));
    d.now = prog_now();
    watches_setup(&d);
    publish_sources(&d);
    publish(&d);
    a->publish = publish_hook;
    {
        char err[512];
        d.status = status_server_start(a->cfg->status_socket, render, &d, err, sizeof(err));
        if (d.status == NULL)
            prog_log(INGEST_LOG_ERROR, "%s: ingestctl status will not answer", err);
    }
    prog_log(INGEST_LOG_INFO, "running: %zu sources, %zu directories watched, rescan every %llu ms", d.nsrc, d.nw,
             (unsigned long long)d.rescan_ms);
    schedule_scan(&d, d.now);
    while (!stopping) {
        d.now = prog_now();
        if (reload_requested)
            reload(&d);
        if (d.ino >= 0)
            inotify_drain(&d);
        if (d.now - d.last_full >= d.rescan_ms / 1000.0)
            schedule_scan(&d, d.now);
        if (d.scan_at != 0 && d.now >= d.scan_at) {
            if (walk(&d) < 0 && stopping)
                break;
            d.now = prog_now();
        }
        if (d.open_seq != 0 && (d.now - d.open_at) * 1000.0 >= (double)d.max_wait_ms)
            open_close(&d);
        const int shipped = ship_queue(&d);
        if (shipped < 0)
            prog_log(INGEST_LOG_ERROR, "shipping failed; retrying");
        if (d.defer_pending) {
            d.defer_next = d.now + DEFER_RETRY_S;
            d.defer_pending = 0;
        }
        publish(&d);
        /* sleep until something is due */
        d.now = prog_now();
        double until = d.now + 1.0;
        if (d.scan_at != 0 && d.scan_at < until)
            until = d.scan_at;
        if (d.open_seq != 0 && d.open_at + d.max_wait_ms / 1000.0 < until)
            until = d.open_at + d.max_wait_ms / 1000.0;
        if (d.q_files > d.nof && a->fd < 0 && d.next_connect < until && !a->window_closed)
            until = d.next_connect;
        if (d.q_files > d.nof && a->fd >= 0 && shipped == 0 && !a->window_closed)
            until = d.now; /* more to ship */
        int ms = (int)((until - d.now) * 1000.0);
        if (ms < 0)
            ms = 0;
        if (shipped < 0 && ms < 1000)
            ms = 1000;
        if (ms > 0 && !stopping && !reload_requested) {
            struct pollfd p = { d.ino, POLLIN, 0 };
            poll(&p, d.ino >= 0 ? 1 : 0, ms);
        }
    }
    /* Shutdown: the open batch is journaled PENDING, an interrupted batch stays SENT: both resume. */
    open_journal(&d);
    status = 0;
out:
    status_server_stop(d.status);
    a->publish = NULL;
    if (ingest_store_commit(a->st) < 0) {
        prog_log(INGEST_LOG_ERROR, "state store: %s", ingest_ctx_errmsg(a->ctx));
        status = 1;
    }
    disconnect_core(a);
    queue_recount(&d);
    prog_log(INGEST_LOG_INFO,
             "stopped: shipped files=%llu bytes=%llu batches=%llu replayed=%llu; queued files=%llu bytes=%llu; "
             "after_ship deleted=%llu moved=%llu; skipped include=%llu exclude=%llu min_size=%llu max_size=%llu "
             "max_age=%llu sample=%llu prefix=%llu",
             (unsigned long long)d.shipped_files, (unsigned long long)d.shipped_bytes,
             (unsigned long long)d.batches_acked, (unsigned long long)d.batches_replayed,
             (unsigned long long)d.q_files, (unsigned long long)d.q_bytes, (unsigned long long)d.deleted,
             (unsigned long long)d.moved, (unsigned long long)d.skipped[INGEST_FILTER_INCLUDE],
             (unsigned long long)d.skipped[INGEST_FILTER_EXCLUDE], (unsigned long long)d.skipped[INGEST_FILTER_MIN_SIZE],
             (unsigned long long)d.skipped[INGEST_FILTER_MAX_SIZE], (unsigned long long)d.skipped[INGEST_FILTER_MAX_AGE],
             (unsigned long long)d.skipped[INGEST_FILTER_SAMPLE], (unsigned long long)d.skipped[INGEST_FILTER_PREFIX]);
    printf("stopped: files=%llu bytes=%llu batches=%llu replayed=%llu queued_files=%llu deleted=%llu moved=%llu "
           "skipped_include=%llu skipped_exclude=%llu skipped_min_size=%llu skipped_max_size=%llu "
           "skipped_max_age=%llu skipped_sample=%llu skipped_prefix=%llu\n",
           (unsigned long long)d.shipped_files, (unsigned long long)d.shipped_bytes,
           (unsigned long long)d.batches_acked, (unsigned long long)d.batches_replayed,
           (unsigned long long)d.q_files, (unsigned long long)d.deleted, (unsigned long long)d.moved,
           (unsigned long long)d.skipped[INGEST_FILTER_INCLUDE], (unsigned long long)d.skipped[INGEST_FILTER_EXCLUDE],
           (unsigned long long)d.skipped[INGEST_FILTER_MIN_SIZE], (unsigned long long)d.skipped[INGEST_FILTER_MAX_SIZE],
           (unsigned long long)d.skipped[INGEST_FILTER_MAX_AGE], (unsigned long long)d.skipped[INGEST_FILTER_SAMPLE],
           (unsigned long long)d.skipped[INGEST_FILTER_PREFIX]);
    fflush(stdout);
    open_reset(&d);
    free(d.of);
    free(d.defer_seq);
    watches_clear(&d);
    free(d.w);
    for (size_t i = 0; i < d.ndeep; i++)
        free(d.deep[i]);
    free(d.deep);
    if (d.ino >= 0)
        close(d.ino);
    sources_free(&d);
    snap_sources_free(&d.sn);
    pthread_mutex_destroy(&d.slock);
    ingest_journal_close(d.j);
    return status;
}
