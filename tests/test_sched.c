/* test_sched.c — schedule generators: hand-worked orders (1F1B S=4 M=8,
 * interleaved S=2 v=2 M=4, cyclic), every schedule validating on random
 * costs, the 1F1B makespan formula, wait-free cyclic never slower than
 * cyclic, memory throttling keeping the static peak under the limit, and
 * predicted peak memory worked by hand (static model and simulator) for
 * 1F1B, zero bubble (activations kept from F to W) and interleaved (a rank
 * holds the states of both its stages). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dynapipe/sim.h"  /* defines: dyn_sim_run (the simulator's predicted peaks) */
#include "sched/sched_internal.h" /* defines: SCHED_SEND_SLACK */
#include "sched_testlib.h" /* defines: tl_build_ok, tl_expect_orders, tl_random_costs, tl_order, tl_simulate */

static void test_1f1b_order_s4_m8(void **state)
{
    (void)state;
    /* Worked by hand: rank r does 3-r warm-up forwards, then F/B pairs. */
    const char *want[4] = {
        "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
        "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
        "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7",
    };
    dyn_stage_costs c;
    tl_equal_costs(&c, 8, 4, 1, 2);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 4;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_1F1B, &c, &o, &p);
    tl_expect_orders(&p, want);
    /* Equal micro-batches, zero communication: (M + S - 1) * (f + b). */
    assert_true(fabs(tl_simulate(&p, &c, 0) - (8 + 4 - 1) * 3.0) < 1e-9);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

static void test_1f1b_instructions_rank1(void **state)
{
    (void)state;
    /* S = 2, M = 1: every instruction of both ranks, by hand. */
    dyn_stage_costs c;
    tl_equal_costs(&c, 1, 2, 1, 2);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_1F1B, &c, &o, &p);
    /* Rank 0's send finishes lazily (before its second compute after the
     * forward; there is none, so at the end); rank 1 posts its receive first. */
    const int want0[] = {DYN_OP_LOAD_INPUT, DYN_OP_FORWARD, DYN_OP_FREE_BUFFER, DYN_OP_SEND_ACT_START,
                         DYN_OP_RECV_GRAD_START, DYN_OP_RECV_GRAD_FINISH, DYN_OP_BACKWARD,
                         DYN_OP_FREE_BUFFER, DYN_OP_SEND_ACT_FINISH, DYN_OP_FREE_BUFFER};
    const int want1[] = {DYN_OP_RECV_ACT_START, DYN_OP_RECV_ACT_FINISH, DYN_OP_LOAD_INPUT, DYN_OP_FORWARD,
                         DYN_OP_FREE_BUFFER, DYN_OP_FREE_BUFFER, DYN_OP_BACKWARD, DYN_OP_SEND_GRAD_START,
                         DYN_OP_SEND_GRAD_FINISH, DYN_OP_FREE_BUFFER};
    assert_int_equal(p.ranks[0].n_instrs, 10);
    assert_int_equal(p.ranks[1].n_instrs, 10);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(p.ranks[0].instrs[i].op, want0[i]);
        assert_int_equal(p.ranks[1].instrs[i].op, want1[i]);
    }
    assert_int_equal(p.ranks[0].instrs[3].bytes, 1 << 20); /* send_mb = 1 MB */
    assert_int_equal(p.ranks[0].instrs[3].peer, 1);
    assert_true(p.ranks[1].instrs[2].flags & DYN_INSTR_FLAG_TARGETS);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

