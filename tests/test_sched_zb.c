/* test_sched_zb.c — the zero-bubble schedule: the ZB-H1 order worked by
 * hand (S = 4, M = 8), its closed-form makespan on equal micro-batches
 * M (f + b + w) + (S - 1) max(f, b, f + b - w) for several S, M and costs,
 * memory no larger than 1F1B's, and on random variable-size instances
 * (with and without memory limits and in-flight caps): valid plans, never
 * slower than 1F1B on the same order with zero communication cost, peak
 * within the limit, in-flight count within the cap; an uneven case worked by
 * hand where greedy's "ready B before ready F" decides the makespan; one
 * where running ahead of S in flight does.
 * Makespans come from the reference simulator in sched_testlib.h, not from
 * the generator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched_testlib.h" /* defines: tl_build_ok, tl_equal_costs, tl_expect_orders, tl_random_costs, tl_simulate */

/* Equal costs f, b (B), w (W) per unit; stored 10 MB, peak 1 MB, no states. */
static void split_costs(dyn_stage_costs *c, int32_t M, int32_t S, double f, double b, double w)
{
    tl_equal_costs(c, M, S, f, b + w);
    for (size_t k = 0; k < (size_t)M * S; k++) {
        c->bwd_input_ms[k] = b;
        c->bwd_weight_ms[k] = w;
    }
}

/* Two stages with the same costs per micro-batch m: fbw[m] = {F, B, W}. */
static void two_stage_costs(dyn_stage_costs *c, int32_t M, const double (*fbw)[3])
{
    tl_equal_costs(c, M, 2, 1, 2);
    for (int32_t m = 0; m < M; m++)
        for (int32_t s = 0; s < 2; s++) {
            size_t k = (size_t)m * 2 + (size_t)s;
            c->fwd_ms[k] = fbw[m][0];
            c->bwd_input_ms[k] = fbw[m][1];
            c->bwd_weight_ms[k] = fbw[m][2];
            c->bwd_ms[k] = fbw[m][1] + fbw[m][2];
        }
}

/* Largest number of micro-batches a rank holds: forwarded, and not yet
 * through BACKWARD (1F1B) or BACKWARD_WEIGHT (zero bubble). */
static int32_t max_in_flight(const dyn_exec_plan *p, int32_t r)
{
    int32_t n = 0, mx = 0;
    for (int32_t i = 0; i < p->ranks[r].n_instrs; i++) {
        int op = p->ranks[r].instrs[i].op;
        if (op == DYN_OP_FORWARD) n++;
        if (op == DYN_OP_BACKWARD || op == DYN_OP_BACKWARD_WEIGHT) n--;
        if (n > mx) mx = n;
    }
    return mx;
}

/* Largest number of micro-batches a rank has forwarded and not yet run B
 * (BACKWARD or BACKWARD_INPUT) for. */
static int32_t max_before_b(const dyn_exec_plan *p, int32_t r)
{
    int32_t n = 0, mx = 0;
    for (int32_t i = 0; i < p->ranks[r].n_instrs; i++) {
        int op = p->ranks[r].instrs[i].op;
        if (op == DYN_OP_FORWARD) n++;
        if (op == DYN_OP_BACKWARD || op == DYN_OP_BACKWARD_INPUT) n--;
        if (n > mx) mx = n;
    }
    return mx;
}

static void test_zb_h1_order_s4_m8(void **state)
{
    (void)state;
    /* Worked by hand after the paper's Figure 3 (top): 1F1B's forwards,
     * rank r defers its W passes by r (W j-r right after B j), the r left
     * over run last. Time units, F = B = W = 1: rank 0 runs F0..F3 in 0..4,
     * B0 returns at 4 + 3 = 7 (three B hops), then never idles again except
     * waiting for B5..B7: 24 busy + 3 idle = 27. 1F1B: (8 + 3) * 3 = 33. */
    const char *want[4] = {
        "F0 F1 F2 F3 b0 w0 F4 b1 w1 F5 b2 w2 F6 b3 w3 F7 b4 w4 b5 w5 b6 w6 b7 w7",
        "F0 F1 F2 b0 F3 b1 w0 F4 b2 w1 F5 b3 w2 F6 b4 w3 F7 b5 w4 b6 w5 b7 w6 w7",
        "F0 F1 b0 F2 b1 F3 b2 w0 F4 b3 w1 F5 b4 w2 F6 b5 w3 F7 b6 w4 b7 w5 w6 w7",
        "F0 b0 F1 b1 F2 b2 F3 b3 w0 F4 b4 w1 F5 b5 w2 F6 b6 w3 F7 b7 w4 w5 w6 w7",
    };
    dyn_stage_costs c;
    split_costs(&c, 8, 4, 1, 1, 1);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 4;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &p);
    tl_expect_orders(&p, want);
    double zb = tl_simulate(&p, &c, 0);
    if (fabs(zb - 27.0) > 1e-9) fail_msg("zb makespan %.4f, want 27", zb);
    dyn_exec_plan_free(&p);
    tl_build_ok(DYN_SCHEDULE_1F1B, &c, &o, &p);
    assert_true(fabs(tl_simulate(&p, &c, 0) - 33.0) < 1e-9);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

