/*
 * The record AEAD of the session (docs/protocol.md, section 3), one per
 * direction: AES-256-GCM through OpenSSL's libcrypto (EVP, one context keyed
 * once, only the IV set per record) or XChaCha20-Poly1305 IETF through
 * libsodium.  Both: nonce = the record counter as u64 little-endian, the
 * rest zero (12 bytes for AES-256-GCM, 24 for XChaCha); a 16-byte tag after
 * the ciphertext.  The bytes are those libsodium's crypto_aead_aes256gcm_*
 * produced before (tests/unit/test_session.c checks both ways).
 *
 * Internal to the session; one thread at a time per object.
 */
#ifndef INGEST_AEAD_H
#define INGEST_AEAD_H

#include <stddef.h>
#include <stdint.h>

#define INGEST__AEAD_KEY 32
#define INGEST__AEAD_TAG 16

typedef struct ingest__aead {
    int cipher; /* INGEST_CIPHER_AES256GCM or INGEST_CIPHER_XCHACHA20POLY1305; 0: not keyed */
    int seal;   /* 1: this object seals, 0: it opens */
    uint8_t key[INGEST__AEAD_KEY];
    void *gcm;  /* EVP_CIPHER_CTX, AES-256-GCM only */
} ingest__aead;

/*
 * Key a (zeroed or freed) object for one direction.  0, INGEST_EINVAL (unknown
 * cipher), INGEST_ENOMEM or INGEST_ECRYPTO (libcrypto refused).  On failure
 * the object holds nothing.
 */
int ingest__aead_init(ingest__aead *a, int cipher, const uint8_t key[INGEST__AEAD_KEY], int seal);

/*
 * Whether this CPU runs AES-256-GCM in constant time and fast, so the
 * session may offer and choose it: AES-NI and PCLMUL on x86-64 (libsodium's
 * crypto_aead_aes256gcm_is_available(); needs sodium_init()), the AES and
 * PMULL extensions on aarch64 Linux (where libsodium 1.0.18 has no AES-GCM
 * and says no, but OpenSSL uses the instructions).  Elsewhere 0: XChaCha.
 */
int ingest__aead_aes_available(void);

/* Wipe the key, free the context.  Accepts a zeroed or freed object. */
void ingest__aead_free(ingest__aead *a);

/*
 * Seal pt[0, ptlen) with record counter ctr and additional data ad[0, adlen)
 * into out[0, ptlen + INGEST__AEAD_TAG) (ciphertext, then tag).  out may
 * equal pt, no other overlap.  0, INGEST_ETOOBIG (ptlen above INT_MAX) or
 * INGEST_ECRYPTO.
 */
int ingest__aead_seal(ingest__aead *a, uint64_t ctr, const uint8_t *ad, size_t adlen, const uint8_t *pt,
                      size_t ptlen, uint8_t *out);

/* One piece of the plaintext of ingest__aead_sealv. */
typedef struct ingest__aead_seg {
    const uint8_t *p;
    size_t len;
} ingest__aead_seg;

/*
 * Like ingest__aead_seal, the plaintext being the concatenation of
 * seg[0, nseg): the same bytes, without gathering it first (AES-256-GCM
 * encrypts each piece straight into out; XChaCha gathers it in out and
 * seals there).  out must not overlap any piece.
 */
int ingest__aead_sealv(ingest__aead *a, uint64_t ctr, const uint8_t *ad, size_t adlen, const ingest__aead_seg *seg,
                       size_t nseg, uint8_t *out);

/*
 * Open in[0, inlen) (ciphertext then tag, inlen >= INGEST__AEAD_TAG) into
 * out[0, inlen - INGEST__AEAD_TAG).  out may equal in.  0, or INGEST_ECRYPTO
 * when the tag does not verify: then out is wiped, so no unauthenticated
 * byte is left behind.
 */
int ingest__aead_open(ingest__aead *a, uint64_t ctr, const uint8_t *ad, size_t adlen, const uint8_t *in,
                      size_t inlen, uint8_t *out);

#endif
