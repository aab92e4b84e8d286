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

#define VARIANTS (INGEST_DICTSTORE_MAX + 2)

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

static int file_exists(const char *dir, const uint8_t hash[INGEST_DICT_HASH_BYTES])
{
    char hex[2 * INGEST_DICT_HASH_BYTES + 1], path[4096];
    ingest_to_hex(hash, INGEST_DICT_HASH_BYTES, hex);
    snprintf(path, sizeof(path), "%s/%s.zdict", dir, hex);
    return access(path, F_OK) == 0;
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
        assert_int_equal(ingest_dictstore_add(ds, v.hash[i], v.bytes[i], v.len, why, sizeof(why)), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    const uint8_t *held[INGEST_DICTSTORE_MAX];
    for (unsigned i = 0; i < 10; i++) {
        held[i] = ingest_dictstore_find(ds, v.hash[i], v.len);
        assert_non_null(held[i]);
        assert_memory_equal(held[i], v.bytes[i], v.len);
        if (i >= 5)
            ingest_dictstore_release(ds, held[i]);
    }
    assert_null(ingest_dictstore_find(ds, v.hash[0], v.len - 1)); /* the length must match */
    /* the 65th: number 10, added before the lookups and never looked up, is the least recently used */
    assert_int_equal(ingest_dictstore_add(ds, v.hash[64], v.bytes[64], v.len, why, sizeof(why)), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    assert_null(ingest_dictstore_find(ds, v.hash[10], v.len));
    assert_false(file_exists(dir, v.hash[10]));
    for (unsigned i = 0; i < 10; i++) {
        const uint8_t *p = ingest_dictstore_find(ds, v.hash[i], v.len);
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
        const uint8_t *p = ingest_dictstore_find(ds, v.hash[i], v.len);
        if (p != NULL)
            held[nheld++] = p;
    }
    assert_int_equal(nheld, INGEST_DICTSTORE_MAX);
    assert_int_equal(ingest_dictstore_add(ds, v.hash[65], v.bytes[65], v.len, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "in use"));
    assert_false(file_exists(dir, v.hash[65]));
    /* one released: it makes room */
    ingest_dictstore_release(ds, held[3]);
    assert_int_equal(ingest_dictstore_add(ds, v.hash[65], v.bytes[65], v.len, why, sizeof(why)), 0);
    assert_null(ingest_dictstore_find(ds, v.hash[3], v.len)); /* the one released went */
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
    for (unsigned i = 0; i < INGEST_DICTSTORE_MAX + 1; i++) {
        char hex[2 * INGEST_DICT_HASH_BYTES + 1], path[4096];
        ingest_to_hex(v.hash[i], INGEST_DICT_HASH_BYTES, hex);
        snprintf(path, sizeof(path), "%s/%s.zdict", dir, hex);
        const int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, v.bytes[i], v.len), (ssize_t)v.len);
        const struct timespec t[2] = { { 1700000000 + (time_t)i * 60, 0 }, { 1700000000 + (time_t)i * 60, 0 } };
        assert_int_equal(futimens(fd, t), 0);
        close(fd);
    }
    /* number 0 is the oldest; then make number 1 the newest of all */
    char hex[2 * INGEST_DICT_HASH_BYTES + 1], path[4096];
    ingest_to_hex(v.hash[1], INGEST_DICT_HASH_BYTES, hex);
    snprintf(path, sizeof(path), "%s/%s.zdict", dir, hex);
    assert_int_equal(utimensat(AT_FDCWD, path, NULL, 0), 0);
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_dictstore *ds = NULL;
    assert_int_equal(ingest_dictstore_open(ctx, dir, &ds), 0);
    assert_int_equal(ingest_dictstore_count(ds), INGEST_DICTSTORE_MAX);
    assert_null(ingest_dictstore_find(ds, v.hash[0], v.len));
    assert_true(file_exists(dir, v.hash[0])); /* skipped, never deleted */
    const uint8_t *p1 = ingest_dictstore_find(ds, v.hash[1], v.len), *p64 = ingest_dictstore_find(ds, v.hash[64], v.len);
    assert_non_null(p1);
    assert_non_null(p64);
    ingest_dictstore_release(ds, p1);
    ingest_dictstore_release(ds, p64);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
