/* bench_stage_sum.c — is a pipeline stage as fast as the sum of its layers
 * measured alone? The profiler times each layer kind as its own stage model,
 * over and over on one shape, so a layer's weights stay in the caches
 * between repeats; a real stage runs several blocks (and maybe the head) in
 * turn. This times, on one micro-batch shape, a stage model of all the
 * encoder-side blocks, of all the decoder blocks (T5), and of those with the
 * head, forward + backward, against the profiler's measurement of each of
 * their layers times its count, alternating the two every round (the
 * machine's speed drifts), and prints the medians and their ratio.
 *
 * usage: bench_stage_sum [preset (default t5-mini)] [rows (8)] [input (128)]
 *        [target (64)] [rounds (5)] [cold] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"            /* defines: bench_args_check */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "model/model.h"           /* defines: dyn_model_*, dyn_model_microbatch_* */
#include "model/profile.h"         /* defines: dyn_profiler_* */
#include "model/threads.h"         /* defines: dyn_threads_init */
#include "util/util.h"             /* defines: dyn_time_ms, dyn_median */

#define REPEATS 5 /* timed runs per measurement of the stage (median), after one warm-up */
#define MAX_ROUNDS 64

/* With "cold" as the sixth argument, every timed stage run starts with the
 * caches flushed (FLUSH_BYTES written and read), as in training, where a
 * micro-batch's activations live in their own arena among several in
 * flight and the other rank's work passes through the shared cache. */
#define FLUSH_BYTES ((size_t)64 << 20)
static int g_flush;
static volatile float g_sink;
static float *g_flush_buf;

static void flush_caches(void)
{
    size_t n = FLUSH_BYTES / sizeof(float);
    float acc = 0;
    for (size_t i = 0; i < n; i++) g_flush_buf[i] += 1.0f;
    for (size_t i = 0; i < n; i += 16) acc += g_flush_buf[i];
    g_sink = acc;
}

/* One stage: model layers [first, last) and the profiled kinds they are. */
typedef struct stage_case {
    const char *name;
    int first, last;
    int count[DYN_LAYER_KIND_COUNT];
} stage_case;

