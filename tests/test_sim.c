/* test_sim.c — the simulator core against hand-worked cases and an
 * independent fixed-point computation: 1F1B closed form, latency and
 * bandwidth by hand, link contention, memory accounting, deadlock and
 * malformed-plan detection, workspace reuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sim.h" /* defines: dyn_sim_* */
#include "sim_testlib.h"  /* defines: tplan_*, tcosts_uniform */
#include "util/rng.h"     /* defines: dyn_rng_* */

static const dyn_sim_options no_comm = {0.0, 0.0, 0, 0, 0};
static const dyn_sim_options no_comm_slots = {0.0, 0.0, 0, 1, 0};

static double run_makespan(const tplan *t, const dyn_stage_costs *c, const dyn_sim_options *o)
{
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    assert_non_null(sim);
    const dyn_sim_result *res = NULL;
    dyn_status st = dyn_sim_run(sim, &t->p, c, o, &res, &err);
    if (st != DYN_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(st, DYN_OK);
    double m = res->makespan_ms;
    dyn_sim_free(sim);
    return m;
}

/* Equal micro-batches under 1F1B with free communication take exactly
 * (M + S - 1) * (f + b), and the bubble fraction is (S - 1) / (M + S - 1). */
static void test_1f1b_closed_form(void **state)
{
    (void)state;
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    for (int32_t S = 1; S <= 8; S++) {
        for (int32_t M = 1; M <= 12; M++) {
            tplan t;
            tplan_1f1b(&t, S, M, 4096);
            dyn_stage_costs c;
            double f = 1.25, b = 2.5;
            tcosts_uniform(&c, M, S, f, b);
            const dyn_sim_result *res;
            assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, &res, &err), DYN_OK);
            double want = (M + S - 1) * (f + b);
            assert_true(fabs(res->makespan_ms - want) < 1e-9);
            assert_true(fabs(res->bubble_fraction - (double)(S - 1) / (M + S - 1)) < 1e-12);
            for (int32_t r = 0; r < S; r++) assert_true(fabs(res->busy_ms[r] - M * (f + b)) < 1e-9);
            dyn_stage_costs_free(&c);
            tplan_free(&t);
        }
    }
    dyn_sim_free(sim);
}

/* S = 2, M = 2, f = 1, b = 2, latency 0.5 ms, infinite bandwidth. By hand:
 * rank 0 F0 [0,1] F1 [1,2]; act0 arrives 1.5, act1 2.5; rank 1 F0 [1.5,2.5]
 * B0 [2.5,4.5] (grad0 arrives 5) F1 [4.5,5.5] B1 [5.5,7.5] (grad1 arrives
 * 8); rank 0 B0 [5,7] B1 [8,10]. Makespan 10 (9 without latency). With
 * 1 GB/s and 250 000-byte messages each message also takes 0.25 ms on the
 * link: every arrival moves 0.25 later per hop -> 10.5. */
static void test_1f1b_latency_and_bandwidth_by_hand(void **state)
{
    (void)state;
    tplan t;
    tplan_1f1b(&t, 2, 2, 250000);
    dyn_stage_costs c;
    tcosts_uniform(&c, 2, 2, 1.0, 2.0);
    dyn_sim_options lat = {0.5, 0.0, 1000, 0, 0};
    assert_true(fabs(run_makespan(&t, &c, &lat) - 10.0) < 1e-9);
    dyn_sim_options bw = {0.5, 1.0, 1000, 0, 0};
    assert_true(fabs(run_makespan(&t, &c, &bw) - 10.5) < 1e-9);

    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    const dyn_sim_result *res;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &lat, &res, &err), DYN_OK);
    /* throughput = 1000 tokens / 10 ms */
    assert_true(fabs(res->tokens_per_s - 100000.0) < 1e-6);
    /* rank 1's first FORWARD starts at 1.5 */
    const dyn_rank_plan *r1 = &t.p.ranks[1];
    for (int32_t i = 0; i < r1->n_instrs; i++)
        if (r1->instrs[i].op == DYN_OP_FORWARD && r1->instrs[i].microbatch == 0)
            assert_true(fabs(res->events[res->rank_offset[1] + i].start_ms - 1.5) < 1e-12);
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

