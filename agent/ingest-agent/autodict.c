/*
 * compression.dictionary: auto (docs/compression.md, "A dictionary the
 * agent trains"): the dictionary the agent trained from its sources' small
 * files, kept in {state_dir}/auto.zdict, or trained now when there is none.
 */
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define AUTO_NAME "auto.zdict"
#define AUTO_FILE_MIN 16u                           /* bytes: smaller files teach nothing */
#define AUTO_FILE_MAX INGEST_SENDER_GROUP_CHUNK_MAX /* the small files (one small chunk each) */
#define AUTO_SAMPLES_MAX 4000u
#define AUTO_BYTES_MAX (2u * 1024u * 1024u)
#define AUTO_SAMPLES_MIN 64u
#define AUTO_DICT_MAX (64u * 1024u)
#define AUTO_DICT_MIN (4u * 1024u)
#define AUTO_DIR_NAMES 16384u
#define AUTO_RECHECK_S (24 * 3600) /* --once: the age of auto.zdict at which it is tried against a new one */ /* names read from one directory: a huge one is sampled from its first ones */

/*
 * Watching the dictionary (the daemon's): one small file in PROBE_EVERY taken into a batch (its first
 * PROBE_BYTES) is compressed alone with the dictionary and without one; a window of PROBE_WINDOW such files gives the dictionary's gain
 * (bytes without / bytes with).  A window that keeps less than half of the best gain seen for this
 * dictionary, or less than PROBE_GAIN_MIN, starts a new one: samples of the next small files, trained as at
 * the start, offered from the next connection.  A retrain waits `gap` windows after the last (doubling each
 * time up to PROBE_GAP_MAX, back to 1 once a dictionary gains PROBE_GAIN_GOOD), so files no dictionary helps
 * cost few of them.
 */
#define PROBE_EVERY 8u
#define PROBE_WINDOW 16u
#define PROBE_BYTES 4096u /* of a file's start: where a dictionary does its work, and a bound on the cost */
#define PROBE_GAIN_MIN 1.05
#define PROBE_GAIN_GOOD 1.10
#define PROBE_GAP_MAX 1024u

typedef struct agent_probe {
    ingest_codec *codec; /* its own: the dictionary loaded, used for one encoding and not the other */
    uint32_t dict_id;    /* loaded in codec (0: none yet) */
    const uint8_t *dict; /* the agent's a->dict it was loaded from */
    uint8_t *buf;        /* a file, then its encoding */
    unsigned skip;       /* small files until the next probe */
    unsigned n;          /* probes in this window */
    uint64_t raw, with, without;
    double best;         /* best window gain of this dictionary */
    unsigned windows;    /* windows since this dictionary came in use, or a retrain started */
    unsigned gap;        /* windows a retrain waits after the last one */
    int retraining;      /* samples are being taken for a new dictionary */
    double last;         /* the last window's gain (0: none yet) */
    uint64_t replaced;   /* dictionaries replaced since the start */
} probe;

/*
 * Samples, each of a kind: a source and a file name extension (docs/compression.md, "One dictionary for
 * several kinds of files").  The dictionary is trained in parts, one per kind (ingest_dict_train_parts);
 * past AUTO_KINDS - 1 kinds, the rest share the last.
 */
#define AUTO_KINDS INGEST_DICT_PARTS_MAX
#define AUTO_EXT_MAX 15u
#define AUTO_NOMEM (-1000) /* train_kinds: out of memory, said */
/* A walk for samples looks at this many names of a source at most (in each of its two passes). */
#define AUTO_WALK_NAMES (64ul * AUTO_SAMPLES_MAX)
typedef struct agent_samples {
    uint8_t *buf;
    size_t len;
    size_t *sizes;
    uint8_t *kind; /* of each sample, an index into kinds */
    unsigned n;
    unsigned next; /* the daemon's: try to train once this many were taken */
    struct {
        size_t src; /* index in the configuration's sources (SIZE_MAX: none) */
        char ext[AUTO_EXT_MAX + 1];
        unsigned n; /* its samples */
        size_t len;
    } kinds[AUTO_KINDS];
    unsigned nkinds;
} samples;

/*
 * A walk for samples (collect) goes twice: the first counts each kind's small files and bytes, the second
 * takes every stride-th file of a kind up to its share, so the samples come from all over the tree and
 * each kind has its part, not only the first files of the first directories.
 */
typedef struct walk_plan {
    int take;                          /* 0: counting */
    unsigned long names;               /* names looked at in this walk */
    unsigned long seen[AUTO_KINDS];    /* small files of each kind found so far */
    uint64_t bytes[AUTO_KINDS];        /* the counting walk's: their bytes */
    unsigned long stride[AUTO_KINDS];  /* the taking walk's: take one file in this many (0: a kind new since) */
    size_t share[AUTO_KINDS];          /* and at most this many bytes */
} walk_plan;

