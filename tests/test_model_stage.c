/* test_model_stage.c — stage-only models (dyn_model_create_stage) against
 * one full model, GPT and T5 tiny configs, splits into 1, 2 and 4 stages
 * (including T5 stages that hold the decoder embedding and the head, and
 * stages that borrow a relative-bias table) and Llama, tied and untied:
 *   - each held tensor has the full model's values; owned / shared-copy
 *     flags, the owned slice and the state bytes add up;
 *   - the forward through the chain of stage models gives bit-identical
 *     boundary activations and loss; the backward (fused, or split B/W)
 *     bit-identical gradients of tensors no other stage holds, and for
 *     shared tensors the sum over holders equals the full gradient within
 *     fp32 rounding (the summation order differs);
 *   - after summing shared gradients into every holder, one AdamW step per
 *     stage matches the full model's step (bitwise for unshared tensors),
 *     also with global-norm clipping through dyn_model_adamw_step_norm;
 *   - dyn_model_shared_tensors lists the holders; misuse is refused; save
 *     writes owned tensors only;
 *   - a stage's state bytes against the cost model's per-layer states_mb,
 *     with the differences the cost model leaves out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dynapipe/cost.h"      /* defines: dyn_cost_model_create_analytic, dyn_cost_layer_states_mb */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "model/safetensors.h" /* defines: dyn_safetensors_open, _count */
#include "model_testutil.h"   /* defines: make_samples, loss_and_grad, model_grad_check */

#define MAXS 4

/* Llama: tie the head to the embedding (test_llama_stages_equal_full_model
 * runs both ways); the tiny config has 2 heads over 1 key/value head. */
static int llama_tie;
static dyn_model_config tiny(dyn_model_kind kind)
{
    dyn_model_config c = dyn_model_config_tiny(kind, 3, 16, 2, 32);
    if (kind == DYN_MODEL_LLAMA) c.tie_embeddings = llama_tie;
    return c;
}

static void ok(dyn_status st, const dyn_error *err)
{
    if (st != DYN_OK) fail_msg("%s", err->msg);
}

/* Is tensor `name` held by more than one stage of the split? */
static const dyn_shared_tensor *group_of(const dyn_shared_tensor *g, int ng, const char *name)
{
    for (int i = 0; i < ng; i++)
        if (strcmp(g[i].name, name) == 0) return &g[i];
    return NULL;
}

/* Largest |a - b| over a tensor, relative to max |b|. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double md = 0, mx = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
        if (fabs((double)a[i] - b[i]) > md) md = fabs((double)a[i] - b[i]);
    }
    return md / mx;
}

static double worst_shared_grad, worst_shared_param; /* printed once at the end */

/* Stage models of the split agree with the full model: values, forward,
 * backward (split halves when `split`), shared sums and an AdamW step. */
