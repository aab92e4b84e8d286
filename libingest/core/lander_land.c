/* The lander's landing: files written once, sequentially, at a cursor over the chunk list; chunks put, spilled, copied. */
#include "lander_int.h"

#include <linux/fs.h>
#include <sys/ioctl.h>

/* --------------------------------------------------------------- landing */

static int run_flush(ingest_lander_batch *b);
static uint32_t landed_mode(uint32_t mode);

/*
 * The cursor at the start of file fi, just opened (created or appended to).
 * Its hash is computed as its chunks land only when the manifest gave it
 * (checked at finish_file) or some chunks are pushed (known only then): a
 * hash the parse derived from the listed ids is that of the ids landed.
 */
static void cursor_start(ingest_lander_batch *b, uint32_t fi)
{
    b->file_off = 0;
    b->size_short = false;
    b->dio_fill = b->dio_zeros = 0;
    b->dio_base = 0;
    b->fh_on = !b->files[fi].hash_derived;
    if (b->fh_on)
        ingest_filehash_init(&b->fh, b->l->key);
}

static int open_tmp(ingest_lander_batch *b, uint32_t fi)
{
    lfile *f = &b->files[fi];
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    lander__split_path(f->landed, dir, sizeof dir, &name);
    INGEST__FORWARD(lander__enter_land_dir(b, fi, dir));
    INGEST__FORWARD(lander__add_dir(b, dir));
    b->mode_late = false;
    const int app = lander__app_try(b, fi);
    if (app < 0)
        return app;
    if (app == 1) {
        /* appended in place (lander_append.c): b->fd is the landed file, read and written at the cursor */
        b->direct = false;
        b->mode_set = false;
        b->clone_ok = false;
        cursor_start(b, fi);
        return 0;
    }
    lander__tmp_name(b, name, fi, tn, sizeof tn);
    const int flags = O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC;
    b->direct = false;
    const bool direct = b->l->direct_io && f->size >= b->l->dio_min;
    if (direct && b->dio == NULL) {
        /* the context's allocator has no alignment: over-allocate and align inside */
        b->dio_mem = ingest__malloc(b->ctx, 2 * DIO_BUF + DIO_ALIGN);
        if (b->dio_mem == NULL)
            return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory (direct I/O buffer)");
        const uintptr_t a = (uintptr_t)b->dio_mem;
        b->dio = (uint8_t *)b->dio_mem + ((DIO_ALIGN - a % DIO_ALIGN) % DIO_ALIGN);
        b->dio_other = b->dio + DIO_BUF;
    }
    lander__hook(b, INGEST__LANDER_HOOK_CREATE);
    for (unsigned tries = 0;; tries++) {
        if (direct) {
            b->fd = openat(b->dirfd, tn, flags | O_DIRECT, (mode_t)landed_mode(f->mode));
            if (b->fd >= 0)
                b->direct = true;
        }
        /* EINVAL: the filesystem does not take O_DIRECT; write through the cache */
        if (b->fd < 0 && (!direct || errno == EINVAL))
            b->fd = openat(b->dirfd, tn, flags, (mode_t)landed_mode(f->mode));
        if (b->fd >= 0)
            break;
        /* ENOENT: the directory was removed since it was entered (lander__reenter_land_dir) */
        if (errno != ENOENT || tries >= LANDER_REENTER_TRIES)
            return lander__sys_fail(b->ctx, errno, "create temporary file for", f->landed);
        INGEST__FORWARD(lander__reenter_land_dir(b, fi, dir));
        lander__tmp_name(b, name, fi, tn, sizeof tn); /* staged now, perhaps: then its final name */
    }
    f->created = true;
    f->ident_set = false; /* read when it is finished */
    if (f->size < DIO_ALIGN) {
        /* Smaller than a block: nothing is ever cloned into it, so its filesystem's block size is not
         * needed, and its mode is checked with the stat at its end (finish_file): one stat per small
         * file, not two. */
        b->blksize = DIO_ALIGN;
        b->clone_ok = false;
        b->mode_set = true;
        b->mode_late = true;
        cursor_start(b, fi);
        return 0;
    }
    struct stat st;
    if (fstat(b->fd, &st) < 0)
        return lander__sys_fail(b->ctx, errno, "stat temporary file for", f->landed);
    b->dev = st.st_dev;
    b->blksize = (uint32_t)st.st_blksize;
    /* created with its landed mode, unless the umask took bits away or the name was there already */
    b->mode_set = (st.st_mode & 07777) == (mode_t)landed_mode(f->mode);
    /* clones must be aligned to the filesystem's blocks, and to the direct I/O buffer's */
    b->clone_ok = !(b->l->clone_bad && b->l->clone_bad_dev == st.st_dev) && st.st_blksize >= (blksize_t)DIO_ALIGN &&
                  st.st_blksize <= (blksize_t)(1u << 20) && st.st_blksize % DIO_ALIGN == 0;
    cursor_start(b, fi);
    return 0;
}

/*
 * Hand the direct I/O buffer to the writer (lander_dw.c), to be written at
 * dio_base: whole (len DIO_BUF) or, at the end of the file, padded; the
 * other buffer is filled meanwhile.  Anything that reads, truncates, clones
 * into or closes the file waits for the write first (lander__dw_wait).
 */
static int dio_flush(ingest_lander_batch *b, bool last)
{
    size_t len = b->dio_fill;
    if (len == 0)
        return 0;
    if (last && (len % DIO_ALIGN) != 0) {
        const size_t pad = DIO_ALIGN - len % DIO_ALIGN;
        memset(b->dio + len, 0, pad);
        len += pad;
    }
    if (lander__dw_post(b, b->fd, b->dio, len, b->dio_base) < 0)
        return -1;
    uint8_t *const t = b->dio;
    b->dio = b->dio_other;
    b->dio_other = t;
    b->dio_base += b->dio_fill;
    b->dio_fill = 0;
    return 0;
}

/* Append data (NULL: n zero bytes, direct I/O only) to the file being written: through the direct I/O buffer, or write(). */
static int file_append(ingest_lander_batch *b, const uint8_t *data, size_t n)
{
    if (!b->direct) {
        b->size_short = false;
        return lander__write_full(b->fd, data, n);
    }
    while (n > 0) {
        const size_t k = DIO_BUF - b->dio_fill < n ? DIO_BUF - b->dio_fill : n;
        if (data != NULL) {
            memcpy(b->dio + b->dio_fill, data, k);
            data += k;
            b->dio_zeros = 0;
        } else {
            memset(b->dio + b->dio_fill, 0, k);
            b->dio_zeros += k;
        }
        b->dio_fill += k;
        n -= k;
        if (b->dio_fill == DIO_BUF) {
            if (dio_flush(b, false) < 0)
                return -1;
            b->size_short = false;
            b->dio_zeros = 0;
        }
    }
    return 0;
}

