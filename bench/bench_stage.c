/* bench_stage.c — stage-only models of a preset: creation time and state
 * bytes (parameters + gradients + AdamW moments, shared copies apart) of
 * each stage of an even-ish split, beside the whole model's, and the cost
 * model's states_mb for the same layers. Creation draws the whole model's
 * random stream (skipping the values of tensors the stage does not hold),
 * so its time falls with the stage's size but not to zero.
 *
 * usage: bench_stage [preset (default gpt2-124m)] [stages (default 4)] */
#include <stdio.h>
#include <stdlib.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "dynapipe/cost.h"         /* defines: dyn_cost_model_create_analytic, dyn_cost_layer_states_mb */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "model/model.h"           /* defines: dyn_model_create_stage, dyn_model_state_bytes */
#include "util/util.h"             /* defines: dyn_time_ms */

#define MB (1024.0 * 1024.0)

/* The cost model's states of layers [first, last) (its kinds: embedding,
 * blocks, head; T5's bridge, counted at its first layer, the encoder norm:
 * the decoder embedding reads the shared table). */
static double cost_states_mb(const dyn_cost_model *cm, const dyn_model_config *c, int first, int last)
{
    int n = c->n_layers, L = dyn_model_config_num_layers(c);
    double mb = 0;
    for (int l = first; l < last; l++) {
        if (l == 0) mb += dyn_cost_layer_states_mb(cm, DYN_LAYER_EMBED);
        else if (l == L - 1) mb += dyn_cost_layer_states_mb(cm, DYN_LAYER_LM_HEAD);
        else if (l <= n) mb += dyn_cost_layer_states_mb(cm, DYN_LAYER_ENCODER);
        else if (c->kind == DYN_MODEL_T5 && l == n + 1) mb += dyn_cost_layer_states_mb(cm, DYN_LAYER_BRIDGE);
        else if (c->kind == DYN_MODEL_T5 && l > n + 2) mb += dyn_cost_layer_states_mb(cm, DYN_LAYER_DECODER);
    }
    return mb;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_stage [preset] [stages]\n  prints per-stage parameter and state bytes of a preset cut into stages", NULL);
    const char *preset = argc > 1 ? argv[1] : "gpt2-124m";
    int ns = argc > 2 ? atoi(argv[2]) : 4;
    dyn_error err;
    dyn_model_config c;
    if (dyn_model_config_preset(preset, &c, &err) != DYN_OK || ns < 1) {
        fprintf(stderr, "bench_stage: %s\n", ns < 1 ? "stages must be >= 1" : err.msg);
        return 2;
    }
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&c, dyn_machine_builtin("cpu"), &err);
    if (cm == NULL) {
        fprintf(stderr, "bench_stage: %s\n", err.msg);
        return 1;
    }
    double t0 = dyn_time_ms();
    dyn_model *full = dyn_model_create(&c, 1, &err);
    double t1 = dyn_time_ms();
    if (full == NULL) {
        fprintf(stderr, "bench_stage: %s\n", err.msg);
        return 1;
    }
    int L = dyn_model_num_layers(full);
    if (ns > L) ns = L;
    printf("bench_stage: %s, %d layers, %d stages\n", preset, L, ns);
    printf("  full model          create %7.0f ms | states %8.1f MB | cost model %8.1f MB\n", t1 - t0,
           dyn_model_state_bytes(full, NULL) / MB, dyn_cost_model_states_mb(cm));
    dyn_model_free(full);
    for (int s = 0; s < ns; s++) {
        int first = (int)((long)L * s / ns), last = (int)((long)L * (s + 1) / ns);
        t0 = dyn_time_ms();
        dyn_model *m = dyn_model_create_stage(&c, 1, first, last, &err);
        t1 = dyn_time_ms();
        if (m == NULL) {
            fprintf(stderr, "bench_stage: %s\n", err.msg);
            return 1;
        }
        size_t shared, total = dyn_model_state_bytes(m, &shared);
        printf("  stage %d [%2d, %2d)   create %7.0f ms | states %8.1f MB (shared copies %7.1f MB) | cost model %8.1f MB\n",
               s, first, last, t1 - t0, total / MB, shared / MB, cost_states_mb(cm, &c, first, last));
        dyn_model_free(m);
    }
    dyn_cost_model_free(cm);
    return 0;
}