static void test_interleaved_order_s2_v2_m4(void **state)
{
    (void)state;
    /* Stage s = chunk * 2 + rank. Rank 0 warms up (2-0-1)*2 + (2-1)*2 = 4
     * forwards: group {0,1} chunk 0, chunk 1; then F/B pairs. Backwards go
     * group {0,1} chunk 1, chunk 0, then group {2,3}. Rank 1 warms up 2. */
    const char *want[2] = {
        "F0.0 F1.0 F0.2 F1.2 F2.0 B0.2 F3.0 B1.2 F2.2 B0.0 F3.2 B1.0 B2.2 B3.2 B2.0 B3.0",
        "F0.1 F1.1 F0.3 B0.3 F1.3 B1.3 F2.1 B0.1 F3.1 B1.1 F2.3 B2.3 F3.3 B3.3 B2.1 B3.1",
    };
    dyn_stage_costs c;
    tl_equal_costs(&c, 4, 4, 1, 2);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    o.chunks = 2;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_INTERLEAVED, &c, &o, &p);
    tl_expect_orders(&p, want);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

static void test_cyclic_order_and_barriers(void **state)
{
    (void)state;
    /* S = 2, M = 3: stage s runs F j in cycle j + s and B j in cycle j + 3 - s.
     * Rank 0: c0 F0, c1 F1, c2 F2, c3 B0, c4 B1, c5 B2.
     * Rank 1: c1 F0, c2 B0 F1, c3 B1 F2, c4 B2. 6 cycles -> 5 barriers. */
    dyn_stage_costs c;
    tl_equal_costs(&c, 3, 2, 1, 2);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_CYCLIC, &c, &o, &p);
    char buf[512];
    tl_order(&p, 0, buf, sizeof buf);
    assert_string_equal(buf, "F0 F1 F2 B0 B1 B2");
    tl_order(&p, 1, buf, sizeof buf);
    assert_string_equal(buf, "F0 B0 F1 B1 F2 B2");
    for (int r = 0; r < 2; r++) {
        int nb = 0;
        for (int i = 0; i < p.ranks[r].n_instrs; i++) nb += p.ranks[r].instrs[i].op == DYN_OP_BARRIER;
        assert_int_equal(nb, 5);
    }
    /* Cycle time is max over ranks of the cycle's work: c0 1, c1 1 (r0 F1 ||
     * r1 F0), c2 3 (r1 B0 F1), c3 3, c4 2, c5 2 -> 12 ms without latency. */
    assert_true(fabs(tl_simulate(&p, &c, 0) - 12.0) < 1e-9);
    dyn_exec_plan q;
    tl_build_ok(DYN_SCHEDULE_WAIT_FREE_CYCLIC, &c, &o, &q);
    double wf = tl_simulate(&q, &c, 0);
    assert_true(wf <= 12.0 + 1e-9);
    dyn_exec_plan_free(&p);
    dyn_exec_plan_free(&q);
    dyn_stage_costs_free(&c);
}

/* Every SEND_*_FINISH of rank r that comes before the rank's last compute
 * instruction is emitted while more than SCHED_SEND_SLACK of its sends are
 * in flight (the sender does not wait on a receiver that is only a few
 * sends behind); the final ones may finish with fewer. Returns the number
 * of early finishes seen. */
static int expect_send_slack(const dyn_exec_plan *p, int32_t r)
{
    const dyn_rank_plan *rp = &p->ranks[r];
    int32_t last_compute = -1;
    for (int32_t i = 0; i < rp->n_instrs; i++) {
        int op = rp->instrs[i].op;
        if (op == DYN_OP_FORWARD || op == DYN_OP_BACKWARD || op == DYN_OP_BACKWARD_INPUT ||
            op == DYN_OP_BACKWARD_WEIGHT)
            last_compute = i;
    }
    int in_flight = 0, early = 0;
    for (int32_t i = 0; i < rp->n_instrs; i++) {
        int op = rp->instrs[i].op;
        if (op == DYN_OP_SEND_ACT_START || op == DYN_OP_SEND_GRAD_START) in_flight++;
        if (op != DYN_OP_SEND_ACT_FINISH && op != DYN_OP_SEND_GRAD_FINISH) continue;
        if (i < last_compute) {
            if (in_flight <= SCHED_SEND_SLACK)
                fail_msg("rank %d instruction %d finishes a send with %d in flight", r, i, in_flight);
            early++;
        }
        in_flight--;
    }
    assert_int_equal(in_flight, 0);
    return early;
}

