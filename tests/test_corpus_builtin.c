/* test_corpus_builtin.c — the built-in multi-task dataset behind dyn_corpus:
 * every task's answer recomputed here from its input by an independent
 * parser/solver (copy, reverse, sort, add, lookup, cipher, summarise,
 * classify), determinism and random access from (seed, split, index), the
 * held-out split, the length limit for GPT and T5 at several max_seqlen
 * (tasks scale down, nothing truncated), dyn_corpus_lengths against the
 * tokens, the mixture shares and its lengths against the FLAN-like
 * generator's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/corpus.h" /* defines: dyn_corpus_* */
#include "dynapipe/data.h"   /* defines: dyn_dataset_*, dyn_lengths_fit */
#include "model/model.h"     /* defines: DYN_TOK_* (the ids the corpus must agree with) */

/* FNV-1a hashes of the tokens of builtin:5's first 400 samples, taken
 * before the long-input tasks grew with the limit (tokens_hash). */
#define GOLD_GPT_2048 0x35a0fc604733452aULL
#define GOLD_T5_2048 0x422a8776efd76397ULL
#define GOLD_GPT_256 0x30e16d4409866afcULL

/* The documented tasks, in id order, with their mixture weights. */
static const char *const NAMES[8] = {"copy", "reverse", "sort", "add", "lookup", "cipher", "summarise", "classify"};
static const double WEIGHTS[8] = {0.07, 0.06, 0.06, 0.15, 0.20, 0.12, 0.10, 0.24};

/* The documented cipher and classification tables (docs/data.md). */
static const char CIPHER[] = "qwertyuiopasdfghjklzxcvbnm";
static const char *const CATS[4] = {"animal", "colour", "food", "tool"};
static const char *const WORDS[4][8] = {
    {"cat", "dog", "horse", "tiger", "mouse", "eagle", "snake", "whale"},
    {"red", "blue", "green", "yellow", "purple", "orange", "black", "white"},
    {"bread", "apple", "rice", "cheese", "soup", "honey", "pasta", "salad"},
    {"hammer", "saw", "drill", "wrench", "spade", "chisel", "ruler", "knife"},
};

static dyn_corpus *open_builtin(const char *spec, int64_t n, int32_t L, dyn_model_kind kind, dyn_corpus_split split)
{
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.builtin_samples = n;
    o.max_seqlen = L;
    o.kind = kind;
    o.split = split;
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(spec, &o, &err);
    if (c == NULL) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(c);
    return c;
}

/* Sample i as two NUL-terminated strings (without SEP / EOS, which are
 * checked here); returns the task. */
static int32_t read_text(dyn_corpus *c, int64_t i, char *in, char *tgt, size_t cap)
{
    dyn_corpus_sample s;
    dyn_error err;
    assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
    assert_int_equal(s.index, i);
    assert_true(s.input_len >= 2 && s.target_len >= 2);
    assert_true((size_t)s.input_len < cap && (size_t)s.target_len < cap);
    assert_int_equal(s.input[s.input_len - 1], DYN_TOK_SEP);
    assert_int_equal(s.target[s.target_len - 1], DYN_TOK_EOS);
    for (int32_t k = 0; k + 1 < s.input_len; k++) {
        assert_true(s.input[k] >= 32 && s.input[k] < 127); /* printable text */
        in[k] = (char)s.input[k];
    }
    for (int32_t k = 0; k + 1 < s.target_len; k++) {
        assert_true(s.target[k] >= 32 && s.target[k] < 127);
        tgt[k] = (char)s.target[k];
    }
    in[s.input_len - 1] = '\0';
    tgt[s.target_len - 1] = '\0';
    assert_false(s.truncated);
    return s.task;
}

static int cmp_char(const void *a, const void *b) { return *(const char *)a - *(const char *)b; }

static int all_lower(const char *s)
{
    for (; *s; s++)
        if (*s < 'a' || *s > 'z') return 0;
    return 1;
}

/* Strip "prefix " from the input or fail. */
static const char *body_of(const char *in, const char *prefix)
{
    size_t n = strlen(prefix);
    assert_memory_equal(in, prefix, n);
    return in + n;
}

