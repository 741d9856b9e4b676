/* bench_learn_builtin.c — can a small byte-level model learn the built-in
 * tasks on this CPU in minutes? Trains a tiny GPT or T5 (single process,
 * dyn_model_forward/backward, AdamW) on the train split of the built-in
 * dataset and reports, on the held-out split, per task: the loss per target
 * token and a LOWER BOUND on greedy exact-match accuracy: a sample whose
 * summed target loss is below ln 2 has probability > 1/2 on every correct
 * target token, so each is the argmax given the correct prefix, and greedy
 * decoding reproduces the target exactly.
 *
 * usage: bench_learn_builtin [gpt|t5] [steps 1500] [max_seqlen 128]
 *                            [hidden 128] [layers 2] [batch 16] [threads 1]
 *                            [spec builtin:1] (e.g. builtin:1:copy+classify)
 * One padded micro-batch of `batch` samples per step; lr 2e-3 with 50 warm-up
 * steps, cosine to 1e-4; held-out evaluation on 256 samples at the start,
 * halfway and at the end. Reported in docs/data.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/corpus.h" /* defines: dyn_corpus_* */
#include "model/model.h"     /* defines: dyn_model_*, dyn_token_sample */
#include "model/threads.h"   /* defines: dyn_threads_init */
#include "util/util.h"       /* defines: dyn_time_ms */

#define EVAL_N 256
#define NT 8

/* Copies of a batch of samples (the corpus keeps only the last read). */
typedef struct batch {
    int32_t *tok;  /* [n][2 * L] */
    dyn_token_sample s[64];
    int32_t task[64];
    int n, L;
} batch;

static int batch_fill(batch *b, dyn_corpus *c, int64_t first, int n, dyn_error *err)
{
    b->n = n;
    for (int i = 0; i < n; i++) {
        dyn_corpus_sample s;
        if (dyn_corpus_read(c, first + i, &s, err) != DYN_OK) return -1;
        int32_t *in = b->tok + (size_t)i * 2 * b->L, *tg = in + b->L;
        memcpy(in, s.input, sizeof(int32_t) * (size_t)s.input_len);
        memcpy(tg, s.target, sizeof(int32_t) * (size_t)s.target_len);
        b->s[i] = (dyn_token_sample){in, s.input_len, tg, s.target_len};
        b->task[i] = s.task;
    }
    return 0;
}

