/* test_blocks.c — the GPT-2, T5 encoder and T5 decoder blocks: gradients
 * (parameters, input, encoder output, relative bias) against central finite
 * differences on padded and document-masked layouts; padded and docmask
 * micro-batches against each sample run alone (outputs, input gradients and
 * summed parameter gradients); recompute mode against stored activations;
 * bit-identical reruns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

#include "model/blocks.h"   /* defines: dyn_gpt_block_*, dyn_t5_* */
#include "model_testutil.h" /* defines: fill_uniform, tol_ratio, fd_mismatches, lay_*, xcalloc */
#include "model/threads.h" /* defines: dyn_threads_init */

enum { GPT = 0, ENC = 1, DEC = 2 };

/* One block instance with all its buffers. */
typedef struct blk {
    int kind;
    dyn_block_dims d;
    const dyn_layout *lay, *elay; /* elay: decoder only */
    size_t np, nin, nenc, nrel;
    float *params, *grads, *inp, *enc, *rel, *drel, *out, *dinp, *denc, *R, *acts, *work;
} blk;

static size_t blk_param_count(int kind, dyn_block_dims d)
{
    return kind == GPT ? dyn_gpt_block_params_count(d)
           : kind == ENC ? dyn_t5_enc_params_count(d) : dyn_t5_dec_params_count(d);
}

static void blk_init(blk *b, int kind, dyn_block_dims d, const dyn_layout *lay,
                     const dyn_layout *elay, int with_rel, uint64_t seed)
{
    memset(b, 0, sizeof(*b));
    dyn_rng rng;
    dyn_rng_seed(&rng, seed);
    b->kind = kind;
    b->d = d;
    b->lay = lay;
    b->elay = elay;
    int B = lay->B, T = lay->T, Te = elay ? elay->T : 0;
    b->np = blk_param_count(kind, d);
    b->nin = (size_t)B * T * d.C;
    b->nenc = (size_t)B * Te * d.C;
    b->params = xcalloc(b->np, 4);
    b->grads = xcalloc(b->np, 4);
    fill_uniform(b->params, b->np, 0.3f, &rng);
    /* Norm gains near 1, as after initialisation. */
    if (kind == GPT) {
        dyn_gpt_block_params p;
        dyn_gpt_block_params_layout(&p, b->params, d);
        for (int c = 0; c < d.C; c++) {
            p.ln1_w[c] += 1.0f;
            p.ln2_w[c] += 1.0f;
        }
    }
    b->inp = xcalloc(b->nin, 4);
    b->out = xcalloc(b->nin, 4);
    b->dinp = xcalloc(b->nin, 4);
    b->R = xcalloc(b->nin, 4);
    fill_uniform(b->inp, b->nin, 1.0f, &rng);
    fill_uniform(b->R, b->nin, 1.0f, &rng);
    /* The loss only sees real tokens, as a masked loss would. */
    float *mask = xcalloc((size_t)B * T, 4);
    dyn_layout_valid_mask(lay, mask);
    for (size_t i = 0; i < b->nin; i++) b->R[i] *= mask[i / (size_t)d.C];
    free(mask);
    if (kind == DEC) {
        b->enc = xcalloc(b->nenc, 4);
        b->denc = xcalloc(b->nenc, 4);
        fill_uniform(b->enc, b->nenc, 1.0f, &rng);
    }
    if (with_rel) {
        b->nrel = (size_t)d.NH * DYN_T5_NUM_BUCKETS;
        b->rel = xcalloc(b->nrel, 4);
        b->drel = xcalloc(b->nrel, 4);
        fill_uniform(b->rel, b->nrel, 1.0f, &rng);
    }
    size_t na = kind == GPT ? dyn_gpt_block_act_floats(d, B, T)
                : kind == ENC ? dyn_t5_enc_act_floats(d, B, T) : dyn_t5_dec_act_floats(d, B, T, Te);
    size_t nw = kind == GPT ? dyn_gpt_block_work_floats(d, B, T)
                : kind == ENC ? dyn_t5_enc_work_floats(d, B, T) : dyn_t5_dec_work_floats(d, B, T, Te);
    b->acts = xcalloc(na, 4);
    b->work = xcalloc(nw, 4);
}

