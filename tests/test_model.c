/* test_model.c — whole GPT-2 and T5 models on tiny configs:
 *   - gradients of every parameter tensor against central finite
 *     differences of the loss (padded, document-masked and plain packed
 *     layouts);
 *   - padded and document-masked micro-batches give the same per-sample
 *     losses and the same gradient as running each sample alone;
 *   - loss normalisation: one global batch cut into different micro-batches
 *     (1 vs several, padded vs packed) gives the same gradient;
 *   - full recomputation gives bit-identical gradients and stores fewer
 *     activation bytes;
 *   - running the layer list as pipeline stages equals the whole model;
 *   - bad input is refused without running anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "model_testutil.h" /* defines: make_samples, loss_and_grad, loss_only */
#include "dynapipe/plan.h"    /* the planner's micro-batch beside the model's: both names must coexist */
#include "dynapipe/sched.h"
#include "model/threads.h" /* defines: dyn_threads_init */

static void grad_check(dyn_model *m, const dyn_model_microbatch *mb, const char *what)
{
    assert_int_equal(model_grad_check(m, mb, what, 0), 0);
}

static void run_grad_checks(dyn_model_kind kind)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(kind, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 7, &err);
    assert_non_null(m);
    dyn_token_sample s[4];
    int32_t *store;
    make_samples(s, 4, 2, 6, 2, 5, 11, &store);
    dyn_model_microbatch *pad = dyn_model_microbatch_create_padded(kind, s, 4, &err);
    int32_t rows[2] = {3, 1};
    dyn_model_microbatch *doc = dyn_model_microbatch_create_packed(kind, s, 4, rows, 2, 0, 0, 1, &err);
    dyn_model_microbatch *nomask = dyn_model_microbatch_create_packed(kind, s, 4, rows, 2, 0, 0, 0, &err);
    assert_non_null(pad);
    assert_non_null(doc);
    assert_non_null(nomask);
    grad_check(m, pad, "padded");
    grad_check(m, doc, "docmask");
    grad_check(m, nomask, "packed no mask");
    dyn_model_microbatch_free(pad);
    dyn_model_microbatch_free(doc);
    dyn_model_microbatch_free(nomask);
    dyn_model_free(m);
    free(store);
}

static void test_gpt_gradients_match_finite_differences(void **state)
{
    (void)state;
    run_grad_checks(DYN_MODEL_GPT);
}

static void test_t5_gradients_match_finite_differences(void **state)
{
    (void)state;
    run_grad_checks(DYN_MODEL_T5);
}

/* max |a - b| <= tol * max |b| */
static void assert_close(const float *a, const float *b, size_t n, double tol, const char *what)
{
    double mx = 0, md = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
        if (fabs(a[i] - b[i]) > md) md = fabs(a[i] - b[i]);
    }
    if (md > tol * mx) fail_msg("%s: max difference %.3g vs scale %.3g", what, md, mx);
}

static void run_alone_vs_batched(dyn_model_kind kind)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(kind, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 3, &err);
    assert_non_null(m);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    enum { NS = 5 };
    dyn_token_sample s[NS];
    int32_t *store;
    make_samples(s, NS, 1, 9, 1, 6, 21, &store);
    size_t np = dyn_model_num_params(m);
    float *alone = malloc(np * sizeof(float)), alone_loss[NS];
    assert_non_null(alone);
    /* each sample alone, gradients accumulated */
    dyn_model_zero_grad(m);
    for (int i = 0; i < NS; i++) {
        dyn_model_microbatch *one = dyn_model_microbatch_create_padded(kind, &s[i], 1, &err);
        assert_non_null(one);
        float l;
        double sum = 0;
        assert_int_equal(dyn_model_forward(m, a, one, 0, &sum, &l, &err), DYN_OK);
        assert_int_equal(dyn_model_backward(m, a, one, 1.0f, &err), DYN_OK);
        assert_float_equal(l, sum, 1e-4 * sum);
        alone_loss[i] = l;
        dyn_model_microbatch_free(one);
    }
    memcpy(alone, dyn_model_grads(m), np * sizeof(float));
    int32_t rows[2] = {2, 3};
    dyn_model_microbatch *mbs[2] = {dyn_model_microbatch_create_padded(kind, s, NS, &err),
                              dyn_model_microbatch_create_packed(kind, s, NS, rows, 2, 0, 0, 1, &err)};
    const char *names[2] = {"padded", "docmask"};
    for (int k = 0; k < 2; k++) {
        assert_non_null(mbs[k]);
        float sl[NS];
        dyn_model_zero_grad(m);
        double total = loss_and_grad(m, a, mbs[k], 1.0f, 0, sl);
        double ref = 0;
        for (int i = 0; i < NS; i++) {
            if (fabs(sl[i] - alone_loss[i]) > 1e-5 * fabs(alone_loss[i]))
                fail_msg("%s: sample %d loss %.7g, alone %.7g", names[k], i, sl[i], alone_loss[i]);
            ref += alone_loss[i];
        }
        assert_float_equal(total, ref, 1e-5 * ref);
        assert_close(dyn_model_grads(m), alone, np, 1e-5, names[k]);
        dyn_model_microbatch_free(mbs[k]);
    }
    free(alone);
    free(store);
    dyn_model_acts_free(a);
    dyn_model_free(m);
}