static void run_split(dyn_model_kind kind, const int32_t *cuts, int ns, int split)
{
    dyn_error err;
    dyn_model_config c = tiny(kind);
    dyn_model *full = dyn_model_create(&c, 21, &err);
    assert_non_null(full);
    int L = dyn_model_num_layers(full);
    assert_int_equal(cuts[ns], L);
    dyn_model *st[MAXS];
    for (int s = 0; s < ns; s++) {
        st[s] = dyn_model_create_stage(&c, 21, cuts[s], cuts[s + 1], &err);
        if (st[s] == NULL) fail_msg("%s", err.msg);
    }
    int ng = 0;
    dyn_shared_tensor *g = dyn_model_shared_tensors(&c, cuts, ns, &ng, &err);
    assert_non_null(g);

    /* Values, flags, owned slice, state bytes. */
    size_t owned_total = 0;
    for (int s = 0; s < ns; s++) {
        dyn_model *m = st[s];
        int f, l;
        dyn_model_stage_range(m, &f, &l);
        assert_int_equal(f, cuts[s]);
        assert_int_equal(l, cuts[s + 1]);
        size_t owned = 0, off, cnt;
        for (int i = 0; i < dyn_model_num_tensors(m); i++) {
            const dyn_param_tensor *t = dyn_model_tensor(m, i);
            const dyn_param_tensor *ft = dyn_model_find_tensor(full, t->name);
            assert_non_null(ft);
            assert_int_equal(t->numel, ft->numel);
            assert_memory_equal(dyn_model_params(m) + t->offset, dyn_model_params(full) + ft->offset,
                                t->numel * sizeof(float));
            int owns = t->layer >= f && t->layer < l;
            assert_int_equal(t->shared_copy, !owns);
            const dyn_shared_tensor *gr = group_of(g, ng, t->name);
            if (t->shared_copy) assert_non_null(gr); /* a copy is always in a group */
            if (gr) {
                int held = 0;
                for (int h = 0; h < gr->n_holders; h++) held |= gr->holders[h] == s;
                assert_true(held);
                assert_int_equal(gr->owner == s, owns);
            }
            if (owns) owned += t->numel;
        }
        dyn_model_layer_params(m, f, l, &off, &cnt);
        assert_int_equal(off, 0);
        assert_int_equal(cnt, owned);
        size_t shared_b, total_b = dyn_model_state_bytes(m, &shared_b);
        assert_int_equal(total_b, 16 * dyn_model_num_params(m));
        assert_int_equal(total_b - shared_b, 16 * owned);
        owned_total += owned;
    }
    assert_int_equal(owned_total, dyn_model_num_params(full)); /* every tensor owned exactly once */

    /* Full model: loss and gradients; its own chain gives the boundaries. */
    dyn_token_sample smp[4];
    int32_t *store;
    make_samples(smp, 4, 2, 9, 2, 6, 33, &store);
    int32_t rows[2] = {3, 1};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_packed(kind, smp, 4, rows, 2, 0, 0, 1, &err);
    assert_non_null(mb);
    dyn_model_acts *fa = dyn_model_acts_create(&err), *acts[MAXS];
    float *bnd[MAXS + 1] = {0}, *ref[MAXS + 1] = {0}, *gb[MAXS + 1] = {0};
    for (int i = 0; i <= ns; i++) {
        size_t n = dyn_model_boundary_floats(full, cuts[i], mb);
        if (n) {
            bnd[i] = calloc(n, 4);
            ref[i] = calloc(n, 4);
            gb[i] = calloc(n, 4);
        }
    }
    dyn_model_zero_grad(full);
    double lfull = loss_and_grad(full, fa, mb, 0.1f, 0, NULL);
    for (int s = 0; s < ns - 1; s++)
        ok(dyn_model_stage_forward(full, fa, mb, cuts[s], cuts[s + 1], ref[s], ref[s + 1], 0, NULL, NULL, &err), &err);

    /* Stage chain. */
    double loss = 0;
    for (int s = 0; s < ns; s++) {
        acts[s] = dyn_model_acts_create(&err);
        dyn_model_zero_grad(st[s]);
        ok(dyn_model_stage_forward(st[s], acts[s], mb, cuts[s], cuts[s + 1], bnd[s], bnd[s + 1], s % 2, &loss, NULL,
                                   &err),
           &err);
        if (s < ns - 1)
            assert_memory_equal(bnd[s + 1], ref[s + 1], dyn_model_boundary_floats(full, cuts[s + 1], mb) * 4);
    }
    assert_true(loss == lfull);
    for (int s = ns - 1; s >= 0; s--) {
        if (split) {
            ok(dyn_model_stage_backward_input(st[s], acts[s], mb, cuts[s], cuts[s + 1], gb[s + 1], gb[s], 0.1f, &err),
               &err);
            ok(dyn_model_stage_backward_weight(st[s], acts[s], mb, cuts[s], cuts[s + 1], &err), &err);
        } else {
            ok(dyn_model_stage_backward(st[s], acts[s], mb, cuts[s], cuts[s + 1], gb[s + 1], gb[s], 0.1f, &err), &err);
        }
    }

    /* Gradients: unshared bitwise; shared: sum over holders (in holder
     * order, as the runtime's all-reduce would), written to every holder. */
    for (int s = 0; s < ns; s++) {
        for (int i = 0; i < dyn_model_num_tensors(st[s]); i++) {
            const dyn_param_tensor *t = dyn_model_tensor(st[s], i);
            const dyn_param_tensor *ft = dyn_model_find_tensor(full, t->name);
            const float *gs = dyn_model_grads(st[s]) + t->offset, *gf = dyn_model_grads(full) + ft->offset;
            if (group_of(g, ng, t->name) == NULL && memcmp(gs, gf, t->numel * 4) != 0)
                fail_msg("stage %d: gradient of %s differs from the full model's", s, t->name);
        }
    }
    for (int k = 0; k < ng; k++) {
        const dyn_param_tensor *ft = dyn_model_find_tensor(full, g[k].name);
        float *sum = calloc(ft->numel, 4);
        for (int h = 0; h < g[k].n_holders; h++) {
            dyn_model *m = st[g[k].holders[h]];
            const float *gs = dyn_model_grads(m) + dyn_model_find_tensor(m, g[k].name)->offset;
            for (size_t e = 0; e < ft->numel; e++) sum[e] += gs[e];
        }
        double d = rel_diff(sum, dyn_model_grads(full) + ft->offset, ft->numel);
        if (d > worst_shared_grad) worst_shared_grad = d;
        if (d > 1e-5) fail_msg("shared %s: summed gradient off by %.3g (relative)", g[k].name, d);
        for (int h = 0; h < g[k].n_holders; h++) {
            dyn_model *m = st[g[k].holders[h]];
            memcpy(dyn_model_grads(m) + dyn_model_find_tensor(m, g[k].name)->offset, sum, ft->numel * 4);
        }
        free(sum);
    }

    /* One AdamW step each (no clipping): unshared tensors bitwise, shared
     * copies identical to each other and close to the full model. */
    dyn_adamw_config ac = dyn_adamw_default();
    dyn_model_adamw_step(full, 1e-2f, &ac, 0.0);
    for (int s = 0; s < ns; s++) dyn_model_adamw_step(st[s], 1e-2f, &ac, 0.0);
    for (int s = 0; s < ns; s++) {
        for (int i = 0; i < dyn_model_num_tensors(st[s]); i++) {
            const dyn_param_tensor *t = dyn_model_tensor(st[s], i);
            const dyn_param_tensor *ft = dyn_model_find_tensor(full, t->name);
            const float *ps = dyn_model_params(st[s]) + t->offset, *pf = dyn_model_params(full) + ft->offset;
            const dyn_shared_tensor *gr = group_of(g, ng, t->name);
            if (gr == NULL) {
                if (memcmp(ps, pf, t->numel * 4) != 0) fail_msg("stage %d: %s after AdamW differs", s, t->name);
                continue;
            }
            dyn_model *o = st[gr->holders[0]];
            assert_memory_equal(ps, dyn_model_params(o) + dyn_model_find_tensor(o, t->name)->offset, t->numel * 4);
            double d = rel_diff(ps, pf, t->numel);
            if (d > worst_shared_param) worst_shared_param = d;
            if (d > 1e-5) fail_msg("shared %s after AdamW off by %.3g (relative)", t->name, d);
        }
    }

    for (int i = 0; i <= ns; i++) {
        free(bnd[i]);
        free(ref[i]);
        free(gb[i]);
    }
    for (int s = 0; s < ns; s++) {
        dyn_model_acts_free(acts[s]);
        dyn_model_free(st[s]);
    }
    dyn_model_shared_tensors_free(g, ng);
    dyn_model_acts_free(fa);
    dyn_model_microbatch_free(mb);
    free(store);
    dyn_model_free(full);
}

