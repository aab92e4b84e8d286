#ifndef INGEST_LANDER_INT_H
#define INGEST_LANDER_INT_H

/*
 * Inside the lander, its parts' shared definitions.
 *
 * The landing engine: manifest -> want list -> chunks -> files written once,
 * sequentially, to temporary names -> durable -> renamed -> manifest ->
 * index.  See include/ingest/lander.h and docs/landing.md.
 *
 * Memory.  Per chunk: its manifest entry {id, len} (36 bytes, kept as one
 * array so the manifest writer takes a file's chunks in place), a u64
 * position (offset in the spill file before it is written, offset in its
 * landed file after), a u32 (first occurrence of a duplicate) and a state
 * byte (and a byte more when some chunks were pushed).  Per file: its paths.  Two chunk buffers of the largest chunk
 * seen.  Nothing else grows with the batch.
 *
 * Landing is a cursor over the chunk list.  A chunk is landed when the
 * cursor reaches it and its bytes are available: received (straight from
 * put_chunk, or from the spill file when it arrived early), copied from a
 * landed file named by the index (known), or copied from the temporary
 * file where its first occurrence in this batch was written (dup).  Every
 * copied range is read into memory and hashed before it is written, so the
 * id check and the copy see the same bytes.
 */
#include "ingest/catalog.h"
#include "ingest/lander.h"
#include "ingest/wire.h"
#include "ingest/manifest.h"
#include "../internal.h"
#include "../store.h"
#include "../pathpolicy.h"
#include "lander_hook.h"
#include "lander_syncs.h"
#include "inflight.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


#define LANDED_MAX INGEST_PATH_LANDED_MAX    /* bytes of a landed path, NUL included */
#define NAME_MAX_BYTES INGEST_PATH_NAME_MAX /* bytes of one path component */
#define MANIFEST_FLUSH (1u << 20)
/* The shortest file line a manifest can hold ({"type":"file","path":"x",...} with its required keys). */
#define MANIFEST_FILE_LINE_MIN 40u
/*
 * Temporary files are named ".{name}.ingest-tmp-{tag}.{devtag}.{batch}" (or
 * ".ingest-tmp-{tag}.{devtag}.{batch}.{n}" when that is too long; {devtag}:
 * lander__dev_tag), where {tag} is
 * TMP_TAG_HEX random hex digits kept in {bronze}/_manifests/TMP_TAG_FILE,
 * made once per bronze tree.  A device cannot guess it, so no name a device
 * sends is ever taken for a temporary file: neither truncated by one, nor
 * removed by the sweep after a crash.
 */
#define TMP_TAG_FILE ".tmp-tag"
/* Where the bytes of refused files are written while their batch lands. */
#define REFUSED_DIR "_manifests/.refused"
#define TMP_TAG_HEX 16
#define TMP_MARK_MAX (sizeof ".ingest-tmp-." + TMP_TAG_HEX)
/* Hex digits of the device's tag in temporary names (an unkeyed BLAKE2b of its id). */
#define DEV_TAG_HEX 16
/* Batches of at least this many files are made durable with syncfs(). */
#define INGEST_LANDER_SYNCFS_MIN 16u
/* files this large start their writeback as soon as they are written (lander_land.c finish_file) */
#define LANDER_EARLY_WRITEBACK_MIN (256u * 1024u)

/* K_PEER: another batch is receiving it (inflight.h); copied once that batch landed it, else asked for */
enum { K_RECV = 0, K_KNOWN = 1, K_DUP = 2, K_PEER = 3, K_MASK = 3 };
enum { F_ARRIVED = 4, F_INBUF = 8, F_DONE = 16 };
/*
 * Batch states.  PARSED (ingest_lander_parse done): the manifest is read
 * and checked, the index not consulted yet; only lookup or destroy remain.
 * ACTIVE: landing, may still ask the device for chunks.
 * PREPARED (commit_prepare done): every file complete under its temporary
 * name, only commit_finish or destroy remain.  DEAD: aborted.
 */
enum { B_ACTIVE = 0, B_DEAD = 1, B_COMMITTED = 2, B_PREPARED = 3, B_PARSED = 4 };

