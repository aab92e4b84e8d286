/*
 * libingest: the public API of the edge-to-core ingest and replication agent.
 *
 * One opaque handle per subsystem, each with a create/destroy pair; destroy
 * accepts NULL.  Functions return 0 on success and a negative INGEST_E* code
 * on failure; ingest_strerror() names a code and ingest_ctx_errmsg() gives
 * the detail of the last failure seen through a context.
 *
 * THREAD SAFETY: a context and every handle made from it belong to one
 * thread at a time.  Use one context per thread; handles of different
 * contexts may be used concurrently.  ingest_chunk_id() and the other
 * functions that take no handle are thread-safe.
 *
 * The library never prints: its messages go to the log callback set with
 * ingest_ctx_set_log(), and nowhere when none is set.
 */
#ifndef INGEST_H
#define INGEST_H

#include "ingest/common.h"
#include "ingest/chunker.h"
#include "ingest/hash.h"
#include "ingest/codec.h"
#include "ingest/index.h"
#include "ingest/manifest.h"
#include "ingest/chunkhash.h"
#include "ingest/config.h"
#include "ingest/wire.h"
#include "ingest/session.h"
#include "ingest/link.h"
#include "ingest/core.h"
#include "ingest/edge.h"
#include "ingest/lander.h"
#include "ingest/sender.h"
#include "ingest/filter.h"
#include "ingest/journal.h"
#include "ingest/throttle.h"
#include "ingest/metrics.h"
#include "ingest/catalog.h"

#endif