/* Two activations leave rank 0 at the same moment on one link: the second
 * waits for the first. Forward-only plan (the simulator does not need
 * backward): rank 0 F0 = 2 ms, F1 = 0 ms, each message 1 ms on the link
 * (1e6 bytes at 1 GB/s), no latency; rank 1 F = 0.5 ms. act0 [2,3], act1
 * [3,4]; rank 1 F0 [3,3.5], F1 [4,4.5]. */
static void test_link_carries_one_transfer_at_a_time(void **state)
{
    (void)state;
    tplan t;
    tplan_init(&t, 2, 2, 2, 32);
    tplan_add(&t, 0, DYN_OP_LOAD_INPUT, 0, 0, -1, -1, 0, 0);
    tplan_add(&t, 0, DYN_OP_LOAD_INPUT, 1, 0, -1, -1, 1, 0);
    tplan_add(&t, 0, DYN_OP_FORWARD, 0, 0, -1, 0, 2, 1000000);
    tplan_add(&t, 0, DYN_OP_SEND_ACT_START, 0, 0, 1, 2, -1, 1000000);
    tplan_add(&t, 0, DYN_OP_FORWARD, 1, 0, -1, 1, 3, 1000000);
    tplan_add(&t, 0, DYN_OP_SEND_ACT_START, 1, 0, 1, 3, -1, 1000000);
    tplan_add(&t, 0, DYN_OP_SEND_ACT_FINISH, 0, 0, 1, 2, -1, 1000000);
    tplan_add(&t, 0, DYN_OP_SEND_ACT_FINISH, 1, 0, 1, 3, -1, 1000000);
    for (int b = 0; b < 4; b++) tplan_add(&t, 0, DYN_OP_FREE_BUFFER, 0, 0, -1, b, -1, 0);
    tplan_add(&t, 1, DYN_OP_RECV_ACT_START, 0, 1, 0, -1, 0, 1000000);
    tplan_add(&t, 1, DYN_OP_RECV_ACT_START, 1, 1, 0, -1, 1, 1000000);
    tplan_add(&t, 1, DYN_OP_RECV_ACT_FINISH, 0, 1, 0, -1, 0, 1000000);
    tplan_add(&t, 1, DYN_OP_FORWARD, 0, 1, -1, 0, -1, 0);
    tplan_add(&t, 1, DYN_OP_RECV_ACT_FINISH, 1, 1, 0, -1, 1, 1000000);
    tplan_add(&t, 1, DYN_OP_FORWARD, 1, 1, -1, 1, -1, 0);
    dyn_stage_costs c;
    tcosts_uniform(&c, 2, 2, 0.5, 0.0);
    c.fwd_ms[0 * 2 + 0] = 2.0;
    c.fwd_ms[1 * 2 + 0] = 0.0;
    dyn_sim_options o = {0.0, 1.0, 0, 0, 0};
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    const dyn_sim_result *res;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &o, &res, &err), DYN_OK);
    const dyn_sim_event *ev = res->events + res->rank_offset[1];
    assert_true(fabs(ev[3].start_ms - 3.0) < 1e-12 && fabs(ev[3].end_ms - 3.5) < 1e-12);
    assert_true(fabs(ev[5].start_ms - 4.0) < 1e-12 && fabs(ev[5].end_ms - 4.5) < 1e-12);
    assert_true(fabs(res->makespan_ms - 4.5) < 1e-12);
    /* rank 0's second SEND_FINISH waits until act1 arrived at 4 */
    assert_true(fabs(res->events[7].end_ms - 4.0) < 1e-12);
    /* busy: rank 0 2 ms, rank 1 1 ms; bubble 1 - 3 / (2 * 4.5) */
    assert_true(fabs(res->bubble_fraction - (1.0 - 3.0 / 9.0)) < 1e-12);
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

