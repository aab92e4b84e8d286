/* The configuration's cross-key checks, once an object is read (config_int.h). */
#include "config_int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- cross-key checks ---------------------------------------------------- */

static int finish_source_name(cfg_parser *p, cfg_inst *inst)
{
    ingest_source_config *s = inst->base;
    if (s->name != NULL && s->name[0] != '\0')
        return INGEST_OK;
    /* Default name: the last component of the path as written (resolved). */
    const char *path = s->path;
    size_t end = strlen(path);
    while (end > 1 && path[end - 1] == '/')
        end--;
    size_t start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    char name[72];
    const size_t n = end - start;
    if (n == 0 || n >= sizeof(name))
        return cfg__perr(p, inst->start, "cannot derive a source name from path '%s'; set %sname", path,
                    inst->shown);
    memcpy(name, path + start, n);
    name[n] = '\0';
    if (!cfg__valid_name(name))
        return cfg__perr(p, inst->start,
                    "cannot use '%s' (the end of path '%s') as a source name; set %sname to 1 to 64 "
                    "of A-Z a-z 0-9 . _ -",
                    name, path, inst->shown);
    char *dup = ingest__strdup(p->ctx, name);
    if (dup == NULL)
        return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
    ingest__free(p->ctx, s->name);
    s->name = dup;
    return INGEST_OK;
}

/* Length of a path without its trailing slashes (but "/" stays "/"). */
static size_t path_len_trimmed(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    return n;
}

/* Whether path a is dir b or a path under it (both resolved, trailing slashes aside). */
static int path_within(const char *a, const char *b)
{
    const size_t al = path_len_trimmed(a), bl = path_len_trimmed(b);
    return al >= bl && strncmp(a, b, bl) == 0 && (al == bl || a[bl] == '/' || (bl == 1 && b[0] == '/'));
}

int cfg__finish_source(cfg_parser *p, cfg_inst *inst)
{
    ingest_source_config *s = inst->base;
    INGEST__FORWARD(finish_source_name(p, inst));
    if (s->max_size != 0 && s->max_size < s->min_size)
        return cfg__perr(p, cfg__mark_of(p, inst, "sources[].max_size"),
                    "key '%smax_size' (%" PRIu64 " bytes) is less than %smin_size (%" PRIu64 " bytes)",
                    inst->shown, s->max_size, inst->shown, s->min_size);
    s->after_ship_dir = "";
    if (strcmp(s->after_ship, "delete") == 0) {
        s->after_ship_mode = INGEST_AFTER_SHIP_DELETE;
    } else if (strncmp(s->after_ship, "move:", 5) == 0) {
        /* Resolve DIR like a path key and keep it inside the string. */
        const cfg_mark at = cfg__mark_of(p, inst, "sources[].after_ship");
        char *dir = cfg__resolve_path(p, s->after_ship + 5);
        char *moved = dir ? ingest__malloc(p->ctx, strlen(dir) + 6) : NULL;
        if (moved == NULL) {
            ingest__free(p->ctx, dir);
            return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        }
        memcpy(moved, "move:", 5);
        memcpy(moved + 5, dir, strlen(dir) + 1);
        ingest__free(p->ctx, dir);
        ingest__free(p->ctx, s->after_ship);
        s->after_ship = moved;
        s->after_ship_mode = INGEST_AFTER_SHIP_MOVE;
        s->after_ship_dir = moved + 5;
        if (path_within(s->after_ship_dir, s->path))
            return cfg__perr(p, at,
                        "key '%safter_ship': the directory '%s' is inside the source '%s' (its files "
                        "would be shipped again)",
                        inst->shown, s->after_ship_dir, s->path);
    } else {
        s->after_ship_mode = INGEST_AFTER_SHIP_KEEP;
    }
    return INGEST_OK;
}

/*
 * A layout without {device} puts every device's files in one tree: a file of
 * one device lands over another device's file of the same path.  Only with
 * layout_shared: true, said on purpose.
 */
static int resolve_existing(const char *path, char out[PATH_MAX]);

