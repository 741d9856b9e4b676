/* test_data_codec.c — a record's token sequence (dyn_codec, include/dynapipe/
 * corpus.h) and a JSONL corpus read through a tokenizer, on a toy byte-level
 * BPE tokenizer.json written here (ids 0..255 the bytes, 256 "ab", 257 the
 * special "</s>", EOS by tokenizer_config.json), so every expected id is
 * worked out by hand: the input side as the tokenizer encodes it, EOS after
 * the target, EOS once after decoder-only text, the template split at
 * {target}, the prompt equal to a pair's input side, the special ids, the
 * Megatron files written by the converter in the dtype Megatron would pick
 * and read back, the byte vocabulary with a template; and bad input: a
 * tokenizer path that does not exist, a malformed tokenizer.json, a
 * tokenizer larger than the model's vocabulary, chat-style records, bad
 * templates — each one line naming the file; `dynapipe data show/stats
 * --tokenizer` decoding and counting with it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dynapipe/corpus.h" /* defines: dyn_corpus_*, dyn_codec_* */

static char g_dir[] = "/tmp/dyn_test_codec_XXXXXX";
static char g_tok[300]; /* the toy tokenizer.json */

static const char *path_of(const char *name)
{
    static char buf[4][300];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static const char *write_text(const char *name, const char *text)
{
    const char *p = path_of(name);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    assert_true(fputs(text, fp) >= 0);
    assert_int_equal(fclose(fp), 0);
    return p;
}

/* UTF-8 of GPT-2's byte-to-unicode character for byte b. */
static void byte_char(int b, char out[4])
{
    int n = 0, cp = 0;
    for (int x = 0; x <= b; x++) {
        int printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        cp = printable ? x : 256 + n++;
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

static int setup(void **state)
{
    (void)state;
    if (mkdtemp(g_dir) == NULL) return -1;
    FILE *fp = fopen(path_of("tokenizer.json"), "w");
    if (fp == NULL) return -1;
    fputs("{\"model\":{\"type\":\"BPE\",\"vocab\":{", fp);
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        fprintf(fp, "%s\"%s%s\":%d", b ? "," : "", (c[0] == '"' || c[0] == '\\') ? "\\" : "", c, b);
    }
    fputs(",\"ab\":256},\"merges\":[\"a b\"]},"
          "\"added_tokens\":[{\"id\":257,\"content\":\"</s>\",\"special\":true}],"
          "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
          "\"post_processor\":null}",
          fp);
    if (fclose(fp) != 0) return -1;
    write_text("tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
    snprintf(g_tok, sizeof g_tok, "%s", path_of("tokenizer.json"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static dyn_corpus_options tok_opts(const char *tmpl)
{
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.max_seqlen = 4096;
    o.vocab = 0; /* the tokenizer's */
    o.tokenizer = g_tok;
    o.template_str = tmpl;
    return o;
}

static void expect_ids(const int32_t *got, int32_t n, const int32_t *want, int32_t m)
{
    assert_int_equal(n, m);
    assert_memory_equal(got, want, (size_t)m * sizeof *want);
}

static void test_pairs_and_text(void **state)
{
    (void)state;
    const char *p = write_text("pairs.jsonl", "{\"input\":\"abc\",\"target\":\"xab\"}\n"
                                              "{\"input\":\"a\",\"target\":\"b\"}\n");
    dyn_corpus_options o = tok_opts(NULL);
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(p, &o, &err);
    assert_non_null(c);
    dyn_corpus_specials sp = dyn_corpus_specials_of(c);
    assert_int_equal(sp.vocab, 258);
    assert_int_equal(sp.eos, 257);
    assert_int_equal(sp.bos, -1);
    assert_int_equal(sp.pad, 257); /* no pad: eos */
    assert_int_equal(sp.decoder_start, 257);
    assert_int_equal(sp.sep, -1);
    dyn_corpus_sample s;
    assert_int_equal(dyn_corpus_read(c, 0, &s, &err), DYN_OK);
    expect_ids(s.input, s.input_len, (int32_t[]){256, 'c'}, 2);
    expect_ids(s.target, s.target_len, (int32_t[]){'x', 256, 257}, 3);
    assert_int_equal(dyn_corpus_read(c, 1, &s, &err), DYN_OK);
    expect_ids(s.input, s.input_len, (int32_t[]){'a'}, 1);
    expect_ids(s.target, s.target_len, (int32_t[]){'b', 257}, 2);
    /* the lengths planning sees are those of the tokens */
    dyn_dataset ds;
    assert_int_equal(dyn_corpus_lengths(c, &ds, &err), DYN_OK);
    assert_int_equal(ds.samples[0].input_len, 2);
    assert_int_equal(ds.samples[0].target_len, 3);
    dyn_dataset_free(&ds);
    /* decoding gives the text back, the EOS by its name */
    const char *text;
    size_t len;
    assert_int_equal(dyn_codec_decode(dyn_corpus_codec(c), (int32_t[]){'x', 256, 257}, 3, 0, &text, &len, &err),
                     DYN_OK);
    assert_string_equal(text, "xab</s>");
    dyn_corpus_free(c);

    /* decoder-only text: EOS once at the end */
    p = write_text("text.jsonl", "{\"text\":\"abab\"}\n{\"text\":\"xab</s>\"}\n");
    c = dyn_corpus_open(p, &o, &err);
    assert_non_null(c);
    assert_int_equal(dyn_corpus_read(c, 0, &s, &err), DYN_OK);
    expect_ids(s.input, s.input_len, (int32_t[]){256}, 1);
    expect_ids(s.target, s.target_len, (int32_t[]){256, 257}, 2);
    assert_int_equal(dyn_corpus_read(c, 1, &s, &err), DYN_OK);
    expect_ids(s.input, s.input_len, (int32_t[]){'x'}, 1);
    expect_ids(s.target, s.target_len, (int32_t[]){256, 257}, 2);
    dyn_corpus_free(c);
}

static void test_template_and_prompt(void **state)
{
    (void)state;
    const char *p = write_text("t.jsonl", "{\"input\":\"abc\",\"target\":\"xab\"}\n");
    dyn_corpus_options o = tok_opts("Q:{input}|{target}.");
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(p, &o, &err);
    assert_non_null(c);
    dyn_corpus_sample s;
    assert_int_equal(dyn_corpus_read(c, 0, &s, &err), DYN_OK);
    expect_ids(s.input, s.input_len, (int32_t[]){'Q', ':', 256, 'c', '|'}, 5);
    expect_ids(s.target, s.target_len, (int32_t[]){'x', 256, '.', 257}, 4);
    /* the prompt of generation is the input side */
    dyn_codec_tokens t;
    assert_int_equal(dyn_codec_encode_pair(dyn_corpus_codec(c), "abc", 3, NULL, 0, &t, &err), DYN_OK);
    assert_null(t.target);
    expect_ids(t.input, (int32_t)t.input_len, (int32_t[]){'Q', ':', 256, 'c', '|'}, 5);
    dyn_corpus_free(c);

    /* bytes with a template: bytes, then EOS 258 after the target */
    dyn_corpus_options_default(&o);
    o.max_seqlen = 4096;
    o.template_str = "<{input}>{target}";
    c = dyn_corpus_open(p, &o, &err);
    assert_non_null(c);
    assert_int_equal(dyn_corpus_read(c, 0, &s, &err), DYN_OK);
    expect_ids(s.input, s.input_len, (int32_t[]){'<', 'a', 'b', 'c', '>'}, 5);
    expect_ids(s.target, s.target_len, (int32_t[]){'x', 'a', 'b', DYN_CORPUS_TOK_EOS}, 4);
    dyn_corpus_free(c);
    /* bytes without: the built-in tasks' format, sep after the input and
     * eos after the target (so a model learns to stop) */
    o.template_str = NULL;
    c = dyn_corpus_open(p, &o, &err);
    assert_non_null(c);
    assert_int_equal(dyn_corpus_read(c, 0, &s, &err), DYN_OK);
    expect_ids(s.input, s.input_len, (int32_t[]){'a', 'b', 'c', DYN_CORPUS_TOK_SEP}, 4);
    expect_ids(s.target, s.target_len, (int32_t[]){'x', 'a', 'b', DYN_CORPUS_TOK_EOS}, 4);
    /* and the prompt of generation is the input side, sep included */
    assert_int_equal(dyn_codec_encode_pair(dyn_corpus_codec(c), "abc", 3, NULL, 0, &t, &err), DYN_OK);
    expect_ids(t.input, (int32_t)t.input_len, (int32_t[]){'a', 'b', 'c', DYN_CORPUS_TOK_SEP}, 4);
    assert_int_equal(dyn_corpus_specials_of(c).eos, DYN_CORPUS_TOK_EOS);
    assert_int_equal(dyn_corpus_specials_of(c).pad, DYN_CORPUS_TOK_PAD);
    assert_int_equal(dyn_corpus_specials_of(c).decoder_start, DYN_CORPUS_TOK_BOS);
    dyn_corpus_free(c);
}

/* The idx header's dtype code (byte 17 of PREFIX.idx). */
static int idx_dtype(const char *idx)
{
    FILE *fp = fopen(idx, "rb");
    assert_non_null(fp);
    unsigned char h[18];
    assert_int_equal(fread(h, 1, 18, fp), 18);
    fclose(fp);
    return h[17];
}

static void test_convert_round_trip(void **state)
{
    (void)state;
    assert_int_equal(dyn_indexed_dtype_for_vocab(65499), 8);
    assert_int_equal(dyn_indexed_dtype_for_vocab(65500), 4);
    const char *p = write_text("conv.jsonl", "{\"text\":\"hello abab\"}\n{\"text\":\"ab\"}\n");
    dyn_corpus_options o = tok_opts(NULL);
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(p, &o, &err);
    assert_non_null(c);
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s", path_of("conv"));
    assert_int_equal(dyn_corpus_write_indexed(c, prefix, &err), DYN_OK);
    dyn_corpus_free(c);
    char idx[320];
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    assert_int_equal(idx_dtype(idx), 8); /* 258 ids: uint16 */
    dyn_corpus_options_default(&o);
    o.vocab = 258;
    c = dyn_corpus_open(prefix, &o, &err);
    assert_non_null(c);
    assert_int_equal(dyn_corpus_count(c), 2);
    dyn_corpus_sample s;
    assert_int_equal(dyn_corpus_read(c, 0, &s, &err), DYN_OK);
    int32_t want[] = {'h', 'e', 'l', 'l', 'o', ' ', 256, 256, 257};
    assert_int_equal(s.input_len + s.target_len, 9);
    assert_int_equal(s.input[0], want[0]);
    assert_memory_equal(s.target, want + 1, 8 * sizeof(int32_t));
    assert_int_equal(dyn_corpus_read(c, 1, &s, &err), DYN_OK);
    assert_int_equal(s.input[0], 256);
    assert_int_equal(s.target_len, 1);
    assert_int_equal(s.target[0], 257);
    dyn_corpus_free(c);
    /* the same ids against a smaller model vocabulary: the id is named */
    o.vocab = 257;
    c = dyn_corpus_open(prefix, &o, &err);
    dyn_status st = c == NULL ? err.code : dyn_corpus_read(c, 0, &s, &err);
    assert_int_equal(st, DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "257"));
    assert_non_null(strstr(err.msg, "conv"));
    dyn_corpus_free(c);
}

/* open(spec, o) fails with one line holding each fragment. */
static void expect_open_error(const char *spec, const dyn_corpus_options *o, const char *frag1, const char *frag2)
{
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(spec, o, &err);
    if (c != NULL) fail_msg("%s opened", spec);
    if (strstr(err.msg, frag1) == NULL || (frag2 && strstr(err.msg, frag2) == NULL) || strchr(err.msg, '\n'))
        fail_msg("error '%s' lacks '%s' / '%s'", err.msg, frag1, frag2 ? frag2 : "");
}

static void test_bad_input(void **state)
{
    (void)state;
    const char *pairs = write_text("bad_pairs.jsonl", "{\"input\":\"abc\",\"target\":\"xab\"}\n");
    dyn_corpus_options o = tok_opts(NULL);
    /* a tokenizer that is not there, or is malformed */
    o.tokenizer = path_of("missing/tokenizer.json");
    expect_open_error(pairs, &o, "missing/tokenizer.json", NULL);
    o.tokenizer = write_text("broken.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,");
    expect_open_error(pairs, &o, "broken.json", NULL);
    /* a tokenizer with more ids than the model's vocabulary */
    o = tok_opts(NULL);
    o.vocab = 200;
    expect_open_error(pairs, &o, "tokenizer.json", "258 ids");
    /* chat records */
    o = tok_opts(NULL);
    const char *chat = write_text("chat.jsonl", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n");
    expect_open_error(chat, &o, "chat.jsonl:1", "messages");
    /* templates */
    o = tok_opts("{input} only");
    expect_open_error(pairs, &o, "template", "{target}");
    o = tok_opts("{target} before {input}");
    expect_open_error(pairs, &o, "template", NULL);
    o = tok_opts("{input}{target}{target}");
    expect_open_error(pairs, &o, "template", NULL);
    o = tok_opts("{input}: {target}");
    const char *text = write_text("bad_text.jsonl", "{\"text\":\"abab\"}\n");
    expect_open_error(text, &o, "bad_text.jsonl:1", "template");
    expect_open_error(path_of("conv"), &o, "template", "Megatron");
    /* the built-in dataset is bytes */
    o = tok_opts(NULL);
    expect_open_error("builtin", &o, "built-in", NULL);
}

/* Run `dynapipe ARGS`, stdout and stderr to files; the exit status. */
static int cli(const char *args)
{
    const char *exe = getenv("DYN_CLI");
    if (exe == NULL) fail_msg("DYN_CLI is not set (run through ctest)");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s/out.txt' 2>'%s/err.txt'", exe, args, g_dir, g_dir);
    int rc = system(cmd);
    return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

static char *slurp(const char *name)
{
    FILE *fp = fopen(path_of(name), "r");
    assert_non_null(fp);
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

/* data show decodes with the tokenizer; a bad tokenizer path is one line. */
static void test_cli_show(void **state)
{
    (void)state;
    const char *p = write_text("show.jsonl", "{\"input\":\"abc\",\"target\":\"x\\nab\"}\n");
    char args[2048];
    snprintf(args, sizeof args, "data show '%s' --tokenizer '%s'", p, g_tok);
    assert_int_equal(cli(args), 0);
    const char *out = slurp("out.txt");
    if (strstr(out, "input:  abc  [2 tokens]") == NULL || strstr(out, "target: x\\nab</s>  [4 tokens]") == NULL)
        fail_msg("data show printed:\n%s", out);
    snprintf(args, sizeof args, "data stats '%s' --tokenizer '%s'", p, g_tok);
    assert_int_equal(cli(args), 0);
    assert_non_null(strstr(slurp("out.txt"), "1 samples, 2 input + 4 target tokens"));
    snprintf(args, sizeof args, "data convert '%s' --tokenizer '%s/none/tokenizer.json' --out '%s/x'", p, g_dir, g_dir);
    assert_int_not_equal(cli(args), 0);
    const char *e = slurp("err.txt");
    assert_non_null(strstr(e, "none/tokenizer.json"));
    assert_ptr_equal(strchr(e, '\n'), e + strlen(e) - 1); /* one line */
    assert_int_equal(access(path_of("x_input.idx"), F_OK), -1); /* nothing written */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_show),
        cmocka_unit_test(test_pairs_and_text),
        cmocka_unit_test(test_template_and_prompt),
        cmocka_unit_test(test_convert_round_trip),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
