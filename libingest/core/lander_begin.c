/*
 * The lander's begin, in two phases: parse (no lock: read and bound the
 * manifest, make and check the landed paths, find the chunks the batch
 * repeats) and lookup (under the store's lock: the replay check, the index
 * lookups, the want list).
 */
#include "lander_int.h"

/* ----------------------------------------------------------------- begin */

int lander__cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Check every landed path: distinct, and no symlink/non-directory on the way. */
static int check_paths(ingest_lander_batch *b)
{
    int rc = 0;
    char **v = NULL;
    char lastdir[LANDED_MAX] = "";
    int lastfd = -2; /* -2: nothing cached; -1: directory absent */
    if (b->nfiles == 0)
        return 0;
    v = ingest__malloc(b->ctx, b->nfiles * sizeof *v);
    if (!v)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
    for (uint32_t i = 0; i < b->nfiles; i++)
        v[i] = b->files[i].landed;
    qsort(v, b->nfiles, sizeof *v, lander__cmp_strp);
    for (uint32_t i = 1; i < b->nfiles; i++) {
        if (strcmp(v[i - 1], v[i]) == 0) {
            rc = ingest__fail(b->ctx, INGEST_EINVAL, "lander: two files of batch %s land at %s", b->name, v[i]);
            goto out;
        }
    }
    /* "a" and "a/b" cannot both be landed: look each parent up */
    for (uint32_t i = 0; i < b->nfiles; i++) {
        char pre[LANDED_MAX];
        snprintf(pre, sizeof pre, "%s", v[i]);
        for (char *s = strchr(pre, '/'); s; s = strchr(s + 1, '/')) {
            *s = '\0';
            const char *key = pre;
            if (bsearch(&key, v, b->nfiles, sizeof *v, lander__cmp_strp)) {
                rc = ingest__fail(b->ctx, INGEST_EINVAL, "lander: batch %s: %s is both a file and a directory",
                                  b->name, pre);
                goto out;
            }
            *s = '/';
        }
    }
    /* The bronze tree on the way: what blocks a file refuses that file alone. */
    for (uint32_t i = 0; i < b->nfiles; i++) {
        const lfile *f = &b->files[i];
        if (f->refused != NULL)
            continue;
        char dir[LANDED_MAX];
        const char *name;
        lander__split_path(f->landed, dir, sizeof dir, &name);
        if (lastfd == -2 || strcmp(dir, lastdir) != 0) {
            if (lastfd >= 0)
                close(lastfd);
            lastfd = -2;
            snprintf(lastdir, sizeof lastdir, "%s", dir);
            rc = lander__walk_dir(b, f->path, dir, false, &lastfd);
            if (rc == INGEST_EINVAL || rc == INGEST_ETOOBIG) {
                /* a symlink or non-directory on the way (the next file of this directory finds it again) */
                lastfd = -2;
                if ((rc = lander__refuse_file(b, i, rc)) < 0)
                    goto out;
                continue;
            }
            if (rc < 0)
                goto out;
        }
        if (lastfd >= 0) {
            struct stat sb;
            /* an earlier version (a file, or a symlink landed as one) is replaced by the rename, never followed */
            if (fstatat(lastfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode) &&
                !S_ISLNK(sb.st_mode)) {
                rc = ingest__fail(b->ctx, INGEST_EEXIST,
                                  "lander: file %.200s: cannot land at %.200s: a %s is there in the bronze tree",
                                  f->path, f->landed,
                                  S_ISDIR(sb.st_mode) ? "directory" : S_ISLNK(sb.st_mode) ? "symlink" : "special file");
                if ((rc = lander__refuse_file(b, i, rc)) < 0)
                    goto out;
            }
        }
    }
out:
    if (lastfd >= 0)
        close(lastfd);
    ingest__free(b->ctx, v);
    return rc;
}

static uint64_t tab_hash(const ingest_lander *l, const uint8_t *id)
{
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, id, INGEST_ID_BYTES, l->tabkey);
    uint64_t v;
    memcpy(&v, h, sizeof v);
    return v;
}

