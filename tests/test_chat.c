/* test_chat.c — chat records {"messages": [...]} end to end: the tokenizer
 * folder's chat template renders them (src/data/chat.c, util/jinja.c) and
 * the codec encodes the input/target split (src/data/codec.c), checked
 * against an independent reference: Python jinja2 renders the same
 * template (tests/chat/chat_ref.py: input = messages[:-1] with
 * add_generation_prompt, target = the rest of the full rendering), and
 *   - a toy byte-level BPE folder (byte b is id b, chat special tokens added,
 *     no merges): the reference cuts out the special tokens and takes bytes;
 *     three folders cover where a template comes from (tokenizer_config.json's
 *     string; its list, "default" taken, with an AddedToken-object BOS;
 *     chat_template.jinja over the config's);
 *   - a Qwen2-style tokenizer.json over cl100k (tests/tokenizer/ref_setup.sh)
 *     with a ChatML template, encoded by @huggingface/tokenizers
 *     (tests/chat/encode_ref.mjs), when node and the packages can be had.
 * Records are read through the library (dyn_corpus_read) and through
 * `dynapipe data convert` (read back), and `data show` shows them. Bad input
 * (a template syntax error, an unknown filter, raise_exception, no chat
 * template, the last message not the assistant's, the byte tokenizer,
 * --template with messages) is one line naming the file and line, exit 1.
 * A few steps of `dynapipe train` on a messages file run. Without a python
 * that has jinja2 the reference parts are skipped (exit 77 when nothing
 * else ran). */
#define _XOPEN_SOURCE 700 /* realpath */
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

#include "cli_testlib.h"
#include "dynapipe/corpus.h" /* defines: dyn_corpus_* */

static const char *g_src;
static char g_python[64]; /* a python with jinja2, "" when none */
static char g_toy[3][700]; /* toy folders: config string, config list, .jinja file */
static char g_jsonl[700];

/* Conversations, the last message the assistant's. */
static const char *const RECORDS[] = {
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Answer briefly.\"}, {\"role\": \"user\", \"content\": \"Capital of Peru?\"}, {\"role\": \"assistant\", \"content\": \"Lima\"}]}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"Hello!\"}, {\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", \"content\": \"4\"}]}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"Gr\\u00fc\\u00dfe \\ud83d\\udc4b \\u65e5\\u672c\"}, {\"role\": \"assistant\", \"content\": \"  \\u00e9t\\u00e9\\n\"}]}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"\"}, {\"role\": \"assistant\", \"content\": \"(empty question)\"}]}",
    "{\"messages\": [{\"role\": \"user\", \"content\": \"a literal <|im_end|> inside\"}, {\"role\": \"assistant\", \"content\": \"seen <|im_start|>\"}], \"id\": 7}",
};
#define N_RECORDS ((int)(sizeof RECORDS / sizeof *RECORDS))

static void find_python(void)
{
    const char *cands[] = {"python3", "/usr/bin/python3"};
    g_python[0] = '\0';
    for (size_t k = 0; k < 2 && !g_python[0]; k++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import jinja2' >/dev/null 2>&1", cands[k]);
        int rc = system(cmd);
        if (rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0) snprintf(g_python, sizeof g_python, "%s", cands[k]);
    }
}

static int sh(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

static char *read_template(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/chat/%s.jinja", g_src, name);
    return slurp(path);
}

/* GPT-2's byte-to-unicode character of byte b (UTF-8). */
static void byte_char(int b, char out[4])
{
    int n = 0, cp = -1;
    for (int x = 0; x < 256; x++) {
        int printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        int c = printable ? x : 256 + n++;
        if (x == b) cp = c;
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = '\0';
    } else {
        out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = '\0';
    }
}

static const char *const TOY_SPECIALS[] = {"<|im_start|>", "<|im_end|>", "<s>", "</s>"};

/* A toy folder at path: tokenizer.json (bytes 0..255, the specials from
 * 256, no merges) and tokenizer_config.json = config (JSON text). */
static void make_toy(const char *path, const char *config)
{
    char cmd[800], file[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    assert_int_equal(sh(cmd), 0);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        cJSON_AddNumberToObject(vocab, c, b);
    }
    cJSON_AddArrayToObject(model, "merges");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (int i = 0; i < 4; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", 256 + i);
        cJSON_AddStringToObject(a, "content", TOY_SPECIALS[i]);
        cJSON_AddBoolToObject(a, "special", 1);
        cJSON_AddItemToArray(added, a);
    }
    cJSON_AddNullToObject(root, "normalizer");
    cJSON *pt = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pt, "type", "ByteLevel");
    cJSON_AddBoolToObject(pt, "add_prefix_space", 0);
    cJSON_AddNullToObject(root, "post_processor");
    char *text = cJSON_PrintUnformatted(root);
    snprintf(file, sizeof file, "%s/tokenizer.json", path);
    assert_int_equal(dyn_file_write_atomic(file, text, strlen(text), NULL), DYN_OK);
    free(text);
    cJSON_Delete(root);
    snprintf(file, sizeof file, "%s/tokenizer_config.json", path);
    assert_int_equal(dyn_file_write_atomic(file, config, strlen(config), NULL), DYN_OK);
}