/* ZB-H1's makespan on equal micro-batches, zero communication, M >= S:
 * M (f + b + w) + (S - 1) max(f, b, f + b - w). Also: every rank holds
 * exactly min(S, M) = S micro-batches at its peak (ZB-H1 keeps the same
 * count on all stages), so the static peak is 10 S + 1 MB on every rank and
 * the peak over ranks equals 1F1B's (its first rank). Counted up to B
 * instead of W (the memory B frees in practice), rank r holds S - r, as in
 * 1F1B. All with the in-flight cap at S (ZB-H1's regime); uncapped, zb
 * (whose run-ahead candidate may hold more) is never above the form. */
static void test_zb_h1_closed_form(void **state)
{
    (void)state;
    const int32_t Ss[] = {1, 2, 3, 4, 5, 8};
    const double fbw[][3] = {{1, 1, 1},   {1, 2, 1},   {2, 1, 1},      {1, 1, 2},
                             {1, 0.5, 2}, {1, 1, 0.25}, {0.7, 1.3, 0.9}, {3, 1, 0.5}};
    int cases = 0;
    for (size_t si = 0; si < sizeof Ss / sizeof Ss[0]; si++) {
        int32_t S = Ss[si];
        const int32_t Ms[] = {S, S + 1, 2 * S, 16};
        for (size_t mi = 0; mi < 4; mi++) {
            int32_t M = Ms[mi];
            if (M < S) continue;
            for (size_t ci = 0; ci < sizeof fbw / sizeof fbw[0]; ci++) {
                double f = fbw[ci][0], b = fbw[ci][1], w = fbw[ci][2];
                double bubble = f > b ? f : b;
                if (f + b - w > bubble) bubble = f + b - w;
                double want = M * (f + b + w) + (S - 1) * bubble;
                dyn_stage_costs c;
                split_costs(&c, M, S, f, b, w);
                dyn_sched_options o;
                dyn_sched_options_default(&o);
                o.n_ranks = S;
                dyn_exec_plan z, q;
                /* uncapped, the run-ahead candidate may beat ZB-H1 */
                tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &z);
                if (tl_simulate(&z, &c, 0) > want + 1e-9)
                    fail_msg("S=%d M=%d: zb uncapped %.6f above ZB-H1's %.6f", S, M, tl_simulate(&z, &c, 0), want);
                dyn_exec_plan_free(&z);
                o.max_in_flight = S; /* ZB-H1's own regime */
                tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &z);
                o.max_in_flight = 0;
                tl_build_ok(DYN_SCHEDULE_1F1B, &c, &o, &q);
                double t = tl_simulate(&z, &c, 0), t1 = tl_simulate(&q, &c, 0);
                if (fabs(t - want) > 1e-9)
                    fail_msg("S=%d M=%d f=%g b=%g w=%g: zb %.6f, ZB-H1 closed form %.6f", S, M, f, b,
                             w, t, want);
                if (fabs(t1 - (M + S - 1) * (f + b + w)) > 1e-9) fail_msg("1f1b %.6f", t1);
                double pz[8], pq[8], mz = 0, mq = 0;
                assert_int_equal(dyn_exec_plan_memory(&z, &c, pz, NULL), DYN_OK);
                assert_int_equal(dyn_exec_plan_memory(&q, &c, pq, NULL), DYN_OK);
                for (int32_t r = 0; r < S; r++) {
                    assert_int_equal(max_in_flight(&z, r), S);
                    assert_int_equal(max_before_b(&z, r), S - r);
                    assert_int_equal(max_in_flight(&q, r), S - r);
                    if (fabs(pz[r] - (10.0 * S + 1)) > 1e-9)
                        fail_msg("S=%d M=%d rank %d zb peak %.3f, want %.3f", S, M, r, pz[r],
                                 10.0 * S + 1);
                    if (pz[r] > mz) mz = pz[r];
                    if (pq[r] > mq) mq = pq[r];
                }
                assert_true(fabs(mz - mq) < 1e-9);
                dyn_exec_plan_free(&z);
                dyn_exec_plan_free(&q);
                dyn_stage_costs_free(&c);
                cases++;
            }
        }
    }
    assert_true(cases > 150);
}