/*
 * Parse phase: find the chunks the batch repeats (dup, landed by copying
 * their first occurrence) and allocate the per-chunk state.  Every other
 * chunk is left to receive until lookup_known asks the index.
 */
static int classify_dups(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    int rc = 0;
    uint32_t *tab = NULL;
    const uint32_t n = b->nchunks;
    b->pos = ingest__calloc(b->ctx, n ? n : 1, sizeof *b->pos);
    b->src = ingest__calloc(b->ctx, n ? n : 1, sizeof *b->src);
    b->cst = ingest__calloc(b->ctx, n ? n : 1, 1);
    b->wants = ingest__malloc(b->ctx, (n ? n : 1) * sizeof *b->wants);
    b->rew = ingest__malloc(b->ctx, (n ? n : 1) * sizeof *b->rew);
    uint64_t tcap = 16;
    while (tcap < (uint64_t)n * 2)
        tcap *= 2;
    tab = ingest__calloc(b->ctx, tcap, sizeof *tab);
    if (b->npushed > 0)
        b->pushed = ingest__calloc(b->ctx, n, 1);
    if (!b->pos || !b->src || !b->cst || !b->wants || !b->rew || !tab || (b->npushed > 0 && !b->pushed)) {
        rc = ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory for %u chunks", n);
        goto out;
    }
    static const uint8_t zero[INGEST_ID_BYTES];
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *id = b->mc[i].id;
        if (b->npushed > 0 && memcmp(id, zero, INGEST_ID_BYTES) == 0) {
            /* pushed: received whatever it holds (its id is not known before it arrives) */
            b->pushed[i] = 1;
            b->cst[i] = K_RECV;
            continue;
        }
        uint64_t s = tab_hash(l, id) & (tcap - 1);
        bool dup = false;
        while (tab[s] != 0) {
            const uint32_t j = tab[s] - 1;
            if (memcmp(b->mc[j].id, id, INGEST_ID_BYTES) == 0) {
                if (b->mc[j].len != b->mc[i].len) {
                    rc = ingest__fail(b->ctx, INGEST_EMISMATCH,
                                      "lander: batch %s: chunk %u and chunk %u have the same id and lengths %u, %u",
                                      b->name, j, i, b->mc[j].len, b->mc[i].len);
                    goto out;
                }
                b->cst[i] = K_DUP;
                b->src[i] = j;
                dup = true;
                break;
            }
            s = (s + 1) & (tcap - 1);
        }
        if (!dup) {
            tab[s] = i + 1;
            b->cst[i] = K_RECV;
        }
    }
out:
    ingest__free(b->ctx, tab);
    return rc;
}

/*
 * Lookup phase (the store's lock held): each first occurrence the index
 * holds in a valid landed file is known (copied from there); the others
 * make the want list.
 */
