/*
 * Internal helpers shared by every libingest module: the allocation seam,
 * error reporting and logging.  Depends on nothing but the public common
 * header; every module depends on it.
 */
#ifndef INGEST_INTERNAL_H
#define INGEST_INTERNAL_H

#include "ingest/common.h"

#include <stdarg.h>
#include <stdbool.h>

#define INGEST__ERRMSG_MAX 512

struct ingest_ctx_s {
    ingest_allocator alloc;
    ingest_log_fn log_cb;
    void *log_ud;
    int log_level;
    char errmsg[INGEST__ERRMSG_MAX];
};

#if defined(__GNUC__)
#define INGEST__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define INGEST__PRINTF(a, b)
#endif

/* The allocation seam: the only place the library allocates memory. */
void *ingest__malloc(ingest_ctx *ctx, size_t size);
void *ingest__calloc(ingest_ctx *ctx, size_t n, size_t size);
void ingest__free(ingest_ctx *ctx, void *ptr);
char *ingest__strdup(ingest_ctx *ctx, const char *s);
/* Grow or shrink ptr (old_size bytes) to new_size: a new block, the bytes copied, the old one freed.
 * NULL (ptr untouched) when out of memory; ptr may be NULL. */
void *ingest__realloc(ingest_ctx *ctx, void *ptr, size_t old_size, size_t new_size);

/*
 * Record a failure's detail in the context and return code, so that
 * `return ingest__fail(ctx, INGEST_EIO, "open %s: %s", p, strerror(e));`
 * reports and forwards in one line.  ctx may be NULL.
 */
int ingest__fail(ingest_ctx *ctx, int code, const char *fmt, ...) INGEST__PRINTF(3, 4);
/* Convert an errno value to an INGEST_E* code. */
int ingest__errno(int err);

/*
 * transport/kafka.c: 1 when librdkafka reads value for property name as
 * it reads kept for property as (an alias or another spelling of the same
 * setting, e.g. acks=ALL and request.required.acks=-1), 0 when not, -1
 * when it cannot tell (it refuses one of them).
 */
int ingest__kafka_same_setting(const char *name, const char *value, const char *as, const char *kept);

/* Value of a hex digit (either case), or -1. */
int ingest__hexval(char c);

/*
 * Refuse a key file that others can read (keys.c): fd is the open file,
 * what names it in the message ("secret key", "dedup key").  Returns 0 or
 * INGEST_EINVAL with "chmod 600 PATH" in the detail.
 */
int ingest__key_file_private(ingest_ctx *ctx, int fd, const char *path, const char *what);

/* Log through the context's callback; formats only when the level is on. */
void ingest__log(ingest_ctx *ctx, int level, const char *fmt, ...) INGEST__PRINTF(3, 4);

/*
 * libingest/beneath.c: the parent directory of rel (relative, no "." or ".."
 * component) below dirfd, opened without following a symlink on the way
 * (ELOOP then); *last is rel's last component, for openat(O_NOFOLLOW),
 * fstatat(AT_SYMLINK_NOFOLLOW) or readlinkat.  -1 with errno on failure.
 * ingest__lstat_beneath: fstatat(AT_SYMLINK_NOFOLLOW) of rel below the
 * directory root so resolved (0, or -1 with errno).
 */
struct stat;
int ingest__open_parent_beneath(int dirfd, const char *rel, const char **last);
int ingest__lstat_beneath(const char *root, const char *rel, struct stat *sb);

#define INGEST__FORWARD(expr)        \
    do {                             \
        const int rc__ = (expr);     \
        if (rc__ < 0)                \
            return rc__;             \
    } while (0)

/*
 * Bounded growable byte buffer.  Invariants: `buf` is NULL only while
 * cap == 0; len <= cap <= max.  Appending past max fails with
 * INGEST_ETOOBIG and leaves the buffer unchanged.
 */
typedef struct ingest__buf {
    ingest_ctx *ctx;
    uint8_t *buf;
    size_t len;
    size_t cap;
    size_t max;
} ingest__buf;

void ingest__buf_init(ingest__buf *b, ingest_ctx *ctx, size_t max);
int ingest__buf_reserve(ingest__buf *b, size_t extra);
int ingest__buf_append(ingest__buf *b, const void *data, size_t len);
int ingest__buf_printf(ingest__buf *b, const char *fmt, ...) INGEST__PRINTF(2, 3);
void ingest__buf_reset(ingest__buf *b);
void ingest__buf_free(ingest__buf *b);

/* Little-endian load/store, used by every on-disk and wire encoding. */
static inline void ingest__put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void ingest__put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void ingest__put_u64(uint8_t *p, uint64_t v)
{
    ingest__put_u32(p, (uint32_t)v);
    ingest__put_u32(p + 4, (uint32_t)(v >> 32));
}
static inline uint16_t ingest__get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t ingest__get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t ingest__get_u64(const uint8_t *p)
{
    return (uint64_t)ingest__get_u32(p) | ((uint64_t)ingest__get_u32(p + 4) << 32);
}

#endif