static probe *probe_get(agent *a);
static int held_out(agent *a, const samples *sm);
static int replace(agent *a, uint8_t *d, size_t n, const char *path);

static int samples_alloc(samples *sm)
{
    sm->buf = malloc(AUTO_BYTES_MAX);
    sm->sizes = malloc(AUTO_SAMPLES_MAX * sizeof(size_t));
    sm->kind = malloc(AUTO_SAMPLES_MAX);
    return sm->buf != NULL && sm->sizes != NULL && sm->kind != NULL ? 0 : -1;
}

static void samples_free(samples *sm)
{
    free(sm->buf);
    free(sm->sizes);
    free(sm->kind);
    sm->buf = NULL;
    sm->sizes = NULL;
    sm->kind = NULL;
}

/* The kind of a file of source src named name (its last path component or a path): its index in sm->kinds. */
static unsigned kind_of(samples *sm, size_t src, const char *name)
{
    const char *base = strrchr(name, '/');
    base = base != NULL ? base + 1 : name;
    /* the last extension that is not all digits (app.log.1 and app.log.2 are logs; events.20240101 has none) */
    const char *end = base + strlen(base), *dot = NULL;
    for (;;) {
        const char *p = end;
        while (p > base && p[-1] != '.')
            p--;
        if (p <= base + 1 || p == end) /* no dot, a leading dot only, or a trailing dot */
            break;
        size_t digits = 0;
        while (p + digits < end && p[digits] >= '0' && p[digits] <= '9')
            digits++;
        if (p + digits != end) {
            dot = p - 1;
            break;
        }
        end = p - 1; /* all digits: the extension before it */
    }
    char ext[AUTO_EXT_MAX + 1] = "";
    if (dot != NULL && (size_t)(end - dot - 1) <= AUTO_EXT_MAX)
        for (size_t i = 0; dot + 1 + i < end; i++)
            ext[i] = (char)(dot[1 + i] >= 'A' && dot[1 + i] <= 'Z' ? dot[1 + i] - 'A' + 'a' : dot[1 + i]);
    for (unsigned k = 0; k < sm->nkinds; k++)
        if (sm->kinds[k].src == src && strcmp(sm->kinds[k].ext, ext) == 0)
            return k;
    if (sm->nkinds == AUTO_KINDS)
        return AUTO_KINDS - 1; /* the rest */
    sm->kinds[sm->nkinds].src = src;
    memcpy(sm->kinds[sm->nkinds].ext, ext, sizeof(ext));
    sm->kinds[sm->nkinds].n = 0;
    sm->kinds[sm->nkinds].len = 0;
    return sm->nkinds++;
}

/* Whether the daemon may take a sample of kind k: no kind takes more than half of the samples, so that the
 * files of another kind later in the batches find room. */
static int kind_room(const samples *sm, unsigned k)
{
    return sm->kinds[k].n < AUTO_SAMPLES_MAX / 2 && sm->kinds[k].len + AUTO_FILE_MIN <= AUTO_BYTES_MAX / 2;
}

static int strcmp_ptr(const void *x, const void *y) { return strcmp(*(char *const *)x, *(char *const *)y); }

static int full(const samples *sm) { return sm->n >= AUTO_SAMPLES_MAX || sm->len + AUTO_FILE_MIN > AUTO_BYTES_MAX; }

/* Whether no more samples can be taken: full, or every kind seen has taken its most (a kind not seen yet
 * could still come, but nothing waits for it). */
static int saturated(const samples *sm)
{
    for (unsigned k = 0; k < sm->nkinds && !full(sm); k++)
        if (sm->kinds[k].n > 0 && kind_room(sm, k)) /* (a kind whose only file could not be read does not count) */
            return 0;
    return 1;
}

/* The kinds that have samples. */
static unsigned kinds_taken(const samples *sm)
{
    unsigned n = 0;
    for (unsigned k = 0; k < sm->nkinds; k++)
        n += sm->kinds[k].n > 0;
    return n;
}

/*
 * Read the file open as fd (size bytes when it was seen; of kind, which may hold kind_max bytes) whole into
 * sm, and close it.
 */
static void take_fd(samples *sm, int fd, uint64_t size, unsigned kind, size_t kind_max)
{
    if (fd < 0)
        return;
    size_t room = AUTO_BYTES_MAX - sm->len;
    if (kind_max - sm->kinds[kind].len < room)
        room = kind_max - sm->kinds[kind].len;
    const size_t got = size <= room ? prog_read_upto(fd, sm->buf + sm->len, (size_t)size) : 0;
    close(fd);
    if (got < AUTO_FILE_MIN)
        return;
    sm->kind[sm->n] = (uint8_t)kind;
    sm->sizes[sm->n++] = got;
    sm->len += got;
    sm->kinds[kind].n++;
    sm->kinds[kind].len += got;
}

