/* test_tokenizer_spm.c — SentencePiece models (src/data/tok_spm.cc) against
 * Debian's python3-sentencepiece.
 *
 * The test writes a small multilingual corpus, trains two models on it with
 * Debian's `spm_train` (a T5-like unigram model: pad 0, eos 1, unk 2, no
 * BOS; a Llama-like BPE model with byte fallback: unk 0, bos 1, eos 2), and
 * encodes test lines (seen and unseen text, characters outside the training
 * alphabet, emoji) with dynapipe and with tests/tokenizer/spm_ref.py.
 * Checked: the ids are the same line by line, including what add_special
 * adds (T5: EOS at the end; Llama: BOS at the start, as Hugging Face's
 * classes do); decoding gives the same text as the Python module; special
 * ids and vocabulary size are the model's; tokenizer_config.json beside the
 * model overrides add_bos_token; loading a file that is not a model is one
 * line naming it. Without spm_train or python3-sentencepiece it prints why
 * and exits 77 (ctest: skipped).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/tokenizer.h" /* defines: dyn_tokenizer_load, _encode, _decode */

static char g_dir[4096];
static const char *g_src;

static const char *TEST_LINES[] = {
    "Hello world, this is a test.",
    "the quick brown fox jumps over the lazy dog",
    "Grüße aus München — naïve café",
    "日本語のテキストと中文",
    "unseen: Ωμέγα ψ 😀 👍🏽 ⚙",
    "   many   spaces\tand tabs   ",
    "numbers 12345 and 3.14159",
    "",
    "ＡＢＣ full-width (NFKC folds it)",
    "translate English to German: That is good.",
};

static int run(const char *cmd)
{
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc)) return -1;
    return WEXITSTATUS(rc);
}

static void write_file(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fputs(text, fp) >= 0, 1);
    assert_int_equal(fclose(fp), 0);
}

/* Compare dynapipe with the Python module on TEST_LINES. */
static void compare(const char *model_dir, int add_bos, int add_eos, int add_special)
{
    char path[4400], lines[4400], ref[4400], cmd[14000];
    snprintf(path, sizeof path, "%s/%s", g_dir, model_dir);
    snprintf(lines, sizeof lines, "%s/lines.txt", g_dir);
    snprintf(ref, sizeof ref, "%s/%s.ref", g_dir, model_dir);
    FILE *fp = fopen(lines, "w");
    assert_non_null(fp);
    for (size_t i = 0; i < sizeof TEST_LINES / sizeof *TEST_LINES; i++) fprintf(fp, "%s\n", TEST_LINES[i]);
    assert_int_equal(fclose(fp), 0);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/tokenizer/spm_ref.py' '%s/%s' '%s' '%s' %d %d", g_src, path,
             strcmp(model_dir, "t5") == 0 ? "spiece.model" : "tokenizer.model", lines, ref, add_bos, add_eos);
    assert_int_equal(run(cmd), 0);

    dyn_error err;
    dyn_tokenizer *t = dyn_tokenizer_load(path, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    assert_int_equal(dyn_tokenizer_kind_of(t), DYN_TOKENIZER_SPM);
    fp = fopen(ref, "r");
    assert_non_null(fp);
    char *buf = NULL;
    size_t cap = 0;
    dyn_token_buf ids = {0};
    dyn_byte_buf text = {0};
    for (size_t i = 0; i < sizeof TEST_LINES / sizeof *TEST_LINES; i++) {
        assert_true(getline(&buf, &cap, fp) > 0);
        ids.n = 0;
        if (dyn_tokenizer_encode(t, TEST_LINES[i], strlen(TEST_LINES[i]), add_special, &ids, &err) != DYN_OK)
            fail_msg("%s", err.msg);
        char *hex = strchr(buf, '\t');
        assert_non_null(hex);
        *hex++ = '\0';
        char *p = buf;
        size_t k = 0;
        for (;;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (k >= ids.n || ids.ids[k] != v)
                fail_msg("%s line %zu: id %zu is %d, python3-sentencepiece %ld (%s)", model_dir, i + 1, k,
                         k < ids.n ? (int)ids.ids[k] : -1, v, buf);
            k++;
            p = end;
        }
        if (k != ids.n) fail_msg("%s line %zu: %zu ids, python3-sentencepiece %zu", model_dir, i + 1, ids.n, k);
        text.n = 0;
        assert_int_equal(dyn_tokenizer_decode(t, ids.ids, ids.n, 1, &text, &err), DYN_OK);
        size_t hn = strcspn(hex, "\n");
        assert_int_equal(hn, 2 * text.n);
        for (size_t j = 0; j < text.n; j++) {
            char two[3];
            snprintf(two, sizeof two, "%02x", (unsigned char)text.data[j]);
            assert_memory_equal(two, hex + 2 * j, 2);
        }
    }
    free(buf);
    fclose(fp);
    dyn_token_buf_free(&ids);
    dyn_byte_buf_free(&text);
    dyn_tokenizer_free(t);
}

