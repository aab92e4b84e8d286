/* The transport seam's dispatch (include/ingest/link.h). */
#include "ingest/link.h"

int ingest_link_send(ingest_link *l, const ingest_wire_msg *m)
{
    return l->ops->send(l, m);
}

int ingest_link_recv(ingest_link *l, ingest_wire_msg *m, int timeout_ms)
{
    return l->ops->recv(l, m, timeout_ms);
}

const char *ingest_link_send_errmsg(ingest_link *l)
{
    return l->ops->send_errmsg(l);
}

const char *ingest_link_recv_errmsg(ingest_link *l)
{
    return l->ops->recv_errmsg(l);
}

void ingest_link_shutdown(ingest_link *l)
{
    l->ops->shutdown(l);
}

void ingest_link_destroy(ingest_link *l)
{
    if (l != NULL)
        l->ops->destroy(l);
}