/*
 * Leave n zero bytes of the file being written as a hole: move past them
 * without writing.  With direct I/O the blocks wholly inside the run are
 * skipped and its unaligned ends go through the buffer as zeros.  The file's
 * size then ends before the hole until something is written past it
 * (size_short): fill_holes sets it before the file is read back, finish_file at its end.
 */
static int file_skip(ingest_lander_batch *b, size_t n)
{
    if (!b->direct) {
        if (lseek(b->fd, (off_t)n, SEEK_CUR) < 0)
            return -1;
        b->size_short = true;
        return 0;
    }
    /* the run of zeros starts with the zeros the buffer ends with (the unaligned end of the last hole) */
    const uint64_t start = b->dio_base + b->dio_fill, end = start + n, zs = start - b->dio_zeros;
    const uint64_t hs = (zs + DIO_ALIGN - 1) / DIO_ALIGN * DIO_ALIGN, he = end / DIO_ALIGN * DIO_ALIGN;
    if (he <= hs)
        return file_append(b, NULL, n); /* no whole block in it */
    /* the buffer up to the run's first block boundary (zeros added or dropped), written out, then the gap */
    if (hs >= start) {
        if (file_append(b, NULL, (size_t)(hs - start)) < 0)
            return -1;
    } else {
        b->dio_fill = (size_t)(hs - b->dio_base);
    }
    if (dio_flush(b, false) < 0)
        return -1;
    b->dio_base = he;
    b->dio_zeros = 0;
    b->size_short = true;
    return file_append(b, NULL, (size_t)(end - he));
}

/* Make the file being written as long as what was landed in it before the direct I/O buffer (holes included). */
static int fill_holes(ingest_lander_batch *b)
{
    if (!b->size_short)
        return 0;
    if (b->direct && lander__dw_wait(b) < 0)
        return -1;
    if (ftruncate(b->fd, (off_t)(b->direct ? b->dio_base : b->file_off)) < 0)
        return -1;
    b->size_short = false;
    return 0;
}

/*
 * Are all n bytes zero (n >= 64)?  The ends and the middle first (data
 * rarely starts, ends and is zero in the middle), then 64 bytes at a time:
 * memcpy into words compiles to plain loads, no call per byte.
 */
