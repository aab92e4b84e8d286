/* ingestctl: keys, the daemon's status, index checks, dictionaries, chunking and the benchmark hooks. */
#include "ingestctl.h"
#include "../common/prog.h"

#include <ingest.h>
#include <stdio.h>
#include <string.h>

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
};

static const struct command bench_commands[] = {
    { "chunk", cmd_bench_chunk, "bench chunk [--size BYTES] [--level N] [FILE]" },
    { "index", cmd_bench_index, "bench index [--entries N] [--dir DIR]" },
    { "scan", cmd_bench_scan, "bench scan DIR" },
    { "pipeline", cmd_bench_pipeline, "bench pipeline [--transport tcp] [--evolve] DIR" },
    { "fleet", cmd_bench_fleet, "bench fleet --devices N [--size SIZE] [--shared PCT] [--stagger DURATION] [--random] [--keep] [DIR]" },
    { "stages", cmd_bench_stages, "bench stages [--level N] [--runs N] [--batch-files N] [--batch-bytes SIZE] [--land DIR] TREE" },
    { "crypto", cmd_bench_crypto, "bench crypto [--size BYTES] [--small BYTES] [--runs N]" },
    { "catalog", cmd_bench_catalog, "bench catalog [--files N] [--runs N] [--per-batch N] [--keep] DIR" },
    { "gen", cmd_bench_gen, "bench gen [--profile default|gateway|small|empty] [--size BYTES] [--files N] [--seed N] [--evolve] DIR (--help)" },
};

static int cmd_bench(int argc, char **argv);

static const struct command commands[] = {
    { "chunk", cmd_chunk, "chunk [--min N --avg N --max N] FILE..." },
    { "dict", cmd_dict,
      "dict train --out FILE [--size BYTES] [--force] [--from LIST] [--part LIST]... [SAMPLE...] | dict info FILE | dict test [--level N] [--from LIST] FILE SAMPLE..." },
    { "index", cmd_index, "index check DIR [--bronze DIR]" },
    { "catalog", cmd_catalog, "catalog --bronze DIR [--device D] [--prefix P] [--since T] [--until T] [--format jsonl|csv|table|paths] [--after CURSOR | --cursor-file F] (--help)" },
    { "verify", cmd_verify, "verify (--config RECEIVER.yaml | --bronze DIR --dedup-key FILE) [--device D] [--since T] [--threads N] (--help)" },
    { "keygen", cmd_keygen, "keygen NAME | keygen --dedup FILE" },
    { "status", cmd_status, "status [--json] [--socket PATH | --config AGENT.yaml]" },
    { "bench", cmd_bench, "bench chunk|index|scan|pipeline|fleet|stages|crypto|catalog|gen ..." },
};

static void usage(FILE *f)
{
    fprintf(f, "usage: ingestctl COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(commands[i].name, "bench") != 0)
            fprintf(f, "  ingestctl %s\n", commands[i].usage);
    for (size_t i = 0; i < sizeof(bench_commands) / sizeof(bench_commands[0]); i++)
        fprintf(f, "  ingestctl %s\n", bench_commands[i].usage);
    fprintf(f, "  ingestctl --version\n");
}

static int cmd_bench(int argc, char **argv)
{
    if (argc >= 2)
        for (size_t i = 0; i < sizeof(bench_commands) / sizeof(bench_commands[0]); i++)
            if (strcmp(argv[1], bench_commands[i].name) == 0)
                return bench_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "ingestctl bench: expected one of: chunk, index, gen, scan, pipeline, fleet, stages, crypto, catalog\n");
    return 2;
}

int main(int argc, char **argv)
{
    prog_sigbus_guard("ingestctl: SIGBUS: a state file mapped in memory is shorter than its pages (a data.mdb cut "
                      "short?): `ingestctl catalog --rebuild` makes the catalog again; the receiver makes its chunk "
                      "index again at its next start, or with --rebuild-index",
                      NULL);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("ingestctl %s\n", ingest_version_string());
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "ingestctl: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
