/* bench_args.h — the one thing every benchmark program does with its
 * arguments before anything else: --help / -h prints its usage and exits 0,
 * and any other option starting with '-' that it does not know is refused
 * (exit 2), so that a mistyped flag never starts a long measurement. */
#ifndef DYN_BENCH_ARGS_H
#define DYN_BENCH_ARGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* usage: the text to print (one or more lines, without the final newline);
 * known: NULL-terminated list of the options the program accepts (NULL:
 * none). Returns only if the arguments may go on to the program. */
static inline void bench_args_check(int argc, char **argv, const char *usage, const char *const *known)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s\n", usage);
            exit(0);
        }
        if (argv[i][0] != '-' || (argv[i][1] >= '0' && argv[i][1] <= '9')) continue;
        int ok = 0;
        for (const char *const *k = known; k && *k; k++) ok |= strcmp(argv[i], *k) == 0;
        if (!ok) {
            fprintf(stderr, "%s: unknown option '%s' (try --help)\n", argv[0], argv[i]);
            exit(2);
        }
    }
}

#endif
