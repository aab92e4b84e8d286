/*
 * Each source's filter rules (docs/config.md, "Filters"), as the daemon's
 * walks and a --once run apply them alike.
 */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <string.h>
#include <unistd.h>

int agent_filter_create(agent *a, const ingest_source_config *c, ingest_filter **out)
{
    *out = NULL;
    if (!(c->include_count || c->exclude_count || c->min_size || c->max_size || c->max_age_ms ||
          c->sample_every > 1 || c->drop_if_prefix[0]))
        return 0;
    ingest_filter_spec fs;
    memset(&fs, 0, sizeof(fs));
    fs.include = (const char *const *)c->include;
    fs.include_count = c->include_count;
    fs.exclude = (const char *const *)c->exclude;
    fs.exclude_count = c->exclude_count;
    fs.min_size = c->min_size;
    fs.max_size = c->max_size;
    fs.max_age_ms = c->max_age_ms;
    fs.sample_every = c->sample_every;
    fs.drop_if_prefix = c->drop_if_prefix;
    if (ingest_filter_create(a->ctx, &fs, out) < 0) {
        prog_log(INGEST_LOG_ERROR, "source %s: filter: %s", c->name, ingest_ctx_errmsg(a->ctx));
        return -1;
    }
    return 0;
}

uint32_t agent_filter_rules(const ingest_source_config *c)
{
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 8);
    const uint64_t nums[6] = { c->include_count, c->exclude_count, c->min_size, c->max_size,
                               (uint64_t)c->max_age_ms, (uint64_t)c->sample_every };
    crypto_generichash_update(&h, (const unsigned char *)nums, sizeof(nums));
    /* each string with its terminating NUL: the list boundaries stay apart */
    for (size_t i = 0; i < c->include_count; i++)
        crypto_generichash_update(&h, (const unsigned char *)c->include[i], strlen(c->include[i]) + 1);
    for (size_t i = 0; i < c->exclude_count; i++)
        crypto_generichash_update(&h, (const unsigned char *)c->exclude[i], strlen(c->exclude[i]) + 1);
    crypto_generichash_update(&h, (const unsigned char *)c->drop_if_prefix, strlen(c->drop_if_prefix) + 1);
    uint8_t out[8];
    crypto_generichash_final(&h, out, sizeof(out));
    const uint32_t r = (uint32_t)out[0] | (uint32_t)out[1] << 8 | (uint32_t)out[2] << 16 | (uint32_t)out[3] << 24;
    return r != 0 ? r : 1;
}

/* The first bytes of {dir}/{rel} (never through a symlink): 0, or -1 when it cannot be opened. */
static int read_head(const char *dir, const char *rel, uint8_t *buf, size_t cap, size_t *len)
{
    char full[PATH_MAX];
    snprintf(full, sizeof(full), "%s/%s", dir, rel);
    const int fd = open(full, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -1;
    const size_t n = prog_read_upto(fd, buf, cap);
    close(fd);
    *len = n;
    return 0;
}

int agent_filter_check(const ingest_filter *f, const char *dir, const char *rel, const ingest_sender_stat *st,
                       int64_t now_ns)
{
    int r = ingest_filter_check_stat(f, rel, st->size, st->mtime_ns, now_ns);
    const size_t hl = ingest_filter_head_len(f);
    if (r == INGEST_FILTER_TAKE && hl > 0) {
        uint8_t head[INGEST_FILTER_MAX_PREFIX];
        size_t n = 0;
        /* a file that cannot be opened is taken: shipping it then says why it is not there */
        if (read_head(dir, rel, head, hl < sizeof(head) ? hl : sizeof(head), &n) == 0)
            r = ingest_filter_check_head(f, head, n);
    }
    return r;
}
