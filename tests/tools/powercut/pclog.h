/*
 * The power-cut layer's undo log (tests only): written by powercut.so
 * (preloaded into the program under test), read by powercut-restore after
 * the program was killed.  See tests/tools/powercut/powercut.c.
 *
 * One file, POWERCUT_DIR/log, of records in the order the operations
 * happened: a fixed header, then plen1 + plen2 bytes of paths (not
 * NUL-terminated), then nold bytes of old file content.  Both sides run on
 * the same machine, so the header is in host byte order.
 */
#ifndef PCLOG_H
#define PCLOG_H

#include <stdint.h>

#define PC_MAGIC 0x50434c31u /* "PCL1" */
#define PC_PATH_MAX 4096u
#define PC_OLD_MAX (1u << 30) /* a record's old bytes, at most */

enum pc_kind {
    PC_DATA = 1,   /* before a write or truncate of inode (dev, ino), then at path1: old size, old bytes of [off, off + nold) */
    PC_SYNC,       /* fsync/fdatasync of inode (dev, ino): its data records before log offset off are durable */
    PC_RANGE_SYNC, /* an O_DSYNC/O_SYNC write of [off, off + len) of inode (dev, ino): durable at once */
    PC_DSYNC,      /* fsync of directory (dev, ino): its name changes before log offset off are durable */
    PC_SYNCALL,    /* syncfs (dev: its filesystem) or sync (dev 0: all): every change before log offset off */
    PC_CREATE,     /* a new file or symlink at path1 (parent p1) */
    PC_MKDIR,      /* a new directory at path1 (parent p1) */
    PC_UNLINK,     /* path1 (parent p1) removed; its inode kept at shadow path2 (empty: a directory) */
    PC_RENAME,     /* path1 (parent p1) renamed to path2 (parent p2); what path2 was kept at shadow path3 */
    PC_LINK,       /* a new hard link at path1 (parent p1) */
};

typedef struct {
    uint32_t magic;
    uint32_t kind;
    uint64_t dev, ino;   /* the inode of a data or sync record; the directory of a DSYNC */
    uint64_t off, len;   /* PC_DATA: the range written; PC_RANGE_SYNC: the range made durable; syncs: off is
                          * where the log stood when the sync call started (what it covers) */
    uint64_t oldsize;    /* PC_DATA: the file's size before */
    uint64_t nold;       /* PC_DATA: old bytes stored (from off) */
    uint64_t p1dev, p1ino, p2dev, p2ino; /* name records: the parent directories */
    uint32_t plen1, plen2, plen3, pad;
} pc_rec;

#endif
