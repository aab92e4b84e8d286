/*
 * The edge's batch builder (no networking): walk the configured sources,
 * group regular files into batches, chunk and hash each file into a batch
 * manifest, then produce the encoded chunks the core asks for.
 *
 *   ingest_sender_create(ctx, &opts, &s);
 *   ingest_sender_scan(s);                        start a walk of every source
 *   while (ingest_sender_next_batch(s, &b) == 1) {
 *       ingest_sender_batch_manifest(b, &m, &mlen);   send it
 *       for each wanted chunk index i:                from the receiver
 *           ingest_sender_batch_chunk(b, i, buf, cap, &n);   send buf[0,n)
 *       ingest_sender_batch_destroy(b);
 *   }
 *
 * Walk order (so batches are reproducible): sources in the order given;
 * inside a source, depth first, the entries of each directory in bytewise
 * (strcmp) order of their names, a subdirectory's contents visited where
 * its name sorts.  Symbolic links are never followed; only regular files
 * are taken (and, from a source with symlinks INGEST_SENDER_SYMLINKS_SHIP,
 * symlinks as symlinks: their target is their content).  Anything skipped is counted in ingest_sender_stats and
 * reported through opts.on_skip, never silently lost.
 *
 * Paths: a file's manifest path is "{source name}/{path under the source}"
 * (always prefixed, so adding a source never moves the files of another).
 *
 * Memory is bounded by the batch, not by the tree: the walk holds one
 * sorted name list per open directory level (at most
 * INGEST_SENDER_MAX_DEPTH levels), and a batch holds its files and chunk
 * list (about 44 bytes per chunk).  Files are streamed through fixed
 * buffers (serial: read_buffer + chunking.max bytes; pipeline: about
 * 2*max + 16*avg): never a whole file in memory.
 *
 * THREAD SAFETY: a sender and its batches belong to one thread at a time
 * (that of their context).  Batches borrow the sender's codec and key:
 * destroy every batch before the sender.
 */
#ifndef INGEST_SENDER_H
#define INGEST_SENDER_H

#include "ingest/common.h"
#include "ingest/chunker.h"
#include "ingest/codec.h"
#include "ingest/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Directory levels below a source that are walked: a directory at level
 * 64 (64 path components under the source) is listed and its files taken;
 * its subdirectories are reported (INGEST_SKIP_DEPTH) and not entered.
 * The walk keeps one frame per level, never recursing. */
#define INGEST_SENDER_MAX_DEPTH 64
#define INGEST_SENDER_MAX_SOURCES 256
#define INGEST_SENDER_SOURCE_NAME_MAX 64     /* bytes of a source name */
#define INGEST_SENDER_PREFIX_MAX 64          /* bytes of a batch id prefix */
#define INGEST_SENDER_DIR_MAX_ENTRIES (16u * 1024u * 1024u) /* names per directory */
#define INGEST_SENDER_READ_BUFFER_DEFAULT (1024u * 1024u)

/* Why a file was not put in a batch (opts.on_skip, ingest_sender_batch_dropped). */
enum {
    INGEST_SKIP_UNREADABLE = 1, /* open or read failed (EACCES, EIO, ...) */
    INGEST_SKIP_SPECIAL = 2,    /* symlink, fifo, socket or device */
    INGEST_SKIP_VANISHED = 3,   /* listed, then gone before it was opened */
    INGEST_SKIP_NAME = 4,       /* path too long (every other name is shipped, control bytes included); in
                                 * list mode also a path that is not plain under its source */
    INGEST_SKIP_DIR = 5,        /* a directory that could not be opened or read */
    INGEST_SKIP_CHANGED = 6,    /* size/mtime/ctime changed while it was chunked */
    INGEST_SKIP_TOOBIG = 7,     /* more chunks than a manifest line count holds */
    INGEST_SKIP_DEPTH = 8,      /* a directory more than INGEST_SENDER_MAX_DEPTH levels below its source */
    INGEST_SKIP_LINK = 9,       /* a symlink of a source that ships them whose target cannot be shipped:
                                   empty, over INGEST_SENDER_LINK_MAX bytes, or not its lstat size */
    INGEST_SKIP_REFUSED = 10,   /* breaks the receiver's landing rules (ingest_sender_set_landing):
                                   refused at the edge, before it is opened; on_refuse says why */
};

