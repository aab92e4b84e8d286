/* libingest: version, errors, contexts, allocators and logging. */
#ifndef INGEST_COMMON_H
#define INGEST_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define INGEST_API __attribute__((visibility("default")))
#define INGEST_WUR __attribute__((warn_unused_result))
#else
#define INGEST_API
#define INGEST_WUR
#endif

/*
 * Versioning.  The SONAME follows the major number; a major bump is an ABI
 * break and is kept rare.  INGEST_VERSION_NUMBER is MAJOR*10000 +
 * MINOR*100 + PATCH; compare it with ingest_version_number() to spot a
 * header/library mismatch.
 */
#define INGEST_VERSION_MAJOR 0
#define INGEST_VERSION_MINOR 1
#define INGEST_VERSION_PATCH 0
#define INGEST_VERSION_NUMBER \
    (INGEST_VERSION_MAJOR * 10000 + INGEST_VERSION_MINOR * 100 + INGEST_VERSION_PATCH)
#define INGEST_VERSION_HEX \
    ((INGEST_VERSION_MAJOR << 16) | (INGEST_VERSION_MINOR << 8) | INGEST_VERSION_PATCH)
#define INGEST_AT_LEAST_VERSION(x, y, z) \
    (INGEST_VERSION_HEX >= (((x) << 16) | ((y) << 8) | (z)))

INGEST_API unsigned ingest_version_number(void);
INGEST_API const char *ingest_version_string(void);

/*
 * Error codes.  New codes are added last; none is ever removed or
 * renumbered.
 */
enum {
    INGEST_OK = 0,
    INGEST_EINVAL = -1,    /* invalid argument or configuration */
    INGEST_ENOMEM = -2,    /* allocation failed */
    INGEST_EIO = -3,       /* I/O error from the operating system */
    INGEST_ECORRUPT = -4,  /* stored or received data is malformed */
    INGEST_ENOTFOUND = -5, /* no such entry */
    INGEST_ESTALE = -6,    /* entry points at a file changed or deleted */
    INGEST_ETOOBIG = -7,   /* a length exceeds its bound */
    INGEST_EMISMATCH = -8, /* content does not match its id or size */
    INGEST_EEXIST = -9,    /* refused to overwrite an existing object */
    INGEST_ECRYPTO = -10,  /* cryptographic failure (bad MAC, bad key) */
    INGEST_ENOSPC = -11,   /* out of space (disk, map, quota) */
    INGEST_EPROTO = -12,   /* protocol violation by the peer */
    INGEST_EAUTH = -13,    /* peer not authorized */
    INGEST_ETIMEDOUT = -14,/* operation timed out */
    INGEST_ECLOSED = -15,  /* connection closed */
    INGEST_EVERSION = -16, /* unsupported format or protocol version */
    INGEST_EBUSY = -17,    /* resource locked or in use */
    INGEST_EBATCHID = -18, /* a batch id the core landed before with other data: take a new one */
};

/* A static English name for an error code; never NULL. */
INGEST_API const char *ingest_strerror(int code);

/*
 * Allocator.  alloc and free must both be set.  alloc returns NULL on
 * failure; free accepts NULL.  Every allocation of the library made through
 * a context goes through its allocator (the libraries below it, LMDB, zstd
 * and libsodium, allocate with their own).
 */
typedef struct ingest_allocator {
    void *(*alloc)(void *opaque, size_t size);
    void (*free)(void *opaque, void *ptr);
    void *opaque;
} ingest_allocator;

enum {
    INGEST_LOG_ERROR = 0,
    INGEST_LOG_WARN = 1,
    INGEST_LOG_INFO = 2,
    INGEST_LOG_DEBUG = 3,
};

/* A log callback gets a level and a complete message without newline. */
typedef void (*ingest_log_fn)(void *userdata, int level, const char *msg);

typedef struct ingest_ctx_s ingest_ctx;

/*
 * Create a context.  alloc may be NULL for malloc/free.  The allocator is
 * copied.  Returns NULL only when the first allocation fails.
 */
INGEST_API ingest_ctx *ingest_ctx_create(const ingest_allocator *alloc) INGEST_WUR;
/* Destroy a context; NULL is accepted.  Handles made from it must be gone. */
INGEST_API void ingest_ctx_destroy(ingest_ctx *ctx);
/* Route library messages at or below `level` to cb (NULL: silence). */
INGEST_API void ingest_ctx_set_log(ingest_ctx *ctx, ingest_log_fn cb, void *userdata, int level);
/*
 * Detail of the last failure reported through this context ("" if none):
 * what failed and where, e.g. "index: data.mdb: mdb_put: MDB_MAP_FULL".
 * Valid until the next call on the context or its handles.
 */
INGEST_API const char *ingest_ctx_errmsg(const ingest_ctx *ctx);

/*
 * A span: a streaming cursor {ptr, size, pos} that stages pass along, as
 * zstd's ZSTD_inBuffer.  A stage consumes [pos, size) in part or whole and
 * advances pos.
 */
typedef struct ingest_span {
    const uint8_t *ptr;
    size_t size;
    size_t pos;
} ingest_span;

/* Hex helpers: out must hold 2*len+1 bytes; from_hex returns 0 or INGEST_EINVAL. */
INGEST_API void ingest_to_hex(const uint8_t *bin, size_t len, char *out);
INGEST_API int ingest_from_hex(const char *hex, size_t hexlen, uint8_t *out, size_t outlen);

/*
 * Escape text that a peer or a device controls (an ERROR or ACK message, a
 * file name) for a log line, so that it can neither break the line nor
 * drive the terminal: printable ASCII and valid UTF-8 stay as they are; a
 * backslash becomes "\\"; newline, return and tab become "\n", "\r",
 * "\t"; other control bytes and bytes that are not UTF-8 become "\xNN"; C1
 * controls, line and paragraph separators and bidirectional controls
 * (U+0080..U+009F, U+2028, U+2029, U+200E/F, U+202A..U+202E,
 * U+2066..U+2069) become "\u{XXXX}".  out (cap >= 4) always ends in a NUL;
 * text that does not fit is cut at a character boundary and ends in "...".
 * 4 * strlen(text) + 4 bytes always suffice.  Returns out.  Thread-safe.
 */
INGEST_API const char *ingest_escape(char *out, size_t cap, const char *text);

/*
 * A time in ns since 1970 UTC, as manifests, the file table and the index
 * keep it (int64).  A time past that range (1677-09-21 to 2262-04-11: a
 * device whose clock is far off can date its files up to 2446 on ext4)
 * wraps around, modulo 2^64, without undefined behaviour: its date is then
 * wrong (as the clock that made it), but two different times stay
 * different, which the checks for a changed file need.  Thread-safe.
 */
INGEST_API int64_t ingest_time_ns(const struct timespec *t);

#ifdef __cplusplus
}
#endif
#endif
