/* test_machine_auto.c — `--machine auto` (src/model/machine_auto.h,
 * src/cli/cli_machine.h): the fit recovers a machine from times its own
 * analytic model produced; the cache key, path, write and read round trip; a
 * cache file that is corrupt or for another key is refused (and, through
 * dyn_machine_auto_get and the CLI, measured again with a message); the
 * oversubscription share as a pure function of (ranks, threads, cores); auto
 * is the CLI's default while an explicit --machine cpu plans as before; and
 * `dynapipe train`'s header. Measurements here are the tiny level: no
 * assertion is about speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dynapipe/cost.h"
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset, dyn_machine_core_share */
#include "model/machine_auto.h"    /* defines: dyn_machine_fit, dyn_machine_auto_* */
#include "cli_testlib.h"           /* defines: cli_run, slurp, write_file, dir, out_path, err_path */

static int setup(void **state)
{
    (void)state;
    return cli_setup_dir();
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

static dyn_model_config preset(const char *name, int32_t max_seqlen)
{
    dyn_model_config c;
    assert_int_equal(dyn_model_config_preset(name, &c, NULL), DYN_OK);
    c.max_seqlen = max_seqlen;
    return c;
}

/* The analytic times of each obs under m, written into the obs. */
static void synthesize(const dyn_model_config *cfg, const dyn_machine *m, dyn_machine_obs *o, int n)
{
    dyn_cost_model *cm = dyn_cost_model_create_analytic(cfg, m, NULL);
    assert_non_null(cm);
    for (int i = 0; i < n; i++) {
        dyn_layer_cost lc;
        assert_int_equal(dyn_cost_layer(cm, o[i].kind, &o[i].mb, DYN_RECOMPUTE_NONE, &lc, NULL), DYN_OK);
        o[i].fwd_ms = lc.fwd_ms;
        o[i].bwd_ms = lc.bwd_ms;
    }
    dyn_cost_model_free(cm);
}

static void assert_rel(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol * fabs(want))) fail_msg("got %.9g, want %.9g", got, want);
}

/* Times made by a known machine's analytic model are fitted back to that
 * machine, every term, for GPT and T5; with one more optimizer time the
 * memory rate is still the machine's. */