struct ingest_lander_s {
    ingest_ctx *ctx;
    ingest_store *st;
    ingest_index *idx;
    ingest_codec *codec;
    char *root;
    int rootfd;
    char *layout;
    uint8_t key[INGEST_KEY_BYTES];
    uint8_t tabkey[crypto_shorthash_KEYBYTES];
    uint32_t max_files, max_chunks;
    bool direct_io; /* write temporary files of dio_min bytes or more with O_DIRECT where the filesystem takes it */
    uint64_t dio_min;
    ingest__dbi vdb;
    bool vdb_open;
    ingest_lander_batch *busy;
    char tmp_mark[TMP_MARK_MAX]; /* ".ingest-tmp-{tag}." : in every temporary file's name */
    ingest_catalog *catalog;     /* batches are added to it once durable (ingest_lander_set_catalog), or NULL */
    /* The lock of the store and index, taken by the lander itself around
     * its work on them (ingest_lander_set_lock); own_lock false: the
     * caller holds its lock around the calls instead. */
    ingest_lander_lock lk;
    bool own_lock;
    ingest__lander_hook_fn hook; /* tests: called at points of the landing (ingest__lander_set_hook), or NULL */
    void *hook_ud;
    /* The id of the all-zero chunk of zero_len bytes, learnt from the last
     * verified chunk found all zero (0: none yet): a known or repeated chunk
     * with this id and length is a hole, landed without reading it. */
    uint32_t zero_len;
    uint8_t zero_id[INGEST_ID_BYTES];
    /* Share chunks in flight with the other landers of the index (ingest_lander_set_share_inflight):
     * only with the lander's own lock; wait at most peer_wait_ms at commit for their batches. */
    bool share_inflight;
    int peer_wait_ms;
    /* A filesystem that refused FICLONERANGE (clone_bad_dev): unchanged runs are copied there, not cloned,
     * without asking again (docs/landing.md, "Unchanged runs"). */
    bool clone_bad;
    dev_t clone_bad_dev;
    bool append; /* land growing files in place (ingest_lander_set_append, lander_append.c) */
    bool app_dir_synced; /* _manifests/.append's name fsynced into _manifests by this lander (lander__app_intent) */
    bool old_dir_synced; /* _manifests/.replace's name fsynced into _manifests by this lander (lander_undo.c) */
    bool test_fail_index; /* tests: step 4 fails (ingest__lander_set_fail_index) */
    ingest__syncs own_syncs; /* the syncfs count of this lander alone ... */
    ingest__syncs *syncs;    /* ... or the one its core shares (ingest__lander_share_syncs) */
};

typedef struct lfile {
    char *path;   /* relative path at the device */
    char *landed; /* relative to the bronze root */
    uint64_t size;
    int64_t mtime_ns;
    uint32_t mode;
    uint8_t hash[INGEST_ID_BYTES];
    /* some of its chunks were pushed (ids taken from their bytes): hash is
     * known only once it landed (finish_file), not from the manifest */
    bool hash_late;
    /* hash was derived at the parse from the ids listed, none pushed: landing them needs no check of it */
    bool hash_derived;
    uint32_t first, nchunks;
    uint64_t version;
    ingest_file_identity ident;
    bool ident_set; /* ident read from the open temporary file when it was finished (finish_file) */
    bool created; /* its temporary file exists */
    bool renamed; /* moved to its final name */
    bool fresh;   /* nothing was at its final name when the renames began */
    bool link;    /* its manifest mode is a symlink: lands as a symlink (INGEST_LANDER_LINK_MAX) */
    /* 1 + the batch's stage its directory is in (lander__enter_land_dir), 0: none.  Its data file then
     * has its final name, in the stage, until the stage is put in place. */
    uint32_t stage;
    bool linked;  /* its temporary is now a symlink (lander__tmp_link_name), the data file removed */
    /* Replaced versions (lander_undo.c): old, its final name held a file or symlink in commit step 1 (it is in
     * the batch's replace intent); backed, that version is linked under its backup name. */
    bool old;
    bool backed;
    /* Refused (ingest_lander_refused): why, and the code; landed is then a
     * scratch place under _manifests/.refused where its bytes are written
     * (later files may copy chunks from them) and removed at commit. */
    char *refused;
    int refused_code;
    bool skip; /* refused, and no other file of the batch copies a chunk from it: nothing of it is asked for or written */
    /*
     * Appended in place (lander_append.c): written into its landed file
     * (app_dev, app_ino: app_size bytes, mtime app_mtime, mode app_mode when
     * the batch began it; index file app_no), not to a temporary file.
     * app_reg: it holds the lander table's entry for that file (no other
     * batch appends to it meanwhile); app_grown: its intent is durable and
     * the file may differ from what it was; app_done: the batch's manifest
     * is in place, the append is never taken back.
     */
    bool append, app_reg, app_grown, app_done;
    bool app_off; /* found not to be a growing version: written whole (never tried again) */
    uint64_t app_size, app_dev, app_ino, app_no;
    int64_t app_mtime;
    uint32_t app_mode;
} lfile;

