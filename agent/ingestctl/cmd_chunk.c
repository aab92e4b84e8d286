/*
 * ingestctl chunk [--min N --avg N --max N] FILE...
 *
 * One line per chunk, "offset length id-hex" (ids keyed with the default
 * dedup key, so runs on different machines compare), streamed through the
 * chunk+hash pipeline's fixed ring: a file is never held whole.  With
 * several files each file's lines follow a "# FILE" line.  "-" is stdin.
 */
#include "ingestctl.h"

#include <ingest.h>
#include <ingest/chunkhash.h>
#include <ingest/config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int print_chunk(void *ud, const ingest_chunk_info *ci)
{
    FILE *out = ud;
    char hex[2 * INGEST_ID_BYTES + 1];
    ingest_to_hex(ci->id, INGEST_ID_BYTES, hex);
    if (fprintf(out, "%llu %u %s\n", (unsigned long long)ci->offset, (unsigned)ci->len, hex) < 0)
        return INGEST_EIO;
    return 0;
}

static int parse_u32_size(const char *opt, const char *text, uint32_t *out)
{
    uint64_t v;
    if (ingest_parse_size(NULL, text, &v) != 0 || v > UINT32_MAX) {
        fprintf(stderr, "ingestctl chunk: %s: bad size '%s' (bytes, or with KiB/MiB)\n", opt, text);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int cmd_chunk(int argc, char **argv)
{
    ingest_chunk_params p;
    ingest_chunk_params_default(&p);
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        uint32_t *dst = strcmp(argv[i], "--min") == 0   ? &p.min
                        : strcmp(argv[i], "--avg") == 0 ? &p.avg
                        : strcmp(argv[i], "--max") == 0 ? &p.max
                                                        : NULL;
        if (dst == NULL || i + 1 >= argc) {
            fprintf(stderr, "ingestctl chunk: %s '%s'\nusage: ingestctl chunk [--min N --avg N --max N] FILE...\n",
                    dst == NULL ? "unknown option" : "missing value for", argv[i]);
            return 2;
        }
        if (parse_u32_size(argv[i], argv[i + 1], dst) != 0)
            return 2;
        i++;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: ingestctl chunk [--min N --avg N --max N] FILE...\n");
        return 2;
    }
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL) {
        fprintf(stderr, "ingestctl chunk: out of memory\n");
        return 1;
    }
    if (ingest_chunk_params_check(ctx, &p) != 0) {
        fprintf(stderr, "ingestctl chunk: %s\n", ingest_ctx_errmsg(ctx));
        ingest_ctx_destroy(ctx);
        return 2;
    }
    int status = 0;
    ingest_chunkhash *ch = NULL;
    const ingest_chunkhash_opts o = { .params = &p };
    if (ingest_chunkhash_create(ctx, &o, print_chunk, stdout, &ch) != 0) {
        fprintf(stderr, "ingestctl chunk: %s\n", ingest_ctx_errmsg(ctx));
        ingest_ctx_destroy(ctx);
        return 1;
    }
    const int several = argc - i > 1;
    for (; i < argc; i++) {
        const char *path = argv[i];
        const int fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            fprintf(stderr, "ingestctl chunk: %s: %s\n", path, strerror(errno));
            status = 1;
            continue;
        }
        if (several)
            printf("# %s\n", path);
        const int rc = ingest_chunkhash_fd(ch, fd);
        if (rc != 0) {
            fprintf(stderr, "ingestctl chunk: %s: %s%s%s\n", path, ingest_strerror(rc),
                    ingest_ctx_errmsg(ctx)[0] ? ": " : "", ingest_ctx_errmsg(ctx));
            status = 1;
        }
        if (fd != 0)
            close(fd);
    }
    ingest_chunkhash_destroy(ch);
    ingest_ctx_destroy(ctx);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "ingestctl chunk: write error: %s\n", strerror(errno));
        status = 1;
    }
    return status;
}
