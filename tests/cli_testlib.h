/* cli_testlib.h — running the built `dynapipe` (env DYN_CLI) from a test as
 * a user would: a scratch folder, a subcommand run with stdout and stderr
 * captured to files, files read back, and the error contract checked (exit
 * code, exactly one stderr line "dynapipe <cmd>: ...", naming the problem).
 * Header-only: each test file is its own executable. Include after cmocka.h. */
#ifndef DYN_TESTS_CLI_TESTLIB_H
#define DYN_TESTS_CLI_TESTLIB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/util.h" /* defines: dyn_file_read_all, dyn_file_write_atomic */

static char dir[] = "/tmp/dyn_cli_test_XXXXXX"; /* the scratch folder */
static char out_path[600], err_path[600];       /* captured stdout, stderr */

/* Make the scratch folder; 0 or -1 (a cmocka group setup). */
static int cli_setup_dir(void)
{
    if (mkdtemp(dir) == NULL) return -1;
    snprintf(out_path, sizeof out_path, "%s/stdout", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr", dir);
    return 0;
}

static int cli_teardown_dir(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Run `$DYN_CLI <sub> <args>` (args are shell words); returns its exit code. */
static int cli_run(const char *sub, const char *args)
{
    const char *cli = getenv("DYN_CLI");
    assert_non_null(cli);
    char cmd[8192];
    /* under timeout: `train` starts mpirun, and a hung rank must end the
     * test, not the CI run */
    int w = snprintf(cmd, sizeof cmd, "timeout 300 '%s' %s %s >'%s' 2>'%s'", cli, sub, args, out_path, err_path);
    assert_true(w > 0 && (size_t)w < sizeof cmd);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* The environment of every `dynapipe train` a test starts: Open MPI's
 * consent to run as root (CI runs as root), and no LeakSanitizer report
 * (Open MPI's own allocations are not ours). */
#define CLI_TRAIN_ENV "ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"

/* Run `$DYN_CLI train <args>` in CLI_TRAIN_ENV, under timeout (a hung rank
 * ends the test); returns its exit code. */
static inline int cli_train(const char *args)
{
    const char *cli = getenv("DYN_CLI");
    assert_non_null(cli);
    char cmd[12288];
    int w = snprintf(cmd, sizeof cmd, CLI_TRAIN_ENV " timeout 300 '%s' train %s >'%s' 2>'%s'", cli, args, out_path,
                     err_path);
    assert_true(w > 0 && (size_t)w < sizeof cmd);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* A file's whole text (the caller frees it). */
static char *slurp(const char *path)
{
    char *data = NULL;
    assert_int_equal(dyn_file_read_all(path, &data, NULL, NULL), DYN_OK);
    return data;
}

/* Write text to <dir>/<name>; its path goes to path[cap]. */
static inline void write_file(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    assert_int_equal(dyn_file_write_atomic(path, text, strlen(text), NULL), DYN_OK);
}

/* The progress line that --machine auto prints while it measures (the
 * first run of a shape on a cold cache, whichever test that is): not an
 * error line, so the one-line check reads past it. */
#define CLI_MEASURING_LINE "measuring this machine for the cost model"

/* The last run of `dynapipe <sub>` exited with `want` and wrote exactly one
 * line "dynapipe <sub>: ..." containing needle to stderr (after the
 * measuring line, when the run measured this machine first). */
static void cli_assert_one_line_error(const char *sub, const char *args, int rc, int want,
                                      const char *needle)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "dynapipe %s: ", sub);
    char *whole = slurp(err_path);
    size_t skip = 0; /* an offset, not a pointer: GCC 12 takes one for dangling (below) */
    if (strncmp(whole, CLI_MEASURING_LINE, strlen(CLI_MEASURING_LINE)) == 0)
        while (whole[skip] != '\0' && whole[skip++] != '\n') {}
    if (skip > 0) memmove(whole, whole + skip, strlen(whole + skip) + 1);
    char *err = whole;
    if (rc != want || strncmp(err, prefix, strlen(prefix)) != 0 || strstr(err, needle) == NULL)
        fprintf(stderr, "args: %s\nexit %d (want %d), stderr: %s\n", args, rc, want, err);
    assert_int_equal(rc, want);
    assert_memory_equal(err, prefix, strlen(prefix));
    /* A flag, not assert_non_null(strstr(...)): GCC 12 takes the pointer
     * for a dangling one into slurp's frame once both are inlined. */
    int has_needle = strstr(err, needle) != NULL;
    assert_true(has_needle);
    size_t len = strlen(err);
    assert_true(len > 0 && strchr(err, '\n') == err + len - 1); /* exactly one line */
    free(whole);
}

#endif