static void blk_free(blk *b)
{
    free(b->params); free(b->grads); free(b->inp); free(b->enc); free(b->rel); free(b->drel);
    free(b->out); free(b->dinp); free(b->denc); free(b->R); free(b->acts); free(b->work);
}

static void blk_forward(blk *b)
{
    int B = b->lay->B, T = b->lay->T;
    if (b->kind == GPT) {
        dyn_gpt_block_params p;
        dyn_gpt_block_acts a;
        dyn_gpt_block_params_layout(&p, b->params, b->d);
        dyn_gpt_block_acts_layout(&a, b->acts, b->d, B, T);
        dyn_gpt_block_forward(b->out, b->inp, &p, &a, b->lay, b->d, b->work);
    } else if (b->kind == ENC) {
        dyn_t5_enc_params p;
        dyn_t5_enc_acts a;
        dyn_t5_enc_params_layout(&p, b->params, b->d);
        dyn_t5_enc_acts_layout(&a, b->acts, b->d, B, T);
        dyn_t5_enc_forward(b->out, b->inp, &p, b->rel, &a, b->lay, b->d, b->work);
    } else {
        dyn_t5_dec_params p;
        dyn_t5_dec_acts a;
        dyn_t5_dec_params_layout(&p, b->params, b->d);
        dyn_t5_dec_acts_layout(&a, b->acts, b->d, B, T, b->elay->T);
        dyn_t5_dec_forward(b->out, b->inp, b->enc, &p, b->rel, &a, b->lay, b->elay, b->d, b->work);
    }
}

/* Backward of L = sum(out ∘ R), gradients accumulated into b->grads,
 * b->denc, b->drel; b->dinp overwritten. */
static void blk_backward(blk *b, int recompute)
{
    int B = b->lay->B, T = b->lay->T;
    if (b->kind == GPT) {
        dyn_gpt_block_params p, g;
        dyn_gpt_block_acts a;
        dyn_gpt_block_params_layout(&p, b->params, b->d);
        dyn_gpt_block_params_layout(&g, b->grads, b->d);
        dyn_gpt_block_acts_layout(&a, b->acts, b->d, B, T);
        dyn_gpt_block_backward(b->dinp, &g, b->R, b->inp, &p, &a, b->lay, b->d, recompute, b->work);
    } else if (b->kind == ENC) {
        dyn_t5_enc_params p, g;
        dyn_t5_enc_acts a;
        dyn_t5_enc_params_layout(&p, b->params, b->d);
        dyn_t5_enc_params_layout(&g, b->grads, b->d);
        dyn_t5_enc_acts_layout(&a, b->acts, b->d, B, T);
        dyn_t5_enc_backward(b->dinp, &g, b->drel, b->R, b->inp, &p, b->rel, &a, b->lay, b->d,
                            recompute, b->work);
    } else {
        dyn_t5_dec_params p, g;
        dyn_t5_dec_acts a;
        dyn_t5_dec_params_layout(&p, b->params, b->d);
        dyn_t5_dec_params_layout(&g, b->grads, b->d);
        dyn_t5_dec_acts_layout(&a, b->acts, b->d, B, T, b->elay->T);
        dyn_t5_dec_backward(b->dinp, b->denc, &g, b->drel, b->R, b->inp, b->enc, &p, b->rel, &a,
                            b->lay, b->elay, b->d, recompute, b->work);
    }
}

static double blk_loss(blk *b)
{
    blk_forward(b);
    double L = 0.0;
    for (size_t i = 0; i < b->nin; i++) L += (double)b->out[i] * b->R[i];
    return L;
}

static double blk_loss_cb(void *b) { return blk_loss(b); }

static void fd_compare(blk *b, float *x, const float *g, size_t n, int trials, dyn_rng *rng,
                       const char *what)
{
    const fd_opts o = {trials, 1e-2f, 1e-3, 5e-3, 0, 0, what};
    assert_int_equal(fd_mismatches(blk_loss_cb, b, x, g, n, &o, rng), 0);
}

