/* test_netns.c — `dynapipe train --hostfile` across hosts, the hosts being
 * Linux network namespaces joined by a bridge (tests/netns/hosts.sh).
 *
 * The executable re-executes itself under `tests/netns/hosts.sh 2`, which
 * makes namespaces h0 and h1 (10.213.0.1 and .2 on a private /24 that
 * exists only inside them), runs this program beside them and removes them
 * however it ends (EXIT trap; stale ones of a killed run are removed at the
 * next start). Where namespaces cannot be made, hosts.sh prints one "SKIP"
 * line and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE in
 * CMakeLists.txt), never as a pass.
 *
 * mpirun runs in h0 and starts h1's ranks without sshd through
 * `plm_rsh_agent tests/netns/agent.sh` (the agent enters the host's
 * namespace under its own UTS host name); the TCP transports are pinned to
 * the test subnet. Every mpirun runs under `timeout`, and the Open MPI
 * settings travel as OMPI_MCA_* variables, so the command is the user's
 * `dynapipe train --hostfile FILE` unchanged.
 *
 * What is checked, against independent facts:
 *  - a 2-stage x 2-replica training step across h0 and h1 gives the same
 *    parameters as the same step on one host and as one process running
 *    the whole model (largest difference per tensor relative to the
 *    tensor's largest value at most 1e-5, as test_runtime.c measures);
 *  - ranks are where the hostfile and the layout w = replica * S + stage
 *    put them (h0 slots=2, h1 slots=2: ranks 0-1 on h0, 2-3 on h1): the
 *    trace's thread names, the metrics' "hosts" and the log header say so;
 *    with 3 slots each, replica 1 spans both hosts and the log says so;
 *  - h1's link cut mid-run (`ip link set eth0 down` in h1) ends the job
 *    non-zero with the runtime's timeout message, printed within 15 s of
 *    the cut (deadline 5 s), the job over within 40 s (the launcher's
 *    10 s grace for mpirun after a rank's failure), not ended by
 *    `timeout`; no weights are written;
 *  - an unreadable hostfile is one line before any rank starts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli_testlib.h"
#include "dynapipe/model_config.h"
#include "model/model.h"

#define SKIP_CODE 77
#define TRAIN_ARGS                                                                                         \
    "--model gpt --model-config gpt-tiny --layers 4 --samples 2000 --data builtin:3 --global-batch-tokens 2048 --max-seqlen 256 " \
    "--lr 0.001 --warmup 0 --adam-eps 1"

static char hostfile[700], hostfile_split[700];

/* `timeout 300 CMD` with stdout and stderr captured; run in the namespace
 * of host `host` through the agent (NULL: here, one host). Exit code. */
static int run_on(const char *host, const char *train_args)
{
    const char *cli = getenv("DYN_CLI");
    assert_non_null(cli);
    char inner[4096], cmd[8192];
    int w = snprintf(inner, sizeof inner, "'%s' train %s %s", cli, TRAIN_ARGS, train_args);
    assert_true(w > 0 && (size_t)w < sizeof inner);
    if (host == NULL) {
        w = snprintf(cmd, sizeof cmd,
                     CLI_TRAIN_ENV " timeout 300 %s >'%s' 2>'%s'",
                     inner, out_path, err_path);
    } else {
        const char *agent = getenv("DYN_NETNS_AGENT"), *subnet = getenv("DYN_NETNS_SUBNET");
        assert_non_null(agent);
        assert_non_null(subnet);
        w = snprintf(cmd, sizeof cmd,
                     CLI_TRAIN_ENV " OMPI_MCA_plm_rsh_agent='%s' OMPI_MCA_btl_tcp_if_include=%s OMPI_MCA_oob_tcp_if_include=%s "
                     "timeout 300 '%s' %s \"%s\" >'%s' 2>'%s'",
                     agent, subnet, subnet, agent, host, inner, out_path, err_path);
    }
    assert_true(w > 0 && (size_t)w < sizeof cmd);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void must_run(const char *host, const char *args)
{
    int rc = run_on(host, args);
    if (rc != 0) {
        char *e = slurp(err_path);
        fail_msg("dynapipe train %s (on %s): exit %d: %s", args, host ? host : "one host", rc, e);
    }
}

/* Largest |a - b| per tensor relative to the tensor's largest |a|, over two
 * weight files of the 4-layer gpt-tiny these runs train. */
static double weights_diff(const char *a_path, const char *b_path)
{
    dyn_model_config cfg;
    dyn_error err;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, &err), DYN_OK);
    cfg.n_layers = 4;
    cfg.max_seqlen = 256;
    dyn_model *a = dyn_model_create(&cfg, 7, &err), *b = dyn_model_create(&cfg, 8, &err);
    assert_non_null(a);
    assert_non_null(b);
    if (dyn_model_load(a, a_path, &err) != DYN_OK || dyn_model_load(b, b_path, &err) != DYN_OK)
        fail_msg("loading weights: %s", err.msg);
    const float *pa = dyn_model_params(a), *pb = dyn_model_params(b);
    double worst = 0;
    for (int t = 0; t < dyn_model_num_tensors(a); t++) {
        const dyn_param_tensor *T = dyn_model_tensor(a, t);
        double amax = 0, dmax = 0;
        for (size_t i = 0; i < T->numel; i++) {
            double x = pa[T->offset + i], d = fabs(x - pb[T->offset + i]);
            if (fabs(x) > amax) amax = fabs(x);
            if (d > dmax) dmax = d;
        }
        double rel = amax > 0 ? dmax / amax : dmax;
        if (rel > worst) worst = rel;
    }
    dyn_model_free(a);
    dyn_model_free(b);
    return worst;
}