/*
 * A staged directory (docs/landing.md, "New directories"): a directory
 * missing from the bronze tree when the batch first wrote under it, made
 * under a temporary name (real) in its parent instead of its final name;
 * the batch's files under it are written there with their final names.
 * At commit it is renamed into place whole when its final name is still
 * free (whole), or else its files are moved one by one (merge).
 */
typedef struct lstage {
    char *final; /* bronze-relative */
    char *real;  /* its parent's path and the temporary name */
    bool whole;  /* check_final_names found the final name free */
    bool placed; /* renamed into place whole (undo renames it back) */
    bool gone;   /* removed again (its only file withdrawn): never used */
} lstage;

/*
 * A sweep (ingest_lander_sweep) makes _manifests/.sweep anew before it
 * removes anything: a batch that finds it changed between its begin and
 * its commit may have lost temporary files to it (a peer's sweep of a
 * shared tree) and looks at each of them (commit step 1).  Zero: none.
 */
typedef struct lander_mark {
    uint64_t ino;
    int64_t ctime_ns;
} lander_mark;
lander_mark lander__sweep_mark(int rootfd);

struct ingest_lander_batch_s {
    void *mem; /* the allocation the batch lies in, aligned inside it (ingest_lander_parse_ex) */
    ingest_lander *l;
    ingest_ctx *ctx;
    int state;
    char *device;
    char devtag[DEV_TAG_HEX + 1]; /* the device in temporary names (lander__tmp_name) */
    char *name;
    lfile *files;
    uint32_t nfiles, nfiles_read;
    uint32_t npeer;        /* chunks left to K_PEER at lookup */
    bool registered;       /* its wanted chunks are in the index's in-flight table (released at the end) */
    uint32_t *refused_idx; /* files refused one by one, ascending */
    uint32_t nrefused;
    ingest_manifest_chunk *mc;
    uint64_t *pos;
    uint32_t *src;
    uint8_t *cst;
    uint32_t nchunks, chunk_cap;
    /* Pushed chunks (INGEST_LANDER_PARSE_PUSH, docs/protocol.md "Pushed
     * chunks"): listed without an id, wanted without a lookup, their id
     * taken from their bytes when they arrive.  pushed[i] is fixed at parse
     * (other threads read it, ingest_lander_chunk_pushed); NULL when none. */
    bool push;
    uint8_t *pushed;
    uint32_t npushed;
    /* the header's digest of (path, hash) per file (ingest_manifest_digest), for the replay check */
    bool has_digest;
    uint8_t digest[INGEST_ID_BYTES];
    uint32_t *wants;
    size_t nwants;
    uint32_t *rew;
    size_t nrew, rew_reported;
    uint32_t awaited;
    bool lookahead_done;
    bool syncfs; /* commit syncs with syncfs() */
    bool old_intent; /* its replace intent is written (lander_undo.c), and not removed yet */
    int old_fd;      /* that intent, open with flock(LOCK_EX) while the batch may act on it, -1 */
    char old_try[9]; /* this try's tag in the intent's and the backups' names (8 random hex digits) */
    int app_lock_fd; /* its append intents' lock, held (flock) from its first intent to its end, -1 */
    bool manifest_placed; /* its manifest was renamed into place (commit step 3): landed, never taken back */
    bool old_dirty;  /* a backup was linked in dirfd since it was last fsynced (lander__old_keep) */
    uint64_t syncs_seen; /* the lander's syncfs count when its last file was written (commit_prepare) */
    bool wrote;  /* store writes of ours not committed yet (see settle) */
    /* cursor */
    uint32_t cur_file, cur_chunk;
    int fd;           /* temporary file being written, -1 */
    /* O_DIRECT writing (fd opened so): chunks gather in dio, written whole
     * at dio_base, the tail padded to DIO_ALIGN and the file truncated */
    bool direct;
    uint8_t *dio;     /* DIO_BUF bytes aligned to DIO_ALIGN inside dio_mem, or NULL */
    uint8_t *dio_other; /* the other DIO_BUF bytes: being written by the direct-I/O writer (lander_dw.c) */
    struct lander_dw *dw; /* that writer, NULL before the batch's first direct write */
    struct lander_sf *sf; /* the small-file helper (lander_sf.c), NULL before its first file */
    void *dio_mem;    /* the allocation (context's allocator) dio lies in */
    size_t dio_fill;
    size_t dio_zeros; /* bytes at the end of dio[0, dio_fill) known to be zeros (added by a hole) */
    uint64_t dio_base;
    int dirfd;        /* directory of cur_dir, -1 */
    char *cur_dir;    /* relative directory cached in dirfd */
    uint64_t file_off;
    /* a zero chunk was skipped (a hole) and nothing written past it yet: the
     * file's size may be short of the bytes landed (fill_holes in lander_land.c) */
    bool size_short;
    bool mode_set; /* the file being written has its landed mode already (no fchmod at its end) */
    bool mode_late; /* ...or it is checked with the stat at its end (a file smaller than a block) */
    ingest_filehash fh;
    bool fh_on; /* fh is computed for the file being landed (cursor_start) */
    /* known-chunk source cache */
    int srcfd;
    uint64_t src_no;
    /*
     * A run of known chunks, verified, from one landed file at the offsets
     * they have in the file being written (an unchanged run whose offset did
     * not move): counted in file_off and the file hash but not written yet.
     * run_flush (lander_land.c) clones its block-aligned interior and copies
     * its edges.  run_fd: the source (a descriptor of its own), -1: no run.
     */
    int run_fd;
    uint64_t run_no, run_start, run_end;
    bool clone_ok;    /* the file being written may take clones (its filesystem did not refuse one) */
    uint32_t blksize; /* its filesystem's block size (clone alignment) */
    dev_t dev;        /* its filesystem */
    /* predecessors of wanted chunks (lander_delta.c): the landed file of base_fi
     * (base_fd, base_size bytes, or -1) and the offset base_off of its chunk base_ci */
    int base_fd;
    uint32_t base_fi, base_ci;
    uint64_t base_off, base_size;
    /* spill */
    int spillfd;
    uint64_t spill_len;
    /* buffers */
    uint8_t *rbuf, *cbuf;
    size_t bufcap;
    /* the verified bytes of the chunk being put (F_INBUF): rbuf, or the
     * caller's (put_verified, which lands from them without a copy) */
    const uint8_t *inbuf;
    /* directories to fsync at commit (relative, "" = root) */
    char **dirs;
    size_t ndirs, dirs_cap;
    /* staged directories (lander__enter_land_dir), in order */
    lstage *stages;
    size_t nstages, stages_cap;
    int sdirfd;       /* a directory files are moved from at commit (merged stages), -1 */
    char *s_dir;      /* its path */
    /* directories this batch created, in order (removed again, when empty, with its temporary files) */
    char **made;
    size_t nmade, made_cap;
    ingest_lander_stats stats;
    lander_mark sweep_mark; /* _manifests/.sweep when the batch began (lander__sweep_mark) */
    /* from the manifest's header, for the replay check of lookup */
    uint64_t hdr_files, hdr_bytes;
};