static void test_fit_recovers_machine(void **state)
{
    (void)state;
    dyn_machine truth = *dyn_machine_builtin("cpu");
    truth.matmul_gflops = 83.0;
    truth.gemm_n_half = 21.0;
    truth.attn_gflops = 37.0;
    truth.mem_gbps = 14.0;
    truth.layer_overhead_ms = 0.02;
    const char *presets[2] = {"gpt-mini", "t5-mini"};
    for (int p = 0; p < 2; p++) {
        dyn_model_config cfg = preset(presets[p], 2048);
        int t5 = cfg.kind == DYN_MODEL_T5;
        dyn_machine_obs o[16];
        int n = 0;
        int32_t lens[3] = {64, 512, 2048}, rows[3] = {64, 8, 2};
        for (int i = 0; i < 3; i++) {
            o[n++] = (dyn_machine_obs){DYN_LAYER_ENCODER, {.rows = 1, .enc_len = lens[i], .dec_len = t5 ? 32 : 0}, 0, 0};
            o[n++] = (dyn_machine_obs){DYN_LAYER_ENCODER, {.rows = rows[i], .enc_len = lens[i], .dec_len = t5 ? 32 : 0}, 0, 0};
            if (t5)
                o[n++] = (dyn_machine_obs){DYN_LAYER_DECODER, {.rows = rows[i], .enc_len = lens[i], .dec_len = lens[i] / 2}, 0, 0};
        }
        o[n++] = (dyn_machine_obs){DYN_LAYER_EMBED, {.rows = 16, .enc_len = 256, .dec_len = t5 ? 64 : 0}, 0, 0};
        o[n++] = (dyn_machine_obs){DYN_LAYER_LM_HEAD, {.rows = 16, .enc_len = 256, .dec_len = t5 ? 64 : 0}, 0, 0};
        synthesize(&cfg, &truth, o, n);
        dyn_machine fit;
        dyn_machine_fit_stats st;
        double params = 3e6, opt_ms = params * DYN_OPTIMIZER_BYTES_PER_PARAM / (truth.mem_gbps * 1e6);
        assert_int_equal(dyn_machine_fit(&cfg, dyn_machine_builtin("cpu"), o, n, NULL, 0, params, opt_ms, &fit, &st, NULL),
                         DYN_OK);
        assert_string_equal(fit.name, "auto");
        assert_rel(fit.matmul_gflops, truth.matmul_gflops, 1e-6);
        assert_rel(fit.gemm_n_half, truth.gemm_n_half, 1e-6);
        assert_rel(fit.attn_gflops, truth.attn_gflops, 1e-6);
        assert_rel(fit.mem_gbps, truth.mem_gbps, 1e-6);
        assert_rel(fit.layer_overhead_ms, truth.layer_overhead_ms, 1e-6);
        assert_true(st.n == 2 * n + 1 && st.worst_err < 1e-6);
        assert_rel(fit.optimizer_ms_per_mparam, opt_ms / params * 1e6, 1e-12); /* carried as measured */
        /* one time slowed five-fold by other work, and every other one by
         * up to 2 % either way: the fit stays near the machine */
        for (int i = 0; i < n; i++) o[i].fwd_ms *= 1.0 + 0.02 * ((i * 7) % 5 - 2) / 2.0;
        o[1].bwd_ms *= 5;
        dyn_machine rob;
        assert_int_equal(dyn_machine_fit(&cfg, dyn_machine_builtin("cpu"), o, n, NULL, 0, params, opt_ms, &rob, &st, NULL),
                         DYN_OK);
        assert_rel(rob.matmul_gflops, truth.matmul_gflops, 0.05);
        assert_rel(rob.attn_gflops, truth.attn_gflops, 0.15);
        /* the fields not fitted are the base's */
        assert_true(fit.device_memory_mb == truth.device_memory_mb && fit.link_gbps == truth.link_gbps &&
                    fit.bytes_per_elem == 4);
    }
}

/* Products measured alone, as machine m would time them: the GPT-block
 * products of cfg (QKV, out, FFN in and out; forward, input and weight
 * gradient) at each token count, t (n + n_half) 2 K N / rate. */
static int synthesize_gemm(const dyn_model_config *cfg, const dyn_machine *m, dyn_machine_gemm_obs *g)
{
    double h = cfg->hidden, a = (double)cfg->heads * cfg->head_dim, f = cfg->ffn;
    double row = 3.0 * 2.0 * (h * 3 * a + a * h + h * f + f * h);
    int32_t tokens[4] = {16, 64, 256, 1024};
    for (int i = 0; i < 4; i++)
        g[i] = (dyn_machine_gemm_obs){tokens[i], row * tokens[i], row,
                                      row * (tokens[i] + m->gemm_n_half) / (m->matmul_gflops * 1e6)};
    return 4;
}

/* GPT blocks at four lengths, one row and many, the embedding and the head:
 * the shapes of a measurement (src/model/machine_auto.c) into o. */
static int gpt_shapes(dyn_machine_obs *o)
{
    int n = 0;
    int32_t lens[4] = {64, 256, 1024, 2048}, rows[4] = {64, 16, 4, 2};
    for (int i = 0; i < 4; i++) {
        o[n++] = (dyn_machine_obs){DYN_LAYER_ENCODER, {.rows = 1, .enc_len = lens[i]}, 0, 0};
        o[n++] = (dyn_machine_obs){DYN_LAYER_ENCODER, {.rows = rows[i], .enc_len = lens[i]}, 0, 0};
    }
    o[n++] = (dyn_machine_obs){DYN_LAYER_EMBED, {.rows = 1, .enc_len = 256}, 0, 0};
    o[n++] = (dyn_machine_obs){DYN_LAYER_EMBED, {.rows = 16, .enc_len = 256}, 0, 0};
    o[n++] = (dyn_machine_obs){DYN_LAYER_LM_HEAD, {.rows = 1, .enc_len = 256}, 0, 0};
    o[n++] = (dyn_machine_obs){DYN_LAYER_LM_HEAD, {.rows = 16, .enc_len = 256}, 0, 0};
    return n;
}