/* tokenizer_config.json text with the given chat_template JSON value. */
static char *config_with(const char *bos_json, cJSON *chat_template)
{
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToObject(c, "bos_token", cJSON_Parse(bos_json));
    cJSON_AddStringToObject(c, "eos_token", "<|im_end|>");
    if (chat_template) cJSON_AddItemToObject(c, "chat_template", chat_template);
    char *s = cJSON_PrintUnformatted(c);
    cJSON_Delete(c);
    return s;
}

static int setup(void **state)
{
    (void)state;
    if (cli_setup_dir() != 0) return -1;
    char *chatml = read_template("chatml"), *llama3 = read_template("llama3"), *gemma = read_template("gemma");
    char *cfg;
    snprintf(g_toy[0], sizeof g_toy[0], "%s/toy_string", dir);
    make_toy(g_toy[0], cfg = config_with("null", cJSON_CreateString(chatml)));
    free(cfg);
    cJSON *list = cJSON_CreateArray(), *a = cJSON_CreateObject(), *b = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "name", "tool_use");
    cJSON_AddStringToObject(a, "template", "{{ not the one }}");
    cJSON_AddStringToObject(b, "name", "default");
    cJSON_AddStringToObject(b, "template", llama3);
    cJSON_AddItemToArray(list, a);
    cJSON_AddItemToArray(list, b);
    snprintf(g_toy[1], sizeof g_toy[1], "%s/toy_list", dir);
    make_toy(g_toy[1], cfg = config_with("{\"content\": \"<s>\", \"lstrip\": false, \"special\": true}", list));
    free(cfg);
    snprintf(g_toy[2], sizeof g_toy[2], "%s/toy_file", dir);
    make_toy(g_toy[2], cfg = config_with("\"<s>\"", cJSON_CreateString("{{ ignored, the .jinja file wins")));
    free(cfg);
    char path[800];
    snprintf(path, sizeof path, "%s/chat_template.jinja", g_toy[2]);
    assert_int_equal(dyn_file_write_atomic(path, gemma, strlen(gemma), NULL), DYN_OK);
    free(chatml), free(llama3), free(gemma);
    char all[4096] = "";
    for (int i = 0; i < N_RECORDS; i++) strcat(strcat(all, RECORDS[i]), "\n");
    write_file("chat.jsonl", all, g_jsonl, sizeof g_jsonl);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

/* The reference split of g_jsonl by template file tmpl (tests/chat/NAME)
 * with extra variables vars (JSON text); with toy != 0 also the toy
 * folder's ids. NULL when the reference cannot run. */
static cJSON *reference(const char *tmpl_name, const char *vars, int toy)
{
    char vpath[800], spath[800], out[800], cmd[4000];
    write_file("vars.json", vars, vpath, sizeof vpath);
    write_file("specials.json", "{\"<|im_start|>\": 256, \"<|im_end|>\": 257, \"<s>\": 258, \"</s>\": 259}", spath,
               sizeof spath);
    snprintf(out, sizeof out, "%s/ref.json", dir);
    snprintf(cmd, sizeof cmd, "%s '%s/tests/chat/chat_ref.py' '%s/tests/chat/%s.jinja' '%s' '%s' '%s' %s%s%s", g_python,
             g_src, g_src, tmpl_name, g_jsonl, vpath, out, toy ? "'" : "", toy ? spath : "", toy ? "'" : "");
    if (sh(cmd) != 0) return NULL;
    char *text = slurp(out);
    cJSON *r = cJSON_Parse(text);
    free(text);
    assert_non_null(r);
    assert_int_equal(cJSON_GetArraySize(r), N_RECORDS);
    return r;
}

