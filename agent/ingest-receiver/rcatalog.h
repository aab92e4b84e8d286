/*
 * The receiver's catalog of landed files (include/ingest/catalog.h): opened
 * and caught up with the manifests at start-up, then handed to every
 * lander, which adds each batch once its manifest is durable.  The
 * catalog is a cache of the manifests: when it cannot be opened the
 * receiver lands anyway (ingestctl catalog catches up on its own).
 */
#ifndef RECEIVER_RCATALOG_H
#define RECEIVER_RCATALOG_H

#include <ingest.h>

/* The catalog of bronze, caught up; NULL (logged) when it cannot be used. */
ingest_catalog *rcatalog_open(const char *bronze);
/* Close it and its context; NULL accepted. */
void rcatalog_close(ingest_catalog *cat);

#endif