static int lookup_known(ingest_lander_batch *b)
{
    ingest_lander *l = b->l;
    const bool share = l->share_inflight && l->own_lock;
    int rc = 0;
    uint64_t last_no = UINT64_MAX;
    bool last_ok = false;
    b->nwants = 0;
    if (b->nrefused > 0) {
        /* A refused file is written (to its scratch copy) only when a file that lands repeats one of its
         * chunks; else none of its chunks is asked for and the landing passes it over (lander__pump). */
        /* (a refused file with pushed chunks is still received: its hash, then known, keeps the landed
         * manifest true and its replays recognisable) */
        for (uint32_t fi = 0; fi < b->nfiles; fi++)
            b->files[fi].skip = b->files[fi].refused != NULL && !b->files[fi].hash_late;
        /* last to first: a refused file that is needed needs in turn the files it repeats chunks of
         * (a chunk's first occurrence is always in the same or an earlier file) */
        for (uint32_t fi = b->nfiles; fi-- > 0;) {
            const lfile *f = &b->files[fi];
            if (f->skip)
                continue;
            for (uint32_t k = f->first; k < f->first + f->nchunks; k++) {
                if ((b->cst[k] & K_MASK) != K_DUP)
                    continue;
                b->files[lander__file_of_chunk(b, b->src[k])].skip = false;
            }
        }
    }
    uint32_t skip_end = 0; /* chunks [.., skip_end) of the file being looked at are passed over */
    for (uint32_t i = 0, fi = 0; i < b->nchunks; i++) {
        while (fi < b->nfiles && b->files[fi].first + b->files[fi].nchunks <= i)
            fi++;
        if (b->nrefused > 0 && fi < b->nfiles && b->files[fi].skip)
            skip_end = b->files[fi].first + b->files[fi].nchunks;
        if (i < skip_end || (b->cst[i] & K_MASK) == K_DUP)
            continue;
        if (b->pushed != NULL && b->pushed[i]) {
            b->wants[b->nwants++] = i; /* never looked up, never shared in flight */
            continue;
        }
        ingest_chunk_loc loc;
        rc = ingest_index_find_for(l->idx, b->device, b->mc[i].id, &loc);
        bool known = false;
        if (rc == 0 && loc.length == b->mc[i].len) {
            if (loc.file_no != last_no) {
                char p[LANDED_MAX + 512];
                rc = ingest_index_file_path(l->idx, loc.file_no, p, sizeof p);
                if (rc < 0 && rc != INGEST_ESTALE && rc != INGEST_ENOTFOUND)
                    return rc;
                last_no = loc.file_no;
                last_ok = rc == 0;
            }
            known = last_ok;
        } else if (rc < 0 && rc != INGEST_ENOTFOUND) {
            return rc;
        }
        rc = 0;
        if (known) {
            b->cst[i] = K_KNOWN;
        } else if (share && ingest__inflight_owner(l->idx, b->device, b->mc[i].id) != NULL) {
            /* another batch is receiving it: copied once it landed it (land_one) */
            b->cst[i] = K_PEER;
            b->npeer++;
        } else {
            b->cst[i] = K_RECV;
            b->wants[b->nwants++] = i;
            /* best effort: a full table or no memory only means the chunk is not shared */
            if (share && ingest__inflight_add(l->idx, b->device, b->mc[i].id, b) == 1)
                b->registered = true;
        }
    }
    b->awaited = (uint32_t)b->nwants;
    return 0;
}

/*
 * (device, batch) was landed before: check that its landed manifest holds
 * every file of this one, each with the same path and whole-file hash,
 * before calling this a replay.  A replay may hold fewer files than the
 * landed batch: the device leaves out a file that changed or vanished
 * since it sent the batch (its new version ships in a batch of its own),
 * and the rest, already landed, is acknowledged.  INGEST_EBATCHID when the id
 * was reused for other data (a file not among the landed ones, or with
 * other bytes); a missing landed manifest cannot be compared and is taken
 * as the same batch.  The batch is parsed whole: every file's hash is
 * known (derived from its chunk ids when the wire manifest left it out), but
 * that of a file with pushed chunks, known only once it landed: the
 * device's digest stands for those.
 */
