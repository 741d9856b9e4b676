/* test_data_ref.c — end to end against reference tokenizers: a JSONL of text
 * converted by `dynapipe data convert --tokenizer` into Megatron files and
 * read back gives exactly the reference implementation's ids, record by
 * record, plus the end-of-sequence rule of dyn_codec (include/dynapipe/
 * corpus.h), which the test applies itself to the reference ids:
 *
 *   GPT-2 (tests/tokenizer/ref_setup.sh: GPT-2's tokenizer.json and the ids
 *       of @huggingface/tokenizers per line of its corpus): decoder-only text
 *       = ref + EOS 50256 (no EOS twice), uint16 files; pairs: input = ref,
 *       target = ref + EOS;
 *   Llama-3 style (same script; cl100k, over 65,500 ids): text = ref with
 *       its BOS + EOS, int32 files;
 *   SentencePiece (a T5-like unigram model trained here with spm_train; ids
 *       of Debian's python3-sentencepiece): T5 pairs, input and target each
 *       = ref + EOS (the model has no BOS).
 *
 * A part whose tools cannot be had (node/npm; spm_train/python3-sentencepiece)
 * is skipped with a line saying why; with neither, the test exits 77. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dynapipe/corpus.h" /* defines: dyn_corpus_* */

static char g_dir[1024];     /* this test's work folder (in the build folder) */
static const char *g_src, *g_cli;
static int g_have_npm, g_have_spm;

enum { MAX_LINES = 1024 };

static int run(const char *cmd)
{
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc)) return -1;
    return WEXITSTATUS(rc);
}

/* A file's lines (without '\n'), at most MAX_LINES; *n their count. */
static char **read_lines(const char *path, int *n)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char **v = calloc(MAX_LINES, sizeof *v);
    assert_non_null(v);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    *n = 0;
    while (*n < MAX_LINES && (got = getline(&line, &cap, fp)) >= 0) {
        if (got > 0 && line[got - 1] == '\n') line[--got] = '\0';
        v[(*n)++] = strdup(line);
    }
    free(line);
    fclose(fp);
    return v;
}

