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
    /* a Llama block (GQA, SwiGLU, rotary embedding) */
    rc = run_cli("bench layer --model llama --hidden 64 --heads 4 --batch 2 --seq 16 --repeat 1", out, sizeof(out));
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "model llama hidden 64 heads 4"));
    assert_non_null(strstr(out, "forward+backward"));
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
    assert_non_null(strstr(out, "gpt, t5 or llama"));
    /* rotary pairs need an even head dim; no encoder for a Llama */
    assert_int_equal(run_cli("bench layer --model llama --hidden 36 --heads 4 --batch 1 --seq 8", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "even head dim"));
    assert_int_equal(run_cli("bench layer --model llama --hidden 32 --heads 4 --batch 1 --seq 8 --enc-seq 4", out,
                             sizeof(out)),
                     2);
    assert_non_null(strstr(out, "t5 only"));
    assert_int_equal(run_cli("bench layer --model gpt --hidden 32 --heads 4 --batch 0 --seq 8", out, sizeof(out)), 2);
    assert_int_equal(run_cli("bench layer --model gpt --hidden 32", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "required"));
    assert_int_equal(run_cli("bench nothing", out, sizeof(out)), 2);
    assert_int_equal(run_cli("bench layer --help", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "--enc-seq"));
}

/* Every benchmark program (bench/bench_*.c, built beside the CLI) answers
 * --help with its usage and exit 0 instead of starting to measure, and
 * refuses an unknown option with exit 2. */
static void test_bench_programs_help(void **state)
{
    (void)state;
    static const char *const names[] = {"bench_attention", "bench_calibrate", "bench_corpus", "bench_cost",
                                        "bench_layer",     "bench_learn_builtin", "bench_model", "bench_plan",
                                        "bench_sched",     "bench_sim",       "bench_split", "bench_stage",
                                        "bench_threads"};
    const char *cli = getenv("DYN_CLI");
    assert_non_null(cli);
    const char *slash = strrchr(cli, '/');
    assert_non_null(slash);
    int dlen = (int)(slash - cli);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char cmd[1200], buf[2048];
        snprintf(cmd, sizeof cmd, "timeout 20 '%.*s/%s' --help 2>&1", dlen, cli, names[i]);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        size_t n = fread(buf, 1, sizeof buf - 1, p);
        buf[n] = '\0';
        int st = pclose(p);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || strncmp(buf, "usage: ", 7) != 0)
            fail_msg("%s --help: exit %d, output '%s'", names[i], WIFEXITED(st) ? WEXITSTATUS(st) : -1, buf);
        snprintf(cmd, sizeof cmd, "timeout 20 '%.*s/%s' --no-such-flag >/dev/null 2>&1", dlen, cli, names[i]);
        st = system(cmd);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_layer_gpt_runs),
        cmocka_unit_test(test_bench_layer_bad_flags),
        cmocka_unit_test(test_bench_programs_help),
        cmocka_unit_test(test_bench_layer_sets_wait_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