/* Inside a block the products' FLOPs and the elementwise bytes grow with
 * the tokens in one ratio, and n_half and the per-layer overhead are both a
 * cost per pass, so layer times alone barely tell a machine of slow
 * products and fast memory from one of fast products and slow memory. Two
 * such machines (the demo GPT, hidden 128), their layer times off by up to
 * 3 % either way as measurements are: with the products measured alone the
 * fit finds each machine's product rate and n_half within 1 %, and the two
 * fits apart as the machines are. Exact times give back all five terms. */
static void test_fit_products_separate_machines(void **state)
{
    (void)state;
    dyn_model_config cfg = preset("gpt-tiny", 2048);
    cfg.n_layers = 4, cfg.hidden = 128, cfg.heads = 4, cfg.head_dim = 32, cfg.ffn = 512;
    dyn_machine ma = *dyn_machine_builtin("cpu"), mb = ma;
    ma.matmul_gflops = 78.0, ma.gemm_n_half = 12.0, ma.attn_gflops = 35.0, ma.mem_gbps = 60.0;
    ma.layer_overhead_ms = 0.004;
    mb.matmul_gflops = 99.0, mb.gemm_n_half = 4.0, mb.attn_gflops = 35.0, mb.mem_gbps = 14.0;
    mb.layer_overhead_ms = 0.012;
    const dyn_machine *truth[2] = {&ma, &mb};
    double fitted[2];
    for (int k = 0; k < 2; k++) {
        dyn_machine_obs o[16];
        dyn_machine_gemm_obs g[4];
        int n = gpt_shapes(o), ng = synthesize_gemm(&cfg, truth[k], g);
        synthesize(&cfg, truth[k], o, n);
        double params = 1e6, opt_ms = params * DYN_OPTIMIZER_BYTES_PER_PARAM / (truth[k]->mem_gbps * 1e6);
        dyn_machine fit;
        dyn_machine_fit_stats st;
        assert_int_equal(dyn_machine_fit(&cfg, &ma, o, n, g, ng, params, opt_ms, &fit, &st, NULL), DYN_OK);
        assert_rel(fit.matmul_gflops, truth[k]->matmul_gflops, 1e-6);
        assert_rel(fit.gemm_n_half, truth[k]->gemm_n_half, 1e-6);
        assert_rel(fit.attn_gflops, truth[k]->attn_gflops, 1e-6);
        assert_rel(fit.mem_gbps, truth[k]->mem_gbps, 1e-6);
        assert_rel(fit.layer_overhead_ms, truth[k]->layer_overhead_ms, 1e-6);
        assert_true(st.n == ng + 2 * n + 1 && st.worst_err < 1e-6);
        for (int i = 0; i < n; i++) {
            o[i].fwd_ms *= 1.0 + 0.03 * ((i * 7 + k) % 5 - 2) / 2.0;
            o[i].bwd_ms *= 1.0 - 0.03 * ((i * 3 + k) % 5 - 2) / 2.0;
        }
        assert_int_equal(dyn_machine_fit(&cfg, &ma, o, n, g, ng, params, opt_ms * 1.03, &fit, &st, NULL), DYN_OK);
        assert_rel(fit.matmul_gflops, truth[k]->matmul_gflops, 0.01);
        assert_rel(fit.gemm_n_half, truth[k]->gemm_n_half, 0.01);
        fitted[k] = fit.matmul_gflops;
    }
    assert_rel(fitted[1] / fitted[0], mb.matmul_gflops / ma.matmul_gflops, 0.02);
}

/* A term the measurements do not need stays at zero cost (its rate capped),
 * never negative; nothing to fit is an error. */