/* Every schedule validates for random instances, keeps SCHED_SEND_SLACK
 * sends in flight, and wait-free cyclic is never slower than cyclic on the
 * same order. */
static void test_random_instances_validate(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 2311);
    int early = 0; /* sends finished before the end: the slack check saw some */
    for (int iter = 0; iter < 400; iter++) {
        int32_t S = 1 + (int32_t)dyn_rng_below(&rng, 8);
        int32_t M = 1 + (int32_t)dyn_rng_below(&rng, 16);
        int32_t v = 1 + (int32_t)dyn_rng_below(&rng, 3);
        for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            int chunked = k == DYN_SCHEDULE_INTERLEAVED || k == DYN_SCHEDULE_CYCLIC || k == DYN_SCHEDULE_WAIT_FREE_CYCLIC;
            int32_t vv = chunked ? v : 1;
            dyn_stage_costs c;
            tl_random_costs(&c, M, S * vv, &rng);
            dyn_sched_options o;
            dyn_sched_options_default(&o);
            o.n_ranks = S;
            o.chunks = vv;
            dyn_exec_plan p;
            tl_build_ok((dyn_schedule)k, &c, &o, &p);
            double t = tl_simulate(&p, &c, 0.05);
            assert_true(t > 0);
            for (int32_t r = 0; r < S; r++) early += expect_send_slack(&p, r);
            if (k == DYN_SCHEDULE_CYCLIC) {
                dyn_exec_plan q;
                tl_build_ok(DYN_SCHEDULE_WAIT_FREE_CYCLIC, &c, &o, &q);
                double twf = tl_simulate(&q, &c, 0.05);
                /* same lists, barriers removed */
                for (int32_t r = 0; r < S; r++) {
                    int32_t j = 0;
                    for (int32_t i = 0; i < p.ranks[r].n_instrs; i++) {
                        if (p.ranks[r].instrs[i].op == DYN_OP_BARRIER) continue;
                        assert_true(j < q.ranks[r].n_instrs);
                        assert_memory_equal(&p.ranks[r].instrs[i], &q.ranks[r].instrs[j], sizeof(dyn_instr));
                        j++;
                    }
                    assert_int_equal(j, q.ranks[r].n_instrs);
                }
                if (!(twf <= t + 1e-9)) fail_msg("S=%d M=%d v=%d: wait-free %.4f > cyclic %.4f", S, M, vv, twf, t);
                dyn_exec_plan_free(&q);
            }
            dyn_exec_plan_free(&p);
            dyn_stage_costs_free(&c);
        }
    }
    assert_true(early > 0);
}

/* Under a memory limit between "one micro-batch" and "unthrottled", every
 * schedule either keeps the static peak under the limit or says infeasible
 * naming a stage. */