static void test_gpt_stages_equal_full_model(void **state)
{
    (void)state;
    /* GPT, 3 blocks: L = 5: emb | block | block | block | head */
    const int32_t one[] = {0, 5}, two[] = {0, 2, 5}, four[] = {0, 1, 3, 4, 5};
    run_split(DYN_MODEL_GPT, one, 1, 0); /* embedding and head in one stage: no copies */
    run_split(DYN_MODEL_GPT, two, 2, 0);
    run_split(DYN_MODEL_GPT, four, 4, 0);
    run_split(DYN_MODEL_GPT, four, 4, 1);
}

static void test_llama_stages_equal_full_model(void **state)
{
    (void)state;
    const int32_t one[] = {0, 5}, two[] = {0, 2, 5}, four[] = {0, 1, 3, 4, 5};
    for (llama_tie = 0; llama_tie <= 1; llama_tie++) {
        run_split(DYN_MODEL_LLAMA, one, 1, 0);
        run_split(DYN_MODEL_LLAMA, two, 2, 0);
        run_split(DYN_MODEL_LLAMA, four, 4, 0); /* tied: the head stage holds a copy of embed_tokens */
        run_split(DYN_MODEL_LLAMA, four, 4, 1);
    }
    llama_tie = 0;
}

static void test_t5_stages_equal_full_model(void **state)
{
    (void)state;
    /* T5, 3+3 blocks: L = 10: emb | enc x3 (1-3) | enc norm 4 | dec emb 5 |
     * dec x3 (6-8) | head 9 */
    const int32_t a[] = {0, 5, 10};        /* stage 1: decoder embedding (shared copy) .. head */
    const int32_t b[] = {0, 7, 10};        /* stage 0: both embeddings; stage 1 borrows the decoder table */
    const int32_t c[] = {0, 2, 5, 7, 10};  /* every kind of copy */
    const int32_t d[] = {0, 1, 4, 9, 10};  /* encoder blocks 0-2 apart from the embedding, head alone */
    run_split(DYN_MODEL_T5, a, 2, 0);
    run_split(DYN_MODEL_T5, b, 2, 1);
    run_split(DYN_MODEL_T5, c, 4, 0);
    run_split(DYN_MODEL_T5, c, 4, 1);
    run_split(DYN_MODEL_T5, d, 4, 0);
    printf("    shared tensors: summed gradients within %.2g, parameters after AdamW within %.2g (relative to max)\n",
           worst_shared_grad, worst_shared_param);
}