static void fd_block(int kind, const dyn_layout *lay, const dyn_layout *elay, int with_rel,
                     dyn_block_dims d, uint64_t seed)
{
    blk b;
    blk_init(&b, kind, d, lay, elay, with_rel, seed);
    blk_forward(&b);
    blk_backward(&b, 0);
    dyn_rng rng;
    dyn_rng_seed(&rng, seed + 100);
    fd_compare(&b, b.params, b.grads, b.np, 40, &rng, "param");
    fd_compare(&b, b.inp, b.dinp, b.nin, 20, &rng, "inp");
    if (kind == DEC) fd_compare(&b, b.enc, b.denc, b.nenc, 20, &rng, "enc");
    if (with_rel) fd_compare(&b, b.rel, b.drel, b.nrel, 20, &rng, "rel");
    /* Input gradients at pad positions are exactly 0. */
    float *mask = xcalloc((size_t)lay->B * lay->T, 4);
    dyn_layout_valid_mask(lay, mask);
    for (size_t i = 0; i < b.nin; i++)
        if (mask[i / (size_t)d.C] == 0.0f) assert_true(b.dinp[i] == 0.0f);
    free(mask);
    blk_free(&b);
}

static const dyn_block_dims GPT_D = {16, 2, 8, 64, 2};
static const dyn_block_dims T5_D = {16, 2, 6, 20, 2}; /* inner 12 != C */


static void test_gpt_block_fd(void **state)
{
    (void)state;
    const int32_t lens[2] = {9, 5};
    dyn_layout *p = lay_padded(lens, 2, 10);
    fd_block(GPT, p, NULL, 0, GPT_D, 1);
    const int32_t slens[3] = {4, 5, 6}, counts[2] = {2, 1};
    dyn_layout *m = lay_packed(slens, counts, 2, 10, 1);
    fd_block(GPT, m, NULL, 0, GPT_D, 2);
    dyn_layout_free(p);
    dyn_layout_free(m);
}

static void test_t5_encoder_block_fd(void **state)
{
    (void)state;
    const int32_t lens[2] = {7, 10};
    dyn_layout *p = lay_padded(lens, 2, 10);
    fd_block(ENC, p, NULL, 1, T5_D, 3);
    fd_block(ENC, p, NULL, 0, T5_D, 4);
    const int32_t slens[3] = {3, 6, 8}, counts[2] = {2, 1};
    dyn_layout *m = lay_packed(slens, counts, 2, 9, 1);
    fd_block(ENC, m, NULL, 1, T5_D, 5);
    dyn_layout_free(p);
    dyn_layout_free(m);
}

static void test_t5_decoder_block_fd(void **state)
{
    (void)state;
    const int32_t dl[2] = {6, 3}, el[2] = {4, 9};
    dyn_layout *dp = lay_padded(dl, 2, 7), *ep = lay_padded(el, 2, 9);
    fd_block(DEC, dp, ep, 1, T5_D, 6);
    const int32_t ds[3] = {3, 2, 5}, es[3] = {6, 2, 4}, counts[2] = {2, 1};
    dyn_layout *dm = lay_packed(ds, counts, 2, 6, 1), *em = lay_packed(es, counts, 2, 8, 1);
    fd_block(DEC, dm, em, 1, T5_D, 7);
    dyn_layout_free(dp);
    dyn_layout_free(ep);
    dyn_layout_free(dm);
    dyn_layout_free(em);
}

/* Copy sample rows between a batched buffer (layout lay) and a single-sample
 * buffer: to_batch != 0 copies single → batch. */
static void move_sample(float *batch, float *single, const dyn_segment *s, int T, int C,
                        int to_batch)
{
    for (int t = 0; t < s->len; t++) {
        float *bp = batch + ((size_t)s->row * T + s->start + t) * C, *sp = single + (size_t)t * C;
        if (to_batch)
            memcpy(bp, sp, (size_t)C * 4);
        else
            memcpy(sp, bp, (size_t)C * 4);
    }
}

/* Run every sample alone (B=1, T=len) and compare with the batch b: outputs,
 * input (and encoder) gradients per sample, and parameter gradients summed
 * over samples. The batch's inputs and R are set from the singles. */