/* Memory on one rank, by hand. states 100; micro-batch 0 stores 10 and
 * needs 5 on top while computing, micro-batch 1 stores 20 and needs 3.
 *   LOAD0 (1 MB)  after 101
 *   F0            during 111 + 5 = 116, after 111
 *   LOAD1 (1 MB)  after 112
 *   F1            during 132 + 3 = 135, after 132
 *   B0            during 132 + 5 = 137, after 122 (releases 10)
 *   FREE slot 0   after 121
 *   B1            during 121 + 3 = 124, after 101 (releases 20)
 *   FREE slot 1   after 100
 * Peak 137. */
static void test_memory_accounting_by_hand(void **state)
{
    (void)state;
    tplan t;
    tplan_init(&t, 1, 1, 2, 16);
    const int64_t MB = 1048576;
    tplan_add(&t, 0, DYN_OP_LOAD_INPUT, 0, 0, -1, -1, 0, MB);
    tplan_add(&t, 0, DYN_OP_FORWARD, 0, 0, -1, 0, -1, 0);
    tplan_add(&t, 0, DYN_OP_LOAD_INPUT, 1, 0, -1, -1, 1, MB);
    tplan_add(&t, 0, DYN_OP_FORWARD, 1, 0, -1, 1, -1, 0);
    tplan_add(&t, 0, DYN_OP_BACKWARD, 0, 0, -1, -1, -1, 0);
    tplan_add(&t, 0, DYN_OP_FREE_BUFFER, 0, 0, -1, 0, -1, 0);
    tplan_add(&t, 0, DYN_OP_BACKWARD, 1, 0, -1, -1, -1, 0);
    tplan_add(&t, 0, DYN_OP_FREE_BUFFER, 1, 0, -1, 1, -1, 0);
    dyn_stage_costs c;
    tcosts_uniform(&c, 2, 1, 1.0, 1.0);
    c.states_mb[0] = 100;
    c.stored_mb[0] = 10; c.peak_mb[0] = 5;
    c.stored_mb[1] = 20; c.peak_mb[1] = 3;
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    const dyn_sim_result *res;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm_slots, &res, &err), DYN_OK);
    const double after[8] = {101, 111, 112, 132, 122, 121, 101, 100};
    const double top[8] = {101, 116, 112, 135, 137, 121, 124, 100};
    for (int i = 0; i < 8; i++) {
        assert_true(fabs(res->events[i].mem_mb - after[i]) < 1e-9);
        assert_true(fabs(res->events[i].mem_peak_mb - top[i]) < 1e-9);
    }
    assert_true(fabs(res->peak_mb[0] - 137) < 1e-9);
    assert_true(fabs(res->max_peak_mb - 137) < 1e-9);
    /* Without slot memory the two 1 MB inputs do not count: peak 135. */
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, &res, &err), DYN_OK);
    assert_true(fabs(res->max_peak_mb - 135) < 1e-9);
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