/* ids (n of them) equal the JSON array want; prints both when not. */
static void assert_ids(const int32_t *ids, int64_t n, const cJSON *want, const char *what, int rec)
{
    int ok = cJSON_GetArraySize(want) == n;
    for (int64_t k = 0; ok && k < n; k++) ok = cJSON_GetArrayItem(want, (int)k)->valueint == ids[k];
    if (!ok) {
        char *w = cJSON_PrintUnformatted(want);
        fprintf(stderr, "record %d %s: %lld ids [", rec, what, (long long)n);
        for (int64_t k = 0; k < n; k++) fprintf(stderr, "%s%d", k ? "," : "", ids[k]);
        fprintf(stderr, "], reference %s\n", w);
        free(w);
    }
    assert_true(ok);
}

/* Every sample of corpus spec (read with tokenizer tok, NULL: the files'
 * own ids) equals the reference's input_ids / target_ids. */
static void assert_corpus_equals(const char *spec, const char *tok, const cJSON *ref, const char *ids_in,
                                 const char *ids_tgt)
{
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.tokenizer = tok;
    o.vocab = 0;
    dyn_error err;
    dyn_corpus *c = dyn_corpus_open(spec, &o, &err);
    if (c == NULL) fail_msg("%s: %s", spec, err.msg);
    assert_int_equal(dyn_corpus_count(c), N_RECORDS);
    for (int i = 0; i < N_RECORDS; i++) {
        dyn_corpus_sample s;
        assert_int_equal(dyn_corpus_read(c, i, &s, &err), DYN_OK);
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        assert_ids(s.input, s.input_len, cJSON_GetObjectItem(r, ids_in), "input", i);
        assert_ids(s.target, s.target_len, cJSON_GetObjectItem(r, ids_tgt), "target", i);
    }
    dyn_corpus_free(c);
}

static int need_python(void)
{
    if (g_python[0]) return 1;
    fprintf(stderr, "test_chat: reference skipped: neither python3 nor /usr/bin/python3 has jinja2 (Debian: "
                    "python3-jinja2)\n");
    return 0;
}

static void test_toy_folders_equal_reference(void **state)
{
    (void)state;
    if (!need_python()) skip();
    static const char *const tmpl[] = {"chatml", "llama3", "gemma"};
    static const char *const vars[] = {"{\"eos_token\": \"<|im_end|>\"}",
                                       "{\"bos_token\": \"<s>\", \"eos_token\": \"<|im_end|>\"}",
                                       "{\"bos_token\": \"<s>\", \"eos_token\": \"<|im_end|>\"}"};
    for (int f = 0; f < 3; f++) {
        cJSON *ref = reference(tmpl[f], vars[f], 1);
        assert_non_null(ref);
        assert_corpus_equals(g_jsonl, g_toy[f], ref, "input_ids", "target_ids");
        /* the CLI: convert to Megatron files, read them back */
        char args[4000], prefix[800];
        snprintf(prefix, sizeof prefix, "%s/conv%d", dir, f);
        snprintf(args, sizeof args, "convert '%s' --tokenizer '%s' --out '%s'", g_jsonl, g_toy[f], prefix);
        if (cli_run("data", args) != 0) fail_msg("data %s: %s", args, slurp(err_path));
        assert_corpus_equals(prefix, NULL, ref, "input_ids", "target_ids");
        cJSON_Delete(ref);
    }
    /* data show prints the split as text */
    char args[4000];
    snprintf(args, sizeof args, "show '%s' --tokenizer '%s' --count 2", g_jsonl, g_toy[0]);
    if (cli_run("data", args) != 0) fail_msg("data %s: %s", args, slurp(err_path));
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "<|im_start|>assistant\\n"));
    assert_non_null(strstr(out, "Lima<|im_end|>\\n"));
    free(out);
}

/* A Qwen2-style tokenizer over cl100k (tests/tokenizer/ref_setup.sh) with a
 * ChatML template; the reference ids from @huggingface/tokenizers. */
