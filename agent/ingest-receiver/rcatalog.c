/* The receiver's catalog: open, catch up, close (rcatalog.h). */
#include "rcatalog.h"
#include "../common/prog.h"

#include <stdio.h>

/* The catalog's own context: landers of several threads use the catalog,
 * which serialises its calls and logs through this context. */
static ingest_ctx *cat_ctx;

ingest_catalog *rcatalog_open(const char *bronze)
{
    ingest_catalog *cat = NULL;
    if ((cat_ctx = ingest_ctx_create(NULL)) == NULL)
        return NULL;
    ingest_ctx_set_log(cat_ctx, prog_lib_log, NULL, prog_log_level() >= INGEST_LOG_DEBUG ? INGEST_LOG_DEBUG : INGEST_LOG_WARN);
    const double t0 = prog_now();
    ingest_catalog_stats st;
    if (ingest_catalog_open(cat_ctx, bronze, 0, &cat) < 0 || ingest_catalog_catch_up(cat, &st) < 0) {
        prog_log(INGEST_LOG_WARN, "catalog of %s not kept (ingestctl catalog catches it up): %s", bronze,
                 ingest_ctx_errmsg(cat_ctx));
        ingest_catalog_close(cat);
        ingest_ctx_destroy(cat_ctx);
        cat_ctx = NULL;
        return NULL;
    }
    /* landed batches are added by the catalog's thread, not while their ACK waits */
    if (ingest_catalog_start_adder(cat) < 0)
        prog_log(INGEST_LOG_WARN, "catalog of %s: %s; batches are added as they land", bronze,
                 ingest_ctx_errmsg(cat_ctx));
    prog_log(INGEST_LOG_INFO, "catalog of %s caught up in %.2fs: %llu batches (%llu files) added, %llu bad", bronze,
             prog_now() - t0, (unsigned long long)st.batches, (unsigned long long)st.files,
             (unsigned long long)st.bad);
    return cat;
}

void rcatalog_close(ingest_catalog *cat)
{
    if (cat == NULL)
        return;
    ingest_catalog_close(cat);
    ingest_ctx_destroy(cat_ctx);
    cat_ctx = NULL;
}