static void test_t5_like(void **state)
{
    (void)state;
    char path[4400];
    snprintf(path, sizeof path, "%s/t5", g_dir);
    dyn_error err;
    dyn_tokenizer *t = dyn_tokenizer_load(path, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    dyn_tokenizer_specials sp = dyn_tokenizer_specials_of(t);
    assert_int_equal(sp.pad, 0);
    assert_int_equal(sp.eos, 1);
    assert_int_equal(sp.bos, -1);
    assert_int_equal(sp.decoder_start, 0); /* T5: the pad id */
    assert_int_equal(dyn_tokenizer_vocab_size(t), 400);
    /* an id beyond the vocabulary: one line naming the file */
    int32_t bad[] = {5, 400};
    dyn_byte_buf text = {0};
    assert_int_equal(dyn_tokenizer_decode(t, bad, 2, 0, &text, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "t5/spiece.model"));
    assert_non_null(strstr(err.msg, "400"));
    dyn_byte_buf_free(&text);
    dyn_tokenizer_free(t);
    compare("t5", 0, 1, 1);
    compare("t5", 0, 0, 0);
    /* T5's folder also has a Unigram tokenizer.json, which is not
     * supported: the folder gives the SentencePiece model beside it */
    char json[4500];
    snprintf(json, sizeof json, "%s/tokenizer.json", path);
    write_file(json, "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}, \"normalizer\": null}");
    t = dyn_tokenizer_load(path, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    assert_int_equal(dyn_tokenizer_kind_of(t), DYN_TOKENIZER_SPM);
    dyn_tokenizer_free(t);
    /* but a malformed tokenizer.json is an error, not skipped */
    write_file(json, "{\"model\": ");
    assert_null(dyn_tokenizer_load(path, &err));
    assert_non_null(strstr(err.msg, "tokenizer.json"));
    assert_int_equal(unlink(json), 0);
}

static void test_llama_like(void **state)
{
    (void)state;
    char path[4400];
    snprintf(path, sizeof path, "%s/llama", g_dir);
    dyn_error err;
    dyn_tokenizer *t = dyn_tokenizer_load(path, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    dyn_tokenizer_specials sp = dyn_tokenizer_specials_of(t);
    assert_int_equal(sp.bos, 1);
    assert_int_equal(sp.eos, 2);
    assert_int_equal(sp.pad, -1);
    dyn_tokenizer_free(t);
    compare("llama", 1, 0, 1);
    compare("llama", 0, 0, 0);
    /* tokenizer_config.json beside the model: add_eos_token as well */
    char cfg[4400];
    snprintf(cfg, sizeof cfg, "%s/llama/tokenizer_config.json", g_dir);
    write_file(cfg, "{\"add_bos_token\": true, \"add_eos_token\": true, \"pad_token\": \"</s>\"}");
    t = dyn_tokenizer_load(path, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    assert_int_equal(dyn_tokenizer_specials_of(t).pad, 2);
    dyn_tokenizer_free(t);
    compare("llama", 1, 1, 1);
    assert_int_equal(unlink(cfg), 0);
}

static void test_not_a_model(void **state)
{
    (void)state;
    char path[4400];
    snprintf(path, sizeof path, "%s/bad.model", g_dir);
    write_file(path, "this is not a protobuf\n");
    dyn_error err;
    assert_null(dyn_tokenizer_load(path, &err));
    assert_int_equal(err.code, DYN_ERR_PARSE);
    assert_non_null(strstr(err.msg, "bad.model"));
    assert_null(strchr(err.msg, '\n'));
}

int main(void)
{
    if (getcwd(g_dir, sizeof g_dir - 16) == NULL) return 1;
    strcat(g_dir, "/tokspm");
    g_src = getenv("DYN_SOURCE_DIR");
    if (g_src == NULL) {
        fprintf(stderr, "test_tokenizer_spm: DYN_SOURCE_DIR is not set (run through ctest)\n");
        return 1;
    }
    if (run("command -v spm_train >/dev/null") != 0) {
        fprintf(stderr, "test_tokenizer_spm: skipped: spm_train is not installed (Debian: sentencepiece)\n");
        return 77;
    }
    if (run("/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null") != 0) {
        fprintf(stderr, "test_tokenizer_spm: skipped: python3-sentencepiece is not installed\n");
        return 77;
    }
    char cmd[14000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/t5' '%s/llama'", g_dir, g_dir, g_dir);
    if (run(cmd) != 0) return 1;
    /* The corpus: a few hundred lines mixing English, German, Japanese and
     * Chinese sentences, numbers and punctuation, deterministic. */
    snprintf(cmd, sizeof cmd, "%s/corpus.txt", g_dir);
    FILE *fp = fopen(cmd, "w");
    if (fp == NULL) return 1;
    static const char *words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello", "world",
                                  "test", "translate", "English", "to", "German:", "That", "is", "good.", "Grüße",
                                  "München", "café", "日本語", "テキスト", "中文", "12345", "3.14", ",", "!", "(", ")"};
    /* and made-up words of two to four syllables, so that the models have
     * a few hundred pieces to learn */
    static const char *syll[] = {"ka", "to", "ri", "men", "sa", "lo", "ün", "ße", "pra", "vi", "no", "ter", "qu", "ax",
                                 "の", "语", "ク", "ta", "be", "zo"};
    uint64_t seed = 1;
    for (int l = 0; l < 800; l++) {
        int n = 3 + l % 11;
        for (int k = 0; k < n; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            if ((seed >> 60) < 8) {
                fprintf(fp, "%s%s", k ? " " : "", words[(seed >> 33) % (sizeof words / sizeof *words)]);
                continue;
            }
            if (k) fputc(' ', fp);
            for (int y = 0, ny = 2 + (int)((seed >> 40) % 3); y < ny; y++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                fputs(syll[(seed >> 33) % (sizeof syll / sizeof *syll)], fp);
            }
        }
        fputc('\n', fp);
    }
    if (fclose(fp) != 0) return 1;
    const char *common = "--input=corpus.txt --character_coverage=1.0 --minloglevel=2 --num_threads=1";
    snprintf(cmd, sizeof cmd,
             "cd '%s' && spm_train %s --model_prefix=t5/spiece --model_type=unigram --vocab_size=400 --pad_id=0 "
             "--eos_id=1 --unk_id=2 --bos_id=-1 >/dev/null 2>&1 && spm_train %s --model_prefix=llama/tokenizer "
             "--model_type=bpe --byte_fallback=true --vocab_size=700 >/dev/null 2>&1",
             g_dir, common, common);
    if (run(cmd) != 0) {
        fprintf(stderr, "test_tokenizer_spm: spm_train failed: %s\n", cmd);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t5_like),
        cmocka_unit_test(test_llama_like),
        cmocka_unit_test(test_not_a_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
