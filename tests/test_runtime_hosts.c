/* test_runtime_hosts.c — the host-list helpers of the runtime's process group
 * (group.h) on hand-made groups, without MPI: the header's host summary
 * and the check for a replica split over hosts, for the placements mpirun
 * can produce (by slot, by node, uneven slots, one host, long lists); it
 * starts no process, so it needs no timeout. The
 * expected strings are written out by hand from the rank layout
 * w = replica * S + stage. tests/test_netns.c checks the same on real
 * ranks across namespace hosts. Also the launcher's hostfile check
 * (hostfile.h): slot sums worked by hand, and bad files refused with
 * file:line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/group.h"
#include "runtime/hostfile.h"

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

static char hf_path[64];

/* Write n bytes to a fresh temporary hostfile (its path: hf_path). */
static void hf_write(const char *bytes, size_t n)
{
    snprintf(hf_path, sizeof hf_path, "/tmp/dyn_hostfile_XXXXXX");
    int fd = mkstemp(hf_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, n), (ssize_t)n);
    close(fd);
}

static void hf_good(const char *text, int hosts, long long slots)
{
    hf_write(text, strlen(text));
    rt_hostfile_info info;
    dyn_error e;
    if (rt_hostfile_read(hf_path, &info, &e) != DYN_OK) fail_msg("'%s': %s", text, e.msg);
    assert_int_equal(info.hosts, hosts);
    assert_int_equal(info.slots, slots);
    unlink(hf_path);
}

/* Refused; the message names the file and, when given, ":line: " and needle. */
static void hf_bad(const char *bytes, size_t n, int line, const char *needle)
{
    hf_write(bytes, n);
    rt_hostfile_info info;
    dyn_error e;
    assert_int_not_equal(rt_hostfile_read(hf_path, &info, &e), DYN_OK);
    char where[96];
    if (line > 0) snprintf(where, sizeof where, "%s:%d: ", hf_path, line);
    else snprintf(where, sizeof where, "%s: ", hf_path);
    if (strstr(e.msg, where) == NULL || strstr(e.msg, needle) == NULL)
        fail_msg("got '%s', want '%s' and '%s'", e.msg, where, needle);
    unlink(hf_path);
}

/* A string literal's bytes, NULs inside included. */
#define HF_BAD(lit, line, needle) hf_bad(lit, sizeof lit - 1, line, needle)

static void test_hostfile(void **state)
{
    (void)state;
    hf_good("h0 slots=2\nh1 slots=2\n", 2, 4);
    hf_good("# cluster\n\nh0 slots=3 max_slots=4 # first\n  h1\tslots=1\r\n", 2, 4);
    hf_good("user@node-1.example slots=8", 1, 8); /* no final newline */
    hf_good("h0 slots=2\nh1\n", 2, -1);           /* h1's cores: mpirun counts them */
    HF_BAD("h0 slots=abc\n", 1, "slots=abc");
    HF_BAD("h0 slots=2\nh1 slots=0\n", 2, "slots=0");
    HF_BAD("h0 slots=-1\n", 1, "slots=-1");
    HF_BAD("h0 slots=99999999999999999999\n", 1, "slots=");
    HF_BAD("h0 slots=4 max_slots=2\n", 1, "above max_slots=2");
    HF_BAD("h0 slots=2\nh1 colour=red\n", 2, "colour");
    HF_BAD("h0 2\n", 1, "'2'");
    HF_BAD("", 0, "no hosts");
    HF_BAD("# nothing\n\n", 0, "no hosts");
    HF_BAD("h0\n\xad\x01\xfe\n", 2, "byte 0xad");
    HF_BAD("h0\nh\0x\n", 2, "byte 0x00");
    /* a FIFO would block the reader: refused without opening it */
    snprintf(hf_path, sizeof hf_path, "/tmp/dyn_hostfifo_%d", (int)getpid());
    assert_int_equal(mkfifo(hf_path, 0600), 0);
    rt_hostfile_info info;
    dyn_error e;
    assert_int_not_equal(rt_hostfile_read(hf_path, &info, &e), DYN_OK);
    assert_non_null(strstr(e.msg, "not a regular file"));
    unlink(hf_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placements),
        cmocka_unit_test(test_cut_to_size),
        cmocka_unit_test(test_hostfile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
