/* flan.c — the built-in FLAN-like multi-task length generator.
 *
 * Multi-task instruction-tuning mixtures (FLAN) combine task families whose
 * lengths differ by orders of magnitude: a classification prompt of ~100
 * tokens with a 1-3 token label, a few-shot prompt of ~1,000 tokens, a
 * summarisation article with a 60-token summary, chain-of-thought with long
 * targets. Within a family lengths are skewed with a long right tail, which a
 * log-normal captures with two numbers. The table below is the whole model;
 * docs/workload.md explains each row and where the shape comes from. */
#include "dynapipe/data.h"

#include <math.h>

#include "util/rng.h"  /* defines: dyn_rng_seed, dyn_rng_uniform, dyn_rng_normal */
#include "util/util.h" /* defines: dyn_calloc */

/* mu = ln(median tokens). Weights sum to 1. */
static const dyn_task_family FLAN_FAMILIES[] = {
    /* name                 weight  in_mu    in_sig in_min  tgt_mu   tgt_sig tgt_min */
    {"classification-nli", 0.30, 4.5643, 0.60, 8, 1.0986, 0.50, 1}, /* in ~96,  tgt ~3  */
    {"qa-context",         0.20, 5.7683, 0.70, 8, 2.0794, 0.80, 1}, /* in ~320, tgt ~8  */
    {"summarisation",      0.10, 6.5511, 0.60, 16, 4.0943, 0.50, 4}, /* in ~700, tgt ~60 */
    {"translation",        0.12, 3.6889, 0.60, 4, 3.7842, 0.60, 2}, /* in ~40,  tgt ~44 */
    {"chain-of-thought",   0.13, 5.0106, 0.60, 8, 4.7875, 0.60, 4}, /* in ~150, tgt ~120 */
    {"few-shot",           0.15, 6.8024, 0.50, 32, 1.7918, 0.80, 1}, /* in ~900, tgt ~6 */
};
#define N_FAMILIES ((int32_t)(sizeof FLAN_FAMILIES / sizeof FLAN_FAMILIES[0]))

const dyn_task_family *dyn_flan_families(int32_t *n)
{
    if (n) *n = N_FAMILIES;
    return FLAN_FAMILIES;
}

/* Family index for a uniform u in [0,1): walk the cumulative weights. The last
 * family absorbs rounding so every u maps somewhere. */
static int32_t pick_family(double u)
{
    double acc = 0.0;
    for (int32_t i = 0; i < N_FAMILIES - 1; i++) {
        acc += FLAN_FAMILIES[i].weight;
        if (u < acc) return i;
    }
    return N_FAMILIES - 1;
}

/* round(exp(mu + sigma z)) with a floor, saturated well below INT32_MAX. */
static int32_t lognormal_len(double mu, double sigma, int32_t min_len, double z)
{
    double x = exp(mu + sigma * z);
    if (x > 1e9) x = 1e9;
    int32_t len = (int32_t)lround(x);
    return len < min_len ? min_len : len;
}

dyn_status dyn_dataset_synthetic_flan(uint64_t seed, int32_t n_samples, int32_t max_seqlen,
                                      dyn_model_kind kind, dyn_dataset *out, dyn_error *err)
{
    if (n_samples < 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "synthetic flan: n_samples %d < 0", n_samples);
    if (max_seqlen < 2)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "synthetic flan: max_seqlen %d < 2", max_seqlen);
    if (kind != DYN_MODEL_GPT && kind != DYN_MODEL_T5 && kind != DYN_MODEL_LLAMA)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "synthetic flan: unknown model kind %d", (int)kind);
    dyn_sample *s = dyn_calloc((size_t)n_samples, sizeof *s, "synthetic samples", err);
    if (s == NULL) return DYN_ERR_NOMEM;
    dyn_rng rng;
    dyn_rng_seed(&rng, seed);
    for (int32_t i = 0; i < n_samples; i++) {
        /* Fixed draw order per sample (family, input, target) keeps sample i
         * independent of max_seqlen and kind: clipping happens after. */
        int32_t f = pick_family(dyn_rng_uniform(&rng));
        const dyn_task_family *fam = &FLAN_FAMILIES[f];
        double z_in = dyn_rng_normal(&rng);
        double z_tgt = dyn_rng_normal(&rng);
        int32_t in = lognormal_len(fam->input_mu, fam->input_sigma, fam->input_min, z_in);
        int32_t tgt = lognormal_len(fam->target_mu, fam->target_sigma, fam->target_min, z_tgt);
        dyn_lengths_clip(kind, max_seqlen, &in, &tgt);
        s[i] = (dyn_sample){.id = i, .task = f, .input_len = in, .target_len = tgt};
    }
    out->n = n_samples;
    out->samples = s;
    return DYN_OK;
}
