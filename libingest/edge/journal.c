/*
 * The edge's batch journal and stability table (include/ingest/journal.h).
 * Tables in the agent's store (docs/storage.md):
 *
 *   journal_batches  key u64 seq big-endian
 *                    value: u8 version (2), u8 state, u16 id length,
 *                    u32 file count, u64 bytes, i64 created_ns (24 bytes),
 *                    the id, then per file u16 path length, u64 size,
 *                    i64 mtime_ns, i64 ctime_ns, u64 ino (34 bytes) and
 *                    the path.  Version 1 records (written before the
 *                    inode was kept) have 26-byte file heads, without ino;
 *                    they are read with ino 0 (unknown).
 *   journal_inflight key path (as the file table), value u64 seq big-endian
 *   journal_seen     key path, value u8 version (1), u8 flags, 6 zero
 *                    bytes, u64 size, i64 mtime_ns, i64 seen_ns (32 bytes)
 *
 * All little-endian unless said otherwise.
 */
#include "../store.h"
#include "ingest/journal.h"
#include "ingest/manifest.h"

#include <string.h>
#include <time.h>

#define J_VERSION 2   /* batch records written now */
#define J_VERSION_1 1 /* batch records without inodes, still read */
#define J_HEAD 24
#define J_FILE_HEAD 34
#define J_FILE_HEAD_1 26
#define SEEN_VERSION 1
#define SEEN_BYTES 32
#define SEEN_RENAMED 0x1u
#define SEEN_SKIPPED 0x2u /* reason in the high nibble */

struct ingest_journal_s {
    ingest_store *st;
    ingest_ctx *ctx;
    ingest_filetable *ft;
    ingest__dbi batches, inflight, seen;
};

int ingest_journal_open(ingest_store *st, ingest_filetable *ft, ingest_journal **out)
{
    *out = NULL;
    ingest_ctx *ctx = ingest__store_ctx(st);
    if (ft == NULL)
        return ingest__fail(ctx, INGEST_EINVAL, "journal: a file table is required");
    ingest_journal *j = ingest__calloc(ctx, 1, sizeof(*j));
    if (j == NULL)
        return ingest__fail(ctx, INGEST_ENOMEM, "journal: out of memory");
    j->st = st;
    j->ctx = ctx;
    j->ft = ft;
    int rc = ingest__store_db(st, "journal_batches", &j->batches);
    if (rc == 0)
        rc = ingest__store_db(st, "journal_inflight", &j->inflight);
    if (rc == 0)
        rc = ingest__store_db(st, "journal_seen", &j->seen);
    if (rc < 0) {
        ingest__free(ctx, j);
        return rc;
    }
    *out = j;
    return 0;
}

void ingest_journal_close(ingest_journal *j)
{
    if (j != NULL)
        ingest__free(j->ctx, j);
}