/* Held-out loss per target token and exact-match lower bound, per task. */
static int evaluate(dyn_model *m, dyn_model_acts *a, dyn_corpus *held, batch *b, dyn_model_kind kind, int step,
                    double t_s)
{
    double loss[NT] = {0}, tokens[NT] = {0}, exact[NT] = {0}, count[NT] = {0};
    dyn_error err;
    for (int64_t first = 0; first < EVAL_N; first += 16) {
        if (batch_fill(b, held, first, 16, &err) != 0) return fprintf(stderr, "%s\n", err.msg), -1;
        dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(kind, b->s, b->n, &err);
        float sl[64];
        double sum;
        if (mb == NULL || dyn_model_forward(m, a, mb, 0, &sum, sl, &err) != DYN_OK)
            return fprintf(stderr, "%s\n", err.msg), -1;
        for (int i = 0; i < b->n; i++) {
            int t = b->task[i];
            loss[t] += sl[i];
            tokens[t] += b->s[i].target_len;
            exact[t] += sl[i] < log(2.0);
            count[t] += 1;
        }
        dyn_model_microbatch_free(mb);
    }
    printf("step %5d (%6.1f s) held-out loss/token and exact match >=:", step, t_s);
    double all_l = 0, all_t = 0;
    for (int t = 0; t < NT; t++) {
        if (count[t] > 0)
            printf(" %s %.3f %3.0f%%", dyn_corpus_task_name(held, t), loss[t] / tokens[t], 100 * exact[t] / count[t]);
        all_l += loss[t];
        all_t += tokens[t];
    }
    printf(" | all %.3f\n", all_l / all_t);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    dyn_threads_init();
    dyn_model_kind kind = argc > 1 && strcmp(argv[1], "t5") == 0 ? DYN_MODEL_T5 : DYN_MODEL_GPT;
    int steps = argc > 2 ? atoi(argv[2]) : 1500;
    int L = argc > 3 ? atoi(argv[3]) : 128;
    int hidden = argc > 4 ? atoi(argv[4]) : 128;
    int layers = argc > 5 ? atoi(argv[5]) : 2;
    int B = argc > 6 ? atoi(argv[6]) : 16;
    int threads = argc > 7 ? atoi(argv[7]) : 1;
    const char *spec = argc > 8 ? argv[8] : "builtin:1";
    if (steps < 1 || L < 64 || hidden < 8 || layers < 1 || B < 1 || B > 64 || threads < 1) {
        fprintf(stderr, "usage: bench_learn_builtin [gpt|t5] [steps] [max_seqlen>=64] [hidden] [layers] [batch<=64] [threads]\n");
        return 2;
    }
    dyn_error err;
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.max_seqlen = L;
    o.kind = kind;
    o.builtin_samples = (int64_t)steps * B;
    dyn_corpus *train = dyn_corpus_open(spec, &o, &err);
    o.split = DYN_SPLIT_HELDOUT;
    o.builtin_samples = EVAL_N;
    dyn_corpus *held = train ? dyn_corpus_open(spec, &o, &err) : NULL;
    dyn_model_config cfg = dyn_model_config_tiny(kind, layers, hidden, hidden / 32 > 0 ? hidden / 32 : 1, L);
    dyn_model *m = held ? dyn_model_create(&cfg, 1, &err) : NULL;
    dyn_model_acts *a = m ? dyn_model_acts_create(&err) : NULL;
    batch b = {.L = L, .tok = malloc(sizeof(int32_t) * 2 * (size_t)L * 64)};
    if (a == NULL || b.tok == NULL) {
        fprintf(stderr, "bench_learn_builtin: %s\n", err.msg);
        return 1;
    }
    dyn_model_set_threads(m, threads);
    printf("%s on %s, %d layers, hidden %d, max_seqlen %d, batch %d, %d steps, %d thread(s)\n",
           kind == DYN_MODEL_GPT ? "gpt" : "t5", spec, layers, hidden, L, B, steps, threads);
    dyn_adamw_config ac = {0.9f, 0.98f, 1e-8f, 0.01f};
    dyn_lr_schedule sch = {2e-3f, 1e-4f, 50, steps};
    double t0 = dyn_time_ms();
    if (evaluate(m, a, held, &b, kind, 0, 0) != 0) return 1;
    for (int step = 0; step < steps; step++) {
        if (batch_fill(&b, train, (int64_t)step * B, B, &err) != 0) return fprintf(stderr, "%s\n", err.msg), 1;
        dyn_model_microbatch *mb = dyn_model_microbatch_create_padded(kind, b.s, b.n, &err);
        double loss;
        dyn_model_zero_grad(m);
        if (mb == NULL || dyn_model_forward(m, a, mb, 0, &loss, NULL, &err) != DYN_OK ||
            dyn_model_backward(m, a, mb, (float)(1.0 / (double)mb->n_target_tokens), &err) != DYN_OK)
            return fprintf(stderr, "%s\n", err.msg), 1;
        dyn_model_microbatch_free(mb);
        dyn_model_adamw_step(m, dyn_lr_at(&sch, step), &ac, 1.0);
        if (step + 1 == steps / 2 || step + 1 == steps)
            if (evaluate(m, a, held, &b, kind, step + 1, (dyn_time_ms() - t0) / 1e3) != 0) return 1;
    }
    free(b.tok);
    dyn_model_acts_free(a);
    dyn_model_free(m);
    dyn_corpus_free(train);
    dyn_corpus_free(held);
    return 0;
}
