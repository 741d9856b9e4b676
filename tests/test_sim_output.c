/* test_sim_output.c — the trace JSON parses (cJSON) and has one complete
 * event per instruction with its micro-batch and stage, plus memory counter
 * events; the SVG has one box per compute instruction; both are written
 * atomically and refuse a plan other than the one simulated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dynapipe/sim.h" /* defines: dyn_sim_* */
#include "sim_testlib.h"  /* defines: tplan_*, tcosts_uniform */
#include "util/util.h"    /* defines: dyn_file_read_all */

static int count_substr(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static void test_trace_has_one_event_per_instruction(void **state)
{
    (void)state;
    tplan t;
    tplan_1f1b(&t, 4, 6, 1 << 20);
    dyn_stage_costs c;
    tcosts_uniform(&c, 6, 4, 1.0, 2.0);
    for (int32_t i = 0; i < 24; i++) c.stored_mb[i] = 3.0;
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    dyn_sim_options o = {0.01, 5.0, 6000, 1, 0};
    const dyn_sim_result *res;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &o, &res, &err), DYN_OK);
    char path[] = "/tmp/dyn_test_trace_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(dyn_sim_write_trace(sim, &t.p, path, &err), DYN_OK);
    char *text = NULL;
    assert_int_equal(dyn_file_read_all(path, &text, NULL, &err), DYN_OK);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    cJSON *events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
    assert_true(cJSON_IsArray(events));
    int complete = 0, counters = 0, per_rank[4] = {0};
    double max_mem = 0;
    cJSON *ev;
    cJSON_ArrayForEach(ev, events) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ev, "ph"));
        assert_non_null(ph);
        if (strcmp(ph, "X") == 0) {
            complete++;
            int tid = cJSON_GetObjectItemCaseSensitive(ev, "tid")->valueint;
            assert_true(tid >= 0 && tid < 4);
            per_rank[tid]++;
            cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
            int i = cJSON_GetObjectItemCaseSensitive(args, "instr")->valueint;
            const dyn_instr *in = &t.p.ranks[tid].instrs[i];
            assert_int_equal(cJSON_GetObjectItemCaseSensitive(args, "microbatch")->valueint, in->microbatch);
            assert_int_equal(cJSON_GetObjectItemCaseSensitive(args, "stage")->valueint, in->stage);
            /* times are in microseconds */
            double ts = cJSON_GetObjectItemCaseSensitive(ev, "ts")->valuedouble;
            assert_true(fabs(ts - 1e3 * res->events[res->rank_offset[tid] + i].start_ms) < 1e-2);
        } else if (strcmp(ph, "C") == 0) {
            counters++;
            double v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "args"), "MB")->valuedouble;
            if (v > max_mem) max_mem = v;
        }
    }
    assert_int_equal(complete, res->n_instrs);
    for (int r = 0; r < 4; r++) assert_int_equal(per_rank[r], t.p.ranks[r].n_instrs);
    assert_true(counters >= res->n_instrs);
    assert_true(fabs(max_mem - res->max_peak_mb) < 1e-2);
    cJSON_Delete(root);
    free(text);
    unlink(path);
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

static void test_svg_has_one_box_per_compute_instruction(void **state)
{
    (void)state;
    tplan t;
    tplan_1f1b(&t, 3, 5, 1024);
    dyn_stage_costs c;
    tcosts_uniform(&c, 5, 3, 1.0, 2.0);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    dyn_sim_options o = {0.0, 0.0, 0, 0, 0};
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &o, NULL, &err), DYN_OK);
    char path[] = "/tmp/dyn_test_svg_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(dyn_sim_write_svg(sim, &t.p, "1F1B <S=3>", path, &err), DYN_OK);
    char *svg = NULL;
    assert_int_equal(dyn_file_read_all(path, &svg, NULL, &err), DYN_OK);
    assert_true(strncmp(svg, "<svg", 4) == 0);
    assert_non_null(strstr(svg, "</svg>"));
    assert_non_null(strstr(svg, "1F1B &lt;S=3&gt;")); /* title escaped */
    /* S * M forwards and S * M backwards */
    assert_int_equal(count_substr(svg, "class=\"instr\""), 2 * 3 * 5);
    assert_int_equal(count_substr(svg, "data-op=\"F\""), 15);
    assert_int_equal(count_substr(svg, "data-op=\"B\""), 15);
    assert_int_equal(count_substr(svg, "data-mb=\"4\""), 6);
    assert_non_null(strstr(svg, "time (ms)"));
    assert_non_null(strstr(svg, "rank 2"));
    free(svg);
    unlink(path);

    /* Another plan than the one simulated is refused and nothing is written. */
    tplan other;
    tplan_1f1b(&other, 3, 4, 1024);
    char path2[] = "/tmp/dyn_test_svg_none_XXXXXX";
    fd = mkstemp(path2);
    close(fd);
    unlink(path2);
    assert_int_equal(dyn_sim_write_svg(sim, &other.p, NULL, path2, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(access(path2, F_OK), -1);
    /* An unwritable path fails cleanly. */
    assert_int_equal(dyn_sim_write_trace(sim, &t.p, "/nonexistent-dir/x.json", &err), DYN_ERR_IO);
    tplan_free(&other);
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

/* About 70 micro-batches: the figure widens so boxes have room, colours
 * mean size classes (one swatch per class), and the legend names every kind
 * of box separately (B apart from Bi). */
static void test_svg_many_microbatches_readable(void **state)
{
    (void)state;
    enum { M = 70, S = 2 };
    tplan t;
    tplan_1f1b(&t, S, M, 1024);
    if (t.p.mb_shape)
        for (int32_t m = 0; m < M; m++) t.p.mb_shape[m] = (dyn_mb_shape){.rows = 1 + m % 4, .enc_len = 64 + 64 * (m % 3)};
    dyn_stage_costs c;
    tcosts_uniform(&c, M, S, 1.0, 2.0);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    dyn_sim_options o = {0.0, 0.0, 0, 0, 0};
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &o, NULL, &err), DYN_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(dyn_sim_svg_to_stream(sim, &t.p, NULL, f, &err), DYN_OK);
    fclose(f);
    assert_int_equal(count_substr(buf, "class=\"instr\""), 2 * S * M);
    for (const char *k = "F = forward\0B = backward\0Bi = input-gradient backward\0W = weight-gradient backward\0";
         *k; k += strlen(k) + 1)
        assert_non_null(strstr(buf, k));
    assert_non_null(strstr(buf, "colour = micro-batch size"));
    /* wider than the default 1100 px plot: 2M boxes per rank at 14 px */
    int w = 0;
    assert_int_equal(sscanf(buf, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\"", &w), 1);
    assert_true(w >= 14 * 2 * M);
    /* every box big enough carries its micro-batch number: 14 px each */
    assert_true(count_substr(buf, "<text") > 2 * S * M);
    free(buf);
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_has_one_event_per_instruction),
        cmocka_unit_test(test_svg_has_one_box_per_compute_instruction),
        cmocka_unit_test(test_svg_many_microbatches_readable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