/* Random variable-size micro-batches, S 1..8, M 1..16, a third each with no
 * limit, a memory limit and an in-flight cap. With zero communication cost
 * the zero-bubble plan is never slower than 1F1B on the same order under the
 * same limit and cap (its candidates include 1F1B's order with B and W back
 * to back, which is never later than 1F1B; see sched_zb.c), it is feasible
 * whenever 1F1B is, and it keeps the limit and the cap. */
static void test_zb_random_never_slower(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 3141);
    int n = 0, faster = 0;
    for (int iter = 0; iter < 900; iter++) {
        int32_t S = 1 + (int32_t)dyn_rng_below(&rng, 8);
        int32_t M = 1 + (int32_t)dyn_rng_below(&rng, 16);
        dyn_stage_costs c;
        tl_random_costs(&c, M, S, &rng);
        dyn_sched_options o;
        dyn_sched_options_default(&o);
        o.n_ranks = S;
        int mode = iter % 3;
        if (mode == 1) o.memory_limit_mb = 100 + 80.0 * S * (0.2 + 0.8 * dyn_rng_uniform(&rng));
        if (mode == 2) o.max_in_flight = 1 + (int32_t)dyn_rng_below(&rng, (uint64_t)S);
        dyn_exec_plan z, q;
        dyn_error err;
        dyn_status sq = dyn_schedule_build(DYN_SCHEDULE_1F1B, &c, NULL, &o, &q, &err);
        dyn_status sz = dyn_schedule_build(DYN_SCHEDULE_ZB, &c, NULL, &o, &z, &err);
        if (sq != DYN_OK) {
            assert_int_equal(sq, DYN_ERR_INFEASIBLE);
            if (sz == DYN_OK) dyn_exec_plan_free(&z);
            dyn_stage_costs_free(&c);
            continue;
        }
        if (sz != DYN_OK) fail_msg("S=%d M=%d mode %d: 1f1b feasible, zb: %s", S, M, mode, err.msg);
        if (dyn_exec_plan_validate(&z, &err) != DYN_OK) fail_msg("zb: %s", err.msg);
        double tz = tl_simulate(&z, &c, 0), tq = tl_simulate(&q, &c, 0);
        assert_true(tz > 0 && tq > 0);
        if (tz > tq + 1e-9)
            fail_msg("S=%d M=%d mode %d: zb %.6f slower than 1f1b %.6f", S, M, mode, tz, tq);
        faster += tz < tq - 1e-9;
        double peak[8];
        assert_int_equal(dyn_exec_plan_memory(&z, &c, peak, NULL), DYN_OK);
        for (int32_t r = 0; r < S; r++) {
            if (mode == 1 && peak[r] > o.memory_limit_mb + 1e-9)
                fail_msg("rank %d peak %.3f over limit %.3f", r, peak[r], o.memory_limit_mb);
            int32_t cap = mode == 2 ? o.max_in_flight : M; /* uncapped: the run-ahead candidate */
            if (max_in_flight(&z, r) > cap)
                fail_msg("rank %d holds %d micro-batches, cap %d", r, max_in_flight(&z, r), cap);
        }
        n++;
        dyn_exec_plan_free(&z);
        dyn_exec_plan_free(&q);
        dyn_stage_costs_free(&c);
    }
    assert_true(n > 700);      /* the limits mostly fit */
    assert_true(faster > n / 2); /* and splitting the backward mostly pays */
}

/* A case found by random search (S = 2, M = 4, very uneven W passes: rank
 * 0's W of micro-batch 1 is 11 ms, rank 1's of micro-batch 2 is 15 ms) where
 * both the ZB-H1 order and the greedy order are slower than 1F1B: the 1F1B
 * order with B and W back to back is the candidate that keeps zero bubble
 * from losing. Costs {f, B, W} per micro-batch (rows) and stage. */
static void test_zb_uneven_keeps_1f1b(void **state)
{
    (void)state;
    const double fbw[4][2][3] = {
        {{1.45, 1.50, 0.37}, {5.44, 5.65, 0.05}},
        {{7.90, 7.82, 11.04}, {0.62, 0.85, 0.34}},
        {{1.20, 1.53, 2.99}, {6.79, 6.96, 15.09}},
        {{1.16, 0.89, 0.99}, {1.70, 1.94, 1.35}},
    };
    dyn_stage_costs c;
    tl_equal_costs(&c, 4, 2, 1, 2);
    for (int m = 0; m < 4; m++)
        for (int s = 0; s < 2; s++) {
            size_t k = (size_t)m * 2 + s;
            c.fwd_ms[k] = fbw[m][s][0];
            c.bwd_input_ms[k] = fbw[m][s][1];
            c.bwd_weight_ms[k] = fbw[m][s][2];
            c.bwd_ms[k] = fbw[m][s][1] + fbw[m][s][2];
        }
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    dyn_exec_plan z, q;
    tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &z);
    tl_build_ok(DYN_SCHEDULE_1F1B, &c, &o, &q);
    double tz = tl_simulate(&z, &c, 0), tq = tl_simulate(&q, &c, 0);
    if (tz > tq + 1e-9) fail_msg("zb %.4f slower than 1f1b %.4f", tz, tq);
    dyn_exec_plan_free(&z);
    dyn_exec_plan_free(&q);
    dyn_stage_costs_free(&c);
}