/* Decode a batch record; paths and id point into v (which must outlive *b's use). */
static int decode(ingest_journal *j, uint64_t seq, const uint8_t *v, size_t vl, ingest_journal_batch *b,
                  ingest_journal_file *files, char *strs)
{
    if (vl < J_HEAD || (v[0] != J_VERSION && v[0] != J_VERSION_1) || v[1] < INGEST_JOURNAL_PENDING ||
        v[1] > INGEST_JOURNAL_ACKED)
        return ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: batch %llu: malformed record header (%zu bytes)",
                            (unsigned long long)seq, vl);
    const size_t fhead = v[0] == J_VERSION_1 ? J_FILE_HEAD_1 : J_FILE_HEAD;
    const size_t idlen = ingest__get_u16(v + 2);
    const uint32_t n = ingest__get_u32(v + 4);
    if (idlen == 0 || idlen > INGEST_JOURNAL_ID_MAX || n == 0 || n > INGEST_JOURNAL_MAX_FILES ||
        vl - J_HEAD < idlen)
        return ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: batch %llu: bad id length %zu or file count %u",
                            (unsigned long long)seq, idlen, n);
    b->seq = seq;
    b->state = v[1];
    b->bytes = ingest__get_u64(v + 8);
    b->created_ns = (int64_t)ingest__get_u64(v + 16);
    b->nfiles = n;
    size_t off = J_HEAD, so = 0;
    if (memchr(v + off, '\0', idlen) != NULL)
        return ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: batch %llu: NUL in its id", (unsigned long long)seq);
    if (strs != NULL) {
        memcpy(strs, v + off, idlen);
        strs[idlen] = '\0';
        b->id = strs;
        so = idlen + 1;
    }
    off += idlen;
    for (uint32_t i = 0; i < n; i++) {
        if (vl - off < fhead)
            return ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: batch %llu: truncated at file %u",
                                (unsigned long long)seq, i);
        const size_t pl = ingest__get_u16(v + off);
        if (pl == 0 || pl > INGEST_MANIFEST_PATH_MAX || vl - off - fhead < pl)
            return ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: batch %llu: file %u: bad path length %zu",
                                (unsigned long long)seq, i, pl);
        if (files != NULL) {
            files[i].size = ingest__get_u64(v + off + 2);
            files[i].mtime_ns = (int64_t)ingest__get_u64(v + off + 10);
            files[i].ctime_ns = (int64_t)ingest__get_u64(v + off + 18);
            files[i].ino = fhead == J_FILE_HEAD ? ingest__get_u64(v + off + 26) : 0;
            memcpy(strs + so, v + off + fhead, pl);
            strs[so + pl] = '\0';
            if (memchr(strs + so, '\0', pl) != NULL)
                return ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: batch %llu: file %u: NUL in path",
                                    (unsigned long long)seq, i);
            files[i].path = strs + so;
            so += pl + 1;
        }
        off += fhead + pl;
    }
    if (off != vl)
        return ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: batch %llu: %zu trailing bytes",
                            (unsigned long long)seq, vl - off);
    b->files = files;
    return 0;
}

void ingest_journal_batch_free(ingest_journal *j, ingest_journal_batch *b)
{
    if (j != NULL && b != NULL)
        ingest__free(j->ctx, b);
}

int ingest_journal_get(ingest_journal *j, uint64_t seq, ingest_journal_batch **out)
{
    *out = NULL;
    uint8_t key[8];
    ingest__put_be64(key, seq);
    size_t vl = 0;
    uint8_t probe[1];
    int rc = ingest__store_get(j->st, j->batches, key, 8, probe, 0, &vl);
    if (rc < 0)
        return rc;
    uint8_t *v = ingest__malloc(j->ctx, vl ? vl : 1);
    if (v == NULL)
        return ingest__fail(j->ctx, INGEST_ENOMEM, "journal: out of memory (%zu bytes)", vl);
    size_t vl2 = 0;
    rc = ingest__store_get(j->st, j->batches, key, 8, v, vl, &vl2);
    ingest_journal_batch *b = NULL;
    if (rc == 0 && vl2 != vl)
        rc = ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: batch %llu changed while read", (unsigned long long)seq);
    ingest_journal_batch hdr;
    if (rc == 0)
        rc = decode(j, seq, v, vl, &hdr, NULL, NULL);
    if (rc == 0) {
        /* one block: the struct, the file array, then the NUL-terminated id and paths (<= vl bytes) */
        const size_t fsz = hdr.nfiles * sizeof(ingest_journal_file);
        b = ingest__malloc(j->ctx, sizeof(*b) + fsz + vl);
        if (b == NULL)
            rc = ingest__fail(j->ctx, INGEST_ENOMEM, "journal: out of memory (batch %llu)", (unsigned long long)seq);
        else
            rc = decode(j, seq, v, vl, b, (ingest_journal_file *)(b + 1), (char *)(b + 1) + fsz);
    }
    ingest__free(j->ctx, v);
    if (rc < 0) {
        ingest__free(j->ctx, b);
        return rc;
    }
    *out = b;
    return 0;
}

static int put_inflight(ingest_journal *j, const char *path, uint64_t seq)
{
    uint8_t key[INGEST__PATH_KEY_MAX], v[8];
    const size_t kl = ingest__path_key(path, key);
    ingest__put_be64(v, seq);
    return ingest__store_put(j->st, j->inflight, key, kl, v, 8);
}

