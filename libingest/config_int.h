#ifndef INGEST_CONFIG_INT_H
#define INGEST_CONFIG_INT_H

/*
 * Inside the YAML configuration loader of ingest-agent and ingest-receiver:
 * the definitions its parts share (config.c: the public loaders and the key
 * reference; config_schema.c: validators and the two key tables;
 * config_parse.c: rows, instances and the event walk; config_check.c: the
 * cross-key checks).
 *
 *
 * Each program has one table of rows (cfg_row): dotted key name, type,
 * bounds, default, offset of the field in the program's plain struct and a
 * description.  The loader walks libyaml's event stream (never a document
 * tree), so nesting depth, value sizes and list lengths are checked as the
 * events arrive, and anchors, aliases and tags are refused outright.
 *
 * A list of strings (T_STRLIST: `sources[].include`) is one row whose
 * field is a char ** with a count beside it (count_off); row->max bounds
 * the entries and row->check runs on each entry.
 *
 * A mapping of names to scalars (T_MAP: `kafka.properties`) is stored as
 * a T_STRLIST is, each entry "name=value"; row->check runs on each.
 *
 * A list of mappings (the agent's `sources`) is one row of type T_LIST;
 * the keys of its entries are rows named "sources[].KEY" whose offsets are
 * into the entry struct, so adding a per-source key is adding one row.
 *
 * Defaults are written as YAML text and go through the same converter as
 * the file's values, so the --help listing shows exactly what is applied.
 */
#include "internal.h"
#include "ingest/config.h"
#include "ingest/filter.h"
#include "ingest/index.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

enum { T_STRING, T_PATH, T_BOOL, T_INT, T_SIZE, T_DURATION, T_ENUM, T_LIST, T_STRLIST, T_RATE, T_MAP };

#define F_REQUIRED 1u
#define F_AUTO 2u /* a T_PATH that also takes the word "auto" (kept as it is, not resolved) */

#define CFG_NAME_MAX 256 /* longest dotted key name we track */
#define CFG_DIR_MAX 4096
#define CFG_SUN_PATH_MAX 107 /* sizeof(sockaddr_un.sun_path) - 1 on Linux */

typedef struct cfg_enum {
    const char *name;
    int value;
} cfg_enum;

typedef struct cfg_mark {
    size_t line, col; /* 1-based; line 0 = none */
} cfg_mark;

typedef struct cfg_parser cfg_parser;
typedef struct cfg_row cfg_row;
typedef struct cfg_inst cfg_inst;

/* Extra validation of a string value (already stored); 0 or an error. */
typedef int (*cfg_check_fn)(cfg_parser *p, const char *shown, const char *value, cfg_mark at);
/* Cross-key checks once an object (the whole file, one list entry) is read. */
typedef int (*cfg_finish_fn)(cfg_parser *p, cfg_inst *inst);

struct cfg_row {
    const char *name;
    int type;
    unsigned flags;
    const char *def; /* YAML text of the default; NULL: none (required, or set by finish) */
    const char *def_doc; /* shown as the default when def is NULL and the key is optional */
    size_t off, width;
    int64_t min, max; /* T_INT/T_SIZE/T_DURATION/T_RATE bounds; T_LIST/T_STRLIST entry count */
    const cfg_enum *enums; /* T_ENUM, NULL-terminated */
    cfg_check_fn check;    /* T_STRING/T_PATH; T_STRLIST: each entry */
    size_t count_off, elem_size; /* T_LIST (count_off also T_STRLIST) */
    cfg_finish_fn finish_entry;  /* T_LIST */
    const char *desc;
};

typedef struct cfg_schema {
    const cfg_row *rows;
    size_t nrows;
    cfg_finish_fn finish;
} cfg_schema;

struct cfg_parser {
    ingest_ctx *ctx;
    const cfg_schema *schema;
    const char *file;
    const unsigned char *data;
    size_t len;
    char *basedir;
    yaml_parser_t yp;
    yaml_event_t ev;
    bool yp_init, have_ev;
    int depth;
};

/* One object being filled: the top-level struct or one list entry. */
struct cfg_inst {
    const char *prefix; /* row-name prefix: "" or "sources[]." */
    char shown[CFG_NAME_MAX + 96]; /* prefix in messages: "" or "sources[2]." */
    void *base;
    cfg_mark *seen;     /* per row: where it was set */
    char **sections;    /* section names already opened ("batch.") */
    size_t nsections;
    cfg_mark start;
};

#define FIELD(S, m) .off = offsetof(S, m), .width = sizeof(((S *)0)->m)

/* Units of the key tables' bounds and the checks. */
#define KiB 1024ll
#define MiB (1024ll * 1024)
#define GiB (1024ll * 1024 * 1024)
#define TiB (1024ll * GiB)
#define SEC ((int64_t)1000)
#define HOUR (3600 * SEC)

/* Shared by the parts of the loader (defined in the part their section names). */
int cfg__perr(cfg_parser *p, cfg_mark at, const char *fmt, ...) INGEST__PRINTF(3, 4);
bool cfg__valid_name(const char *s);
int cfg__parse_window(const char *s, int *start, int *end);
cfg_mark cfg__mark_of(const cfg_parser *p, const cfg_inst *inst, const char *name);
void cfg__free_obj(ingest_ctx *ctx, const cfg_schema *schema, const char *prefix, void *base);
char *cfg__resolve_path(cfg_parser *p, const char *v);
const char *cfg__type_name(int type);
int cfg__load_mem(ingest_ctx *ctx, const cfg_schema *schema, const char *name, const void *data, size_t len, void *obj);
int cfg__read_file(ingest_ctx *ctx, const char *path, char **out, size_t *outlen);
int cfg__finish_source(cfg_parser *p, cfg_inst *inst);
int cfg__finish_receiver(cfg_parser *p, cfg_inst *inst);
int cfg__finish_agent(cfg_parser *p, cfg_inst *inst);
extern const cfg_schema cfg__agent_schema;
extern const cfg_schema cfg__receiver_schema;

#endif