#define DIO_ALIGN 4096u
#define DIO_BUF (256u * 1024u)
/*
 * Files smaller than this are written through the page cache even with
 * direct I/O on: a file within one buffer is one O_DIRECT write that the
 * landing thread must wait for at its end (nothing overlaps it), where a
 * cached write costs a copy and no wait; the syncfs of the commit writes
 * them out together.  On the gateway bench tree (1 GiB, 39,443 files)
 * this took a ship from 6.2-6.6 s to 5.3-5.7 s (docs/landing.md).
 */
#define LANDER_DIO_MIN ((uint64_t)DIO_BUF)
/* A chunk of at least this many bytes that is all zero is left as a hole in its file (docs/landing.md, "Holes"). */
#define HOLE_MIN 4096u

/*
 * Shared by the parts of the lander: lander.c defines the helpers and the
 * batch-state functions, lander_paths.c the path, tag and directory ones,
 * lander_land.c pump, lander_begin.c cmp_strp.
 */
int lander__sys_fail(ingest_ctx *ctx, int err, const char *what, const char *path);
int lander__write_full(int fd, const void *p, size_t n);
int lander__pread_full(int fd, void *p, size_t n, uint64_t off);
void lander__close_fd(int *fd);
/* The direct-I/O writer (lander_dw.c): a write handed over (-1 errno: one before failed), its end awaited, stopped. */
int lander__dw_post(ingest_lander_batch *b, int fd, const uint8_t *buf, size_t len, uint64_t off);
int lander__dw_wait(ingest_lander_batch *b);
void lander__dw_stop(ingest_lander_batch *b);
/*
 * The small-file helper (lander_sf.c): a batch of at least SF_MIN_FILES
 * files hands whole files of one received chunk, at most SF_FILE_MAX
 * bytes, to a thread of its own while fewer than SF_AHEAD are queued.
 * take: a free slot, or NULL (land it here; *rc < 0: the helper failed
 * before); fill: the job queued (1), or 0 (land it here); wait: every
 * queued file landed (or its failure reported); stop: joined, the queue
 * dropped.
 */
