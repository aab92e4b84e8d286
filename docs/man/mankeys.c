/*
 * mankeys: writes ingest.yaml(5) from its template (stdin) to stdout,
 * replacing the lines "@AGENT_KEYS@" and "@RECEIVER_KEYS@" with one entry
 * per row of the programs' config tables (ingest_config_keys, the same
 * rows --help-config and the loader use), so the page cannot drift from
 * the code.  Built and run by `make man`.
 */
#include <ingest.h>
#include <ingest/config.h>
#include <stdio.h>
#include <string.h>

/* Text for roff: backslashes escaped; at a line start '.' and '\'' neutralised. */
static void roff(const char *s)
{
    if (*s == '.' || *s == '\'')
        fputs("\\&", stdout);
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            fputs("\\e", stdout);
        else if (*s == '-')
            fputs("\\-", stdout);
        else
            putchar(*s);
    }
}

static int key_entry(void *userdata, const ingest_config_key *k)
{
    (void)userdata;
    fputs(".TP\n.B ", stdout);
    roff(k->name);
    fputs("\n(", stdout);
    roff(k->type);
    if (k->required)
        fputs("; required", stdout);
    else if (k->default_value[0] != '\0') {
        fputs("; default ", stdout);
        roff(k->default_value);
    }
    if (k->bounds[0] != '\0') {
        fputs("; ", stdout);
        roff(k->bounds);
    }
    fputs(")\n.br\n", stdout);
    roff(k->description);
    putchar('\n');
    return 0;
}

int main(void)
{
    char line[4096];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        if (strcmp(line, "@AGENT_KEYS@\n") == 0) {
            if (ingest_config_keys(INGEST_CONFIG_AGENT, key_entry, NULL) != 0)
                return 1;
        } else if (strcmp(line, "@RECEIVER_KEYS@\n") == 0) {
            if (ingest_config_keys(INGEST_CONFIG_RECEIVER, key_entry, NULL) != 0)
                return 1;
        } else {
            fputs(line, stdout);
        }
    }
    return ferror(stdout) || fflush(stdout) != 0 ? 1 : 0;
}
