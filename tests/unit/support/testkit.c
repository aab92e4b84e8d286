/* Helpers shared by the unit tests (testkit.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testkit.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static const char *landed_src, *landed_name;
static int landed_equal, landed_files;

static int landed_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    /* temporary files of a batch being dropped (".{name}.ingest-tmp-...") are not landed files */
    if (flag != FTW_F || strstr(p, "/_manifests/") != NULL || p[ftw->base] == '.')
        return 0;
    landed_files++;
    if (landed_name != NULL && strcmp(p + ftw->base, landed_name) != 0)
        return 0;
    char sp[1024];
    snprintf(sp, sizeof(sp), "%s/%s", landed_src, p + ftw->base);
    FILE *a = fopen(p, "rb"), *b = fopen(sp, "rb");
    int same = a != NULL && b != NULL, ca, cb;
    while (same) {
        ca = fgetc(a);
        cb = fgetc(b);
        same &= ca == cb;
        if (ca == EOF || cb == EOF)
            break;
    }
    if (a)
        fclose(a);
    if (b)
        fclose(b);
    landed_equal += same;
    return 0;
}

int count_landed(const char *bronze, const char *src, const char *name, int *files)
{
    landed_src = src;
    landed_name = name;
    /* A refused batch's ACK comes before its lander removes the directories it made (serve.c): a walk
     * that meets one going fails with ENOENT, and is made again once the tree has settled. */
    int rc = -1;
    for (int tries = 0; tries < 200 && rc != 0; tries++) {
        if (tries > 0) {
            assert_int_equal(errno, ENOENT);
            usleep(10 * 1000);
        }
        landed_equal = landed_files = 0;
        rc = nftw(bronze, landed_cb, 16, FTW_PHYS);
    }
    assert_int_equal(rc, 0);
    if (files != NULL)
        *files = landed_files;
    return landed_equal;
}
