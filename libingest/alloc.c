/*
 * The allocation seam: contexts and the only place the library allocates.
 * Every allocation goes through the context's allocator (malloc/free by
 * default), which is how tests inject failures.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static void *default_alloc(void *opaque, size_t size)
{
    (void)opaque;
    return malloc(size);
}

static void default_free(void *opaque, void *ptr)
{
    (void)opaque;
    free(ptr);
}

ingest_ctx *ingest_ctx_create(const ingest_allocator *alloc)
{
    ingest_allocator a = { default_alloc, default_free, NULL };
    if (alloc != NULL) {
        if (alloc->alloc == NULL || alloc->free == NULL)
            return NULL;
        a = *alloc;
    }
    ingest_ctx *ctx = a.alloc(a.opaque, sizeof(*ctx));
    if (ctx == NULL)
        return NULL;
    memset(ctx, 0, sizeof(*ctx));
    ctx->alloc = a;
    ctx->log_level = INGEST_LOG_WARN;
    return ctx;
}

void ingest_ctx_destroy(ingest_ctx *ctx)
{
    if (ctx == NULL)
        return;
    const ingest_allocator a = ctx->alloc;
    a.free(a.opaque, ctx);
}

void *ingest__malloc(ingest_ctx *ctx, size_t size)
{
    if (size == 0)
        size = 1;
    return ctx->alloc.alloc(ctx->alloc.opaque, size);
}

void *ingest__calloc(ingest_ctx *ctx, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = ingest__malloc(ctx, n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

void ingest__free(ingest_ctx *ctx, void *ptr)
{
    if (ptr != NULL)
        ctx->alloc.free(ctx->alloc.opaque, ptr);
}

char *ingest__strdup(ingest_ctx *ctx, const char *s)
{
    const size_t n = strlen(s) + 1;
    char *p = ingest__malloc(ctx, n);
    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

void *ingest__realloc(ingest_ctx *ctx, void *ptr, size_t old_size, size_t new_size)
{
    void *p = ingest__malloc(ctx, new_size);
    if (p == NULL)
        return NULL;
    if (ptr != NULL) {
        memcpy(p, ptr, old_size < new_size ? old_size : new_size);
        ingest__free(ctx, ptr);
    }
    return p;
}
