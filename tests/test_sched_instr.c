/* test_sched_instr.c — the shared instruction module (src/sched/instr.h):
 * the kind table against what each op's name says, the memory-model step
 * by hand, and the matcher on a hand-written two-rank plan (pairs, FINISH
 * to message, a dropped receive, sends swapped, the stage rule only when
 * asked for). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "sched/instr.h"  /* defines: sched_op, sched_match_plan, sched_mem_step */
#include "sim_testlib.h"  /* defines: tplan_*, tcosts_uniform */

static int has(const char *name, const char *part) { return strstr(name, part) != NULL; }

/* Every op's flags follow from its name (an independent statement of the
 * kinds in sched.h), and every op has a distinct name. */
static void test_table_matches_names(void **state)
{
    (void)state;
    for (int op = 0; op < DYN_OP_COUNT; op++) {
        const char *n = dyn_op_name((dyn_op)op);
        assert_string_not_equal(n, "?");
        for (int q = 0; q < op; q++) assert_string_not_equal(n, dyn_op_name((dyn_op)q));
        unsigned fl = sched_op(op);
        int compute = strcmp(n, "FORWARD") == 0 || has(n, "BACKWARD");
        assert_int_equal(!!(fl & SCHED_OP_COMPUTE), compute);
        assert_int_equal(!!(fl & SCHED_OP_SEND), has(n, "SEND_"));
        assert_int_equal(!!(fl & SCHED_OP_RECV), has(n, "RECV_"));
        assert_int_equal(!!(fl & SCHED_OP_START), has(n, "_START"));
        assert_int_equal(!!(fl & SCHED_OP_FINISH), has(n, "_FINISH"));
        assert_int_equal(!!(fl & SCHED_OP_GRAD), has(n, "GRAD"));
        assert_int_equal(!!(fl & SCHED_OP_BARRIER), strcmp(n, "BARRIER") == 0);
        assert_int_equal(!!(fl & SCHED_OP_FREES), strcmp(n, "FREE_BUFFER") == 0);
        assert_int_equal(!!(fl & SCHED_OP_NO_MB), strcmp(n, "FREE_BUFFER") == 0 || strcmp(n, "BARRIER") == 0);
        /* Slots: loads, compute except W, receive STARTs write; compute
         * except W and send STARTs read. */
        int w = strcmp(n, "BACKWARD_WEIGHT") == 0;
        assert_int_equal(!!(fl & SCHED_OP_WRITES),
                         strcmp(n, "LOAD_INPUT") == 0 || (compute && !w) || (has(n, "RECV_") && has(n, "_START")));
        assert_int_equal(!!(fl & SCHED_OP_READS), (compute && !w) || (has(n, "SEND_") && has(n, "_START")));
        int step = sched_op_peer_step(op);
        if (!has(n, "SEND_") && !has(n, "RECV_")) assert_int_equal(step, 0);
        else assert_int_equal(step, (has(n, "SEND_ACT") || has(n, "RECV_GRAD")) ? 1 : -1);
    }
    assert_int_equal(sched_op(DYN_OP_COUNT), 0);
    assert_int_equal(sched_op(-1), 0);
    assert_string_equal(dyn_op_name((dyn_op)DYN_OP_COUNT), "?");
}

/* The memory step on one (mb, stage): FORWARD acquires its stored
 * activations, BACKWARD and BACKWARD_WEIGHT release them, B does neither;
 * every compute uses its peak while it runs; nothing else counts. */
static void test_memory_step_by_hand(void **state)
{
    (void)state;
    dyn_stage_costs c;
    tcosts_uniform(&c, 2, 3, 1.0, 2.0);
    c.stored_mb[1 * 3 + 2] = 7.5;
    c.peak_mb[1 * 3 + 2] = 2.25;
    dyn_instr in;
    memset(&in, 0, sizeof in);
    in.microbatch = 1;
    in.stage = 2;
    const int ops[] = {DYN_OP_FORWARD, DYN_OP_BACKWARD, DYN_OP_BACKWARD_INPUT, DYN_OP_BACKWARD_WEIGHT,
                       DYN_OP_LOAD_INPUT, DYN_OP_SEND_ACT_START, DYN_OP_FREE_BUFFER};
    const double acq[] = {7.5, 0, 0, 0, 0, 0, 0}, rel[] = {0, 7.5, 0, 7.5, 0, 0, 0},
                 tr[] = {2.25, 2.25, 2.25, 2.25, 0, 0, 0};
    for (int i = 0; i < 7; i++) {
        in.op = (uint8_t)ops[i];
        sched_mem_delta d = sched_mem_step(&c, &in);
        assert_true(d.acquire == acq[i] && d.release == rel[i] && d.transient == tr[i]);
    }
    dyn_stage_costs_free(&c);
}