static void compare_with_singles(blk *b, int kind, const int32_t *dlens, const int32_t *elens,
                                 int n, int with_rel)
{
    dyn_block_dims d = b->d;
    float *gsum = xcalloc(b->np, 4), *relsum = xcalloc((size_t)d.NH * DYN_T5_NUM_BUCKETS, 4);
    blk s[8];
    assert_true(n <= 8);
    for (int i = 0; i < n; i++) {
        dyn_layout *l = lay_padded(&dlens[i], 1, dlens[i]);
        dyn_layout *e = kind == DEC ? lay_padded(&elens[i], 1, elens[i]) : NULL;
        blk_init(&s[i], kind, d, l, e, with_rel, 1000 + (uint64_t)i);
        memcpy(s[i].params, b->params, b->np * 4);
        if (with_rel) memcpy(s[i].rel, b->rel, s[i].nrel * 4);
        move_sample(b->inp, s[i].inp, &b->lay->samples[i], b->lay->T, d.C, 1);
        move_sample(b->R, s[i].R, &b->lay->samples[i], b->lay->T, d.C, 1);
        if (kind == DEC) move_sample(b->enc, s[i].enc, &b->elay->samples[i], b->elay->T, d.C, 1);
        blk_forward(&s[i]);
        blk_backward(&s[i], 0);
        for (size_t j = 0; j < b->np; j++) gsum[j] += s[i].grads[j];
        if (with_rel)
            for (size_t j = 0; j < s[i].nrel; j++) relsum[j] += s[i].drel[j];
    }
    blk_forward(b);
    blk_backward(b, 0);
    for (int i = 0; i < n; i++) {
        size_t m = (size_t)dlens[i] * d.C;
        float *tmp = xcalloc(m + (kind == DEC ? (size_t)elens[i] * d.C : 0), 4);
        move_sample(b->out, tmp, &b->lay->samples[i], b->lay->T, d.C, 0);
        assert_true(tol_ratio(tmp, s[i].out, m, 1e-5, 1e-4) <= 1.0);
        move_sample(b->dinp, tmp, &b->lay->samples[i], b->lay->T, d.C, 0);
        assert_true(tol_ratio(tmp, s[i].dinp, m, 1e-5, 1e-4) <= 1.0);
        if (kind == DEC) {
            move_sample(b->denc, tmp, &b->elay->samples[i], b->elay->T, d.C, 0);
            assert_true(tol_ratio(tmp, s[i].denc, (size_t)elens[i] * d.C, 1e-5, 1e-4) <= 1.0);
        }
        free(tmp);
    }
    assert_true(tol_ratio(b->grads, gsum, b->np, 1e-4, 1e-4) <= 1.0);
    if (with_rel) assert_true(tol_ratio(b->drel, relsum, b->nrel, 1e-4, 1e-4) <= 1.0);
    for (int i = 0; i < n; i++) {
        dyn_layout_free((dyn_layout *)s[i].lay);
        dyn_layout_free((dyn_layout *)s[i].elay);
        blk_free(&s[i]);
    }
    free(gsum);
    free(relsum);
}

static void test_batched_layouts_match_samples_alone(void **state)
{
    (void)state;
    const int32_t dl[3] = {5, 9, 3}, el[3] = {7, 2, 8};
    const int32_t pack_counts[2] = {2, 1};
    for (int kind = GPT; kind <= DEC; kind++) {
        dyn_block_dims d = kind == GPT ? GPT_D : T5_D;
        int with_rel = kind != GPT;
        /* Padded: one sample per row. */
        dyn_layout *pl = lay_padded(dl, 3, 10), *pe = kind == DEC ? lay_padded(el, 3, 9) : NULL;
        blk b;
        blk_init(&b, kind, d, pl, pe, with_rel, 50 + (uint64_t)kind);
        compare_with_singles(&b, kind, dl, el, 3, with_rel);
        blk_free(&b);
        /* Packed with document masks: samples 0,1 share a row. */
        dyn_layout *ml = lay_packed(dl, pack_counts, 2, 15, 1);
        dyn_layout *me = kind == DEC ? lay_packed(el, pack_counts, 2, 10, 1) : NULL;
        blk_init(&b, kind, d, ml, me, with_rel, 60 + (uint64_t)kind);
        compare_with_singles(&b, kind, dl, el, 3, with_rel);
        blk_free(&b);
        dyn_layout_free(pl);
        dyn_layout_free(pe);
        dyn_layout_free(ml);
        dyn_layout_free(me);
    }
}