/* Longest symlink target a source with symlinks INGEST_SENDER_SYMLINKS_SHIP ships (bytes, PATH_MAX - 1). */
#define INGEST_SENDER_LINK_MAX 4095

/* Values of ingest_sender_source.symlinks. */
enum { INGEST_SENDER_SYMLINKS_SKIP = 0, INGEST_SENDER_SYMLINKS_SHIP = 1 };

/* What the walk knows of a regular file before opening it (lstat). */
typedef struct ingest_sender_stat {
    uint64_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;
    uint64_t dev;
    uint64_t ino;
    uint32_t mode;
} ingest_sender_stat;

enum { INGEST_SENDER_RECHECK_ID = 0, INGEST_SENDER_RECHECK_STAT = 1 };

typedef struct ingest_sender_source {
    const char *name; /* 1..INGEST_SENDER_SOURCE_NAME_MAX of [A-Za-z0-9._-], not "." or "..", unique */
    const char *path; /* directory to walk */
    /*
     * INGEST_SENDER_SYMLINKS_SKIP (0): a symlink under the source is counted
     * (skipped_symlinks) and passed over.  INGEST_SENDER_SYMLINKS_SHIP: it
     * is a batch entry like a file, whose content is its target (readlinkat,
     * 1..INGEST_SENDER_LINK_MAX bytes; others: INGEST_SKIP_LINK) and whose
     * mode is its lstat mode (S_IFLNK|0777): chunked, hashed and re-read
     * (readlinkat again) like a small file, never opened, never followed.
     */
    int symlinks;
} ingest_sender_source;

/*
 * Options.  Zero-initialise, then set what you need: a zero field means
 * its default.  Strings and arrays are copied by ingest_sender_create.
 */
