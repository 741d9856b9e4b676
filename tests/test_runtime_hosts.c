/* test_runtime_hosts.c — the host-list helpers of the runtime's process group
 * (group.h) on hand-made groups, without MPI: the header's host summary
 * and the check for a replica split over hosts, for the placements mpirun
 * can produce (by slot, by node, uneven slots, one host, long lists); it
 * starts no process, so it needs no timeout. The
 * expected strings are written out by hand from the rank layout
 * w = replica * S + stage. tests/test_netns.c checks the same on real
 * ranks across namespace hosts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "runtime/group.h"

/* A group of S x D ranks whose rank w runs on names[w]. */
static dyn_rt_group group_of(int stages, int dp, const char *const *names, char (*hosts)[DYN_RT_HOST_LEN])
{
    dyn_rt_group g;
    memset(&g, 0, sizeof g);
    g.stages = stages;
    g.dp = dp;
    g.world_size = stages * dp;
    for (int w = 0; w < g.world_size; w++) snprintf(hosts[w], DYN_RT_HOST_LEN, "%s", names[w]);
    g.hosts = hosts;
    return g;
}

static void expect(int stages, int dp, const char *const *names, const char *summary, int split)
{
    char hosts[16][DYN_RT_HOST_LEN];
    dyn_rt_group g = group_of(stages, dp, names, hosts);
    char buf[256];
    dyn_rt_group_hosts_describe(&g, buf, sizeof buf);
    assert_string_equal(buf, summary);
    assert_int_equal(dyn_rt_group_split_replica(&g), split);
}

static void test_placements(void **state)
{
    (void)state;
    /* by slot, 2 slots per host, S = 2: each replica on its own host */
    expect(2, 2, (const char *const[]){"h0", "h0", "h1", "h1"}, "h0 (ranks 0-1), h1 (ranks 2-3)", -1);
    /* 3 slots per host: replica 1 = ranks 2, 3 spans h0 and h1 */
    expect(2, 2, (const char *const[]){"h0", "h0", "h0", "h1"}, "h0 (ranks 0-2), h1 (rank 3)", 1);
    /* by node (round robin): every replica spans both hosts; the first is 0 */
    expect(2, 2, (const char *const[]){"a", "b", "a", "b"}, "a (ranks 0,2), b (ranks 1,3)", 0);
    /* one host */
    expect(4, 1, (const char *const[]){"vm", "vm", "vm", "vm"}, "vm (ranks 0-3)", -1);
    /* S = 1: a pipeline never spans hosts */
    expect(1, 3, (const char *const[]){"x", "y", "z"}, "x (rank 0), y (rank 1), z (rank 2)", -1);
    /* two replicas per host, then a third host */
    expect(2, 3, (const char *const[]){"p", "p", "p", "p", "q", "q"}, "p (ranks 0-3), q (ranks 4-5)", -1);
}

/* A summary longer than the buffer is cut and stays NUL-terminated. */
static void test_cut_to_size(void **state)
{
    (void)state;
    char hosts[16][DYN_RT_HOST_LEN];
    const char *names[16];
    char own[16][16];
    for (int w = 0; w < 16; w++) {
        snprintf(own[w], sizeof own[w], "node-%02d", w);
        names[w] = own[w];
    }
    dyn_rt_group g = group_of(1, 16, names, hosts);
    char full[1024], small[40];
    dyn_rt_group_hosts_describe(&g, full, sizeof full);
    assert_int_equal(strncmp(full, "node-00 (rank 0), node-01 (rank 1), ", 36), 0);
    assert_non_null(strstr(full, "node-15 (rank 15)"));
    memset(small, 'X', sizeof small);
    dyn_rt_group_hosts_describe(&g, small, sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_memory_equal(small, full, sizeof small - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placements),
        cmocka_unit_test(test_cut_to_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
