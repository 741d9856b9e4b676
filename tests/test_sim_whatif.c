/* test_sim_whatif.c — the what-if micro-batch file: a good file fills the
 * costs it says; every malformed case is rejected with the right path:line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynapipe/sim.h" /* defines: dyn_whatif_*, dyn_stage_costs_free */

static void test_good_file(void **state)
{
    (void)state;
    const char *text =
        "# two micro-batches, two stages\n"
        "\n"
        "mb\tstage\tfwd_ms\tbwd_ms\tstored_mb  tokens states_mb\n"
        "0\t0\t1.5\t3\t10 100 50\n"
        "0\t1\t1.0\t2\t11 100 60\n"
        "  # a comment between rows\n"
        "1\t1\t2.0\t4.5\t12 30 60\r\n"
        "1\t0\t2.5\t5\t13 30 50\n";
    dyn_stage_costs c;
    int64_t tokens = -1;
    dyn_error err;
    assert_int_equal(dyn_whatif_parse("x.tsv", text, &c, &tokens, &err), DYN_OK);
    assert_int_equal(c.n_microbatches, 2);
    assert_int_equal(c.n_stages, 2);
    assert_true(c.fwd_ms[0] == 1.5 && c.fwd_ms[1] == 1.0 && c.fwd_ms[2] == 2.5 && c.fwd_ms[3] == 2.0);
    assert_true(c.bwd_ms[3] == 4.5);
    assert_true(c.bwd_input_ms[3] == 2.25 && c.bwd_weight_ms[3] == 2.25); /* default halves */
    assert_true(c.stored_mb[2] == 13 && c.peak_mb[2] == 0 && c.send_mb[2] == 0);
    assert_true(c.states_mb[0] == 50 && c.states_mb[1] == 60);
    assert_int_equal(tokens, 130);
    dyn_stage_costs_free(&c);

    const char *split = "mb stage fwd_ms bwd_ms bwd_input_ms bwd_weight_ms\n0 0 1 3 1 2\n";
    assert_int_equal(dyn_whatif_parse("y", split, &c, &tokens, &err), DYN_OK);
    assert_true(c.bwd_input_ms[0] == 1 && c.bwd_weight_ms[0] == 2);
    assert_int_equal(tokens, 0);
    dyn_stage_costs_free(&c);
}

static void expect_error(const char *text, const char *msg)
{
    dyn_stage_costs c;
    int64_t tokens;
    dyn_error err;
    memset(&c, 0xab, sizeof c);
    dyn_status st = dyn_whatif_parse("f.tsv", text, &c, &tokens, &err);
    if (st == DYN_OK || strstr(err.msg, msg) == NULL)
        fprintf(stderr, "input:\n%s\nwanted '%s', got %d '%s'\n", text, msg, st, err.msg);
    assert_int_equal(st, DYN_ERR_PARSE);
    assert_non_null(strstr(err.msg, msg));
    assert_null(c.fwd_ms); /* nothing left allocated */
}

static void test_malformed_files(void **state)
{
    (void)state;
    expect_error("", "f.tsv:0: no header line");
    expect_error("# only comments\n", "f.tsv:1: no header line");
    expect_error("mb stage fwd_ms\n0 0 1\n", "f.tsv:1: header lacks column 'bwd_ms'");
    expect_error("mb stage fwd_ms bwd_ms colour\n", "f.tsv:1: unknown column 'colour'");
    expect_error("mb stage fwd_ms bwd_ms mb\n", "f.tsv:1: column 'mb' appears twice");
    expect_error("mb stage fwd_ms bwd_ms bwd_input_ms\n", "f.tsv:1: bwd_input_ms and bwd_weight_ms");
    expect_error("mb stage fwd_ms bwd_ms\n", "f.tsv:1: no micro-batch rows");
    expect_error("mb stage fwd_ms bwd_ms\n0 0 1\n", "f.tsv:2: fewer fields than the header's 4");
    expect_error("mb stage fwd_ms bwd_ms\n0 0 1 2 3\n", "f.tsv:2: more fields than the header's 4");
    expect_error("mb stage fwd_ms bwd_ms\n\n0 0 1 abc\n", "f.tsv:3: bwd_ms 'abc' is not a number");
    expect_error("mb stage fwd_ms bwd_ms\n0 0 1 2x\n", "f.tsv:2: bwd_ms '2x' is not a number");
    expect_error("mb stage fwd_ms bwd_ms\n0 0 -1 2\n", "f.tsv:2: fwd_ms is negative");
    expect_error("mb stage fwd_ms bwd_ms\n0.5 0 1 2\n", "f.tsv:2: mb '0.5' is not a whole number");
    expect_error("mb stage fwd_ms bwd_ms\n0 99999 1 2\n", "f.tsv:2: stage 99999 is above");
    expect_error("mb stage fwd_ms bwd_ms\n0 0 nan 2\n", "f.tsv:2: fwd_ms 'nan' is not a number");
    /* Finite but so large that sums along the schedule overflow. */
    expect_error("mb stage fwd_ms bwd_ms\n0 0 1e308 2\n", "f.tsv:2: fwd_ms 1e+308 is above the limit");
    expect_error("mb stage fwd_ms bwd_ms peak_mb\n0 0 1 2 1e300\n", "f.tsv:2: peak_mb 1e+300 is above the limit");
    expect_error("mb stage fwd_ms bwd_ms\n0 0 1 2\n0 0 1 2\n",
                 "f.tsv:3: micro-batch 0 stage 0 already given at line 2");
    expect_error("mb stage fwd_ms bwd_ms\n0 0 1 2\n1 1 1 2\n", "f.tsv: micro-batch 0 stage 1 is missing");
    expect_error("mb stage fwd_ms bwd_ms states_mb\n0 0 1 2 5\n1 0 1 2 6\n",
                 "f.tsv:3: states_mb of stage 0 differs from line 2");
    expect_error("mb stage fwd_ms bwd_ms tokens\n0 0 1 2 5\n0 1 1 2 6\n",
                 "f.tsv:3: tokens of micro-batch 0 differ from line 2");
}

static void test_load_from_file(void **state)
{
    (void)state;
    char path[] = "/tmp/dyn_test_whatif_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "mb stage fwd_ms bwd_ms\n0 0 1 2\n0 1 x 2\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    dyn_stage_costs c;
    int64_t tokens;
    dyn_error err;
    assert_int_equal(dyn_whatif_load(path, &c, &tokens, &err), DYN_ERR_PARSE);
    char want[128];
    snprintf(want, sizeof want, "%s:3: fwd_ms 'x' is not a number", path);
    assert_string_equal(err.msg, want);
    unlink(path);
    assert_int_equal(dyn_whatif_load(path, &c, &tokens, &err), DYN_ERR_IO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_file),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_load_from_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