typedef struct ingest_sender_opts {
    const char *device;              /* required: device id, 1..INGEST_MANIFEST_NAME_MAX bytes of [A-Za-z0-9._-], first a letter or digit (ingest_wire_id_valid) */
    const uint8_t *dedup_key;        /* required: INGEST_KEY_BYTES */
    ingest_chunk_params chunking;    /* all zero: the defaults */
    int level;                       /* zstd level for the codec the sender makes (0: 1) */
    ingest_codec *codec;             /* optional: use this codec (borrowed, e.g. with a dictionary) */
    const ingest_sender_source *sources;
    size_t nsources;                 /* 1..INGEST_SENDER_MAX_SOURCES */
    uint64_t max_files;              /* files per batch (0: 10000) */
    uint64_t max_bytes;              /* bytes of file data per batch (0: 1 GiB); a single
                                        file larger than this makes a batch of its own */
    /*
     * Batch ids are "{batch_prefix}{seq}" with seq in decimal, at least 6
     * digits, zero-padded, starting at batch_seq and increasing by one per
     * batch; the agent persists ingest_sender_next_seq() to keep ids unique
     * and increasing across restarts.  batch_prefix NULL means
     * "{unix seconds at create}-"; "" is allowed.  Characters: [A-Za-z0-9._-].
     */
    const char *batch_prefix;
    uint64_t batch_seq;
    uint32_t read_buffer;            /* serial mode: bytes per read() (0: 1 MiB; 4 KiB..64 MiB) */
    /* 0 or 2: chunk and hash on two threads (ingest_chunkhash: the chunk ids
     * are hashed by a helper thread while this one finds boundaries and
     * computes the whole-file hash); 1: everything on the calling thread.
     * The results are identical. */
    int threads;
    /* Called for every file or directory not taken, with its manifest-style
     * path ("{source}/{relative path}") and an INGEST_SKIP_* reason. */
    void (*on_skip)(void *userdata, const char *path, int reason);
    /* Called while chunking a file (after each read, or each chunk with
     * threads != 1) with the bytes done so far (metrics, progress; may be NULL). */
    void (*on_read)(void *userdata, const char *path, uint64_t bytes_done);
    /* Optional: called for every regular file the walk finds (and symlink it
     * ships: st is then its lstat), before it is opened, with its manifest path: return 1 to take it, 0 to pass it over
     * (counted in ingest_sender_stats.files_unchanged; the agent skips files
     * whose acknowledged version is unchanged), < 0 to fail the walk. */
    int (*want_file)(void *userdata, const char *path, const ingest_sender_stat *st);
    /* Optional: a file (or symlink) refused at the edge by the receiver's
     * landing rules (ingest_sender_set_landing), before it is opened: its
     * manifest path, what the walk knew of it, and the rule it breaks, in
     * the words the core would use.  The agent records the version so that
     * it is not tried again until it changes.  Reported through on_skip too
     * (INGEST_SKIP_REFUSED). */
    void (*on_refuse)(void *userdata, const char *path, const ingest_sender_stat *st, const char *why);
    /* How ingest_sender_batch_chunk checks that a chunk re-read for sending
     * is still the chunk of the manifest: INGEST_SENDER_RECHECK_ID (0, the
     * default) re-derives its id; INGEST_SENDER_RECHECK_STAT compares the
     * file's size, mtime and ctime after the read with those at chunking
     * time, which saves a hash pass when the receiver verifies every id
     * anyway (a change within one timestamp tick is then caught there). */
    int recheck;
    void *userdata;
} ingest_sender_opts;

typedef struct ingest_sender_stats {
    uint64_t files_seen;         /* regular files found by the walk (and symlinks of sources that ship them) */
    uint64_t files_batched;      /* files put in a batch */
    uint64_t bytes_batched;
    uint64_t batches;
    uint64_t skipped_unreadable;
    uint64_t skipped_special;
    uint64_t skipped_vanished;
    uint64_t skipped_name;
    uint64_t skipped_dirs;       /* INGEST_SKIP_DIR and INGEST_SKIP_DEPTH */
    uint64_t dropped_changed;
    uint64_t skipped_toobig;
    uint64_t files_unchanged;    /* passed over by want_file */
    /* skipped_special by kind (their sum is skipped_special): never shipped, never opened */
    uint64_t skipped_symlinks;
    uint64_t skipped_fifos;
    uint64_t skipped_sockets;
    uint64_t skipped_devices;    /* character and block devices */
    uint64_t skipped_links;      /* INGEST_SKIP_LINK: symlinks to ship whose target cannot be shipped */
    uint64_t symlinks_batched;   /* symlinks put in a batch (counted in files_batched too) */
    uint64_t refused;            /* INGEST_SKIP_REFUSED: refused at the edge by the receiver's landing rules */
} ingest_sender_stats;

typedef struct ingest_sender_s ingest_sender;
typedef struct ingest_sender_batch_s ingest_sender_batch;

/* Validate opts, make the codec (unless given).  *out is NULL on failure. */
INGEST_API int ingest_sender_create(ingest_ctx *ctx, const ingest_sender_opts *opts,
                                    ingest_sender **out) INGEST_WUR;
INGEST_API void ingest_sender_destroy(ingest_sender *s);

/*
 * The receiver's landing rules (its layout, unexpanded, and the longest
 * landed path and path component it takes; from LANDING,
 * ingest_edge_landing_rules): from now on a file whose landed path would
 * break them is refused before it is opened (INGEST_SKIP_REFUSED,
 * on_refuse), with the message the core would give.  layout NULL forgets
 * the rules.  May be called from another thread than the walk's.  0, or
 * INGEST_EINVAL for a layout that breaks the layout rule (the message says
 * what) or limits outside 1..4095 and 1..255.
 */