/* Median fwd + bwd ms of the stage model over REPEATS runs. */
static int stage_time(dyn_model *m, int L, const stage_case *sc, const dyn_model_microbatch *mb, double *ms)
{
    dyn_error err;
    size_t ni = dyn_model_boundary_floats(m, sc->first, mb), no = dyn_model_boundary_floats(m, sc->last, mb);
    float *in = calloc(ni + 1, sizeof *in), *din = calloc(ni + 1, sizeof *din);
    float *out = calloc(no + 1, sizeof *out), *dout = calloc(no + 1, sizeof *dout);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    double t[REPEATS];
    int rc = in && din && out && dout && a ? 0 : 1;
    for (size_t i = 0; i < ni; i++) in[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    for (size_t i = 0; i < no; i++) dout[i] = (float)((i * 40503u) % 2001) / 1e6f - 1e-3f;
    int has_in = sc->first > 0, has_out = sc->last < L;
    for (int r = -1; r < REPEATS && rc == 0; r++) {
        if (g_flush) flush_caches();
        double loss = 0, t0 = dyn_time_ms();
        dyn_model_zero_grad(m);
        rc |= dyn_model_stage_forward(m, a, mb, sc->first, sc->last, has_in ? in : NULL, has_out ? out : NULL, 0,
                                      has_out ? NULL : &loss, NULL, &err) != DYN_OK;
        rc |= rc == 0 && dyn_model_stage_backward(m, a, mb, sc->first, sc->last, has_out ? dout : NULL,
                                                  has_in ? din : NULL, 1e-3f, &err) != DYN_OK;
        if (r >= 0) t[r] = dyn_time_ms() - t0;
    }
    if (rc != 0) fprintf(stderr, "bench_stage_sum: %s: %s\n", sc->name, err.msg);
    else *ms = dyn_median(t, REPEATS);
    dyn_model_acts_free(a);
    free(in), free(din), free(out), free(dout);
    return rc;
}

/* The sum of the stage's layers, each measured alone by the profiler. */
static int layers_time(dyn_profiler *p, const stage_case *sc, int32_t rows, int32_t enc, int32_t dec, double *ms)
{
    *ms = 0;
    for (int k = 0; k < DYN_LAYER_KIND_COUNT; k++) {
        if (sc->count[k] == 0) continue;
        dyn_layer_cost lc;
        dyn_error err;
        if (dyn_profiler_measure(p, (dyn_layer_kind)k, DYN_RECOMPUTE_NONE, rows, enc, dec, &lc, &err) != DYN_OK) {
            fprintf(stderr, "bench_stage_sum: %s\n", err.msg);
            return 1;
        }
        *ms += sc->count[k] * (lc.fwd_ms + lc.bwd_ms);
    }
    return 0;
}

int main(int argc, char **argv)
{
    dyn_threads_init(); /* idle OpenMP workers sleep (threads.h); may re-execute */
    bench_args_check(argc, argv,
                     "usage: bench_stage_sum [preset] [rows] [input] [target] [rounds] [cold]\n"
                     "  times whole stages against the sum of their layers measured alone",
                     NULL);
    const char *preset = argc > 1 ? argv[1] : "t5-mini";
    int32_t rows = argc > 2 ? atoi(argv[2]) : 8, enc = argc > 3 ? atoi(argv[3]) : 128;
    int32_t dec = argc > 4 ? atoi(argv[4]) : 64;
    int rounds = argc > 5 ? atoi(argv[5]) : 5;
    g_flush = argc > 6 && strcmp(argv[6], "cold") == 0;
    if (g_flush && (g_flush_buf = calloc(FLUSH_BYTES, 1)) == NULL) {
        fprintf(stderr, "bench_stage_sum: out of memory\n");
        return 1;
    }
    dyn_model_config cfg;
    dyn_error err;
    if (dyn_model_config_preset(preset, &cfg, &err) != DYN_OK) {
        fprintf(stderr, "bench_stage_sum: %s\n", err.msg);
        return 2;
    }
    int t5 = cfg.kind == DYN_MODEL_T5, ne = cfg.n_layers, nd = t5 ? cfg.n_dec_layers : 0;
    if (rows < 1 || enc < 2 || (t5 && dec < 1) || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench_stage_sum: need rows >= 1, input >= 2, target >= 1 (T5), 1 <= rounds <= %d\n",
                MAX_ROUNDS);
        return 2;
    }
    int L = dyn_model_config_num_layers(&cfg);
    stage_case cases[3];
    int nc = 0;
    cases[nc++] = (stage_case){t5 ? "encoder blocks" : "blocks", 1, ne + 1, {0}};
    cases[nc - 1].count[DYN_LAYER_ENCODER] = ne;
    if (t5) {
        cases[nc++] = (stage_case){"decoder blocks", ne + 3, ne + nd + 3, {0}};
        cases[nc - 1].count[DYN_LAYER_DECODER] = nd;
    }
    cases[nc++] = (stage_case){t5 ? "decoder blocks + head" : "blocks + head", t5 ? ne + 3 : 1, L, {0}};
    cases[nc - 1].count[t5 ? DYN_LAYER_DECODER : DYN_LAYER_ENCODER] = t5 ? nd : ne;
    cases[nc - 1].count[DYN_LAYER_LM_HEAD] = 1;

    /* the shape: rows samples; GPT sequences half input, half target */
    int32_t in_len = t5 ? enc : (enc + 1) / 2, tg_len = t5 ? dec : enc - in_len;
    int32_t *tok = calloc((size_t)(in_len + tg_len), sizeof *tok);
    dyn_token_sample *s = calloc((size_t)rows, sizeof *s);
    dyn_profiler *p = dyn_profiler_create(&cfg, 1, 3, 1, &err);
    if (tok == NULL || s == NULL || p == NULL) {
        fprintf(stderr, "bench_stage_sum: %s\n", p == NULL ? err.msg : "out of memory");
        return 1;
    }
    for (int32_t i = 0; i < in_len + tg_len; i++) tok[i] = (int32_t)((i * 37) % 256);
    for (int32_t r = 0; r < rows; r++) s[r] = (dyn_token_sample){tok, in_len, tok + in_len, tg_len};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(cfg.kind, s, rows, &err);
    if (mb == NULL) {
        fprintf(stderr, "bench_stage_sum: %s\n", err.msg);
        return 1;
    }
    printf("bench_stage_sum: %s, %d rows x %d input%s, one thread, %d rounds alternating (stage: median of %d%s)\n",
           preset, rows, enc, t5 ? "" : " (GPT: whole sequence)", rounds, REPEATS,
           g_flush ? ", each run after flushing the caches" : "");
    printf("%-24s %12s %14s %8s\n", "stage", "stage ms", "layers sum ms", "ratio");
    int rc = 0;
    for (int c = 0; c < nc && rc == 0; c++) {
        dyn_model *m = dyn_model_create_stage(&cfg, 1, cases[c].first, cases[c].last, &err);
        if (m == NULL) {
            fprintf(stderr, "bench_stage_sum: %s\n", err.msg);
            rc = 1;
            break;
        }
        dyn_model_set_threads(m, 1);
        double st[MAX_ROUNDS], ly[MAX_ROUNDS];
        for (int r = 0; r < rounds && rc == 0; r++) {
            /* alternate which goes first, so a drift does not favour one */
            if (r % 2 == 0)
                rc = stage_time(m, L, &cases[c], mb, &st[r]) || layers_time(p, &cases[c], rows, enc, dec, &ly[r]);
            else
                rc = layers_time(p, &cases[c], rows, enc, dec, &ly[r]) || stage_time(m, L, &cases[c], mb, &st[r]);
        }
        if (rc == 0) {
            double ms = dyn_median(st, rounds), ml = dyn_median(ly, rounds);
            printf("%-24s %12.2f %14.2f %8.3f\n", cases[c].name, ms, ml, ms / ml);
        }
        dyn_model_free(m);
    }
    dyn_model_microbatch_free(mb);
    dyn_profiler_free(p);
    free(tok), free(s), free(g_flush_buf);
    return rc;
}
