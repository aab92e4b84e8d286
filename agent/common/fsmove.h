/* Moving a file to another directory, across filesystems too. */
#ifndef INGEST_FSMOVE_H
#define INGEST_FSMOVE_H

/*
 * Move the regular file src to dst, whose directory exists.  On one
 * filesystem that is rename(2), then both directories fsynced.  Across filesystems (EXDEV) it is a durable
 * copy, then the unlink:
 *   1. the bytes of src (read through srcfd when srcfd >= 0, e.g. a
 *      descriptor the caller holds a lease on; else src opened O_NOFOLLOW)
 *      go to a new file in dst's directory (O_CREAT | O_EXCL, named
 *      .NAME.ingest-move.PID), with src's permission bits, its owner where
 *      the process may set it, and its access and modification times;
 *   2. that file is fsynced, renamed to dst, and dst's directory fsynced;
 *   3. only then is src unlinked and its directory fsynced.
 * A crash at any point leaves src (and perhaps the temporary file, or dst
 * too): never neither.  Like rename(2), an existing dst is replaced.
 * Returns 0, or -1 with errno set (no temporary file is left then; src is
 * untouched unless only its final unlink failed, after dst was complete).
 */
int prog_move_file(const char *src, int srcfd, const char *dst);

/* fsync the directory holding path (a name made or removed there is then durable); 0, or -1 with errno. */
int prog_sync_parent(const char *path);

#endif
