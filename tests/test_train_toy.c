/* test_train_toy.c — a tiny GPT and a tiny T5 learn to reverse short
 * strings (toy.h) within a bounded number of AdamW steps, and training is
 * reproducible bit for bit with the same seed, whatever the thread count.
 *
 * Setup: 2 layers (T5: 2 + 2), hidden 48, 4 heads; strings of 2..5 letters
 * over an 8-letter alphabet, 16 samples per global batch, each global batch cut into two micro-batches (one padded,
 * one packed with document masks) with dloss = 1 / (target tokens of the
 * global batch); peak lr 3e-3, warm-up 20 steps then cosine decay to 1e-4 over
 * 400 steps; clipping at 1.0.
 * Threshold: the mean target-token loss over the last 10 steps must fall
 * below TOY_LOSS_THRESHOLD nats (chance over the alphabet is ln 8 = 2.08;
 * the untrained models start at ~5.6 (GPT) and ~19 (T5, HF init with N(0,1)
 * embeddings)). DYN_TOY_STEPS overrides the step count. Under the
 * sanitizers: 150 steps and a 1.5-nat threshold (see below). The first
 * step's loss must be at least ln(vocabulary) - 0.5 (an untrained model
 * cannot beat chance). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h" /* defines: dyn_model_*, dyn_microbatch_* */
#include "model/toy.h"   /* defines: dyn_toy_reverse_sample */
#include "util/util.h"   /* defines: dyn_time_ms */
#include "model/threads.h" /* defines: dyn_threads_init */

#define TOY_BATCH 16
#define TOY_MAX_LEN 5
#if defined(__SANITIZE_ADDRESS__)
/* Sanitizer builds are unoptimised and ~10x slower: they check memory
 * safety over a shorter run, and only that the models learn (well below
 * chance, ln 8 = 2.08 nats), not that they finish learning. */
#define TOY_STEPS 150
#define TOY_LOSS_THRESHOLD 1.5
#else
#define TOY_STEPS 400
#define TOY_LOSS_THRESHOLD 0.15
#endif

static int toy_steps(void)
{
    const char *e = getenv("DYN_TOY_STEPS");
    return e && atoi(e) > 0 ? atoi(e) : TOY_STEPS;
}

/* Train for `steps` steps; losses[step] = mean target-token loss. */
static void train_threads(dyn_model_kind kind, uint64_t seed, int steps, double *losses, int threads)
{
    dyn_error err;
    dyn_model_config c = dyn_model_config_tiny(kind, 2, 48, 4, 16);
    dyn_model *m = dyn_model_create(&c, seed, &err);
    assert_non_null(m);
    dyn_model_set_threads(m, threads);
    dyn_model_acts *acts[2] = {dyn_model_acts_create(&err), dyn_model_acts_create(&err)};
    dyn_rng data;
    dyn_rng_seed(&data, seed + 1000);
    dyn_adamw_config ac = {0.9f, 0.98f, 1e-8f, 0.01f};
    dyn_lr_schedule sch = {3e-3f, 1e-4f, 20, steps};
    static int32_t in[TOY_BATCH][TOY_MAX_LEN + 1], tg[TOY_BATCH][TOY_MAX_LEN + 1];
    dyn_token_sample s[TOY_BATCH];
    for (int step = 0; step < steps; step++) {
        int64_t tokens = 0;
        for (int i = 0; i < TOY_BATCH; i++) {
            dyn_toy_reverse_sample(&data, 2, TOY_MAX_LEN, 8, in[i], tg[i], &s[i]);
            tokens += s[i].target_len;
        }
        int32_t rows[2] = {4, 4};
        dyn_model_microbatch *mb[2] = {dyn_model_microbatch_create_padded(kind, s, TOY_BATCH / 2, &err),
                                 dyn_model_microbatch_create_packed(kind, s + TOY_BATCH / 2, TOY_BATCH / 2, rows, 2, 0, 0, 1,
                                                              &err)};
        dyn_model_zero_grad(m);
        double loss = 0;
        for (int k = 0; k < 2; k++) {
            assert_non_null(mb[k]);
            double l = 0;
            assert_int_equal(dyn_model_forward(m, acts[k], mb[k], k, &l, NULL, &err), DYN_OK);
            assert_int_equal(dyn_model_backward(m, acts[k], mb[k], (float)(1.0 / (double)tokens), &err), DYN_OK);
            loss += l;
            dyn_model_microbatch_free(mb[k]);
        }
        losses[step] = loss / (double)tokens;
        dyn_model_adamw_step(m, dyn_lr_at(&sch, step), &ac, 1.0);
    }
    dyn_model_acts_free(acts[0]);
    dyn_model_acts_free(acts[1]);
    dyn_model_free(m);
}

static void train(dyn_model_kind kind, uint64_t seed, int steps, double *losses)
{
    train_threads(kind, seed, steps, losses, 1);
}

static void run_toy(dyn_model_kind kind, const char *name)
{
    int steps = toy_steps();
    double *losses = malloc((size_t)steps * sizeof(double));
    assert_non_null(losses);
    double t0 = dyn_time_ms();
    train(kind, 1, steps, losses);
    double tail = 0;
    int from = steps > 10 ? steps - 10 : 0;
    for (int i = from; i < steps; i++) tail += losses[i] / (steps - from);
    printf("    %s reverse: loss %.3f at step 0, %.4f mean of the last 10 of %d steps (%.1f s)\n", name, losses[0], tail,
           steps, (dyn_time_ms() - t0) / 1e3);
    /* An untrained model knows nothing of the answers: its first loss is
     * about ln(vocabulary) or more (uniform logits give exactly ln V). A
     * much lower one means the loss sees what it should predict (a missing
     * causal mask or unshifted decoder input) or is mis-normalised. */
    const double floor0 = log((double)DYN_VOCAB_BYTES) - 0.5;
    if (!(losses[0] > floor0)) fail_msg("%s starts at loss %.3f, below %.3f: it sees its answers", name, losses[0], floor0);
    if (!(tail < TOY_LOSS_THRESHOLD)) fail_msg("%s did not learn: %.4f >= %.2f", name, tail, TOY_LOSS_THRESHOLD);
    free(losses);
}

static void test_gpt_learns_reversal(void **state)
{
    (void)state;
    run_toy(DYN_MODEL_GPT, "GPT");
}

static void test_t5_learns_reversal(void **state)
{
    (void)state;
    run_toy(DYN_MODEL_T5, "T5");
}

static void test_same_seed_same_losses(void **state)
{
    (void)state;
    for (int kind = 0; kind < 2; kind++) {
        double a[8], b[8], c[8];
        train((dyn_model_kind)kind, 5, 8, a);
        train((dyn_model_kind)kind, 5, 8, b);
        train((dyn_model_kind)kind, 6, 8, c);
        assert_memory_equal(a, b, sizeof a); /* bit for bit */
        assert_memory_not_equal(a, c, sizeof a);
        /* with a fixed count of 2 threads too, and the same bits as with
         * one (results do not depend on the thread count: threads.h) */
        double t0 = dyn_time_ms();
        train_threads((dyn_model_kind)kind, 5, 8, b, 2);
        train_threads((dyn_model_kind)kind, 5, 8, c, 2);
        assert_memory_equal(b, c, sizeof b);
        assert_memory_equal(a, b, sizeof a);
        printf("    2-thread runs: %.1f s\n", (dyn_time_ms() - t0) / 1e3);
    }
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_learns_reversal),
        cmocka_unit_test(test_t5_learns_reversal),
        cmocka_unit_test(test_same_seed_same_losses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
