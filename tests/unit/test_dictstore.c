/* The receiver's dictionary store (include/ingest/core.h): lookups held, room made, use order kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest.h"
#include "support/testkit.h"

#define VARIANTS (INGEST_DICTSTORE_MAX + 6)

typedef struct dicts {
    uint8_t *bytes[VARIANTS];
    size_t len;
    uint8_t hash[VARIANTS][INGEST_DICT_HASH_BYTES];
} dicts;

/* One trained dictionary, then variants of it: its last content byte changed, so each has a hash of its own. */
static void make_dicts(dicts *v)
{
    enum { N = 200 };
    size_t sizes[N], total = 0;
    for (unsigned i = 0; i < N; i++)
        total += sizes[i] = 400 + (i * 29) % 500;
    char *smp = malloc(total);
    assert_non_null(smp);
    size_t off = 0;
    for (unsigned i = 0; i < N; off += sizes[i], i++) {
        size_t k = 0;
        while (k < sizes[i]) {
            char line[96];
            const int w = snprintf(line, sizeof(line), "{\"ts\":%u,\"sensor\":\"pump-%u\",\"value\":%u.%u}\n",
                                   1700000000u + i * 7 + (unsigned)k, i % 13, (unsigned)(k * 31) % 1000, i % 10);
            const size_t take = (size_t)w < sizes[i] - k ? (size_t)w : sizes[i] - k;
            memcpy(smp + off + k, line, take);
            k += take;
        }
    }
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    void *d = NULL;
    uint32_t id = 0;
    assert_int_equal(ingest_dict_train(ctx, smp, sizes, N, 4096, &d, &v->len, &id), 0);
    for (unsigned i = 0; i < VARIANTS; i++) {
        v->bytes[i] = malloc(v->len);
        assert_non_null(v->bytes[i]);
        memcpy(v->bytes[i], d, v->len);
        v->bytes[i][v->len - 1] = (uint8_t)(v->bytes[i][v->len - 1] + 1 + i);
        v->bytes[i][v->len - 2] = (uint8_t)(v->bytes[i][v->len - 2] + i / 251);
        ingest_dict_hash(v->bytes[i], v->len, v->hash[i]);
    }
    ingest_buf_free(ctx, d);
    ingest_ctx_destroy(ctx);
    free(smp);
}

static void free_dicts(dicts *v)
{
    for (unsigned i = 0; i < VARIANTS; i++)
        free(v->bytes[i]);
}

/* A valid dictionary of INGEST_DICT_MAX_BYTES: variant i with content appended (a dictionary's content runs
 * to its end).  Its hash goes to hash; free() it. */
static uint8_t *make_big(const dicts *v, unsigned i, uint8_t hash[INGEST_DICT_HASH_BYTES])
{
    const size_t blen = INGEST_DICT_MAX_BYTES;
    uint8_t *b = malloc(blen);
    assert_non_null(b);
    memcpy(b, v->bytes[i], v->len);
    for (size_t k = v->len; k < blen; k++)
        b[k] = (uint8_t)('a' + (k * 7 + i) % 26);
    ingest_dict_hash(b, blen, hash);
    return b;
}

static void path_of(const char *dir, const uint8_t hash[INGEST_DICT_HASH_BYTES], char *path, size_t cap)
{
    char hex[2 * INGEST_DICT_HASH_BYTES + 1];
    ingest_to_hex(hash, INGEST_DICT_HASH_BYTES, hex);
    snprintf(path, cap, "%s/%s.zdict", dir, hex);
}

static void write_file(const char *path, const uint8_t *bytes, size_t len, time_t mtime)
{
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    size_t put = 0;
    while (put < len) {
        const ssize_t w = write(fd, bytes + put, len - put);
        assert_true(w > 0);
        put += (size_t)w;
    }
    const struct timespec t[2] = { { mtime, 0 }, { mtime, 0 } };
    assert_int_equal(futimens(fd, t), 0);
    close(fd);
}

static time_t mtime_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mtim.tv_sec;
}

static int file_exists(const char *dir, const uint8_t hash[INGEST_DICT_HASH_BYTES])
{
    char path[4096];
    path_of(dir, hash, path, sizeof(path));
    return access(path, F_OK) == 0;
}