/* Global-norm clipping across stages: the norm from the stages' owned
 * squared norms, then dyn_model_adamw_step_norm, against the full model's
 * clipped step. */
static void test_clipped_step_across_stages(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c = tiny(DYN_MODEL_GPT);
    const int32_t cuts[] = {0, 2, 5};
    dyn_model *full = dyn_model_create(&c, 5, &err);
    dyn_model *st[2] = {dyn_model_create_stage(&c, 5, 0, 2, &err), dyn_model_create_stage(&c, 5, 2, 5, &err)};
    assert_non_null(st[0]);
    assert_non_null(st[1]);
    dyn_rng r;
    dyn_rng_seed(&r, 3);
    for (size_t i = 0; i < dyn_model_num_params(full); i++) dyn_model_grads(full)[i] = (float)dyn_rng_normal(&r);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < dyn_model_num_tensors(st[s]); i++) {
            const dyn_param_tensor *t = dyn_model_tensor(st[s], i);
            memcpy(dyn_model_grads(st[s]) + t->offset,
                   dyn_model_grads(full) + dyn_model_find_tensor(full, t->name)->offset, t->numel * 4);
        }
    double norm = sqrt(dyn_model_grad_sqnorm_owned(st[0]) + dyn_model_grad_sqnorm_owned(st[1]));
    dyn_adamw_config ac = dyn_adamw_default();
    double fnorm = dyn_model_adamw_step(full, 1e-2f, &ac, 1.0);
    assert_true(fabs(norm - fnorm) <= 1e-9 * fnorm);
    for (int s = 0; s < 2; s++) dyn_model_adamw_step_norm(st[s], 1e-2f, &ac, norm, 1.0);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < dyn_model_num_tensors(st[s]); i++) {
            const dyn_param_tensor *t = dyn_model_tensor(st[s], i);
            const float *pf = dyn_model_params(full) + dyn_model_find_tensor(full, t->name)->offset;
            assert_true(rel_diff(dyn_model_params(st[s]) + t->offset, pf, t->numel) <= 1e-6);
        }
    (void)cuts;
    dyn_model_free(st[0]);
    dyn_model_free(st[1]);
    dyn_model_free(full);
}