static void test_fit_nonnegative(void **state)
{
    (void)state;
    dyn_model_config cfg = preset("gpt-mini", 512);
    dyn_machine truth = *dyn_machine_builtin("cpu");
    truth.gemm_n_half = 0;
    truth.layer_overhead_ms = 0;
    dyn_machine_obs o[4] = {
        {DYN_LAYER_ENCODER, {.rows = 1, .enc_len = 64}, 0, 0},
        {DYN_LAYER_ENCODER, {.rows = 8, .enc_len = 64}, 0, 0},
        {DYN_LAYER_ENCODER, {.rows = 1, .enc_len = 512}, 0, 0},
        {DYN_LAYER_ENCODER, {.rows = 2, .enc_len = 512}, 0, 0},
    };
    synthesize(&cfg, &truth, o, 4);
    for (int i = 0; i < 4; i++) o[i].fwd_ms *= 0.9; /* faster than any overhead allows */
    dyn_machine fit;
    assert_int_equal(dyn_machine_fit(&cfg, &truth, o, 4, NULL, 0, 0, 0, &fit, NULL, NULL), DYN_OK);
    assert_true(fit.gemm_n_half >= 0 && fit.layer_overhead_ms >= 0 && fit.attn_gflops > 0 && fit.mem_gbps > 0);
    assert_int_equal(dyn_machine_validate(&fit, NULL), DYN_OK);
    dyn_error err;
    assert_int_equal(dyn_machine_fit(&cfg, &truth, o, 0, NULL, 0, 0, 0, &fit, NULL, &err), DYN_ERR_INVALID_ARG);
}

/* The key names the CPU, the kernel, the threads, the ranks at once and
 * the model; another thread count, rank count or shape is another file. */
static void test_key_and_path(void **state)
{
    (void)state;
    dyn_model_config a = preset("gpt-mini", 512), b = a;
    b.hidden = 512;
    char k1[512], k2[512], k3[512], k4[512], k5[512], k0[512], cpu[64], blas[32];
    dyn_machine_auto_key(&a, 1, 1, DYN_MACHINE_MEASURE_FULL, k1, sizeof k1, cpu, blas);
    dyn_machine_auto_key(&a, 2, 1, DYN_MACHINE_MEASURE_FULL, k2, sizeof k2, NULL, NULL);
    dyn_machine_auto_key(&b, 1, 1, DYN_MACHINE_MEASURE_FULL, k3, sizeof k3, NULL, NULL);
    dyn_machine_auto_key(&a, 1, 1, DYN_MACHINE_MEASURE_TINY, k4, sizeof k4, NULL, NULL);
    dyn_machine_auto_key(&a, 1, 2, DYN_MACHINE_MEASURE_FULL, k5, sizeof k5, NULL, NULL);
    dyn_machine_auto_key(&a, 1, 0, DYN_MACHINE_MEASURE_FULL, k0, sizeof k0, NULL, NULL);
    assert_non_null(strstr(k1, cpu));
    assert_non_null(strstr(k1, blas));
    assert_non_null(strstr(k1, "threads=1"));
    assert_non_null(strstr(k2, "threads=2"));
    assert_non_null(strstr(k1, "ranks=1"));
    assert_non_null(strstr(k5, "ranks=2"));
    assert_string_equal(k0, k1); /* below 1 counts as 1 */
    assert_true(strcmp(k1, k2) != 0 && strcmp(k1, k3) != 0 && strcmp(k1, k4) != 0 && strcmp(k1, k5) != 0);
    /* the two-step fit (DYN_MACHINE_FIT=products) is another machine */
    char kj[512];
    setenv("DYN_MACHINE_FIT", "products", 1);
    dyn_machine_auto_key(&a, 1, 1, DYN_MACHINE_MEASURE_FULL, kj, sizeof kj, NULL, NULL);
    unsetenv("DYN_MACHINE_FIT");
    assert_non_null(strstr(kj, "|fit=products"));
    assert_null(strstr(k1, "|fit="));
    assert_true(strcmp(k1, kj) != 0);
    char p1[600], p2[600], p1b[600];
    assert_int_equal(dyn_machine_auto_path("/c", k1, p1, sizeof p1, NULL), DYN_OK);
    assert_int_equal(dyn_machine_auto_path("/c", k1, p1b, sizeof p1b, NULL), DYN_OK);
    assert_int_equal(dyn_machine_auto_path("/c", k2, p2, sizeof p2, NULL), DYN_OK);
    assert_string_equal(p1, p1b);
    assert_true(strcmp(p1, p2) != 0);
    assert_true(strncmp(p1, "/c/machine-", 11) == 0);
    char tiny[8];
    assert_int_equal(dyn_machine_auto_path("/c", k1, tiny, sizeof tiny, NULL), DYN_ERR_INVALID_ARG);
}

