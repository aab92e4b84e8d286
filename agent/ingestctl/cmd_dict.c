/* Placeholder until the module lands. */
#include "ingestctl.h"

#include <stdio.h>

int cmd_dict(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "ingestctl: not built yet\n");
    return 1;
}