static bool all_zero(const uint8_t *p, size_t n)
{
    if ((p[0] | p[n / 2] | p[n - 1]) != 0)
        return false;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t w[8];
        memcpy(w, p + i, sizeof w);
        if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0)
            return false;
    }
    uint8_t acc = 0;
    for (; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

/*
 * Read n bytes at pos of the file being written (a chunk the batch repeats):
 * what is still in the direct I/O buffer comes from there, the rest through
 * fd (a descriptor of the same file, opened for reading).  0, -1 errno, 1 short.
 */
static int read_current(ingest_lander_batch *b, int fd, uint64_t pos, size_t n, uint8_t *out)
{
    size_t from_file = n;
    if (b->direct && lander__dw_wait(b) < 0) /* the bytes below dio_base on the disk */
        return -1;
    if (fill_holes(b) < 0)
        return -1;
    if (b->direct && pos + n > b->dio_base) {
        const size_t head = pos < b->dio_base ? (size_t)(b->dio_base - pos) : 0;
        const size_t boff = pos < b->dio_base ? 0 : (size_t)(pos - b->dio_base);
        if (boff + (n - head) > b->dio_fill)
            return 1;
        memcpy(out + head, b->dio + boff, n - head);
        from_file = head;
    }
    return from_file > 0 ? lander__pread_full(fd, out, from_file, pos) : 0;
}

static uint32_t landed_mode(uint32_t mode)
{
    return (mode & 0111) ? 0755 : 0644;
}

/*
 * h, the hash of the ids file f landed with: its hash now when some chunks
 * were pushed (checked against the digest at commit), else checked against
 * the manifest's.
 */
static int hash_landed(ingest_lander_batch *b, lfile *f, const uint8_t h[INGEST_ID_BYTES])
{
    if (f->hash_late) {
        memcpy(f->hash, h, INGEST_ID_BYTES);
        f->hash_late = false;
        return 0;
    }
    if (sodium_memcmp(h, f->hash, INGEST_ID_BYTES) != 0)
        return ingest__fail(b->ctx, INGEST_EMISMATCH, "lander: file %s: whole-file hash differs from the manifest",
                            f->path);
    return 0;
}

static int finish_file(ingest_lander_batch *b, uint32_t fi)
{
    lfile *f = &b->files[fi];
    INGEST__FORWARD(run_flush(b));
    if (b->direct) {
        /* The whole blocks, then the last part block written through the page cache: a padded block
         * truncated back would make ext4 read that block from the device to zero its end. */
        const size_t tail = b->dio_fill % DIO_ALIGN;
        const uint64_t tail_at = b->dio_base + (b->dio_fill - tail);
        uint8_t keep[DIO_ALIGN];
        memcpy(keep, b->dio + (b->dio_fill - tail), tail);
        b->dio_fill -= tail;
        if (dio_flush(b, false) < 0 || lander__dw_wait(b) < 0)
            return lander__sys_fail(b->ctx, errno, "write", f->landed);
        if (tail > 0) {
            const int fl = fcntl(b->fd, F_GETFL);
            if (fl < 0 || fcntl(b->fd, F_SETFL, fl & ~O_DIRECT) < 0)
                return lander__sys_fail(b->ctx, errno, "write", f->landed);
            b->direct = false;
            if (lseek(b->fd, (off_t)tail_at, SEEK_SET) < 0 || lander__write_full(b->fd, keep, tail) < 0)
                return lander__sys_fail(b->ctx, errno, "write", f->landed);
        }
        /* the exact size: set by the last part block's write, else (whole blocks, or a hole at the end) here */
        if (tail == 0 && ftruncate(b->fd, (off_t)b->file_off) < 0)
            return lander__sys_fail(b->ctx, errno, "truncate", f->landed);
    } else if (b->size_short && ftruncate(b->fd, (off_t)b->file_off) < 0) {
        /* it ends with a hole: its size (before the mtime: truncating sets it) */
        return lander__sys_fail(b->ctx, errno, "truncate", f->landed);
    }
    if (f->append)
        INGEST__FORWARD(lander__app_intent(b, fi)); /* its mode and mtime change too */
    uint8_t h[INGEST_ID_BYTES];
    if (b->fh_on)
        ingest_filehash_final(&b->fh, h);
    if (b->file_off != f->size)
        return ingest__fail(b->ctx, INGEST_EMISMATCH, "lander: file %s: wrote %llu bytes, size is %llu", f->path,
                            (unsigned long long)b->file_off, (unsigned long long)f->size);
    if (b->fh_on) /* (else derived from the listed ids at the parse: those are the ids landed) */
        INGEST__FORWARD(hash_landed(b, f, h));
    if (!b->mode_set && fchmod(b->fd, (mode_t)landed_mode(f->mode)) < 0)
        return lander__sys_fail(b->ctx, errno, "chmod", f->landed);
    struct timespec ts[2];
    int64_t s = f->mtime_ns / 1000000000, ns = f->mtime_ns % 1000000000;
    if (ns < 0) {
        s--;
        ns += 1000000000;
    }
    ts[0].tv_sec = ts[1].tv_sec = (time_t)s;
    ts[0].tv_nsec = ts[1].tv_nsec = (long)ns;
    if (futimens(b->fd, ts) < 0)
        return lander__sys_fail(b->ctx, errno, "set mtime of", f->landed);
    struct stat sb;
    if (fstat(b->fd, &sb) < 0)
        return lander__sys_fail(b->ctx, errno, "stat", f->landed);
    lander__ident_of(f, &sb);
    f->ident_set = true;
    /* created with its landed mode, unless the umask took bits away or the name was there already
     * (the mode is not part of its identity: changing it now leaves that as read) */
    if (b->mode_late && (sb.st_mode & 07777) != (mode_t)landed_mode(f->mode) &&
        fchmod(b->fd, (mode_t)landed_mode(f->mode)) < 0)
        return lander__sys_fail(b->ctx, errno, "chmod", f->landed);
    /* a large file's writeback starts now; small ones are written out together at commit */
    if (f->size >= LANDER_EARLY_WRITEBACK_MIN || b->nfiles < INGEST_LANDER_SYNCFS_MIN)
        (void)sync_file_range(b->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    if (close(b->fd) < 0) {
        b->fd = -1;
        return lander__sys_fail(b->ctx, errno, "close", f->landed);
    }
    b->fd = -1;
    return 0;
}

/* Chunk i is in the file at the cursor (written, or a hole): account for it. */
static void chunk_landed(ingest_lander_batch *b, uint32_t i)
{
    /* its bytes were checked against its id: the file hash covers the ids in order (docs/manifest.md) */
    if (b->fh_on)
        ingest_filehash_update(&b->fh, b->mc[i].id, INGEST_ID_BYTES);
    b->pos[i] = b->file_off;
    b->file_off += b->mc[i].len;
    b->cst[i] = (uint8_t)((b->cst[i] & ~(F_ARRIVED | F_INBUF)) | F_DONE);
}

/* ------------------------------------------------ unchanged runs (reflink) */

/* Copy [from, to) of the run's source to the end of the file being written (through cbuf: no chunk is held there). */
static int run_copy(ingest_lander_batch *b, uint64_t from, uint64_t to)
{
    while (from < to) {
        const size_t k = to - from < b->bufcap ? (size_t)(to - from) : b->bufcap;
        const int r = lander__pread_full(b->run_fd, b->cbuf, k, from);
        if (r != 0)
            return ingest__fail(b->ctx, r < 0 ? ingest__errno(errno) : INGEST_EIO,
                                "lander: batch %s: reading an unchanged run of %s back from its landed file failed",
                                b->name, b->files[b->cur_file].landed);
        if (file_append(b, b->cbuf, k) < 0)
            return lander__sys_fail(b->ctx, errno, "write", b->files[b->cur_file].landed);
        b->stats.bytes_written += k;
        from += k;
    }
    return 0;
}

/*
 * Share [a, z) (block-aligned, the file being written ends at a) with the
 * run's source: 0 cloned, 1 the filesystem does not clone (remembered for
 * the lander: no second try there), < 0 error.
 */
static int run_clone(ingest_lander_batch *b, uint64_t a, uint64_t z)
{
    if (b->direct && (dio_flush(b, false) < 0 || lander__dw_wait(b) < 0))
        return lander__sys_fail(b->ctx, errno, "write", b->files[b->cur_file].landed);
    /* the file must reach a (it may end before, in a hole) */
    if (b->size_short && ftruncate(b->fd, (off_t)a) < 0)
        return lander__sys_fail(b->ctx, errno, "truncate", b->files[b->cur_file].landed);
    b->size_short = false;
    struct file_clone_range r = { .src_fd = b->run_fd, .src_offset = a, .src_length = z - a, .dest_offset = a };
    if (ioctl(b->fd, FICLONERANGE, &r) < 0) {
        const int e = errno;
        if (e != EOPNOTSUPP && e != ENOTTY && e != EXDEV && e != EINVAL && e != ENOSYS && e != ETXTBSY)
            return lander__sys_fail(b->ctx, e, "clone an unchanged run into", b->files[b->cur_file].landed);
        ingest__log(b->ctx, INGEST_LOG_INFO,
                    "lander: %s: the filesystem does not share ranges (FICLONERANGE: %s): unchanged runs are copied",
                    b->l->root, strerror(e));
        b->l->clone_bad = true;
        b->l->clone_bad_dev = b->dev;
        b->clone_ok = false;
        return 1;
    }
    if (b->direct) {
        b->dio_base = z;
        b->dio_fill = 0;
        b->dio_zeros = 0;
    } else if (lseek(b->fd, (off_t)z, SEEK_SET) < 0) {
        return lander__sys_fail(b->ctx, errno, "seek in", b->files[b->cur_file].landed);
    }
    b->stats.bytes_cloned += z - a;
    return 0;
}

/*
 * Land the pending run: its block-aligned interior cloned from its source
 * (the offsets are the same in both files), its unaligned edges copied; all
 * of it copied where the filesystem does not clone.  Its chunks were read
 * and checked against their ids when they joined it.
 */
static int run_flush(ingest_lander_batch *b)
{
    if (b->run_fd < 0)
        return 0;
    const uint64_t s = b->run_start, e = b->run_end, bs = b->blksize;
    const uint64_t a = (s + bs - 1) / bs * bs, z = e / bs * bs;
    int rc = 0;
    if (b->clone_ok && z > a) {
        rc = run_copy(b, s, a);
        if (rc == 0)
            rc = run_clone(b, a, z);
        if (rc == 1)
            rc = run_copy(b, a, z);
        if (rc == 0)
            rc = run_copy(b, z, e);
    } else {
        rc = run_copy(b, s, e);
    }
    lander__close_fd(&b->run_fd);
    return rc;
}

/*
 * Known chunk i, verified, lies at loc in a landed file at the offset it
 * has in the file being written: join it to the pending run (1), or 0 when
 * it cannot (the pending run, if any, is then landed).
 */
static int run_join(ingest_lander_batch *b, uint32_t i, const ingest_chunk_loc *loc)
{
    const bool fits = b->clone_ok && loc->offset == b->file_off;
    if (b->run_fd >= 0 && !(fits && loc->file_no == b->run_no && b->run_end == b->file_off))
        INGEST__FORWARD(run_flush(b));
    if (!fits)
        return 0;
    if (b->run_fd < 0) {
        b->run_fd = fcntl(b->srcfd, F_DUPFD_CLOEXEC, 0);
        if (b->run_fd < 0)
            return lander__sys_fail(b->ctx, errno, "duplicate the descriptor of", "a landed file");
        b->run_no = loc->file_no;
        b->run_start = b->file_off;
    }
    chunk_landed(b, i);
    b->run_end = b->file_off;
    return 1;
}

/* ------------------------------------------------- appending in place */

#define APP_CMP 65536u

/*
 * The file being appended to is not a growing version of its landed file
 * after all (bytes below its landed size differ): nothing was changed in
 * it, so land it the usual way from here, in a temporary file that starts
 * with the bytes landed so far (file_off: the same as the landed file's).
 */
static int app_abandon(ingest_lander_batch *b)
{
    lfile *f = &b->files[b->cur_file];
    const int src = b->fd;
    const uint64_t upto = b->file_off;
    b->fd = -1;
    f->append = false;
    f->app_off = true;
    lander__app_release_file(b, b->cur_file); /* this file's claim alone: the batch's other appends keep theirs */
    uint8_t *buf = ingest__malloc(b->ctx, APP_CMP);
    if (buf == NULL) {
        close(src);
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    }
    ingest_filehash keep = b->fh;
    int rc = open_tmp(b, b->cur_file);
    b->fh = keep;
    b->file_off = upto;
    for (uint64_t off = 0; rc == 0 && off < upto;) {
        const size_t k = upto - off < APP_CMP ? (size_t)(upto - off) : APP_CMP;
        const int r = lander__pread_full(src, buf, k, off);
        if (r != 0)
            rc = ingest__fail(b->ctx, r < 0 ? ingest__errno(errno) : INGEST_EIO, "lander: read %s back failed",
                              f->landed);
        else if (file_append(b, buf, k) < 0)
            rc = lander__sys_fail(b->ctx, errno, "write", f->landed);
        b->stats.bytes_written += k;
        off += k;
    }
    close(src);
    ingest__free(b->ctx, buf);
    return rc;
}

/*
 * Chunk i (data, or NULL: n zero bytes) at the cursor of a file appended in
 * place: the part below the landed size must equal the bytes there (else
 * the file is landed the usual way: 1, nothing landed), the rest is
 * appended after the intent is durable.  0 landed, 1 abandoned, < 0 error.
 */
static int app_write(ingest_lander_batch *b, uint32_t i, const uint8_t *data)
{
    lfile *f = &b->files[b->cur_file];
    const uint32_t n = b->mc[i].len;
    const uint64_t off = b->file_off;
    const uint32_t below = off < f->app_size ? (uint32_t)(f->app_size - off < n ? f->app_size - off : n) : 0;
    if (below > 0) {
        uint8_t *buf = ingest__malloc(b->ctx, APP_CMP);
        if (buf == NULL)
            return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
        bool same = true;
        for (uint32_t k = 0; k < below && same;) {
            const uint32_t m = below - k < APP_CMP ? below - k : APP_CMP;
            const int r = lander__pread_full(b->fd, buf, m, off + k);
            if (r < 0) {
                ingest__free(b->ctx, buf);
                return lander__sys_fail(b->ctx, errno, "read", f->landed);
            }
            if (r != 0)
                same = false;
            else if (data != NULL)
                same = memcmp(buf, data + k, m) == 0;
            else
                same = m >= 64 ? all_zero(buf, m) : memcmp(buf, (const uint8_t[64]){0}, m) == 0;
            k += m;
        }
        ingest__free(b->ctx, buf);
        if (!same) {
            ingest__log(b->ctx, INGEST_LOG_INFO,
                        "lander: batch %s: %s differs from its landed version below its landed size: written whole",
                        b->name, f->landed);
            INGEST__FORWARD(app_abandon(b));
            return 1;
        }
    }
    if (below < n) {
        INGEST__FORWARD(lander__app_intent(b, b->cur_file));
        lander__hook(b, INGEST__LANDER_HOOK_WRITE);
        if (lseek(b->fd, (off_t)(off + below), SEEK_SET) < 0)
            return lander__sys_fail(b->ctx, errno, "seek in", f->landed);
        if (data != NULL) {
            if (lander__write_full(b->fd, data + below, n - below) < 0)
                return lander__sys_fail(b->ctx, errno, "write", f->landed);
            b->size_short = false;
            b->stats.bytes_written += n - below;
        } else {
            if (lseek(b->fd, (off_t)(n - below), SEEK_CUR) < 0)
                return lander__sys_fail(b->ctx, errno, "seek in", f->landed);
            b->size_short = true;
            b->stats.bytes_sparse += n - below;
        }
    }
    chunk_landed(b, i);
    return 0;
}

/* Chunk i, all zero, becomes a hole at the cursor. */
static int write_hole(ingest_lander_batch *b, uint32_t i)
{
    const uint32_t n = b->mc[i].len;
    if (b->files[b->cur_file].append) {
        const int r = app_write(b, i, NULL);
        if (r <= 0)
            return r;
    }
    lander__hook(b, INGEST__LANDER_HOOK_WRITE);
    if (file_skip(b, n) < 0)
        return lander__sys_fail(b->ctx, errno, "write", b->files[b->cur_file].landed);
    chunk_landed(b, i);
    b->stats.bytes_sparse += n;
    return 0;
}

/* Is chunk i the all-zero chunk of its length (its id known from an earlier one)? */
static bool is_zero_chunk(const ingest_lander_batch *b, uint32_t i)
{
    return b->mc[i].len == b->l->zero_len && memcmp(b->mc[i].id, b->l->zero_id, INGEST_ID_BYTES) == 0;
}

/* Write chunk i's bytes (checked against its id) at the cursor; a chunk of zeros becomes a hole. */
static int write_chunk(ingest_lander_batch *b, uint32_t i, const uint8_t *data)
{
    const uint32_t n = b->mc[i].len;
    if (b->files[b->cur_file].append) {
        const int r = app_write(b, i, data);
        if (r <= 0)
            return r; /* 1: landed the usual way from here, this chunk too */
    }
    if (n >= HOLE_MIN && all_zero(data, n)) {
        b->l->zero_len = n;
        memcpy(b->l->zero_id, b->mc[i].id, INGEST_ID_BYTES);
        return write_hole(b, i);
    }
    lander__hook(b, INGEST__LANDER_HOOK_WRITE);
    if (file_append(b, data, n) < 0)
        return lander__sys_fail(b->ctx, errno, "write", b->files[b->cur_file].landed);
    chunk_landed(b, i);
    b->stats.bytes_written += n;
    return 0;
}

static bool id_matches(const ingest_lander_batch *b, uint32_t i, const uint8_t *data)
{
    uint8_t id[INGEST_ID_BYTES];
    ingest_chunk_id(b->l->key, data, b->mc[i].len, id);
    return sodium_memcmp(id, b->mc[i].id, INGEST_ID_BYTES) == 0;
}

/* Under the store's lock: known chunk i is stale; forget it in the index and ask for it. */
static int rewant(ingest_lander_batch *b, uint32_t i, const char *why)
{
    char hex[2 * INGEST_ID_BYTES + 1];
    ingest_to_hex(b->mc[i].id, INGEST_ID_BYTES, hex);
    ingest__log(b->ctx, INGEST_LOG_INFO, "lander: batch %s: known chunk %u (%s) %s: wanted again", b->name, i, hex,
                why);
    b->wrote = true;
    const int rc = ingest_index_forget_chunk_for(b->l->idx, b->device, b->mc[i].id);
    if (rc < 0 && rc != INGEST_ENOTFOUND)
        return rc;
    b->cst[i] = K_RECV;
    b->rew[b->nrew++] = i;
    b->awaited++;
    b->stats.chunks_rewanted++;
    return 0;
}

/*
 * Check where a known chunk lives without reading it: 1 usable, 0 stale
 * (already re-wanted), < 0 error.  Under the store's lock.
 */
static int known_source_locked(ingest_lander_batch *b, uint32_t i, ingest_chunk_loc *loc)
{
    int rc = ingest_index_find_for(b->l->idx, b->device, b->mc[i].id, loc);
    if (rc == INGEST_ENOTFOUND || (rc == 0 && loc->length != b->mc[i].len)) {
        INGEST__FORWARD(rewant(b, i, "left the index"));
        return 0;
    }
    if (rc < 0)
        return rc;
    if (b->srcfd >= 0 && b->src_no == loc->file_no)
        return 1;
    lander__close_fd(&b->srcfd);
    b->src_no = UINT64_MAX;
    char p[LANDED_MAX + 512];
    rc = ingest_index_file_path(b->l->idx, loc->file_no, p, sizeof p);
    if (rc == INGEST_ESTALE || rc == INGEST_ENOTFOUND) {
        INGEST__FORWARD(rewant(b, i, "has a missing or changed landed file"));
        return 0;
    }
    if (rc < 0)
        return rc;
    /* below the lander's root (the index's root is the same tree): no symlink followed on the way */
    const size_t rl = strlen(b->l->root);
    if (strncmp(p, b->l->root, rl) == 0 && p[rl] == '/') {
        const char *last = NULL;
        const int pfd = ingest__open_parent_beneath(b->l->rootfd, p + rl + 1, &last);
        b->srcfd = pfd >= 0 ? openat(pfd, last, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
        const int e = errno;
        if (pfd >= 0)
            close(pfd);
        errno = e;
    } else {
        b->srcfd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (b->srcfd < 0) {
        const int e = errno;
        if (e == ENOENT || e == ELOOP || e == ENOTDIR) {
            INGEST__FORWARD(rewant(b, i, "has a missing landed file"));
            return 0;
        }
        return lander__sys_fail(b->ctx, e, "open", p);
    }
    b->src_no = loc->file_no;
    return 1;
}

static int known_source(ingest_lander_batch *b, uint32_t i, ingest_chunk_loc *loc)
{
    lander__enter(b->l);
    return lander__leave(b, known_source_locked(b, i, loc));
}

/*
 * Once per batch, after a first stale chunk: re-want every later stale one
 * now, in one round.  Under the store's lock.
 */
static int lookahead_locked(ingest_lander_batch *b, uint32_t from)
{
    b->lookahead_done = true;
    uint64_t last_no = UINT64_MAX;
    bool last_ok = false;
    for (uint32_t j = from; j < b->nchunks; j++) {
        if ((b->cst[j] & K_MASK) != K_KNOWN || (b->cst[j] & F_DONE))
            continue;
        ingest_chunk_loc loc;
        int rc = ingest_index_find_for(b->l->idx, b->device, b->mc[j].id, &loc);
        if (rc == INGEST_ENOTFOUND || (rc == 0 && loc.length != b->mc[j].len)) {
            INGEST__FORWARD(rewant(b, j, "left the index"));
            continue;
        }
        if (rc < 0)
            return rc;
        if (loc.file_no != last_no) {
            char p[LANDED_MAX + 512];
            rc = ingest_index_file_path(b->l->idx, loc.file_no, p, sizeof p);
            if (rc < 0 && rc != INGEST_ESTALE && rc != INGEST_ENOTFOUND)
                return rc;
            last_no = loc.file_no;
            last_ok = rc == 0;
        }
        if (!last_ok)
            INGEST__FORWARD(rewant(b, j, "has a missing or changed landed file"));
    }
    return 0;
}

static int lookahead(ingest_lander_batch *b, uint32_t from)
{
    lander__enter(b->l);
    return lander__leave(b, lookahead_locked(b, from));
}

/*
 * Chunk i is K_PEER (another batch was receiving it at lookup), under the
 * store's lock: known now (that batch landed it) -> K_KNOWN; no longer in
 * flight and not landed (that batch failed) -> asked for; else still
 * waiting.  0 resolved, 1 still waiting, < 0 error.
 */
static int peer_resolve_locked(ingest_lander_batch *b, uint32_t i)
{
    ingest_chunk_loc loc;
    const int r = ingest_index_find_for(b->l->idx, b->device, b->mc[i].id, &loc);
    if (r == 0 && loc.length == b->mc[i].len) {
        b->cst[i] = (uint8_t)((b->cst[i] & ~K_MASK) | K_KNOWN);
        b->stats.chunks_peer++;
        return 0;
    }
    if (r < 0 && r != INGEST_ENOTFOUND)
        return r;
    if (ingest__inflight_owner(b->l->idx, b->device, b->mc[i].id) != NULL)
        return 1;
    INGEST__FORWARD(rewant(b, i, "was not landed by the batch that was receiving it"));
    return 0;
}

static int peer_resolve(ingest_lander_batch *b, uint32_t i)
{
    lander__enter(b->l);
    return lander__leave(b, peer_resolve_locked(b, i));
}

/*
 * commit_prepare found the landing waiting for a chunk another batch is
 * receiving: wait for that batch (peer_wait_ms at most, landing whatever
 * becomes possible), then ask the device for every such chunk still
 * missing.  A batch leaves K_PEER only chunks registered before its
 * lookup, so it waits for earlier batches, save when one of those ended
 * and a later batch registered the chunk again: two may then wait for
 * each other, each at most peer_wait_ms.
 */
int lander__peer_wait(ingest_lander_batch *b)
{
    const int64_t step_ns = 10 * 1000000ll;
    for (int64_t waited = 0; waited < (int64_t)b->l->peer_wait_ms * 1000000ll; waited += step_ns) {
        const struct timespec ts = { 0, (long)step_ns };
        nanosleep(&ts, NULL);
        INGEST__FORWARD(lander__settle(b, lander__pump(b)));
        if (b->awaited > 0 || b->cur_file >= b->nfiles)
            return 0;
    }
    /* still waiting: ask for every chunk still in flight elsewhere */
    lander__enter(b->l);
    int rc = 0;
    for (uint32_t j = b->cur_chunk; j < b->nchunks && rc == 0; j++) {
        if ((b->cst[j] & K_MASK) != K_PEER || (b->cst[j] & F_DONE))
            continue;
        rc = peer_resolve_locked(b, j); /* landed meanwhile (or its batch ended): no rewant of a fresh entry */
        if (rc == 1)
            rc = rewant(b, j, "is still being received by another batch");
    }
    rc = lander__leave(b, rc);
    return rc < 0 ? rc : lander__settle(b, lander__pump(b));
}

/* Land chunk i at the cursor: 0 landed, 1 blocked (awaited), < 0 error. */
static int land_one(ingest_lander_batch *b, uint32_t i)
{
    const uint32_t n = b->mc[i].len;
    if ((b->cst[i] & K_MASK) == K_PEER) {
        const int r = peer_resolve(b, i);
        if (r != 0)
            return r;
    }
    const int kind = b->cst[i] & K_MASK;
    /* only a known chunk may join the pending run of unchanged chunks: land the run before anything else */
    if (kind != K_KNOWN || is_zero_chunk(b, i))
        INGEST__FORWARD(run_flush(b));
    if (kind != K_RECV && is_zero_chunk(b, i)) {
        /* its bytes are known from its id: nothing to read or verify */
        b->stats.chunks_known++;
        return write_hole(b, i);
    }
    if (kind == K_RECV) {
        if (b->cst[i] & F_INBUF)
            return write_chunk(b, i, b->inbuf);
        if (!(b->cst[i] & F_ARRIVED))
            return 1;
        const int r = lander__pread_full(b->spillfd, b->cbuf, n, b->pos[i]);
        if (r != 0)
            return ingest__fail(b->ctx, r < 0 ? ingest__errno(errno) : INGEST_EIO,
                                "lander: batch %s: reading chunk %u back from the spill file failed", b->name, i);
        if (!id_matches(b, i, b->cbuf))
            return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: chunk %u changed in the spill file", b->name,
                                i);
        return write_chunk(b, i, b->cbuf);
    }
    if (kind == K_DUP) {
        INGEST__FORWARD(lander__sf_wait(b)); /* its first copy may be the helper's to write */
        const uint32_t j = b->src[i];
        const uint32_t lo = lander__file_of_chunk(b, j);
        const lfile *sf = &b->files[lo];
        int fd = -1;
        bool own = false;
        if (lo == b->cur_file) {
            /* written through a write-only descriptor: read it through a new one */
            char tn[NAME_MAX_BYTES + 1], dir[LANDED_MAX];
            const char *name;
            lander__split_path(sf->landed, dir, sizeof dir, &name);
            lander__data_name(b, name, lo, tn, sizeof tn);
            fd = openat(b->dirfd, tn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        } else {
            char tn[NAME_MAX_BYTES + 1], dir[LANDED_MAX];
            const char *name;
            lander__split_path(sf->landed, dir, sizeof dir, &name);
            lander__data_name(b, name, lo, tn, sizeof tn);
            char ddir[LANDED_MAX];
            lander__data_dir(b, lo, dir, ddir, sizeof ddir);
            int dfd = -1;
            INGEST__FORWARD(lander__walk_dir(b, sf->path, ddir, false, &dfd));
            if (dfd >= 0) {
                fd = openat(dfd, tn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                close(dfd);
            }
        }
        own = fd >= 0;
        if (!own)
            return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: temporary file of %s vanished", b->name,
                                sf->landed);
        const int r = lo == b->cur_file ? read_current(b, fd, b->pos[j], n, b->cbuf) : lander__pread_full(fd, b->cbuf, n, b->pos[j]);
        const int e = errno;
        close(fd);
        if (r != 0)
            return ingest__fail(b->ctx, r < 0 ? ingest__errno(e) : INGEST_EIO,
                                "lander: batch %s: reading chunk %u back from %s failed", b->name, j, sf->landed);
        if (!id_matches(b, i, b->cbuf))
            return ingest__fail(b->ctx, INGEST_EIO, "lander: batch %s: chunk %u changed in temporary file of %s",
                                b->name, j, sf->landed);
        b->stats.copies++;
        b->stats.chunks_known++;
        return write_chunk(b, i, b->cbuf);
    }
    /* known: copy from the landed file named by the index, verifying it */
    ingest_chunk_loc loc;
    int rc = known_source(b, i, &loc);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        /* a pending run this chunk does not continue is landed first (its edges go through cbuf) */
        if (b->run_fd >= 0 && !(b->clone_ok && loc.offset == b->file_off && loc.file_no == b->run_no))
            INGEST__FORWARD(run_flush(b));
        const int r = lander__pread_full(b->srcfd, b->cbuf, n, loc.offset);
        if (r < 0)
            return lander__sys_fail(b->ctx, errno, "read", "landed file");
        if (r == 0 && id_matches(b, i, b->cbuf)) {
            b->stats.copies++;
            b->stats.chunks_known++;
            const lfile *cf = &b->files[b->cur_file];
            if (cf->append && loc.file_no == cf->app_no && loc.offset == b->file_off &&
                b->file_off + n <= cf->app_size) {
                /* already there: the landed file is the one being appended to */
                chunk_landed(b, i);
                return 0;
            }
            const int j = run_join(b, i, &loc);
            if (j != 0)
                return j < 0 ? j : 0;
            return write_chunk(b, i, b->cbuf);
        }
        lander__close_fd(&b->srcfd);
        b->src_no = UINT64_MAX;
        lander__enter(b->l);
        INGEST__FORWARD(lander__leave(
            b, rewant(b, i, r ? "is past the end of its landed file" : "does not match its landed bytes")));
    }
    if (!b->lookahead_done)
        INGEST__FORWARD(lookahead(b, i + 1));
    return 1;
}

/*
 * File fi, at the cursor and not opened: one received chunk of at most
 * SF_FILE_MAX bytes in a batch of many files is landed by the small-file
 * helper (lander_sf.c) when it has room.  1 handed over; 2 such a file
 * whose chunk has not come (opened when it comes: handed over then); 0
 * land it here; < 0 error.
 */
static int sf_try(ingest_lander_batch *b, uint32_t fi)
{
    lfile *f = &b->files[fi];
    if (b->nfiles < SF_MIN_FILES || f->nchunks != 1 || f->link || f->size == 0 || f->size > SF_FILE_MAX ||
        (b->l->direct_io && f->size >= b->l->dio_min))
        return 0;
    const uint32_t i = f->first;
    const uint32_t n = b->mc[i].len;
    if ((b->cst[i] & K_MASK) != K_RECV || (b->cst[i] & F_DONE) || n != f->size)
        return 0;
    if (!(b->cst[i] & (F_INBUF | F_ARRIVED)))
        return 2;
    if (!(b->cst[i] & F_INBUF) || (n >= HOLE_MIN && all_zero(b->inbuf, n)))
        return 0;
    int rc = 0;
    sfslot *slot = lander__sf_take(b, &rc);
    if (slot == NULL)
        return rc;
    if (!f->hash_derived) {
        /* its hash, of its one chunk's id, as finish_file has it: known now (pushed), or checked */
        uint8_t h[INGEST_ID_BYTES];
        ingest_filehash fh;
        ingest_filehash_init(&fh, b->l->key);
        ingest_filehash_update(&fh, b->mc[i].id, INGEST_ID_BYTES);
        ingest_filehash_final(&fh, h);
        INGEST__FORWARD(hash_landed(b, f, h));
        f->hash_derived = true; /* (not computed again should it be landed here after all) */
    }
    char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
    const char *name;
    lander__split_path(f->landed, dir, sizeof dir, &name);
    INGEST__FORWARD(lander__enter_land_dir(b, fi, dir));
    INGEST__FORWARD(lander__add_dir(b, dir));
    lander__tmp_name(b, name, fi, tn, sizeof tn);
    lander__hook(b, INGEST__LANDER_HOOK_CREATE);
    lander__hook(b, INGEST__LANDER_HOOK_WRITE);
    /* before the hand-over: from then on the helper writes them */
    f->created = true; /* removed on failure whether the helper made it yet or not */
    f->ident_set = false; /* set by the helper: read after lander__sf_wait */
    if (!lander__sf_fill(b, slot, fi, b->dirfd, tn, b->inbuf, n, landed_mode(f->mode), f->mtime_ns)) {
        f->created = false; /* landed here after all (open_tmp) */
        return 0;
    }
    b->pos[i] = 0;
    b->cst[i] = (uint8_t)((b->cst[i] & ~(F_ARRIVED | F_INBUF)) | F_DONE);
    b->stats.bytes_written += n;
    b->stats.files_helped++;
    return 1;
}

int lander__pump(ingest_lander_batch *b)
{
    while (b->cur_file < b->nfiles) {
        const lfile *f = &b->files[b->cur_file];
        if (f->skip) {
            /* refused and copied from by no other file: nothing of it was asked for */
            b->cur_chunk = f->first + f->nchunks;
            b->cur_file++;
            continue;
        }
        if (b->fd < 0) {
            const int r = sf_try(b, b->cur_file);
            if (r < 0)
                return r;
            if (r == 2)
                return 0; /* its chunk is awaited */
            if (r == 1) {
                b->cur_chunk = f->first + f->nchunks;
                b->cur_file++;
                continue;
            }
            INGEST__FORWARD(open_tmp(b, b->cur_file));
        }
        while (b->cur_chunk < f->first + f->nchunks) {
            const int r = land_one(b, b->cur_chunk);
            if (r < 0)
                return r;
            if (r > 0)
                return 0;
            b->cur_chunk++;
        }
        INGEST__FORWARD(finish_file(b, b->cur_file));
        b->cur_file++;
    }
    return 0;
}

int ingest_lander_advance(ingest_lander_batch *b)
{
    if (!b || b->state != B_ACTIVE)
        return b ? lander__bad_state(b) : INGEST_EINVAL;
    const int rc = lander__settle(b, lander__pump(b));
    if (rc < 0)
        return lander__fail_batch(b, rc);
    return (int)b->awaited;
}

static int spill(ingest_lander_batch *b, uint32_t i)
{
    if (b->spillfd < 0) {
        b->spillfd = openat(b->l->rootfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (b->spillfd < 0) {
            /* no O_TMPFILE here: a named file, unlinked at once */
            char name[64];
            for (int k = 0; k < 100 && b->spillfd < 0; k++) {
                snprintf(name, sizeof name, ".ingest-spill.%08x", randombytes_random());
                b->spillfd = openat(b->l->rootfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            }
            if (b->spillfd < 0)
                return lander__sys_fail(b->ctx, errno, "create spill file in", b->l->root);
            unlinkat(b->l->rootfd, name, 0);
        }
        b->spill_len = 0;
    }
    const uint32_t n = b->mc[i].len;
    size_t done = 0;
    while (done < n) {
        const ssize_t w = pwrite(b->spillfd, b->inbuf + done, n - done, (off_t)(b->spill_len + done));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return lander__sys_fail(b->ctx, errno, "write spill file in", b->l->root);
        }
        done += (size_t)w;
    }
    b->pos[i] = b->spill_len;
    b->spill_len += n;
    b->cst[i] |= F_ARRIVED;
    b->stats.chunks_spilled++;
    return 0;
}

int ingest_lander_chunk_expect(const ingest_lander_batch *b, uint32_t i, uint8_t id[INGEST_ID_BYTES],
                               uint32_t *len)
{
    if (b == NULL || i >= b->nchunks)
        return INGEST_EINVAL;
    if (b->pushed != NULL && b->pushed[i])
        memset(id, 0, INGEST_ID_BYTES); /* (its entry takes the id the landing computes: not read here) */
    else
        memcpy(id, b->mc[i].id, INGEST_ID_BYTES);
    *len = b->mc[i].len;
    return 0;
}

int ingest_lander_chunk_pushed(const ingest_lander_batch *b, uint32_t i)
{
    return b != NULL && i < b->nchunks && b->pushed != NULL && b->pushed[i];
}

/* Checks shared by put_chunk and put_verified: is chunk i awaited? */
static int put_check(ingest_lander_batch *b, uint32_t i, const void *data, size_t len)
{
    if (!b || b->state != B_ACTIVE)
        return b ? lander__bad_state(b) : INGEST_EINVAL;
    if (!data && len > 0)
        return lander__fail_batch(b, ingest__fail(b->ctx, INGEST_EINVAL, "lander: put_chunk: no data"));
    if (i >= b->nchunks)
        return lander__fail_batch(b, ingest__fail(b->ctx, INGEST_EPROTO, "lander: batch %s: chunk index %u past %u chunks",
                                          b->name, i, b->nchunks));
    if ((b->cst[i] & K_MASK) != K_RECV || (b->cst[i] & (F_ARRIVED | F_INBUF | F_DONE)))
        return lander__fail_batch(b, ingest__fail(b->ctx, INGEST_EPROTO, "lander: batch %s: chunk %u was not %s", b->name,
                                          i, (b->cst[i] & K_MASK) != K_RECV ? "requested" : "awaited any more"));
    return 0;
}

/* The chunk's bytes are in b->rbuf, verified: land them (or spill them). */
static int put_tail(ingest_lander_batch *b, uint32_t i, size_t received)
{
    int rc;
    b->stats.bytes_received += received;
    b->stats.chunks_new++;
    b->awaited--;
    /* land what precedes it, then it straight from memory if the cursor is there */
    if ((rc = lander__pump(b)) == 0) {
        if (b->cur_chunk == i && b->cur_file < b->nfiles) {
            b->cst[i] |= F_INBUF;
            rc = lander__pump(b);
        } else {
            rc = spill(b, i);
        }
    }
    rc = lander__settle(b, rc);
    return rc < 0 ? lander__fail_batch(b, rc) : 0;
}

int ingest_lander_put_chunk(ingest_lander_batch *b, uint32_t i, const void *encoded, size_t len)
{
    int rc = put_check(b, i, encoded, len);
    if (rc < 0)
        return rc;
    size_t got = 0;
    b->inbuf = b->rbuf;
    const bool pushed = b->pushed != NULL && b->pushed[i];
    rc = ingest_codec_decode(b->l->codec, encoded, len, b->rbuf, b->mc[i].len, &got, pushed ? NULL : b->l->key,
                             pushed ? NULL : b->mc[i].id);
    if (rc < 0) {
        char keep[INGEST__ERRMSG_MAX];
        memcpy(keep, b->ctx->errmsg, sizeof keep);
        return lander__fail_batch(b, ingest__fail(b->ctx, rc, "lander: batch %s: chunk %u refused: %s", b->name, i, keep));
    }
    if (got != b->mc[i].len)
        return lander__fail_batch(b, ingest__fail(b->ctx, INGEST_EMISMATCH,
                                          "lander: batch %s: chunk %u decodes to %zu bytes, manifest says %u", b->name,
                                          i, got, b->mc[i].len));
    if (pushed) /* its id is that of its bytes */
        ingest_chunk_id(b->l->key, b->rbuf, got, b->mc[i].id);
    return put_tail(b, i, len);
}

int ingest_lander_put_verified(ingest_lander_batch *b, uint32_t i, const void *raw, size_t len, size_t received,
                               const uint8_t id[INGEST_ID_BYTES])
{
    int rc = put_check(b, i, raw, len);
    if (rc < 0)
        return rc;
    if (id != NULL && b->pushed != NULL && b->pushed[i])
        memcpy(b->mc[i].id, id, INGEST_ID_BYTES); /* pushed: the caller computed it from its bytes */
    else if (id == NULL || sodium_memcmp(id, b->mc[i].id, INGEST_ID_BYTES) != 0)
        return lander__fail_batch(b, ingest__fail(b->ctx, INGEST_EMISMATCH,
                                          "lander: batch %s: chunk %u was verified against another id than the "
                                          "manifest's (sent before the WANT that asked for it?)",
                                          b->name, i));
    if (len != b->mc[i].len)
        return lander__fail_batch(b, ingest__fail(b->ctx, INGEST_EMISMATCH,
                                          "lander: batch %s: chunk %u has %zu bytes, manifest says %u", b->name, i,
                                          len, b->mc[i].len));
    /* Landed (or spilled) straight from raw: no copy into rbuf. */
    b->inbuf = raw;
    rc = put_tail(b, i, received);
    if (b->cst[i] & F_INBUF) /* not landed (the batch failed): keep its bytes past the caller's buffer */
        memcpy(b->rbuf, raw, len);
    b->inbuf = b->rbuf;
    return rc;
}


/* ------------------------------------------------------------ withdrawn */

int ingest_lander_withdraw(ingest_lander_batch *b, uint32_t i, int code, const char *reason)
{
    if (!b || b->state != B_ACTIVE)
        return b ? lander__bad_state(b) : INGEST_EINVAL;
    if (i >= b->nfiles)
        return ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch %s: no file %u to withdraw (it has %u)", b->name, i,
                            b->nfiles);
    lfile *f = &b->files[i];
    if (f->refused != NULL)
        return ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch %s: file %u withdrawn or refused already", b->name,
                            i);
    if (b->cur_file > i)
        return ingest__fail(b->ctx, INGEST_EBUSY, "lander: batch %s: file %u withdrawn after it landed", b->name, i);
    /* A file appended in place is written into its landed version: it cannot simply go (the batch fails
     * and is undone, the old way).  A file not started yet has no claim to lose. */
    if (f->append || f->app_reg)
        return ingest__fail(b->ctx, INGEST_EBUSY, "lander: batch %s: file %u withdrawn while it is appended in place",
                            b->name, i);
    const uint32_t lo = f->first, hi = f->first + f->nchunks;
    for (uint32_t j = i + 1; j < b->nfiles; j++) { /* a chunk's first occurrence is in the same or an earlier file */
        const lfile *g = &b->files[j];
        if (g->skip)
            continue;
        for (uint32_t k = g->first; k < g->first + g->nchunks; k++)
            if ((b->cst[k] & K_MASK) == K_DUP && b->src[k] >= lo && b->src[k] < hi)
                return ingest__fail(b->ctx, INGEST_EBUSY,
                                    "lander: batch %s: file %u withdrawn, but file %u repeats its chunk %u", b->name, i,
                                    j, b->src[k]);
    }
    if (b->cur_file == i)
        lander__close_fd(&b->run_fd); /* its pending unchanged run goes with it, never into the next file */
    if (b->cur_file == i && f->created) {
        /* the cursor is in it: its temporary file goes, with a directory made for it alone */
        char dir[LANDED_MAX], tn[NAME_MAX_BYTES + 1];
        const char *name;
        (void)lander__dw_wait(b); /* the file goes: a failed write of it is of no matter */
        lander__close_fd(&b->fd);
        b->dio_fill = 0;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        lander__tmp_name(b, name, i, tn, sizeof tn);
        if (b->dirfd >= 0)
            (void)unlinkat(b->dirfd, tn, 0);
        f->created = false;
        lander__drop_made_tail(b);
        b->cur_chunk = f->first;
    }
    /* the chunks only it needs: no longer awaited, nor taken if they came (put_check) */
    for (uint32_t k = lo; k < hi; k++) {
        if ((b->cst[k] & K_MASK) == K_RECV && !(b->cst[k] & (F_ARRIVED | F_INBUF | F_DONE)) && b->awaited > 0)
            b->awaited--;
        b->cst[k] |= F_DONE;
    }
    char why[INGEST__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", reason != NULL && reason[0] != '\0' ? reason : "withdrawn by the device");
    ingest__fail(b->ctx, code < 0 ? code : INGEST_ENOTFOUND, "%s", why); /* the reason lander__refuse_file records */
    INGEST__FORWARD(lander__refuse_file(b, i, code < 0 ? code : INGEST_ENOTFOUND));
    f->skip = true;
    /* the cursor may have waited for it */
    const int rc = lander__settle(b, lander__pump(b));
    return rc < 0 ? lander__fail_batch(b, rc) : 0;
}