int cfg__finish_receiver(cfg_parser *p, cfg_inst *inst)
{
    const ingest_receiver_config *cfg = inst->base;
    /* The receiver's state beside the landed trees would be listed, verified and tidied with them, and a
     * device whose id is one of its file names (dicts, data.mdb) would land over it: neither holds the
     * other, as written nor as the paths resolve now. */
    char sreal[PATH_MAX], breal[PATH_MAX];
    const int both = resolve_existing(cfg->state_dir, sreal) == 0 && resolve_existing(cfg->bronze, breal) == 0;
    if (path_within(cfg->state_dir, cfg->bronze) || path_within(cfg->bronze, cfg->state_dir) ||
        (both && (path_within(sreal, breal) || path_within(breal, sreal))))
        return cfg__perr(p, cfg__mark_of(p, inst, "state_dir"),
                         "key 'state_dir': '%s' and bronze '%s' overlap (one is, or is inside, the other): the "
                         "receiver's chunk index and dictionaries would sit among the landed trees; give it a "
                         "directory of its own",
                         cfg->state_dir, cfg->bronze);
    if (strstr(cfg->layout, "{device}") == NULL && !cfg->layout_shared)
        return cfg__perr(p, cfg__mark_of(p, inst, "layout"),
                    "key 'layout': \"%s\" has no {device}, so devices would overwrite each other's files of "
                    "the same path; add {device} (e.g. \"{device}/%s\"), or set layout_shared: true if that "
                    "is what you want",
                    cfg->layout, cfg->layout);
    return INGEST_OK;
}


/*
 * The same rule on the paths as they resolve now (symlinks followed, as
 * far as they exist: resolve_existing): a source that is a symlink into
 * another source's tree, or a move directory reached through one (made
 * later or not), overlaps as much as one written inside it.
 */
/*
 * path as it resolves now (symlinks followed) into out: the longest part
 * of it that exists, through realpath, and the rest as written (a move
 * directory made later, a source not there yet).  0, or -1 (nothing of it
 * resolves: a relative path, or too long).
 */
static int resolve_existing(const char *path, char out[PATH_MAX])
{
    char head[PATH_MAX];
    if (path[0] != '/' || strlen(path) >= sizeof(head))
        return -1;
    strcpy(head, path);
    size_t cut = strlen(head); /* head[0, cut) is tried; path + cut is the rest */
    for (;;) {
        if (realpath(head, out) != NULL)
            break;
        if (errno != ENOENT && errno != ENOTDIR)
            return -1;
        char *slash = strrchr(head, '/');
        if (slash == NULL || slash == head) {
            strcpy(out, "/"); /* only the root resolved */
            cut = 0;
            break;
        }
        *slash = '\0';
        cut = (size_t)(slash - head);
    }
    /* the rest does not exist, so no link is in it: its "." and ".." components are taken as written
     * (a directory made later under "new/b/../a" is "new/a") */
    const char *rest = path + cut;
    while (*rest != '\0') {
        while (*rest == '/')
            rest++;
        const char *end = strchr(rest, '/');
        const size_t len = end != NULL ? (size_t)(end - rest) : strlen(rest);
        size_t n = strlen(out);
        if (len == 0 || (len == 1 && rest[0] == '.')) {
            /* nothing */
        } else if (len == 2 && rest[0] == '.' && rest[1] == '.') {
            char *slash = strrchr(out, '/');
            if (slash != NULL && slash != out)
                *slash = '\0';
            else
                strcpy(out, "/");
        } else {
            if (n + 1 + len >= PATH_MAX)
                return -1;
            if (n > 1)
                out[n++] = '/';
            memcpy(out + n, rest, len);
            out[n + len] = '\0';
        }
        rest += len;
    }
    return 0;
}