/* Greedy's rule "a ready B before a ready F" decides this uneven case;
 * S = 2, M = 3, the same costs on both stages, zero communication:
 *            F  B  W
 *   mb 0     1  1  1
 *   mb 1     3  1  1
 *   mb 2     1  1  2
 * Worked by hand, [start, end) per unit:
 *   rank 0: F0[0,1] F1[1,4] b0[4,5] w0[5,6] F2[6,7] b1[8,9] w1[9,10]
 *           b2[10,11] w2[11,13]
 *   rank 1: F0[1,2] b0[2,3] w0[3,4] F1[4,7] b1[7,8] F2[8,9] b2[9,10]
 *           w1[10,11] w2[11,13]                                  -> 13
 * At t = 7 rank 1 has both its B1 (F1 just ended) and F2 (rank 0 sent it at
 * 7) ready. B first returns B1's gradient to rank 0 at 8, so rank 0's b1
 * starts at 8, right after the one-unit wait following F2. F first would
 * run F2[7,8] b1[8,9] and delay rank 0's b1 to [9,10]: rank 0 then ends at
 * 14. The other candidates end at 14 too (ZB-H1: rank 1 runs F1 b1 w0 F2,
 * so rank 0's b2 waits until 11; 1F1B split: rank 1 runs w1 before F2, same
 * wait), so only this rule gives 13. */
static void test_zb_greedy_ready_b_first(void **state)
{
    (void)state;
    const double fbw[3][3] = {{1, 1, 1}, {3, 1, 1}, {1, 1, 2}};
    dyn_stage_costs c;
    two_stage_costs(&c, 3, fbw);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &p);
    const char *want[2] = {"F0 F1 b0 w0 F2 b1 w1 b2 w2", "F0 b0 w0 F1 b1 F2 b2 w1 w2"};
    tl_expect_orders(&p, want);
    double t = tl_simulate(&p, &c, 0);
    if (fabs(t - 13.0) > 1e-9) fail_msg("zb makespan %.4f, want 13", t);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

/* Running ahead past S in flight, worked by hand. S = 2, M = 4, the same
 * costs on both stages, zero communication:
 *            F  B  W
 *   mb 0     1  1  1
 *   mb 1     3  3  3
 *   mb 2     1  1  1
 *   mb 3     1  1  1
 * [start, end) per unit of the run-ahead greedy (W at most S = 2 behind B):
 *   rank 0: F0[0,1] F1[1,4] b0[4,5] F2[5,6] F3[6,7] w0[7,8] b1[10,13]
 *           b2[13,14] w1[14,17] b3[17,18] w2[18,19] w3[19,20]
 *   rank 1: F0[1,2] b0[2,3] w0[3,4] F1[4,7] b1[7,10] F2[10,11] b2[11,12]
 *           w1[12,15] F3[15,16] b3[16,17] w2[17,18] w3[18,19]     -> 20
 * Rank 0 holds four micro-batches at once (F3 before w0). Capped at S in
 * flight it cannot forward F2 and F3 while rank 1 runs the long F1 and b1,
 * and every capped candidate ends later (checked: > 20). */
static void test_zb_run_ahead_by_hand(void **state)
{
    (void)state;
    const double fbw[4][3] = {{1, 1, 1}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}};
    dyn_stage_costs c;
    two_stage_costs(&c, 4, fbw);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &p);
    const char *want[2] = {"F0 F1 b0 F2 F3 w0 b1 b2 w1 b3 w2 w3", "F0 b0 w0 F1 b1 F2 b2 w1 F3 b3 w2 w3"};
    tl_expect_orders(&p, want);
    double t = tl_simulate(&p, &c, 0);
    if (fabs(t - 20.0) > 1e-9) fail_msg("zb makespan %.4f, want 20", t);
    assert_int_equal(max_in_flight(&p, 0), 4);
    dyn_exec_plan_free(&p);
    o.max_in_flight = 2;
    tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &p);
    double capped = tl_simulate(&p, &c, 0);
    if (capped <= 20.0 + 1e-9) fail_msg("capped at S in flight: %.4f, want > 20", capped);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zb_h1_order_s4_m8),
        cmocka_unit_test(test_zb_h1_closed_form),
        cmocka_unit_test(test_zb_random_never_slower),
        cmocka_unit_test(test_zb_uneven_keeps_1f1b),
        cmocka_unit_test(test_zb_greedy_ready_b_first),
        cmocka_unit_test(test_zb_run_ahead_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