static void test_qwen2_style_equals_hf_tokenizers(void **state)
{
    (void)state;
    if (!need_python()) skip();
    char ref_dir[800], cmd[4000];
    char cwd[600];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(ref_dir, sizeof ref_dir, "%s/chat_ref", cwd); /* the build folder, kept between runs */
    snprintf(cmd, sizeof cmd, "bash '%s/tests/tokenizer/ref_setup.sh' '%s' 2>&1", g_src, ref_dir);
    int rc = sh(cmd);
    if (rc == 77) {
        fprintf(stderr, "test_chat: Qwen2-style part skipped (node / npm packages unavailable)\n");
        skip();
    }
    assert_int_equal(rc, 0);
    char folder[900];
    snprintf(folder, sizeof folder, "%s/q2chat", dir);
    char *chatml = read_template("chatml");
    char *cfg = config_with("null", cJSON_CreateString(chatml));
    free(chatml);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/q2/tokenizer.json' '%s/'", folder, ref_dir, folder);
    assert_int_equal(sh(cmd), 0);
    char path[1000];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", folder);
    assert_int_equal(dyn_file_write_atomic(path, cfg, strlen(cfg), NULL), DYN_OK);
    free(cfg);
    cJSON *ref = reference("chatml", "{\"eos_token\": \"<|im_end|>\"}", 0);
    assert_non_null(ref);
    /* texts: prompt, target of each record, encoded by the reference */
    cJSON *texts = cJSON_CreateArray();
    for (int i = 0; i < N_RECORDS; i++) {
        const cJSON *r = cJSON_GetArrayItem(ref, i);
        cJSON_AddItemToArray(texts, cJSON_CreateString(cJSON_GetObjectItem(r, "prompt")->valuestring));
        cJSON_AddItemToArray(texts, cJSON_CreateString(cJSON_GetObjectItem(r, "target")->valuestring));
    }
    char *tj = cJSON_PrintUnformatted(texts), tpath[800], opath[800];
    cJSON_Delete(texts);
    write_file("texts.json", tj, tpath, sizeof tpath);
    free(tj);
    snprintf(opath, sizeof opath, "%s/ids.json", dir);
    snprintf(cmd, sizeof cmd, "cd '%s' && node '%s/tests/chat/encode_ref.mjs' '%s' '%s' '%s'", ref_dir, g_src, folder,
             tpath, opath);
    assert_int_equal(sh(cmd), 0);
    char *ids_text = slurp(opath);
    cJSON *ids = cJSON_Parse(ids_text);
    free(ids_text);
    assert_non_null(ids);
    for (int i = 0; i < N_RECORDS; i++) {
        cJSON *r = cJSON_GetArrayItem(ref, i);
        cJSON_AddItemToObject(r, "in", cJSON_Duplicate(cJSON_GetArrayItem(ids, 2 * i), 1));
        cJSON_AddItemToObject(r, "tgt", cJSON_Duplicate(cJSON_GetArrayItem(ids, 2 * i + 1), 1));
    }
    cJSON_Delete(ids);
    assert_corpus_equals(g_jsonl, folder, ref, "in", "tgt");
    cJSON_Delete(ref);
}

/* `data show FILE --tokenizer TOK [extra]` fails with one line holding
 * frag and FILE's line number. */
static void expect_show_error(const char *jsonl_text, const char *tok, const char *extra, const char *frag,
                              const char *line_frag)
{
    char path[800], args[3000];
    write_file("bad.jsonl", jsonl_text, path, sizeof path);
    snprintf(args, sizeof args, "show '%s'%s%s%s %s", path, tok ? " --tokenizer '" : "", tok ? tok : "",
             tok ? "'" : "", extra);
    int rc = cli_run("data", args);
    cli_assert_one_line_error("data show", args, rc, 1, frag);
    char *err = slurp(err_path);
    if (strstr(err, line_frag) == NULL) fail_msg("[%s] does not name [%s]", err, line_frag);
    free(err);
}

/* A toy folder whose tokenizer_config.json has chat template tmpl. */
static const char *toy_with(const char *name, const char *tmpl)
{
    static char path[800];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *cfg = config_with("\"<s>\"", tmpl ? cJSON_CreateString(tmpl) : NULL);
    make_toy(path, cfg);
    free(cfg);
    return path;
}