static void test_gpt_layouts_equal_samples_alone(void **state)
{
    (void)state;
    run_alone_vs_batched(DYN_MODEL_GPT);
}

static void test_t5_layouts_equal_samples_alone(void **state)
{
    (void)state;
    run_alone_vs_batched(DYN_MODEL_T5);
}

/* A global batch of 6 samples, dloss = 1 / (its target tokens), computed as
 * one micro-batch, three padded micro-batches, and two packed ones. */
static void run_loss_normalisation(dyn_model_kind kind)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(kind, 1, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 5, &err);
    assert_non_null(m);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    enum { NS = 6 };
    dyn_token_sample s[NS];
    int32_t *store;
    make_samples(s, NS, 1, 8, 1, 8, 31, &store);
    int64_t tokens = 0;
    for (int i = 0; i < NS; i++) tokens += s[i].target_len;
    float dloss = (float)(1.0 / (double)tokens);
    size_t np = dyn_model_num_params(m);
    float *ref = malloc(np * sizeof(float));
    assert_non_null(ref);

    dyn_model_zero_grad(m);
    dyn_model_microbatch *one = dyn_model_microbatch_create_padded(kind, s, NS, &err);
    double loss_one = loss_and_grad(m, a, one, dloss, 0, NULL) / (double)tokens;
    memcpy(ref, dyn_model_grads(m), np * sizeof(float));
    dyn_model_microbatch_free(one);

    dyn_model_zero_grad(m);
    double loss3 = 0;
    for (int k = 0; k < 3; k++) {
        dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(kind, s + 2 * k, 2, &err);
        loss3 += loss_and_grad(m, a, mb, dloss, 0, NULL) / (double)tokens;
        dyn_model_microbatch_free(mb);
    }
    assert_float_equal(loss3, loss_one, 1e-6 * loss_one);
    assert_close(dyn_model_grads(m), ref, np, 1e-5, "three padded micro-batches");

    dyn_model_zero_grad(m);
    int32_t r1[2] = {2, 1}, r2[1] = {3};
    dyn_model_microbatch *p1 = dyn_model_microbatch_create_packed(kind, s, 3, r1, 2, 0, 0, 1, &err);
    dyn_model_microbatch *p2 = dyn_model_microbatch_create_packed(kind, s + 3, 3, r2, 1, 0, 0, 1, &err);
    double lossp = loss_and_grad(m, a, p1, dloss, 0, NULL) / (double)tokens;
    lossp += loss_and_grad(m, a, p2, dloss, 0, NULL) / (double)tokens;
    assert_float_equal(lossp, loss_one, 1e-6 * loss_one);
    assert_close(dyn_model_grads(m), ref, np, 1e-5, "two packed micro-batches");
    dyn_model_microbatch_free(p1);
    dyn_model_microbatch_free(p2);
    free(ref);
    free(store);
    dyn_model_acts_free(a);
    dyn_model_free(m);
}

static void test_loss_normalisation_gpt(void **state)
{
    (void)state;
    run_loss_normalisation(DYN_MODEL_GPT);
}

static void test_loss_normalisation_t5(void **state)
{
    (void)state;
    run_loss_normalisation(DYN_MODEL_T5);
}

