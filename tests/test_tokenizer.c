/* test_tokenizer.c — the tokenizer interface (src/data/tokenizer.h) on
 * small inputs whose answers are worked out by hand: the byte tokenizer;
 * a toy byte-level BPE tokenizer.json (ids 0..255 the bytes, a few merges)
 * for merge order and ties (short pieces through the plain loop, long ones
 * through the heap), added tokens, Split/ByteLevel pre-tokenizer steps, the
 * template's BOS/EOS and special ids from the files beside it; and bad input:
 * malformed JSON, unsupported models, normalizers and pre-tokenizers, merges
 * that are not valid, ids beyond the vocabulary — each one line naming the
 * file and what is wrong. The comparison with real tokenizers is
 * test_tokenizer_ref.c (Hugging Face, JavaScript) and test_tokenizer_spm.c
 * (SentencePiece, Python).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "data/tokenizer.h" /* defines: dyn_tokenizer_* */

static char g_dir[256];

/* ---- helpers ------------------------------------------------------------ */

/* GPT-2's byte-to-unicode character of byte b, as UTF-8 in out. */
static void byte_char(int b, char out[4])
{
    int n = 0, cp = -1;
    for (int x = 0; x < 256; x++) {
        int printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        int c = printable ? x : 256 + n++;
        if (x == b) cp = c;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = '\0';
    }
}

/* Toy vocabulary: byte b has id b; then 256 "ab", 257 "abc", 258 "bc",
 * 259 " a" (Ġa), 260 "aa", 261 "aaaa"; added 262 "<x>" (special),
 * 263 "<s>", 264 "</s>". Merges by rank: a b, ab c, b c, Ġ a, a a, aa aa. */
static cJSON *toy_json(void)
{
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        cJSON_AddNumberToObject(vocab, c, b);
    }
    static const char *merged[] = {"ab", "abc", "bc", "\xc4\xa0" "a", "aa", "aaaa"};
    for (int i = 0; i < 6; i++) cJSON_AddNumberToObject(vocab, merged[i], 256 + i);
    static const char *merges[] = {"a b", "ab c", "b c", "\xc4\xa0 a", "a a", "aa aa"};
    cJSON *m = cJSON_AddArrayToObject(model, "merges");
    for (int i = 0; i < 6; i++) cJSON_AddItemToArray(m, cJSON_CreateString(merges[i]));
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    static const char *contents[] = {"<x>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", 262 + i);
        cJSON_AddStringToObject(a, "content", contents[i]);
        cJSON_AddBoolToObject(a, "special", 1);
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "ByteLevel");
    cJSON_AddBoolToObject(pt, "add_prefix_space", 0);
    cJSON_AddNullToObject(root, "post_processor");
    return root;
}

/* Write root (freed) as DIR/NAME; returns the path (static buffer). */
static const char *write_json(const char *name, cJSON *root)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    char *text = cJSON_PrintUnformatted(root);
    assert_non_null(text);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
    free(text);
    cJSON_Delete(root);
    return path;
}

static void write_text(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
}

static void remove_file(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    unlink(path);
}

