/* test_corpus_files.c — the user's data behind dyn_corpus: JSONL in its four
 * formats (tokens, lengths, the decoder-only mapping, truncation, random
 * access) and every malformed-record error with its file:line; Megatron
 * indexed datasets built byte by byte here (pair and decoder-only, several
 * dtypes) and written by the converter (compared byte for byte with the
 * hand-built encoding, then read back), and every corrupt-file error:
 * truncated .bin/.idx, wrong magic, version, dtype, a pointer past the end,
 * mismatched input/target counts, bad document indices, ids out of range;
 * strict JSONL strings (UTF-8, no key twice, no \u0000) and sources that
 * are not regular files (a FIFO must not block the open). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dynapipe/corpus.h" /* defines: dyn_corpus_* */
#include "util/util.h"       /* defines: dyn_file_read_all, dyn_file_write_atomic */

static char g_dir[] = "/tmp/dyn_test_corpus_XXXXXX";

static int setup_dir(void **state)
{
    (void)state;
    return mkdtemp(g_dir) == NULL ? -1 : 0;
}

static int teardown_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* <dir>/<name> into a static buffer (one of four, so a few can be live). */
static const char *path_of(const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_dir, name);
    return buf[k];
}

static const char *write_bytes(const char *name, const void *data, size_t len)
{
    const char *p = path_of(name);
    assert_int_equal(dyn_file_write_atomic(p, data, len, NULL), DYN_OK);
    return p;
}

static const char *write_text(const char *name, const char *text) { return write_bytes(name, text, strlen(text)); }

static dyn_corpus_options opts(int32_t L, dyn_model_kind kind, int truncate, int32_t vocab)
{
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.max_seqlen = L;
    o.kind = kind;
    o.truncate = truncate;
    o.vocab = vocab;
    return o;
}

static dyn_corpus *open_ok(const char *spec, const dyn_corpus_options *o)
{
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(spec, o, &err);
    if (c == NULL) fprintf(stderr, "%s: %s\n", spec, err.msg);
    assert_non_null(c);
    return c;
}

/* Opening fails with code and a message containing both needles. */
static void open_fails(const char *spec, const dyn_corpus_options *o, dyn_status code, const char *n1,
                       const char *n2)
{
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(spec, o, &err);
    if (c != NULL || err.code != code || strstr(err.msg, n1) == NULL || (n2 && strstr(err.msg, n2) == NULL))
        fprintf(stderr, "spec %s: got code %d '%s', want %d with '%s' '%s'\n", spec, c ? 0 : err.code,
                c ? "(opened)" : err.msg, code, n1, n2 ? n2 : "");
    assert_null(c);
    assert_int_equal(err.code, code);
    assert_non_null(strstr(err.msg, n1));
    if (n2) assert_non_null(strstr(err.msg, n2));
    assert_null(strchr(err.msg, '\n'));
}

/* dyn_corpus_lengths agrees with the lengths of every read. */
static void expect_lengths_match_reads(dyn_corpus *c)
{
    dyn_dataset ds = {0};
    dyn_error err;
    assert_int_equal(dyn_corpus_lengths(c, &ds, &err), DYN_OK);
    assert_int_equal(ds.n, dyn_corpus_count(c));
    for (int32_t i = 0; i < ds.n; i++) {
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
        assert_int_equal(ds.samples[i].input_len, s.input_len);
        assert_int_equal(ds.samples[i].target_len, s.target_len);
    }
    dyn_dataset_free(&ds);
}

/* Sample i has exactly these tokens. */
static void expect_sample(dyn_corpus *c, int64_t i, const int32_t *in, int32_t n_in, const int32_t *tgt,
                          int32_t n_tgt)
{
    dyn_corpus_sample s;
    dyn_error err;
    assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
    assert_int_equal(s.index, i);
    assert_int_equal(s.input_len, n_in);
    assert_int_equal(s.target_len, n_tgt);
    assert_memory_equal(s.input, in, sizeof(int32_t) * (size_t)n_in);
    assert_memory_equal(s.target, tgt, sizeof(int32_t) * (size_t)n_tgt);
}

/* Bytes of a string as tokens. */
static int32_t bytes_of(const char *s, int32_t *out)
{
    int32_t n = 0;
    for (; *s; s++) out[n++] = (unsigned char)*s;
    return n;
}

/* A JSONL input string as the byte rule reads it: its bytes, then sep. */
static int32_t in_of(const char *s, int32_t *out)
{
    int32_t n = bytes_of(s, out);
    out[n] = DYN_CORPUS_TOK_SEP;
    return n + 1;
}

