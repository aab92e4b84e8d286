/* ingestctl: one function per subcommand, each in its own file. */
#ifndef INGESTCTL_H
#define INGESTCTL_H

#include <stdint.h>

/* Each returns the process exit status: 0 ok, 1 failure, 2 usage error. */
int cmd_chunk(int argc, char **argv);       /* cmd_chunk.c */
int cmd_dict(int argc, char **argv);        /* cmd_dict.c */
int cmd_index(int argc, char **argv);       /* cmd_index.c */
int cmd_catalog(int argc, char **argv);     /* cmd_catalog.c */
int cmd_verify(int argc, char **argv);      /* cmd_catalog.c */
int cmd_bench_catalog(int argc, char **argv); /* bench_catalog.c */
int cmd_bench_chunk(int argc, char **argv); /* bench_chunk.c */
int cmd_bench_index(int argc, char **argv); /* bench_index.c */
int cmd_bench_gen(int argc, char **argv);   /* bench_gen.c */
int cmd_keygen(int argc, char **argv);      /* cmd_keygen.c */
int cmd_status(int argc, char **argv);      /* cmd_status.c */
int cmd_bench_scan(int argc, char **argv);  /* bench_scan.c */
int cmd_bench_pipeline(int argc, char **argv); /* bench_pipeline.c */
int cmd_bench_fleet(int argc, char **argv);    /* bench_fleet.c */
int cmd_bench_stages(int argc, char **argv);   /* bench_stages.c */
int cmd_bench_crypto(int argc, char **argv);   /* bench_crypto.c */

/*
 * bench_gen.c: the "sensors" tree of `bench gen --size SIZE --seed SEED ROOT`
 * (generation 0), the number of files made into *files; 0 or -1 after saying
 * why on stderr.  bench_parse_size: a size as in the configuration
 * (ingest_parse_size: a whole number, then B, KiB.., kB..), or with K, M or G
 * for KiB, MiB, GiB; *ok set to 0 when it does not parse (said on stderr).
 */
int bench_gen_tree(const char *root, uint64_t size, uint64_t seed, unsigned *files);

/*
 * bench_gen_gateway.c: the "gateway" tree of SIZE bytes (gen 0) or its
 * generation gen, evolved in place; the "small" tree of nfiles JSON events
 * (gen 0) or its generation gen.  *files: files made (gen 0) or changes
 * (gen > 0).  0, or -1 after saying why on stderr.
 */
int bench_gen_gateway(const char *root, uint64_t size, uint64_t seed, unsigned gen, unsigned *files);
int bench_gen_small(const char *root, uint64_t nfiles, uint64_t seed, unsigned gen, unsigned *files);
uint64_t bench_parse_size(const char *s, int *ok);

#endif