/* "x+y=" -> 1 and the sum; digits only, no leading zeros. */
static int parse_sum(const char *s, size_t len, long long *sum)
{
    char buf[64];
    if (len >= sizeof buf) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *plus = strchr(buf, '+');
    if (plus == NULL || buf[len - 1] != '=') return 0;
    *plus = '\0';
    buf[len - 1] = '\0';
    for (char *p = buf; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    for (char *p = plus + 1; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    if (buf[0] == '\0' || plus[1] == '\0' || strlen(buf) > 5 || strlen(plus + 1) > 5) return 0;
    *sum = atoll(buf) + atoll(plus + 1);
    return 1;
}

/* The answer of the task, recomputed from the input alone; asserts the
 * input is well-formed and the target equals it. */
static void check_answer(int32_t task, const char *in, const char *tgt)
{
    static char want[1 << 16];
    if (task <= 2) { /* copy, reverse, sort */
        const char *b = body_of(in, task == 0 ? "copy " : task == 1 ? "reverse " : "sort ");
        size_t n = strlen(b);
        assert_true(n >= 1 && all_lower(b));
        for (size_t k = 0; k < n; k++) want[k] = task == 1 ? b[n - 1 - k] : b[k];
        want[n] = '\0';
        if (task == 2) qsort(want, n, 1, cmp_char);
    } else if (task == 3) { /* add: solved examples "x+y=z;" then "a+b=" */
        const char *p = body_of(in, "add ");
        const char *semi;
        while ((semi = strchr(p, ';')) != NULL) {
            const char *eq = memchr(p, '=', (size_t)(semi - p));
            assert_non_null(eq);
            long long sum;
            assert_true(parse_sum(p, (size_t)(eq - p) + 1, &sum));
            assert_int_equal(atoll(eq + 1), sum); /* the examples are right too */
            p = semi + 1;
        }
        long long sum;
        assert_true(parse_sum(p, strlen(p), &sum));
        snprintf(want, sizeof want, "%lld", sum);
    } else if (task == 4) { /* lookup "k=v;...;?k" */
        const char *p = body_of(in, "lookup ");
        const char *q = strrchr(p, '?');
        assert_non_null(q);
        const char *key = q + 1;
        assert_int_equal(strlen(key), 4);
        int found = 0;
        while (p < q) {
            const char *semi = strchr(p, ';'), *eq = strchr(p, '=');
            assert_true(semi && eq && eq < semi && eq - p == 4);
            /* keys are distinct: the query matches exactly one */
            if (memcmp(p, key, 4) == 0) {
                found++;
                memcpy(want, eq + 1, (size_t)(semi - eq - 1));
                want[semi - eq - 1] = '\0';
            }
            p = semi + 1;
        }
        assert_int_equal(found, 1);
    } else if (task == 5) { /* cipher */
        const char *b = body_of(in, "cipher ");
        size_t n = strlen(b);
        for (size_t k = 0; k < n; k++) {
            assert_true(b[k] == ' ' || (b[k] >= 'a' && b[k] <= 'z'));
            want[k] = b[k] == ' ' ? ' ' : CIPHER[b[k] - 'a'];
        }
        want[n] = '\0';
        assert_true(n >= 1 && b[0] != ' ' && b[n - 1] != ' ');
    } else if (task == 6) { /* summarise: up to and including the first '.' */
        const char *b = body_of(in, "summarise ");
        const char *dot = strchr(b, '.');
        assert_non_null(dot);
        assert_true(b[0] >= 'A' && b[0] <= 'Z');
        memcpy(want, b, (size_t)(dot - b) + 1);
        want[dot - b + 1] = '\0';
    } else { /* classify: the category of the one keyword among the words */
        const char *b = body_of(in, "classify ");
        char words[1 << 12];
        assert_true(strlen(b) < sizeof words);
        strcpy(words, b);
        int hits = 0;
        for (char *w = strtok(words, " "); w; w = strtok(NULL, " "))
            for (int c = 0; c < 4; c++)
                for (int k = 0; k < 8; k++)
                    if (strcmp(w, WORDS[c][k]) == 0) {
                        hits++;
                        strcpy(want, CATS[c]);
                    }
        assert_int_equal(hits, 1);
    }
    if (strcmp(want, tgt) != 0) fprintf(stderr, "task %d input '%s'\n target '%s'\n want '%s'\n", task, in, tgt, want);
    assert_string_equal(tgt, want);
}

static char g_in[1 << 16], g_tgt[1 << 16];

static void test_ids_match_the_model(void **state)
{
    (void)state;
    assert_int_equal(DYN_CORPUS_TOK_PAD, DYN_TOK_PAD);
    assert_int_equal(DYN_CORPUS_TOK_BOS, DYN_TOK_BOS);
    assert_int_equal(DYN_CORPUS_TOK_EOS, DYN_TOK_EOS);
    assert_int_equal(DYN_CORPUS_TOK_SEP, DYN_TOK_SEP);
    assert_int_equal(DYN_CORPUS_VOCAB_BYTES, DYN_VOCAB_BYTES);
}

static void test_task_names(void **state)
{
    (void)state;
    dyn_corpus *c = open_builtin("builtin", 10, 2048, DYN_MODEL_GPT, DYN_SPLIT_TRAIN);
    assert_int_equal(dyn_corpus_num_tasks(c), 8);
    for (int t = 0; t < 8; t++) assert_string_equal(dyn_corpus_task_name(c, t), NAMES[t]);
    assert_null(dyn_corpus_task_name(c, 8));
    assert_null(dyn_corpus_task_name(c, -1));
    assert_false(dyn_corpus_decoder_only(c));
    assert_int_equal(dyn_corpus_count(c), 10);
    dyn_corpus_free(c);
}

/* Every answer right, for both kinds and several limits; at 64 tokens every
 * task still appears (they scale down instead of disappearing). */
static void test_answers_right(void **state)
{
    (void)state;
    const int32_t limits[] = {64, 100, 256, 2048, 4096};
    for (int kind = 0; kind < 2; kind++)
        for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
            int n = limits[l] >= 2048 ? 1500 : 800;
            dyn_corpus *c = open_builtin("builtin:7", n, limits[l], (dyn_model_kind)kind, DYN_SPLIT_TRAIN);
            int seen[8] = {0};
            for (int64_t i = 0; i < n; i++) {
                int32_t t = read_text(c, i, g_in, g_tgt, sizeof g_in);
                assert_true(t >= 0 && t < 8);
                seen[t]++;
                check_answer(t, g_in, g_tgt);
            }
            for (int t = 0; t < 8; t++) assert_true(seen[t] > 0);
            dyn_corpus_free(c);
        }
}

/* Same (seed, split, index) -> same tokens, in any order of access and from
 * another handle; other seeds and the held-out split give other samples. */
static void test_deterministic_random_access(void **state)
{
    (void)state;
    enum { N = 400 };
    dyn_corpus *a = open_builtin("builtin:3", N, 512, DYN_MODEL_GPT, DYN_SPLIT_TRAIN);
    dyn_corpus *b = open_builtin("builtin:3", 1000000, 512, DYN_MODEL_GPT, DYN_SPLIT_TRAIN);
    dyn_corpus *o = open_builtin("builtin:4", N, 512, DYN_MODEL_GPT, DYN_SPLIT_TRAIN);
    dyn_corpus *h = open_builtin("builtin:3", N, 512, DYN_MODEL_GPT, DYN_SPLIT_HELDOUT);
    static int32_t keep_in[N][512], keep_tgt[N][512];
    static int32_t len_in[N], len_tgt[N];
    dyn_error err;
    for (int64_t i = 0; i < N; i++) {
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(a, i, &s, &err), DYN_OK);
        len_in[i] = s.input_len;
        len_tgt[i] = s.target_len;
        memcpy(keep_in[i], s.input, sizeof(int32_t) * (size_t)s.input_len);
        memcpy(keep_tgt[i], s.target, sizeof(int32_t) * (size_t)s.target_len);
    }
    int same_seed_other = 0, same_heldout = 0;
    for (int64_t k = 0; k < N; k++) {
        int64_t i = (k * 7919) % N; /* another order */
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(b, i, &s, &err), DYN_OK);
        assert_int_equal(s.input_len, len_in[i]);
        assert_int_equal(s.target_len, len_tgt[i]);
        assert_memory_equal(s.input, keep_in[i], sizeof(int32_t) * (size_t)len_in[i]);
        assert_memory_equal(s.target, keep_tgt[i], sizeof(int32_t) * (size_t)len_tgt[i]);
        assert_int_equal(dyn_corpus_read(o, i, &s, &err), DYN_OK);
        same_seed_other += s.input_len == len_in[i] &&
                           memcmp(s.input, keep_in[i], sizeof(int32_t) * (size_t)len_in[i]) == 0;
        assert_int_equal(dyn_corpus_read(h, i, &s, &err), DYN_OK);
        same_heldout += s.input_len == len_in[i] &&
                        memcmp(s.input, keep_in[i], sizeof(int32_t) * (size_t)len_in[i]) == 0;
    }
    /* Only a tiny sort or add prompt could coincide by chance. */
    assert_true(same_seed_other <= 2);
    assert_true(same_heldout <= 2);
    assert_int_equal(dyn_corpus_read(a, N, &(dyn_corpus_sample){0}, &err), DYN_ERR_INVALID_ARG);
    dyn_corpus_free(a);
    dyn_corpus_free(b);
    dyn_corpus_free(o);
    dyn_corpus_free(h);
}