static int check_resolved_overlap(cfg_parser *p, cfg_inst *inst, const ingest_agent_config *cfg)
{
    const size_t n = cfg->sources_count;
    char(*real)[PATH_MAX] = n ? ingest__calloc(p->ctx, n, sizeof(*real)) : NULL;
    char(*mreal)[PATH_MAX] = n ? ingest__calloc(p->ctx, n, sizeof(*mreal)) : NULL;
    int rc = INGEST_OK;
    if (n && (real == NULL || mreal == NULL)) {
        rc = ingest__fail(p->ctx, INGEST_ENOMEM, "config: out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (resolve_existing(cfg->sources[i].path, real[i]) != 0)
            real[i][0] = '\0';
        if (cfg->sources[i].after_ship_mode != INGEST_AFTER_SHIP_MOVE ||
            resolve_existing(cfg->sources[i].after_ship_dir, mreal[i]) != 0)
            mreal[i][0] = '\0';
    }
    char sreal[PATH_MAX];
    if (resolve_existing(cfg->state_dir, sreal) != 0)
        sreal[0] = '\0';
    for (size_t i = 0; i < n && rc == INGEST_OK; i++)
        for (size_t j = 0; j < n && rc == INGEST_OK; j++) {
            if (real[j][0] == '\0')
                continue;
            if (j == i && sreal[0] != '\0' && mreal[i][0] != '\0' &&
                (path_within(mreal[i], sreal) || path_within(sreal, mreal[i]))) {
                rc = cfg__perr(p, cfg__mark_of(p, inst, "sources"),
                               "key 'sources[%zu].after_ship': the directory '%s' (that is '%s') %s state_dir '%s' "
                               "(that is '%s'; files moved there could overwrite the agent's own store and "
                               "journal)",
                               i, cfg->sources[i].after_ship_dir, mreal[i],
                               path_within(mreal[i], sreal) ? "is inside" : "holds", cfg->state_dir, sreal);
                break;
            }
            if (j == i && sreal[0] != '\0' && path_within(sreal, real[i]))
                rc = cfg__perr(p, cfg__mark_of(p, inst, "state_dir"),
                               "key 'state_dir': '%s' (that is '%s') is inside sources[%zu]'s '%s' (that is '%s'; "
                               "the agent's own store and spool would be shipped, and acted on by after_ship)",
                               cfg->state_dir, sreal, i, cfg->sources[i].path, real[i]);
            if (j != i && real[i][0] != '\0' && path_within(real[i], real[j]))
                rc = cfg__perr(p, cfg__mark_of(p, inst, "sources"),
                               "key 'sources[%zu].path': '%s' (that is '%s') is %s sources[%zu]'s '%s' (that is "
                               "'%s'): sources must not overlap (one file, one source; use include/exclude to "
                               "split a tree)",
                               i, cfg->sources[i].path, real[i],
                               path_len_trimmed(real[i]) == path_len_trimmed(real[j]) ? "the same as" : "inside", j,
                               cfg->sources[j].path, real[j]);
            else if (mreal[i][0] != '\0' && path_within(mreal[i], real[j]))
                rc = cfg__perr(p, cfg__mark_of(p, inst, "sources"),
                               "key 'sources[%zu].after_ship': the directory '%s' (that is '%s') is inside "
                               "sources[%zu]'s '%s' (that is '%s'; its files would be shipped again)",
                               /* (j == i too: its own source, reached through a link) */
                               i, cfg->sources[i].after_ship_dir, mreal[i], j, cfg->sources[j].path, real[j]);
        }
out:
    ingest__free(p->ctx, real);
    ingest__free(p->ctx, mreal);
    return rc;
}

int cfg__finish_agent(cfg_parser *p, cfg_inst *inst)
{
    ingest_agent_config *cfg = inst->base;
    if (cfg->transport == INGEST_TRANSPORT_TCP && cfg->core_address[0] == '\0')
        return cfg__perr(p, cfg__mark_of(p, inst, "core.address"),
                         "key 'core.address' is required with transport: tcp");
    if (cfg->transport == INGEST_TRANSPORT_KAFKA && cfg->kafka_brokers[0] == '\0')
        return cfg__perr(p, cfg__mark_of(p, inst, "kafka.brokers"),
                         "key 'kafka.brokers' is required with transport: kafka");
    cfg->throttle_window_start = cfg->throttle_window_end = -1;
    if (cfg->throttle_window[0] != '\0' &&
        cfg__parse_window(cfg->throttle_window, &cfg->throttle_window_start, &cfg->throttle_window_end) != 0)
        return cfg__perr(p, cfg__mark_of(p, inst, "throttle.window"), "key 'throttle.window': bad window");
    if (cfg->status_socket[0] == '\0') {
        /* Default: {state_dir}/agent.sock. */
        const size_t n = path_len_trimmed(cfg->state_dir);
        if (n + sizeof("/agent.sock") - 1 > CFG_SUN_PATH_MAX)
            return cfg__perr(p, cfg__mark_of(p, inst, "state_dir"),
                             "key 'state_dir': '%.60s...' is %zu bytes long: the status socket made in it "
                             "(agent.sock) would pass the %d bytes a unix socket path may have; set status.socket "
                             "to a shorter path",
                             cfg->state_dir, n, CFG_SUN_PATH_MAX);
        char *sock = ingest__malloc(p->ctx, n + sizeof("/agent.sock"));
        if (sock == NULL)
            return ingest__fail(p->ctx, INGEST_ENOMEM, "%s: out of memory", p->file);
        memcpy(sock, cfg->state_dir, n);
        strcpy(sock + (n == 1 && cfg->state_dir[0] == '/' ? 0 : n), "/agent.sock");
        ingest__free(p->ctx, cfg->status_socket);
        cfg->status_socket = sock;
    } else if (strlen(cfg->status_socket) > CFG_SUN_PATH_MAX) {
        return cfg__perr(p, cfg__mark_of(p, inst, "status.socket"),
                    "key 'status.socket': '%.60s...' is %zu bytes long, more than the %d a unix "
                    "socket path may have",
                    cfg->status_socket, strlen(cfg->status_socket), CFG_SUN_PATH_MAX);
    }
    if (ingest_chunk_params_check(p->ctx, &cfg->chunking) != INGEST_OK) {
        char why[INGEST__ERRMSG_MAX];
        snprintf(why, sizeof(why), "%s", ingest_ctx_errmsg(p->ctx));
        cfg_mark at = cfg__mark_of(p, inst, "chunking.avg");
        if (at.line == inst->start.line && at.col == inst->start.col)
            at = cfg__mark_of(p, inst, "chunking.min");
        if (at.line == inst->start.line && at.col == inst->start.col)
            at = cfg__mark_of(p, inst, "chunking.max");
        return cfg__perr(p, at, "keys 'chunking.min/avg/max' (%" PRIu32 "/%" PRIu32 "/%" PRIu32 "): %s",
                    cfg->chunking.min, cfg->chunking.avg, cfg->chunking.max, why);
    }
    for (size_t i = 0; i < cfg->sources_count; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(cfg->sources[i].name, cfg->sources[j].name) == 0)
                return cfg__perr(p, cfg__mark_of(p, inst, "sources"),
                            "key 'sources[%zu].name': name '%s' is already used by sources[%zu]", i,
                            cfg->sources[i].name, j);
    /* One file, one source: nested sources would both watch, ship and act on the same files (one deleting
     * what the other has not shipped), and a move_dir inside a source is shipped again by it. */
    for (size_t i = 0; i < cfg->sources_count; i++)
        for (size_t j = 0; j < cfg->sources_count; j++) {
            const ingest_source_config *a = &cfg->sources[i], *b = &cfg->sources[j];
            if (j != i && path_within(a->path, b->path))
                return cfg__perr(p, cfg__mark_of(p, inst, "sources"),
                            "key 'sources[%zu].path': '%s' is %s sources[%zu]'s '%s': sources must not overlap "
                            "(one file, one source; use include/exclude to split a tree)",
                            i, a->path, path_len_trimmed(a->path) == path_len_trimmed(b->path) ? "the same as"
                                                                                          : "inside",
                            j, b->path);
            if (j == i && path_within(cfg->state_dir, a->path))
                return cfg__perr(p, cfg__mark_of(p, inst, "state_dir"),
                            "key 'state_dir': '%s' is inside sources[%zu]'s '%s' (the agent's own store and spool "
                            "would be shipped, and acted on by after_ship)",
                            cfg->state_dir, i, a->path);
            if (j == i && a->after_ship_mode == INGEST_AFTER_SHIP_MOVE &&
                (path_within(a->after_ship_dir, cfg->state_dir) || path_within(cfg->state_dir, a->after_ship_dir)))
                return cfg__perr(p, cfg__mark_of(p, inst, "sources"),
                            "key 'sources[%zu].after_ship': the directory '%s' %s state_dir '%s' (files moved "
                            "there could overwrite the agent's own store and journal)",
                            i, a->after_ship_dir, path_within(a->after_ship_dir, cfg->state_dir) ? "is inside"
                                                                                                : "holds",
                            cfg->state_dir);
            if (j != i && a->after_ship_mode == INGEST_AFTER_SHIP_MOVE && path_within(a->after_ship_dir, b->path))
                return cfg__perr(p, cfg__mark_of(p, inst, "sources"),
                            "key 'sources[%zu].after_ship': the directory '%s' is inside sources[%zu]'s '%s' (its "
                            "files would be shipped again)",
                            i, a->after_ship_dir, j, b->path);
        }
    return check_resolved_overlap(p, inst, cfg);
}