/* Write, read back exactly; another key, a corrupt file, a bad machine
 * inside and a missing file are each refused as documented. */
static void test_cache_roundtrip_and_refusals(void **state)
{
    (void)state;
    char path[700], key[512];
    snprintf(path, sizeof path, "%s/m.json", dir);
    snprintf(key, sizeof key, "v1|cpu=Test CPU|blas=Haswell|threads=3|gpt");
    dyn_machine m = *dyn_machine_builtin("cpu");
    snprintf(m.name, sizeof m.name, "auto");
    m.matmul_gflops = 71.123456789012345;
    m.attn_gflops = 1.0 / 3.0;
    m.gemm_n_half = 17.5;
    m.layer_overhead_ms = 0.0123;
    m.optimizer_ms_per_mparam = 4.0 / 3.0;
    dyn_machine_auto_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.key, sizeof info.key, "%s", key);
    info.measure_s = 12.5;
    info.optimizer_ms_per_mparam = 4.25;
    info.fit = (dyn_machine_fit_stats){25, 0.05, 0.2};
    assert_int_equal(dyn_machine_auto_write(path, &m, &info, NULL), DYN_OK);
    dyn_machine got;
    dyn_machine_auto_info gi;
    assert_int_equal(dyn_machine_auto_read(path, key, &got, &gi, NULL), DYN_OK);
    assert_memory_equal(&got, &m, sizeof m);
    assert_true(gi.cached == 1 && gi.fit.n == 25 && gi.measure_s == 12.5 && gi.optimizer_ms_per_mparam == 4.25);

    dyn_error err;
    assert_int_equal(dyn_machine_auto_read(path, "v1|another", &got, &gi, &err), DYN_ERR_PARSE);
    assert_non_null(strstr(err.msg, "another machine"));
    assert_non_null(strstr(err.msg, path));

    char *text = slurp(path);
    text[strlen(text) / 2] = '\0'; /* cut in the middle */
    assert_int_equal(dyn_file_write_atomic(path, text, strlen(text), NULL), DYN_OK);
    free(text);
    assert_int_equal(dyn_machine_auto_read(path, key, &got, &gi, &err), DYN_ERR_PARSE);
    assert_non_null(strstr(err.msg, path));

    /* a machine of an older version (version 2's default fit took the
     * product rate from products measured alone) is not reused, however
     * valid */
    char bad[2048];
    snprintf(bad, sizeof bad,
             "{\"format\": \"dynapipe-machine-auto\", \"version\": 2, \"key\": \"%s\", \"machine\": "
             "{\"base\": \"cpu\"}}",
             key);
    assert_int_equal(dyn_file_write_atomic(path, bad, strlen(bad), NULL), DYN_OK);
    assert_int_equal(dyn_machine_auto_read(path, key, &got, &gi, &err), DYN_ERR_PARSE);
    assert_non_null(strstr(err.msg, "not a version 4 cache file"));

    m.matmul_gflops = -1; /* written by hand: the machine inside must be valid */
    snprintf(bad, sizeof bad,
             "{\"format\": \"dynapipe-machine-auto\", \"version\": 4, \"key\": \"%s\", \"machine\": "
             "{\"base\": \"cpu\", \"matmul_gflops\": -1}}",
             key);
    assert_int_equal(dyn_file_write_atomic(path, bad, strlen(bad), NULL), DYN_OK);
    assert_int_equal(dyn_machine_auto_read(path, key, &got, &gi, &err), DYN_ERR_PARSE);
    assert_non_null(strstr(err.msg, "matmul_gflops"));

    char missing[700];
    snprintf(missing, sizeof missing, "%s/none.json", dir);
    assert_int_equal(dyn_machine_auto_read(missing, key, &got, &gi, &err), DYN_ERR_IO);
}