/* dyn_corpus_lengths = the lengths of the tokens read, all within the rule;
 * the limit is used up (long samples reach close to it). */
static void test_lengths_match_and_fit(void **state)
{
    (void)state;
    const int32_t limits[] = {64, 256, 2048};
    for (int kind = 0; kind < 2; kind++)
        for (size_t l = 0; l < 3; l++) {
            int32_t L = limits[l];
            dyn_corpus *c = open_builtin("builtin", 2000, L, (dyn_model_kind)kind, DYN_SPLIT_HELDOUT);
            dyn_dataset ds = {0};
            dyn_error err;
            assert_int_equal(dyn_corpus_lengths(c, &ds, &err), DYN_OK);
            assert_int_equal(ds.n, 2000);
            int32_t longest = 0;
            for (int32_t i = 0; i < ds.n; i++) {
                dyn_corpus_sample s;
                assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
                assert_int_equal(ds.samples[i].id, i);
                assert_int_equal(ds.samples[i].task, s.task);
                assert_int_equal(ds.samples[i].input_len, s.input_len);
                assert_int_equal(ds.samples[i].target_len, s.target_len);
                assert_true(dyn_lengths_fit((dyn_model_kind)kind, L, s.input_len, s.target_len));
                int32_t m = kind == DYN_MODEL_GPT ? s.input_len + s.target_len
                            : s.input_len > s.target_len ? s.input_len : s.target_len;
                if (m > longest) longest = m;
            }
            assert_true(longest >= L * 9 / 10);
            dyn_dataset_free(&ds);
            dyn_corpus_free(c);
        }
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

static int32_t pct(int32_t *v, int32_t n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_i32);
    return v[(int32_t)(p * (n - 1))];
}