#define SF_AHEAD 2u
#define SF_FILE_MAX (64u * 1024u)
#define SF_MIN_FILES 32u
typedef struct sfslot sfslot;
sfslot *lander__sf_take(ingest_lander_batch *b, int *rc);
int lander__sf_fill(ingest_lander_batch *b, sfslot *slot, uint32_t fi, int dirfd, const char *name,
                    const uint8_t *data, uint32_t len, uint32_t mode, int64_t mtime_ns);
int lander__sf_wait(ingest_lander_batch *b);
void lander__sf_stop(ingest_lander_batch *b);
void lander__split_path(const char *p, char *dir, size_t cap, const char **name);
/* f's identity for the index (device, inode, size, mtime) from a stat of its data file */
void lander__ident_of(lfile *f, const struct stat *sb);
void lander__tmp_name(const ingest_lander_batch *b, const char *name, uint32_t fi, char *out, size_t cap);
void lander__tmp_link_name(const ingest_lander_batch *b, uint32_t fi, char *out, size_t cap);
/* The temporary under which file fi is now (its data file, or the symlink made at commit). */
void lander__tmp_of(const ingest_lander_batch *b, const char *name, uint32_t fi, char *out, size_t cap);
void lander__dev_tag(const char *device, char tag[DEV_TAG_HEX + 1]);
int lander__tmp_tag(ingest_ctx *ctx, int rootfd, const char *root, bool create, char mark[TMP_MARK_MAX]);
int lander__bufs_reserve(ingest_lander_batch *b, size_t n);
int lander__chunks_grow(ingest_lander_batch *b, uint32_t need);
int lander__bad_state(ingest_lander_batch *b);
int lander__settle(ingest_lander_batch *b, int rc);
int lander__store_fail(ingest_lander_batch *b, int rc, const char *what, const char *path);
int lander__fail_batch(ingest_lander_batch *b, int rc);
int lander__pump(ingest_lander_batch *b);
void lander__remove_temps(ingest_lander_batch *b);
void lander__remove_made_dirs(ingest_lander_batch *b);
void lander__inflight_release(ingest_lander_batch *b, bool locked);
/* Appending in place (lander_append.c). */
int lander__app_try(ingest_lander_batch *b, uint32_t fi);
int lander__app_intent(ingest_lander_batch *b, uint32_t fi);
void lander__app_undo(ingest_lander_batch *b);
void lander__app_release(ingest_lander_batch *b, bool locked);
void lander__app_release_file(ingest_lander_batch *b, uint32_t fi);
void lander__app_finished(ingest_lander_batch *b);
int lander__app_sweep(ingest_ctx *ctx, int rootfd, uint64_t *cut, uint64_t *left);
/* The batch's append intents no longer its own to act on (landed, or taken back as far as it could): their
 * lock released (its file removed first). */
void lander__app_unlock(ingest_lander_batch *b);
/* Make intent directory dir of the bronze root (under _manifests) if missing, and its name durable once per
 * lander (*synced, the lander's flag for dir). */
int lander__intent_dir(ingest_lander_batch *b, const char *dir, bool *synced);
/* Act on intent name (in dfd, a directory of the bronze root), counting in *done what it did and in *left an
 * intent that stays. */
typedef void (*lander_intent_fn)(ingest_ctx *ctx, int rootfd, int dfd, const char *name, uint64_t *done,
                                 uint64_t *left);
/* Call fn for each intent (a name not beginning with '.') in directory dir of the bronze root, then fsync dir:
 * 0, or < 0 when dir is there and cannot be read. */
int lander__sweep_intents(ingest_ctx *ctx, int rootfd, const char *dir, lander_intent_fn fn, uint64_t *done,
                          uint64_t *left);
/* The name under which file fi's data is in its directory now: its final name when appended in place, else its temporary. */
void lander__data_name(const ingest_lander_batch *b, const char *name, uint32_t fi, char *out, size_t cap);