static void test_recompute_and_determinism(void **state)
{
    (void)state;
    const int32_t ds[3] = {30, 70, 20}, es[3] = {50, 10, 90}, counts[2] = {2, 1};
    dyn_layout *dm = lay_packed(ds, counts, 2, 110, 1), *em = lay_packed(es, counts, 2, 100, 1);
    for (int kind = GPT; kind <= DEC; kind++) {
        dyn_block_dims d = kind == GPT ? GPT_D : T5_D;
        blk a, b;
        blk_init(&a, kind, d, dm, kind == DEC ? em : NULL, kind != GPT, 77);
        blk_init(&b, kind, d, dm, kind == DEC ? em : NULL, kind != GPT, 77);
        blk_forward(&a);
        blk_backward(&a, 0);
        /* b: forward, then clobber the activations; backward recomputes. */
        blk_forward(&b);
        size_t na = kind == GPT ? dyn_gpt_block_act_floats(d, 2, 110)
                    : kind == ENC ? dyn_t5_enc_act_floats(d, 2, 110) : dyn_t5_dec_act_floats(d, 2, 110, 100);
        for (size_t i = 0; i < na; i++) b.acts[i] = 12345.0f;
        blk_backward(&b, 1);
        assert_memory_equal(a.out, b.out, a.nin * 4);
        assert_memory_equal(a.dinp, b.dinp, a.nin * 4);
        assert_memory_equal(a.grads, b.grads, a.np * 4);
        if (kind == DEC) assert_memory_equal(a.denc, b.denc, a.nenc * 4);
        if (kind != GPT) assert_memory_equal(a.drel, b.drel, a.nrel * 4);
        blk_free(&a);
        blk_free(&b);
    }
    dyn_layout_free(dm);
    dyn_layout_free(em);
}

static void test_sizes_and_flops(void **state)
{
    (void)state;
    dyn_block_dims d = {512, 8, 64, 2048, 1};
    /* GPT-2 block: 12 C^2 + 13 C parameters. */
    assert_int_equal(dyn_gpt_block_params_count(d), 12 * 512 * 512 + 13 * 512);
    dyn_gpt_block_params p;
    float *flat = xcalloc(dyn_gpt_block_params_count(d), 4);
    assert_int_equal(dyn_gpt_block_params_layout(&p, flat, d), dyn_gpt_block_params_count(d));
    assert_true(p.fcproj_b + 512 == flat + dyn_gpt_block_params_count(d));
    free(flat);
    assert_true(fabs(dyn_gpt_block_flops(1, 2048, 512) -
                     3.0 * (24.0 * 2048 * 512.0 * 512 + 4.0 * 2048.0 * 2048 * 512)) < 1.0);
    /* T5 decoder with I = C, F = 4C, Te = Td reduces to the GPT count plus
     * the cross-attention: q, kv, o projections (8 C^2 per token) and the
     * cross scores (4 T^2 C), and the FFN's second input matrix (8 C^2). */
    double t5 = dyn_t5_dec_flops(d, 2, 100, 100), gpt = dyn_gpt_block_flops(2, 100, 512);
    assert_true(fabs(t5 - gpt - 3.0 * (16.0 * 200 * 512.0 * 512 + 4.0 * 2 * 100 * 100 * 512.0)) < 1.0);
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_flops),
        cmocka_unit_test(test_gpt_block_fd),
        cmocka_unit_test(test_t5_encoder_block_fd),
        cmocka_unit_test(test_t5_decoder_block_fd),
        cmocka_unit_test(test_batched_layouts_match_samples_alone),
        cmocka_unit_test(test_recompute_and_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
