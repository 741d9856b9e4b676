/* bench_split.c — the zero-bubble split backward per layer kind: time of
 * the fused backward against its input-gradient half (B) and
 * weight-gradient half (W) run separately, the B share of B + W beside the
 * analytic cost model's prediction (machine "cpu", bwd_input_ms /
 * (bwd_input_ms + bwd_weight_ms)), and the bytes B keeps until W beside the
 * activations stored by the forward (and the cost model's stored_mb of the
 * layer kind; the range's stored bytes also hold its output boundary). Fused and split runs alternate so both
 * see the same machine noise; medians are printed.
 *
 * usage: bench_split [repeats (default 5)] [threads (default 1)] */
#include <stdio.h>
#include <stdlib.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "dynapipe/cost.h" /* defines: dyn_cost_model_create_analytic, dyn_cost_layer */
#include "model/model.h"   /* defines: dyn_model_*, dyn_model_stage_backward_input/_weight */
#include "model/threads.h" /* defines: dyn_threads_init */
#include "util/rng.h"      /* defines: dyn_rng_* */
#include "util/util.h"     /* defines: dyn_time_ms, dyn_median */

typedef struct bench_range {
    const char *name;
    int first, last;
    int kind; /* dyn_layer_kind of a single-layer range; -1: no cost-model figure */
} bench_range;

static int fail(const char *what, const dyn_error *err)
{
    fprintf(stderr, "bench_split: %s: %s\n", what, err->msg);
    return 1;
}

/* One layer range of m on mb: medians of fused, B and W (ms). */
static int time_range(dyn_model *m, const dyn_model_microbatch *mb, const bench_range *r, int repeats,
                      const dyn_cost_model *cm, const dyn_mb_shape *shape)
{
    dyn_error err;
    size_t nin = dyn_model_boundary_floats(m, r->first, mb), nout = dyn_model_boundary_floats(m, r->last, mb);
    float *in = nin ? calloc(nin, sizeof(float)) : NULL, *out = nout ? calloc(nout, sizeof(float)) : NULL;
    float *dout = nout ? calloc(nout, sizeof(float)) : NULL, *din = nin ? calloc(nin, sizeof(float)) : NULL;
    double *t = malloc(3 * (size_t)repeats * sizeof(double));
    dyn_model_acts *a = dyn_model_acts_create(&err), *b = dyn_model_acts_create(&err);
    if ((nin && (!in || !din)) || (nout && (!out || !dout)) || !t || !a || !b) return fail("allocation", &err);
    dyn_rng rng;
    dyn_rng_seed(&rng, 7);
    for (size_t i = 0; i < nout; i++) dout[i] = (float)(1e-3 * dyn_rng_normal(&rng));
    if (r->first > 0 && dyn_model_stage_forward(m, a, mb, 0, r->first, NULL, in, 0, NULL, NULL, &err) != DYN_OK)
        return fail("boundary forward", &err);
    for (int rep = -1; rep < repeats; rep++) { /* rep -1: warm-up */
        if (dyn_model_stage_forward(m, a, mb, r->first, r->last, in, out, 0, NULL, NULL, &err) != DYN_OK)
            return fail("forward", &err);
        double t0 = dyn_time_ms();
        if (dyn_model_stage_backward(m, a, mb, r->first, r->last, dout, din, 1e-3f, &err) != DYN_OK)
            return fail("backward", &err);
        double t1 = dyn_time_ms();
        if (dyn_model_stage_forward(m, b, mb, r->first, r->last, in, out, 0, NULL, NULL, &err) != DYN_OK)
            return fail("forward", &err);
        double t2 = dyn_time_ms();
        if (dyn_model_stage_backward_input(m, b, mb, r->first, r->last, dout, din, 1e-3f, &err) != DYN_OK)
            return fail("backward input", &err);
        double t3 = dyn_time_ms();
        if (dyn_model_stage_backward_weight(m, b, mb, r->first, r->last, &err) != DYN_OK)
            return fail("backward weight", &err);
        double t4 = dyn_time_ms();
        if (rep >= 0) {
            t[rep] = t1 - t0;
            t[repeats + rep] = t3 - t2;
            t[2 * repeats + rep] = t4 - t3;
        }
    }
    double fused = dyn_median(t, repeats), bi = dyn_median(t + repeats, repeats), bw = dyn_median(t + 2 * repeats, repeats);
    size_t kept = dyn_model_split_kept_bytes(m, mb, r->first, r->last, 0);
    dyn_layer_cost c;
    double pred = -1.0, pred_mb = -1.0;
    if (cm && r->kind >= 0 && dyn_cost_layer(cm, (dyn_layer_kind)r->kind, shape, DYN_RECOMPUTE_NONE, &c, &err) == DYN_OK &&
        c.bwd_input_ms + c.bwd_weight_ms > 0) {
        pred = c.bwd_input_ms / (c.bwd_input_ms + c.bwd_weight_ms);
        pred_mb = c.stored_mb;
    }
    printf("  %-22s fused %8.2f ms | B %8.2f  W %8.2f  B+W x%.2f | B share %.2f (cost model %.2f) | stored %7.2f MB "
           "(cost model %.2f per layer), B keeps %7.2f MB\n",
           r->name, fused, bi, bw, (bi + bw) / fused, bi / (bi + bw), pred, dyn_model_acts_stored_bytes(b) / 1048576.0,
           pred_mb, kept / 1048576.0);
    free(in);
    free(out);
    free(dout);
    free(din);
    free(t);
    dyn_model_acts_free(a);
    dyn_model_acts_free(b);
    return 0;
}