/* dyn_machine_auto_get: measures (tiny) and caches; the next call reads
 * the same machine; a corrupt file is reported and measured again; with
 * make == 0 and nothing usable it says so. */
static void test_get_measures_caches_and_remeasures(void **state)
{
    (void)state;
    dyn_model_config cfg = preset("gpt-tiny", 64);
    char cache[700], path[800], path2[800];
    snprintf(cache, sizeof cache, "%s/cache/dynapipe", dir);
    dyn_machine m1, m2;
    dyn_machine_auto_info i1, i2;
    dyn_error err;
    assert_int_equal(dyn_machine_auto_get(cache, &cfg, 1, 1, DYN_MACHINE_MEASURE_TINY, 0, NULL, &m1, &i1, path,
                                          sizeof path, &err),
                     DYN_ERR_IO);
    FILE *log = tmpfile();
    assert_non_null(log);
    assert_int_equal(dyn_machine_auto_get(cache, &cfg, 1, 1, DYN_MACHINE_MEASURE_TINY, 1, log, &m1, &i1, path,
                                          sizeof path, &err),
                     DYN_OK);
    assert_int_equal(i1.cached, 0);
    assert_int_equal(dyn_machine_validate(&m1, NULL), DYN_OK);
    assert_int_equal(dyn_machine_auto_get(cache, &cfg, 1, 1, DYN_MACHINE_MEASURE_TINY, 0, log, &m2, &i2, path2,
                                          sizeof path2, &err),
                     DYN_OK);
    assert_string_equal(path, path2);
    assert_int_equal(i2.cached, 1);
    assert_memory_equal(&m1, &m2, sizeof m1);
    /* corrupt: refused with a line on the log, measured again, rewritten */
    assert_int_equal(dyn_file_write_atomic(path, "{\"format\": 3", 12, NULL), DYN_OK);
    rewind(log);
    assert_int_equal(dyn_machine_auto_get(cache, &cfg, 1, 1, DYN_MACHINE_MEASURE_TINY, 1, log, &m2, &i2, path2,
                                          sizeof path2, &err),
                     DYN_OK);
    assert_int_equal(i2.cached, 0);
    fflush(log);
    rewind(log);
    char buf[4096];
    size_t got = fread(buf, 1, sizeof buf - 1, log);
    buf[got] = '\0';
    fclose(log);
    assert_non_null(strstr(buf, "measuring again"));
    assert_non_null(strstr(buf, path));
    dyn_machine m3;
    dyn_machine_auto_info i3;
    assert_int_equal(dyn_machine_auto_read(path, i2.key, &m3, &i3, NULL), DYN_OK);
}

/* Oversubscription: the share of a core each thread gets. */
static void test_core_share(void **state)
{
    (void)state;
    assert_true(dyn_machine_core_share(8, 1, 2) == 0.25); /* --stages 4 --dp 2 on 2 cores */
    assert_true(dyn_machine_core_share(2, 1, 2) == 1.0);
    assert_true(dyn_machine_core_share(2, 2, 2) == 0.5);
    assert_true(dyn_machine_core_share(1, 1, 64) == 1.0);
    assert_true(dyn_machine_core_share(3, 1, 2) == 2.0 / 3.0);
    assert_true(dyn_machine_core_share(0, 1, 2) == 1.0 && dyn_machine_core_share(2, 1, 0) == 1.0);
    dyn_machine m = *dyn_machine_builtin("cpu"), s = m;
    s.layer_overhead_ms = 0.5;
    m.layer_overhead_ms = 0.5;
    dyn_machine_share_cores(&s, 0.25);
    assert_true(s.matmul_gflops == m.matmul_gflops * 0.25 && s.attn_gflops == m.attn_gflops * 0.25 &&
                s.mem_gbps == m.mem_gbps * 0.25 && s.layer_overhead_ms == 2.0);
    assert_true(s.link_gbps == m.link_gbps && s.device_memory_mb == m.device_memory_mb);
    dyn_machine u = m;
    dyn_machine_share_cores(&u, 1.0);
    assert_memory_equal(&u, &m, sizeof m);
}

