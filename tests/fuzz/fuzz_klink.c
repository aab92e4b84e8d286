/*
 * Fuzz target: the Kafka core link's handling of a device's record stream
 * (include/ingest/klink.h): records in any order, with any record numbers,
 * message pieces that do or do not fit together, interleaved with the
 * core's side (receives, WANTs, ACKs, a serve that ends and a rearm).  The
 * records are what an authenticated device may send (the sealing is not
 * fuzzed here: fuzz_krecord does that), so this is the state machine a
 * device that lies, or a topic that lost records, meets.  Nothing may
 * crash, leak, read out of bounds or wait forever.
 *
 * Input: a sequence of operations, each a byte op then its arguments:
 *   op % 5 == 0  feed: u8 type (1..3), u8 message type, u8 batch (0..2),
 *                u8 record number, u8 offset, u8 total, u8 n, n bytes
 *                (clamped to a valid piece)
 *   op % 5 == 1  receive once (no wait)
 *   op % 5 == 2  the core's WANT: u8 count, count u8 indexes
 *   op % 5 == 3  the core's ACK of the batch it was last given
 *   op % 5 == 4  the serve ends: rearm
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ingest.h"
#include "ingest/klink.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int quiet_produce(void *ud, const char *key, const uint8_t *rec, size_t len, uint64_t token, char *why,
                         size_t whycap)
{
    (void)ud, (void)key, (void)rec, (void)len, (void)token, (void)why, (void)whycap;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL)
        __builtin_trap();
    ingest_krec_keys keys;
    memset(&keys, 7, sizeof(keys));
    const ingest_klink_core_opts o = { .device = "gw-1", .keys = &keys, .bus = { quiet_produce, NULL },
                                       .queue_max = 1 << 24 };
    ingest_link *l = NULL;
    if (ingest_klink_core_create(ctx, &o, &l) != 0)
        __builtin_trap();
    static const char *const batches[] = { "b-1", "b-2", "b-3" };
    char last[INGEST_WIRE_BATCH_ID_MAX + 1] = "";
    size_t i = 0;
    int retired = 0;
    while (i < size && !retired) {
        const uint8_t op = data[i++];
        switch (op % 5) {
        case 0: {
            if (size - i < 7)
                goto out;
            ingest_krec_hdr h;
            memset(&h, 0, sizeof(h));
            h.type = 1u + data[i] % 3u;
            snprintf(h.device, sizeof(h.device), "gw-1");
            snprintf(h.batch, sizeof(h.batch), "%s", batches[data[i + 2] % 3]);
            h.seq = data[i + 3];
            ingest_krec_body b;
            memset(&b, 0, sizeof(b));
            b.type = h.type;
            b.u.msg.wtype = data[i + 1] % 16u;
            b.u.msg.total = data[i + 5];
            b.u.msg.offset = data[i + 4] <= b.u.msg.total ? data[i + 4] : b.u.msg.total;
            size_t n = data[i + 6];
            i += 7;
            if (n > size - i)
                n = size - i;
            if (n > b.u.msg.total - b.u.msg.offset)
                n = b.u.msg.total - b.u.msg.offset;
            b.u.msg.data = data + i;
            b.u.msg.len = n;
            i += n;
            if (ingest_klink_core_feed(l, &h, &b, i) == INGEST_ECLOSED)
                retired = 1;
            break;
        }
        case 1: {
            ingest_wire_msg m;
            if (ingest_link_recv(l, &m, 0) == 0 && m.type == INGEST_MSG_BATCH_BEGIN)
                snprintf(last, sizeof(last), "%s", m.u.begin.batch_id);
            break;
        }
        case 2: {
            if (i >= size)
                goto out;
            uint32_t idx[256];
            uint32_t n = data[i++], k = 0;
            for (uint32_t j = 0; j < n && i < size; j++) {
                const uint32_t v = data[i++];
                if (k == 0 || v > idx[k - 1])
                    idx[k++] = v;
            }
            ingest_wire_msg m;
            memset(&m, 0, sizeof(m));
            m.type = INGEST_MSG_WANT;
            snprintf(m.u.want.batch_id, sizeof(m.u.want.batch_id), "%s", last[0] ? last : "b-1");
            m.u.want.count = k;
            m.u.want.idx = idx;
            (void)ingest_link_send(l, &m);
            break;
        }
        case 3: {
            ingest_wire_msg m;
            memset(&m, 0, sizeof(m));
            m.type = INGEST_MSG_ACK;
            snprintf(m.u.ack.batch_id, sizeof(m.u.ack.batch_id), "%s", last[0] ? last : "b-1");
            (void)ingest_link_send(l, &m);
            break;
        }
        default:
            ingest_link_shutdown(l);
            if (ingest_klink_core_rearm(l) == 0)
                retired = 1;
            break;
        }
    }
out:
    ingest_link_destroy(l);
    ingest_ctx_destroy(ctx);
    return 0;
}