/* Each rank waits for the other first: reported, not hung. */
static void test_deadlock_is_reported(void **state)
{
    (void)state;
    tplan t;
    tplan_init(&t, 2, 2, 1, 16);
    tplan_add(&t, 0, DYN_OP_RECV_GRAD_START, 0, 0, 1, -1, 0, 64);
    tplan_add(&t, 0, DYN_OP_RECV_GRAD_FINISH, 0, 0, 1, -1, 0, 64);
    tplan_add(&t, 0, DYN_OP_SEND_ACT_START, 0, 0, 1, 0, -1, 64);
    tplan_add(&t, 0, DYN_OP_SEND_ACT_FINISH, 0, 0, 1, 0, -1, 64);
    tplan_add(&t, 1, DYN_OP_RECV_ACT_START, 0, 1, 0, -1, 0, 64);
    tplan_add(&t, 1, DYN_OP_RECV_ACT_FINISH, 0, 1, 0, -1, 0, 64);
    tplan_add(&t, 1, DYN_OP_SEND_GRAD_START, 0, 1, 0, 0, -1, 64);
    tplan_add(&t, 1, DYN_OP_SEND_GRAD_FINISH, 0, 1, 0, 0, -1, 64);
    dyn_stage_costs c;
    tcosts_uniform(&c, 1, 2, 1.0, 1.0);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "deadlock"));
    assert_non_null(strstr(err.msg, "rank 0 blocked at instruction 1 (RECV_GRAD_FINISH"));
    assert_non_null(strstr(err.msg, "rank 1 blocked at instruction 1 (RECV_ACT_FINISH"));

    /* Rendezvous: a SEND_FINISH before the peer posts its receive, while the
     * peer first waits on something from this rank, also deadlocks. */
    tplan u;
    tplan_init(&u, 2, 2, 1, 16);
    tplan_add(&u, 0, DYN_OP_SEND_ACT_START, 0, 0, 1, 0, -1, 64);
    tplan_add(&u, 0, DYN_OP_SEND_ACT_FINISH, 0, 0, 1, 0, -1, 64);
    tplan_add(&u, 0, DYN_OP_SEND_GRAD_START, 0, 0, 1, 1, -1, 64);
    tplan_add(&u, 0, DYN_OP_SEND_GRAD_FINISH, 0, 0, 1, 1, -1, 64);
    tplan_add(&u, 1, DYN_OP_RECV_GRAD_START, 0, 1, 0, -1, 0, 64);
    tplan_add(&u, 1, DYN_OP_RECV_GRAD_FINISH, 0, 1, 0, -1, 0, 64);
    tplan_add(&u, 1, DYN_OP_RECV_ACT_START, 0, 1, 0, -1, 1, 64);
    tplan_add(&u, 1, DYN_OP_RECV_ACT_FINISH, 0, 1, 0, -1, 1, 64);
    assert_int_equal(dyn_sim_run(sim, &u.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "deadlock"));
    /* and with the receiver's posts swapped it runs */
    u.p.ranks[1].instrs[0].op = DYN_OP_RECV_ACT_START;
    u.p.ranks[1].instrs[0].buf_out = 1;
    u.p.ranks[1].instrs[1].op = DYN_OP_RECV_ACT_FINISH;
    u.p.ranks[1].instrs[1].buf_out = 1;
    u.p.ranks[1].instrs[2].op = DYN_OP_RECV_GRAD_START;
    u.p.ranks[1].instrs[2].buf_out = 0;
    u.p.ranks[1].instrs[3].op = DYN_OP_RECV_GRAD_FINISH;
    u.p.ranks[1].instrs[3].buf_out = 0;
    assert_int_equal(dyn_sim_run(sim, &u.p, &c, &no_comm, NULL, &err), DYN_OK);
    tplan_free(&u);
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

/* Cycle barriers (DYN_OP_BARRIER of sched.h): the k-th barrier of
 * every rank ends when the last rank reaches it. rank 0: F0 (1 ms), BARRIER,
 * F1 (1 ms); rank 1: F0 (3 ms), BARRIER, F1 (1 ms). The barrier ends at 3,
 * both F1 run [3, 4]. An unequal number of barriers is a deadlock. */