/* Task shares within 0.012 of the weights; input and target p50 / p90
 * within 20% of the FLAN-like generator's (the shape the tasks imitate). */
static void test_mixture_follows_flan(void **state)
{
    (void)state;
    enum { N = 20000 };
    dyn_corpus *c = open_builtin("builtin:11", N, 2048, DYN_MODEL_GPT, DYN_SPLIT_TRAIN);
    dyn_dataset b = {0}, f = {0};
    dyn_error err;
    assert_int_equal(dyn_corpus_lengths(c, &b, &err), DYN_OK);
    assert_int_equal(dyn_dataset_synthetic_flan(11, N, 2048, DYN_MODEL_GPT, &f, &err), DYN_OK);
    int share[8] = {0};
    for (int32_t i = 0; i < N; i++) share[b.samples[i].task]++;
    for (int t = 0; t < 8; t++) assert_true(fabs((double)share[t] / N - WEIGHTS[t]) < 0.012);
    static int32_t vb[N], vf[N];
    for (int side = 0; side < 2; side++) {
        for (int32_t i = 0; i < N; i++) {
            vb[i] = side ? b.samples[i].target_len : b.samples[i].input_len;
            vf[i] = side ? f.samples[i].target_len : f.samples[i].input_len;
        }
        for (int k = 0; k < 2; k++) {
            double p = k ? 0.9 : 0.5;
            double x = pct(vb, N, p), y = pct(vf, N, p);
            if (!(x <= 1.2 * y + 1 && x >= 0.8 * y - 1))
                fprintf(stderr, "side %d p%.0f: builtin %.0f flan %.0f\n", side, 100 * p, x, y);
            assert_true(x <= 1.2 * y + 1 && x >= 0.8 * y - 1);
        }
    }
    dyn_dataset_free(&b);
    dyn_dataset_free(&f);
    dyn_corpus_free(c);
}