static void test_bad_input_is_one_line(void **state)
{
    (void)state;
    const char *good = "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n";
    char two[1000];
    snprintf(two, sizeof two, "%s%s", good, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, "
             "{\"role\": \"user\", \"content\": \"again\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n");
    /* a syntax error in the template: its file, line:column */
    expect_show_error(good, toy_with("syntax", "{% for m in messages %}\n{{ m.content }\n{% endfor %}"),
                      "", "tokenizer_config.json: line 2:", "bad.jsonl:1");
    /* an unknown filter */
    expect_show_error(good, toy_with("filter", "{{ messages | shuffle }}"), "",
                      "unknown or unsupported filter 'shuffle'", "bad.jsonl:1");
    /* raise_exception of a Mistral-style template on the second record */
    char *mistral = read_template("mistral");
    expect_show_error(two, toy_with("mistral", mistral), "", "raise_exception: turns must go user, assistant",
                      "bad.jsonl:2");
    free(mistral);
    /* a folder without a chat template */
    expect_show_error(good, toy_with("none", NULL), "", "has none (no chat_template.jinja", "bad.jsonl:1");
    /* the last message is not the assistant's */
    expect_show_error("{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}\n", g_toy[0], "",
                      "the last message must be the assistant's", "bad.jsonl:1");
    /* the byte tokenizer has no chat template; --template is for input/target */
    expect_show_error(good, NULL, "", "the byte tokenizer has none", "bad.jsonl:1");
    expect_show_error(good, g_toy[0], "--template '{input}:{target}'", "--template applies to input/target",
                      "bad.jsonl:1");
    /* messages mixed with another format, and not a list */
    expect_show_error("{\"messages\": [], \"text\": \"x\"}\n", g_toy[0], "", "mixes", "bad.jsonl:1");
    expect_show_error("{\"messages\": \"hi\"}\n", g_toy[0], "", "messages must be a list", "bad.jsonl:1");
    /* a SentencePiece model (spm_train, when installed) with a chat template */
    char spm[800], cmd[3000];
    snprintf(spm, sizeof spm, "%s/spm", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cd '%s' && for i in $(seq 200); do echo \"the quick brown fox $i "
             "jumps over a lazy dog\"; done >corpus.txt && spm_train --input=corpus.txt --model_prefix=tokenizer "
             "--model_type=bpe --vocab_size=60 --minloglevel=2 --num_threads=1 >/dev/null 2>&1 && printf "
             "'{\"chat_template\": \"{{ messages[0].content }}\"}' >tokenizer_config.json", spm, spm);
    if (sh("command -v spm_train >/dev/null") == 0) {
        assert_int_equal(sh(cmd), 0);
        expect_show_error(good, spm, "", "is a SentencePiece model", "bad.jsonl:1");
    } else {
        fprintf(stderr, "test_chat: the SentencePiece case skipped: spm_train is not installed\n");
    }
    /* a template whose full rendering does not start with the prompt's */
    expect_show_error(good, toy_with("nosplit", "{{ messages | length }}{% if add_generation_prompt %}>{% endif %}"),
                      "", "does not start with the rendering of its prompt", "bad.jsonl:1");
}

/* A few steps of training on a messages file. */
static void test_train_on_messages(void **state)
{
    (void)state;
    char args[3000], ck[800];
    snprintf(ck, sizeof ck, "%s/ck", dir);
    snprintf(args, sizeof args,
             "--data '%s' --tokenizer '%s' --model gpt --model-config gpt-tiny --layers 2 --stages 1 --threads 1 "
             "--machine cpu --no-calibrate --quiet --max-seqlen 256 --global-batch-tokens 512 --seed 3 --steps 3 "
             "--save '%s'",
             g_jsonl, g_toy[0], ck);
    int rc = cli_train(args);
    if (rc != 0) fail_msg("train %s: exit %d: %s", args, rc, slurp(err_path));
    /* the checkpoint records the chat template; eval reads the data as train did */
    char state_path[900];
    snprintf(state_path, sizeof state_path, "%s/step-00000003/trainer_state.json", ck);
    char *st = slurp(state_path);
    assert_non_null(strstr(st, "chat_template_fnv1a64"));
    free(st);
}

int main(void)
{
    static char src[4096];
    if (realpath(getenv("DYN_SOURCE_DIR") ? getenv("DYN_SOURCE_DIR") : ".", src) == NULL) return 1;
    g_src = src;
    find_python();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input_is_one_line),
        cmocka_unit_test(test_toy_folders_equal_reference),
        cmocka_unit_test(test_qwen2_style_equals_hf_tokenizers),
        cmocka_unit_test(test_train_on_messages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