/* Recompute: same gradient bit for bit, fewer stored bytes. */
static void run_recompute(dyn_model_kind kind)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(kind, 4, 16, 2, 64);
    dyn_model *m = dyn_model_create(&c, 9, &err);
    assert_non_null(m);
    dyn_model_acts *a = dyn_model_acts_create(&err), *b = dyn_model_acts_create(&err);
    dyn_token_sample s[4];
    int32_t *store;
    make_samples(s, 4, 10, 20, 5, 10, 41, &store);
    dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(kind, s, 4, &err);
    size_t np = dyn_model_num_params(m);
    float *g0 = malloc(np * sizeof(float));
    assert_non_null(g0);
    dyn_model_zero_grad(m);
    double l0 = loss_and_grad(m, a, mb, 0.01f, 0, NULL);
    memcpy(g0, dyn_model_grads(m), np * sizeof(float));
    dyn_model_zero_grad(m);
    double l1 = loss_and_grad(m, b, mb, 0.01f, 1, NULL);
    assert_true(l0 == l1);
    assert_memory_equal(g0, dyn_model_grads(m), np * sizeof(float));
    /* The arena grows for a bigger micro-batch and is reused (not shrunk)
     * for a smaller one. */
    size_t cap = dyn_model_acts_capacity_bytes(a);
    dyn_model_microbatch *small = dyn_model_microbatch_create_padded(kind, s, 1, &err);
    loss_only(m, a, small);
    assert_int_equal(dyn_model_acts_capacity_bytes(a), cap);
    dyn_model_microbatch_free(small);
    loss_only(m, a, mb); /* restore its stored-bytes figure for mb */
    size_t keep = dyn_model_acts_stored_bytes(a), rec = dyn_model_acts_stored_bytes(b);
    printf("    %s 4 blocks: stored activations %zu bytes, with recompute %zu bytes (%.0f%%)\n",
           kind == DYN_MODEL_GPT ? "GPT" : "T5", keep, rec, 100.0 * (double)rec / (double)keep);
    assert_true(rec < keep);
    printf("    arena capacity %zu vs %zu bytes\n", dyn_model_acts_capacity_bytes(a), dyn_model_acts_capacity_bytes(b));
    assert_true(dyn_model_acts_capacity_bytes(b) < dyn_model_acts_capacity_bytes(a));
    free(g0);
    free(store);
    dyn_model_microbatch_free(mb);
    dyn_model_acts_free(a);
    dyn_model_acts_free(b);
    dyn_model_free(m);
}

static void test_recompute_gpt(void **state)
{
    (void)state;
    run_recompute(DYN_MODEL_GPT);
}

static void test_recompute_t5(void **state)
{
    (void)state;
    run_recompute(DYN_MODEL_T5);
}

/* Run the layer list as consecutive stages [cuts[i], cuts[i+1]), passing
 * boundary activations forward and their gradients backward. */
static void run_stages(dyn_model_kind kind, const int *cuts, int ncuts)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(kind, 2, 16, 2, 32);
    dyn_model *m = dyn_model_create(&c, 13, &err);
    assert_non_null(m);
    assert_int_equal(cuts[ncuts - 1], dyn_model_num_layers(m));
    dyn_token_sample s[3];
    int32_t *store;
    make_samples(s, 3, 2, 7, 2, 6, 51, &store);
    int32_t rows[2] = {2, 1};
    dyn_model_microbatch *mb = dyn_model_microbatch_create_packed(kind, s, 3, rows, 2, 0, 0, 1, &err);
    assert_non_null(mb);
    size_t np = dyn_model_num_params(m);
    float *ref = malloc(np * sizeof(float));
    dyn_model_acts *whole = dyn_model_acts_create(&err);
    dyn_model_zero_grad(m);
    double lref = loss_and_grad(m, whole, mb, 0.1f, 0, NULL);
    memcpy(ref, dyn_model_grads(m), np * sizeof(float));

    int ns = ncuts - 1;
    dyn_model_acts *acts[8];
    float *bnd[9] = {0}, *gbnd[9] = {0};
    for (int i = 0; i <= ns; i++) {
        size_t n = dyn_model_boundary_floats(m, cuts[i], mb);
        assert_int_equal(n == 0, i == 0 || i == ns);
        bnd[i] = n ? malloc(n * sizeof(float)) : NULL;
        gbnd[i] = n ? malloc(n * sizeof(float)) : NULL;
    }
    for (int i = 0; i < ns; i++) acts[i] = dyn_model_acts_create(&err);
    dyn_model_zero_grad(m);
    double loss = 0;
    for (int i = 0; i < ns; i++)
        assert_int_equal(dyn_model_stage_forward(m, acts[i], mb, cuts[i], cuts[i + 1], bnd[i], bnd[i + 1], i % 2,
                                                 &loss, NULL, &err),
                         DYN_OK);
    for (int i = ns - 1; i >= 0; i--)
        assert_int_equal(
            dyn_model_stage_backward(m, acts[i], mb, cuts[i], cuts[i + 1], gbnd[i + 1], gbnd[i], 0.1f, &err), DYN_OK);
    assert_true(loss == lref);
    assert_memory_equal(dyn_model_grads(m), ref, np * sizeof(float));
    for (int i = 0; i <= ns; i++) {
        free(bnd[i]);
        free(gbnd[i]);
    }
    for (int i = 0; i < ns; i++) dyn_model_acts_free(acts[i]);
    dyn_model_acts_free(whole);
    free(ref);
    free(store);
    dyn_model_microbatch_free(mb);
    dyn_model_free(m);
}

