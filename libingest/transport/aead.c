/*
 * The session's record AEAD: AES-256-GCM through libcrypto's EVP interface,
 * XChaCha20-Poly1305 through libsodium (see aead.h).
 *
 * Why libcrypto for AES-256-GCM: `ingestctl bench crypto` measures
 * OpenSSL's EVP seal and open at 2.2-2.7x libsodium's
 * crypto_aead_aes256gcm_* on this machine (64 KiB records), and it uses
 * the ARMv8 crypto extensions where libsodium 1.0.18 has no AES-GCM at all.
 * Key exchange, key derivation and the handshake MACs stay libsodium's.
 */
#include "../internal.h"
#include "aead.h"
#include "ingest/session.h"

#include <limits.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <string.h>
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_AES
#define HWCAP_AES (1UL << 3)
#endif
#ifndef HWCAP_PMULL
#define HWCAP_PMULL (1UL << 4)
#endif
#endif

#define GCM_IV 12

static void make_nonce(uint8_t nonce[24], uint64_t ctr)
{
    memset(nonce, 0, 24);
    ingest__put_u64(nonce, ctr);
}

int ingest__aead_aes_available(void)
{
#if defined(__aarch64__) && defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP);
    return (hw & HWCAP_AES) != 0 && (hw & HWCAP_PMULL) != 0;
#else
    return crypto_aead_aes256gcm_is_available();
#endif
}

int ingest__aead_init(ingest__aead *a, int cipher, const uint8_t key[INGEST__AEAD_KEY], int seal)
{
    memset(a, 0, sizeof(*a));
    if (cipher == INGEST_CIPHER_XCHACHA20POLY1305) {
        memcpy(a->key, key, INGEST__AEAD_KEY);
    } else if (cipher == INGEST_CIPHER_AES256GCM) {
        EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
        if (c == NULL)
            return INGEST_ENOMEM;
        /* The IV length is GCM's default, 12 bytes; the IV itself comes per record. */
        const int ok = seal ? EVP_EncryptInit_ex2(c, EVP_aes_256_gcm(), key, NULL, NULL)
                            : EVP_DecryptInit_ex2(c, EVP_aes_256_gcm(), key, NULL, NULL);
        if (ok != 1 || EVP_CIPHER_CTX_get_iv_length(c) != GCM_IV) {
            EVP_CIPHER_CTX_free(c);
            return INGEST_ECRYPTO;
        }
        a->gcm = c;
    } else {
        return INGEST_EINVAL;
    }
    a->cipher = cipher;
    a->seal = seal;
    return 0;
}

void ingest__aead_free(ingest__aead *a)
{
    EVP_CIPHER_CTX_free(a->gcm); /* wipes its key schedule */
    sodium_memzero(a, sizeof(*a));
}

int ingest__aead_seal(ingest__aead *a, uint64_t ctr, const uint8_t *ad, size_t adlen, const uint8_t *pt,
                      size_t ptlen, uint8_t *out)
{
    uint8_t nonce[24];
    make_nonce(nonce, ctr);
    if (!a->seal)
        return INGEST_EINVAL;
    if (a->cipher == INGEST_CIPHER_XCHACHA20POLY1305) {
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(out, out + ptlen, NULL, pt, ptlen, ad, adlen, NULL,
                                                            nonce, a->key);
        return 0;
    }
    if (a->cipher != INGEST_CIPHER_AES256GCM)
        return INGEST_EINVAL;
    if (ptlen > INT_MAX || adlen > INT_MAX)
        return INGEST_ETOOBIG;
    EVP_CIPHER_CTX *c = a->gcm;
    int l = 0, l2 = 0;
    if (EVP_EncryptInit_ex2(c, NULL, NULL, nonce, NULL) != 1 ||
        (adlen > 0 && EVP_EncryptUpdate(c, NULL, &l, ad, (int)adlen) != 1) ||
        EVP_EncryptUpdate(c, out, &l, pt, (int)ptlen) != 1 || EVP_EncryptFinal_ex(c, out + l, &l2) != 1 ||
        (size_t)l + (size_t)l2 != ptlen ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, INGEST__AEAD_TAG, out + ptlen) != 1)
        return INGEST_ECRYPTO;
    return 0;
}

