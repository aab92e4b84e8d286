/* The receiver's dictionary store: see dicts.h. */
#include "../internal.h"
#include "ingest/core.h"
#include "ingest/codec.h"

#include <stdlib.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEX_LEN (2 * INGEST_DICT_HASH_BYTES)
#define SUFFIX ".zdict"
#define TMP_SUFFIX ".tmp"

typedef struct entry {
    uint8_t hash[INGEST_DICT_HASH_BYTES];
    size_t len;
    uint8_t *bytes;
    unsigned refs; /* lookups not released: sessions whose codecs refer to bytes */
    uint64_t used; /* ds->clock when last looked up or added: the least recent goes first */
    char owner[INGEST_DICTSTORE_OWNER_MAX + 1]; /* the device whose add stored it this run ("": loaded, or none) */
} entry;

struct ingest_dictstore {
    ingest_ctx *ctx; /* for log lines only */
    ingest_metric *held_gauge; /* set to the lookups held at each change, under the lock (NULL: none) */
    pthread_mutex_t lock;   /* the entries (lookups and releases take only this) */
    pthread_mutex_t adding; /* one add at a time, its file's write and fsync included, outside lock */
    char dir[4200];
    entry e[INGEST_DICTSTORE_MAX];
    unsigned n;
    size_t bytes;
    uint64_t clock;
};

static entry *find(ingest_dictstore *ds, const uint8_t hash[INGEST_DICT_HASH_BYTES])
{
    for (unsigned i = 0; i < ds->n; i++)
        if (memcmp(ds->e[i].hash, hash, INGEST_DICT_HASH_BYTES) == 0)
            return &ds->e[i];
    return NULL;
}

/* The file name of the dictionary named hash: "{64 hex}.zdict". */
static void file_name(const uint8_t hash[INGEST_DICT_HASH_BYTES], char name[HEX_LEN + sizeof(SUFFIX)])
{
    ingest_to_hex(hash, INGEST_DICT_HASH_BYTES, name);
    memcpy(name + HEX_LEN, SUFFIX, sizeof(SUFFIX));
}

/* "{64 hex}.zdict": 1 and the hash it names. */
static int parse_name(const char *name, uint8_t hash[INGEST_DICT_HASH_BYTES])
{
    if (strlen(name) != HEX_LEN + strlen(SUFFIX) || strcmp(name + HEX_LEN, SUFFIX) != 0)
        return 0;
    for (size_t i = 0; i < INGEST_DICT_HASH_BYTES; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            const char c = name[2 * i + (size_t)k];
            if (c >= '0' && c <= '9')
                v = v * 16 + (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                v = v * 16 + (unsigned)(c - 'a' + 10);
            else
                return 0;
        }
        hash[i] = (uint8_t)v;
    }
    return 1;
}

/* A dictionary the codec accepts (id in its header, well-formed tables): 1, else 0 with why. */
static int usable(const uint8_t *bytes, size_t len, char *why, size_t cap)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_codec *c = NULL;
    int ok = 0;
    if (ctx == NULL || ingest_codec_create(ctx, 1, &c) < 0)
        snprintf(why, cap, "out of memory");
    else if (ingest_codec_add_dict_decode_ref(c, bytes, len, NULL) < 0)
        snprintf(why, cap, "%s", ingest_ctx_errmsg(ctx));
    else
        ok = 1;
    ingest_codec_destroy(c);
    ingest_ctx_destroy(ctx);
    return ok;
}