static void test_barrier(void **state)
{
    (void)state;
    tplan t;
    tplan_init(&t, 2, 2, 2, 8);
    tplan_add(&t, 0, DYN_OP_FORWARD, 0, 0, -1, -1, -1, 0);
    tplan_add(&t, 0, DYN_OP_BARRIER, -1, -1, -1, -1, -1, 0);
    tplan_add(&t, 0, DYN_OP_FORWARD, 1, 0, -1, -1, -1, 0);
    tplan_add(&t, 1, DYN_OP_FORWARD, 0, 1, -1, -1, -1, 0);
    tplan_add(&t, 1, DYN_OP_BARRIER, -1, -1, -1, -1, -1, 0);
    tplan_add(&t, 1, DYN_OP_FORWARD, 1, 1, -1, -1, -1, 0);
    dyn_stage_costs c;
    tcosts_uniform(&c, 2, 2, 1.0, 1.0);
    c.fwd_ms[0 * 2 + 1] = 3.0;
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    const dyn_sim_result *res;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, &res, &err), DYN_OK);
    assert_true(res->events[1].start_ms == 1.0 && res->events[1].end_ms == 3.0); /* rank 0 waits */
    assert_true(res->events[2].start_ms == 3.0 && res->events[2].end_ms == 4.0);
    assert_true(res->events[4].start_ms == 3.0 && res->events[4].end_ms == 3.0);
    assert_true(res->events[5].start_ms == 3.0 && res->makespan_ms == 4.0);
    assert_true(fabs(res->bubble_fraction - (1.0 - 6.0 / 8.0)) < 1e-12);
    /* rank 1 without its barrier: rank 0 waits forever */
    t.p.ranks[1].instrs[1].op = DYN_OP_FREE_BUFFER;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "deadlock: rank 0 blocked at instruction 1 (BARRIER"));
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