/* Clear path's in-flight mark when it belongs to seq. */
static int clear_inflight(ingest_journal *j, const char *path, uint64_t seq)
{
    uint8_t key[INGEST__PATH_KEY_MAX], v[8];
    const size_t kl = ingest__path_key(path, key);
    size_t vl = 0;
    int rc = ingest__store_get(j->st, j->inflight, key, kl, v, sizeof(v), &vl);
    if (rc == INGEST_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    if (vl == 8 && ingest__get_be64(v) != seq)
        return 0;
    rc = ingest__store_del(j->st, j->inflight, key, kl);
    return rc == INGEST_ENOTFOUND ? 0 : rc;
}

/* ingest_journal_add and ingest_journal_add_sent: the record in state (PENDING or SENT). */
static int add_state(ingest_journal *j, uint64_t seq, const char *id, const ingest_journal_file *files, size_t n,
                     int state, bool renew)
{
    const size_t idlen = id != NULL ? strlen(id) : 0;
    if (idlen == 0 || idlen > INGEST_JOURNAL_ID_MAX)
        return ingest__fail(j->ctx, INGEST_EINVAL, "journal: batch id of %zu bytes (1..%d)", idlen,
                            INGEST_JOURNAL_ID_MAX);
    if (n == 0 || n > INGEST_JOURNAL_MAX_FILES)
        return ingest__fail(j->ctx, INGEST_EINVAL, "journal: batch %s: %zu files (1..%u)", id, n,
                            INGEST_JOURNAL_MAX_FILES);
    size_t total = J_HEAD + idlen;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t pl = files[i].path != NULL ? strlen(files[i].path) : 0;
        if (pl == 0 || pl > INGEST_MANIFEST_PATH_MAX)
            return ingest__fail(j->ctx, INGEST_EINVAL, "journal: batch %s: file %zu: path of %zu bytes", id, i, pl);
        total += J_FILE_HEAD + pl;
        bytes += files[i].size;
    }
    ingest_journal_batch *old = NULL;
    int rc = ingest_journal_get(j, seq, &old);
    if (rc == 0 && old->state != INGEST_JOURNAL_PENDING && !(renew && old->state == INGEST_JOURNAL_SENT)) {
        rc = ingest__fail(j->ctx, INGEST_EEXIST, "journal: batch %llu (%s) was already sent", (unsigned long long)seq,
                          old->id);
        goto out;
    }
    if (rc < 0 && rc != INGEST_ENOTFOUND)
        goto out;
    uint8_t *v = ingest__malloc(j->ctx, total);
    if (v == NULL) {
        rc = ingest__fail(j->ctx, INGEST_ENOMEM, "journal: out of memory (%zu bytes)", total);
        goto out;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    v[0] = J_VERSION;
    v[1] = (uint8_t)state;
    ingest__put_u16(v + 2, (uint16_t)idlen);
    ingest__put_u32(v + 4, (uint32_t)n);
    ingest__put_u64(v + 8, bytes);
    ingest__put_u64(v + 16, (uint64_t)(ingest_time_ns(&now)));
    memcpy(v + J_HEAD, id, idlen);
    size_t off = J_HEAD + idlen;
    for (size_t i = 0; i < n; i++) {
        const size_t pl = strlen(files[i].path);
        ingest__put_u16(v + off, (uint16_t)pl);
        ingest__put_u64(v + off + 2, files[i].size);
        ingest__put_u64(v + off + 10, (uint64_t)files[i].mtime_ns);
        ingest__put_u64(v + off + 18, (uint64_t)files[i].ctime_ns);
        ingest__put_u64(v + off + 26, files[i].ino);
        memcpy(v + off + J_FILE_HEAD, files[i].path, pl);
        off += J_FILE_HEAD + pl;
    }
    const size_t nold = old != NULL ? old->nfiles : 0;
    rc = ingest__store_write_begin(j->st, (unsigned)(2 * nold + n + 1));
    for (size_t i = 0; i < nold && rc == 0; i++)
        rc = clear_inflight(j, old->files[i].path, seq);
    uint8_t key[8];
    ingest__put_be64(key, seq);
    if (rc == 0)
        rc = ingest__store_put(j->st, j->batches, key, 8, v, total);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = put_inflight(j, files[i].path, seq);
    ingest__free(j->ctx, v);
    if (rc == 0)
        rc = ingest_store_commit(j->st);
out:
    ingest_journal_batch_free(j, old);
    return rc;
}

int ingest_journal_add(ingest_journal *j, uint64_t seq, const char *id, const ingest_journal_file *files, size_t n)
{
    return add_state(j, seq, id, files, n, INGEST_JOURNAL_PENDING, false);
}

int ingest_journal_add_sent(ingest_journal *j, uint64_t seq, const char *id, const ingest_journal_file *files,
                            size_t n)
{
    return add_state(j, seq, id, files, n, INGEST_JOURNAL_SENT, false);
}

int ingest_journal_renew(ingest_journal *j, uint64_t seq, const char *id)
{
    ingest_journal_batch *b = NULL;
    INGEST__FORWARD(ingest_journal_get(j, seq, &b));
    int rc;
    if (b->state != INGEST_JOURNAL_PENDING && b->state != INGEST_JOURNAL_SENT) {
        rc = ingest__fail(j->ctx, INGEST_EINVAL, "journal: batch %llu (%s) was acknowledged: not renewed",
                          (unsigned long long)seq, b->id);
    } else {
        rc = add_state(j, seq, id, b->files, b->nfiles, INGEST_JOURNAL_PENDING, true);
    }
    ingest_journal_batch_free(j, b);
    return rc;
}

static int seen_del(ingest_journal *j, const char *path)
{
    uint8_t key[INGEST__PATH_KEY_MAX];
    const size_t kl = ingest__path_key(path, key);
    const int rc = ingest__store_del(j->st, j->seen, key, kl);
    return rc == INGEST_ENOTFOUND ? 0 : rc;
}

int ingest_journal_set_state(ingest_journal *j, uint64_t seq, int state, const ingest_journal_file *files,
                             size_t n)
{
    if (state != INGEST_JOURNAL_SENT && state != INGEST_JOURNAL_ACKED)
        return ingest__fail(j->ctx, INGEST_EINVAL, "journal: batch %llu: bad state %d", (unsigned long long)seq,
                            state);
    uint8_t key[8];
    ingest__put_be64(key, seq);
    size_t vl = 0;
    uint8_t probe[1];
    int rc = ingest__store_get(j->st, j->batches, key, 8, probe, 0, &vl);
    if (rc < 0)
        return rc == INGEST_ENOTFOUND
                   ? ingest__fail(j->ctx, rc, "journal: no batch %llu", (unsigned long long)seq)
                   : rc;
    ingest_journal_batch *b = NULL;
    uint8_t *v = ingest__malloc(j->ctx, vl ? vl : 1);
    if (v == NULL)
        return ingest__fail(j->ctx, INGEST_ENOMEM, "journal: out of memory (%zu bytes)", vl);
    size_t vl2 = 0;
    rc = ingest__store_get(j->st, j->batches, key, 8, v, vl, &vl2);
    if (rc < 0)
        goto out;
    if ((rc = ingest_journal_get(j, seq, &b)) < 0)
        goto out;
    if (state < b->state) {
        rc = ingest__fail(j->ctx, INGEST_EINVAL, "journal: batch %llu: state %d -> %d goes backwards",
                          (unsigned long long)seq, b->state, state);
        goto out;
    }
    if (files == NULL) {
        files = b->files;
        n = b->nfiles;
    }
    v[1] = (uint8_t)state;
    const unsigned writes = state == INGEST_JOURNAL_ACKED ? (unsigned)(1 + n + 2 * b->nfiles) : 1;
    rc = ingest__store_write_begin(j->st, writes);
    if (rc == 0)
        rc = ingest__store_put(j->st, j->batches, key, 8, v, vl);
    if (state == INGEST_JOURNAL_ACKED) {
        for (size_t i = 0; i < n && rc == 0; i++) {
            const ingest_file_state fs = { files[i].size, files[i].mtime_ns, files[i].ctime_ns, 0, 0 };
            rc = ingest_filetable_put(j->ft, files[i].path, &fs);
        }
        for (size_t i = 0; i < b->nfiles && rc == 0; i++) {
            rc = clear_inflight(j, b->files[i].path, seq);
            if (rc == 0)
                rc = seen_del(j, b->files[i].path);
        }
    }
    if (rc == 0)
        rc = ingest_store_commit(j->st);
out:
    ingest__free(j->ctx, v);
    ingest_journal_batch_free(j, b);
    return rc;
}

int ingest_journal_remove(ingest_journal *j, uint64_t seq)
{
    ingest_journal_batch *b = NULL;
    int rc = ingest_journal_get(j, seq, &b);
    if (rc < 0)
        return rc;
    uint8_t key[8];
    ingest__put_be64(key, seq);
    rc = ingest__store_write_begin(j->st, (unsigned)(1 + b->nfiles));
    for (size_t i = 0; i < b->nfiles && rc == 0; i++)
        rc = clear_inflight(j, b->files[i].path, seq);
    if (rc == 0)
        rc = ingest__store_del(j->st, j->batches, key, 8);
    if (rc == 0)
        rc = ingest_store_commit(j->st);
    ingest_journal_batch_free(j, b);
    return rc;
}

typedef struct next_ud {
    uint64_t after, found;
    int have;
} next_ud;

static int next_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)val;
    (void)vlen;
    next_ud *n = ud;
    if (klen != 8)
        return 0;
    const uint64_t s = ingest__get_be64(key);
    if (s <= n->after)
        return 0;
    n->found = s;
    n->have = 1;
    return 1;
}

