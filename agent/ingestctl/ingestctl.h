/* ingestctl: one function per subcommand, each in its own file. */
#ifndef INGESTCTL_H
#define INGESTCTL_H

/* Each returns the process exit status: 0 ok, 1 failure, 2 usage error. */
int cmd_chunk(int argc, char **argv);       /* cmd_chunk.c */
int cmd_dict(int argc, char **argv);        /* cmd_dict.c */
int cmd_index(int argc, char **argv);       /* cmd_index.c */
int cmd_bench_chunk(int argc, char **argv); /* bench_chunk.c */
int cmd_bench_index(int argc, char **argv); /* bench_index.c */
int cmd_bench_gen(int argc, char **argv);   /* bench_gen.c */
int cmd_keygen(int argc, char **argv);      /* cmd_keygen.c */
int cmd_status(int argc, char **argv);      /* cmd_status.c */
int cmd_bench_scan(int argc, char **argv);  /* bench_scan.c */
int cmd_bench_pipeline(int argc, char **argv); /* bench_pipeline.c */

#endif