static int cmp_landed(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

static int same_landed_batch(ingest_lander_batch *b)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/_manifests/%s/%s.jsonl", b->l->root, b->device, b->name);
    if (access(path, F_OK) != 0)
        return 0;
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    /* the landed files, each as "path\0" followed by its hash, sorted by path */
    char **landed = NULL;
    size_t n = 0, cap = 0;
    int rc = ingest_manifest_reader_open(b->ctx, path, &r);
    if (rc == 0)
        rc = ingest_manifest_reader_next(r, &rec);
    int same = rc == 1 && rec.type == INGEST_MREC_HEADER;
    /* The replay of exactly the batch that landed carries the digest it landed with: the same batch, even
     * when a pushed file of it was refused (its hash never known there). */
    if (same && rec.has_digest && b->has_digest && sodium_memcmp(rec.digest, b->digest, sizeof b->digest) == 0) {
        ingest_manifest_reader_close(r);
        return 0;
    }
    while (same && (rc = ingest_manifest_reader_next(r, &rec)) == 1) {
        if (rec.type != INGEST_MREC_FILE)
            continue;
        if (n == cap) {
            const size_t nc = cap ? cap * 2 : 64;
            char **nl = ingest__realloc(b->ctx, landed, cap * sizeof(*nl), nc * sizeof(*nl));
            if (nl == NULL) {
                rc = INGEST_ENOMEM;
                break;
            }
            landed = nl;
            cap = nc;
        }
        const size_t pl = strlen(rec.path);
        if ((landed[n] = ingest__malloc(b->ctx, pl + 1 + INGEST_ID_BYTES)) == NULL) {
            rc = INGEST_ENOMEM;
            break;
        }
        memcpy(landed[n], rec.path, pl + 1);
        memcpy(landed[n] + pl + 1, rec.hash, INGEST_ID_BYTES);
        n++;
    }
    ingest_manifest_reader_close(r);
    if (rc < 0)
        same = 0;
    if (same) {
        /* Files with pushed chunks have no hash yet: the device's digest of (path, hash) per file stands
         * for them, computed here again from the landed hashes of the same paths. */
        bool late = false;
        for (uint32_t i = 0; i < b->nfiles; i++)
            late = late || b->files[i].hash_late;
        ingest_filehash dg;
        ingest_filehash_init(&dg, b->l->key);
        qsort(landed, n, sizeof(*landed), cmp_landed);
        for (uint32_t i = 0; same && i < b->nfiles; i++) {
            const lfile *f = &b->files[i];
            const char *key = f->path;
            char **hit = bsearch(&key, landed, n, sizeof(*landed), cmp_landed);
            const uint8_t *h = hit != NULL ? (const uint8_t *)*hit + strlen(*hit) + 1 : NULL;
            same = h != NULL && (f->hash_late || memcmp(h, f->hash, INGEST_ID_BYTES) == 0);
            if (same && late)
                ingest_manifest_digest_add(&dg, f->path, h);
        }
        uint8_t d[INGEST_ID_BYTES];
        ingest_filehash_final(&dg, d);
        if (same && late)
            same = b->has_digest && sodium_memcmp(d, b->digest, sizeof d) == 0;
    }
    for (size_t i = 0; i < n; i++)
        ingest__free(b->ctx, landed[i]);
    ingest__free(b->ctx, landed);
    if (rc == INGEST_ENOMEM)
        return ingest__fail(b->ctx, INGEST_ENOMEM, "lander: batch %s: out of memory comparing it with its landed manifest",
                            b->name);
    if (!same)
        return ingest__fail(b->ctx, INGEST_EBATCHID,
                            "lander: batch id %s of device %s was already used for other data; refusing to treat "
                            "it as a replay (the device must use a new batch id)", b->name, b->device);
    return 0;
}