static void test_memory_throttling(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 77);
    int throttled = 0;
    for (int iter = 0; iter < 150; iter++) {
        int32_t S = 1 + (int32_t)dyn_rng_below(&rng, 6);
        int32_t M = 1 + (int32_t)dyn_rng_below(&rng, 16);
        for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            dyn_stage_costs c;
            tl_random_costs(&c, M, S, &rng);
            dyn_sched_options o;
            dyn_sched_options_default(&o);
            o.n_ranks = S;
            dyn_exec_plan p;
            tl_build_ok((dyn_schedule)k, &c, &o, &p);
            double peak[8], free_peak = 0;
            assert_int_equal(dyn_exec_plan_memory(&p, &c, peak, NULL), DYN_OK);
            for (int r = 0; r < S; r++) if (peak[r] > free_peak) free_peak = peak[r];
            dyn_exec_plan_free(&p);
            o.memory_limit_mb = 100 + (free_peak - 100) * (0.2 + 0.7 * dyn_rng_uniform(&rng));
            dyn_error err;
            dyn_status st = dyn_schedule_build((dyn_schedule)k, &c, NULL, &o, &p, &err);
            if (st == DYN_OK) {
                if (dyn_exec_plan_validate(&p, &err) != DYN_OK) fail_msg("%s", err.msg);
                assert_int_equal(dyn_exec_plan_memory(&p, &c, peak, NULL), DYN_OK);
                for (int r = 0; r < S; r++)
                    if (peak[r] > o.memory_limit_mb + 1e-9)
                        fail_msg("%s S=%d M=%d: rank %d peak %.2f over limit %.2f",
                                 dyn_schedule_name((dyn_schedule)k), S, M, r, peak[r], o.memory_limit_mb);
                throttled++;
                dyn_exec_plan_free(&p);
            } else {
                assert_int_equal(st, DYN_ERR_INFEASIBLE);
                assert_non_null(strstr(err.msg, "stage"));
                assert_non_null(strstr(err.msg, "MB"));
            }
            dyn_stage_costs_free(&c);
        }
    }
    assert_true(throttled > 100); /* the limits mostly fit: throttling works */
}

static void test_infeasible_names_stage(void **state)
{
    (void)state;
    dyn_stage_costs c;
    tl_equal_costs(&c, 4, 2, 1, 2);
    c.stored_mb[3 * 2 + 1] = 1000; /* micro-batch 3 on stage 1 alone is too big */
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    o.memory_limit_mb = 500;
    for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
        if (k == DYN_SCHEDULE_INTERLEAVED) continue; /* needs v >= 1: same as 1f1b here */
        dyn_exec_plan p;
        dyn_error err;
        assert_int_equal(dyn_schedule_build((dyn_schedule)k, &c, NULL, &o, &p, &err), DYN_ERR_INFEASIBLE);
        assert_non_null(strstr(err.msg, "stage 1"));
        assert_non_null(strstr(err.msg, "500.0 MB"));
    }
    dyn_stage_costs_free(&c);
}

static void test_bad_options_rejected(void **state)
{
    (void)state;
    dyn_stage_costs c;
    tl_equal_costs(&c, 4, 3, 1, 2);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2; /* costs have 3 stages */
    dyn_exec_plan p;
    dyn_error err;
    assert_int_equal(dyn_schedule_build(DYN_SCHEDULE_1F1B, &c, NULL, &o, &p, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "3 stages"));
    c.fwd_ms[0] = -1;
    o.n_ranks = 3;
    assert_int_equal(dyn_schedule_build(DYN_SCHEDULE_ZB, &c, NULL, &o, &p, &err), DYN_ERR_INVALID_ARG);
    dyn_schedule s;
    assert_int_equal(dyn_schedule_parse("wait-free-cyclic", &s, NULL), DYN_OK);
    assert_int_equal(s, DYN_SCHEDULE_WAIT_FREE_CYCLIC);
    assert_int_equal(dyn_schedule_parse("gpipe", &s, &err), DYN_ERR_INVALID_ARG);
    dyn_stage_costs_free(&c);
}

static void test_deterministic(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 5);
    dyn_stage_costs c;
    tl_random_costs(&c, 12, 4, &rng);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 4;
    for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
        dyn_exec_plan a, b;
        tl_build_ok((dyn_schedule)k, &c, &o, &a);
        tl_build_ok((dyn_schedule)k, &c, &o, &b);
        for (int r = 0; r < 4; r++) {
            assert_int_equal(a.ranks[r].n_instrs, b.ranks[r].n_instrs);
            assert_memory_equal(a.ranks[r].instrs, b.ranks[r].instrs,
                                sizeof(dyn_instr) * (size_t)a.ranks[r].n_instrs);
        }
        dyn_exec_plan_free(&a);
        dyn_exec_plan_free(&b);
    }
    dyn_stage_costs_free(&c);
}