static dyn_tokenizer *load_toy(cJSON *root)
{
    const char *path = write_json("tokenizer.json", root);
    dyn_error err;
    dyn_tokenizer *t = dyn_tokenizer_load(path, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    return t;
}

/* Encode text and compare with want[0..n). */
static void expect_ids(dyn_tokenizer *t, const char *text, size_t len, int add_special, const int32_t *want, size_t n)
{
    dyn_token_buf ids = {0};
    dyn_error err;
    if (dyn_tokenizer_encode(t, text, len, add_special, &ids, &err) != DYN_OK) fail_msg("%s", err.msg);
    if (ids.n != n) {
        for (size_t i = 0; i < ids.n; i++) fprintf(stderr, "%d ", (int)ids.ids[i]);
        fail_msg("\"%s\": %zu ids, want %zu", text, ids.n, n);
    }
    for (size_t i = 0; i < n; i++)
        if (ids.ids[i] != want[i]) fail_msg("\"%s\": id %zu is %d, want %d", text, i, (int)ids.ids[i], (int)want[i]);
    dyn_token_buf_free(&ids);
}
#define EXPECT(t, text, add, ...)                                                                          \
    do {                                                                                                  \
        const int32_t want_[] = {__VA_ARGS__};                                                            \
        expect_ids(t, text, strlen(text), add, want_, sizeof want_ / sizeof *want_);                      \
    } while (0)

/* Loading root as tokenizer.json fails with one line holding each of the
 * given fragments and the file's name. */
static void expect_load_error(cJSON *root, dyn_status code, const char *frag)
{
    const char *path = write_json("tokenizer.json", root);
    dyn_error err;
    dyn_tokenizer *t = dyn_tokenizer_load(path, &err);
    if (t != NULL) fail_msg("loaded, expected an error with \"%s\"", frag);
    if (strstr(err.msg, frag) == NULL || strstr(err.msg, "tokenizer.json") == NULL || strchr(err.msg, '\n') != NULL)
        fail_msg("error \"%s\" lacks \"%s\" or the file name", err.msg, frag);
    assert_int_equal(err.code, code);
}

/* ---- the byte tokenizer ------------------------------------------------- */

static void test_bytes(void **state)
{
    (void)state;
    dyn_error err;
    dyn_tokenizer *t = dyn_tokenizer_load("bytes", &err);
    assert_non_null(t);
    assert_int_equal(dyn_tokenizer_vocab_size(t), 260);
    dyn_tokenizer_specials sp = dyn_tokenizer_specials_of(t);
    assert_int_equal(sp.pad, 256);
    assert_int_equal(sp.decoder_start, 257);
    assert_int_equal(sp.eos, 258);
    assert_int_equal(sp.bos, -1);
    EXPECT(t, "h\xc3\xa9\xff", 1, 'h', 0xC3, 0xA9, 0xFF);
    const int32_t ids[] = {'o', 'k', 258, 256};
    dyn_byte_buf out = {0};
    assert_int_equal(dyn_tokenizer_decode(t, ids, 4, 1, &out, &err), DYN_OK);
    assert_string_equal(out.data, "ok");
    out.n = 0;
    assert_int_equal(dyn_tokenizer_decode(t, ids, 4, 0, &out, &err), DYN_OK);
    assert_string_equal(out.data, "ok<eos><pad>");
    const int32_t bad[] = {'a', 260};
    assert_int_equal(dyn_tokenizer_decode(t, bad, 2, 0, &out, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "260"));
    assert_non_null(strstr(err.msg, "position 1"));
    assert_string_equal(out.data, "ok<eos><pad>"); /* untouched on failure */
    dyn_byte_buf_free(&out);
    dyn_tokenizer_free(t);
}

/* ---- byte-level BPE by hand --------------------------------------------- */

static void test_merge_order(void **state)
{
    (void)state;
    dyn_tokenizer *t = load_toy(toy_json());
    assert_int_equal(dyn_tokenizer_vocab_size(t), 265);
    EXPECT(t, "abc", 0, 257);            /* a b (0), then ab c (1) */
    EXPECT(t, "abbc", 0, 256, 258);      /* a b (0) first, then b c (2) */
    EXPECT(t, "bc", 0, 258);
    EXPECT(t, "abc abc", 0, 257, ' ', 257); /* " abc": a b before Ġ a, then Ġ+ab has no merge */
    EXPECT(t, " a", 0, 259);
    EXPECT(t, "aaa", 0, 260, 'a');       /* ties: leftmost first */
    EXPECT(t, "aaaa", 0, 261);
    /* 19 a's: one piece of more than 16 bytes, so the heap merges it */
    EXPECT(t, "aaaaaaaaaaaaaaaaaaa", 0, 261, 261, 261, 261, 260, 'a');
    EXPECT(t, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", 0, 261, 261, 261, 261, 261, 261, 261, 261, 261, 261, 256);
    /* the GPT-2 regex: contractions, letters, digits, whitespace runs */
    EXPECT(t, "I'm  9x", 0, 'I', '\'', 'm', ' ', ' ', '9', 'x');
    /* invalid UTF-8: its own piece, bytes kept */
    EXPECT(t, "a\xff\xfe" "b", 0, 'a', 0xFF, 0xFE, 'b');
    /* added tokens: cut before pre-tokenization; skipped when decoding */
    EXPECT(t, "ab<x>c<x", 0, 256, 262, 'c', '<', 'x');
    const int32_t ids[] = {256, 262, 'c'};
    dyn_byte_buf out = {0};
    dyn_error err;
    assert_int_equal(dyn_tokenizer_decode(t, ids, 3, 1, &out, &err), DYN_OK);
    assert_string_equal(out.data, "abc");
    out.n = 0;
    assert_int_equal(dyn_tokenizer_decode(t, ids, 3, 0, &out, &err), DYN_OK);
    assert_string_equal(out.data, "ab<x>c");
    /* an id beyond the vocabulary: one line naming the file */
    const int32_t bad[] = {5, 265};
    assert_int_equal(dyn_tokenizer_decode(t, bad, 2, 0, &out, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "tokenizer.json"));
    assert_non_null(strstr(err.msg, "265"));
    dyn_byte_buf_free(&out);
    dyn_tokenizer_free(t);
}

static void test_array_merges_and_steps(void **state)
{
    (void)state;
    cJSON *root = toy_json();
    /* merges as ["a", "b"] pairs */
    cJSON *model = cJSON_GetObjectItem(root, "model");
    cJSON *m = cJSON_CreateArray();
    static const char *pairs[][2] = {{"a", "b"}, {"ab", "c"}, {"b", "c"}, {"\xc4\xa0", "a"}, {"a", "a"}, {"aa", "aa"}};
    for (int i = 0; i < 6; i++) cJSON_AddItemToArray(m, cJSON_CreateStringArray(pairs[i], 2));
    cJSON_ReplaceItemInObject(model, "merges", m);
    /* Split on " " (Removed), then ByteLevel with a prefix space, no regex */
    cJSON *pt = cJSON_Parse("{\"type\": \"Sequence\", \"pretokenizers\": ["
                            "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"Removed\", \"invert\": false},"
                            "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": false}]}");
    cJSON_ReplaceItemInObject(root, "pre_tokenizer", pt);
    cJSON *pp = cJSON_Parse("{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}},"
                            "{\"Sequence\": {\"id\": \"A\"}}, {\"SpecialToken\": {\"id\": \"</s>\"}}],"
                            "\"special_tokens\": {\"<s>\": {\"ids\": [263]}, \"</s>\": {\"ids\": [264]}}}");
    cJSON_ReplaceItemInObject(root, "post_processor", pp);
    dyn_tokenizer *t = load_toy(root);
    /* "ab c" -> "ab", "c" -> " ab", " c"; " ab": a b (0) before Ġ a (3) */
    EXPECT(t, "ab c", 0, ' ', 256, ' ', 'c');
    EXPECT(t, "ab c", 1, 263, ' ', 256, ' ', 'c', 264);
    EXPECT(t, "a", 1, 263, 259, 264);
    dyn_tokenizer_specials sp = dyn_tokenizer_specials_of(t);
    assert_int_equal(sp.bos, 263);
    assert_int_equal(sp.eos, 264);
    dyn_tokenizer_free(t);
}