/*
 * Replaced versions (lander_undo.c).  old_keep, in commit step 1 once every
 * file's identity is known: the replace intent, durable, then a backup link
 * of each landed version a file of b will replace; with dir_sync each
 * backup's directory is fsynced, else the caller's syncfs that follows
 * makes them durable (b->old_intent: any kept).  old_restore: file i's
 * backup renamed back over its final name (it was renamed there): true
 * when it was.  old_done: the batch landed: backups and intent removed.
 * old_undo: the batch failed: each file renamed in place gets its landed
 * version back, the other backups go, then the intent (unless an undo
 * failed: the next start's sweep tries again).  old_sweep: the intents
 * left under _manifests/.replace, acted on (ingest_lander_sweep_appends).
 */
int lander__old_keep(ingest_lander_batch *b, bool dir_sync);
bool lander__old_restore(ingest_lander_batch *b, uint32_t i);
/* Step 2, under the lock, b->dirfd the directory of file i (final name name): a backup no longer of the version
 * at the final name (another batch put one there since step 1) is linked again to that one.  0 or the failure. */
int lander__old_check(ingest_lander_batch *b, uint32_t i, const char *name);

void lander__old_done(ingest_lander_batch *b);
void lander__old_undo(ingest_lander_batch *b);
int lander__old_sweep(ingest_ctx *ctx, int rootfd, uint64_t *restored, uint64_t *left);
/* The landed paths the manifest at mp (bronze-relative) lists (refused files have none), sorted
 * (lander__cmp_strp), into *out (NULL when it lists none): 0, or < 0 (the detail in ctx).  Free them with
 * lander__free_paths. */
int lander__manifest_landed_paths(ingest_ctx *ctx, int rootfd, const char *mp, char ***out, size_t *nout);
void lander__free_paths(ingest_ctx *ctx, char **v, size_t n);
int lander__peer_wait(ingest_lander_batch *b);
uint32_t lander__file_of_chunk(const ingest_lander_batch *b, uint32_t j);
int lander__refuse_file(ingest_lander_batch *b, uint32_t i, int code);
void lander__drop_made_tail(ingest_lander_batch *b);
int lander__landed_path(ingest_lander *l, const char *device, const char *batch, const char *relpath, int64_t mtime_ns, char *out, size_t cap);
int lander__add_dir(ingest_lander_batch *b, const char *dir);
int lander__walk_dir(ingest_lander_batch *b, const char *file, const char *dir, bool create, int *fd);
int lander__enter_dir(ingest_lander_batch *b, const char *file, const char *dir, bool create);
/* Forget the cached directory (b->dirfd closed, b->cur_dir freed): the next enter walks to its directory. */
void lander__forget_dir(ingest_lander_batch *b);
/* Make b->dirfd the directory dir (cached by name) if it is there; *missing (b->dirfd untouched) if not. */
int lander__enter_dir_found(ingest_lander_batch *b, const char *file, const char *dir, bool *missing);
/* Make b->dirfd the directory file fi's data is written in (dir: its final one), staging a missing one. */
int lander__enter_land_dir(ingest_lander_batch *b, uint32_t fi, const char *dir);
/*
 * A create in b->dirfd found the directory removed (ENOENT) since it was
 * entered: by another batch that failed and removed the empty directories
 * it had made, or by a job that tidies bronze.  Enter the file's directory
 * again as if for the first time (made again, staged or not); the create is
 * tried again, LANDER_REENTER_TRIES times at most.
 */
#define LANDER_REENTER_TRIES 3u
int lander__reenter_land_dir(ingest_lander_batch *b, uint32_t fi, const char *dir);
/* The directory file fi's data is in now (dir: its final one): dir, or its place in a stage not yet in place. */
void lander__data_dir(const ingest_lander_batch *b, uint32_t fi, const char *dir, char *out, size_t cap);
/* Remove the directories made under stage s's temporary name (empty now), deepest first, and forget them. */
void lander__remove_stage_dirs(ingest_lander_batch *b, size_t s);

int lander__cmp_strp(const void *a, const void *b);

/*
 * The store and index are used only between lander__enter and
 * lander__leave.  With the lander's own lock (ingest_lander_set_lock),
 * enter takes it and leave commits the store writes made meanwhile (see
 * lander__settle) and lets it go, keeping rc unless the commit fails; with
 * the caller's lock (held around every call), both do nothing.
 */
void lander__enter(ingest_lander *l);
int lander__leave(ingest_lander_batch *b, int rc);
/* Call the test hook, if any. */
void lander__hook(ingest_lander_batch *b, int phase);

#endif