/* Static memory by hand: 1F1B S=2 M=3, states 100, stored 10, peak 1.
 * Rank 0 runs F0 F1 B0 F2 B1 B2: at most two micro-batches held, so
 * 100 + 10 + 10 + 1 = 121 while F1 (or B0, or F2) runs. Rank 1 alternates:
 * 100 + 10 + 1 = 111. */
static void test_static_memory_by_hand(void **state)
{
    (void)state;
    dyn_stage_costs c;
    tl_equal_costs(&c, 3, 2, 1, 2);
    c.states_mb[0] = c.states_mb[1] = 100;
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    dyn_exec_plan p;
    double peak[2];
    tl_build_ok(DYN_SCHEDULE_1F1B, &c, &o, &p);
    assert_int_equal(dyn_exec_plan_memory(&p, &c, peak, NULL), DYN_OK);
    assert_true(fabs(peak[0] - 121) < 1e-9 && fabs(peak[1] - 111) < 1e-9);
    dyn_exec_plan_free(&p);
    /* a 115 MB limit leaves rank 0 one micro-batch in flight: F0 B0 F1 B1 ... */
    o.memory_limit_mb = 115;
    tl_build_ok(DYN_SCHEDULE_1F1B, &c, &o, &p);
    char buf[256];
    tl_order(&p, 0, buf, sizeof buf);
    assert_string_equal(buf, "F0 B0 F1 B1 F2 B2");
    assert_int_equal(dyn_exec_plan_memory(&p, &c, peak, NULL), DYN_OK);
    assert_true(fabs(peak[0] - 111) < 1e-9);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

/* Rank r's predicted peak, from the static model and from the simulator
 * (no communication, no slot memory), both equal to want[r]. */
static void expect_peaks(const dyn_exec_plan *p, const dyn_stage_costs *c, const double *want, int32_t n_ranks)
{
    double peak[8];
    assert_true(n_ranks <= 8);
    assert_int_equal(dyn_exec_plan_memory(p, c, peak, NULL), DYN_OK);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    assert_non_null(sim);
    const dyn_sim_options no_comm = {0.0, 0.0, 0, 0, 0};
    const dyn_sim_result *res;
    assert_int_equal(dyn_sim_run(sim, p, c, &no_comm, &res, &err), DYN_OK);
    for (int32_t r = 0; r < n_ranks; r++) {
        if (fabs(peak[r] - want[r]) > 1e-9) fail_msg("rank %d: static peak %.3f MB, want %.3f", r, peak[r], want[r]);
        if (fabs(res->peak_mb[r] - want[r]) > 1e-9)
            fail_msg("rank %d: simulated peak %.3f MB, want %.3f", r, res->peak_mb[r], want[r]);
    }
    dyn_sim_free(sim);
}

/* Zero bubble by hand: S = 2, M = 3, F = B = W = 1 (ZB-H1 wins, 10 time
 * units), states 100 / 200, stored 10, peak 1. A micro-batch's stored
 * activations are kept from its F until its W, not its B:
 *   rank 0: F0 F1 b0 w0 F2 b1 w1 b2 w2: two held from F1 to w1:
 *           100 + 10 + 10 + 1 = 121;
 *   rank 1: F0 b0 F1 b1 w0 F2 b2 w1 w2: F1 runs while mb 0 waits for w0,
 *           and so on until w1: 200 + 10 + 10 + 1 = 221 (211 if B freed
 *           the activations). */
static void test_zb_memory_by_hand(void **state)
{
    (void)state;
    dyn_stage_costs c;
    tl_equal_costs(&c, 3, 2, 1, 2);
    c.states_mb[0] = 100;
    c.states_mb[1] = 200;
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &p);
    const char *want[2] = {"F0 F1 b0 w0 F2 b1 w1 b2 w2", "F0 b0 F1 b1 w0 F2 b2 w1 w2"};
    tl_expect_orders(&p, want);
    expect_peaks(&p, &c, (const double[]){121, 221}, 2);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

/* Interleaved by hand: S = 2 ranks, v = 2 chunks (stages 0..3, stage s on
 * rank s % 2), M = 4 (the order of test_interleaved_order_s2_v2_m4),
 * states 100, 200, 300, 400, stored 10, peak 1. A rank holds the states of
 * both its stages:
 *   rank 0 (stages 0, 2: 400 MB): F0.0 F1.0 F0.2 F1.2 F2.0 then one B per F;
 *           five held while F2.0 runs: 400 + 4 * 10 + 10 + 1 = 451;
 *   rank 1 (stages 1, 3: 600 MB): F0.1 F1.1 F0.3 then alternating: three
 *           held at most: 600 + 2 * 10 + 10 + 1 = 631. */
static void test_interleaved_memory_by_hand(void **state)
{
    (void)state;
    dyn_stage_costs c;
    tl_equal_costs(&c, 4, 4, 1, 2);
    for (int s = 0; s < 4; s++) c.states_mb[s] = 100.0 * (s + 1);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    o.chunks = 2;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_INTERLEAVED, &c, &o, &p);
    char buf[1024];
    tl_order(&p, 0, buf, sizeof buf);
    assert_string_equal(buf, "F0.0 F1.0 F0.2 F1.2 F2.0 B0.2 F3.0 B1.2 F2.2 B0.0 F3.2 B1.0 B2.2 B3.2 B2.0 B3.0");
    expect_peaks(&p, &c, (const double[]){451, 631}, 2);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

/* Equal micro-batches, zero communication, worked by hand:
 *  - interleaved with v chunks of half the work each: the warm-up bubble
 *    shrinks by v, makespan M (f + b) + (S - 1)(f + b) / v = 24 + 4.5;
 *  - zero bubble (ZB-H1) fills the cool-down with W passes: 1F1B's
 *    (M + S - 1)(f + b) = 33 becomes M (f + b) + (S - 1) max(f, B, f + B - W) = 27
 *    (B = W = 1; the general form is tested in test_sched_zb.c). */
static void test_equal_microbatches_closed_forms(void **state)
{
    (void)state;
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 4;
    o.chunks = 2;
    dyn_stage_costs c;
    tl_equal_costs(&c, 8, 8, 0.5, 1.0);
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_INTERLEAVED, &c, &o, &p);
    double t = tl_simulate(&p, &c, 0);
    if (fabs(t - 28.5) > 1e-9) fail_msg("interleaved makespan %.4f, want 28.5", t);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);

    o.chunks = 1;
    tl_equal_costs(&c, 8, 4, 1.0, 2.0);
    tl_build_ok(DYN_SCHEDULE_ZB, &c, &o, &p);
    double zb = tl_simulate(&p, &c, 0);
    dyn_exec_plan_free(&p);
    tl_build_ok(DYN_SCHEDULE_1F1B, &c, &o, &p);
    double f1b = tl_simulate(&p, &c, 0);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
    assert_true(fabs(f1b - 33.0) < 1e-9);
    if (fabs(zb - 27.0) > 1e-9) fail_msg("zb makespan %.4f, want 27 (1f1b %.4f)", zb, f1b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b_order_s4_m8),
        cmocka_unit_test(test_1f1b_instructions_rank1),
        cmocka_unit_test(test_interleaved_order_s2_v2_m4),
        cmocka_unit_test(test_cyclic_order_and_barriers),
        cmocka_unit_test(test_random_instances_validate),
        cmocka_unit_test(test_memory_throttling),
        cmocka_unit_test(test_infeasible_names_stage),
        cmocka_unit_test(test_bad_options_rejected),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_equal_microbatches_closed_forms),
        cmocka_unit_test(test_static_memory_by_hand),
        cmocka_unit_test(test_zb_memory_by_hand),
        cmocka_unit_test(test_interleaved_memory_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
