/*
 * The one policy for names and paths that land in the bronze tree
 * (docs/landing.md, "Refused files"): the receiver's lander applies it
 * to every file of a batch, and the agent applies the same code, with the
 * layout the receiver told it (LANDING, docs/protocol.md), to refuse at the
 * edge what the core would refuse, with the same message, before reading
 * the file.  Internal to libingest.
 */
#ifndef INGEST_PATHPOLICY_H
#define INGEST_PATHPOLICY_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "ingest/wire.h"

#define INGEST_PATH_LANDED_MAX 4096u /* bytes of a landed path, NUL included */
#define INGEST_PATH_NAME_MAX 255u    /* bytes of one path component */
#define INGEST_PATH_LAYOUT_MAX INGEST_WIRE_LAYOUT_MAX /* bytes of a layout (the receiver's `layout` key) */

/* A device or batch id, which becomes a path component: 1..INGEST_MANIFEST_NAME_MAX bytes of the wire's id rule. */
int ingest__path_check_id(ingest_ctx *ctx, const char *what, const char *s);

/* A relative path: not empty, shorter than INGEST_PATH_LANDED_MAX, no
 * leading '/', no empty, "." or ".." component, components of at most
 * INGEST_PATH_NAME_MAX bytes.  what names it in the message ("file"). */
int ingest__path_check_rel(ingest_ctx *ctx, const char *what, const char *p);

/*
 * The landed path of relpath (a manifest path, "{source}/{relative path}")
 * under layout for this device, batch and mtime into out[cap] (cap at most
 * INGEST_PATH_LANDED_MAX), checked: relpath passes ingest__path_check_rel,
 * the result too with components of at most name_max bytes (at most
 * INGEST_PATH_NAME_MAX), and the result is not under _manifests.  Every
 * failure names the file and the rule: INGEST_ETOOBIG for a landed path
 * longer than cap - 1, INGEST_EINVAL for the others.
 */
int ingest__path_landed(ingest_ctx *ctx, const char *layout, const char *device, const char *batch,
                        const char *relpath, int64_t mtime_ns, size_t name_max, char *out, size_t cap);

/* The layout rule of the receiver's configuration: relative, no ".." component, known
 * placeholders only, {path} present, at most INGEST_PATH_LAYOUT_MAX bytes.  0, or
 * INGEST_EINVAL with why[cap] saying what is wrong and where. */
int ingest__path_check_layout(const char *layout, char *why, size_t cap);

#endif