/* normalizer NFC (Qwen2): "e" + U+0301 becomes U+00E9 (bytes C3 A9) before
 * pre-tokenization; a Sequence holding only NFC is the same. */
static void test_nfc_normalizer(void **state)
{
    (void)state;
    cJSON *root = toy_json();
    cJSON_ReplaceItemInObject(root, "normalizer", cJSON_Parse("{\"type\": \"NFC\"}"));
    dyn_tokenizer *t = load_toy(root);
    EXPECT(t, "e\xcc\x81!", 0, 0xC3, 0xA9, '!');
    EXPECT(t, "ab", 0, 256);
    dyn_tokenizer_free(t);
    root = toy_json();
    cJSON_ReplaceItemInObject(root, "normalizer", cJSON_Parse("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]}"));
    t = load_toy(root);
    EXPECT(t, "\xe1\x84\x80\xe1\x85\xa1", 0, 0xEA, 0xB0, 0x80); /* Hangul L + V = U+AC00 */
    dyn_tokenizer_free(t);
}

static void test_specials_from_files(void **state)
{
    (void)state;
    write_text("tokenizer_config.json", "{\"eos_token\": {\"content\": \"<x>\"}, \"pad_token\": \"</s>\"}");
    write_text("config.json", "{\"eos_token_id\": [1, 2], \"bos_token_id\": 263, \"decoder_start_token_id\": 7}");
    dyn_tokenizer *t = load_toy(toy_json());
    dyn_tokenizer_specials sp = dyn_tokenizer_specials_of(t);
    assert_int_equal(sp.eos, 262);           /* tokenizer_config.json before config.json */
    assert_int_equal(sp.pad, 264);
    assert_int_equal(sp.bos, 263);           /* config.json */
    assert_int_equal(sp.decoder_start, 7);
    dyn_tokenizer_free(t);
    /* a folder: its tokenizer.json */
    dyn_error err;
    t = dyn_tokenizer_load(g_dir, &err);
    if (t == NULL) fail_msg("%s", err.msg);
    assert_int_equal(dyn_tokenizer_kind_of(t), DYN_TOKENIZER_BPE);
    dyn_tokenizer_free(t);
    /* bad special files: one line naming the file */
    write_text("tokenizer_config.json", "{\"eos_token\": \"<nope>\"}");
    assert_null(dyn_tokenizer_load(g_dir, &err));
    assert_non_null(strstr(err.msg, "tokenizer_config.json"));
    assert_non_null(strstr(err.msg, "<nope>"));
    remove_file("tokenizer_config.json");
    write_text("config.json", "{\"eos_token_id\": 265}");
    assert_null(dyn_tokenizer_load(g_dir, &err));
    assert_non_null(strstr(err.msg, "config.json"));
    assert_non_null(strstr(err.msg, "eos_token_id"));
    write_text("config.json", "{\"eos_token_id\": 2,");
    assert_null(dyn_tokenizer_load(g_dir, &err));
    assert_non_null(strstr(err.msg, "config.json"));
    remove_file("config.json");
}