/* Variants 0..n-1 written to dir as stored files, number i last used at 1700000000 + 60 i (0 the oldest). */
static void store_files(const char *dir, const dicts *v, unsigned n)
{
    char path[4096];
    for (unsigned i = 0; i < n; i++) {
        path_of(dir, v->hash[i], path, sizeof(path));
        write_file(path, v->bytes[i], v->len, 1700000000 + (time_t)i * 60);
    }
}


/*
 * 64 stored; 5 looked up and held, 5 looked up and released; a 65th: the least recently used that none
 * holds goes (memory and file), the held and recently used stay.  Every one held: a new one is refused
 * with why.  Released and reopened: 64 loaded.
 */
static void test_room_made(void **state)
{
    (void)state;
    dicts v;
    make_dicts(&v);
    char dir[] = "/tmp/ingest-dictstore.XXXXXX";
    assert_non_null(mkdtemp(dir));
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_dictstore *ds = NULL;
    char why[256];
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    for (unsigned i = 0; i < INGEST_DICTSTORE_MAX; i++)
        assert_int_equal(ingest_dictstore_add(ds, NULL, v.hash[i], v.bytes[i], v.len, why, sizeof(why)), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    const uint8_t *held[INGEST_DICTSTORE_MAX];
    for (unsigned i = 0; i < 10; i++) {
        held[i] = ingest_dictstore_find(ds, NULL, v.hash[i], v.len);
        assert_non_null(held[i]);
        assert_memory_equal(held[i], v.bytes[i], v.len);
        if (i >= 5)
            ingest_dictstore_release(ds, held[i]);
    }
    assert_null(ingest_dictstore_find(ds, NULL, v.hash[0], v.len - 1)); /* the length must match */
    assert_int_equal(ingest_dictstore_held(ds), 5);
    /* the 65th: number 10, added before the lookups and never looked up, is the least recently used */
    assert_int_equal(ingest_dictstore_add(ds, NULL, v.hash[64], v.bytes[64], v.len, why, sizeof(why)), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    assert_null(ingest_dictstore_find(ds, NULL, v.hash[10], v.len));
    assert_false(file_exists(dir, v.hash[10]));
    for (unsigned i = 0; i < 10; i++) {
        const uint8_t *p = ingest_dictstore_find(ds, NULL, v.hash[i], v.len);
        assert_ptr_equal(p, held[i]); /* held ones never moved or freed */
        ingest_dictstore_release(ds, p);
        if (i < 5)
            ingest_dictstore_release(ds, held[i]); /* the first lookup's hold */
        assert_true(file_exists(dir, v.hash[i]));
    }
    assert_true(file_exists(dir, v.hash[64]));
    /* every one held: nothing can go, the next is refused and says why */
    unsigned nheld = 0;
    for (unsigned i = 0; i < VARIANTS; i++) {
        const uint8_t *p = ingest_dictstore_find(ds, NULL, v.hash[i], v.len);
        if (p != NULL)
            held[nheld++] = p;
    }
    assert_int_equal(nheld, INGEST_DICTSTORE_MAX);
    assert_int_equal(ingest_dictstore_add(ds, NULL, v.hash[65], v.bytes[65], v.len, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "in use"));
    assert_false(file_exists(dir, v.hash[65]));
    /* one released: it makes room */
    ingest_dictstore_release(ds, held[3]);
    assert_int_equal(ingest_dictstore_add(ds, NULL, v.hash[65], v.bytes[65], v.len, why, sizeof(why)), 0);
    assert_null(ingest_dictstore_find(ds, NULL, v.hash[3], v.len)); /* the one released went */
    for (unsigned i = 0; i < nheld; i++)
        if (i != 3)
            ingest_dictstore_release(ds, held[i]);
    ingest_dictstore_close(ds);
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    ingest_dictstore_close(ds);
    ingest_ctx_destroy(ctx);
    remove_tree(dir);
    free_dicts(&v);
}

/* More files than the bounds at open: the most recently used (mtime) are loaded, the oldest skipped. */
static void test_open_recent_first(void **state)
{
    (void)state;
    dicts v;
    make_dicts(&v);
    char dir[] = "/tmp/ingest-dictstore.XXXXXX";
    assert_non_null(mkdtemp(dir));
    store_files(dir, &v, INGEST_DICTSTORE_MAX + 1);
    /* number 0 is the oldest; then make number 1 the newest of all */
    char path[4096];
    path_of(dir, v.hash[1], path, sizeof(path));
    assert_int_equal(utimensat(AT_FDCWD, path, NULL, 0), 0);
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_dictstore *ds = NULL;
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    assert_null(ingest_dictstore_find(ds, NULL, v.hash[0], v.len));
    assert_true(file_exists(dir, v.hash[0])); /* skipped, never deleted */
    const uint8_t *p1 = ingest_dictstore_find(ds, NULL, v.hash[1], v.len), *p64 = ingest_dictstore_find(ds, NULL, v.hash[64], v.len);
    assert_non_null(p1);
    assert_non_null(p64);
    ingest_dictstore_release(ds, p1);
    ingest_dictstore_release(ds, p64);
    ingest_dictstore_close(ds);
    ingest_ctx_destroy(ctx);
    remove_tree(dir);
    free_dicts(&v);
}

/*
 * A lookup sets its file's mtime, and a reopened store keeps the use order the mtimes say: the next add
 * removes the file least recently looked up, not the one least recently written.
 */
static void test_use_survives_reopen(void **state)
{
    (void)state;
    dicts v;
    make_dicts(&v);
    char dir[] = "/tmp/ingest-dictstore.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[4096];
    store_files(dir, &v, INGEST_DICTSTORE_MAX); /* number 0 the oldest */
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_dictstore *ds = NULL;
    char why[256];
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    /* number 0 looked up: its mtime becomes now */
    path_of(dir, v.hash[0], path, sizeof(path));
    assert_int_equal(mtime_of(path), 1700000000);
    const uint8_t *p = ingest_dictstore_find(ds, NULL, v.hash[0], v.len);
    assert_non_null(p);
    ingest_dictstore_release(ds, p);
    assert_true(mtime_of(path) > 1700000000 + 64 * 60);
    ingest_dictstore_close(ds);
    /* reopened: number 1 is now the least recently used, and the next add removes it, not number 0 */
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    assert_int_equal(ingest_dictstore_add(ds, NULL, v.hash[64], v.bytes[64], v.len, why, sizeof(why)), 0);
    assert_false(file_exists(dir, v.hash[1]));
    assert_true(file_exists(dir, v.hash[0]));
    assert_true(file_exists(dir, v.hash[2]));
    p = ingest_dictstore_find(ds, NULL, v.hash[0], v.len);
    assert_non_null(p);
    ingest_dictstore_release(ds, p);
    assert_null(ingest_dictstore_find(ds, NULL, v.hash[1], v.len));
    ingest_dictstore_close(ds);
    ingest_ctx_destroy(ctx);
    remove_tree(dir);
    free_dicts(&v);
}

/*
 * At open, files that cannot be loaded take no room: a newest file larger than any dictionary may be, and
 * a newest damaged one, leave every good one loaded.
 */
static void test_open_skips_bad(void **state)
{
    (void)state;
    dicts v;
    make_dicts(&v);
    char dir[] = "/tmp/ingest-dictstore.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[4096];
    store_files(dir, &v, INGEST_DICTSTORE_MAX);
    /* the newest two: an oversized file under a dictionary's name, and one whose bytes are not its name's */
    const size_t big = (size_t)INGEST_DICTSTORE_MAX_BYTES + 1;
    uint8_t *junk = calloc(1, big);
    assert_non_null(junk);
    path_of(dir, v.hash[64], path, sizeof(path));
    write_file(path, junk, big, 1800000000);
    free(junk);
    path_of(dir, v.hash[65], path, sizeof(path));
    write_file(path, v.bytes[0], v.len, 1800000060);
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_dictstore *ds = NULL;
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    for (unsigned i = 0; i < INGEST_DICTSTORE_MAX; i++) {
        const uint8_t *p = ingest_dictstore_find(ds, NULL, v.hash[i], v.len);
        assert_non_null(p);
        ingest_dictstore_release(ds, p);
    }
    assert_null(ingest_dictstore_find(ds, NULL, v.hash[65], v.len));
    ingest_dictstore_close(ds);
    remove_tree(dir);
    /* Past the bytes bound: 15 dictionaries of 4 MiB and a small one, the newest; then an older 4 MiB one,
     * which does not fit; then an older small one, which does and is loaded. */
    assert_non_null(mkdtemp(strcpy(dir, "/tmp/ingest-dictstore.XXXXXX")));
    uint8_t bhash[16][INGEST_DICT_HASH_BYTES];
    for (unsigned i = 0; i < 16; i++) {
        uint8_t *b = make_big(&v, i, bhash[i]);
        path_of(dir, bhash[i], path, sizeof(path));
        write_file(path, b, INGEST_DICT_MAX_BYTES, i < 15 ? 1800000000 + (time_t)i : 1700000100);
        free(b);
    }
    path_of(dir, v.hash[20], path, sizeof(path));
    write_file(path, v.bytes[20], v.len, 1900000000);
    path_of(dir, v.hash[21], path, sizeof(path));
    write_file(path, v.bytes[21], v.len, 1700000000);
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    assert_int_equal(ingest_dictstore_count(ds), 17);
    const uint8_t *p = ingest_dictstore_find(ds, NULL, v.hash[21], v.len);
    assert_non_null(p); /* the older small one, past the one that did not fit */
    ingest_dictstore_release(ds, p);
    assert_null(ingest_dictstore_find(ds, NULL, bhash[15], INGEST_DICT_MAX_BYTES));
    ingest_dictstore_close(ds);
    ingest_ctx_destroy(ctx);
    remove_tree(dir);
    free_dicts(&v);
}

/*
 * An add the store cannot make room for removes nothing: 15 held dictionaries of 4 MiB and a small held
 * one leave less than 4 MiB even without the two small ones no session holds, so a 16th of 4 MiB is
 * refused and those two stay, in memory and on disk.  Once one big one is released, the add removes the
 * least recently used unheld ones it needs, and keeps what it does not need.
 */
static void test_refused_add_removes_nothing(void **state)
{
    (void)state;
    dicts v;
    make_dicts(&v);
    enum { BIG = 17 };
    const size_t blen = INGEST_DICT_MAX_BYTES;
    uint8_t *big[BIG], bhash[BIG][INGEST_DICT_HASH_BYTES];
    for (unsigned i = 0; i < BIG; i++)
        big[i] = make_big(&v, i, bhash[i]);
    char dir[] = "/tmp/ingest-dictstore.XXXXXX";
    assert_non_null(mkdtemp(dir));
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_dictstore *ds = NULL;
    char why[256];
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    /* two small ones, unheld and the least recently used; then a small one and 15 big ones, held */
    assert_int_equal(ingest_dictstore_add(ds, NULL, v.hash[40], v.bytes[40], v.len, why, sizeof(why)), 0);
    assert_int_equal(ingest_dictstore_add(ds, NULL, v.hash[41], v.bytes[41], v.len, why, sizeof(why)), 0);
    const uint8_t *held[BIG];
    assert_int_equal(ingest_dictstore_add(ds, NULL, v.hash[42], v.bytes[42], v.len, why, sizeof(why)), 0);
    const uint8_t *small_held = ingest_dictstore_find(ds, NULL, v.hash[42], v.len);
    assert_non_null(small_held);
    for (unsigned i = 0; i < 15; i++) {
        assert_int_equal(ingest_dictstore_add(ds, NULL, bhash[i], big[i], blen, why, sizeof(why)), 0);
        held[i] = ingest_dictstore_find(ds, NULL, bhash[i], blen);
        assert_non_null(held[i]);
    }
    assert_int_equal(ingest_dictstore_count(ds), 18);
    why[0] = '\0';
    assert_int_equal(ingest_dictstore_add(ds, NULL, bhash[15], big[15], blen, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "in use"));
    assert_int_equal(ingest_dictstore_count(ds), 18);
    assert_true(file_exists(dir, v.hash[40]));
    assert_true(file_exists(dir, v.hash[41]));
    assert_false(file_exists(dir, bhash[15]));
    /* one big one released: 4 MiB more is free once the unheld go, and the add makes room */
    ingest_dictstore_release(ds, held[14]);
    assert_int_equal(ingest_dictstore_add(ds, NULL, bhash[15], big[15], blen, why, sizeof(why)), 0);
    assert_true(file_exists(dir, bhash[15]));
    /* 4 MiB had to go: the least recently used unheld first (40, 41), then big 14, which made enough */
    assert_false(file_exists(dir, v.hash[40]));
    assert_false(file_exists(dir, v.hash[41]));
    assert_false(file_exists(dir, bhash[14]));
    assert_int_equal(ingest_dictstore_count(ds), 16);
    ingest_dictstore_release(ds, small_held);
    for (unsigned i = 0; i < 14; i++)
        ingest_dictstore_release(ds, held[i]);
    ingest_dictstore_close(ds);
    ingest_ctx_destroy(ctx);
    remove_tree(dir);
    for (unsigned i = 0; i < BIG; i++)
        free(big[i]);
    free_dicts(&v);
}

/*
 * One device offering new dictionaries over and over turns over its own share, not the fleet's: with the
 * store full, a device past INGEST_DICTSTORE_PER_DEVICE loses its own least recently used, while a device
 * under its share takes the store's least recently used.  Its share all held: refused, nothing removed.
 */
static void test_device_share(void **state)
{
    (void)state;
    dicts v;
    make_dicts(&v);
    char dir[] = "/tmp/ingest-dictstore.XXXXXX";
    assert_non_null(mkdtemp(dir));
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_dictstore *ds = NULL;
    char why[256];
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    const unsigned fleet = INGEST_DICTSTORE_MAX - INGEST_DICTSTORE_PER_DEVICE;
    for (unsigned i = 0; i < fleet; i++) /* the fleet's, each from a device of its own */
    {
        char dev[32];
        snprintf(dev, sizeof(dev), "dev-%u", i);
        assert_int_equal(ingest_dictstore_add(ds, dev, v.hash[i], v.bytes[i], v.len, why, sizeof(why)), 0);
    }
    for (unsigned i = fleet; i < INGEST_DICTSTORE_MAX; i++)
        assert_int_equal(ingest_dictstore_add(ds, "churn", v.hash[i], v.bytes[i], v.len, why, sizeof(why)), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    /* two more from the device at its share: its own two oldest go, the fleet's (older still) stay */
    for (unsigned i = 0; i < 2; i++)
        assert_int_equal(ingest_dictstore_add(ds, "churn", v.hash[64 + i], v.bytes[64 + i], v.len, why, sizeof(why)),
                         0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    assert_false(file_exists(dir, v.hash[fleet]));
    assert_false(file_exists(dir, v.hash[fleet + 1]));
    for (unsigned i = 0; i < fleet; i++)
        assert_true(file_exists(dir, v.hash[i]));
    /* its share all held: refused with why, nothing removed */
    const uint8_t *held[INGEST_DICTSTORE_PER_DEVICE];
    unsigned nheld = 0;
    for (unsigned i = fleet + 2; i < 66; i++) {
        held[nheld] = ingest_dictstore_find(ds, NULL, v.hash[i], v.len);
        assert_non_null(held[nheld]);
        nheld++;
    }
    assert_int_equal(nheld, INGEST_DICTSTORE_PER_DEVICE);
    assert_int_equal(ingest_dictstore_add(ds, "churn", v.hash[66], v.bytes[66], v.len, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "device churn already has 8"));
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    assert_false(file_exists(dir, v.hash[66]));
    for (unsigned i = 0; i < nheld; i++)
        ingest_dictstore_release(ds, held[i]);
    /* one of its own that another device uses is the fleet's: out of its share.  With 7 of its own left, its
     * next add takes the store's least recently used (dev-0's); the one after, at its share again, its own
     * least recently used (fleet + 3), never the one the fleet uses now */
    const uint8_t *p = ingest_dictstore_find(ds, "dev-1", v.hash[fleet + 2], v.len);
    assert_non_null(p);
    ingest_dictstore_release(ds, p);
    assert_int_equal(ingest_dictstore_held(ds), 0);
    assert_int_equal(ingest_dictstore_add(ds, "churn", v.hash[67], v.bytes[67], v.len, why, sizeof(why)), 0);
    assert_false(file_exists(dir, v.hash[0]));
    assert_int_equal(ingest_dictstore_add(ds, "churn", v.hash[66], v.bytes[66], v.len, why, sizeof(why)), 0);
    assert_false(file_exists(dir, v.hash[fleet + 3]));
    assert_true(file_exists(dir, v.hash[fleet + 2]));
    assert_true(file_exists(dir, v.hash[1]));
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    /* a device under its share, the store full: the store's least recently used (dev-1's) goes */
    assert_int_equal(ingest_dictstore_add(ds, "other", v.hash[68], v.bytes[68], v.len, why, sizeof(why)), 0);
    assert_false(file_exists(dir, v.hash[1]));
    assert_true(file_exists(dir, v.hash[2]));
    ingest_dictstore_close(ds);
    ingest_ctx_destroy(ctx);
    remove_tree(dir);
    free_dicts(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_room_made),
        cmocka_unit_test(test_open_recent_first),
        cmocka_unit_test(test_use_survives_reopen),
        cmocka_unit_test(test_open_skips_bad),
        cmocka_unit_test(test_refused_add_removes_nothing),
        cmocka_unit_test(test_device_share),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
