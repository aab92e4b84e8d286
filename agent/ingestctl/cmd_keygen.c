/*
 * ingestctl keygen NAME          write NAME.key (secret, 0600) and NAME.pub
 * ingestctl keygen --dedup FILE  write a fleet dedup key (64 hex, 0600)
 *
 * Existing files are never overwritten.
 */
#include "ingestctl.h"

#include <ingest.h>
#include <ingest/session.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void keygen_usage(FILE *f)
{
    fprintf(f, "usage: ingestctl keygen NAME\n"
               "       ingestctl keygen --dedup FILE\n"
               "NAME.key gets the secret key (mode 0600), NAME.pub the public key (one base64 line):\n"
               "give NAME.pub to the other side (the receiver's authorized-devices file, or the\n"
               "device's receiver key).  Existing files are never overwritten.\n");
}

/* Also to be declared in ingestctl.h; repeated here so this file builds before it is. */
int cmd_keygen(int argc, char **argv);

int cmd_keygen(int argc, char **argv)
{
    int status = 1;
    ingest_secret_key k;
    char keypath[4096], pubpath[4096];
    memset(&k, 0, sizeof(k));
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        keygen_usage(stdout);
        return 0;
    }
    ingest_ctx *ctx = ingest_ctx_create(NULL);
    if (ctx == NULL) {
        fprintf(stderr, "ingestctl keygen: out of memory\n");
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "--dedup") == 0) {
        const int rc = ingest_dedup_key_generate_file(ctx, argv[2]);
        if (rc != 0) {
            fprintf(stderr, "ingestctl keygen: %s\n", ingest_ctx_errmsg(ctx));
            goto out;
        }
        printf("wrote dedup key %s (mode 0600); copy it to every device and the receiver\n", argv[2]);
        status = 0;
        goto out;
    }
    if (argc != 2 || argv[1][0] == '-' || argv[1][0] == '\0') {
        keygen_usage(stderr);
        status = 2;
        goto out;
    }
    if ((size_t)snprintf(keypath, sizeof(keypath), "%s.key", argv[1]) >= sizeof(keypath) ||
        (size_t)snprintf(pubpath, sizeof(pubpath), "%s.pub", argv[1]) >= sizeof(pubpath)) {
        fprintf(stderr, "ingestctl keygen: name too long\n");
        goto out;
    }
    /* Check both first so a refusal leaves nothing behind. */
    if (access(keypath, F_OK) == 0 || access(pubpath, F_OK) == 0) {
        fprintf(stderr, "ingestctl keygen: %s or %s already exists; refusing to overwrite\n", keypath, pubpath);
        goto out;
    }
    if (ingest_secret_key_generate(&k) != 0) {
        fprintf(stderr, "ingestctl keygen: key generation failed\n");
        goto out;
    }
    if (ingest_secret_key_save(ctx, keypath, &k) != 0) {
        fprintf(stderr, "ingestctl keygen: %s\n", ingest_ctx_errmsg(ctx));
        goto out;
    }
    if (ingest_public_key_save(ctx, pubpath, k.pk) != 0) {
        fprintf(stderr, "ingestctl keygen: %s\n", ingest_ctx_errmsg(ctx));
        unlink(keypath); /* we created it just now */
        goto out;
    }
    char b64[INGEST_PUBKEY_B64_BYTES];
    ingest_public_key_format(k.pk, b64);
    printf("wrote %s (secret, mode 0600) and %s\npublic key: %s\n", keypath, pubpath, b64);
    status = 0;
out:
    ingest_secret_key_wipe(&k);
    ingest_ctx_destroy(ctx);
    return status;
}