INGEST_API int ingest_sender_set_landing(ingest_sender *s, const char *layout, uint32_t path_max,
                                         uint32_t name_max) INGEST_WUR;

/*
 * Start (or restart) a walk of every source.  A source directory that
 * cannot be opened is reported (INGEST_SKIP_DIR) and the walk goes on
 * with the others.  Returns 0 or INGEST_ENOMEM.
 */
INGEST_API int ingest_sender_scan(ingest_sender *s);

/*
 * Start (or restart) a "walk" of exactly the given manifest paths
 * ("{source}/{relative path}"), in the order given, instead of the
 * sources' trees: the daemon re-ships a journaled batch this way (same
 * files, same order).  paths is borrowed until the next scan or the
 * sender's destruction.  want_file is not called; a path that is absent
 * or under no configured source (INGEST_SKIP_VANISHED: its source was
 * taken out of the configuration, say), not a regular file (_SPECIAL), or
 * not a plain path under its source ('.', '..', '//', a leading '/', or
 * too long: _NAME) is reported through on_skip and passed over.  Returns 0 or
 * INGEST_EINVAL (paths NULL with n > 0).
 */
INGEST_API int ingest_sender_scan_list(ingest_sender *s, const char *const *paths, size_t n);

/*
 * Done building: free what the walk and the chunking hold (read buffer,
 * directory buffers, the chunk+hash threads; a few MiB) while the batches
 * built stay good until destroyed (they keep only the key, codec and
 * sources).  A scan or next_batch after it is INGEST_EINVAL.  For a caller
 * that keeps a sender alive only for the batch it built (one sender per
 * batch), as the daemon does while that batch waits for its ACK.
 */
INGEST_API void ingest_sender_trim(ingest_sender *s);

/*
 * Build the next batch from the walk: returns 1 with *out (destroy it with
 * ingest_sender_batch_destroy), 0 when the walk is done or was never
 * started with ingest_sender_scan (*out NULL), < 0 on
 * failure (out of memory, or a failure of the chunker or hash).  Files that
 * cannot be read or that change while they are chunked are left out (and
 * reported), never returned half done.  A batch always holds >= 1 file.
 * After a failure the files of the batch being built are not returned:
 * call ingest_sender_scan to walk again.
 */
INGEST_API int ingest_sender_next_batch(ingest_sender *s, ingest_sender_batch **out) INGEST_WUR;

/* Sequence number the next batch will get. */
INGEST_API uint64_t ingest_sender_next_seq(const ingest_sender *s);
INGEST_API void ingest_sender_get_stats(const ingest_sender *s, ingest_sender_stats *st);
/* Capacity of an output buffer that fits any encoded chunk of this sender. */
INGEST_API size_t ingest_sender_chunk_bound(const ingest_sender *s);

INGEST_API void ingest_sender_batch_destroy(ingest_sender_batch *b);
/* The batch id, e.g. "1712345678-000042"; valid until the batch is destroyed. */
INGEST_API const char *ingest_sender_batch_id(const ingest_sender_batch *b);

/*
 * The manifest of the batch (JSON Lines, docs/manifest.md): a header
 * record (device, batch id, nfiles, total bytes, created_ns = the time the
 * batch was built) then one FILE record per file in walk order, with
 * landed "" and version 0 (the core fills them).  *ptr stays valid until
 * the batch is destroyed.
 */
INGEST_API int ingest_sender_batch_manifest(ingest_sender_batch *b, const void **ptr, size_t *len);
/*
 * As ingest_sender_batch_manifest, with INGEST_SENDER_MANIFEST_* flags:
 * NO_HASH leaves out each file's whole-file hash (a receiver that agreed to
 * the pack feature derives it from the chunk ids).  The manifest is kept
 * until a call with other flags.
 */