#define PLAN_ARGS "--model gpt --model-config gpt-tiny --synthetic flan --global-batch-tokens 2048 " \
                  "--max-seqlen 64 --stages 2 --batches 1"

/* Cut each line of a plan printout at its planning time (", planned in"
 * and ", mean plan time": wall-clock figures), in place. */
static void strip_timings(char *text)
{
    char *w = text;
    for (const char *r = text; *r;) {
        if (strncmp(r, ", planned in", 12) == 0 || strncmp(r, ", mean plan time", 16) == 0)
            while (*r && *r != '\n') r++;
        else
            *w++ = *r++;
    }
    *w = '\0';
}

/* The cache file named in a "(cache PATH)" of text, into path. Not
 * inline: GCC 12 takes a strstr result into slurp's buffer for a dangling
 * pointer once both are inlined (cli_testlib.h). */
static __attribute__((noinline)) void cache_path_of(const char *text, char *path, size_t cap)
{
    const char *c = strstr(text, "(cache ");
    snprintf(path, cap, "%s", c != NULL ? c + 7 : "");
    path[strcspn(path, ")")] = '\0';
    assert_true(path[0] != '\0');
}

/* No cost flag: the machine is measured here (its line on stderr, "machine
 * auto" in the header) into the cache named by XDG_CACHE_HOME; an explicit
 * --machine cpu plans exactly as the built-in's JSON does and says what it
 * is not. A corrupt cache file is refused with a message and remeasured. */
static void test_cli_default_is_auto(void **state)
{
    (void)state;
    char cache[700];
    snprintf(cache, sizeof cache, "%s/xdg", dir);
    setenv("XDG_CACHE_HOME", cache, 1);
    assert_int_equal(cli_run("plan", PLAN_ARGS), 0);
    char *out = slurp(out_path), *err = slurp(err_path);
    assert_non_null(strstr(out, "machine auto"));
    assert_non_null(strstr(err, "measuring this machine"));
    assert_non_null(strstr(err, "machine auto: this machine, measured now"));
    /* 2 stages: measured beside the other rank's load when the cores hold
     * both at once (cli_machine.c), whatever this host's core count */
    long cores = sysconf(_SC_NPROCESSORS_ONLN), threads = cores > 2 ? cores / 2 : 1;
    if (cores / threads >= 2)
        assert_non_null(strstr(err, " beside 1 other rank:"));
    else
        assert_null(strstr(err, "beside"));
    char path[900];
    cache_path_of(err, path, sizeof path);
    assert_true(strncmp(path, cache, strlen(cache)) == 0); /* inside the given cache folder */
    free(out);
    free(err);
    /* the second run reads it */
    assert_int_equal(cli_run("plan", PLAN_ARGS), 0);
    err = slurp(err_path);
    out = slurp(out_path);
    assert_null(strstr(err, "measur")); /* quiet: the header names the machine */
    assert_non_null(strstr(out, "machine auto"));
    free(err);
    free(out);
    /* corrupt it: refused, measured again */
    assert_int_equal(dyn_file_write_atomic(path, "not json", 8, NULL), DYN_OK);
    assert_int_equal(cli_run("plan", PLAN_ARGS), 0);
    err = slurp(err_path);
    assert_non_null(strstr(err, "measuring again"));
    assert_non_null(strstr(err, "measured now"));
    free(err);
    /* --machine cpu: the built-in's figures (those of a JSON file based on it) */
    assert_int_equal(cli_run("plan", PLAN_ARGS " --machine cpu"), 0);
    char *cpu_out = slurp(out_path);
    err = slurp(err_path);
    assert_non_null(strstr(cpu_out, "machine cpu"));
    assert_null(strstr(err, "measur"));
    free(err);
    char mfile[700];
    write_file("cpu.json", "{\"base\": \"cpu\", \"name\": \"cpu\"}", mfile, sizeof mfile);
    char args[2000];
    snprintf(args, sizeof args, PLAN_ARGS " --machine '%s'", mfile);
    assert_int_equal(cli_run("plan", args), 0);
    char *file_out = slurp(out_path);
    strip_timings(cpu_out);
    strip_timings(file_out);
    assert_string_equal(cpu_out, file_out);
    free(cpu_out);
    free(file_out);
    /* a machine that is neither: one line */
    cli_assert_one_line_error("plan", "--machine nosuch", cli_run("plan", PLAN_ARGS " --machine nosuch.json"), 1,
                              "nosuch.json");
    unsetenv("XDG_CACHE_HOME");
}