/* ---- bad input ---------------------------------------------------------- */

static void test_bad_files(void **state)
{
    (void)state;
    dyn_error err;
    /* malformed JSON: line and column */
    write_text("tokenizer.json", "{\"model\": {\"type\": \"BPE\",\n \"vocab\": {\"a\": 0,, }}}");
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", g_dir);
    assert_null(dyn_tokenizer_load(path, &err));
    assert_int_equal(err.code, DYN_ERR_PARSE);
    assert_non_null(strstr(err.msg, "tokenizer.json: line 2"));
    assert_non_null(strstr(err.msg, "not valid JSON"));

    cJSON *r = toy_json();
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "model"), "type", cJSON_CreateString("WordPiece"));
    expect_load_error(r, DYN_ERR_INVALID_ARG, "model type \"WordPiece\" is not supported");
    r = toy_json();
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "model"), "type", cJSON_CreateString("Unigram"));
    expect_load_error(r, DYN_ERR_INVALID_ARG, "model type \"Unigram\" is not supported");
    r = toy_json();
    cJSON_ReplaceItemInObject(r, "normalizer", cJSON_Parse("{\"type\": \"NFKC\"}"));
    expect_load_error(r, DYN_ERR_INVALID_ARG, "normalizer \"NFKC\" is not supported");
    r = toy_json();
    cJSON_ReplaceItemInObject(r, "pre_tokenizer", cJSON_Parse("{\"type\": \"Metaspace\", \"replacement\": \"_\"}"));
    expect_load_error(r, DYN_ERR_INVALID_ARG, "pre_tokenizer \"Metaspace\" is not supported");
    r = toy_json();
    cJSON_ReplaceItemInObject(r, "pre_tokenizer", cJSON_CreateNull());
    expect_load_error(r, DYN_ERR_INVALID_ARG, "without a ByteLevel pre-tokenizer");
    r = toy_json();
    cJSON_AddBoolToObject(cJSON_GetObjectItem(r, "model"), "byte_fallback", 1);
    expect_load_error(r, DYN_ERR_INVALID_ARG, "byte_fallback");
    /* merges that are not valid */
    r = toy_json();
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "model"), "merges"), 2, cJSON_CreateNumber(7));
    expect_load_error(r, DYN_ERR_PARSE, "merges[2] is neither");
    r = toy_json();
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "model"), "merges"), 1, cJSON_CreateString("abc"));
    expect_load_error(r, DYN_ERR_PARSE, "merges[1] \"abc\" is not two tokens");
    r = toy_json();
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "model"), "merges"), 0, cJSON_CreateString("a zz"));
    expect_load_error(r, DYN_ERR_PARSE, "merges[0]: \"zz\" is not in the vocabulary");
    r = toy_json();
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "model"), "merges"), 0, cJSON_CreateString("c c"));
    expect_load_error(r, DYN_ERR_PARSE, "merges[0] \"c c\" makes a token that is not in the vocabulary");
    r = toy_json();
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "model"), "vocab"), "ab", cJSON_CreateNumber(1.5));
    expect_load_error(r, DYN_ERR_PARSE, "model.vocab[\"ab\"] is not a token id");
    r = toy_json();
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "model"), "vocab"), "ab", cJSON_CreateNumber(3));
    expect_load_error(r, DYN_ERR_PARSE, "gives id 3 to two tokens");
    r = toy_json();
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "model"), "vocab"), "x");
    expect_load_error(r, DYN_ERR_INVALID_ARG, "no token for byte 0x78");
    r = toy_json();
    cJSON_ReplaceItemInObject(r, "pre_tokenizer", cJSON_Parse("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
                                                              "\"behavior\": \"Isolated\"}"));
    expect_load_error(r, DYN_ERR_PARSE, "pre-tokenizer regex");
    /* a folder whose tokenizer.json is unsupported and that has no model */
    r = toy_json();
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(r, "model"), "type", cJSON_CreateString("WordLevel"));
    write_json("tokenizer.json", r);
    assert_null(dyn_tokenizer_load(g_dir, &err));
    assert_non_null(strstr(err.msg, "WordLevel"));
    remove_file("tokenizer.json");
    assert_null(dyn_tokenizer_load(g_dir, &err));
    assert_non_null(strstr(err.msg, "no tokenizer.json, tokenizer.model or spiece.model"));
    assert_null(dyn_tokenizer_load("/nonexistent/tok.json", &err));
    assert_int_equal(err.code, DYN_ERR_IO);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/dyn_test_tokenizer.%d", (int)getpid());
    return mkdir(g_dir, 0700);
}

static int teardown(void **state)
{
    (void)state;
    static const char *names[] = {"tokenizer.json", "tokenizer_config.json", "config.json"};
    for (int i = 0; i < 3; i++) remove_file(names[i]);
    return rmdir(g_dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_merge_order),
        cmocka_unit_test(test_array_merges_and_steps),
        cmocka_unit_test(test_nfc_normalizer),
        cmocka_unit_test(test_specials_from_files),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