static void free_lines(char **v, int n)
{
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* Space-separated ids of s into ids (cap); their count. */
static int parse_ids(const char *s, int32_t *ids, int cap)
{
    int n = 0;
    char *end;
    for (;;) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        assert_true(n < cap);
        ids[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

/* Hex to bytes (NUL-terminated in out); length or -1 when odd. */
static int unhex(const char *h, char *out)
{
    size_t n = strlen(h);
    if (n % 2) return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned v;
        if (sscanf(h + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (char)v;
    }
    out[n / 2] = '\0';
    return (int)(n / 2);
}

/* Strict UTF-8 without NUL: what a JSONL string can hold. */
static int valid_utf8(const unsigned char *s, int n)
{
    for (int i = 0; i < n;) {
        unsigned c = s[i];
        int k = c == 0 ? -1 : c < 0x80 ? 0 : (c & 0xE0) == 0xC0 && c >= 0xC2 ? 1 : (c & 0xF0) == 0xE0 ? 2
              : (c & 0xF8) == 0xF0 && c <= 0xF4 ? 3 : -1;
        if (k < 0 || (k > 0 && i + k >= n)) return 0;
        unsigned cp = k == 0 ? c : c & (0x3F >> k);
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* One JSONL line {"key": text} or {"input": a, "target": b} appended to fp. */
static void put_record(FILE *fp, const char *k1, const char *v1, const char *k2, const char *v2)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, k1, v1);
    if (k2) cJSON_AddStringToObject(o, k2, v2);
    char *s = cJSON_PrintUnformatted(o);
    assert_non_null(s);
    fprintf(fp, "%s\n", s);
    free(s);
    cJSON_Delete(o);
}

/* `dynapipe data convert JSONL ARGS --out PREFIX` must succeed. */
static void convert(const char *jsonl, const char *args, const char *prefix)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' data convert '%s' %s --out '%s' >/dev/null", g_cli, jsonl, args, prefix);
    if (run(cmd) != 0) fail_msg("failed: %s", cmd);
}

static int idx_dtype(const char *prefix, const char *suffix)
{
    char p[1400];
    snprintf(p, sizeof p, "%s%s.idx", prefix, suffix);
    FILE *fp = fopen(p, "rb");
    assert_non_null(fp);
    unsigned char h[18];
    assert_int_equal(fread(h, 1, 18, fp), 18);
    fclose(fp);
    return h[17];
}

/* ---- Hugging Face byte-level BPE (GPT-2, Llama-3 style) ------------------ */

/* The usable corpus lines (valid UTF-8, not empty) with their reference ids
 * from REF (gpt2.ref / l3.ref). */
typedef struct ref_set {
    int n;
    char *text[MAX_LINES];
    int32_t *ids[MAX_LINES];
    int n_ids[MAX_LINES];
} ref_set;

static ref_set *load_refs(const char *ref_name)
{
    char p[1200];
    int nh, nr;
    snprintf(p, sizeof p, "%s/corpus.hex", g_dir);
    char **hex = read_lines(p, &nh);
    snprintf(p, sizeof p, "%s/%s", g_dir, ref_name);
    char **ref = read_lines(p, &nr);
    assert_int_equal(nh, nr);
    ref_set *r = calloc(1, sizeof *r);
    assert_non_null(r);
    for (int i = 0; i < nh; i++) {
        char *t = malloc(strlen(hex[i]) / 2 + 1);
        assert_non_null(t);
        int len = unhex(hex[i], t);
        if (len <= 0 || !valid_utf8((const unsigned char *)t, len)) {
            free(t);
            continue;
        }
        if (strcmp(t, "<|endoftext|>") == 0) { /* EOS alone: one token, too short for a sequence */
            free(t);
            continue;
        }
        r->text[r->n] = t;
        r->ids[r->n] = malloc((strlen(ref[i]) / 2 + 2) * sizeof(int32_t));
        assert_non_null(r->ids[r->n]);
        r->n_ids[r->n] = parse_ids(ref[i], r->ids[r->n], (int)strlen(ref[i]) / 2 + 2);
        r->n++;
    }
    free_lines(hex, nh);
    free_lines(ref, nr);
    assert_true(r->n > 50);
    return r;
}

static void free_refs(ref_set *r)
{
    for (int i = 0; i < r->n; i++) {
        free(r->text[i]);
        free(r->ids[i]);
    }
    free(r);
}

/* Record i of the decoder-only dataset PREFIX (vocab) is ref ids + eos
 * (eos not doubled). */
static void check_text(const char *prefix, int32_t vocab, const ref_set *r, int32_t eos)
{
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.vocab = vocab;
    o.max_seqlen = 1 << 20;
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(prefix, &o, &err);
    if (c == NULL) fail_msg("%s", err.msg);
    assert_int_equal(dyn_corpus_count(c), r->n);
    int32_t *want = malloc(((size_t)1 << 16) * sizeof *want);
    assert_non_null(want);
    for (int i = 0; i < r->n; i++) {
        int m = r->n_ids[i];
        memcpy(want, r->ids[i], (size_t)m * sizeof *want);
        if (m == 0 || want[m - 1] != eos) want[m++] = eos;
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
        if (s.input_len + s.target_len != m || s.input[0] != want[0] ||
            memcmp(s.target, want + 1, (size_t)(m - 1) * sizeof *want) != 0)
            fail_msg("%s: record %d (\"%s\") differs from the reference", prefix, i, r->text[i]);
    }
    free(want);
    dyn_corpus_free(c);
}

static void test_gpt2_text_and_pairs(void **state)
{
    (void)state;
    if (!g_have_npm) skip();
    ref_set *r = load_refs("gpt2.ref");
    char jsonl[1200], prefix[1200], tok[1200];
    snprintf(tok, sizeof tok, "%s/gpt2", g_dir);
    /* decoder-only text */
    snprintf(jsonl, sizeof jsonl, "%s/gpt2_text.jsonl", g_dir);
    FILE *fp = fopen(jsonl, "w");
    assert_non_null(fp);
    for (int i = 0; i < r->n; i++) put_record(fp, "text", r->text[i], NULL, NULL);
    assert_int_equal(fclose(fp), 0);
    snprintf(prefix, sizeof prefix, "%s/gpt2_text", g_dir);
    char args[1400];
    snprintf(args, sizeof args, "--tokenizer '%s'", tok);
    convert(jsonl, args, prefix);
    assert_int_equal(idx_dtype(prefix, ""), 8); /* 50,257 ids: uint16 */
    check_text(prefix, 50257, r, 50256);

    /* pairs: record i = (line i, line i+1) */
    snprintf(jsonl, sizeof jsonl, "%s/gpt2_pairs.jsonl", g_dir);
    fp = fopen(jsonl, "w");
    assert_non_null(fp);
    for (int i = 0; i + 1 < r->n; i++) put_record(fp, "input", r->text[i], "target", r->text[i + 1]);
    assert_int_equal(fclose(fp), 0);
    snprintf(prefix, sizeof prefix, "%s/gpt2_pairs", g_dir);
    convert(jsonl, args, prefix);
    assert_int_equal(idx_dtype(prefix, "_input"), 8);
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.vocab = 50257;
    o.max_seqlen = 1 << 20;
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(prefix, &o, &err);
    if (c == NULL) fail_msg("%s", err.msg);
    assert_int_equal(dyn_corpus_count(c), r->n - 1);
    for (int i = 0; i + 1 < r->n; i++) {
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
        assert_int_equal(s.input_len, r->n_ids[i]);
        assert_memory_equal(s.input, r->ids[i], (size_t)s.input_len * sizeof(int32_t));
        assert_int_equal(s.target_len, r->n_ids[i + 1] + 1);
        assert_memory_equal(s.target, r->ids[i + 1], (size_t)r->n_ids[i + 1] * sizeof(int32_t));
        assert_int_equal(s.target[s.target_len - 1], 50256);
    }
    dyn_corpus_free(c);
    free_refs(r);
}

static void test_llama3_style_int32(void **state)
{
    (void)state;
    if (!g_have_npm) skip();
    ref_set *r = load_refs("l3.ref");
    char jsonl[1200], prefix[1200], args[1400];
    snprintf(jsonl, sizeof jsonl, "%s/l3_text.jsonl", g_dir);
    FILE *fp = fopen(jsonl, "w");
    assert_non_null(fp);
    for (int i = 0; i < r->n; i++) put_record(fp, "text", r->text[i], NULL, NULL);
    assert_int_equal(fclose(fp), 0);
    snprintf(prefix, sizeof prefix, "%s/l3_text", g_dir);
    snprintf(args, sizeof args, "--tokenizer '%s/l3'", g_dir);
    convert(jsonl, args, prefix);
    assert_int_equal(idx_dtype(prefix, ""), 4); /* over 65,500 ids: int32 */
    /* the EOS: config.json's first eos_token_id, 100257 */
    check_text(prefix, 100258, r, 100257);
    free_refs(r);
}

/* ---- SentencePiece ------------------------------------------------------- */

static const char *SPM_LINES[] = {
    "Hello world, this is a test.",
    "the quick brown fox jumps over the lazy dog",
    "Grüße aus München — naïve café",
    "translate English to German: That is good.",
    "numbers 12345 and 3.14159",
    "   many   spaces and tabs   ",
    "unseen: Ωμέγα ψ 😀",
    "kato rimen salo",
};
enum { N_SPM = sizeof SPM_LINES / sizeof *SPM_LINES };

static void test_spm_t5_pairs(void **state)
{
    (void)state;
    if (!g_have_spm) skip();
    char p[1200], cmd[8192];
    /* the reference: python3-sentencepiece, each line + EOS */
    snprintf(p, sizeof p, "%s/spm/lines.txt", g_dir);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    for (int i = 0; i < N_SPM; i++) fprintf(fp, "%s\n", SPM_LINES[i]);
    assert_int_equal(fclose(fp), 0);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/tokenizer/spm_ref.py' '%s/spm/spiece.model' '%s' '%s/spm/ref.txt' 0 1",
             g_src, g_dir, p, g_dir);
    assert_int_equal(run(cmd), 0);
    snprintf(p, sizeof p, "%s/spm/ref.txt", g_dir);
    int nr;
    char **ref = read_lines(p, &nr);
    assert_int_equal(nr, N_SPM);
    int32_t ids[N_SPM][512];
    int n_ids[N_SPM];
    for (int i = 0; i < N_SPM; i++) {
        char *tab = strchr(ref[i], '\t'); /* ids, a tab, the hex of the decoded text */
        assert_non_null(tab);
        *tab = '\0';
        n_ids[i] = parse_ids(ref[i], ids[i], 512);
    }
    free_lines(ref, nr);
    /* pairs (line i, line i+1 mod N), converted for T5 */
    char jsonl[1200], prefix[1200], args[1400];
    snprintf(jsonl, sizeof jsonl, "%s/spm/pairs.jsonl", g_dir);
    fp = fopen(jsonl, "w");
    assert_non_null(fp);
    for (int i = 0; i < N_SPM; i++) put_record(fp, "input", SPM_LINES[i], "target", SPM_LINES[(i + 1) % N_SPM]);
    assert_int_equal(fclose(fp), 0);
    snprintf(prefix, sizeof prefix, "%s/spm/pairs", g_dir);
    snprintf(args, sizeof args, "--model t5 --tokenizer '%s/spm/spiece.model'", g_dir);
    convert(jsonl, args, prefix);
    assert_int_equal(idx_dtype(prefix, "_target"), 8);
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.vocab = 400;
    o.kind = DYN_MODEL_T5;
    o.max_seqlen = 4096;
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(prefix, &o, &err);
    if (c == NULL) fail_msg("%s", err.msg);
    for (int i = 0; i < N_SPM; i++) {
        int j = (i + 1) % N_SPM;
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
        assert_int_equal(s.input_len, n_ids[i]);
        assert_memory_equal(s.input, ids[i], (size_t)n_ids[i] * sizeof(int32_t));
        assert_int_equal(s.target_len, n_ids[j]);
        assert_memory_equal(s.target, ids[j], (size_t)n_ids[j] * sizeof(int32_t));
        assert_int_equal(s.target[s.target_len - 1], 1); /* EOS */
    }
    dyn_corpus_free(c);
    /* a model vocabulary smaller than the tokenizer's: one line naming it */
    snprintf(cmd, sizeof cmd, "'%s' data convert '%s' %s --vocab 100 --out '%s/spm/small' 2>'%s/spm/err.txt'",
             g_cli, jsonl, args, g_dir, g_dir);
    assert_int_not_equal(run(cmd), 0);
    snprintf(p, sizeof p, "%s/spm/err.txt", g_dir);
    int ne;
    char **e = read_lines(p, &ne);
    assert_int_equal(ne, 1);
    assert_non_null(strstr(e[0], "spiece.model"));
    assert_non_null(strstr(e[0], "vocabulary of 100"));
    free_lines(e, ne);
}

/* A training corpus for spm_train and the model (T5-like: pad 0, eos 1,
 * unk 2, no BOS). 0, or -1 when the tools are missing (said why). */
static int make_spm(void)
{
    if (run("command -v spm_train >/dev/null") != 0) {
        fprintf(stderr, "test_data_ref: SentencePiece part skipped: spm_train is not installed (Debian: sentencepiece)\n");
        return -1;
    }
    if (run("/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null") != 0) {
        fprintf(stderr, "test_data_ref: SentencePiece part skipped: python3-sentencepiece is not installed\n");
        return -1;
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/spm' && mkdir -p '%s/spm'", g_dir, g_dir);
    if (run(cmd) != 0) return -1;
    snprintf(cmd, sizeof cmd, "%s/spm/corpus.txt", g_dir);
    FILE *fp = fopen(cmd, "w");
    if (fp == NULL) return -1;
    static const char *syll[] = {"ka", "to", "ri", "men", "sa", "lo", "ün", "ße", "pra", "vi", "no", "ter",
                                 "the", "fox", "dog", "good", "test", "world", "12", "3.", ",", "é"};
    uint64_t x = 7;
    for (int l = 0; l < 600; l++) {
        for (int w = 0, nw = 3 + l % 9; w < nw; w++) {
            if (w) fputc(' ', fp);
            for (int y = 0; y < 1 + w % 3; y++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                fputs(syll[(x >> 33) % (sizeof syll / sizeof *syll)], fp);
            }
        }
        fputc('\n', fp);
    }
    for (int i = 0; i < N_SPM; i++) fprintf(fp, "%s\n", SPM_LINES[i]);
    if (fclose(fp) != 0) return -1;
    snprintf(cmd, sizeof cmd,
             "cd '%s/spm' && spm_train --input=corpus.txt --character_coverage=1.0 --minloglevel=2 --num_threads=1 "
             "--model_prefix=spiece --model_type=unigram --vocab_size=400 --pad_id=0 --eos_id=1 --unk_id=2 "
             "--bos_id=-1 >/dev/null 2>&1",
             g_dir);
    if (run(cmd) != 0) {
        fprintf(stderr, "test_data_ref: spm_train failed: %s\n", cmd);
        return -2;
    }
    return 0;
}

int main(void)
{
    if (getcwd(g_dir, sizeof g_dir - 32) == NULL) return 1;
    strcat(g_dir, "/tokdata_ref");
    g_src = getenv("DYN_SOURCE_DIR");
    g_cli = getenv("DYN_CLI");
    if (g_src == NULL || g_cli == NULL) {
        fprintf(stderr, "test_data_ref: DYN_SOURCE_DIR / DYN_CLI are not set (run through ctest)\n");
        return 1;
    }
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/tokenizer/ref_setup.sh' '%s'", g_src, g_dir);
    int rc = run(cmd);
    if (rc != 0 && rc != 77) {
        fprintf(stderr, "test_data_ref: making the reference data failed (exit %d)\n", rc);
        return 1;
    }
    g_have_npm = rc == 0;
    int s = make_spm();
    if (s == -2) return 1;
    g_have_spm = s == 0;
    if (!g_have_npm && !g_have_spm) return 77; /* both said why */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_text_and_pairs),
        cmocka_unit_test(test_llama3_style_int32),
        cmocka_unit_test(test_spm_t5_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