int ingest__aead_sealv(ingest__aead *a, uint64_t ctr, const uint8_t *ad, size_t adlen, const ingest__aead_seg *seg,
                       size_t nseg, uint8_t *out)
{
    size_t ptlen = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (seg[i].len > INT_MAX - ptlen)
            return INGEST_ETOOBIG;
        ptlen += seg[i].len;
    }
    if (!a->seal)
        return INGEST_EINVAL;
    if (a->cipher == INGEST_CIPHER_XCHACHA20POLY1305) {
        /* one pass over contiguous bytes: gather into out, then seal in place */
        size_t at = 0;
        for (size_t i = 0; i < nseg; i++) {
            if (seg[i].len > 0)
                memcpy(out + at, seg[i].p, seg[i].len);
            at += seg[i].len;
        }
        return ingest__aead_seal(a, ctr, ad, adlen, out, ptlen, out);
    }
    if (a->cipher != INGEST_CIPHER_AES256GCM)
        return INGEST_EINVAL;
    if (adlen > INT_MAX)
        return INGEST_ETOOBIG;
    uint8_t nonce[24];
    make_nonce(nonce, ctr);
    EVP_CIPHER_CTX *c = a->gcm;
    int l = 0;
    size_t at = 0;
    if (EVP_EncryptInit_ex2(c, NULL, NULL, nonce, NULL) != 1 ||
        (adlen > 0 && EVP_EncryptUpdate(c, NULL, &l, ad, (int)adlen) != 1))
        return INGEST_ECRYPTO;
    /* GCM is a stream: updates of any length give the bytes of one update over their concatenation */
    for (size_t i = 0; i < nseg; i++) {
        if (seg[i].len == 0)
            continue;
        if (EVP_EncryptUpdate(c, out + at, &l, seg[i].p, (int)seg[i].len) != 1 || (size_t)l != seg[i].len)
            return INGEST_ECRYPTO;
        at += (size_t)l;
    }
    if (EVP_EncryptFinal_ex(c, out + at, &l) != 1 || l != 0 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, INGEST__AEAD_TAG, out + ptlen) != 1)
        return INGEST_ECRYPTO;
    return 0;
}

int ingest__aead_open(ingest__aead *a, uint64_t ctr, const uint8_t *ad, size_t adlen, const uint8_t *in,
                      size_t inlen, uint8_t *out)
{
    uint8_t nonce[24];
    if (a->seal || inlen < INGEST__AEAD_TAG)
        return INGEST_EINVAL;
    const size_t ml = inlen - INGEST__AEAD_TAG;
    make_nonce(nonce, ctr);
    if (a->cipher == INGEST_CIPHER_XCHACHA20POLY1305)
        return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(out, NULL, in, ml, in + ml, ad, adlen, nonce,
                                                                   a->key) == 0
                   ? 0
                   : INGEST_ECRYPTO;
    if (a->cipher != INGEST_CIPHER_AES256GCM)
        return INGEST_EINVAL;
    if (ml > INT_MAX || adlen > INT_MAX)
        return INGEST_ETOOBIG;
    EVP_CIPHER_CTX *c = a->gcm;
    uint8_t tag[INGEST__AEAD_TAG];
    int l = 0, l2 = 0;
    memcpy(tag, in + ml, sizeof(tag)); /* before out (which may be in) is written */
    /* GCM decrypts before it checks the tag: out is wiped when the tag fails. */
    if (EVP_DecryptInit_ex2(c, NULL, NULL, nonce, NULL) != 1 ||
        (adlen > 0 && EVP_DecryptUpdate(c, NULL, &l, ad, (int)adlen) != 1) ||
        EVP_DecryptUpdate(c, out, &l, in, (int)ml) != 1 ||
        EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, INGEST__AEAD_TAG, tag) != 1 ||
        EVP_DecryptFinal_ex(c, out + l, &l2) != 1 || (size_t)l + (size_t)l2 != ml) {
        sodium_memzero(out, ml);
        return INGEST_ECRYPTO;
    }
    return 0;
}