int ingest_journal_next(ingest_journal *j, uint64_t after, uint64_t *seq)
{
    uint8_t from[8];
    ingest__put_be64(from, after);
    next_ud n = { after, 0, 0 };
    const int rc = ingest__store_iter(j->st, j->batches, from, 8, false, next_cb, &n);
    if (rc < 0)
        return rc;
    if (n.have)
        *seq = n.found;
    return n.have;
}

typedef struct queued_ud {
    uint64_t batches, files, bytes;
} queued_ud;

static int queued_cb(void *ud, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    (void)key;
    (void)klen;
    queued_ud *q = ud;
    if (vlen < J_HEAD || val[1] == INGEST_JOURNAL_ACKED)
        return 0;
    q->batches++;
    q->files += ingest__get_u32(val + 4);
    q->bytes += ingest__get_u64(val + 8);
    return 0;
}

int ingest_journal_queued(ingest_journal *j, uint64_t *batches, uint64_t *files, uint64_t *bytes)
{
    queued_ud q = { 0, 0, 0 };
    const int rc = ingest__store_iter(j->st, j->batches, NULL, 0, false, queued_cb, &q);
    if (rc < 0)
        return rc;
    if (batches)
        *batches = q.batches;
    if (files)
        *files = q.files;
    if (bytes)
        *bytes = q.bytes;
    return 0;
}