/* A target string (or decoder-only text): its bytes, then eos. */
static int32_t tgt_of(const char *s, int32_t *out)
{
    int32_t n = bytes_of(s, out);
    out[n] = DYN_CORPUS_TOK_EOS;
    return n + 1;
}

/* ---- JSONL -------------------------------------------------------------------- */

static const char PAIR_JSONL[] =
    "{\"input\": \"caf\\u00e9 ok\", \"target\": \"yes\", \"note\": 1}\n"
    "\n"
    "   \n"
    "{\"target\": \"b\", \"input\": \"a\\tz\"}\r\n"
    "{\"input\": \"long input here\", \"target\": \"t2\"}";

static void test_jsonl_text_pairs(void **state)
{
    (void)state;
    const char *p = write_text("pairs.jsonl", PAIR_JSONL);
    dyn_corpus_options o = opts(2048, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    dyn_corpus *c = open_ok(p, &o);
    assert_int_equal(dyn_corpus_count(c), 3);
    assert_false(dyn_corpus_decoder_only(c));
    assert_int_equal(dyn_corpus_num_tasks(c), 0);
    int32_t in[64], tgt[64];
    /* "é" is the two UTF-8 bytes 0xC3 0xA9; inputs end with sep, targets with eos */
    const int32_t cafe[] = {'c', 'a', 'f', 0xC3, 0xA9, ' ', 'o', 'k', DYN_CORPUS_TOK_SEP};
    expect_sample(c, 0, cafe, 9, tgt, tgt_of("yes", tgt));
    int32_t n = in_of("a\tz", in);
    expect_sample(c, 1, in, n, tgt, tgt_of("b", tgt));
    /* random access: the last, then the first again */
    n = in_of("long input here", in);
    expect_sample(c, 2, in, n, tgt, tgt_of("t2", tgt));
    expect_sample(c, 0, cafe, 9, tgt, tgt_of("yes", tgt));
    dyn_dataset ds = {0};
    dyn_error err;
    assert_int_equal(dyn_corpus_lengths(c, &ds, &err), DYN_OK);
    assert_int_equal(ds.n, 3);
    assert_int_equal(ds.samples[2].id, 2);
    assert_int_equal(ds.samples[2].task, -1);
    assert_int_equal(ds.samples[2].input_len, 16);
    assert_int_equal(ds.samples[2].target_len, 3);
    dyn_dataset_free(&ds);
    dyn_corpus_free(c);
}

static void test_jsonl_ids_and_decoder_only(void **state)
{
    (void)state;
    const char *p = write_text("ids.jsonl", "{\"input_ids\": [5, 999, 0], \"target_ids\": [7]}\n"
                                            "{\"input_ids\": [1], \"target_ids\": [2, 3, 4]}\n");
    dyn_corpus_options o = opts(2048, DYN_MODEL_T5, 0, 1000);
    dyn_corpus *c = open_ok(p, &o);
    expect_sample(c, 0, (const int32_t[]){5, 999, 0}, 3, (const int32_t[]){7}, 1);
    expect_sample(c, 1, (const int32_t[]){1}, 1, (const int32_t[]){2, 3, 4}, 3);
    dyn_corpus_free(c);
    o.vocab = 999; /* 999 is now out of range */
    open_fails(p, &o, DYN_ERR_INVALID_ARG, "ids.jsonl:1: record 0: input_ids[1] = 999", "[0, 999)");

    /* decoder-only: input = first token, target = the rest */
    p = write_text("text.jsonl", "{\"text\": \"hello\"}\n{\"text\": \"ab\"}\n");
    o = opts(2048, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    c = open_ok(p, &o);
    assert_true(dyn_corpus_decoder_only(c));
    int32_t t[8];
    expect_sample(c, 0, (const int32_t[]){'h'}, 1, t, tgt_of("ello", t)); /* the text, then eos */
    expect_sample(c, 1, (const int32_t[]){'a'}, 1, (const int32_t[]){'b', DYN_CORPUS_TOK_EOS}, 2);
    dyn_corpus_free(c);
    p = write_text("lm.jsonl", "{\"input_ids\": [9, 8, 7, 6]}\n");
    c = open_ok(p, &o);
    assert_true(dyn_corpus_decoder_only(c));
    expect_sample(c, 0, (const int32_t[]){9}, 1, (const int32_t[]){8, 7, 6}, 3);
    dyn_corpus_free(c);
    p = write_text("short.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"\"}\n"); /* eos alone */
    open_fails(p, &o, DYN_ERR_INVALID_ARG, "short.jsonl:2: record 1", "at least 2 tokens, got 1");
}

/* Over max_seqlen: an error naming file:line and record, or truncation to
 * prefixes by the clipping rule. */
static void test_jsonl_limit_and_truncation(void **state)
{
    (void)state;
    const char *p = write_text("long.jsonl", "{\"input\": \"abc\", \"target\": \"de\"}\n"
                                             "{\"input\": \"0123456789\", \"target\": \"wxyz\"}\n");
    dyn_corpus_options o = opts(8, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    open_fails(p, &o, DYN_ERR_INVALID_ARG, "long.jsonl:2: record 1: input + target = 16 tokens", "max_seqlen 8");
    o.truncate = 1; /* GPT: target kept (wxyz eos: 5), input cut to 8 - 5 */
    dyn_corpus *c = open_ok(p, &o);
    int32_t a[16], b[16];
    expect_sample(c, 0, a, in_of("abc", a), b, tgt_of("de", b));
    expect_sample(c, 1, a, bytes_of("012", a), b, tgt_of("wxyz", b));
    expect_lengths_match_reads(c);
    dyn_corpus_sample s;
    assert_int_equal(dyn_corpus_read(c, 1, &s, NULL), DYN_OK);
    assert_true(s.truncated);
    assert_int_equal(dyn_corpus_read(c, 0, &s, NULL), DYN_OK);
    assert_false(s.truncated);
    dyn_corpus_free(c);
    o = opts(4, DYN_MODEL_T5, 0, DYN_CORPUS_VOCAB_BYTES);
    open_fails(p, &o, DYN_ERR_INVALID_ARG, "long.jsonl:2: record 1: input = 11 tokens", "T5");
    o.truncate = 1; /* T5: each side to 4 */
    c = open_ok(p, &o);
    expect_sample(c, 1, a, bytes_of("0123", a), b, bytes_of("wxyz", b));
    expect_lengths_match_reads(c);
    dyn_corpus_free(c);
    /* decoder-only, GPT truncation keeps the first L tokens of the sequence */
    p = write_text("lmlong.jsonl", "{\"text\": \"abcdefghij\"}\n");
    o = opts(4, DYN_MODEL_GPT, 1, DYN_CORPUS_VOCAB_BYTES);
    c = open_ok(p, &o);
    expect_sample(c, 0, (const int32_t[]){'a'}, 1, b, bytes_of("bcd", b));
    dyn_corpus_free(c);
}

static void test_jsonl_malformed(void **state)
{
    (void)state;
    dyn_corpus_options o = opts(2048, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    const char *good = "{\"input\": \"a\", \"target\": \"b\"}\n";
    char text[512];
    struct {
        const char *line3;
        dyn_status code;
        const char *needle;
    } cases[] = {
        {"{\"input\": \"a\", \"target\": }", DYN_ERR_PARSE, "malformed JSON"},
        {"[1, 2]", DYN_ERR_PARSE, "expected a JSON object"},
        {"{\"input\": \"a\"} x", DYN_ERR_PARSE, "text after the JSON object"},
        {"{\"prompt\": \"a\"}", DYN_ERR_PARSE, "none of input/target"},
        {"{\"input\": \"a\", \"target\": 3}", DYN_ERR_PARSE, "must both be strings"},
        {"{\"input\": \"a\", \"text\": \"b\"}", DYN_ERR_PARSE, "mixes"},
        {"{\"text\": \"abc\"}", DYN_ERR_PARSE, "but the first record has input/target strings"},
        /* (an empty input or target string is a sep or an eos token alone) */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(text, sizeof text, "%s%s%s\n%s", good, good, cases[k].line3, good);
        const char *p = write_text("bad.jsonl", text);
        open_fails(p, &o, cases[k].code, "bad.jsonl:3: ", cases[k].needle);
    }
    const char *p = write_text("ids_bad.jsonl", "{\"input_ids\": [1, 2.5], \"target_ids\": [1]}\n");
    open_fails(p, &o, DYN_ERR_INVALID_ARG, "ids_bad.jsonl:1: record 0: input_ids[1] is not an integer", NULL);
    p = write_text("ids_neg.jsonl", "{\"input_ids\": [1], \"target_ids\": [-3]}\n");
    open_fails(p, &o, DYN_ERR_INVALID_ARG, "ids_neg.jsonl:1: record 0: target_ids[0] = -3 is outside", NULL);
    p = write_text("ids_str.jsonl", "{\"input_ids\": [1], \"target_ids\": \"x\"}\n");
    open_fails(p, &o, DYN_ERR_PARSE, "ids_str.jsonl:1: target_ids must be an array", NULL);
    p = write_text("empty.jsonl", "\n\n");
    open_fails(p, &o, DYN_ERR_PARSE, "empty.jsonl: no records", NULL);
    open_fails(path_of("missing.jsonl"), &o, DYN_ERR_IO, "missing.jsonl: cannot open", NULL);
}

/* ---- Megatron: hand-built files -------------------------------------------------- */

/* A growing byte buffer with little-endian writers (the test's own
 * encoding of the format, independent of src/data/indexed.c). */
typedef struct bytes {
    unsigned char b[1 << 16];
    size_t n;
} bytes;

static void put(bytes *x, uint64_t v, int width)
{
    for (int k = 0; k < width; k++) x->b[x->n++] = (unsigned char)(v >> (8 * k));
}

/* .idx for sequences of the given lengths, stored back to back with elem
 * bytes per token; docs = 0..n (each sequence a document). */
static void make_idx(bytes *x, uint64_t version, int dtype, int elem, int n, const int32_t *len)
{
    x->n = 0;
    memcpy(x->b, "MMIDIDX\0\0", 9);
    x->n = 9;
    put(x, version, 8);
    put(x, (uint64_t)dtype, 1);
    put(x, (uint64_t)n, 8);
    put(x, (uint64_t)n + 1, 8);
    for (int i = 0; i < n; i++) put(x, (uint64_t)(uint32_t)len[i], 4);
    uint64_t ptr = 0;
    for (int i = 0; i < n; i++) {
        put(x, ptr, 8);
        ptr += (uint64_t)len[i] * (uint64_t)elem;
    }
    for (int i = 0; i <= n; i++) put(x, (uint64_t)i, 8);
}

static void make_bin(bytes *x, int elem, const int32_t *tok, int n)
{
    x->n = 0;
    for (int i = 0; i < n; i++) put(x, (uint64_t)(uint32_t)tok[i], elem);
}

static void write_dataset(const char *prefix, const bytes *idx, const bytes *bin)
{
    char name[128];
    snprintf(name, sizeof name, "%s.idx", prefix);
    write_bytes(name, idx->b, idx->n);
    snprintf(name, sizeof name, "%s.bin", prefix);
    write_bytes(name, bin->b, bin->n);
}

static bytes g_idx, g_bin;

/* The pair the tests use: inputs {10 11 12} {13}, targets {20} {21 22}. */
static void write_pair(const char *in_prefix, const char *tgt_prefix, int dtype, int elem)
{
    make_idx(&g_idx, 1, dtype, elem, 2, (const int32_t[]){3, 1});
    make_bin(&g_bin, elem, (const int32_t[]){10, 11, 12, 13}, 4);
    write_dataset(in_prefix, &g_idx, &g_bin);
    make_idx(&g_idx, 1, dtype, elem, 2, (const int32_t[]){1, 2});
    make_bin(&g_bin, elem, (const int32_t[]){20, 21, 22}, 3);
    write_dataset(tgt_prefix, &g_idx, &g_bin);
}

/* JSONL strings are held to the configuration reader's rules: bytes that are
 * not UTF-8, a key given twice and \u0000 in a string are refused with
 * path:line (cJSON would make tokens of the bytes, keep the first value and
 * cut the string); what is valid next to them still reads. */
static void test_jsonl_strict_strings(void **state)
{
    (void)state;
    dyn_corpus_options o = opts(2048, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    const char *good = "{\"input\": \"a\", \"target\": \"b\"}\n";
    char text[512];
    struct {
        const char *line2;
        const char *needle;
    } cases[] = {
        {"{\"input\": \"a\xff\", \"target\": \"b\"}", "byte 13 of the line: not valid UTF-8"},
        {"{\"input\": \"a\xc0\xaf\", \"target\": \"b\"}", "not valid UTF-8"},     /* overlong '/' */
        {"{\"input\": \"a\xed\xa0\x80\", \"target\": \"b\"}", "not valid UTF-8"}, /* a surrogate */
        {"{\"input\": \"a\xf4\x90\x80\x80\", \"target\": \"b\"}", "not valid UTF-8"}, /* > U+10FFFF */
        {"{\"input\": \"a\xc3\", \"target\": \"b\"}", "not valid UTF-8"},         /* cut short */
        {"{\"input\": \"a\", \"target\": \"b\", \"input\": \"c\"}", "key \"input\" appears twice"},
        {"{\"input\": \"a\", \"target\": \"b\", \"meta\": {\"k\": 1, \"k\": 2}}", "key \"k\" appears twice"},
        {"{\"input\": \"a\\u0000b\", \"target\": \"b\"}", "\\u0000"},
        {"{\"input\": \"a\", \"target\": \"\\u0000\"}", "\\u0000"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(text, sizeof text, "%s%s\n%s", good, cases[k].line2, good);
        const char *p = write_text("strict.jsonl", text);
        open_fails(p, &o, DYN_ERR_PARSE, "strict.jsonl:2: ", cases[k].needle);
    }
    /* Valid: a two-byte character (two byte tokens), an escaped backslash
     * followed by the letters u0000 (not a NUL), and \u00e9 (decoded to UTF-8). */
    const char *p = write_text("fine.jsonl", "{\"input\": \"\xc3\xa9\", \"target\": \"\\\\u0000\"}\n"
                                             "{\"input\": \"\\u00e9\\\"\", \"target\": \"b\"}\n");
    dyn_corpus *c = open_ok(p, &o);
    const int32_t S = DYN_CORPUS_TOK_SEP, E = DYN_CORPUS_TOK_EOS;
    expect_sample(c, 0, (const int32_t[]){0xc3, 0xa9, S}, 3, (const int32_t[]){'\\', 'u', '0', '0', '0', '0', E}, 7);
    expect_sample(c, 1, (const int32_t[]){0xc3, 0xa9, '"', S}, 4, (const int32_t[]){'b', E}, 2);
    dyn_corpus_free(c);
}

/* Sources are seeked (JSONL) or memory-mapped (Megatron): a FIFO, which
 * would block the open until a writer comes, a folder or a device is
 * refused at once, naming the path. The alarm turns a hang into a failure. */
static void test_not_regular_files(void **state)
{
    (void)state;
    dyn_corpus_options o = opts(2048, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    alarm(20);
    assert_int_equal(mkfifo(path_of("pipe.jsonl"), 0600), 0);
    open_fails(path_of("pipe.jsonl"), &o, DYN_ERR_IO, "pipe.jsonl: not a regular file (a FIFO)", NULL);
    assert_int_equal(mkdir(path_of("folder.jsonl"), 0700), 0);
    open_fails(path_of("folder.jsonl"), &o, DYN_ERR_IO, "folder.jsonl: not a regular file (a folder)", NULL);
    assert_int_equal(symlink("/dev/null", path_of("dev.jsonl")), 0);
    open_fails(path_of("dev.jsonl"), &o, DYN_ERR_IO, "dev.jsonl: not a regular file (a device)", NULL);
    /* Megatron: the .idx a FIFO, then the .bin */
    make_idx(&g_idx, 1, 8, 2, 1, (const int32_t[]){2});
    make_bin(&g_bin, 2, (const int32_t[]){1, 2}, 2);
    write_bytes("fifo_idx.bin", g_bin.b, g_bin.n);
    assert_int_equal(mkfifo(path_of("fifo_idx.idx"), 0600), 0);
    open_fails(path_of("fifo_idx"), &o, DYN_ERR_IO, "fifo_idx.idx: not a regular file (a FIFO)", NULL);
    write_bytes("fifo_bin.idx", g_idx.b, g_idx.n);
    assert_int_equal(mkfifo(path_of("fifo_bin.bin"), 0600), 0);
    open_fails(path_of("fifo_bin"), &o, DYN_ERR_IO, "fifo_bin.bin: not a regular file (a FIFO)", NULL);
    /* a regular file beside them still opens */
    write_bytes("plain.bin", g_bin.b, g_bin.n);
    write_bytes("plain.idx", g_idx.b, g_idx.n);
    dyn_corpus *c = open_ok(path_of("plain"), &o);
    assert_int_equal(dyn_corpus_count(c), 1);
    dyn_corpus_free(c);
    alarm(0);
}

/* An empty dataset is refused by every source, so nothing writes one that
 * a reader then refuses: builtin with 0 samples, a .idx of 0 sequences. */
static void test_empty_sources(void **state)
{
    (void)state;
    dyn_corpus_options o = opts(2048, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    o.builtin_samples = 0;
    open_fails("builtin", &o, DYN_ERR_INVALID_ARG, "0 samples (at least 1)", NULL);
    make_idx(&g_idx, 1, 8, 2, 0, NULL);
    g_bin.n = 0;
    write_dataset("none", &g_idx, &g_bin);
    open_fails(path_of("none"), &o, DYN_ERR_INVALID_ARG, "none.idx: no sequences", NULL);
}

static void test_megatron_hand_built(void **state)
{
    (void)state;
    dyn_corpus_options o = opts(2048, DYN_MODEL_T5, 0, DYN_CORPUS_VOCAB_BYTES);
    const int dtypes[][2] = {{1, 1}, {3, 2}, {4, 4}, {5, 8}, {8, 2}}; /* code, bytes */
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
        write_pair("hin", "htgt", dtypes[k][0], dtypes[k][1]);
        char spec[600];
        snprintf(spec, sizeof spec, "%s,%s", path_of("hin"), path_of("htgt"));
        dyn_corpus *c = open_ok(spec, &o);
        assert_int_equal(dyn_corpus_count(c), 2);
        assert_false(dyn_corpus_decoder_only(c));
        expect_sample(c, 1, (const int32_t[]){13}, 1, (const int32_t[]){21, 22}, 2);
        expect_sample(c, 0, (const int32_t[]){10, 11, 12}, 3, (const int32_t[]){20}, 1);
        dyn_corpus_free(c);
    }
    /* float32 tokens that are integers read; 2.5 does not */
    float f[4] = {10, 11, 12, 2.5f};
    unsigned char fb[16];
    memcpy(fb, f, sizeof fb);
    make_idx(&g_idx, 1, 7, 4, 2, (const int32_t[]){2, 2});
    memcpy(g_bin.b, fb, sizeof fb);
    g_bin.n = sizeof fb;
    write_dataset("flt", &g_idx, &g_bin);
    o.kind = DYN_MODEL_GPT;
    dyn_corpus *c = open_ok(path_of("flt"), &o);
    assert_true(dyn_corpus_decoder_only(c));
    expect_sample(c, 0, (const int32_t[]){10}, 1, (const int32_t[]){11}, 1);
    dyn_corpus_sample s;
    dyn_error err;
    assert_int_equal(dyn_corpus_read(c, 1, &s, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "record 1: token 1 = 2.5 is not an integer"));
    dyn_corpus_free(c);
    /* ids out of range are found when read, naming the record */
    make_idx(&g_idx, 1, 8, 2, 2, (const int32_t[]){2, 3});
    make_bin(&g_bin, 2, (const int32_t[]){1, 2, 3, 4000, 5}, 5);
    write_dataset("oov", &g_idx, &g_bin);
    o.vocab = 1000;
    c = open_ok(path_of("oov"), &o);
    expect_sample(c, 0, (const int32_t[]){1}, 1, (const int32_t[]){2}, 1);
    assert_int_equal(dyn_corpus_read(c, 1, &s, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "oov.bin: record 1: token 1 = 4000 is outside the vocabulary"));
    dyn_corpus_free(c);
    /* over the limit: named at open, or truncated */
    o.vocab = DYN_CORPUS_VOCAB_BYTES;
    o.max_seqlen = 2;
    open_fails(path_of("oov"), &o, DYN_ERR_INVALID_ARG, "record 1: input + target = 3 tokens", "max_seqlen 2");
    o.truncate = 1;
    o.vocab = 5000;
    c = open_ok(path_of("oov"), &o);
    expect_sample(c, 1, (const int32_t[]){3}, 1, (const int32_t[]){4000}, 1);
    expect_lengths_match_reads(c);
    dyn_corpus_free(c);
}

/* Copy of a hand-built .idx with one field changed. */
static void test_megatron_corrupt(void **state)
{
    (void)state;
    dyn_corpus_options o = opts(2048, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    const int32_t lens[2] = {3, 2};
    const int32_t toks[5] = {1, 2, 3, 4, 5};
    make_bin(&g_bin, 2, toks, 5);
    bytes good;
    make_idx(&good, 1, 8, 2, 2, lens);

    g_idx = good;
    memcpy(g_idx.b, "MMIDIDY", 7);
    write_dataset("magic", &g_idx, &g_bin);
    open_fails(path_of("magic"), &o, DYN_ERR_CORRUPT, "magic.idx: wrong magic", NULL);

    g_idx = good;
    g_idx.b[9] = 2;
    write_dataset("version", &g_idx, &g_bin);
    open_fails(path_of("version"), &o, DYN_ERR_CORRUPT, "version.idx: version 2", NULL);

    g_idx = good;
    g_idx.b[17] = 9;
    write_dataset("dtype", &g_idx, &g_bin);
    open_fails(path_of("dtype"), &o, DYN_ERR_CORRUPT, "dtype.idx: unknown dtype code 9", NULL);

    g_idx = good;
    g_idx.n -= 5;
    write_dataset("shortidx", &g_idx, &g_bin);
    open_fails(path_of("shortidx"), &o, DYN_ERR_CORRUPT, "shortidx.idx:", "truncated or corrupt");
    g_idx.n = 20;
    write_dataset("header", &g_idx, &g_bin);
    open_fails(path_of("header"), &o, DYN_ERR_CORRUPT, "header.idx: truncated header", NULL);

    /* a .bin cut short: the last sequence runs past its end */
    g_idx = good;
    bytes bin = g_bin;
    bin.n -= 1;
    write_dataset("shortbin", &g_idx, &bin);
    open_fails(path_of("shortbin"), &o, DYN_ERR_CORRUPT, "sequence 1: 2 tokens at byte 6 run past the end",
               "shortbin.bin (9 bytes)");

    /* a pointer past the end of an intact .bin */
    g_idx = good;
    size_t ptr1 = 9 + 8 + 1 + 8 + 8 + 2 * 4 + 8; /* pointers[1] */
    g_idx.b[ptr1] = 200;
    write_dataset("pointer", &g_idx, &g_bin);
    open_fails(path_of("pointer"), &o, DYN_ERR_CORRUPT, "sequence 1: 2 tokens at byte 200 run past the end", NULL);

    g_idx = good;
    size_t doc1 = 9 + 8 + 1 + 8 + 8 + 2 * 4 + 2 * 8 + 8; /* document index 1 */
    g_idx.b[doc1] = 7;
    write_dataset("docs", &g_idx, &g_bin);
    open_fails(path_of("docs"), &o, DYN_ERR_CORRUPT, "document index 1 = 7", NULL);

    g_idx = good;
    g_idx.b[9 + 8 + 1 + 8 + 8 + 3] = 0x80; /* sizes[0] negative */
    write_dataset("negative", &g_idx, &g_bin);
    open_fails(path_of("negative"), &o, DYN_ERR_CORRUPT, "sequence 0: negative length", NULL);

    /* input and target counts differ */
    write_dataset("cnt_in", &good, &g_bin);
    bytes three;
    make_idx(&three, 1, 8, 2, 3, (const int32_t[]){1, 1, 1});
    bytes bin3;
    make_bin(&bin3, 2, toks, 3);
    write_dataset("cnt_tgt", &three, &bin3);
    char spec[600];
    snprintf(spec, sizeof spec, "%s,%s", path_of("cnt_in"), path_of("cnt_tgt"));
    open_fails(spec, &o, DYN_ERR_INVALID_ARG, "has 2 sequences but the target dataset", "has 3");

    /* an empty target sequence in a pair */
    bytes zero;
    make_idx(&zero, 1, 8, 2, 2, (const int32_t[]){1, 0});
    write_dataset("zero", &zero, &g_bin);
    snprintf(spec, sizeof spec, "%s,%s", path_of("cnt_in"), path_of("zero"));
    open_fails(spec, &o, DYN_ERR_INVALID_ARG, "record 1: empty target", NULL);

    open_fails(path_of("nothing"), &o, DYN_ERR_IO, "nothing.idx: cannot open", NULL);
    unlink(path_of("cnt_in.bin"));
    open_fails(path_of("cnt_in"), &o, DYN_ERR_IO, "cnt_in.bin: cannot open", NULL);
}

/* ---- the converter ------------------------------------------------------------ */

static void expect_file(const char *name, const bytes *want)
{
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(dyn_file_read_all(path_of(name), &data, &len, NULL), DYN_OK);
    assert_int_equal(len, want->n);
    assert_memory_equal(data, want->b, want->n);
    free(data);
}

/* JSONL -> indexed is byte-exact (uint16, one document per sequence) and
 * reads back the same samples; decoder-only writes one dataset. */
static void test_convert_byte_exact(void **state)
{
    (void)state;
    const char *p = write_text("conv.jsonl", "{\"input\": \"ab\", \"target\": \"c\"}\n"
                                             "{\"input\": \"d\", \"target\": \"efg\"}\n");
    dyn_corpus_options o = opts(2048, DYN_MODEL_GPT, 0, DYN_CORPUS_VOCAB_BYTES);
    dyn_corpus *c = open_ok(p, &o);
    dyn_error err;
    assert_int_equal(dyn_corpus_write_indexed(c, path_of("conv"), &err), DYN_OK);
    dyn_corpus_free(c);
    bytes want;
    const int32_t S = DYN_CORPUS_TOK_SEP, E = DYN_CORPUS_TOK_EOS;
    make_idx(&want, 1, 8, 2, 2, (const int32_t[]){3, 2});
    expect_file("conv_input.idx", &want);
    make_bin(&want, 2, (const int32_t[]){'a', 'b', S, 'd', S}, 5);
    expect_file("conv_input.bin", &want);
    make_idx(&want, 1, 8, 2, 2, (const int32_t[]){2, 4});
    expect_file("conv_target.idx", &want);
    make_bin(&want, 2, (const int32_t[]){'c', E, 'e', 'f', 'g', E}, 6);
    expect_file("conv_target.bin", &want);
    c = open_ok(path_of("conv"), &o); /* finds the _input/_target pair */
    int32_t b[8];
    expect_sample(c, 1, b, in_of("d", b), (const int32_t[]){'e', 'f', 'g', E}, 4);
    dyn_corpus_free(c);

    p = write_text("convlm.jsonl", "{\"input_ids\": [70000, 1, 2]}\n");
    o.vocab = 100000; /* > 65536: int32 tokens */
    c = open_ok(p, &o);
    assert_int_equal(dyn_corpus_write_indexed(c, path_of("convlm"), &err), DYN_OK);
    dyn_corpus_free(c);
    make_idx(&want, 1, 4, 4, 1, (const int32_t[]){3});
    expect_file("convlm.idx", &want);
    make_bin(&want, 4, (const int32_t[]){70000, 1, 2}, 3);
    expect_file("convlm.bin", &want);
    c = open_ok(path_of("convlm"), &o);
    assert_true(dyn_corpus_decoder_only(c));
    expect_sample(c, 0, (const int32_t[]){70000}, 1, (const int32_t[]){1, 2}, 2);
    dyn_corpus_free(c);
}

/* Built-in -> indexed -> the same tokens for every sample. */
static void test_convert_builtin_round_trip(void **state)
{
    (void)state;
    dyn_corpus_options o = opts(256, DYN_MODEL_T5, 0, DYN_CORPUS_VOCAB_BYTES);
    o.builtin_samples = 300;
    dyn_corpus *a = open_ok("builtin:5", &o);
    dyn_error err;
    assert_int_equal(dyn_corpus_write_indexed(a, path_of("bi"), &err), DYN_OK);
    dyn_corpus *b = open_ok(path_of("bi"), &o);
    assert_int_equal(dyn_corpus_count(b), 300);
    for (int64_t i = 0; i < 300; i++) {
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(a, i, &s, &err), DYN_OK);
        int32_t in[256], tgt[256], ni = s.input_len, nt = s.target_len;
        memcpy(in, s.input, sizeof(int32_t) * (size_t)ni);
        memcpy(tgt, s.target, sizeof(int32_t) * (size_t)nt);
        expect_sample(b, i, in, ni, tgt, nt);
    }
    dyn_corpus_free(a);
    dyn_corpus_free(b);
}

/* A conversion that fails (an id out of range found while reading) leaves
 * no output and keeps the previous files. */
static void test_convert_atomic(void **state)
{
    (void)state;
    dyn_corpus_options o = opts(2048, DYN_MODEL_GPT, 0, 1000);
    make_idx(&g_idx, 1, 8, 2, 2, (const int32_t[]){2, 2});
    make_bin(&g_bin, 2, (const int32_t[]){1, 2, 3, 4000}, 4);
    write_dataset("badsrc", &g_idx, &g_bin);
    write_text("keep.idx", "old");
    dyn_corpus *c = open_ok(path_of("badsrc"), &o);
    dyn_error err;
    assert_int_equal(dyn_corpus_write_indexed(c, path_of("keep"), &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "record 1"));
    dyn_corpus_free(c);
    bytes old = {.n = 3};
    memcpy(old.b, "old", 3);
    expect_file("keep.idx", &old);
    struct stat sb;
    assert_int_not_equal(stat(path_of("keep.bin"), &sb), 0);
    /* no temporaries left behind either */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", g_dir);
    assert_int_not_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsonl_text_pairs),
        cmocka_unit_test(test_jsonl_ids_and_decoder_only),
        cmocka_unit_test(test_jsonl_limit_and_truncation),
        cmocka_unit_test(test_jsonl_malformed),
        cmocka_unit_test(test_jsonl_strict_strings),
        cmocka_unit_test(test_not_regular_files),
        cmocka_unit_test(test_empty_sources),
        cmocka_unit_test(test_megatron_hand_built),
        cmocka_unit_test(test_megatron_corrupt),
        cmocka_unit_test(test_convert_byte_exact),
        cmocka_unit_test(test_convert_builtin_round_trip),
        cmocka_unit_test(test_convert_atomic),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
