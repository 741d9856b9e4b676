/* test_sched_validate.c — the plan validator: a hand-written two-rank plan
 * that is valid, the same plan with its sends swapped (out of order) and
 * with its gradient receives posted too late (a real deadlock), and
 * mutations of a generated plan (dropped receive, double free, read before
 * write, missing backward, leaked buffer, missing weight gradient), each
 * caught with a message naming the rank and the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_testlib.h" /* defines: tl_build_ok, tl_equal_costs, tl_random_costs */

static dyn_instr I(int op, int mb, int stage, int peer, int in, int out)
{
    dyn_instr x;
    memset(&x, 0, sizeof x);
    x.op = (uint8_t)op;
    x.microbatch = mb;
    x.stage = stage;
    x.peer = peer;
    x.buf_in = in;
    x.buf_out = out;
    return x;
}

/* Two ranks, one stage each, two micro-batches; rank 0 forwards both, then
 * sends both, posts both gradient receives, finishes the sends, and runs
 * both backwards. */
static void hand_plan(dyn_exec_plan *p, dyn_instr *r0, dyn_instr *r1, int32_t *stage_rank,
                      dyn_mb_shape *shapes, dyn_rank_plan *ranks)
{
    int i = 0;
    r0[i++] = I(DYN_OP_LOAD_INPUT, 0, 0, -1, -1, 0);
    r0[i++] = I(DYN_OP_FORWARD, 0, 0, -1, 0, 1);
    r0[i++] = I(DYN_OP_FREE_BUFFER, 0, 0, -1, 0, -1);
    r0[i++] = I(DYN_OP_LOAD_INPUT, 1, 0, -1, -1, 0);
    r0[i++] = I(DYN_OP_FORWARD, 1, 0, -1, 0, 2);
    r0[i++] = I(DYN_OP_FREE_BUFFER, 1, 0, -1, 0, -1);
    r0[i++] = I(DYN_OP_SEND_ACT_START, 0, 0, 1, 1, -1); /* 6 */
    r0[i++] = I(DYN_OP_SEND_ACT_START, 1, 0, 1, 2, -1); /* 7 */
    r0[i++] = I(DYN_OP_RECV_GRAD_START, 0, 0, 1, -1, 0); /* 8 */
    r0[i++] = I(DYN_OP_RECV_GRAD_START, 1, 0, 1, -1, 3); /* 9 */
    r0[i++] = I(DYN_OP_SEND_ACT_FINISH, 0, 0, 1, 1, -1);
    r0[i++] = I(DYN_OP_FREE_BUFFER, 0, 0, -1, 1, -1);
    r0[i++] = I(DYN_OP_SEND_ACT_FINISH, 1, 0, 1, 2, -1);
    r0[i++] = I(DYN_OP_FREE_BUFFER, 1, 0, -1, 2, -1);
    r0[i++] = I(DYN_OP_RECV_GRAD_FINISH, 0, 0, 1, -1, 0);
    r0[i++] = I(DYN_OP_BACKWARD, 0, 0, -1, 0, -1);
    r0[i++] = I(DYN_OP_FREE_BUFFER, 0, 0, -1, 0, -1);
    r0[i++] = I(DYN_OP_RECV_GRAD_FINISH, 1, 0, 1, -1, 3);
    r0[i++] = I(DYN_OP_BACKWARD, 1, 0, -1, 3, -1);
    r0[i++] = I(DYN_OP_FREE_BUFFER, 1, 0, -1, 3, -1);
    assert_int_equal(i, 20);
    i = 0;
    for (int mb = 0; mb < 2; mb++) {
        r1[i++] = I(DYN_OP_RECV_ACT_START, mb, 1, 0, -1, 0);
        r1[i++] = I(DYN_OP_RECV_ACT_FINISH, mb, 1, 0, -1, 0);
        r1[i] = I(DYN_OP_LOAD_INPUT, mb, 1, -1, -1, 1);
        r1[i++].flags = DYN_INSTR_FLAG_TARGETS;
        r1[i++] = I(DYN_OP_FORWARD, mb, 1, -1, 0, -1);
        r1[i++] = I(DYN_OP_FREE_BUFFER, mb, 1, -1, 0, -1);
        r1[i++] = I(DYN_OP_FREE_BUFFER, mb, 1, -1, 1, -1);
        r1[i++] = I(DYN_OP_BACKWARD, mb, 1, -1, -1, 0);
        r1[i++] = I(DYN_OP_SEND_GRAD_START, mb, 1, 0, 0, -1);
        r1[i++] = I(DYN_OP_SEND_GRAD_FINISH, mb, 1, 0, 0, -1);
        r1[i++] = I(DYN_OP_FREE_BUFFER, mb, 1, -1, 0, -1);
    }
    assert_int_equal(i, 20);
    memset(p, 0, sizeof *p);
    memset(shapes, 0, 2 * sizeof *shapes);
    stage_rank[0] = 0;
    stage_rank[1] = 1;
    ranks[0] = (dyn_rank_plan){20, 4, r0};
    ranks[1] = (dyn_rank_plan){20, 2, r1};
    p->schedule = DYN_SCHEDULE_1F1B;
    p->n_ranks = 2;
    p->n_stages = 2;
    p->n_microbatches = 2;
    p->stage_rank = stage_rank;
    p->mb_shape = shapes;
    p->ranks = ranks;
}