int ingest_journal_inflight(ingest_journal *j, const char *path, uint64_t *seq)
{
    uint8_t key[INGEST__PATH_KEY_MAX], v[8];
    const size_t kl = ingest__path_key(path, key);
    size_t vl = 0;
    const int rc = ingest__store_get(j->st, j->inflight, key, kl, v, sizeof(v), &vl);
    if (rc == INGEST_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    if (vl != 8)
        return ingest__fail(j->ctx, INGEST_ECORRUPT, "journal: malformed in-flight mark for %s", path);
    if (seq != NULL)
        *seq = ingest__get_be64(v);
    return 1;
}

static int seen_put(ingest_journal *j, const uint8_t *key, size_t kl, unsigned flags, uint64_t size,
                    int64_t mtime_ns, int64_t now_ns)
{
    uint8_t v[SEEN_BYTES];
    memset(v, 0, sizeof(v));
    v[0] = SEEN_VERSION;
    v[1] = (uint8_t)flags;
    ingest__put_u64(v + 8, size);
    ingest__put_u64(v + 16, (uint64_t)mtime_ns);
    ingest__put_u64(v + 24, (uint64_t)now_ns);
    return ingest__store_put(j->st, j->seen, key, kl, v, sizeof(v));
}

int ingest_journal_stable(ingest_journal *j, const char *path, uint64_t size, int64_t mtime_ns, int64_t now_ns,
                          int64_t settle_ns, int64_t *wait_ns)
{
    uint8_t key[INGEST__PATH_KEY_MAX], v[SEEN_BYTES];
    const size_t kl = ingest__path_key(path, key);
    size_t vl = 0;
    int rc = ingest__store_get(j->st, j->seen, key, kl, v, sizeof(v), &vl);
    if (rc < 0 && rc != INGEST_ENOTFOUND)
        return rc;
    if (rc == 0 && vl == SEEN_BYTES && v[0] == SEEN_VERSION && ingest__get_u64(v + 8) == size &&
        (int64_t)ingest__get_u64(v + 16) == mtime_ns) {
        const int64_t since = (int64_t)ingest__get_u64(v + 24);
        if (v[1] & SEEN_SKIPPED)
            goto fresh;
        if (v[1] & SEEN_RENAMED)
            return 1;
        /* The clock went back since the record was made: how long the file has been quiet is
         * not known, so its settle time starts again (never a half-written file shipped at once). */
        if (now_ns < since || since < 0) /* (or a time before 1970: a damaged record) */
            goto fresh;
        if (now_ns - since >= settle_ns)
            return 1;
        if (wait_ns != NULL)
            *wait_ns = settle_ns - (now_ns - since);
        return 0;
    }
fresh:
    if (settle_ns <= 0)
        return 1;
    if ((rc = seen_put(j, key, kl, 0, size, mtime_ns, now_ns)) < 0)
        return rc;
    if (wait_ns != NULL)
        *wait_ns = settle_ns;
    return 0;
}

int ingest_journal_mark_renamed(ingest_journal *j, const char *path, uint64_t size, int64_t mtime_ns, int64_t now_ns)
{
    uint8_t key[INGEST__PATH_KEY_MAX];
    const size_t kl = ingest__path_key(path, key);
    return seen_put(j, key, kl, SEEN_RENAMED, size, mtime_ns, now_ns);
}

int ingest_journal_mark_skipped(ingest_journal *j, const char *path, uint64_t size, int64_t mtime_ns,
                                int64_t ctime_ns, uint32_t rules, int reason, int64_t now_ns)
{
    (void)now_ns; /* (a skipped record holds the ctime where a settle record holds its time) */
    if (reason < 1 || reason > 15)
        return ingest__fail(j->ctx, INGEST_EINVAL, "journal: skip reason %d out of 1..15", reason);
    if (rules == 0)
        return ingest__fail(j->ctx, INGEST_EINVAL, "journal: skip rules fingerprint 0");
    uint8_t key[INGEST__PATH_KEY_MAX], v[SEEN_BYTES];
    const size_t kl = ingest__path_key(path, key);
    memset(v, 0, sizeof(v));
    v[0] = SEEN_VERSION;
    v[1] = (uint8_t)(SEEN_SKIPPED | ((unsigned)reason << 4));
    ingest__put_u32(v + 2, rules);
    ingest__put_u64(v + 8, size);
    ingest__put_u64(v + 16, (uint64_t)mtime_ns);
    ingest__put_u64(v + 24, (uint64_t)ctime_ns);
    return ingest__store_put(j->st, j->seen, key, kl, v, sizeof(v));
}

int ingest_journal_skipped(ingest_journal *j, const char *path, uint64_t size, int64_t mtime_ns, int64_t ctime_ns,
                           uint32_t rules)
{
    uint8_t key[INGEST__PATH_KEY_MAX], v[SEEN_BYTES];
    const size_t kl = ingest__path_key(path, key);
    size_t vl = 0;
    const int rc = ingest__store_get(j->st, j->seen, key, kl, v, sizeof(v), &vl);
    if (rc == INGEST_ENOTFOUND)
        return 0;
    if (rc < 0)
        return rc;
    if (vl == SEEN_BYTES && v[0] == SEEN_VERSION && (v[1] & SEEN_SKIPPED) && ingest__get_u64(v + 8) == size &&
        (int64_t)ingest__get_u64(v + 16) == mtime_ns && (int64_t)ingest__get_u64(v + 24) == ctime_ns &&
        rules != 0 && ingest__get_u32(v + 2) == rules)
        return v[1] >> 4;
    return 0;
}

int ingest_journal_forget_seen(ingest_journal *j, const char *path) { return seen_del(j, path); }

int ingest_journal_flush(ingest_journal *j) { return ingest_store_commit(j->st); }

int ingest_journal_prune_seen(ingest_journal *j, int (*gone)(void *ud, const char *path), void *ud,
                              uint64_t *removed)
{
    INGEST__FORWARD(ingest_store_commit(j->st)); /* the records written so far, before they are looked at */
    return ingest__store_prune_paths(j->st, j->seen, gone, ud, removed);
}

uint64_t ingest_journal_seen_count(ingest_journal *j)
{
    uint64_t n = 0;
    return ingest__store_count(j->st, j->seen, &n) == 0 ? n : 0;
}
