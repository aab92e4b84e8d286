/*
 * Delta chunks (docs/compression.md, "Delta chunks"): where the predecessor
 * of a wanted chunk lies, the bytes at its offset in the version of its
 * file landed before this batch.  Only reads the batch and the bronze tree;
 * the receiver verifies whatever it rebuilds from them against the chunk's
 * id, so a predecessor changed meanwhile costs a re-ask, never bad bytes.
 */
#include "lander_int.h"

int ingest_lander_chunk_base(ingest_lander_batch *b, uint32_t i, void *out, size_t cap, uint32_t *base_len)
{
    *base_len = 0;
    if (b == NULL || i >= b->nchunks || (b->state != B_ACTIVE && b->state != B_PREPARED) ||
        (out != NULL && cap < b->mc[i].len))
        return INGEST_EINVAL;
    const uint32_t fi = lander__file_of_chunk(b, i);
    const lfile *f = &b->files[fi];
    if (f->link || f->refused != NULL || f->skip || i < f->first || i - f->first >= f->nchunks)
        return 1;
    /* the chunk's offset: from the last one asked in this file, else from the file's start (wants ascend) */
    if (b->base_fi != fi || b->base_ci > i) {
        if (b->base_fi != fi)
            lander__close_fd(&b->base_fd);
        b->base_fi = fi;
        b->base_ci = f->first;
        b->base_off = 0;
        b->base_size = 0;
        char dir[LANDED_MAX];
        const char *name;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        int dfd = -1;
        struct stat st;
        if (b->base_fd < 0 && lander__walk_dir(b, f->landed, dir, false, &dfd) == 0 && dfd >= 0) {
            b->base_fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            close(dfd);
        }
        if (b->base_fd >= 0 && (fstat(b->base_fd, &st) != 0 || !S_ISREG(st.st_mode)))
            lander__close_fd(&b->base_fd);
        if (b->base_fd >= 0)
            b->base_size = (uint64_t)st.st_size;
    }
    for (; b->base_ci < i; b->base_ci++)
        b->base_off += b->mc[b->base_ci].len;
    if (b->base_fd < 0 || b->base_off >= b->base_size)
        return 1;
    const uint64_t left = b->base_size - b->base_off;
    const uint32_t n = left < b->mc[i].len ? (uint32_t)left : b->mc[i].len;
    if (out != NULL && lander__pread_full(b->base_fd, out, n, b->base_off) != 0)
        return 1;
    *base_len = n;
    return 0;
}
