/* tasks.c — the built-in multi-task dataset: eight text-to-text tasks that a
 * small byte-level model can learn on a CPU, each with an exact answer, and
 * lengths chosen so that the mixture has the shape of the FLAN-like length
 * generator (flan.c): long input / short target (classify, lookup, few-shot
 * add), short / short (sort, cipher) and long / long (copy, reverse,
 * summarise). docs/data.md lists the tasks with examples and measured
 * lengths.
 *
 * Determinism and random access: sample (seed, split, index) draws from its
 * own dyn_rng, seeded by hashing the three together, so any sample is
 * generated without the ones before it, and the held-out split is a
 * different stream of the same tasks. Every task first draws its sizes
 * (log-normal, like flan.c) and then builds text that fits the length limit:
 * sizes are capped (copy, reverse, sort, cipher, summarise's first sentence,
 * classify) or parts are appended only while they fit (few-shot examples,
 * key=value pairs, further sentences), so at max_seqlen 64 every task still
 * has a well-formed sample and nothing is ever truncated.
 *
 * Long data: above max_seqlen 2048 the long-input tasks (add, lookup,
 * summarise) grow with the limit: their drawn sizes (and lookup's pair
 * limit) are scaled by max_seqlen / 2048 (at most GROW_MAX), so at 4096 the
 * mixture keeps the long tail it has at 2048 (a tenth of the samples over
 * half the limit) instead of ending near 2048 tokens. At 2048 and below the
 * factor is exactly 1: the samples are byte for byte what they always were. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/corpus_impl.h" /* defines: builtin_text, builtin_generate */
#include "util/rng.h"         /* defines: dyn_rng_seed, dyn_rng_below, dyn_rng_normal */

/* The text under construction and the room it has, in bytes. Token counts
 * are bytes + 1 on each side (SEP after the input, EOS after the target). */
typedef struct gen {
    char *in;
    int32_t in_len;
    char *tgt;
    int32_t tgt_len;
    int64_t cap_in, cap_tgt, cap_total;
    double grow; /* long-input tasks' size factor: max(1, max_seqlen / 2048), at most GROW_MAX */
    dyn_rng *rng;
} gen;

#define GROW_BASE 2048 /* the limit the tasks' sizes were chosen for */
#define GROW_MAX 8     /* sizes stop growing at 8 x 2048 = 16,384 tokens */

/* Would an input of `in` bytes and a target of `tgt` bytes fit? */
static int gen_fits(const gen *g, int64_t in, int64_t tgt)
{
    return in <= g->cap_in && tgt <= g->cap_tgt && in + tgt <= g->cap_total;
}

static void gen_put_in(gen *g, const char *s, int32_t n)
{
    memcpy(g->in + g->in_len, s, (size_t)n);
    g->in_len += n;
}