static void test_stages_equal_whole_model(void **state)
{
    (void)state;
    /* GPT (2 blocks): L = 4: embedding | block | block | head */
    const int g1[] = {0, 1, 2, 3, 4}, g2[] = {0, 2, 4};
    run_stages(DYN_MODEL_GPT, g1, 5);
    run_stages(DYN_MODEL_GPT, g2, 3);
    /* T5 (2+2 blocks): L = 8: emb | enc | enc | enc-norm | dec-emb | dec | dec | head */
    const int t1[] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, t2[] = {0, 3, 5, 8}, t3[] = {0, 4, 8};
    /* Layer parameter slices tile the flat buffer in layer order. */
    for (int kind = 0; kind < 2; kind++) {
        dyn_model_config c = dyn_model_config_tiny((dyn_model_kind)kind, 2, 16, 2, 32);
        dyn_model *m = dyn_model_create(&c, 1, NULL);
        size_t next = 0, off, cnt;
        for (int l = 0; l < dyn_model_num_layers(m); l++) {
            dyn_model_layer_params(m, l, l + 1, &off, &cnt);
            assert_int_equal(off, next);
            next = off + cnt;
            int is_dec_embed = kind == 1 && l == 4; /* T5's decoder embedding owns nothing */
            assert_int_equal(cnt == 0, is_dec_embed);
        }
        assert_int_equal(next, dyn_model_num_params(m));
        dyn_model_layer_params(m, 1, 3, &off, &cnt);
        size_t o1, c1, o2, c2;
        dyn_model_layer_params(m, 1, 2, &o1, &c1);
        dyn_model_layer_params(m, 2, 3, &o2, &c2);
        assert_int_equal(off, o1);
        assert_int_equal(cnt, c1 + c2);
        dyn_model_free(m);
    }
    run_stages(DYN_MODEL_T5, t1, 9);
    run_stages(DYN_MODEL_T5, t2, 4);
    run_stages(DYN_MODEL_T5, t3, 3);
}