/* FNV-1a over the tokens of samples [0, n). */
static uint64_t tokens_hash(dyn_corpus *c, int64_t n)
{
    uint64_t h = 1469598103934665603ULL;
    dyn_error err;
    for (int64_t i = 0; i < n; i++) {
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
        for (int side = 0; side < 2; side++) {
            const int32_t *t = side ? s.target : s.input;
            int32_t len = side ? s.target_len : s.input_len;
            for (int32_t k = 0; k < len; k++) h = (h ^ (uint64_t)(uint32_t)t[k]) * 1099511628211ULL;
            h = (h ^ 0xFFu) * 1099511628211ULL;
        }
    }
    return h;
}

/* Long data: above 2048 the long-input tasks grow with the limit, so at
 * 4096 the share of samples longer than half the limit (and than 90% of
 * it) stays within 25% of the share at 2048, some samples are longer than
 * 2048 tokens and none breaks the limit. */
static void test_long_tail_grows(void **state)
{
    (void)state;
    enum { N = 6000 };
    for (int kind = 0; kind < 2; kind++) {
        double half[2] = {0}, top[2] = {0};
        int32_t over_2048 = 0;
        for (int l = 0; l < 2; l++) {
            int32_t L = l ? 4096 : 2048;
            dyn_corpus *c = open_builtin("builtin:11", N, L, (dyn_model_kind)kind, DYN_SPLIT_TRAIN);
            dyn_dataset ds = {0};
            dyn_error err;
            assert_int_equal(dyn_corpus_lengths(c, &ds, &err), DYN_OK);
            for (int32_t i = 0; i < ds.n; i++) {
                int32_t a = ds.samples[i].input_len, b = ds.samples[i].target_len;
                assert_true(dyn_lengths_fit((dyn_model_kind)kind, L, a, b));
                int32_t m = kind == DYN_MODEL_GPT ? a + b : a > b ? a : b;
                half[l] += m > L / 2;
                top[l] += m > L * 9 / 10;
                if (l == 1) over_2048 += m > 2048;
            }
            dyn_dataset_free(&ds);
            dyn_corpus_free(c);
        }
        if (!(fabs(half[1] / half[0] - 1) < 0.25 && fabs(top[1] / top[0] - 1) < 0.25))
            fprintf(stderr, "kind %d: over L/2 %.0f at 2048, %.0f at 4096; over 0.9 L %.0f, %.0f\n", kind, half[0],
                    half[1], top[0], top[1]);
        assert_true(fabs(half[1] / half[0] - 1) < 0.25);
        assert_true(fabs(top[1] / top[0] - 1) < 0.25);
        assert_true(over_2048 > N / 20);
    }
}

/* At 2048 and below the samples are the ones they always were: hashes of
 * their tokens taken before the long-input tasks grew with the limit. */
static void test_short_limits_unchanged(void **state)
{
    (void)state;
    const struct { int32_t L; dyn_model_kind kind; uint64_t hash; } old[] = {
        {2048, DYN_MODEL_GPT, GOLD_GPT_2048}, {2048, DYN_MODEL_T5, GOLD_T5_2048}, {256, DYN_MODEL_GPT, GOLD_GPT_256}};
    int changed = 0;
    for (size_t k = 0; k < sizeof old / sizeof old[0]; k++) {
        dyn_corpus *c = open_builtin("builtin:5", 400, old[k].L, old[k].kind, DYN_SPLIT_TRAIN);
        uint64_t h = tokens_hash(c, 400);
        if (h != old[k].hash) {
            fprintf(stderr, "L %d kind %d: hash 0x%016llxULL\n", old[k].L, old[k].kind, (unsigned long long)h);
            changed++;
        }
        dyn_corpus_free(c);
    }
    assert_int_equal(changed, 0);
}

/* builtin:SEED:TASK+TASK keeps only those tasks (ids unchanged), with
 * their weights renormalised, and their answers right. */