static void gen_put_tgt(gen *g, const char *s, int32_t n)
{
    memcpy(g->tgt + g->tgt_len, s, (size_t)n);
    g->tgt_len += n;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* max(min_len, round(exp(ln(median) + sigma z))), at most max_len. */
static int64_t draw_len(dyn_rng *r, double median, double sigma, int64_t min_len, int64_t max_len)
{
    double x = median * exp(sigma * dyn_rng_normal(r));
    if (x > (double)max_len) x = (double)max_len;
    int64_t n = (int64_t)llround(x);
    return n < min_len ? min_len : n;
}

static char rand_letter(dyn_rng *r) { return (char)('a' + dyn_rng_below(r, 26)); }

/* ---- copy, reverse, sort ---------------------------------------------------- */

/* "<prefix><n letters>" -> the letters (copied, reversed or sorted). */
static void task_letters(gen *g, const char *prefix, double median, double sigma, int64_t min_n,
                         int mode)
{
    int32_t p = (int32_t)strlen(prefix);
    int64_t n = draw_len(g->rng, median, sigma, min_n, 1 << 20);
    n = min64(n, min64(min64(g->cap_in - p, g->cap_tgt), (g->cap_total - p) / 2));
    gen_put_in(g, prefix, p);
    for (int64_t i = 0; i < n; i++) g->in[g->in_len++] = rand_letter(g->rng);
    const char *s = g->in + p;
    if (mode == 0) {
        gen_put_tgt(g, s, (int32_t)n);
    } else if (mode == 1) {
        for (int64_t i = 0; i < n; i++) g->tgt[g->tgt_len++] = s[n - 1 - i];
    } else { /* counting sort: letters only */
        int32_t count[26] = {0};
        for (int64_t i = 0; i < n; i++) count[s[i] - 'a']++;
        for (int c = 0; c < 26; c++)
            for (int32_t k = 0; k < count[c]; k++) g->tgt[g->tgt_len++] = (char)('a' + c);
    }
}

static void task_copy(gen *g) { task_letters(g, "copy ", 120, 0.6, 1, 0); }
static void task_reverse(gen *g) { task_letters(g, "reverse ", 120, 0.6, 1, 1); }
static void task_sort(gen *g) { task_letters(g, "sort ", 20, 0.5, 2, 2); }

/* ---- add: few-shot multi-digit addition ------------------------------------- */

/* A number of 1..5 digits (no leading zero) as text into buf; returns its
 * length and its value in *v. */
static int32_t rand_number(dyn_rng *r, char *buf, int64_t *v)
{
    int32_t digits = 1 + (int32_t)dyn_rng_below(r, 5);
    int64_t x = digits == 1 ? (int64_t)dyn_rng_below(r, 10) : 1 + (int64_t)dyn_rng_below(r, 9);
    for (int32_t i = 1; i < digits; i++) x = 10 * x + (int64_t)dyn_rng_below(r, 10);
    *v = x;
    return (int32_t)snprintf(buf, 8, "%lld", (long long)x);
}

/* "a+b=" into q (returns its length), the sum's digits into ans. */
static int32_t rand_sum(dyn_rng *r, char *q, char *ans, int32_t *ans_len)
{
    int64_t a, b;
    int32_t n = rand_number(r, q, &a);
    q[n++] = '+';
    n += rand_number(r, q + n, &b);
    q[n++] = '=';
    *ans_len = (int32_t)snprintf(ans, 8, "%lld", (long long)(a + b));
    return n;
}

/* "add 3+4=7;12+9=21;...;<a>+<b>=" -> the sum. The solved examples make the
 * input long and the target short, like a few-shot prompt. */
static void task_add(gen *g)
{
    int64_t budget = draw_len(g->rng, 900 * g->grow, 0.5, 16, 1 << 20);
    char q[16], ans[8];
    int32_t ans_len;
    int32_t q_len = rand_sum(g->rng, q, ans, &ans_len);
    gen_put_in(g, "add ", 4);
    gen_put_tgt(g, ans, ans_len);
    for (;;) {
        char ex[24], ex_ans[8];
        int32_t ex_ans_len;
        int32_t n = rand_sum(g->rng, ex, ex_ans, &ex_ans_len);
        memcpy(ex + n, ex_ans, (size_t)ex_ans_len);
        n += ex_ans_len;
        ex[n++] = ';';
        int64_t after = (int64_t)g->in_len + n + q_len;
        if (after > budget || !gen_fits(g, after, g->tgt_len)) break;
        gen_put_in(g, ex, n);
    }
    gen_put_in(g, q, q_len);
}

/* ---- lookup: the value of a key in a passage of key=value pairs ------------- */

#define LOOKUP_KEY 4
#define LOOKUP_VALUE_MAX 12
#define LOOKUP_PAIRS_MAX 256 /* at max_seqlen <= 2048; x grow above */

/* "lookup abcd=x7k;qrst=42;...;?qrst" -> "42". Keys are 4 distinct
 * lowercase letters, values 1..12 letters or digits. */
static void task_lookup(gen *g)
{
    static const char value_chars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    int64_t budget = draw_len(g->rng, 320 * g->grow, 0.7, 24, 1 << 20);
    char keys[LOOKUP_PAIRS_MAX * GROW_MAX][LOOKUP_KEY];
    int32_t val_off[LOOKUP_PAIRS_MAX * GROW_MAX], val_len[LOOKUP_PAIRS_MAX * GROW_MAX];
    int32_t m = 0, pairs_max = (int32_t)(LOOKUP_PAIRS_MAX * g->grow);
    gen_put_in(g, "lookup ", 7);
    while (m < pairs_max) {
        char key[LOOKUP_KEY];
        int fresh;
        do { /* a key not used yet in this passage */
            for (int k = 0; k < LOOKUP_KEY; k++) key[k] = rand_letter(g->rng);
            fresh = 1;
            for (int32_t j = 0; j < m && fresh; j++) fresh = memcmp(keys[j], key, LOOKUP_KEY) != 0;
        } while (!fresh);
        int32_t vlen = (int32_t)draw_len(g->rng, 5, 0.5, 1, LOOKUP_VALUE_MAX);
        int32_t pair_len = LOOKUP_KEY + 1 + vlen + 1;
        int64_t after = (int64_t)g->in_len + pair_len + 1 + LOOKUP_KEY; /* + "?key" */
        /* The first pair ignores the drawn budget: a passage needs one. */
        if ((m > 0 && after > budget) || !gen_fits(g, after, LOOKUP_VALUE_MAX)) break;
        memcpy(keys[m], key, LOOKUP_KEY);
        gen_put_in(g, key, LOOKUP_KEY);
        g->in[g->in_len++] = '=';
        val_off[m] = g->in_len;
        val_len[m] = vlen;
        for (int32_t k = 0; k < vlen; k++)
            g->in[g->in_len++] = value_chars[dyn_rng_below(g->rng, sizeof value_chars - 1)];
        g->in[g->in_len++] = ';';
        m++;
    }
    int32_t q = (int32_t)dyn_rng_below(g->rng, (uint64_t)m);
    g->in[g->in_len++] = '?';
    gen_put_in(g, keys[q], LOOKUP_KEY);
    gen_put_tgt(g, g->in + val_off[q], val_len[q]);
}

/* ---- cipher: a fixed substitution of letters as "translation" -------------- */

static const char CIPHER_KEY[27] = "qwertyuiopasdfghjklzxcvbnm";

const char *builtin_cipher_key(void) { return CIPHER_KEY; }

/* "cipher hello world" -> "itssg vgksr": words of 1..8 letters, each letter
 * replaced by CIPHER_KEY, spaces kept. */
static void task_cipher(gen *g)
{
    int64_t n = draw_len(g->rng, 40, 0.6, 3, 1 << 20);
    n = min64(n, min64(min64(g->cap_in - 7, g->cap_tgt), (g->cap_total - 7) / 2));
    gen_put_in(g, "cipher ", 7);
    int64_t len = 0;
    for (;;) {
        int64_t wl = 1 + (int64_t)dyn_rng_below(g->rng, 8);
        int64_t sep = len > 0;
        if (len + sep + wl > n) wl = n - len - sep;
        if (wl <= 0) break;
        if (sep) {
            g->in[g->in_len++] = ' ';
            g->tgt[g->tgt_len++] = ' ';
        }
        for (int64_t k = 0; k < wl; k++) {
            char c = rand_letter(g->rng);
            g->in[g->in_len++] = c;
            g->tgt[g->tgt_len++] = CIPHER_KEY[c - 'a'];
        }
        len += sep + wl;
    }
}

/* ---- summarise: the first sentence of a passage ----------------------------- */

#define SENTENCE_MAX 200

/* A sentence of about `want` bytes (at most max_len, >= 2): words of 2..9
 * letters, the first capitalised, ending in '.'; returns its length. */
static int32_t rand_sentence(dyn_rng *r, char *buf, int64_t max_len)
{
    int64_t want = min64(draw_len(r, 60, 0.5, 8, SENTENCE_MAX), max_len);
    int32_t len = 0;
    for (;;) {
        int32_t wl = 2 + (int32_t)dyn_rng_below(r, 8);
        int32_t sep = len > 0;
        if (len + sep + wl + 1 > want) {
            if (len > 0) break;
            wl = (int32_t)want - 1; /* the first word always fits, shortened */
        }
        if (sep) buf[len++] = ' ';
        int32_t w0 = len;
        for (int32_t k = 0; k < wl; k++) buf[len++] = rand_letter(r);
        if (!sep) buf[w0] = (char)(buf[w0] - 'a' + 'A');
    }
    buf[len++] = '.';
    return len;
}

/* "summarise Xxx yyy. Zzz ww. ..." -> "Xxx yyy." */
static void task_summarise(gen *g)
{
    int64_t budget = draw_len(g->rng, 700 * g->grow, 0.6, 32, 1 << 20);
    int64_t first_max = min64(min64(g->cap_in - 10, g->cap_tgt), (g->cap_total - 10) / 2);
    char s[SENTENCE_MAX + 8];
    int32_t n = rand_sentence(g->rng, s, first_max);
    gen_put_in(g, "summarise ", 10);
    gen_put_in(g, s, n);
    gen_put_tgt(g, s, n);
    for (;;) {
        n = rand_sentence(g->rng, s, SENTENCE_MAX);
        int64_t after = (int64_t)g->in_len + 1 + n;
        if (after > budget || !gen_fits(g, after, g->tgt_len)) break;
        g->in[g->in_len++] = ' ';
        gen_put_in(g, s, n);
    }
}

/* ---- classify: which category's keyword a sentence contains ----------------- */

#define CLASSIFY_CATS 4
#define CLASSIFY_WORDS 8
#define CLASSIFY_MAX_BYTES 1000

static const char *const CATEGORY[CLASSIFY_CATS] = {"animal", "colour", "food", "tool"};
static const char *const KEYWORD[CLASSIFY_CATS][CLASSIFY_WORDS] = {
    {"cat", "dog", "horse", "tiger", "mouse", "eagle", "snake", "whale"},
    {"red", "blue", "green", "yellow", "purple", "orange", "black", "white"},
    {"bread", "apple", "rice", "cheese", "soup", "honey", "pasta", "salad"},
    {"hammer", "saw", "drill", "wrench", "spade", "chisel", "ruler", "knife"},
};

static int is_keyword(const char *w, int32_t n)
{
    for (int c = 0; c < CLASSIFY_CATS; c++)
        for (int k = 0; k < CLASSIFY_WORDS; k++)
            if ((int32_t)strlen(KEYWORD[c][k]) == n && memcmp(KEYWORD[c][k], w, (size_t)n) == 0)
                return 1;
    return 0;
}

/* "classify qzx tiger ppe ..." -> "animal": random filler words (never a
 * keyword) with exactly one keyword at a random word position. */
static void task_classify(gen *g)
{
    int32_t cat = (int32_t)dyn_rng_below(g->rng, CLASSIFY_CATS);
    const char *kw = KEYWORD[cat][dyn_rng_below(g->rng, CLASSIFY_WORDS)];
    int32_t kw_len = (int32_t)strlen(kw), label_len = (int32_t)strlen(CATEGORY[cat]);
    int64_t n = draw_len(g->rng, 96, 0.6, 16, CLASSIFY_MAX_BYTES);
    n = min64(n, min64(g->cap_in - 9, g->cap_total - 9 - label_len));
    /* Filler words first (after the prefix), then the keyword is moved in. */
    gen_put_in(g, "classify ", 9);
    int32_t start[CLASSIFY_MAX_BYTES / 2 + 2];
    int32_t words = 0, len = 0;
    for (;;) {
        char w[8];
        int32_t wl = 2 + (int32_t)dyn_rng_below(g->rng, 6);
        do {
            for (int32_t k = 0; k < wl; k++) w[k] = rand_letter(g->rng);
        } while (is_keyword(w, wl));
        if (len + 1 + wl + 1 + kw_len > n) break; /* room for " word" and " keyword" */
        if (words > 0) g->in[g->in_len++] = ' ';
        start[words++] = g->in_len;
        gen_put_in(g, w, wl);
        len += (words > 1) + wl;
    }
    /* Insert "keyword " before word p (or " keyword" at the end). */
    int32_t p = (int32_t)dyn_rng_below(g->rng, (uint64_t)words + 1);
    if (p == words) {
        if (words > 0) g->in[g->in_len++] = ' ';
        gen_put_in(g, kw, kw_len);
    } else {
        int32_t at = start[p];
        memmove(g->in + at + kw_len + 1, g->in + at, (size_t)(g->in_len - at));
        memcpy(g->in + at, kw, (size_t)kw_len);
        g->in[at + kw_len] = ' ';
        g->in_len += kw_len + 1;
    }
    gen_put_tgt(g, CATEGORY[cat], label_len);
}

/* ---- the mixture -------------------------------------------------------------- */

typedef struct builtin_task {
    const char *name;
    double weight;      /* mixture probability; the weights sum to 1 */
    int32_t min_seqlen; /* smallest max_seqlen at which its samples are as documented */
    void (*generate)(gen *g);
} builtin_task;

/* Weights follow the FLAN-like families (flan.c): classification 0.30 ->
 * classify + sort; QA over a context 0.20 -> lookup; summarisation 0.10 ->
 * summarise; translation 0.12 -> cipher; chain-of-thought (long targets)
 * 0.13 -> copy + reverse; few-shot 0.15 -> add. */
/* Minimum lengths: 64 (DYN_CORPUS_BUILTIN_MIN_SEQLEN) for every task but
 * classify, whose smallest sample ("classify " + a 6-byte keyword, sep, a
 * 6-byte label, eos) is 23 tokens; at 32 it still has its keyword among
 * filler words (GPT: 15 bytes of words, T5: 22). A shorter input
 * is the easier task: fewer filler letters to tell the keyword from. */
static const builtin_task TASKS[BUILTIN_NUM_TASKS] = {
    {"copy", 0.07, 64, task_copy},       {"reverse", 0.06, 64, task_reverse},
    {"sort", 0.06, 64, task_sort},       {"add", 0.15, 64, task_add},
    {"lookup", 0.20, 64, task_lookup},   {"cipher", 0.12, 64, task_cipher},
    {"summarise", 0.10, 64, task_summarise}, {"classify", 0.24, 32, task_classify},
};

const char *builtin_task_name(int32_t task)
{
    return task >= 0 && task < BUILTIN_NUM_TASKS ? TASKS[task].name : NULL;
}

double builtin_task_weight(int32_t task)
{
    return task >= 0 && task < BUILTIN_NUM_TASKS ? TASKS[task].weight : 0.0;
}

int32_t builtin_min_seqlen(uint32_t task_mask)
{
    int32_t m = 0;
    for (int32_t k = 0; k < BUILTIN_NUM_TASKS; k++)
        if ((task_mask >> k & 1) && TASKS[k].min_seqlen > m) m = TASKS[k].min_seqlen;
    return m;
}

/* splitmix64's finaliser: a bijective mix of 64 bits. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

void builtin_generate(uint64_t seed, dyn_corpus_split split, int64_t index, int32_t max_seqlen,
                      dyn_model_kind kind, uint32_t task_mask, builtin_text *out)
{
    /* One stream per (seed, split); one generator per index in it. */
    uint64_t stream = mix64(mix64(seed) ^ (split == DYN_SPLIT_HELDOUT ? 0x686f6c646f7574ULL : 0x747261696eULL));
    dyn_rng rng;
    dyn_rng_seed(&rng, mix64(stream ^ mix64((uint64_t)index)));
    gen g = {.in = out->in, .tgt = out->tgt, .rng = &rng, .grow = 1.0};
    if (max_seqlen > GROW_BASE)
        g.grow = max_seqlen >= GROW_BASE * GROW_MAX ? (double)GROW_MAX : (double)max_seqlen / GROW_BASE;
    if (kind != DYN_MODEL_T5) { /* decoder-only: (in + 1) + (tgt + 1) <= L */
        g.cap_in = g.cap_tgt = g.cap_total = (int64_t)max_seqlen - 2;
    } else { /* each side + 1 <= L */
        g.cap_in = g.cap_tgt = (int64_t)max_seqlen - 1;
        g.cap_total = 2 * (int64_t)max_seqlen;
    }
    /* The task: walk the cumulative weights of the tasks in the mask; the
     * last of them absorbs rounding. */
    double total = 0.0;
    int32_t t = -1;
    for (int32_t k = 0; k < BUILTIN_NUM_TASKS; k++)
        if (task_mask >> k & 1) {
            total += TASKS[k].weight;
            t = k;
        }
    double u = dyn_rng_uniform(&rng) * total, acc = 0.0;
    for (int32_t k = 0; k < t; k++) {
        if (!(task_mask >> k & 1)) continue;
        acc += TASKS[k].weight;
        if (u < acc) {
            t = k;
            break;
        }
    }
    TASKS[t].generate(&g);
    out->task = t;
    out->in_len = g.in_len;
    out->tgt_len = g.tgt_len;
}