#define TRAIN_ARGS "--model gpt --model-config gpt-tiny --steps 1 --stages 1 --samples 200 "

/* `dynapipe train`'s header: the cost model and whether it was measured
 * here, and what the run defaulted to. */
static void test_train_header(void **state)
{
    (void)state;
    char cache[700];
    snprintf(cache, sizeof cache, "%s/xdg-train", dir);
    setenv("XDG_CACHE_HOME", cache, 1);
    /* train starts mpirun (cli_run runs it under timeout): leak detection
     * off in the sanitizer build, as for every MPI run of the suite (Open
     * MPI's allocations at exit) */
    setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    /* flags refused on their own are refused before any measuring: one
     * line, and nothing measured into the (empty) cache */
    int rc = cli_run("train", TRAIN_ARGS "--max-seqlen 64 --save /nonexistent/dir/m.safetensors");
    char *err = slurp(err_path);
    assert_null(strstr(err, "measur"));
    free(err);
    cli_assert_one_line_error("train", "--save /nonexistent/dir", rc, 2, "--save");
    rc = cli_run("train", TRAIN_ARGS "--max-seqlen 64 --schedule zb --chunks 2");
    err = slurp(err_path);
    assert_null(strstr(err, "measur"));
    free(err);
    cli_assert_one_line_error("train", "--chunks 2", rc, 2, "--chunks 2 applies to --schedule interleaved only");
    struct stat st;
    assert_int_not_equal(stat(cache, &st), 0); /* nothing measured, nothing cached */
    rc = cli_run("train", TRAIN_ARGS "--max-seqlen 64");
    err = slurp(err_path);
    if (rc != 0) fail_msg("train failed: %s", err);
    assert_non_null(strstr(err, "dynapipe train: cost model: analytic, machine auto: this machine"));
    assert_non_null(strstr(err, "model gpt-tiny (gpt"));     /* given: no "(default)" */
    assert_non_null(strstr(err, "max length 64,"));
    assert_non_null(strstr(err, "tokens per global batch (default)"));
    assert_non_null(strstr(err, "1 stage x 1 replica"));
    free(err);
    rc = cli_run("train", "--model gpt --steps 1 --stages 1 --samples 200 --machine cpu --layers 1 --hidden 64 "
                          "--heads 4 --ffn 256 --global-batch-tokens 1024");
    err = slurp(err_path);
    if (rc != 0) fail_msg("train failed: %s", err);
    assert_non_null(strstr(err, "machine cpu: a built-in description of"));
    assert_non_null(strstr(err, "not measured here"));
    assert_non_null(strstr(err, "model gpt-mini (default) (gpt"));
    assert_non_null(strstr(err, "max length 512 (default)"));
    assert_non_null(strstr(err, "1024 tokens per global batch,"));
    free(err);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("ASAN_OPTIONS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_recovers_machine),
        cmocka_unit_test(test_fit_products_separate_machines),
        cmocka_unit_test(test_fit_nonnegative),
        cmocka_unit_test(test_key_and_path),
        cmocka_unit_test(test_cache_roundtrip_and_refusals),
        cmocka_unit_test(test_get_measures_caches_and_remeasures),
        cmocka_unit_test(test_core_share),
        cmocka_unit_test(test_cli_default_is_auto),
        cmocka_unit_test(test_train_header),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