#define HAND_PLAN                                                                                  \
    dyn_exec_plan p;                                                                               \
    dyn_instr r0[20], r1[20];                                                                      \
    int32_t stage_rank[2];                                                                         \
    dyn_mb_shape shapes[2];                                                                        \
    dyn_rank_plan ranks[2];                                                                        \
    hand_plan(&p, r0, r1, stage_rank, shapes, ranks)

static void expect_invalid(const dyn_exec_plan *p, const char *a, const char *b)
{
    dyn_error err;
    dyn_error_clear(&err);
    dyn_status st = dyn_exec_plan_validate(p, &err);
    if (st == DYN_OK) fail_msg("mutation not caught (wanted '%s')", a);
    if (getenv("DYN_TEST_VERBOSE")) printf("caught: %s\n", err.msg);
    if (strstr(err.msg, a) == NULL || (b && strstr(err.msg, b) == NULL))
        fail_msg("wanted '%s' and '%s' in: %s", a, b ? b : "", err.msg);
}

static void test_hand_plan_valid(void **state)
{
    (void)state;
    HAND_PLAN;
    dyn_error err;
    if (dyn_exec_plan_validate(&p, &err) != DYN_OK) fail_msg("%s", err.msg);
}

static void test_swapped_sends_out_of_order(void **state)
{
    (void)state;
    HAND_PLAN;
    dyn_instr t = r0[6];
    r0[6] = r0[7];
    r0[7] = t;
    expect_invalid(&p, "out of order", "rank 1 instr");
}

static void test_late_receive_deadlocks(void **state)
{
    (void)state;
    HAND_PLAN;
    /* Post rank 0's gradient receives after its send finishes: rank 0 waits
     * for rank 1 to post the receive of micro-batch 1, which rank 1 only
     * does after finishing its gradient send of micro-batch 0, which waits
     * for rank 0's gradient receive. */
    dyn_instr g0 = r0[8], g1 = r0[9];
    memmove(&r0[8], &r0[10], 4 * sizeof(dyn_instr));
    r0[12] = g0;
    r0[13] = g1;
    expect_invalid(&p, "deadlock", "rank 0 instr 10 (SEND_ACT_FINISH mb 1");
}

/* Mutations of a generated plan: build 1F1B S=3 M=4, copy rank r's list,
 * apply f, validate. */
typedef void (*mutate_fn)(dyn_rank_plan *rp);

static int find(const dyn_rank_plan *rp, int op, int mb)
{
    for (int i = 0; i < rp->n_instrs; i++)
        if (rp->instrs[i].op == op && (mb < 0 || rp->instrs[i].microbatch == mb)) return i;
    fail_msg("op %d mb %d not found", op, mb);
    return -1;
}

static void del(dyn_rank_plan *rp, int i)
{
    memmove(&rp->instrs[i], &rp->instrs[i + 1], (size_t)(rp->n_instrs - i - 1) * sizeof(dyn_instr));
    rp->n_instrs--;
}

