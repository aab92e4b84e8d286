/* Helpers shared by the unit tests (testkit.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testkit.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static void *fa_alloc(void *opaque, size_t size)
{
    struct failing *f = opaque;
    f->count++;
    if (f->fail_at != 0 && f->count == f->fail_at) {
        f->failed++;
        return NULL;
    }
    return test_malloc(size);
}

static void fa_free(void *opaque, void *ptr)
{
    (void)opaque;
    if (ptr != NULL)
        test_free(ptr);
}

ingest_ctx *make_ctx(struct failing *f)
{
    const ingest_allocator a = { fa_alloc, fa_free, f };
    ingest_ctx *ctx = ingest_ctx_create(&a);
    assert_non_null(ctx);
    return ctx;
}

uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

void gen_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(rng_next(&s) >> 24);
}

void write_random_file(const char *dir, const char *name, size_t n, uint64_t seed)
{
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    uint8_t *buf = malloc(n ? n : 1);
    assert_non_null(buf);
    gen_random(buf, n, seed);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    free(buf);
}

static int remove_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void remove_tree(const char *dir)
{
    nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