/* Read and check one stored file; 0 held, -1 skipped (logged). */
static int load_one(ingest_dictstore *ds, const char *name, const uint8_t hash[INGEST_DICT_HASH_BYTES])
{
    char path[4400], why[512] = "";
    snprintf(path, sizeof(path), "%s/%s", ds->dir, name);
    uint8_t *buf = NULL;
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(why, sizeof(why), "%s", strerror(errno));
        goto skip;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > (off_t)INGEST_DICT_MAX_BYTES) {
        snprintf(why, sizeof(why), "not a regular file of 1..%u bytes", INGEST_DICT_MAX_BYTES);
        goto skip;
    }
    const size_t len = (size_t)st.st_size;
    if (ds->n == INGEST_DICTSTORE_MAX || len > INGEST_DICTSTORE_MAX_BYTES - ds->bytes) {
        snprintf(why, sizeof(why), "past the store's bounds (%d dictionaries, %u bytes)", INGEST_DICTSTORE_MAX,
                 INGEST_DICTSTORE_MAX_BYTES);
        goto skip;
    }
    if ((buf = ingest__malloc(ds->ctx, len)) == NULL) {
        snprintf(why, sizeof(why), "out of memory");
        goto skip;
    }
    size_t got = 0;
    while (got < len) {
        const ssize_t r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            snprintf(why, sizeof(why), "read: %s", r < 0 ? strerror(errno) : "shorter than it was");
            goto skip;
        }
        got += (size_t)r;
    }
    uint8_t h[INGEST_DICT_HASH_BYTES];
    ingest_dict_hash(buf, len, h);
    if (memcmp(h, hash, sizeof(h)) != 0) {
        snprintf(why, sizeof(why), "its bytes do not have the hash its name says (damaged)");
        goto skip;
    }
    if (!usable(buf, len, why, sizeof(why)))
        goto skip;
    close(fd);
    entry *e = &ds->e[ds->n++];
    memcpy(e->hash, hash, sizeof(e->hash));
    e->len = len;
    e->bytes = buf;
    e->refs = 0;
    e->used = ++ds->clock; /* (set again once all are loaded) */
    e->owner[0] = '\0';
    ds->bytes += len;
    return 0;
skip:
    ingest__log(ds->ctx, INGEST_LOG_WARN, "dictionary %s skipped: %s", path, why);
    if (fd >= 0)
        close(fd);
    ingest__free(ds->ctx, buf);
    return -1;
}

/* A stored file found at open: its name and when it was last used (its mtime, set at each lookup). */
typedef struct found {
    char *name;
    int64_t mtime_ns;
} found;

/* The most recently used first (then by name): the ones that fit the bounds are those devices offered last. */
static int cmp_found(const void *a, const void *b)
{
    const found *x = a, *y = b;
    if (x->mtime_ns != y->mtime_ns)
        return x->mtime_ns > y->mtime_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

int ingest_dictstore_open(ingest_ctx *ctx, const char *dir, ingest_dictstore **out)
{
    *out = NULL;
    if (strlen(dir) >= sizeof(((ingest_dictstore *)0)->dir))
        return ingest__fail(ctx, INGEST_EINVAL, "dictionary store %s: path too long", dir);
    ingest_dictstore *ds = ingest__calloc(ctx, 1, sizeof(*ds));
    if (ds == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "dictionary store: out of memory");
    ds->ctx = ctx;
    pthread_mutex_init(&ds->lock, NULL);
    pthread_mutex_init(&ds->adding, NULL);
    snprintf(ds->dir, sizeof(ds->dir), "%s", dir);
    if (mkdir(ds->dir, 0700) != 0 && errno != EEXIST) {
        const int e = errno;
        ingest_dictstore_close(ds);
        return ingest__fail(ctx, ingest__errno(e), "%s: %s", dir, strerror(e));
    }
    DIR *d = opendir(ds->dir);
    if (d == NULL) {
        const int e = errno;
        ingest_dictstore_close(ds);
        return ingest__fail(ctx, ingest__errno(e), "%s: %s", dir, strerror(e));
    }
    /* Names first, sorted, so which files fit the bounds does not depend on readdir's order. */
    found *names = NULL;
    size_t n = 0, cap = 0;
    unsigned skipped = 0;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *nm = de->d_name;
        uint8_t h[INGEST_DICT_HASH_BYTES];
        const size_t l = strlen(nm);
        if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0)
            continue;
        if (nm[0] == '.' && l > strlen(TMP_SUFFIX) && strcmp(nm + l - strlen(TMP_SUFFIX), TMP_SUFFIX) == 0) {
            (void)unlinkat(dirfd(d), nm, 0); /* a write a crash interrupted: ours, never renamed */
            continue;
        }
        if (!parse_name(nm, h)) {
            ingest__log(ctx, INGEST_LOG_WARN, "%s/%s: not a dictionary file name ({64 hex digits}.zdict); ignored", ds->dir, nm);
            skipped++;
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            found *p = ingest__realloc(ctx, names, n * sizeof(*p), cap * sizeof(*p));
            if (p == NULL)
                break;
            names = p;
        }
        struct stat st;
        const int ok = fstatat(dirfd(d), nm, &st, AT_SYMLINK_NOFOLLOW) == 0;
        names[n].mtime_ns = ok ? ingest_time_ns(&st.st_mtim) : 0;
        if ((names[n].name = ingest__strdup(ctx, nm)) == NULL)
            break;
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof(*names), cmp_found);
    /* The most recent first, each on its own: a damaged, oversized or odd file is skipped and takes no
     * room, and one past the bounds does not keep a smaller, older one out.  Then their use order
     * (entry.used) is made their files': the most recently used is the last to go. */
    for (size_t i = 0; i < n; i++) {
        uint8_t h[INGEST_DICT_HASH_BYTES];
        if (parse_name(names[i].name, h) && load_one(ds, names[i].name, h) != 0)
            skipped++;
    }
    for (unsigned i = 0; i < ds->n; i++)
        ds->e[i].used = (uint64_t)(ds->n - i);
    ds->clock = ds->n;
    for (size_t i = 0; i < n; i++)
        ingest__free(ctx, names[i].name);
    ingest__free(ctx, names);
    ingest__log(ctx, INGEST_LOG_INFO, "dictionaries: %u loaded from %s (%zu bytes)%s", ds->n, ds->dir, ds->bytes,
                skipped ? "; some files were skipped, see above" : "");
    *out = ds;
    return 0;
}