static void mutate_generated(int rank, void (*f)(dyn_rank_plan *), const char *a, const char *b,
                             dyn_schedule kind)
{
    dyn_stage_costs c;
    tl_equal_costs(&c, 4, 3, 1, 2);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 3;
    dyn_exec_plan p;
    tl_build_ok(kind, &c, &o, &p);
    dyn_rank_plan *rp = &p.ranks[rank];
    /* room for one duplicated instruction */
    dyn_instr *bigger = realloc(rp->instrs, (size_t)(rp->n_instrs + 1) * sizeof(dyn_instr));
    assert_non_null(bigger);
    rp->instrs = bigger;
    f(rp);
    expect_invalid(&p, a, b);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

static void drop_recv(dyn_rank_plan *rp)
{
    del(rp, find(rp, DYN_OP_RECV_ACT_START, 2));
}
static void double_free(dyn_rank_plan *rp)
{
    int i = find(rp, DYN_OP_FREE_BUFFER, 1);
    memmove(&rp->instrs[i + 1], &rp->instrs[i], (size_t)(rp->n_instrs - i) * sizeof(dyn_instr));
    rp->n_instrs++;
}
static void drop_load(dyn_rank_plan *rp)
{
    del(rp, find(rp, DYN_OP_LOAD_INPUT, 1));
}
static void forward_before_recv(dyn_rank_plan *rp)
{
    int f = find(rp, DYN_OP_FORWARD, 1), r = find(rp, DYN_OP_RECV_ACT_FINISH, 1);
    assert_true(r < f);
    dyn_instr t = rp->instrs[f];
    memmove(&rp->instrs[r + 1], &rp->instrs[r], (size_t)(f - r) * sizeof(dyn_instr));
    rp->instrs[r] = t;
}
static void drop_backward(dyn_rank_plan *rp)
{
    del(rp, find(rp, DYN_OP_BACKWARD, 2));
}
static void drop_last_free(dyn_rank_plan *rp)
{
    for (int i = rp->n_instrs - 1; i >= 0; i--)
        if (rp->instrs[i].op == DYN_OP_FREE_BUFFER) {
            del(rp, i);
            return;
        }
}
static void drop_weight(dyn_rank_plan *rp)
{
    del(rp, find(rp, DYN_OP_BACKWARD_WEIGHT, 3));
}
static void wrong_peer(dyn_rank_plan *rp)
{
    rp->instrs[find(rp, DYN_OP_SEND_ACT_START, 0)].peer = 0;
}

/* A matched pair whose two sides disagree on what the tensor is. */
static void recv_bytes(dyn_rank_plan *rp)
{
    rp->instrs[find(rp, DYN_OP_RECV_ACT_START, 1)].bytes += 4;
}
/* Both halves of rank 1's send changed alike: only the pair check (against
 * rank 0's receive) can see it. */
static void send_bytes(dyn_rank_plan *rp)
{
    rp->instrs[find(rp, DYN_OP_SEND_GRAD_START, 2)].bytes *= 2;
    rp->instrs[find(rp, DYN_OP_SEND_GRAD_FINISH, 2)].bytes *= 2;
}
static void recv_finish_bytes(dyn_rank_plan *rp)
{
    rp->instrs[find(rp, DYN_OP_RECV_ACT_FINISH, 1)].bytes += 4;
}
static void send_finish_bytes(dyn_rank_plan *rp)
{
    rp->instrs[find(rp, DYN_OP_SEND_ACT_FINISH, 0)].bytes += 4;
}
static void recv_stage(dyn_rank_plan *rp)
{
    rp->instrs[find(rp, DYN_OP_RECV_ACT_START, 1)].stage = 2;
    rp->instrs[find(rp, DYN_OP_RECV_ACT_FINISH, 1)].stage = 2;
}
static void recv_finish_stage(dyn_rank_plan *rp)
{
    rp->instrs[find(rp, DYN_OP_RECV_ACT_FINISH, 1)].stage = 2;
}
static void send_finish_mb(dyn_rank_plan *rp)
{
    rp->instrs[find(rp, DYN_OP_SEND_ACT_FINISH, 0)].microbatch = 3;
}

static void test_mutations_of_generated_plan(void **state)
{
    (void)state;
    mutate_generated(1, drop_recv, "rank 1 instr", "not started", DYN_SCHEDULE_1F1B);
    mutate_generated(1, double_free, "double free", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(0, drop_load, "read before write", "rank 0", DYN_SCHEDULE_1F1B);
    mutate_generated(2, forward_before_recv, "read before receive finished", "rank 2", DYN_SCHEDULE_1F1B);
    mutate_generated(0, drop_backward, "missing its backward", "micro-batch 2 stage 0", DYN_SCHEDULE_1F1B);
    mutate_generated(1, drop_last_free, "leaked buffer", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(2, drop_weight, "missing its weight-gradient backward", "micro-batch 3 stage 2", DYN_SCHEDULE_ZB);
    mutate_generated(1, wrong_peer, "peer 0 is not the rank", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(1, recv_bytes, "byte", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(1, send_bytes, "disagree on the bytes", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(1, recv_finish_bytes, "byte count", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(1, send_finish_bytes, "byte count", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(1, recv_stage, "stage", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(1, recv_finish_stage, "stage", "rank 1", DYN_SCHEDULE_1F1B);
    mutate_generated(1, send_finish_mb, "micro-batch", "rank 1", DYN_SCHEDULE_1F1B);
}

static void test_barrier_count_mismatch(void **state)
{
    (void)state;
    dyn_stage_costs c;
    tl_equal_costs(&c, 3, 2, 1, 2);
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = 2;
    dyn_exec_plan p;
    tl_build_ok(DYN_SCHEDULE_CYCLIC, &c, &o, &p);
    del(&p.ranks[1], find(&p.ranks[1], DYN_OP_BARRIER, -1));
    expect_invalid(&p, "barriers", "rank 1");
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_plan_valid),
        cmocka_unit_test(test_swapped_sends_out_of_order),
        cmocka_unit_test(test_late_receive_deadlocks),
        cmocka_unit_test(test_mutations_of_generated_plan),
        cmocka_unit_test(test_barrier_count_mismatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
