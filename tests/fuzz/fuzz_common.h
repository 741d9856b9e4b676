/* fuzz_common.h — shared by the libFuzzer harnesses (the fuzz_NAME.c files here, built and
 * run by scripts/fuzz.sh): the readers under test take a path, so each input
 * is written to one scratch file per process first; and every error message
 * must be one line of printable text (the project's promise for bad input). */
#ifndef DYN_FUZZ_COMMON_H
#define DYN_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynapipe/common.h"

/* Write data to this process's scratch file; its path (static storage). */
static const char *fuzz_scratch(const uint8_t *data, size_t size, const char *suffix)
{
    static char path[256];
    snprintf(path, sizeof path, "/tmp/dyn_fuzz_%ld%s", (long)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    if (size > 0 && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    return path;
}

/* A failed read must leave one line of printable text. */
static void fuzz_check_message(dyn_status st, const dyn_error *err)
{
    if (st == DYN_OK) return;
    if (err->msg[0] == '\0') abort();
    for (const char *p = err->msg; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f) abort();
}

#endif
