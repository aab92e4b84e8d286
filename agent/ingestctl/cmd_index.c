/* ingestctl index check DIR [--bronze ROOT]: walk the core's index. */
#include "ingestctl.h"

#include <ingest.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void print_problem(void *ud, const char *problem)
{
    (void)ud;
    printf("%s\n", problem);
}

static int index_check(int argc, char **argv)
{
    const char *dir = NULL, *bronze = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bronze") == 0 && i + 1 < argc) {
            bronze = argv[++i];
        } else if (argv[i][0] == '-' || dir != NULL) {
            fprintf(stderr, "ingestctl index check: unexpected argument '%s'\n", argv[i]);
            return 2;
        } else {
            dir = argv[i];
        }
    }
    if (dir == NULL) {
        fprintf(stderr, "usage: ingestctl index check DIR [--bronze ROOT]\n");
        return 2;
    }
    if (bronze != NULL) {
        /* a typo or a filesystem not mounted would show every entry as stale, as if the index were wrong */
        char p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%s/_manifests", bronze);
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            fprintf(stderr,
                    "ingestctl index check: --bronze %s holds no _manifests directory: not a bronze tree a "
                    "receiver landed into (the wrong directory, or a filesystem not mounted?)\n",
                    bronze);
            return 1;
        }
    }
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    ingest_store *st = NULL;
    ingest_index *idx = NULL;
    ingest_index_stats s;
    int status = 1, rc;
    const ingest_store_opts opts = { .flags = INGEST_STORE_RDONLY };
    if (ctx == NULL) {
        fprintf(stderr, "ingestctl: out of memory\n");
        return 1;
    }
    if ((rc = ingest_store_open(ctx, dir, &opts, &st)) < 0 || (rc = ingest_index_open(st, bronze, &idx)) < 0 ||
        (rc = ingest_index_check(idx, print_problem, NULL, &s)) < 0) {
        fprintf(stderr, "ingestctl index check: %s: %s\n", ingest_strerror(rc), ingest_ctx_errmsg(ctx));
        goto out;
    }
    const int needed = ingest_index_rebuild_needed(idx);
    printf("dedup scope %s: chunks %llu, files %llu, batches %llu, bad %llu, stale %llu%s%s\n",
           ingest_index_scope(idx) == INGEST_DEDUP_DEVICE ? "device" : "fleet", (unsigned long long)s.chunks,
           (unsigned long long)s.files, (unsigned long long)s.batches, (unsigned long long)s.bad,
           (unsigned long long)s.stale, needed == 1 ? " (incomplete: rebuild needed)" : "",
           bronze == NULL ? " (files on disk not checked: no --bronze)" : "");
    status = s.bad != 0 || s.stale != 0 || needed != 0 ? 1 : 0;
out:
    ingest_index_close(idx);
    ingest_store_close(st);
    ingest_ctx_destroy(ctx);
    return status;
}

int cmd_index(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "check") == 0)
        return index_check(argc - 1, argv + 1);
    fprintf(stderr, "usage: ingestctl index check DIR [--bronze ROOT]\n");
    return 2;
}