static int read_manifest(ingest_lander_batch *b, const char *device, const void *buf, size_t len)
{
    ingest_lander *l = b->l;
    ingest_manifest_reader *r = NULL;
    ingest_manifest_rec rec;
    lfile *f = NULL;
    uint64_t fsum = 0, fchunks = 0;
    int derive = 0; /* f's hash is derived from its chunk ids in dh */
    ingest_filehash dh;
    int rc = ingest_manifest_reader_mem(b->ctx, buf, len, &r);
    if (rc < 0)
        return rc;
    ingest_manifest_reader_set_flags(r, INGEST_MANIFEST_READ_HASH_OPTIONAL |
                                            (b->push ? INGEST_MANIFEST_READ_ID_OPTIONAL : 0u));
    rc = ingest_manifest_reader_next(r, &rec);
    if (rc == 0)
        rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: empty manifest from device %s", device);
    if (rc < 0)
        goto out;
    if (rec.type != INGEST_MREC_HEADER) {
        rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: manifest from device %s does not start with a header",
                          device);
        goto out;
    }
    if (strcmp(rec.device, device) != 0) {
        rc = ingest__fail(b->ctx, INGEST_EPROTO, "lander: manifest names device \"%s\", peer is \"%s\"",
                          rec.device, device);
        goto out;
    }
    if ((rc = ingest__path_check_id(b->ctx, "batch", rec.batch)) < 0)
        goto out;
    b->name = ingest__strdup(b->ctx, rec.batch);
    if (!b->name) {
        rc = ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
        goto out;
    }
    b->hdr_files = rec.nfiles;
    b->hdr_bytes = rec.total_bytes;
    b->has_digest = rec.has_digest != 0;
    memcpy(b->digest, rec.digest, sizeof b->digest);
    lander__hook(b, INGEST__LANDER_HOOK_PARSE);
    if (rec.nfiles > l->max_files) {
        rc = ingest__fail(b->ctx, INGEST_ETOOBIG, "lander: batch %s announces %llu files (at most %u)", b->name,
                          (unsigned long long)rec.nfiles, l->max_files);
        goto out;
    }
    /* Sized from the bytes received, not from what the header claims: a file
     * line holds at least MANIFEST_FILE_LINE_MIN bytes. */
    if (rec.nfiles > len / MANIFEST_FILE_LINE_MIN) {
        rc = ingest__fail(b->ctx, INGEST_ECORRUPT,
                          "lander: batch %s announces %llu files, but its manifest of %zu bytes holds at most %zu",
                          b->name, (unsigned long long)rec.nfiles, len, len / MANIFEST_FILE_LINE_MIN);
        goto out;
    }
    b->nfiles = (uint32_t)rec.nfiles;
    b->files = ingest__calloc(b->ctx, b->nfiles ? b->nfiles : 1, sizeof *b->files);
    if (!b->files) {
        rc = ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory for %u files", b->nfiles);
        goto out;
    }
    for (;;) {
        rc = ingest_manifest_reader_next(r, &rec);
        if (rc < 0)
            goto out;
        if (rc == 0 || rec.type == INGEST_MREC_FILE) {
            if (f && derive) {
                /* the wire manifest left the hash out: it is that of the chunk ids (docs/manifest.md),
                 * known now unless some were pushed (then when the file has landed: finish_file) */
                ingest_filehash_final(&dh, f->hash);
                if (f->hash_late)
                    memset(f->hash, 0, sizeof f->hash);
                f->hash_derived = !f->hash_late;
                derive = 0;
            }
            if (f && fsum != f->size) {
                rc = ingest__fail(b->ctx, INGEST_EMISMATCH,
                                  "lander: file %s: chunk lengths add up to %llu bytes, size is %llu", f->path,
                                  (unsigned long long)fsum, (unsigned long long)f->size);
                goto out;
            }
            if (f && fchunks != f->nchunks) {
                rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: file %s: %llu chunks listed, %u announced",
                                  f->path, (unsigned long long)fchunks, f->nchunks);
                goto out;
            }
            if (rc == 0)
                break;
            if (b->nfiles_read >= b->nfiles) {
                rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: batch %s: more files than the %u announced",
                                  b->name, b->nfiles);
                goto out;
            }
            f = &b->files[b->nfiles_read++];
            if ((rc = ingest__path_check_rel(b->ctx, "file", rec.path)) < 0)
                goto out;
            f->path = ingest__strdup(b->ctx, rec.path);
            if (!f->path) {
                rc = ingest__fail(b->ctx, INGEST_ENOMEM, "lander: out of memory");
                goto out;
            }
            f->size = rec.size;
            f->mtime_ns = rec.mtime_ns;
            f->mode = rec.mode;
            memcpy(f->hash, rec.hash, sizeof f->hash);
            if (rec.omit_hash) {
                derive = 1;
                ingest_filehash_init(&dh, l->key);
            }
            if (rec.nchunks_total > l->max_chunks) {
                rc = ingest__fail(b->ctx, INGEST_ETOOBIG, "lander: file %s: %llu chunks (at most %u)", f->path,
                                  (unsigned long long)rec.nchunks_total, l->max_chunks);
                goto out;
            }
            f->first = b->nchunks;
            f->nchunks = (uint32_t)rec.nchunks_total;
            fsum = 0;
            fchunks = 0;
        } else if (rec.type != INGEST_MREC_CHUNKS || !f) {
            rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: batch %s: unexpected record type %d", b->name,
                              rec.type);
            goto out;
        }
        if (rec.nchunks > 0) {
            if ((uint64_t)b->nchunks + rec.nchunks > l->max_chunks) {
                rc = ingest__fail(b->ctx, INGEST_ETOOBIG, "lander: batch %s has more than %u chunks", b->name,
                                  l->max_chunks);
                goto out;
            }
            if ((rc = lander__chunks_grow(b, b->nchunks + rec.nchunks)) < 0)
                goto out;
            for (uint32_t k = 0; k < rec.nchunks; k++) {
                const uint32_t cl = rec.chunks[k].len;
                if (cl == 0 || cl > INGEST_CODEC_MAX_RAW) {
                    rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: file %s: chunk %llu has length %u", f->path,
                                      (unsigned long long)(fchunks + k), cl);
                    goto out;
                }
                fsum += cl;
                if (derive)
                    ingest_filehash_update(&dh, rec.chunks[k].id, INGEST_ID_BYTES);
                if (rec.npushed > 0 && derive)
                    f->hash_late = true; /* (with a hash given, it is checked when the file has landed) */
                if (rec.npushed > 0 && f->size > INGEST_WIRE_PUSH_FILE_MAX) {
                    /* (bounds what a manifest of short [length] entries can make the receiver hold) */
                    rc = ingest__fail(b->ctx, INGEST_ECORRUPT,
                                      "lander: file %s: %llu bytes, chunks listed without ids (at most %u bytes)",
                                      f->path, (unsigned long long)f->size, INGEST_WIRE_PUSH_FILE_MAX);
                    goto out;
                }
                b->mc[b->nchunks++] = rec.chunks[k];
            }
            fchunks += rec.nchunks;
            b->npushed += rec.npushed;
        }
    }
    if (b->nfiles_read != b->nfiles) {
        rc = ingest__fail(b->ctx, INGEST_ECORRUPT, "lander: batch %s: %u files listed, %u announced", b->name,
                          b->nfiles_read, b->nfiles);
        goto out;
    }
    if (b->npushed > 0 && !b->has_digest) {
        rc = ingest__fail(b->ctx, INGEST_ECORRUPT,
                          "lander: batch %s: chunks listed without ids, and no digest in the header", b->name);
        goto out;
    }
    rc = 0;