void ingest_dictstore_close(ingest_dictstore *ds)
{
    if (ds == NULL)
        return;
    for (unsigned i = 0; i < ds->n; i++)
        ingest__free(ds->ctx, ds->e[i].bytes);
    pthread_mutex_destroy(&ds->lock);
    pthread_mutex_destroy(&ds->adding);
    ingest__free(ds->ctx, ds);
}

unsigned ingest_dictstore_count(ingest_dictstore *ds)
{
    pthread_mutex_lock(&ds->lock);
    const unsigned n = ds->n;
    pthread_mutex_unlock(&ds->lock);
    return n;
}

/* Entry e sent or looked up by device (NULL: none): one another device uses too is the fleet's, out of the
 * share of the device that added it.  Under the lock. */
static void used_by(entry *e, const char *device)
{
    if (device != NULL && e->owner[0] != '\0' && strncmp(e->owner, device, INGEST_DICTSTORE_OWNER_MAX) != 0)
        e->owner[0] = '\0';
}

/* The lookups not released.  Under the lock. */
static unsigned held_locked(const ingest_dictstore *ds)
{
    unsigned n = 0;
    for (unsigned i = 0; i < ds->n; i++)
        n += ds->e[i].refs;
    return n;
}

unsigned ingest_dictstore_held(ingest_dictstore *ds)
{
    pthread_mutex_lock(&ds->lock);
    const unsigned n = held_locked(ds);
    pthread_mutex_unlock(&ds->lock);
    return n;
}

void ingest_dictstore_set_held_metric(ingest_dictstore *ds, ingest_metric *gauge)
{
    pthread_mutex_lock(&ds->lock);
    ds->held_gauge = gauge;
    ingest_metric_set(gauge, NULL, (int64_t)held_locked(ds));
    pthread_mutex_unlock(&ds->lock);
}

const uint8_t *ingest_dictstore_find(ingest_dictstore *ds, const char *device, const uint8_t hash[INGEST_DICT_HASH_BYTES],
                                     size_t len)
{
    if (ds == NULL)
        return NULL; /* no store: a session uses what it receives, and nothing is kept */
    pthread_mutex_lock(&ds->lock);
    entry *e = find(ds, hash);
    const uint8_t *p = NULL;
    if (e != NULL && e->len == len) {
        p = e->bytes;
        e->refs++;
        e->used = ++ds->clock;
        used_by(e, device);
        if (ds->held_gauge != NULL)
            ingest_metric_set(ds->held_gauge, NULL, (int64_t)held_locked(ds));
    }
    pthread_mutex_unlock(&ds->lock);
    if (p != NULL) { /* its file's mtime says when it was last used, for the next open (a hint: failures ignored) */
        char path[4400], name[HEX_LEN + sizeof(SUFFIX)];
        file_name(hash, name);
        snprintf(path, sizeof(path), "%s/%s", ds->dir, name);
        (void)utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW);
    }
    return p;
}

void ingest_dictstore_release(ingest_dictstore *ds, const uint8_t *bytes)
{
    if (ds == NULL || bytes == NULL)
        return;
    pthread_mutex_lock(&ds->lock);
    for (unsigned i = 0; i < ds->n; i++)
        if (ds->e[i].bytes == bytes && ds->e[i].refs > 0) {
            ds->e[i].refs--;
            break;
        }
    if (ds->held_gauge != NULL)
        ingest_metric_set(ds->held_gauge, NULL, (int64_t)held_locked(ds));
    pthread_mutex_unlock(&ds->lock);
}

