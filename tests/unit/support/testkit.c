/* Helpers shared by the unit tests (testkit.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testkit.h"

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
