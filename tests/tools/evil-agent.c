/*
 * evil-agent: a hostile device for the security integration tests
 * (tests/integration/test_security.sh).  It holds a real device key and
 * completes a real handshake, then misbehaves on purpose:
 *
 *   --ping                 send a PING first and require the PONG (proves
 *                          the session works before anything goes wrong)
 *   --path JSON            the "path" of the single file of the batch, put
 *                          into the hand-written manifest verbatim (JSON
 *                          string contents, so "a\u0000b" or "../../x" pass
 *                          through; the manifest writer would refuse them)
 *   --tamper TYPE[:OFF]    flip one byte of the sealed record of the first
 *                          frame of message TYPE (BATCH_BEGIN, CHUNK, ...),
 *                          at record offset OFF (default 4: the first byte
 *                          after the 4-byte length; -1: the last tag byte)
 *   --replay TYPE          write the sealed record of the first frame of
 *                          message TYPE twice
 *   --early-chunk          right after the batch's COMMIT, without waiting
 *                          for its ACK, send a second batch (BATCH_ID-2,
 *                          its file PATH-2, the content reversed) and, before
 *                          its WANT, a CHUNK 0 holding the first batch's
 *                          content; then COMMIT it when the WANT comes.  The
 *                          outcome reported is the second batch's.
 *   --group MODE           send the batch's chunk in a CHUNK_GROUP frame:
 *                          "good" offers the pack feature (so the manifest
 *                          part goes compressed) and sends the right bytes;
 *                          "bad" the same with one byte of the chunk flipped
 *                          before it is compressed; "nopack" without the
 *                          feature agreed.
 *   --lie                  send the batch's chunk as a CHUNK, properly sealed
 *                          and compressed, with one byte flipped before it
 *                          is compressed: its bytes do not match its id
 *   --dict FILE            offer the dictionary FILE (its true id, size and
 *                          hash) right after the handshake; if asked for it,
 *                          send it as one DICT_DATA, then go on with the batch
 *   --dict-tamper OFF      flip byte OFF of the dictionary's bytes in the
 *                          DICT_DATA (4: its id; -1: its last byte, so its
 *                          hash), then report the receiver's reply
 *   --error TEXT           after the handshake (and the PING), send an ERROR
 *                          message holding TEXT (its bytes as given: control
 *                          characters, bytes that are not UTF-8) instead of
 *                          a batch, then wait for the receiver to close
 *   --dict-chunk FILE      compress the batch's chunk with the dictionary
 *                          FILE (whether or not it was offered: a receiver
 *                          must decode only with dictionaries accepted on
 *                          the session); exit 1 if it did not shrink
 *
 * Each frame is sealed by the session into one end of a socketpair, read
 * back from the other end, altered if asked, and written to the TCP socket.
 *
 * Prints one outcome line on stdout and exits with:
 *   0  the receiver answered the batch with an ACK of negative status
 *   2  the receiver answered with a landed ACK (status >= 0)
 *   3  the receiver sent an ERROR frame
 *   4  the receiver closed the connection
 *   1  usage or setup failure (handshake failed, tamper target never sent...)
 */
#include "../../agent/common/prog.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RECV_TIMEOUT_MS 10000
#define CONTENT_MAX (64u * 1024u)
#define EVIL_DICT_MAX (128u * 1024u) /* a record must fit in the socketpair's buffer */

typedef struct evil {
    ingest_ctx *ctx;
    ingest_session *ss;
    int tcp;
    int sp[2];
    unsigned tamper_type;
    long tamper_off;
    unsigned replay_type;
    int tampered, replayed;
} evil;

static unsigned type_by_name(const char *s, size_t n)
{
    for (unsigned t = 1; t <= INGEST_MSG_TYPE_LAST; t++) {
        const char *name = ingest_wire_type_name(t);
        if (strlen(name) == n && strncmp(name, s, n) == 0)
            return t;
    }
    return 0;
}