#define INGEST_SENDER_MANIFEST_NO_HASH 0x1u
INGEST_API int ingest_sender_batch_manifest_ex(ingest_sender_batch *b, unsigned flags, const void **ptr, size_t *len);
/*
 * As ingest_sender_batch_manifest_ex, pushing the files of at most push_max
 * bytes (0: none; with NO_HASH, for a receiver that agreed to
 * INGEST_SESSION_FEATURE_PUSH): their chunks are listed as [length], without
 * ids, and the header carries the batch's "digest" (ingest_manifest_digest_add
 * over every file) when any file is pushed.  fresh (optional): 1 when a
 * file's path was never shipped by this device (the caller's file table),
 * 0 when it was; only fresh files are pushed, so that a file shipped again
 * (touched, or --all) keeps its ids and is deduplicated.  NULL: every file
 * of at most push_max bytes is pushed.  docs/protocol.md "Pushed chunks".
 */
INGEST_API int ingest_sender_batch_manifest_push(ingest_sender_batch *b, unsigned flags, uint32_t push_max,
                                                 int (*fresh)(void *ud, const char *path), void *ud,
                                                 const void **ptr, size_t *len);

typedef struct ingest_sender_batch_stats {
    uint64_t files;
    uint64_t bytes;          /* sum of file sizes */
    uint64_t chunks;         /* chunk list length (manifest order) */
    uint64_t unique_chunks;  /* distinct chunk ids among them */
    uint64_t dropped;        /* files left out because they changed */
    uint64_t refused;        /* files the core refused alone (ingest_sender_batch_refuse) */
} ingest_sender_batch_stats;
INGEST_API void ingest_sender_batch_stats_get(const ingest_sender_batch *b, ingest_sender_batch_stats *st);

typedef struct ingest_sender_file_info {
    const char *path;        /* manifest path "{source}/{relative path}" */
    uint64_t size;
    int64_t mtime_ns;
    int64_t ctime_ns;
    uint32_t mode;           /* st_mode */
    uint8_t hash[INGEST_ID_BYTES];
    uint64_t first_chunk;    /* index of its first chunk in the batch list */
    uint64_t nchunks;
    uint64_t dev;            /* st_dev and st_ino of the file chunked */
    uint64_t ino;
    const char *refused;     /* the core's reason when it refused this file alone, else NULL */
    int refused_code;        /* its INGEST_E* code (0 when not refused) */
} ingest_sender_file_info;
/*
 * The core refused file i alone (FILE_REFUSED, docs/protocol.md): keep its
 * code and reason (copied) with the batch, for ingest_sender_batch_file.
 * 0; INGEST_EINVAL for no such file or one refused already; INGEST_ENOMEM.
 */
INGEST_API int ingest_sender_batch_refuse(ingest_sender_batch *b, uint64_t i, int code, const char *reason);
/* File file_index (0..files-1, manifest order); pointers valid with the batch. */
INGEST_API int ingest_sender_batch_file(const ingest_sender_batch *b, uint64_t file_index,
                                        ingest_sender_file_info *info);
/* The file that chunk chunk_index belongs to (INGEST_ENOTFOUND past the end). */
INGEST_API int ingest_sender_batch_chunk_file(const ingest_sender_batch *b, uint64_t chunk_index,
                                              uint64_t *file_index);
/* Id, length and offset in its file of chunk chunk_index. */
INGEST_API int ingest_sender_batch_chunk_info(const ingest_sender_batch *b, uint64_t chunk_index,
                                              uint8_t id[INGEST_ID_BYTES], uint32_t *len,
                                              uint64_t *offset);
/* Dropped file i (0..dropped-1): its path and INGEST_SKIP_* reason. */
INGEST_API int ingest_sender_batch_dropped(const ingest_sender_batch *b, uint64_t i, const char **path,
                                           int *reason);