/* Malformed plans: a dropped receive, a FINISH without START, bad fields. */
static void test_malformed_plans_are_rejected(void **state)
{
    (void)state;
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    dyn_stage_costs c;
    tcosts_uniform(&c, 3, 3, 1.0, 2.0);
    tplan t;
    tplan_1f1b(&t, 3, 3, 64);

    /* drop rank 1's first instruction (a RECV_ACT_START of mb 0) */
    dyn_rank_plan *r1 = &t.p.ranks[1];
    dyn_instr saved = r1->instrs[0];
    assert_int_equal(saved.op, DYN_OP_RECV_ACT_START);
    r1->instrs[0].op = DYN_OP_LOAD_INPUT;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "RECV_ACT_FINISH): no transfer started on slot 0"));
    r1->instrs[0] = saved;
    /* drop the last activation receive (START and FINISH): the last send
     * has no receive */
    int32_t rs = -1, rf = -1;
    for (int32_t i = 0; i < r1->n_instrs; i++) {
        if (r1->instrs[i].op == DYN_OP_RECV_ACT_START && r1->instrs[i].microbatch == 2) rs = i;
        if (r1->instrs[i].op == DYN_OP_RECV_ACT_FINISH && r1->instrs[i].microbatch == 2) rf = i;
    }
    assert_true(rs >= 0 && rf >= 0);
    dyn_instr saved_s = r1->instrs[rs], saved_f = r1->instrs[rf];
    r1->instrs[rs].op = DYN_OP_LOAD_INPUT;
    r1->instrs[rf].op = DYN_OP_LOAD_INPUT;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "rank 0 instruction"));
    assert_non_null(strstr(err.msg, "micro-batch 2 to rank 1): no matching receive"));
    r1->instrs[rs] = saved_s;
    r1->instrs[rf] = saved_f;
    /* swap the order of two activation sends on rank 0 */
    dyn_rank_plan *r0 = &t.p.ranks[0];
    int32_t first = -1, second = -1;
    for (int32_t i = 0; i < r0->n_instrs; i++)
        if (r0->instrs[i].op == DYN_OP_SEND_ACT_START) {
            if (first < 0) first = i;
            else if (second < 0) second = i;
        }
    int32_t mb_a = r0->instrs[first].microbatch;
    r0->instrs[first].microbatch = r0->instrs[second].microbatch;
    r0->instrs[second].microbatch = mb_a;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "rank 0 instruction"));
    assert_non_null(strstr(err.msg, "matched in posting order"));
    r0->instrs[second].microbatch = r0->instrs[first].microbatch;
    r0->instrs[first].microbatch = mb_a;
    assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_OK);

    /* stage on the wrong rank */
    for (int32_t i = 0; i < r1->n_instrs; i++)
        if (r1->instrs[i].op == DYN_OP_FORWARD) {
            r1->instrs[i].stage = 2;
            assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
            assert_non_null(strstr(err.msg, "not on this rank"));
            r1->instrs[i].stage = 1;
            r1->instrs[i].microbatch = 7;
            assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
            assert_non_null(strstr(err.msg, "micro-batch 7 out of range"));
            r1->instrs[i].microbatch = 0;
            break;
        }
    /* costs of the wrong size */
    dyn_stage_costs small;
    tcosts_uniform(&small, 2, 3, 1.0, 2.0);
    assert_int_equal(dyn_sim_run(sim, &t.p, &small, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
    dyn_stage_costs_free(&small);
    /* a FINISH on a slot with no transfer */
    for (int32_t i = 0; i < r1->n_instrs; i++)
        if (r1->instrs[i].op == DYN_OP_RECV_ACT_FINISH) {
            r1->instrs[i].buf_out = 4; /* mb 0's target slot, never received */
            assert_int_equal(dyn_sim_run(sim, &t.p, &c, &no_comm, NULL, &err), DYN_ERR_INVALID_ARG);
            assert_non_null(strstr(err.msg, "no transfer started on slot 4"));
            break;
        }
    dyn_sim_free(sim);
    dyn_stage_costs_free(&c);
    tplan_free(&t);
}

/* Independent check: for free links (latency L, infinite bandwidth, hence no
 * contention) instruction times are the least fixed point of
 *   start(i) = end(previous on the rank),
 *   end(FINISH) = max(start, max(post of send, post of recv) + L),
 *   end(compute) = start + duration,
 * computed here by plain repeated sweeps, on random 1F1B instances with
 * random durations. The simulator must agree on every instruction. */
static void test_matches_fixed_point_on_random_instances(void **state)
{
    (void)state;
    dyn_rng rng;
    dyn_rng_seed(&rng, 11);
    dyn_error err;
    dyn_sim *sim = dyn_sim_create(&err);
    for (int iter = 0; iter < 60; iter++) {
        int32_t S = 1 + (int32_t)dyn_rng_below(&rng, 6), M = 1 + (int32_t)dyn_rng_below(&rng, 9);
        tplan t;
        tplan_1f1b(&t, S, M, 1000);
        dyn_stage_costs c;
        tcosts_uniform(&c, M, S, 0, 0);
        for (int32_t i = 0; i < M * S; i++) {
            c.fwd_ms[i] = 0.1 + dyn_rng_uniform(&rng);
            c.bwd_ms[i] = 0.1 + 2 * dyn_rng_uniform(&rng);
        }
        dyn_sim_options o = {dyn_rng_uniform(&rng) * 0.3, 0.0, 0, 0, 0};
        const dyn_sim_result *res;
        assert_int_equal(dyn_sim_run(sim, &t.p, &c, &o, &res, &err), DYN_OK);

        int32_t N = res->n_instrs;
        double *st = calloc((size_t)N, sizeof(double)), *en = calloc((size_t)N, sizeof(double));
        /* post time of a START for (kind, sender, receiver, mb): found by scan */
        for (int changed = 1, sweeps = 0; changed && sweeps < 10 * N + 10; sweeps++) {
            changed = 0;
            for (int32_t r = 0; r < S; r++) {
                double clock = 0;
                const dyn_rank_plan *rp = &t.p.ranks[r];
                for (int32_t i = 0; i < rp->n_instrs; i++) {
                    const dyn_instr *in = &rp->instrs[i];
                    int32_t k = res->rank_offset[r] + i;
                    double s0 = clock, e0 = clock;
                    int ci = in->microbatch * S + in->stage;
                    if (in->op == DYN_OP_FORWARD) e0 = s0 + c.fwd_ms[ci];
                    if (in->op == DYN_OP_BACKWARD) e0 = s0 + c.bwd_ms[ci];
                    if (in->op == DYN_OP_RECV_ACT_FINISH || in->op == DYN_OP_RECV_GRAD_FINISH ||
                        in->op == DYN_OP_SEND_ACT_FINISH || in->op == DYN_OP_SEND_GRAD_FINISH) {
                        int act = in->op == DYN_OP_RECV_ACT_FINISH || in->op == DYN_OP_SEND_ACT_FINISH;
                        int is_recv = in->op == DYN_OP_RECV_ACT_FINISH || in->op == DYN_OP_RECV_GRAD_FINISH;
                        int32_t snd = is_recv ? in->peer : r, rcv = is_recv ? r : in->peer;
                        double post = 0;
                        for (int side = 0; side < 2; side++) {
                            int32_t q = side ? rcv : snd;
                            int want = side ? (act ? DYN_OP_RECV_ACT_START : DYN_OP_RECV_GRAD_START)
                                            : (act ? DYN_OP_SEND_ACT_START : DYN_OP_SEND_GRAD_START);
                            const dyn_rank_plan *qp = &t.p.ranks[q];
                            for (int32_t j = 0; j < qp->n_instrs; j++)
                                if (qp->instrs[j].op == want && qp->instrs[j].microbatch == in->microbatch &&
                                    qp->instrs[j].peer == (side ? snd : rcv)) {
                                    double pt = st[res->rank_offset[q] + j];
                                    if (pt > post) post = pt;
                                }
                        }
                        if (post + o.link_latency_ms > e0) e0 = post + o.link_latency_ms;
                    }
                    if (s0 != st[k] || e0 != en[k]) changed = 1;
                    st[k] = s0;
                    en[k] = e0;
                    clock = e0;
                }
            }
        }
        for (int32_t k = 0; k < N; k++) {
            assert_true(fabs(st[k] - res->events[k].start_ms) < 1e-9);
            assert_true(fabs(en[k] - res->events[k].end_ms) < 1e-9);
        }
        free(st);
        free(en);
        dyn_stage_costs_free(&c);
        tplan_free(&t);
    }
    dyn_sim_free(sim);
}

/* One workspace across plans of different sizes gives the same bits as a
 * fresh one. */
static void test_workspace_reuse_is_bit_identical(void **state)
{
    (void)state;
    dyn_error err;
    dyn_sim *shared = dyn_sim_create(&err);
    int32_t sizes[][2] = {{4, 8}, {2, 3}, {8, 16}, {4, 8}};
    for (int k = 0; k < 4; k++) {
        int32_t S = sizes[k][0], M = sizes[k][1];
        tplan t;
        tplan_1f1b(&t, S, M, 123456);
        dyn_stage_costs c;
        tcosts_uniform(&c, M, S, 0.7, 1.9);
        for (int32_t i = 0; i < M * S; i++) c.fwd_ms[i] += 0.01 * (i % 7);
        dyn_sim_options o = {0.05, 10.0, 0, 1, 0};
        dyn_sim *fresh = dyn_sim_create(&err);
        const dyn_sim_result *a, *b;
        assert_int_equal(dyn_sim_run(shared, &t.p, &c, &o, &a, &err), DYN_OK);
        assert_int_equal(dyn_sim_run(fresh, &t.p, &c, &o, &b, &err), DYN_OK);
        assert_int_equal(a->n_instrs, b->n_instrs);
        assert_memory_equal(a->events, b->events, sizeof(dyn_sim_event) * (size_t)a->n_instrs);
        assert_true(a->makespan_ms == b->makespan_ms);
        dyn_sim_free(fresh);
        dyn_stage_costs_free(&c);
        tplan_free(&t);
    }
    dyn_sim_free(shared);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1f1b_closed_form),
        cmocka_unit_test(test_1f1b_latency_and_bandwidth_by_hand),
        cmocka_unit_test(test_link_carries_one_transfer_at_a_time),
        cmocka_unit_test(test_memory_accounting_by_hand),
        cmocka_unit_test(test_deadlock_is_reported),
        cmocka_unit_test(test_barrier),
        cmocka_unit_test(test_malformed_plans_are_rejected),
        cmocka_unit_test(test_matches_fixed_point_on_random_instances),
        cmocka_unit_test(test_workspace_reuse_is_bit_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
