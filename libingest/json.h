/*
 * A small, strict, bounded JSON reader and writer helpers, for formats made
 * of one JSON value per line (the batch manifest).  Internal to libingest.
 *
 * Reader: ingest__json_parse() turns one JSON text into a flat array of
 * tokens (in document order, each container followed by its contents), with
 * strings decoded into a scratch buffer owned by the parser.  The parser is
 * reused from line to line; its memory is bounded by max_len (input bytes)
 * and max_toks (values per text), and recursion by max_depth.
 *
 * Strictness (RFC 8259 plus bounds):
 *   - objects, arrays, strings, numbers, true, false, null; whitespace is
 *     space, tab, CR, LF; nothing may follow the value but whitespace;
 *   - duplicate keys in one object are an error;
 *   - strings must be valid UTF-8 (no overlong forms, no encoded surrogates,
 *     nothing above U+10FFFF); raw control characters (< 0x20) are errors;
 *     escapes \" \\ \/ \b \f \n \r \t \uXXXX; a \uXXXX high surrogate must
 *     be followed by a \uXXXX low surrogate; \u0000 is accepted and yields a
 *     NUL byte inside the string (len counts it; callers that take C strings
 *     must check);
 *   - raw-byte escapes: a lone \uDC80..\uDCFF (a low surrogate without a
 *     high one) decodes to the single byte 0x80..0xFF.  This is the
 *     "surrogateescape" convention of Python's os.fsencode; it lets the
 *     writer carry byte strings that are not valid UTF-8 (Linux file names)
 *     and read them back exactly.  Any other lone surrogate is an error;
 *   - integers must fit: 0..UINT64_MAX, or -2^63..-1 (INT tokens); numbers
 *     with a fraction or an exponent are checked for syntax and become FLOAT
 *     tokens without a value; leading zeros are errors.
 */
#ifndef INGEST_JSON_H
#define INGEST_JSON_H

#include "internal.h"

enum {
    INGEST__JSON_OBJECT = 1,
    INGEST__JSON_ARRAY,
    INGEST__JSON_STRING,
    INGEST__JSON_INT,
    INGEST__JSON_FLOAT,
    INGEST__JSON_TRUE,
    INGEST__JSON_FALSE,
    INGEST__JSON_NULL,
};

typedef struct ingest__json_tok {
    uint8_t type;  /* INGEST__JSON_* */
    uint8_t neg;   /* INT: the value is -u */
    uint32_t pos;  /* byte offset of the value in the input */
    uint32_t len;  /* STRING: decoded bytes; OBJECT: members; ARRAY: elements */
    uint32_t end;  /* index of the first token after this value and its contents */
    uint32_t str;  /* STRING: offset of the decoded, NUL-terminated bytes in scratch */
    uint64_t u;    /* INT: magnitude */
} ingest__json_tok;

typedef struct ingest__json {
    ingest_ctx *ctx;
    ingest__json_tok *toks;
    uint32_t ntoks, cap_toks, max_toks;
    char *scratch;
    size_t scratch_len, scratch_cap;
    size_t max_len;
    unsigned max_depth;
    /* After a failed parse: byte offset of the fault and a static message. */
    size_t err_pos;
    const char *err_what;
    /* Parse state. */
    const char *in;
    size_t len, pos;
} ingest__json;

/* Set up a parser (no allocation until the first parse). */
void ingest__json_init(ingest__json *j, ingest_ctx *ctx, size_t max_len, uint32_t max_toks,
                       unsigned max_depth);
void ingest__json_free(ingest__json *j);

/*
 * Parse one JSON text s[0..len).  Returns 0 with j->toks[0..ntoks) filled;
 * INGEST_ECORRUPT for malformed input, INGEST_ETOOBIG when len > max_len or
 * the text has more than max_toks values (both with err_pos and err_what
 * set; the context's detail is not touched, the caller formats it);
 * INGEST_ENOMEM (context detail set).  Tokens and strings stay valid until
 * the next parse.
 */
int ingest__json_parse(ingest__json *j, const char *s, size_t len);

/* Decoded bytes of a STRING token (NUL-terminated; t->len bytes). */
static inline const char *ingest__json_str(const ingest__json *j, const ingest__json_tok *t)
{
    return j->scratch + t->str;
}

/* Value of an INT token: 0, or -1 when t is not an INT or does not fit. */
int ingest__json_get_u64(const ingest__json_tok *t, uint64_t *out);
int ingest__json_get_i64(const ingest__json_tok *t, int64_t *out);

/* Member `key` of the OBJECT token at index obj: its value's index, or -1. */
long ingest__json_find(const ingest__json *j, uint32_t obj, const char *key);

/* Human name of a token type ("object", "string", ...). */
const char *ingest__json_type_name(int type);

/*
 * Writer helpers: append to a bounded buffer.  On failure (INGEST_ETOOBIG,
 * INGEST_ENOMEM) the buffer may hold part of the output; callers roll back.
 *
 * ingest__json_put_str writes a quoted string: '"' and '\\' escaped, control
 * characters as \b \f \n \r \t or \u00XX, valid UTF-8 copied as is, and
 * each byte of an invalid UTF-8 sequence written as the raw-byte escape
 * \uDC80..\uDCFF, so that any byte string (but see NUL above) reads back
 * exactly through ingest__json_parse.
 */
int ingest__json_put_str(ingest__buf *b, const char *s, size_t len);
int ingest__json_put_u64(ingest__buf *b, uint64_t v);
int ingest__json_put_i64(ingest__buf *b, int64_t v);

/*
 * Length of the valid UTF-8 sequence at s[0..len) (1..4), or 0 when the
 * bytes there do not start one.  s[0] must be >= 0x80.
 */
size_t ingest__utf8_seq(const unsigned char *s, size_t len);

#endif