static int open_sample(int dirfd, const char *name)
{
    return openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
}

/*
 * Files under dirfd (rel: its path under source src, "" at the top), in name
 * order as the sender walks, through the source's filter, into sm until full
 * (of a directory, its first AUTO_DIR_NAMES entries as readdir gives them).
 */
static void walk(samples *sm, walk_plan *w, size_t src, const char *srcpath, const ingest_filter *filter, int dirfd,
                 const char *rel, int depth, int64_t now_ns)
{
    const int dfd = dup(dirfd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d == NULL) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while (n < AUTO_DIR_NAMES && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof(*nn));
            if (nn == NULL)
                break;
            names = nn;
        }
        if ((names[n] = strdup(e->d_name)) == NULL)
            break;
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof(*names), strcmp_ptr);
    for (size_t i = 0; i < n && !full(sm) && w->names < AUTO_WALK_NAMES; i++) {
        struct stat st;
        w->names++;
        if (fstatat(dirfd, names[i], &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s%s%s", rel, rel[0] ? "/" : "", names[i]) >= (int)sizeof(path))
            continue;
        if (S_ISDIR(st.st_mode) && depth < INGEST_SENDER_MAX_DEPTH) {
            const int sub = openat(dirfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) {
                walk(sm, w, src, srcpath, filter, sub, path, depth + 1, now_ns);
                close(sub);
            }
        } else if (S_ISREG(st.st_mode) && st.st_size >= (off_t)AUTO_FILE_MIN && st.st_size <= (off_t)AUTO_FILE_MAX) {
            const ingest_sender_stat ss = { (uint64_t)st.st_size,
                                            ingest_time_ns(&st.st_mtim),
                                            ingest_time_ns(&st.st_ctim),
                                            (uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint32_t)st.st_mode };
            if (filter != NULL && agent_filter_check(filter, srcpath, path, &ss, now_ns) != INGEST_FILTER_TAKE)
                continue;
            const unsigned k = kind_of(sm, src, names[i]);
            const unsigned long j = w->seen[k]++;
            if (!w->take)
                w->bytes[k] += (uint64_t)st.st_size;
            else if (w->stride[k] > 0 && j % w->stride[k] == 0 && sm->kinds[k].len < w->share[k])
                take_fd(sm, open_sample(dirfd, names[i]), (uint64_t)st.st_size, k, w->share[k]);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* The size of dictionary trained from len bytes of samples. */
static size_t dict_size_for(size_t len)
{
    const size_t max = len / 16;
    return max < AUTO_DICT_MIN ? AUTO_DICT_MIN : max > AUTO_DICT_MAX ? AUTO_DICT_MAX : max;
}

/*
 * Train a dictionary of at most max bytes (0: for the samples' size) from the samples of sm (every other
 * one, from the first, when half), a part per kind: 0 (*d through a->ctx), or as ingest_dict_train when it
 * failed, or AUTO_NOMEM when out of memory here (said).  *used: the samples it took.
 */
static int train_kinds(agent *a, const samples *sm, int half, size_t max, void **d, size_t *len, uint32_t *id,
                       unsigned *used)
{
    samples g = { 0 };
    size_t *off = malloc((sm->n + 1) * sizeof(size_t));
    g.buf = malloc(sm->len > 0 ? sm->len : 1);
    g.sizes = malloc((sm->n + 1) * sizeof(size_t));
    int rc = AUTO_NOMEM;
    *used = 0;
    if (off == NULL || g.buf == NULL || g.sizes == NULL) {
        prog_log(INGEST_LOG_ERROR, "compression.dictionary auto: out of memory");
        goto out;
    }
    off[0] = 0;
    for (unsigned i = 0; i < sm->n; i++)
        off[i + 1] = off[i] + sm->sizes[i];
    unsigned counts[AUTO_KINDS], nparts = 0;
    for (unsigned k = 0; k < sm->nkinds; k++) {
        const unsigned n0 = g.n;
        for (unsigned i = 0; i < sm->n; i += half ? 2 : 1)
            if (sm->kind[i] == k) {
                memcpy(g.buf + g.len, sm->buf + off[i], sm->sizes[i]);
                g.sizes[g.n++] = sm->sizes[i];
                g.len += sm->sizes[i];
            }
        if (g.n > n0)
            counts[nparts++] = g.n - n0;
    }
    *used = g.n;
    rc = ingest_dict_train_parts(a->ctx, g.buf, g.sizes, g.n, counts, nparts, max ? max : dict_size_for(g.len), d,
                                 len, id);
out:
    free(off);
    free(g.buf);
    free(g.sizes);
    return rc;
}

/* Train from the samples; 1 trained (*out, *len: malloc'd), 0 too few (said, at debug level when quiet), -1 failed. */
static int train_from(agent *a, const samples *sm, int quiet, const char *from, uint8_t **out, size_t *len)
{
    if (sm->n < AUTO_SAMPLES_MIN) {
        prog_log(quiet ? INGEST_LOG_DEBUG : INGEST_LOG_INFO, "compression.dictionary auto: %u small files (%zu bytes) "
                 "%s, fewer than the %u a dictionary is trained from: compressing without one for now", sm->n, sm->len,
                 from, AUTO_SAMPLES_MIN);
        return 0;
    }
    void *d = NULL;
    uint32_t id = 0;
    unsigned used = 0;
    const int t = train_kinds(a, sm, 0, dict_size_for(sm->len), &d, len, &id, &used);
    if (t == AUTO_NOMEM)
        return -1;
    if (t < 0) {
        prog_log(INGEST_LOG_WARN, "compression.dictionary auto: training from %u files failed (%s): %s for now",
                 sm->n, ingest_ctx_errmsg(a->ctx), a->dict != NULL ? "keeping the one in use" :
                 "compressing without a dictionary");
        return 0;
    }
    int rc = -1;
    *out = malloc(*len);
    if (*out != NULL) {
        memcpy(*out, d, *len);
        rc = 1;
        prog_log(INGEST_LOG_INFO, "compression.dictionary auto: trained %zu bytes (id %u) from %u small files (%zu "
                 "bytes, %u kinds) %s", *len, id, sm->n, sm->len, kinds_taken(sm), from);
    }
    ingest_buf_free(a->ctx, d);
    return rc;
}

/*
 * Each kind's share of the samples' bytes, from what the counting walk found: the kinds with the fewest
 * bytes first, each all of its bytes or an equal part of what is left, and the stride that spreads its
 * share (and its part of the samples' count) over its files.
 */
static void plan(const samples *sm, walk_plan *w)
{
    unsigned order[AUTO_KINDS], m = 0;
    for (unsigned k = 0; k < sm->nkinds; k++)
        if (w->seen[k] > 0) {
            unsigned j = m++;
            while (j > 0 && w->bytes[order[j - 1]] > w->bytes[k]) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = k;
        }
    uint64_t left = AUTO_BYTES_MAX;
    for (unsigned j = 0; j < m; j++) {
        const unsigned k = order[j];
        const uint64_t part = left / (m - j);
        const uint64_t share = w->bytes[k] < part ? w->bytes[k] : part;
        left -= share;
        w->share[k] = (size_t)share;
        unsigned long by_bytes = share > 0 ? (unsigned long)((w->bytes[k] + share - 1) / share) : 1;
        const unsigned long files = AUTO_SAMPLES_MAX / m;
        const unsigned long by_count = (w->seen[k] + files - 1) / files;
        w->stride[k] = by_bytes > by_count ? by_bytes : by_count;
        if (w->stride[k] == 0)
            w->stride[k] = 1;
    }
}

/* The small files under the sources into sm (allocated here): 0, or -1 out of memory (said). */
static int collect(agent *a, samples *sm)
{
    if (samples_alloc(sm) < 0) {
        samples_free(sm);
        prog_log(INGEST_LOG_ERROR, "compression.dictionary auto: out of memory");
        return -1;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const int64_t now_ns = ingest_time_ns(&now);
    walk_plan w;
    memset(&w, 0, sizeof(w));
    for (w.take = 0; w.take < 2; w.take++) {
        if (w.take) {
            plan(sm, &w);
            memset(w.seen, 0, sizeof(w.seen));
        }
        for (size_t i = 0; i < a->cfg->sources_count && !full(sm); i++) {
            const ingest_source_config *c = &a->cfg->sources[i];
            w.names = 0; /* each source its own bound */
            ingest_filter *f = NULL;
            if (agent_filter_create(a, c, &f) < 0)
                continue; /* said; the run itself stops on it */
            const int fd = open(c->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (fd >= 0) {
                walk(sm, &w, i, c->path, f, fd, "", 0, now_ns);
                close(fd);
            }
            ingest_filter_destroy(f);
        }
    }
    return 0;
}

/* Walk the sources for samples and train from them; as train_from. */
static int train(agent *a, uint8_t **out, size_t *len)
{
    samples sm = { 0 };
    if (collect(a, &sm) < 0)
        return -1;
    const int rc = train_from(a, &sm, 0, "under the sources", out, len);
    samples_free(&sm);
    return rc;
}

int agent_dict_read(const char *path, uint8_t **d, size_t *n)
{
    *d = NULL;
    *n = 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC); /* (a configured one may well be a symlink) */
    if (fd < 0)
        return -1;
    *d = malloc(INGEST_DICT_MAX_BYTES + 1u);
    const int e = *d == NULL ? ENOMEM : 0;
    if (*d != NULL)
        *n = prog_read_upto(fd, *d, INGEST_DICT_MAX_BYTES + 1u);
    close(fd);
    errno = e;
    return e != 0 ? -1 : 0;
}

int agent_dict_use(agent *a, uint8_t *d, size_t n, const char *path)
{
    uint32_t did = 0;
    if (ingest_codec_add_dict(a->codec, d, n, &did) < 0 || ingest_codec_use_dict(a->codec, did) < 0) {
        free(d);
        return -1;
    }
    a->dict = d;
    a->dict_len = n;
    snprintf(a->dict_name, sizeof(a->dict_name), "%s", path);
    return 0;
}

/* Use the dictionary just trained and keep it in path: 1, or -1 (logged). */
static int keep(agent *a, uint8_t *d, size_t n, const char *path)
{
    if (agent_dict_use(a, d, n, path) < 0) {
        prog_log(INGEST_LOG_ERROR, "compression.dictionary auto: the trained dictionary does not load: %s",
                 ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    if (prog_write_bytes_durable(path, a->dict, n) != 0) /* used this run all the same; trained again at the next start */
        prog_log(INGEST_LOG_WARN, "compression.dictionary auto: cannot keep it in %s: %s", path, strerror(errno));
    return 1;
}

static void auto_path(const agent *a, char *path, size_t cap) { snprintf(path, cap, "%s/" AUTO_NAME, a->cfg->state_dir); }

/*
 * --once, with an auto.zdict AUTO_RECHECK_S old or more (its mtime): is it still the one for these files?
 * The small files under the sources, read as for a first dictionary, decide by a held-out trial: a new
 * one replaces it when the trial wins by 5%; else its mtime is set to now, and the check waits as long
 * again.  (The daemon watches its dictionary all along instead.)
 */
static void recheck(agent *a, const char *path)
{
    struct stat st;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (stat(path, &st) != 0 || now.tv_sec - st.st_mtim.tv_sec < AUTO_RECHECK_S)
        return;
    samples sm = { 0 };
    if (collect(a, &sm) < 0)
        return;
    const probe *p = sm.n >= AUTO_SAMPLES_MIN ? probe_get(a) : NULL;
    const int h = p != NULL && p->codec != NULL ? held_out(a, &sm) : -1;
    uint8_t *d = NULL;
    size_t n = 0;
    if (h == 1 && train_from(a, &sm, 0, "under the sources", &d, &n) == 1) {
        (void)replace(a, d, n, path);
    } else {
        if (h < 0)
            prog_log(INGEST_LOG_INFO, "compression.dictionary auto: %s is %lld days old; %u small files under the "
                     "sources could not tell whether a new one would do better: kept, tried again in a day", path,
                     (long long)((now.tv_sec - st.st_mtim.tv_sec) / 86400), sm.n);
        /* kept: tried again a day from now, not at every run until the files tell */
        if (utimensat(AT_FDCWD, path, NULL, 0) != 0)
            prog_log(INGEST_LOG_WARN, "compression.dictionary auto: %s: cannot set its time: %s", path,
                     strerror(errno));
    }
    samples_free(&sm);
    agent_dict_auto_free(a); /* the probe: --once watches no more */
}

int agent_dict_auto(agent *a)
{
    char path[PATH_MAX];
    auto_path(a, path, sizeof(path));
    uint8_t *d = NULL;
    size_t n = 0;
    if (agent_dict_read(path, &d, &n) == 0) {
        if (n == 0 || n > INGEST_DICT_MAX_BYTES || ingest_dict_id(d, n) == 0) {
            /* not a dictionary (cut short, say): trained again below and replaced */
            prog_log(INGEST_LOG_WARN, "compression.dictionary auto: %s is not a dictionary: training a new one", path);
            free(d);
        } else if (agent_dict_use(a, d, n, path) < 0) {
            prog_log(INGEST_LOG_WARN, "compression.dictionary auto: %s does not load (%s): training a new one", path,
                     ingest_ctx_errmsg(a->ctx));
        } else {
            prog_log(INGEST_LOG_INFO, "compression.dictionary auto: %s (%zu bytes, id %u)", path, n,
                     ingest_dict_id(d, n));
            if (a->once)
                recheck(a, path);
            return 0;
        }
    }
    const int t = train(a, &d, &n);
    return t < 0 || (t == 1 && keep(a, d, n, path) < 0) ? -1 : 0;
}

/* The daemon's probe state, made (and given the agent's current dictionary) on first use; NULL: out of memory. */
static probe *probe_get(agent *a)
{
    probe *p = a->auto_probe;
    if (p == NULL) {
        p = a->auto_probe = calloc(1, sizeof(*p));
        if (p == NULL)
            return NULL;
        p->gap = 1;
    }
    if (p->buf == NULL && (p->buf = malloc(AUTO_FILE_MAX + ingest_codec_bound(AUTO_FILE_MAX))) == NULL) /* (held_out) */
        return NULL;
    if (p->dict != a->dict) { /* a dictionary new to the probe: load it and start its windows over */
        ingest_codec_destroy(p->codec);
        p->codec = NULL;
        p->dict_id = 0;
        p->dict = a->dict;
        p->n = 0;
        p->raw = p->with = p->without = 0;
        p->best = 0;
        p->last = 0;
        p->windows = 0;
        if (ingest_codec_create(a->ctx, a->cfg->compression_level, &p->codec) < 0 ||
            ingest_codec_add_dict(p->codec, a->dict, a->dict_len, &p->dict_id) < 0) {
            prog_log(INGEST_LOG_WARN, "compression.dictionary auto: cannot watch what the dictionary saves: %s",
                     ingest_ctx_errmsg(a->ctx));
            ingest_codec_destroy(p->codec);
            p->codec = NULL;
        }
    }
    return p;
}

static double saved_pct(uint64_t with, uint64_t without)
{
    return without > 0 ? 100.0 * (1.0 - (double)with / (double)without) : 0.0;
}

/* One small file taken into a batch (path, size bytes when seen) while the daemon uses its dictionary. */
static void probe_file(agent *a, const char *path, uint64_t size)
{
    probe *p = probe_get(a);
    if (p == NULL || p->codec == NULL)
        return;
    if (p->skip > 0) {
        p->skip--;
        return;
    }
    const int fd = open_sample(AT_FDCWD, path);
    if (fd < 0)
        return;
    const size_t got = prog_read_upto(fd, p->buf, size < PROBE_BYTES ? (size_t)size : PROBE_BYTES);
    close(fd);
    if (got < AUTO_FILE_MIN)
        return;
    p->skip = PROBE_EVERY - 1;
    uint8_t *enc = p->buf + AUTO_FILE_MAX;
    const size_t cap = ingest_codec_bound(AUTO_FILE_MAX);
    size_t w = 0, wo = 0;
    if (ingest_codec_use_dict(p->codec, p->dict_id) < 0 || ingest_codec_encode(p->codec, p->buf, got, enc, cap, &w) < 0 ||
        ingest_codec_use_dict(p->codec, 0) < 0 || ingest_codec_encode(p->codec, p->buf, got, enc, cap, &wo) < 0)
        return;
    p->raw += got;
    p->with += w;
    p->without += wo;
    if (++p->n < PROBE_WINDOW)
        return;
    const double g = p->with > 0 ? (double)p->without / (double)p->with : 1.0;
    p->windows++;
    p->last = g;
    if (g > p->best)
        p->best = g;
    if (g >= PROBE_GAIN_GOOD)
        p->gap = 1;
    const double best_pct = 100.0 * (1.0 - 1.0 / p->best);
    prog_log(INGEST_LOG_DEBUG, "compression.dictionary auto: %s saves %.1f%% on the last %u small files probed (%llu "
             "bytes: %llu with it, %llu without); %.1f%% at best", a->dict_name, saved_pct(p->with, p->without),
             p->n, (unsigned long long)p->raw, (unsigned long long)p->with, (unsigned long long)p->without, best_pct);
    if ((g < 1.0 + (p->best - 1.0) / 2.0 || g < PROBE_GAIN_MIN) && p->windows >= p->gap) {
        prog_log(INGEST_LOG_INFO, "compression.dictionary auto: %s saves %.1f%% on the last %u small files probed "
                 "(%.1f%% at best): training a new one from the next small files", a->dict_name,
                 saved_pct(p->with, p->without), p->n, best_pct);
        p->retraining = 1;
        p->windows = 0;
        if (p->gap < PROBE_GAP_MAX)
            p->gap *= 2;
    }
    p->n = 0;
    p->raw = p->with = p->without = 0;
}

static int retraining(const agent *a) { return a->auto_probe != NULL && a->auto_probe->retraining; }

static void samples_drop(agent *a)
{
    if (a->auto_samples != NULL)
        samples_free(a->auto_samples);
    free(a->auto_samples);
    a->auto_samples = NULL;
}

int agent_dict_auto_sample(agent *a, const char *dir, const char *rel, uint64_t size)
{
    if (size < AUTO_FILE_MIN || size > AUTO_FILE_MAX || a->cfg->transport != INGEST_TRANSPORT_TCP || !a->dict_auto)
        return 0;
    char full_path[PATH_MAX];
    if ((size_t)snprintf(full_path, sizeof(full_path), "%s/%s", dir, rel) >= sizeof(full_path))
        return 0;
    if (a->dict != NULL && !retraining(a)) {
        probe_file(a, full_path, size);
        return 0;
    }
    samples *sm = a->auto_samples;
    if (sm == NULL) {
        sm = a->auto_samples = calloc(1, sizeof(*sm));
        if (sm == NULL || samples_alloc(sm) < 0) {
            samples_drop(a);
            return 0;
        }
        sm->next = AUTO_SAMPLES_MIN;
    }
    if (full(sm))
        return 0;
    size_t src = SIZE_MAX;
    for (size_t i = 0; i < a->cfg->sources_count && src == SIZE_MAX; i++)
        if (strcmp(a->cfg->sources[i].path, dir) == 0)
            src = i;
    const unsigned k = kind_of(sm, src, rel);
    if (!kind_room(sm, k))
        return 0;
    const unsigned n0 = sm->n;
    take_fd(sm, open_sample(AT_FDCWD, full_path), size, k, AUTO_BYTES_MAX / 2);
    return sm->n > n0;
}

int agent_dict_auto_ready(const agent *a)
{
    const samples *sm = a->auto_samples;
    /* at the count it waits for, or when no more can come (the kinds' caps may stop it below that count) */
    return sm != NULL && (a->dict == NULL || retraining(a)) && sm->n > 0 && sm->next != UINT_MAX &&
           (sm->n >= sm->next || saturated(sm));
}

/*
 * Whether a dictionary trained from sm would beat the one in use: one trained from every other file of sm
 * is tried, against the one in use, on the files between, each compressed alone (a dictionary always
 * looks good on the files it learnt).  1 by 5% at least, 0 not, -1 no telling yet (ZDICT found too little,
 * or out of memory); said.  The probes start over afterwards.
 */
static int held_out(agent *a, const samples *sm)
{
    probe *p = probe_get(a); /* (its codec, made again after an earlier trial) */
    if (p == NULL)
        return -1;
    int rc = -1;
    void *d = NULL;
    size_t n = 0;
    uint32_t id = 0;
    unsigned used = 0;
    if (p->codec == NULL)
        goto out;
    const int t = train_kinds(a, sm, 1, 0, &d, &n, &id, &used);
    if (t == AUTO_NOMEM)
        goto out;
    if (t < 0) {
        prog_log(INGEST_LOG_DEBUG, "compression.dictionary auto: a trial from %u files: %s", used,
                 ingest_ctx_errmsg(a->ctx));
        goto out;
    }
    if (ingest_codec_add_dict(p->codec, d, n, &id) < 0)
        goto out;
    uint64_t cur = 0, cand = 0, plain = 0;
    const size_t cap = ingest_codec_bound(AUTO_FILE_MAX);
    uint8_t *enc = p->buf + AUTO_FILE_MAX;
    const uint8_t *src = sm->buf;
    for (unsigned i = 0; i < sm->n; src += sm->sizes[i], i++) {
        size_t l1 = 0, l2 = 0, l0 = 0;
        if (i % 2 == 0)
            continue;
        if (ingest_codec_use_dict(p->codec, p->dict_id) < 0 ||
            ingest_codec_encode(p->codec, src, sm->sizes[i], enc, cap, &l1) < 0 ||
            ingest_codec_use_dict(p->codec, id) < 0 || ingest_codec_encode(p->codec, src, sm->sizes[i], enc, cap, &l2) < 0 ||
            ingest_codec_use_dict(p->codec, 0) < 0 || ingest_codec_encode(p->codec, src, sm->sizes[i], enc, cap, &l0) < 0)
            goto out;
        cur += l1;
        cand += l2;
        plain += l0;
    }
    rc = cand * 100 <= cur * 95;
    prog_log(INGEST_LOG_INFO, "compression.dictionary auto: one trained from %u of the small files sampled saves "
             "%.1f%% on the other %u, the one in use %.1f%%: %s", used, saved_pct(cand, plain), sm->n - used,
             saved_pct(cur, plain), rc ? "training a new one from all of them" : "keeping the one in use");
out:
    ingest_buf_free(a->ctx, d);
    ingest_codec_destroy(p->codec); /* the probes start over, with a codec of the one in use alone */
    p->codec = NULL;
    p->dict = NULL;
    return rc;
}

/*
 * The dictionary d (n bytes) replaces the one in use, in the agent's codec (the batches' senders hold the
 * codec; no edge, whose encoders follow it, may be there) and in path; when it does not load, the old one
 * stays (-1, said).
 */
static int replace(agent *a, uint8_t *d, size_t n, const char *path)
{
    uint8_t *old = a->dict;
    const size_t oldn = a->dict_len;
    const uint32_t old_id = ingest_dict_id(old, oldn);
    a->dict = NULL;
    if (a->auto_probe != NULL)
        a->auto_probe->dict = NULL; /* (the new one may have the old one's address) */
    /* a new one with the old one's id (ids are 32 bits of a hash) takes its place in the codec */
    const int same_id = ingest_dict_id(d, n) == old_id;
    if (same_id)
        (void)ingest_codec_remove_dict(a->codec, old_id);
    if (keep(a, d, n, path) < 0) {
        a->dict = old;
        a->dict_len = oldn; /* (its name is path all the same) */
        if (same_id && ingest_codec_add_dict(a->codec, old, oldn, NULL) < 0)
            prog_log(INGEST_LOG_ERROR, "compression.dictionary auto: %s does not load again: %s", a->dict_name,
                     ingest_ctx_errmsg(a->ctx));
        (void)ingest_codec_use_dict(a->codec, old_id);
        prog_log(INGEST_LOG_INFO, "compression.dictionary auto: keeping %s", a->dict_name);
        return -1;
    }
    if (!same_id)
        (void)ingest_codec_remove_dict(a->codec, old_id);
    free(old);
    if (a->auto_probe != NULL)
        a->auto_probe->replaced++;
    return 0;
}

int agent_dict_auto_again(agent *a)
{
    samples *sm = a->auto_samples;
    const int again = retraining(a);
    if ((a->dict != NULL && !again) || sm == NULL)
        return 0;
    char path[PATH_MAX];
    auto_path(a, path, sizeof(path));
    uint8_t *d = NULL;
    size_t n = 0;
    const int h = again ? held_out(a, sm) : 1;
    if (h == 0) {
        a->auto_probe->retraining = 0;
        samples_drop(a);
        return 0;
    }
    const int t = h < 0 ? 0 : train_from(a, sm, 1, again ? "taken since the last one stopped saving"
                                                           : "taken since the start", &d, &n);
    if (t <= 0) {
        /* ZDICT wants more: try again with twice as many, until no more can be taken */
        sm->next = saturated(sm) ? UINT_MAX : sm->n * 2;
        if (again && sm->next == UINT_MAX) {
            prog_log(INGEST_LOG_INFO, "compression.dictionary auto: keeping %s", a->dict_name);
            a->auto_probe->retraining = 0;
            samples_drop(a);
        }
        return t;
    }
    samples_drop(a);
    /* the next connection offers it (the dictionary is a session feature): this one ends, its edge too (no
     * batch is pending here), before the codec the edge borrows takes the dictionary */
    disconnect_core(a);
    ingest_edge_destroy(a->net.edge);
    a->net.edge = NULL;
    if (!again) {
        if (keep(a, d, n, path) < 0)
            return -1;
        prog_log(INGEST_LOG_INFO, "compression.dictionary auto: offered from the next connection on");
        return 1;
    }
    a->auto_probe->retraining = 0;
    if (replace(a, d, n, path) < 0)
        return -1;
    prog_log(INGEST_LOG_INFO, "compression.dictionary auto: offered from the next connection on");
    return 1;
}

void agent_dict_status_get(const agent *a, agent_dict_status *st)
{
    memset(st, 0, sizeof(*st));
    st->is_auto = a->dict_auto;
    if (a->dict != NULL) {
        st->id = ingest_dict_id(a->dict, a->dict_len);
        st->bytes = a->dict_len;
    }
    st->sampling = a->auto_samples != NULL;
    const probe *p = a->auto_probe;
    if (p != NULL) {
        st->retrains = p->replaced;
        if (p->dict == a->dict && p->last > 0) { /* windows of the one in use */
            st->probed = 1;
            st->last_pct = 100.0 * (1.0 - 1.0 / p->last);
            st->best_pct = 100.0 * (1.0 - 1.0 / p->best);
        }
    }
}

void agent_dict_auto_free(agent *a)
{
    samples_drop(a);
    probe *p = a->auto_probe;
    if (p != NULL) {
        ingest_codec_destroy(p->codec);
        free(p->buf);
        free(p);
    }
    a->auto_probe = NULL;
}
