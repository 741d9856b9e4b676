/* bench_model.c — whole-model forward + backward of one micro-batch, with
 * and without full activation recomputation: the time it costs and the
 * activation memory it saves. Runs alternate (keep, recompute, keep, ...)
 * so both see the same machine noise; it prints the median of each and
 * their ratio, and the arena bytes of each mode.
 *
 * usage: bench_model [repeats (default 5)] [threads (default 1)] */
#include <stdio.h>
#include <stdlib.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "model/model.h"   /* defines: dyn_model_*, dyn_microbatch_* */
#include "model/blas.h"    /* defines: dyn_blas_describe */
#include "model/threads.h" /* defines: dyn_threads_init */
#include "util/rng.h"    /* defines: dyn_rng_* */
#include "util/util.h"   /* defines: dyn_time_ms, dyn_median */

static int run(const char *name, dyn_model_config cfg, int B, int in_len, int tgt_len, int repeats, int threads)
{
    dyn_error err;
    dyn_model *m = dyn_model_create(&cfg, 1, &err);
    if (m == NULL) {
        fprintf(stderr, "bench_model: %s\n", err.msg);
        return 1;
    }
    dyn_model_set_threads(m, threads);
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
    dyn_model_acts *acts[2] = {dyn_model_acts_create(&err), dyn_model_acts_create(&err)};
    if (mb == NULL || acts[0] == NULL || acts[1] == NULL) {
        fprintf(stderr, "bench_model: %s\n", err.msg);
        return 1;
    }
    double *t[2] = {malloc((size_t)repeats * sizeof(double)), malloc((size_t)repeats * sizeof(double))};
    if (t[0] == NULL || t[1] == NULL) return 1;
    for (int rep = -1; rep < repeats; rep++) { /* rep -1: warm-up */
        for (int rc = 0; rc < 2; rc++) {
            double loss, t0 = dyn_time_ms();
            if (dyn_model_forward(m, acts[rc], mb, rc, &loss, NULL, &err) != DYN_OK ||
                dyn_model_backward(m, acts[rc], mb, 1e-3f, &err) != DYN_OK) {
                fprintf(stderr, "bench_model: %s\n", err.msg);
                return 1;
            }
            if (rep >= 0) t[rc][rep] = dyn_time_ms() - t0;
        }
    }
    double keep = dyn_median(t[0], repeats), rec = dyn_median(t[1], repeats);
    printf("%-44s keep %8.1f ms  recompute %8.1f ms  time x%.2f | stored %7.2f MB -> %7.2f MB (x%.2f), arena %7.2f "
           "MB -> %7.2f MB\n",
           name, keep, rec, rec / keep, dyn_model_acts_stored_bytes(acts[0]) / 1048576.0,
           dyn_model_acts_stored_bytes(acts[1]) / 1048576.0,
           (double)dyn_model_acts_stored_bytes(acts[1]) / (double)dyn_model_acts_stored_bytes(acts[0]),
           dyn_model_acts_capacity_bytes(acts[0]) / 1048576.0, dyn_model_acts_capacity_bytes(acts[1]) / 1048576.0);
    free(t[0]);
    free(t[1]);
    dyn_model_acts_free(acts[0]);
    dyn_model_acts_free(acts[1]);
    dyn_model_microbatch_free(mb);
    free(s);
    free(tok);
    dyn_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_model [repeats >= 1] [threads >= 1]\n  times whole-model forward and backward with and without full recomputation", NULL);
    dyn_threads_init(); /* sleeping idle workers, the right BLAS kernel (threads.h); may re-execute */
    int repeats = argc > 1 ? atoi(argv[1]) : 5, threads = argc > 2 ? atoi(argv[2]) : 1;
    if (repeats < 1 || threads < 1) {
        fprintf(stderr, "usage: bench_model [repeats >= 1] [threads >= 1]\n");
        return 2;
    }
    printf("blas: %s\n", dyn_blas_describe());
    printf("bench_model: median of %d alternating runs, %d thread(s), forward+backward of one micro-batch\n", repeats,
           threads);
    dyn_model_config gpt = dyn_model_config_tiny(DYN_MODEL_GPT, 4, 256, 4, 512);
    dyn_model_config t5 = dyn_model_config_tiny(DYN_MODEL_T5, 2, 256, 4, 512);
    t5.ffn = 512;
    int rc = run("GPT 4x256, B=4, in 192 + tgt 64", gpt, 4, 192, 64, repeats, threads);
    if (rc == 0) rc = run("T5 2+2x256 ffn 512, B=4, enc 192 / dec 64", t5, 4, 192, 64, repeats, threads);
    return rc;
}