static int run(const char *name, dyn_model_config cfg, int B, int in_len, int tgt_len, int repeats, int threads,
               const bench_range *ranges, int nr)
{
    dyn_error err;
    dyn_model *m = dyn_model_create(&cfg, 1, &err);
    if (m == NULL) return fail("create", &err);
    dyn_model_set_threads(m, threads);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    if (cm == NULL) return fail("cost model", &err);
    int32_t *tok = malloc((size_t)B * (in_len + tgt_len) * sizeof(int32_t));
    dyn_token_sample *s = malloc((size_t)B * sizeof *s);
    if (tok == NULL || s == NULL) return 1;
    dyn_rng r;
    dyn_rng_seed(&r, 3);
    for (int i = 0; i < B * (in_len + tgt_len); i++) tok[i] = (int32_t)dyn_rng_below(&r, 256);
    for (int i = 0; i < B; i++) {
        s[i].input = tok + (size_t)i * (in_len + tgt_len);
        s[i].input_len = in_len;
        s[i].target = s[i].input + in_len;
        s[i].target_len = tgt_len;
    }
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(cfg.kind, s, B, &err);
    if (mb == NULL) return fail("micro-batch", &err);
    dyn_mb_shape shape = {0};
    shape.rows = B;
    shape.enc_len = cfg.kind == DYN_MODEL_GPT ? in_len + tgt_len : in_len;
    shape.dec_len = cfg.kind == DYN_MODEL_GPT ? 0 : tgt_len;
    printf("%s\n", name);
    int rc = 0;
    for (int i = 0; i < nr && rc == 0; i++) rc = time_range(m, mb, &ranges[i], repeats, cm, &shape);
    dyn_model_microbatch_free(mb);
    dyn_cost_model_free(cm);
    free(s);
    free(tok);
    dyn_model_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_split [repeats >= 1] [threads >= 1]\n  times the fused backward against its input-gradient and weight-gradient halves", NULL);
    dyn_threads_init(); /* idle OpenMP workers sleep (threads.h); may re-execute */
    int repeats = argc > 1 ? atoi(argv[1]) : 5, threads = argc > 2 ? atoi(argv[2]) : 1;
    if (repeats < 1 || threads < 1) {
        fprintf(stderr, "usage: bench_split [repeats >= 1] [threads >= 1]\n");
        return 2;
    }
    printf("bench_split: median of %d alternating runs, %d thread(s), backward of one micro-batch per layer range\n",
           repeats, threads);
    /* The shapes of bench_model. */
    dyn_model_config gpt = dyn_model_config_tiny(DYN_MODEL_GPT, 4, 256, 4, 512);
    dyn_model_config t5 = dyn_model_config_tiny(DYN_MODEL_T5, 2, 256, 4, 512);
    t5.ffn = 512;
    const bench_range gr[] = {
        {"embedding [0,1)", 0, 1, DYN_LAYER_EMBED},
        {"GPT block [1,2)", 1, 2, DYN_LAYER_ENCODER},
        {"head [5,6)", 5, 6, DYN_LAYER_LM_HEAD},
        {"whole model [0,6)", 0, 6, -1},
    };
    /* T5 2+2: emb 0 | enc 1,2 | enc norm 3 | dec emb 4 | dec 5,6 | head 7 */
    const bench_range tr[] = {
        {"encoder block [1,2)", 1, 2, DYN_LAYER_ENCODER},
        {"decoder block [5,6)", 5, 6, DYN_LAYER_DECODER},
        {"head [7,8)", 7, 8, DYN_LAYER_LM_HEAD},
        {"whole model [0,8)", 0, 8, -1},
    };
    int rc = run("GPT 4x256, B=4, in 192 + tgt 64", gpt, 4, 192, 64, repeats, threads, gr, 4);
    if (rc == 0) rc = run("T5 2+2x256 ffn 512, B=4, enc 192 / dec 64", t5, 4, 192, 64, repeats, threads, tr, 4);
    printf("(cost model -1: no single layer kind to compare with)\n");
    return rc;
}