static int read_full(int fd, uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        const ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const uint8_t *p, size_t n)
{
    size_t put = 0;
    while (put < n) {
        const ssize_t r = send(fd, p + put, n - put, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        put += (size_t)r;
    }
    return 0;
}

/*
 * Seal m into the socketpair, read the record back, alter it if asked and
 * write it to the receiver.  0, or -1 when the receiver's socket refused
 * the bytes (it closed), or -2 on a local failure.
 */
static int xsend(evil *e, const ingest_wire_msg *m)
{
    int rc = ingest_session_send_msg(e->ss, e->sp[0], m);
    if (rc < 0) {
        fprintf(stderr, "evil-agent: seal %s: %s: %s\n", ingest_wire_type_name(m->type), ingest_strerror(rc),
                ingest_session_send_errmsg(e->ss));
        return -2;
    }
    uint8_t hdr[4];
    if (read_full(e->sp[1], hdr, 4) != 0)
        return -2;
    const size_t l = (size_t)hdr[0] | (size_t)hdr[1] << 8 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 24;
    uint8_t *rec = malloc(4 + l);
    if (rec == NULL)
        return -2;
    memcpy(rec, hdr, 4);
    if (read_full(e->sp[1], rec + 4, l) != 0) {
        free(rec);
        return -2;
    }
    int copies = 1;
    if (m->type == e->tamper_type && !e->tampered) {
        const size_t off = e->tamper_off < 0 ? 4 + l - 1 : (size_t)e->tamper_off;
        if (off >= 4 + l) {
            fprintf(stderr, "evil-agent: tamper offset %zu outside the %zu-byte record\n", off, 4 + l);
            free(rec);
            return -2;
        }
        rec[off] ^= 0x01;
        e->tampered = 1;
        fprintf(stderr, "evil-agent: flipped byte %zu of the %zu-byte %s record\n", off, 4 + l,
                ingest_wire_type_name(m->type));
    }
    if (m->type == e->replay_type && !e->replayed) {
        copies = 2;
        e->replayed = 1;
        fprintf(stderr, "evil-agent: sending the %zu-byte %s record twice\n", 4 + l, ingest_wire_type_name(m->type));
    }
    rc = 0;
    for (int i = 0; i < copies && rc == 0; i++)
        if (write_full(e->tcp, rec, 4 + l) != 0)
            rc = -1;
    free(rec);
    return rc;
}

/* The manifest of a batch of one file holding text: 0, or -1 when it does not fit in cap. */
static int make_manifest(const uint8_t *dedup, const char *device, const char *batch, const char *path,
                         const char *text, size_t tlen, char *out, size_t cap, size_t *len)
{
    uint8_t cid[INGEST_ID_BYTES], fhash[INGEST_ID_BYTES];
    char cid_hex[2 * INGEST_ID_BYTES + 1], fhash_hex[2 * INGEST_ID_BYTES + 1];
    ingest_chunk_id(dedup, text, tlen, cid);
    ingest_filehash fh;
    ingest_filehash_init(&fh, dedup);
    ingest_filehash_update(&fh, cid, sizeof(cid)); /* the file hash covers the chunk ids */
    ingest_filehash_final(&fh, fhash);
    ingest_to_hex(cid, sizeof(cid), cid_hex);
    ingest_to_hex(fhash, sizeof(fhash), fhash_hex);
    const long long now_ns = (long long)time(NULL) * 1000000000LL;
    const int n = snprintf(out, cap,
                           "{\"type\":\"batch\",\"format\":2,\"device\":\"%s\",\"batch\":\"%s\",\"files\":1,"
                           "\"bytes\":%zu,\"created_ns\":%lld}\n"
                           "{\"type\":\"file\",\"path\":\"%s\",\"landed\":\"\",\"size\":%zu,\"mtime_ns\":%lld,"
                           "\"mode\":33188,\"version\":0,\"hash\":\"%s\",\"nchunks\":1,\"chunks\":[[\"%s\",%zu]]}\n",
                           device, batch, tlen, now_ns, path, tlen, now_ns, fhash_hex, cid_hex, tlen);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    *len = (size_t)n;
    return 0;
}

/* BATCH_BEGIN, the manifest in one part, MANIFEST_END: 0, or xsend's failure. */
static int send_manifest(evil *e, const char *batch, const char *manifest, size_t mlen, size_t tlen,
                         ingest_codec *pack)
{
    uint8_t *packed = NULL;
    size_t plen = 0;
    if (pack != NULL) {
        /* pack feature: the part is an encoded chunk */
        packed = malloc(ingest_codec_bound(mlen));
        if (packed == NULL || ingest_codec_encode(pack, manifest, mlen, packed, ingest_codec_bound(mlen), &plen) < 0) {
            free(packed);
            return -2;
        }
    }
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_BATCH_BEGIN;
    snprintf(m.u.begin.batch_id, sizeof(m.u.begin.batch_id), "%s", batch);
    m.u.begin.file_count = 1;
    m.u.begin.chunk_count = 1;
    m.u.begin.total_bytes = tlen;
    int rc = xsend(e, &m);
    if (rc == 0) {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_MANIFEST_PART;
        m.u.manifest_part.data = packed ? packed : (const uint8_t *)manifest;
        m.u.manifest_part.len = packed ? plen : mlen;
        rc = xsend(e, &m);
    }
    free(packed);
    if (rc == 0) {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_MANIFEST_END;
        m.u.manifest_end.part_count = 1;
        m.u.manifest_end.manifest_bytes = (uint64_t)mlen;
        rc = xsend(e, &m);
    }
    return rc;
}

/* BATCH_COMMIT of batch: 0, or xsend's failure. */
static int send_commit(evil *e, const char *batch, uint32_t sent)
{
    ingest_wire_msg m;
    memset(&m, 0, sizeof(m));
    m.type = INGEST_MSG_BATCH_COMMIT;
    snprintf(m.u.commit.batch_id, sizeof(m.u.commit.batch_id), "%s", batch);
    m.u.commit.chunks_sent = sent;
    return xsend(e, &m);
}

/* Print a reply (or receive failure) that is not a WANT; returns the exit status. */
static int report(evil *e, int rc, const ingest_wire_msg *m)
{
    if (rc == INGEST_ECLOSED || rc == INGEST_EIO) {
        printf("connection closed by the receiver (%s: %s)\n", ingest_strerror(rc),
               ingest_session_recv_errmsg(e->ss));
        return 4;
    }
    if (rc < 0) {
        printf("receive failed: %s: %s\n", ingest_strerror(rc), ingest_session_recv_errmsg(e->ss));
        return 1;
    }
    if (m->type == INGEST_MSG_ACK) {
        printf("ACK batch=%s status=%d (%s) message: %s\n", m->u.ack.batch_id, (int)m->u.ack.status,
               m->u.ack.status < 0 ? ingest_strerror(m->u.ack.status) : "ok", m->u.ack.message);
        return m->u.ack.status < 0 ? 0 : 2;
    }
    if (m->type == INGEST_MSG_ERROR) {
        printf("ERROR from the receiver: %s: %s\n", ingest_strerror(m->u.error.code), m->u.error.message);
        return 3;
    }
    printf("unexpected %s from the receiver\n", ingest_wire_type_name(m->type));
    return 1;
}

/* Receive the next message, skipping PONGs (answers to a replayed or extra PING). */
static int recv_reply(evil *e, ingest_wire_msg *m)
{
    for (;;) {
        const int rc = ingest_session_recv_msg(e->ss, e->tcp, m, RECV_TIMEOUT_MS);
        if (rc < 0 || m->type != INGEST_MSG_PONG)
            return rc;
        fprintf(stderr, "evil-agent: PONG received\n");
    }
}

/*
 * --early-chunk, after the first batch's COMMIT: the second batch and a
 * CHUNK sent before its WANT, holding the first batch's content (which the
 * receiver could check against the first batch's id).  Returns the exit
 * status for the second batch's outcome.
 */
static int early_chunk(evil *e, const uint8_t *dedup, ingest_codec *codec, const char *device, const char *batch,
                       const char *path, const char *text, size_t tlen)
{
    char batch2[INGEST_WIRE_BATCH_ID_MAX + 1], path2[1024], text2[CONTENT_MAX + 32], manifest2[8192];
    snprintf(batch2, sizeof(batch2), "%s-2", batch);
    snprintf(path2, sizeof(path2), "%s-2", path);
    /* the same length (so a length check cannot tell), other bytes: text reversed */
    for (size_t i = 0; i < tlen; i++)
        text2[i] = text[tlen - 1 - i];
    text2[tlen] = '\0';
    const size_t tlen2 = tlen;
    size_t mlen2 = 0, elen = 0;
    const size_t cap = ingest_codec_bound(tlen);
    uint8_t *enc = malloc(cap);
    int status = 1;
    ingest_wire_msg m;
    if (enc == NULL || ingest_codec_encode(codec, text, tlen, enc, cap, &elen) < 0 ||
        make_manifest(dedup, device, batch2, path2, text2, tlen2, manifest2, sizeof(manifest2), &mlen2) != 0)
        goto out;
    int rc = send_manifest(e, batch2, manifest2, mlen2, tlen2, NULL);
    if (rc == 0) {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_CHUNK;
        m.u.chunk.index = 0;
        m.u.chunk.data = enc;
        m.u.chunk.len = elen;
        rc = xsend(e, &m);
        fprintf(stderr, "evil-agent: sent batch %s and its chunk 0 (the bytes of batch %s) before its WANT\n",
                batch2, batch);
    }
    if (rc == -2)
        goto out;
    /* the first batch's outcome, then the second's WANT (or its end) */
    rc = recv_reply(e, &m);
    if (rc < 0 || m.type != INGEST_MSG_ACK || strcmp(m.u.ack.batch_id, batch) != 0 || m.u.ack.status < 0) {
        fprintf(stderr, "evil-agent: the first batch was not acknowledged as landed\n");
        status = report(e, rc, &m);
        goto out;
    }
    fprintf(stderr, "evil-agent: batch %s acknowledged\n", batch);
    rc = recv_reply(e, &m);
    if (rc == 0 && m.type == INGEST_MSG_WANT) {
        if (send_commit(e, batch2, 1) == -2)
            goto out;
        rc = recv_reply(e, &m);
    }
    status = report(e, rc, &m);
out:
    free(enc);
    return status;
}

static void usage(void)
{
    fprintf(stderr, "usage: evil-agent --address HOST:PORT --device ID --key FILE --receiver-pub FILE\n"
                    "                  --dedup-key FILE [--batch ID] [--path JSON] [--content TEXT]\n"
                    "                  [--ping] [--tamper TYPE[:OFFSET]] [--replay TYPE] [--early-chunk]\n"
                    "                  [--dict FILE [--dict-tamper OFFSET]] [--dict-chunk FILE] [--error TEXT]\n");
}

int main(int argc, char **argv)
{
    const char *address = NULL, *device = NULL, *keyfile = NULL, *pubfile = NULL, *dedupfile = NULL;
    const char *batch = "evil1", *path = "data/evil.txt", *content = NULL;
    int ping = 0, early = 0, lie = 0, dict_tamper_set = 0;
    long dict_tamper = 0;
    const char *dictfile = NULL, *chunkdict = NULL, *group = NULL, *error_text = NULL;
    uint8_t *dict = NULL;
    size_t dict_len = 0;
    evil e;
    memset(&e, 0, sizeof(e));
    e.tcp = e.sp[0] = e.sp[1] = -1;
    e.tamper_off = 4;
    static const struct option opts[] = {
        { "address", required_argument, NULL, 'a' }, { "device", required_argument, NULL, 'd' },
        { "key", required_argument, NULL, 'k' },     { "receiver-pub", required_argument, NULL, 'r' },
        { "dedup-key", required_argument, NULL, 'D' }, { "batch", required_argument, NULL, 'b' },
        { "path", required_argument, NULL, 'p' },    { "content", required_argument, NULL, 'c' },
        { "ping", no_argument, NULL, 'P' },          { "tamper", required_argument, NULL, 't' },
        { "replay", required_argument, NULL, 'R' },  { "early-chunk", no_argument, NULL, 'E' },
        { "group", required_argument, NULL, 'G' },  { "lie", no_argument, NULL, 'L' },
        { "dict", required_argument, NULL, 'T' },    { "dict-tamper", required_argument, NULL, 'X' },
        { "dict-chunk", required_argument, NULL, 'U' }, { "error", required_argument, NULL, 'e' },
        { NULL, 0, NULL, 0 },
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'a': address = optarg; break;
        case 'd': device = optarg; break;
        case 'k': keyfile = optarg; break;
        case 'r': pubfile = optarg; break;
        case 'D': dedupfile = optarg; break;
        case 'b': batch = optarg; break;
        case 'p': path = optarg; break;
        case 'c': content = optarg; break;
        case 'P': ping = 1; break;
        case 'E': early = 1; break;
        case 'L': lie = 1; break;
        case 'G':
            group = optarg;
            if (strcmp(group, "good") != 0 && strcmp(group, "bad") != 0 && strcmp(group, "nopack") != 0) {
                fprintf(stderr, "evil-agent: --group takes good, bad or nopack\n");
                return 1;
            }
            break;
        case 'T': dictfile = optarg; break;
        case 'e': error_text = optarg; break;
        case 'U': chunkdict = optarg; break;
        case 'X':
            dict_tamper = strtol(optarg, NULL, 10);
            dict_tamper_set = 1;
            break;
        case 't': {
            const char *colon = strchr(optarg, ':');
            e.tamper_type = type_by_name(optarg, colon ? (size_t)(colon - optarg) : strlen(optarg));
            if (colon)
                e.tamper_off = strtol(colon + 1, NULL, 10);
            if (e.tamper_type == 0) {
                fprintf(stderr, "evil-agent: unknown message type in --tamper %s\n", optarg);
                return 1;
            }
            break;
        }
        case 'R':
            e.replay_type = type_by_name(optarg, strlen(optarg));
            if (e.replay_type == 0) {
                fprintf(stderr, "evil-agent: unknown message type in --replay %s\n", optarg);
                return 1;
            }
            break;
        default: usage(); return 1;
        }
    }
    if (!address || !device || !keyfile || !pubfile || !dedupfile || optind != argc) {
        usage();
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    prog_log_init("evil-agent", INGEST_LOG_WARN);

    int status = 1;
    char *manifest = NULL;
    uint8_t *enc = NULL;
    ingest_codec *codec = NULL;
    ingest_secret_key key;
    uint8_t rpub[INGEST_PUBKEY_BYTES], dedup[INGEST_KEY_BYTES];
    memset(&key, 0, sizeof(key));
    e.ctx = ingest_ctx_create(NULL);
    if (e.ctx == NULL)
        goto out;
    if (ingest_secret_key_load(e.ctx, keyfile, &key) < 0 || ingest_public_key_load(e.ctx, pubfile, rpub) < 0 ||
        ingest_dedup_key_load(e.ctx, dedupfile, dedup) < 0 || ingest_codec_create(e.ctx, 1, &codec) < 0) {
        fprintf(stderr, "evil-agent: %s\n", ingest_ctx_errmsg(e.ctx));
        goto out;
    }
    if (dictfile != NULL) {
        FILE *f = fopen(dictfile, "rb");
        if (f == NULL || (dict = malloc(EVIL_DICT_MAX + 1)) == NULL) {
            fprintf(stderr, "evil-agent: %s: %s\n", dictfile, strerror(errno));
            if (f)
                fclose(f);
            goto out;
        }
        dict_len = fread(dict, 1, EVIL_DICT_MAX + 1, f);
        fclose(f);
        if (dict_len == 0 || dict_len > EVIL_DICT_MAX || ingest_dict_id(dict, dict_len) == 0 ||
            (dict_tamper_set && (dict_tamper < -1 || dict_tamper >= (long)dict_len))) {
            fprintf(stderr, "evil-agent: %s: not a dictionary of 1..%u bytes, or --dict-tamper outside it\n", dictfile,
                    EVIL_DICT_MAX);
            goto out;
        }
    }

    if (chunkdict != NULL) {
        FILE *f = fopen(chunkdict, "rb");
        uint8_t *d = malloc(INGEST_DICT_MAX_BYTES);
        const size_t n = f && d ? fread(d, 1, INGEST_DICT_MAX_BYTES, f) : 0;
        uint32_t did = 0;
        const int ok = n > 0 && ingest_codec_add_dict(codec, d, n, &did) == 0 && ingest_codec_use_dict(codec, did) == 0;
        if (f)
            fclose(f);
        free(d);
        if (!ok) {
            fprintf(stderr, "evil-agent: --dict-chunk %s: not a loadable dictionary\n", chunkdict);
            goto out;
        }
    }

    /* The file of the batch: unique content per batch, so its chunk is always wanted. */
    char text[CONTENT_MAX];
    if (content == NULL)
        snprintf(text, sizeof(text), "evil payload of batch %s, pid %ld\n", batch, (long)getpid());
    else
        snprintf(text, sizeof(text), "%s", content);
    const size_t tlen = strlen(text);
    if (tlen == 0) {
        fprintf(stderr, "evil-agent: --content must not be empty\n");
        goto out;
    }
    const size_t mcap = strlen(path) + strlen(device) + strlen(batch) + 4096;
    size_t mlen = 0;
    manifest = malloc(mcap);
    if (manifest == NULL || make_manifest(dedup, device, batch, path, text, tlen, manifest, mcap, &mlen) != 0)
        goto out;

    char err[512];
    e.tcp = prog_connect(address, 5000, err, sizeof(err));
    if (e.tcp < 0) {
        fprintf(stderr, "evil-agent: connect %s: %s\n", address, err);
        goto out;
    }
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, e.sp) != 0) {
        perror("evil-agent: socketpair");
        goto out;
    }
    if (ingest_session_client_create(e.ctx, device, &key, rpub, &e.ss) < 0) {
        fprintf(stderr, "evil-agent: %s\n", ingest_ctx_errmsg(e.ctx));
        goto out;
    }
    const int pack = group != NULL && strcmp(group, "nopack") != 0;
    if ((pack || dict_len > 0) &&
        ingest_session_set_features(e.ss, (pack ? INGEST_SESSION_FEATURE_PACK : 0u) |
                                              (dict_len > 0 ? INGEST_SESSION_FEATURE_DICT : 0u)) < 0) {
        fprintf(stderr, "evil-agent: %s\n", ingest_ctx_errmsg(e.ctx));
        goto out;
    }
    int rc = ingest_session_handshake_fd(e.ss, e.tcp, 10000);
    if (rc < 0) {
        fprintf(stderr, "evil-agent: handshake: %s: %s\n", ingest_strerror(rc), ingest_ctx_errmsg(e.ctx));
        goto out;
    }
    fprintf(stderr, "evil-agent: handshake done as %s (%s)\n", device,
            ingest_session_cipher_name(ingest_session_cipher(e.ss)));

    ingest_wire_msg m;
    if (dict_len > 0) {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_DICT_OFFER;
        m.u.dict_offer.dict_id = ingest_dict_id(dict, dict_len);
        m.u.dict_offer.size = (uint32_t)dict_len;
        ingest_dict_hash(dict, dict_len, m.u.dict_offer.hash);
        if ((rc = xsend(&e, &m)) != 0)
            goto out;
        rc = recv_reply(&e, &m);
        if (rc < 0 || m.type != INGEST_MSG_DICT_WANT) {
            status = report(&e, rc, &m);
            goto out;
        }
        fprintf(stderr, "evil-agent: DICT_WANT answer %u %s\n", (unsigned)m.u.dict_want.answer, m.u.dict_want.message);
        if (m.u.dict_want.answer == INGEST_DICT_SEND) {
            if (dict_tamper_set)
                dict[dict_tamper < 0 ? dict_len - 1 : (size_t)dict_tamper] ^= 0x01;
            const uint32_t id = m.u.dict_want.dict_id; /* the offered id, whatever the bytes now say */
            memset(&m, 0, sizeof(m));
            m.type = INGEST_MSG_DICT_DATA;
            m.u.dict_data.dict_id = id;
            m.u.dict_data.data = dict;
            m.u.dict_data.len = dict_len;
            if ((rc = xsend(&e, &m)) != 0)
                goto out;
            fprintf(stderr, "evil-agent: sent the dictionary%s\n", dict_tamper_set ? " (tampered)" : "");
        } else if (dict_tamper_set) {
            fprintf(stderr, "evil-agent: the receiver did not ask for the dictionary: nothing to tamper with\n");
            goto out;
        }
        if (dict_tamper_set) {
            rc = recv_reply(&e, &m);
            status = report(&e, rc, &m);
            goto out;
        }
    }
    if (ping) {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_PING;
        m.u.ping.nonce = 0x1234567890abcdefULL;
        rc = xsend(&e, &m);
        if (rc == -2)
            goto out;
        if (rc == 0 && e.tamper_type != INGEST_MSG_PING && e.replay_type != INGEST_MSG_PING) {
            rc = ingest_session_recv_msg(e.ss, e.tcp, &m, RECV_TIMEOUT_MS);
            if (rc < 0 || m.type != INGEST_MSG_PONG || m.u.ping.nonce != 0x1234567890abcdefULL) {
                fprintf(stderr, "evil-agent: no PONG for the PING: %s\n",
                        rc < 0 ? ingest_session_recv_errmsg(e.ss) : ingest_wire_type_name(m.type));
                goto out;
            }
            fprintf(stderr, "evil-agent: PING answered\n");
        }
    }

    if (error_text != NULL) {
        memset(&m, 0, sizeof(m));
        m.type = INGEST_MSG_ERROR;
        m.u.error.code = INGEST_EIO;
        snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", error_text);
        if ((rc = xsend(&e, &m)) != 0)
            goto out;
        rc = recv_reply(&e, &m);
        status = report(&e, rc, &m);
        goto out;
    }

    /* The batch: BEGIN, the manifest in one part, END; then serve WANTs until ACK/ERROR/close. */
    if (pack && !(ingest_session_features(e.ss) & INGEST_SESSION_FEATURE_PACK)) {
        fprintf(stderr, "evil-agent: the receiver did not agree to the pack feature\n");
        goto out;
    }
    rc = send_manifest(&e, batch, manifest, mlen, tlen, pack ? codec : NULL);
    if (rc == -2)
        goto out;
    /* Read WANTs; anything else is the outcome. */
    int wanted0 = 0;
    while (rc == 0) {
        ingest_wire_msg w;
        rc = recv_reply(&e, &w);
        if (rc < 0 || w.type != INGEST_MSG_WANT) {
            status = report(&e, rc, &w);
            goto check;
        }
        for (uint32_t i = 0; i < w.u.want.count; i++)
            if (ingest_wire_want_index(&w.u.want, i) == 0)
                wanted0 = 1;
        if (!(w.u.want.flags & INGEST_WANT_MORE))
            break;
    }
    if (rc == 0) {
        uint32_t sent = 0;
        if (wanted0) {
            const size_t cap = ingest_codec_bound(tlen);
            size_t elen = 0;
            enc = malloc(cap);
            char sendtext[CONTENT_MAX];
            memcpy(sendtext, text, tlen);
            if ((group != NULL && strcmp(group, "bad") == 0) || lie)
                sendtext[tlen / 2] ^= 0x20;
            if (enc == NULL || ingest_codec_encode(codec, sendtext, tlen, enc, cap, &elen) < 0)
                goto out;
            if (chunkdict != NULL && enc[1] != INGEST_CODEC_METHOD_ZSTD_DICT) {
                fprintf(stderr, "evil-agent: the chunk did not shrink with the dictionary (method %u)\n", enc[1]);
                goto out;
            }
            memset(&m, 0, sizeof(m));
            static const uint8_t index0[4] = { 0, 0, 0, 0 };
            if (group != NULL) {
                m.type = INGEST_MSG_CHUNK_GROUP;
                m.u.group.count = 1;
                m.u.group.raw = index0;
                m.u.group.data = enc;
                m.u.group.len = elen;
            } else {
                m.type = INGEST_MSG_CHUNK;
                m.u.chunk.index = 0;
                m.u.chunk.data = enc;
                m.u.chunk.len = elen;
            }
            rc = xsend(&e, &m);
            sent++;
        }
        if (rc == 0)
            rc = send_commit(&e, batch, sent);
        if (rc == -2)
            goto out;
    }
    if (rc == 0 && early) {
        status = early_chunk(&e, dedup, codec, device, batch, path, text, tlen);
        goto check;
    }
    /* The reply (when a write failed, the receiver closed: read what came first). */
    rc = recv_reply(&e, &m);
    status = report(&e, rc, &m);
check:
    if (e.tamper_type && !e.tampered) {
        fprintf(stderr, "evil-agent: no %s frame was sent, nothing was tampered with\n",
                ingest_wire_type_name(e.tamper_type));
        status = 1;
    }
    if (e.replay_type && !e.replayed) {
        fprintf(stderr, "evil-agent: no %s frame was sent, nothing was replayed\n",
                ingest_wire_type_name(e.replay_type));
        status = 1;
    }
out:
    fflush(stdout);
    if (e.tcp >= 0)
        close(e.tcp);
    if (e.sp[0] >= 0)
        close(e.sp[0]);
    if (e.sp[1] >= 0)
        close(e.sp[1]);
    ingest_session_destroy(e.ss);
    ingest_codec_destroy(codec);
    ingest_secret_key_wipe(&key);
    ingest_ctx_destroy(e.ctx);
    free(manifest);
    free(enc);
    free(dict);
    return status;
}