static void test_shared_tensor_lists(void **state)
{
    (void)state;
    dyn_error err;
    int n;
    dyn_model_config g = tiny(DYN_MODEL_GPT), t = tiny(DYN_MODEL_T5);
    const int32_t g1[] = {0, 5}, g2[] = {0, 2, 5};
    dyn_shared_tensor *s = dyn_model_shared_tensors(&g, g1, 1, &n, &err);
    assert_non_null(s);
    assert_int_equal(n, 0);
    dyn_model_shared_tensors_free(s, n);
    s = dyn_model_shared_tensors(&g, g2, 2, &n, &err);
    assert_int_equal(n, 1);
    assert_string_equal(s[0].name, "wte.weight");
    assert_int_equal(s[0].owner, 0);
    assert_int_equal(s[0].n_holders, 2);
    assert_int_equal(s[0].holders[1], 1);
    dyn_model_shared_tensors_free(s, n);
    const int32_t t4[] = {0, 2, 5, 7, 10};
    s = dyn_model_shared_tensors(&t, t4, 4, &n, &err);
    assert_int_equal(n, 3); /* table order: shared, encoder table, decoder table */
    assert_string_equal(s[0].name, "shared.weight");
    assert_int_equal(s[0].owner, 0);
    assert_int_equal(s[0].holders[0] * 10 + s[0].holders[1], 2);
    assert_non_null(strstr(s[1].name, "encoder.block.0"));
    assert_int_equal(s[1].holders[0] * 10 + s[1].holders[1], 1);
    assert_non_null(strstr(s[2].name, "decoder.block.0"));
    assert_int_equal(s[2].owner, 2);
    assert_int_equal(s[2].holders[0] * 10 + s[2].holders[1], 23);
    dyn_model_shared_tensors_free(s, n);
    /* Encoder blocks 0, 1, 2 on three stages: the table has three holders. */
    const int32_t t5[] = {0, 1, 2, 3, 10};
    s = dyn_model_shared_tensors(&t, t5, 4, &n, &err);
    assert_non_null(s);
    assert_int_equal(s[1].n_holders, 3); /* owner (layer 1) and the stages of blocks 1 and 2 */
    dyn_model_shared_tensors_free(s, n);
    const int32_t bad1[] = {0, 3, 3, 10}, bad2[] = {0, 4, 9};
    assert_null(dyn_model_shared_tensors(&t, bad1, 3, &n, &err));
    assert_non_null(strstr(err.msg, "rise strictly"));
    assert_null(dyn_model_shared_tensors(&t, bad2, 2, &n, &err));
}

static void test_stage_misuse_and_save(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c = tiny(DYN_MODEL_T5);
    assert_null(dyn_model_create_stage(&c, 1, 3, 3, &err));
    assert_non_null(strstr(err.msg, "bad layer range"));
    assert_null(dyn_model_create_stage(&c, 1, 0, 11, &err));
    dyn_model *m = dyn_model_create_stage(&c, 1, 5, 10, &err); /* decoder embedding .. head */
    assert_non_null(m);
    assert_non_null(dyn_model_find_tensor(m, "shared.weight"));
    assert_int_equal(dyn_model_find_tensor(m, "shared.weight")->shared_copy, 1);
    assert_null(dyn_model_find_tensor(m, "encoder.final_layer_norm.weight"));
    dyn_token_sample smp[2];
    int32_t *store;
    make_samples(smp, 2, 2, 5, 2, 4, 9, &store);
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(DYN_MODEL_T5, smp, 2, &err);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    float *in = calloc(dyn_model_boundary_floats(m, 4, mb), 4), *out = calloc(dyn_model_boundary_floats(m, 5, mb), 4);
    assert_int_equal(dyn_model_stage_forward(m, a, mb, 4, 5, in, out, 0, NULL, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "outside this stage model's layers [5, 10)"));
    assert_int_equal(dyn_model_forward(m, a, mb, 0, NULL, NULL, &err), DYN_ERR_INVALID_ARG);
    /* Save: owned tensors only; loading into a stage model is refused. */
    char path[] = "/tmp/dyn_stage_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    ok(dyn_model_save(m, path, &err), &err);
    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    assert_non_null(st);
    int owned = 0;
    for (int i = 0; i < dyn_model_num_tensors(m); i++) owned += !dyn_model_tensor(m, i)->shared_copy;
    assert_int_equal(dyn_safetensors_count(st), owned);
    assert_string_equal(dyn_safetensors_meta(st, "dynapipe.layers"), "5 10");
    dyn_safetensors_free(st);
    assert_int_equal(dyn_model_load(m, path, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "stage model"));
    unlink(path);
    free(in);
    free(out);
    free(store);
    dyn_model_acts_free(a);
    dyn_model_microbatch_free(mb);
    dyn_model_free(m);
}