out:
    ingest_manifest_reader_close(r);
    return rc;
}

int ingest_lander_parse(ingest_lander *l, const char *device, const void *manifest, size_t len,
                        ingest_lander_batch **out)
{
    return ingest_lander_parse_ex(l, device, manifest, len, 0, out);
}

int ingest_lander_parse_ex(ingest_lander *l, const char *device, const void *manifest, size_t len, unsigned flags,
                           ingest_lander_batch **out)
{
    if (out)
        *out = NULL;
    if (!l || !device || !manifest || !out || (flags & ~INGEST_LANDER_PARSE_PUSH) != 0)
        return INGEST_EINVAL;
    if (l->busy)
        return ingest__fail(l->ctx, INGEST_EBUSY, "lander: batch %s still open", l->busy->name);
    INGEST__FORWARD(ingest__path_check_id(l->ctx, "device", device));
    /* The batch holds an ingest_filehash (_Alignas(64)); a context's allocator promises only what malloc
     * does (16 bytes here): the batch is placed at the first aligned address of a larger block. */
    const size_t align = _Alignof(ingest_lander_batch);
    void *mem = ingest__calloc(l->ctx, 1, sizeof(ingest_lander_batch) + align - 1);
    if (!mem)
        return ingest__fail(l->ctx, INGEST_ENOMEM, "lander: out of memory");
    ingest_lander_batch *b = (void *)((uint8_t *)mem + (align - (uintptr_t)mem % align) % align);
    b->mem = mem;
    b->l = l;
    b->ctx = l->ctx;
    b->fd = b->dirfd = b->sdirfd = b->srcfd = b->spillfd = b->run_fd = b->base_fd = b->old_fd = b->app_lock_fd = -1;
    b->base_fi = UINT32_MAX;
    b->src_no = UINT64_MAX;
    b->push = (flags & INGEST_LANDER_PARSE_PUSH) != 0;
    b->state = B_DEAD; /* nothing to remove until landing starts */
    b->sweep_mark = lander__sweep_mark(l->rootfd);
    int rc;
    b->device = ingest__strdup(l->ctx, device);
    if (!b->device) {
        rc = ingest__fail(l->ctx, INGEST_ENOMEM, "lander: out of memory");
        goto fail;
    }
    lander__dev_tag(device, b->devtag);
    rc = read_manifest(b, device, manifest, len);
    if (rc < 0)
        goto fail;
    uint32_t maxlen = 0;
    for (uint32_t i = 0; i < b->nchunks; i++)
        if (b->mc[i].len > maxlen)
            maxlen = b->mc[i].len;
    for (uint32_t i = 0; i < b->nfiles; i++) {
        lfile *f = &b->files[i];
        char p[LANDED_MAX];
        rc = lander__landed_path(l, device, b->name, f->path, f->mtime_ns, p, sizeof p);
        if (rc == INGEST_ENOMEM)
            goto fail;
        b->stats.bytes += f->size;
        if (rc < 0) {
            /* its path: about this file alone */
            if ((rc = lander__refuse_file(b, i, rc)) < 0)
                goto fail;
            continue;
        }
        f->landed = ingest__strdup(l->ctx, p);
        if (!f->landed) {
            rc = ingest__fail(l->ctx, INGEST_ENOMEM, "lander: out of memory");
            goto fail;
        }
        f->link = S_ISLNK(f->mode);
        if (f->link && (f->size == 0 || f->size > INGEST_LANDER_LINK_MAX)) {
            rc = ingest__fail(l->ctx, INGEST_EINVAL,
                              "lander: file %.200s: a symlink's target is 1..%d bytes; this one is %llu",
                              f->path, INGEST_LANDER_LINK_MAX, (unsigned long long)f->size);
            if ((rc = lander__refuse_file(b, i, rc)) < 0)
                goto fail;
        }
    }
    if ((rc = check_paths(b)) < 0)
        goto fail;
    if ((rc = classify_dups(b)) < 0)
        goto fail;
    if ((rc = lander__bufs_reserve(b, maxlen ? maxlen : 1)) < 0)
        goto fail;
    b->stats.files = b->nfiles;
    b->stats.chunks = b->nchunks;
    b->state = B_PARSED;
    l->busy = b;
    *out = b;
    return 0;
fail:
    ingest_lander_batch_destroy(b);
    return rc;
}

