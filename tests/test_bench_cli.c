/* test_bench_cli.c — `dynapipe bench layer` end to end on tiny shapes: it
 * prints the timing lines with the FLOP count the formula gives, and bad
 * flags exit 2 with a one-line error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Run the CLI with args, after the command prefix env (e.g. "env -u X ");
 * capture stdout+stderr into buf; return exit code. */
static int run_cli_env(const char *env, const char *args, char *buf, size_t cap)
{
    const char *cli = getenv("DYN_CLI");
    assert_non_null(cli);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s'%s' %s 2>&1", env, cli, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(buf, 1, cap - 1, p);
    buf[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_cli(const char *args, char *buf, size_t cap) { return run_cli_env("", args, buf, cap); }

static void test_bench_layer_gpt_runs(void **state)
{
    (void)state;
    char out[4096];
    int rc = run_cli("bench layer --model gpt --hidden 32 --heads 4 --batch 2 --seq 16 --repeat 1",
                     out, sizeof(out));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "forward+backward"));
    assert_non_null(strstr(out, "sgemm rate"));
    /* 3 x (24*2*16*32^2 + 4*2*16^2*32) = 2555904 FLOP = 0.00 GFLOP printed;
     * check the T5 path prints its encoder length instead. */
    rc = run_cli("bench layer --model t5 --hidden 32 --heads 4 --batch 1 --seq 8 --enc-seq 12 --repeat 1",
                 out, sizeof(out));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "enc-seq 12"));
}

/* With no wait policy in the environment, `bench` re-executes itself once
 * with OMP_WAIT_POLICY=PASSIVE (threads.h, dyn_threads_init): the report
 * says so, comes out once, and the OpenMP build of OpenBLAS is loaded. */
static void test_bench_layer_sets_wait_policy(void **state)
{
    (void)state;
    char out[4096];
    int rc = run_cli("bench layer --model gpt --hidden 32 --heads 4 --batch 1 --seq 8 --repeat 1"
                     " --threads 2",
                     out, sizeof(out));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "OpenBLAS openmp"));
    /* ctest sets PASSIVE itself; check the re-execution path without it. */
    rc = run_cli_env("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ",
                     "bench layer --model gpt --hidden 32 --heads 4 --batch 1 --seq 8 --repeat 1", out,
                     sizeof(out));
    assert_int_equal(rc, 0);
    const char *first = strstr(out, "OMP_WAIT_POLICY PASSIVE");
    assert_non_null(first);
    assert_null(strstr(first + 1, "OMP_WAIT_POLICY")); /* printed once */
    assert_null(strstr(strstr(out, "model gpt") + 1, "model gpt"));
}

static void test_bench_layer_bad_flags(void **state)
{
    (void)state;
    char out[4096];
    assert_int_equal(run_cli("bench layer --model gpt --hidden 30 --heads 4 --batch 1 --seq 8", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "not divisible"));
    assert_int_equal(run_cli("bench layer --model bert --hidden 32 --heads 4 --batch 1 --seq 8", out, sizeof(out)), 2);
    assert_int_equal(run_cli("bench layer --model gpt --hidden 32 --heads 4 --batch 0 --seq 8", out, sizeof(out)), 2);
    assert_int_equal(run_cli("bench layer --model gpt --hidden 32", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "required"));
    assert_int_equal(run_cli("bench nothing", out, sizeof(out)), 2);
    assert_int_equal(run_cli("bench layer --help", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "--enc-seq"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_layer_gpt_runs),
        cmocka_unit_test(test_bench_layer_bad_flags),
        cmocka_unit_test(test_bench_layer_sets_wait_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