/* How many entries device owner added this run, and the least recently used of them no session holds
 * (ds->n: none).  Under the lock. */
static unsigned owned(const ingest_dictstore *ds, const char *owner, unsigned *lru)
{
    unsigned k = 0;
    *lru = ds->n;
    if (owner[0] == '\0')
        return 0;
    for (unsigned i = 0; i < ds->n; i++)
        if (strcmp(ds->e[i].owner, owner) == 0) {
            k++;
            if (ds->e[i].refs == 0 && (*lru == ds->n || ds->e[i].used < ds->e[*lru].used))
                *lru = i;
        }
    return k;
}

/*
 * Room for len more bytes and one more dictionary, without removing anything: 1 when the entries no session
 * holds, were they all gone, would leave it.  Under the lock.
 */
static int room_possible(const ingest_dictstore *ds, size_t len)
{
    unsigned free_n = INGEST_DICTSTORE_MAX - ds->n;
    size_t free_bytes = INGEST_DICTSTORE_MAX_BYTES - ds->bytes;
    for (unsigned i = 0; i < ds->n; i++)
        if (ds->e[i].refs == 0) {
            free_n++;
            free_bytes += ds->e[i].len;
        }
    return free_n >= 1 && len <= free_bytes;
}

/* Remove entry i, memory and file.  0, or -1 with why (its file could not be removed).  Under the lock. */
static int drop_entry(ingest_dictstore *ds, unsigned i, const char *because, char *why, size_t whycap)
{
    char name[HEX_LEN + sizeof(SUFFIX)];
    file_name(ds->e[i].hash, name);
    const int fd = open(ds->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || (unlinkat(fd, name, 0) != 0 && errno != ENOENT)) {
        snprintf(why, whycap, "%s/%s (%s) cannot be removed: %s", ds->dir, name, because, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    ingest__log(ds->ctx, INGEST_LOG_INFO, "dictionary %.16s removed from the store %s (%zu bytes)", name, because,
                ds->e[i].len);
    ds->bytes -= ds->e[i].len;
    ingest__free(ds->ctx, ds->e[i].bytes);
    ds->e[i] = ds->e[--ds->n];
    return 0;
}

/*
 * Make room for len more bytes and one more dictionary: the least recently used that no session holds go,
 * their files too (a device that offers one again sends it again).  Called once room_possible said yes and
 * the new file is written, so it removes only what it must.  1 when there is room, else 0 with why.
 * Under the lock.
 */
static int make_room(ingest_dictstore *ds, size_t len, char *why, size_t whycap)
{
    while (ds->n == INGEST_DICTSTORE_MAX || len > INGEST_DICTSTORE_MAX_BYTES - ds->bytes) {
        unsigned lru = ds->n;
        for (unsigned i = 0; i < ds->n; i++)
            if (ds->e[i].refs == 0 && (lru == ds->n || ds->e[i].used < ds->e[lru].used))
                lru = i;
        if (lru == ds->n) {
            snprintf(why, whycap, "the store is full (%u dictionaries, %zu bytes, all in use on sessions; bounds %d "
                     "and %u)", ds->n, ds->bytes, INGEST_DICTSTORE_MAX, INGEST_DICTSTORE_MAX_BYTES);
            return 0;
        }
        if (drop_entry(ds, lru, "to make room: the least recently offered", why, whycap) != 0)
            return 0;
    }
    return 1;
}

/* 1 (why set) when device owner has its share of entries and every one of them is held (owned's mine, lru). */
static int share_full(const ingest_dictstore *ds, const char *owner, unsigned mine, unsigned lru, char *why,
                      size_t whycap)
{
    if (mine < INGEST_DICTSTORE_PER_DEVICE || lru != ds->n)
        return 0;
    snprintf(why, whycap, "device %s already has %u dictionaries in the store, all in use on sessions", owner, mine);
    return 1;
}

/* Write bytes to path durably: temporary file, fsync, rename, fsync of the directory.  0, or -1 with why. */
static int write_durable(const char *dir, const char *name, const uint8_t *bytes, size_t len, char *why,
                         size_t whycap)
{
    char path[4400], tmp[4400];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s/.%s%s", dir, name, TMP_SUFFIX);
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        snprintf(why, whycap, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    size_t put = 0;
    while (put < len) {
        const ssize_t w = write(fd, bytes + put, len - put);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        put += (size_t)w;
    }
    if (put != len || fsync(fd) != 0) {
        snprintf(why, whycap, "%s: %s", tmp, strerror(errno ? errno : EIO));
        close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        snprintf(why, whycap, "rename to %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        snprintf(why, whycap, "fsync %s: %s", dir, strerror(errno));
        if (dfd >= 0)
            close(dfd);
        unlink(path); /* (not stored: no entry; a crash may leave the file, a whole and valid one) */
        return -1;
    }
    close(dfd);
    return 0;
}

int ingest_dictstore_add(ingest_dictstore *ds, const char *device, const uint8_t hash[INGEST_DICT_HASH_BYTES],
                         const uint8_t *bytes, size_t len, char *why, size_t whycap)
{
    int rc = -1;
    uint8_t *copy = NULL;
    if (ds == NULL) {
        snprintf(why, whycap, "this core keeps no dictionaries (no store)");
        return -1;
    }
    if (!usable(bytes, len, why, whycap))
        return -1; /* (as a file that would be skipped at the next start) */
    /* One add at a time, file included: two devices sending the same dictionary store it once.  Only adds
     * put entries in or take them out, so under adding the entries stay while lock is let go for the
     * write and its fsyncs, and sessions' lookups do not wait for the disk; what lookups change meanwhile
     * (which entries are held) is looked at again before anything is removed. */
    pthread_mutex_lock(&ds->adding);
    pthread_mutex_lock(&ds->lock);
    entry *have = find(ds, hash);
    if (have != NULL) {
        have->used = ++ds->clock; /* offered again: used again */
        used_by(have, device);
        rc = 0;
        goto out;
    }
    char owner[INGEST_DICTSTORE_OWNER_MAX + 1];
    snprintf(owner, sizeof(owner), "%s", device != NULL ? device : "");
    /* A device keeps at most INGEST_DICTSTORE_PER_DEVICE of those it added: its own least recently used goes
     * first, so that one device offering new ones over and over turns over its own, not the fleet's. */
    unsigned mine_lru;
    unsigned mine = owned(ds, owner, &mine_lru);
    if (share_full(ds, owner, mine, mine_lru, why, whycap))
        goto out;
    if (len > INGEST_DICTSTORE_MAX_BYTES || !room_possible(ds, len)) { /* (counts its own unheld ones too) */
        snprintf(why, whycap, "the store is full (%u dictionaries, %zu bytes, all in use on sessions; bounds %d and %u)",
                 ds->n, ds->bytes, INGEST_DICTSTORE_MAX, INGEST_DICTSTORE_MAX_BYTES);
        goto out;
    }
    pthread_mutex_unlock(&ds->lock);
    copy = ingest__malloc(ds->ctx, len);
    char name[HEX_LEN + sizeof(SUFFIX)];
    file_name(hash, name);
    /* written before anything is removed: a failed write costs the store nothing */
    const int written = copy != NULL ? write_durable(ds->dir, name, bytes, len, why, whycap) : -1;
    pthread_mutex_lock(&ds->lock);
    if (copy == NULL)
        snprintf(why, whycap, "out of memory");
    if (written != 0)
        goto out;
    memcpy(copy, bytes, len);
    mine = owned(ds, owner, &mine_lru); /* (a lookup may hold now what it did not hold before the write) */
    if (share_full(ds, owner, mine, mine_lru, why, whycap) ||
        (mine >= INGEST_DICTSTORE_PER_DEVICE &&
         drop_entry(ds, mine_lru, "to keep its device's share: that device's least recently offered", why,
                    whycap) != 0) ||
        !make_room(ds, len, why, whycap)) {
        char path[4400];
        snprintf(path, sizeof(path), "%s/%s", ds->dir, name);
        (void)unlink(path); /* not held: the next open must not prefer it to the ones kept */
        goto out;
    }
    entry *e = &ds->e[ds->n++];
    memcpy(e->hash, hash, sizeof(e->hash));
    e->len = len;
    e->bytes = copy;
    e->refs = 0;
    e->used = ++ds->clock;
    memcpy(e->owner, owner, sizeof(e->owner));
    ds->bytes += len;
    copy = NULL;
    rc = 0;
out:
    pthread_mutex_unlock(&ds->lock);
    pthread_mutex_unlock(&ds->adding);
    ingest__free(ds->ctx, copy);
    return rc;
}