/* Stage state bytes beside the analytic cost model's states_mb per layer
 * kind (16 bytes per parameter either way). Equal for GPT's embedding,
 * blocks and head (the head's tied wte copy is in both); for T5 the cost
 * model leaves out the bias tables (NH x 32 per holder), the encoder's final
 * norm (C) and the decoder embedding's copy of `shared` (V x C). */
static double stage_mb(const dyn_model_config *c, int first, int last)
{
    dyn_error err;
    dyn_model *m = dyn_model_create_stage(c, 1, first, last, &err);
    if (m == NULL) fail_msg("%s", err.msg);
    double mb = (double)dyn_model_state_bytes(m, NULL) / (1024.0 * 1024.0);
    dyn_model_free(m);
    return mb;
}

static void test_state_bytes_against_cost_model(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config g, t;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &g, &err), DYN_OK);
    assert_int_equal(dyn_model_config_preset("t5-tiny", &t, &err), DYN_OK);
    const dyn_machine *cpu = dyn_machine_builtin("cpu");
    dyn_cost_model *cg = dyn_cost_model_create_analytic(&g, cpu, &err), *ct = dyn_cost_model_create_analytic(&t, cpu, &err);
    assert_non_null(cg);
    assert_non_null(ct);
    const double MB = 1024.0 * 1024.0, eps = 1e-9;
    int n = g.n_layers;
    assert_true(fabs(stage_mb(&g, 0, 1) - dyn_cost_layer_states_mb(cg, DYN_LAYER_EMBED)) < eps);
    assert_true(fabs(stage_mb(&g, 1, 2) - dyn_cost_layer_states_mb(cg, DYN_LAYER_ENCODER)) < eps);
    assert_true(fabs(stage_mb(&g, n + 1, n + 2) - dyn_cost_layer_states_mb(cg, DYN_LAYER_LM_HEAD)) < eps);
    double rel = 16.0 * t.heads * 32 / MB, norm = 16.0 * t.hidden / MB, emb = 16.0 * t.vocab * t.hidden / MB;
    int ne = t.n_layers, D = ne + 2, H = ne + t.n_dec_layers + 3;
    assert_true(fabs(stage_mb(&t, 0, 1) - dyn_cost_layer_states_mb(ct, DYN_LAYER_EMBED)) < eps);
    assert_true(fabs(stage_mb(&t, 1, 2) - dyn_cost_layer_states_mb(ct, DYN_LAYER_ENCODER) - rel) < eps);
    assert_true(fabs(stage_mb(&t, 2, 3) - dyn_cost_layer_states_mb(ct, DYN_LAYER_ENCODER) - rel) < eps);
    assert_true(fabs(stage_mb(&t, ne + 1, ne + 2) - norm) < eps);
    assert_true(fabs(stage_mb(&t, D, D + 1) - emb) < eps);
    assert_true(fabs(stage_mb(&t, D + 1, D + 2) - dyn_cost_layer_states_mb(ct, DYN_LAYER_DECODER) - rel) < eps);
    assert_true(fabs(stage_mb(&t, H, H + 1) - dyn_cost_layer_states_mb(ct, DYN_LAYER_LM_HEAD)) < eps);
    dyn_cost_model_free(cg);
    dyn_cost_model_free(ct);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_stages_equal_full_model),
        cmocka_unit_test(test_t5_stages_equal_full_model),
        cmocka_unit_test(test_llama_stages_equal_full_model),
        cmocka_unit_test(test_clipped_step_across_stages),
        cmocka_unit_test(test_shared_tensor_lists),
        cmocka_unit_test(test_stage_misuse_and_save),
        cmocka_unit_test(test_state_bytes_against_cost_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