/*
 * Encode chunk chunk_index (its order in the batch's chunk list: all files'
 * chunks in manifest order) into out[0, cap) (cap >=
 * ingest_sender_chunk_bound()).  The chunk is re-read from its file (pread
 * at its offset; the file stays open, so chunk i+1 after chunk i does not
 * reopen it) and its id re-derived: a file that was replaced, shortened or
 * rewritten since it was chunked gives INGEST_ESTALE (use
 * ingest_sender_batch_chunk_file to learn which file; ship it later as a
 * new version).  Files of at most INGEST_SENDER_GROUP_CHUNK_MAX bytes are
 * the exception: the batch keeps their bytes as they were chunked (up to
 * 2 MiB of them per batch) and sends those, so a small file is opened and
 * read once, and what is sent is always the version that was hashed.  Other failures: INGEST_ENOTFOUND (index past the end),
 * INGEST_ETOOBIG (cap too small), INGEST_EIO.
 */
INGEST_API int ingest_sender_batch_chunk(ingest_sender_batch *b, uint64_t chunk_index, void *out,
                                         size_t cap, size_t *out_len);

/*
 * Delta chunks (docs/compression.md, "Delta chunks"): encode chunk
 * chunk_index against the predecessor a receiver described in a
 * DELTA_BASE (wire.h): base_len bytes (1..the chunk's length, else
 * INGEST_EINVAL), the 8-byte keyed hash of each of its 1 KiB blocks under
 * key.  A block of the chunk whose length and hash equal the
 * predecessor's block at the same place is copied from there; the others
 * are literal.  When at least a quarter of the chunk's bytes are copied:
 * 0, with *nblocks its block count, map[0, (*nblocks + 7) / 8) the block
 * map (bit set: copied; map_cap >= INGEST_WIRE_DELTA_MAX_BLOCKS / 8) and
 * out[0, *out_len) the literal blocks as one encoded chunk (cap >=
 * ingest_sender_chunk_bound()).  1 (nothing written) when fewer match:
 * send the chunk whole.  Errors as ingest_sender_batch_chunk.
 */
INGEST_API int ingest_sender_batch_chunk_delta(ingest_sender_batch *b, uint64_t chunk_index, const uint8_t *key,
                                               const uint8_t *hashes, uint32_t base_len, uint8_t *map, size_t map_cap,
                                               void *out, size_t cap, size_t *out_len, uint32_t *nblocks);

/*
 * Small chunks travel compressed together (docs/compression.md, "Chunk
 * groups"): chunks of at most INGEST_SENDER_GROUP_CHUNK_MAX bytes, at most
 * INGEST_SENDER_GROUP_MAX_CHUNKS of them.
 */
#define INGEST_SENDER_GROUP_CHUNK_MAX (32u * 1024u)
#define INGEST_SENDER_GROUP_MAX_CHUNKS 4096u
/*
 * Encode the next wanted chunks: idx[0, n) are chunk indexes, strictly
 * increasing.  Takes the longest prefix of small chunks (each at most
 * INGEST_SENDER_GROUP_CHUNK_MAX bytes) whose lengths add up to at most
 * raw_max bytes (capped at chunking.max) and compresses their
 * concatenation as one encoded chunk (no filter, the codec's dictionary if
 * one is selected): *taken gets how many (>= 2).  When fewer than two
 * qualify, idx[0] alone is encoded as by ingest_sender_batch_chunk and
 * *taken is 1.  cap >= ingest_sender_chunk_bound().  Errors as
 * ingest_sender_batch_chunk (INGEST_ESTALE for any chunk of the group;
 * *taken is then the position in idx of the chunk whose file changed).
 */
INGEST_API int ingest_sender_batch_group(ingest_sender_batch *b, const uint32_t *idx, size_t n, size_t raw_max,
                                         void *out, size_t cap, size_t *out_len, size_t *taken);

#ifdef __cplusplus
}
#endif
#endif