static void test_bad_input_is_refused(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(DYN_MODEL_GPT, 1, 16, 2, 8);
    dyn_model *m = dyn_model_create(&c, 1, &err);
    dyn_model_acts *a = dyn_model_acts_create(&err);
    int32_t in[6] = {1, 2, 300, 4, 5, 6}, tg[2] = {7, 8};
    dyn_token_sample s = {in, 2, tg, 2};
    dyn_model_microbatch *ok = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, &s, 1, &err);
    double loss;
    assert_int_equal(dyn_model_backward(m, a, ok, 1.0f, &err), DYN_ERR_INVALID_ARG); /* no forward yet */
    assert_int_equal(dyn_model_stage_forward(m, a, ok, 1, 3, NULL, NULL, 0, &loss, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_int_equal(dyn_model_stage_forward(m, a, ok, 2, 2, NULL, NULL, 0, &loss, NULL, &err), DYN_ERR_INVALID_ARG);
    s.input_len = 3; /* includes token 300 >= vocab 260 */
    dyn_model_microbatch *badtok = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, &s, 1, &err);
    assert_int_equal(dyn_model_forward(m, a, badtok, 0, &loss, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    in[2] = 3;
    s.input_len = 6; /* 6 + 2 tokens > max_seqlen 8? no: positions 0..7 fit */
    dyn_model_microbatch *fits = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, &s, 1, &err);
    assert_int_equal(dyn_model_forward(m, a, fits, 0, &loss, NULL, &err), DYN_OK);
    int32_t tg3[3] = {7, 8, 9};
    dyn_token_sample s9 = {in, 6, tg3, 3};
    dyn_model_microbatch *longer = dyn_model_microbatch_create_padded(DYN_MODEL_GPT, &s9, 1, &err);
    assert_int_equal(dyn_model_forward(m, a, longer, 0, &loss, NULL, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "max_seqlen"));
    dyn_model_microbatch *t5mb = dyn_model_microbatch_create_padded(DYN_MODEL_T5, &s, 1, &err);
    assert_int_equal(dyn_model_forward(m, a, t5mb, 0, &loss, NULL, &err), DYN_ERR_INVALID_ARG);
    dyn_token_sample empty = {in, 0, tg, 2};
    assert_null(dyn_model_microbatch_create_padded(DYN_MODEL_GPT, &empty, 1, &err));
    int32_t rows[1] = {2};
    assert_null(dyn_model_microbatch_create_packed(DYN_MODEL_GPT, &s, 1, rows, 1, 0, 0, 1, &err));
    dyn_model_config bad = c;
    bad.ffn = 3 * c.hidden;
    assert_null(dyn_model_create(&bad, 1, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    dyn_model_microbatch_free(ok);
    dyn_model_microbatch_free(badtok);
    dyn_model_microbatch_free(fits);
    dyn_model_microbatch_free(longer);
    dyn_model_microbatch_free(t5mb);
    dyn_model_acts_free(a);
    dyn_model_free(m);
}

static void test_same_seed_same_parameters(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        dyn_model_config c = dyn_model_config_tiny((dyn_model_kind)kind, 1, 16, 2, 16);
        dyn_model *a = dyn_model_create(&c, 42, NULL), *b = dyn_model_create(&c, 42, NULL),
                  *d = dyn_model_create(&c, 43, NULL);
        size_t np = dyn_model_num_params(a);
        assert_memory_equal(dyn_model_params(a), dyn_model_params(b), np * sizeof(float));
        assert_memory_not_equal(dyn_model_params(a), dyn_model_params(d), np * sizeof(float));
        dyn_model_free(a);
        dyn_model_free(b);
        dyn_model_free(d);
    }
}

/* With zero gradients the Adam term is 0, so one step only applies the
 * decoupled decay: matrices shrink by (1 - lr*wd), biases and norm gains do
 * not move. */
static void test_adamw_decays_matrices_only(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        dyn_model_config c = dyn_model_config_tiny((dyn_model_kind)kind, 1, 16, 2, 16);
        dyn_model *m = dyn_model_create(&c, 4, NULL);
        size_t np = dyn_model_num_params(m);
        float *before = malloc(np * sizeof(float));
        memcpy(before, dyn_model_params(m), np * sizeof(float));
        dyn_model_zero_grad(m);
        dyn_adamw_config ac = {0.9f, 0.999f, 1e-8f, 0.1f};
        assert_float_equal(dyn_model_adamw_step(m, 0.5f, &ac, 1.0), 0.0, 0);
        assert_int_equal(dyn_model_step_count(m), 1);
        int decayed = 0, kept = 0;
        for (int ti = 0; ti < dyn_model_num_tensors(m); ti++) {
            const dyn_param_tensor *t = dyn_model_tensor(m, ti);
            int matrix = t->ndim == 2;
            assert_int_equal(t->decay, matrix);
            for (size_t k = 0; k < t->numel; k++) {
                float b = before[t->offset + k], a = dyn_model_params(m)[t->offset + k];
                if (matrix) assert_float_equal(a, b * (1.0f - 0.5f * 0.1f), 1e-7);
                else assert_true(a == b);
            }
            decayed += matrix;
            kept += !matrix;
        }
        assert_true(decayed > 0 && kept > 0);
        free(before);
        dyn_model_free(m);
    }
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_gradients_match_finite_differences),
        cmocka_unit_test(test_t5_gradients_match_finite_differences),
        cmocka_unit_test(test_gpt_layouts_equal_samples_alone),
        cmocka_unit_test(test_t5_layouts_equal_samples_alone),
        cmocka_unit_test(test_loss_normalisation_gpt),
        cmocka_unit_test(test_loss_normalisation_t5),
        cmocka_unit_test(test_recompute_gpt),
        cmocka_unit_test(test_recompute_t5),
        cmocka_unit_test(test_stages_equal_whole_model),
        cmocka_unit_test(test_bad_input_is_refused),
        cmocka_unit_test(test_same_seed_same_parameters),
        cmocka_unit_test(test_adamw_decays_matrices_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