/* A two-rank, two-micro-batch forward-only exchange: rank 0 sends the
 * activations of mb 0 and 1 to rank 1. */
static void two_rank_plan(tplan *t)
{
    tplan_init(t, 2, 2, 2, 16);
    for (int32_t mb = 0; mb < 2; mb++) {
        tplan_add(t, 0, DYN_OP_SEND_ACT_START, mb, 0, 1, mb, -1, 64 + mb);
        tplan_add(t, 0, DYN_OP_SEND_ACT_FINISH, mb, 0, 1, mb, -1, 64 + mb);
    }
    for (int32_t mb = 0; mb < 2; mb++) {
        tplan_add(t, 1, DYN_OP_RECV_ACT_START, mb, 1, 0, -1, mb, 64 + mb);
        tplan_add(t, 1, DYN_OP_RECV_ACT_FINISH, mb, 1, 0, -1, mb, 64 + mb);
    }
}

static void test_matcher_pairs_in_posting_order(void **state)
{
    (void)state;
    tplan t;
    two_rank_plan(&t);
    sched_match m;
    memset(&m, 0, sizeof m);
    dyn_error err;
    assert_int_equal(sched_match_plan(&m, &t.p, 1, &err), DYN_OK);
    assert_int_equal(m.n_msgs, 2);
    int32_t n0 = t.p.ranks[0].n_instrs;
    for (int32_t x = 0; x < 2; x++) {
        /* message x: rank 0 instruction 2x with rank 1 instruction 2x */
        int32_t want = m.msg_of[2 * x];
        assert_int_equal(m.msg_send[want], 2 * x);
        assert_int_equal(m.msg_recv[want], n0 + 2 * x);
        assert_int_equal(m.msg_src[want], 0);
        assert_int_equal(m.msg_dst[want], 1);
        assert_int_equal(m.msg_of[2 * x + 1], want);      /* SEND FINISH */
        assert_int_equal(m.msg_of[n0 + 2 * x], want);     /* RECV START */
        assert_int_equal(m.msg_of[n0 + 2 * x + 1], want); /* RECV FINISH */
    }
    /* Sends swapped on rank 0: the first send now names mb 1. */
    t.p.ranks[0].instrs[0].microbatch = 1;
    t.p.ranks[0].instrs[2].microbatch = 0;
    assert_int_equal(sched_match_plan(&m, &t.p, 1, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "out of order"));
    t.p.ranks[0].instrs[0].microbatch = 0;
    t.p.ranks[0].instrs[2].microbatch = 1;
    /* A receive naming the wrong stage: only the stage rule notices. */
    t.p.ranks[1].instrs[2].stage = 0;
    assert_int_equal(sched_match_plan(&m, &t.p, 0, &err), DYN_OK);
    assert_int_equal(sched_match_plan(&m, &t.p, 1, &err), DYN_ERR_INVALID_ARG);
    t.p.ranks[1].instrs[2].stage = 1;
    /* Different bytes on the two sides. */
    t.p.ranks[1].instrs[0].bytes = 99;
    assert_int_equal(sched_match_plan(&m, &t.p, 0, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "99 bytes"));
    t.p.ranks[1].instrs[0].bytes = 64;
    /* A dropped receive (START and FINISH): the second send has none. */
    t.p.ranks[1].n_instrs = 2;
    assert_int_equal(sched_match_plan(&m, &t.p, 1, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "rank 0 instruction 2 (SEND_ACT_START micro-batch 1 to rank 1): no matching receive"));
    /* A FINISH without its START. */
    t.p.ranks[1].n_instrs = 4;
    t.p.ranks[1].instrs[0].op = DYN_OP_LOAD_INPUT;
    assert_int_equal(sched_match_plan(&m, &t.p, 1, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "rank 1 instruction 1 (RECV_ACT_FINISH): no transfer started on slot 0"));
    sched_match_free(&m);
    tplan_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_matches_names),
        cmocka_unit_test(test_memory_step_by_hand),
        cmocka_unit_test(test_matcher_pairs_in_posting_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