int ingest_lander_lookup(ingest_lander_batch *b)
{
    if (!b)
        return INGEST_EINVAL;
    if (b->state != B_PARSED)
        return lander__bad_state(b);
    b->state = B_DEAD; /* unless it comes out landing */
    lander__enter(b->l);
    lander__hook(b, INGEST__LANDER_HOOK_LOOKUP);
    int rc = ingest_index_batch_landed(b->l->idx, b->device, b->name);
    if (rc == 1) {
        /* A replay carries the same batch; a device that lost its state may reuse an id for new data. */
        rc = same_landed_batch(b);
        if (rc == 0)
            rc = INGEST_LANDER_ALREADY;
    } else if (rc == 0) {
        rc = lookup_known(b);
    }
    rc = lander__leave(b, rc);
    if (rc == INGEST_LANDER_ALREADY)
        ingest__log(b->ctx, INGEST_LOG_INFO, "lander: batch %s of %s already landed", b->name, b->device);
    if (rc == 0)
        b->state = B_ACTIVE;
    return rc;
}

int ingest_lander_begin(ingest_lander *l, const char *device, const void *manifest, size_t len,
                        ingest_lander_batch **out)
{
    if (out == NULL)
        return INGEST_EINVAL;
    *out = NULL;
    ingest_lander_batch *b = NULL;
    int rc = ingest_lander_parse(l, device, manifest, len, &b);
    if (rc == 0)
        rc = ingest_lander_lookup(b);
    if (rc != 0) {
        ingest_lander_batch_destroy(b);
        return rc;
    }
    *out = b;
    return 0;
}