static void test_task_subset(void **state)
{
    (void)state;
    enum { N = 3000 };
    dyn_corpus *c = open_builtin("builtin:3:sort+classify", N, 128, DYN_MODEL_GPT, DYN_SPLIT_TRAIN);
    int share[8] = {0};
    for (int64_t i = 0; i < N; i++) {
        int32_t t = read_text(c, i, g_in, g_tgt, sizeof g_in);
        share[t]++;
        check_answer(t, g_in, g_tgt);
    }
    assert_int_equal(share[2] + share[7], N);
    assert_true(fabs((double)share[2] / N - 0.06 / 0.30) < 0.03);
    assert_int_equal(dyn_corpus_num_tasks(c), 8);
    dyn_corpus_free(c);
    dyn_error err;
    assert_null(dyn_corpus_open("builtin:3:sort+clasify", NULL, &err));
    assert_non_null(strstr(err.msg, "unknown task 'clasify'"));
    assert_null(dyn_corpus_open("builtin:3:", NULL, &err));
    assert_null(dyn_corpus_open("builtin::copy", NULL, &err));
}

/* classify alone goes down to max_seqlen 32 (GPT and T5): every sample
 * fits, has its one keyword among at most five filler words (GPT: 15 bytes
 * of words, T5: 22) and the right label; 31 is refused, and so is 32 for any subset with another task. */
static void test_classify_short(void **state)
{
    (void)state;
    enum { N = 2000 };
    for (int kind = 0; kind < 2; kind++) {
        dyn_corpus *c = open_builtin("builtin:5:classify", N, 32, (dyn_model_kind)kind, DYN_SPLIT_TRAIN);
        int longest = 0;
        for (int64_t i = 0; i < N; i++) {
            dyn_corpus_sample s;
            dyn_error err;
            assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
            assert_true(dyn_lengths_fit((dyn_model_kind)kind, 32, s.input_len, s.target_len));
            int32_t t = read_text(c, i, g_in, g_tgt, sizeof g_in);
            assert_int_equal(t, 7);
            check_answer(t, g_in, g_tgt);
            int words = 1;
            for (const char *p = g_in; *p; p++) words += *p == ' ';
            assert_true(words >= 2 && words <= 1 + 1 + 5); /* "classify", keyword, fillers */
            if (s.input_len > longest) longest = s.input_len;
        }
        assert_true(longest >= (kind == DYN_MODEL_GPT ? 24 : 28));
        dyn_corpus_free(c);
    }
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    dyn_error err;
    o.max_seqlen = 31;
    assert_null(dyn_corpus_open("builtin:5:classify", &o, &err));
    assert_non_null(strstr(err.msg, "max_seqlen 31 < 32"));
    o.max_seqlen = 32;
    assert_null(dyn_corpus_open("builtin:5:classify+sort", &o, &err));
    assert_non_null(strstr(err.msg, "max_seqlen 32 < 64"));
}

static void test_bad_options(void **state)
{
    (void)state;
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    dyn_error err;
    o.max_seqlen = 63;
    assert_null(dyn_corpus_open("builtin", &o, &err));
    assert_int_equal(err.code, DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "max_seqlen 63"));
    dyn_corpus_options_default(&o);
    assert_null(dyn_corpus_open("builtin:x", &o, &err));
    assert_non_null(strstr(err.msg, "seed"));
    assert_null(dyn_corpus_open("builtin:-1", &o, &err));
    assert_null(dyn_corpus_open("builtins", &o, &err)); /* not the built-in: a missing Megatron prefix */
    assert_int_equal(err.code, DYN_ERR_IO);
    o.builtin_samples = -1;
    assert_null(dyn_corpus_open("builtin", &o, &err));
    assert_non_null(strstr(err.msg, "samples"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_match_the_model),
        cmocka_unit_test(test_task_names),
        cmocka_unit_test(test_answers_right),
        cmocka_unit_test(test_deterministic_random_access),
        cmocka_unit_test(test_lengths_match_and_fit),
        cmocka_unit_test(test_mixture_follows_flan),
        cmocka_unit_test(test_task_subset),
        cmocka_unit_test(test_long_tail_grows),
        cmocka_unit_test(test_short_limits_unchanged),
        cmocka_unit_test(test_classify_short), cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