static int contains(const char *text, const char *needle) { return strstr(text, needle) != NULL; }

static void test_step_across_hosts(void **state)
{
    (void)state;
    char multi[700], single[700], one[700], trace[700], metrics[700], args[4096];
    snprintf(multi, sizeof multi, "%s/multi.safetensors", dir);
    snprintf(single, sizeof single, "%s/single.safetensors", dir);
    snprintf(one, sizeof one, "%s/one.safetensors", dir);
    snprintf(trace, sizeof trace, "%s/trace.json", dir);
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", dir);

    snprintf(args, sizeof args, "--stages 1 --dp 1 --steps 1 --quiet --save '%s'", one);
    must_run(NULL, args);
    snprintf(args, sizeof args, "--stages 2 --dp 2 --schedule 1f1b --steps 1 --quiet --save '%s'", single);
    must_run(NULL, args);
    snprintf(args, sizeof args,
             "--hostfile '%s' --stages 2 --dp 2 --schedule 1f1b --steps 1 --save '%s' --trace '%s' --metrics '%s'",
             hostfile, multi, trace, metrics);
    must_run("h0", args);

    double d_single = weights_diff(single, multi), d_one = weights_diff(one, multi);
    print_message("  2x2 on h0+h1 vs 2x2 on one host: max relative difference %.2e\n", d_single);
    print_message("  2x2 on h0+h1 vs one process:     max relative difference %.2e\n", d_one);
    assert_true(d_single <= 1e-5);
    assert_true(d_one <= 1e-5);

    /* where the ranks ran: hostfile h0 slots=2, h1 slots=2, w = replica*2 + stage */
    char *log = slurp(err_path), *tr = slurp(trace), *me = slurp(metrics);
    static const char *const names[] = {"\"rank 0 (stage 0, replica 0, h0)\"", "\"rank 1 (stage 1, replica 0, h0)\"",
                                        "\"rank 2 (stage 0, replica 1, h1)\"", "\"rank 3 (stage 1, replica 1, h1)\""};
    for (int w = 0; w < 4; w++)
        if (!contains(tr, names[w])) fail_msg("trace has no thread %s", names[w]);
    if (!contains(me, "\"hosts\":[\"h0\",\"h0\",\"h1\",\"h1\"]")) fail_msg("metrics hosts: %s", me);
    if (!contains(log, "on h0 (ranks 0-1), h1 (ranks 2-3)")) fail_msg("log header: %s", log);
    assert_false(contains(log, "note: replica"));
    free(log);
    free(tr);
    free(me);

    /* 3 slots per host: rank 2 (replica 1, stage 0) on h0, rank 3 on h1 */
    snprintf(args, sizeof args, "--hostfile '%s' --stages 2 --dp 2 --schedule 1f1b --steps 1 --metrics '%s'",
             hostfile_split, metrics);
    must_run("h0", args);
    log = slurp(err_path);
    me = slurp(metrics);
    if (!contains(me, "\"hosts\":[\"h0\",\"h0\",\"h0\",\"h1\"]")) fail_msg("metrics hosts: %s", me);
    if (!contains(log, "on h0 (ranks 0-2), h1 (rank 3)")) fail_msg("log header: %s", log);
    if (!contains(log, "note: replica 1's stages are on more than one host")) fail_msg("no split note: %s", log);
    free(log);
    free(me);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* h1's link goes down while the job trains: the ranks' deadline (--timeout
 * 5) must end the job, with its message, well before `timeout 300`. */
static void test_cut_link(void **state)
{
    (void)state;
    char weights[700], args[4096];
    snprintf(weights, sizeof weights, "%s/cut.safetensors", dir);
    remove(weights);
    snprintf(args, sizeof args, "--hostfile '%s' --stages 2 --dp 2 --schedule 1f1b --steps 100000 --timeout 5 --save '%s'",
             hostfile, weights);
    remove(err_path);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(run_on("h0", args));
    /* mid-run: once three steps are done (progress lines on stderr) */
    double t0 = now_s(), t_cut = 0;
    int status = 0, done = 0;
    while (!done && now_s() - t0 < 120) {
        char *e = NULL;
        if (dyn_file_read_all(err_path, &e, NULL, NULL) == DYN_OK && contains(e, "step 3/")) t_cut = now_s();
        free(e);
        if (t_cut > 0) break;
        done = waitpid(pid, &status, WNOHANG) == pid;
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    if (t_cut == 0) {
        if (!done) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        char *e = slurp(err_path);
        fail_msg("the job did not reach step 3 within 120 s: %s", e);
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ip -n '%sh1' link set eth0 down", getenv("DYN_NETNS_PREFIX"));
    assert_int_equal(system(cmd), 0);
    /* when the deadline's message appears, and when the job ends */
    double t_msg = 0;
    for (done = 0; !done;) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (t_msg == 0) {
            char *e = NULL;
            if (dyn_file_read_all(err_path, &e, NULL, NULL) == DYN_OK && contains(e, "timeout after 5 s waiting for"))
                t_msg = now_s();
            free(e);
        }
        if (!done) nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    double secs = now_s() - t_cut;
    assert_true(WIFEXITED(status));
    int rc = WEXITSTATUS(status);
    char *e = slurp(err_path);
    print_message("  link of h1 cut after %.1f s of training: timeout message %.1f s later, exit %d %.1f s later\n",
                  t_cut - t0, t_msg > 0 ? t_msg - t_cut : -1.0, rc, secs);
    if (rc == 0 || rc == 124) fail_msg("exit %d after the cut (124: killed by timeout): %s", rc, e);
    if (!contains(e, "timeout after 5 s waiting for")) fail_msg("no timeout message: %s", e);
    /* the message: the 5 s deadline of the wait in progress at the cut plus
     * at most one more wait begun before it noticed (the iteration is
     * ~0.3 s) and slack for a loaded machine */
    assert_true(t_msg > 0 && t_msg - t_cut < 15);
    /* the end: mpirun cannot reach h1's daemon to finish the abort (TCP
     * would retry for about 15 minutes), so the launcher kills it 10 s
     * after the rank's message (launch.c, LAUNCH_GRACE_S); and slack */
    if (secs >= 40) fail_msg("the job ended %.1f s after the cut, not within 40 s: %s", secs, e);
    free(e);
    assert_int_equal(access(weights, F_OK), -1);
}

static void test_bad_hostfile(void **state)
{
    (void)state;
    const char *args = "--hostfile /nonexistent/hosts --stages 2 --dp 2 --steps 1 --machine cpu";
    cli_assert_one_line_error("train", args, run_on(NULL, args), 1, "/nonexistent/hosts");
    (void)cli_run;
}

/* Under hosts.sh already (its variables set), or re-executed under it. */
static int ensure_hosts(char **argv)
{
    if (getenv("DYN_NETNS_PREFIX") != NULL) return 0;
    const char *src = getenv("DYN_SOURCE_DIR");
    if (src == NULL) {
        fprintf(stderr, "test_netns: DYN_SOURCE_DIR is not set (run through ctest)\n");
        return 1;
    }
    char script[1024], self[1024];
    snprintf(script, sizeof script, "%s/tests/netns/hosts.sh", src);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "test_netns: cannot find this program's path (/proc/self/exe)\n");
        return 1;
    }
    self[n] = '\0';
    fflush(NULL);
    execl(script, script, "2", self, (char *)NULL);
    fprintf(stderr, "test_netns: cannot run %s: %s (%s)\n", script, strerror(errno), argv[0]);
    return 1;
}

int main(int argc, char **argv)
{
    (void)argc;
    if (ensure_hosts(argv) != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_hostfile),
        cmocka_unit_test(test_step_across_hosts),
        cmocka_unit_test(test_cut_link),
    };
    if (cli_setup_dir() != 0) return 1;
    write_file("hosts", "# two hosts, one replica each\nh0 slots=2\nh1 slots=2\n", hostfile, sizeof hostfile);
    write_file("hosts_split", "h0 slots=3\nh1 slots=3\n", hostfile_split, sizeof hostfile_split);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cli_teardown_dir();
    return rc;
}
