/* test_cli_text_train.c — a user's own text, end to end through the CLI:
 * `dynapipe train` on a small JSONL of input/target strings, then
 * `dynapipe eval --prompt` on the checkpoint, with the byte vocabulary and
 * with a tokenizer (a byte-level BPE tokenizer.json written here: the GPT-2
 * byte alphabet, merges that make the answers single tokens, "</s>" as the
 * end of sequence by tokenizer_config.json) and a prompt template.
 *
 *   - the task is a fixed mapping of six words to six others; after training,
 *     every prompt's generation is its answer and ends at the end-of-sequence
 *     token: stdout is the answer alone, and eval says the generation ended by
 *     that token, not at --max-new (so a model that never learned to stop, or
 *     data without an end of sequence, fails here);
 *   - the checkpoint records the data settings (trainer_state.json's
 *     data_options: tokenizer path and hash, template, truncation, special
 *     ids; config.json the tokenizer's special ids), and eval uses them
 *     without being told;
 *   - a checkpoint trained with --truncate on data with an over-long record
 *     evaluates without failing on it (eval takes the recorded truncation),
 *     and eval --truncate is a flag without a value;
 *   - --resume takes the checkpoint's data settings when the flags leave them
 *     out, and a flag that contradicts them is one line naming it;
 *   - eval --tokenizer that is not the checkpoint's file is one line;
 *   - train --init DIR reads with DIR's tokenizer (a checkpoint's recorded
 *     one, a model folder's tokenizer.json) unless --tokenizer is given;
 *   - the data settings and the evaluation set together: a run with
 *     --eval-split records both "order" and "data_options", eval evaluates
 *     the held-out part read as trained, and a validation set with an
 *     over-long record reads truncated and tokenised alike in train
 *     --eval-every and in eval (the same loss from the same weights). */
#define _XOPEN_SOURCE 700 /* realpath */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli_testlib.h"

/* The task: input -> target, learnt by heart. */
static const char *const PAIRS[][2] = {
    {"red", "stop"}, {"green", "go"}, {"blue", "sky"}, {"gold", "sun"}, {"white", "snow"}, {"black", "night"},
};
#define N_PAIRS ((int)(sizeof PAIRS / sizeof PAIRS[0]))

/* Small, fast and deterministic: one rank, fixed costs, a tiny GPT. */
#define COMMON                                                                                                       \
    "--model gpt --model-config gpt-tiny --layers 2 --stages 1 --threads 1 --machine cpu --no-calibrate --quiet " \
    "--max-seqlen 64 --global-batch-tokens 256 --seed 3"
#define LEARN "--steps 150 --lr 0.003 --min-lr 0.001 --warmup 10"

static char g_data[700], g_tok[700];

/* `dynapipe train COMMON args` with MPI's root and leak settings of the
 * suite's MPI runs; its exit code. */
static int train(const char *args)
{
    char a[8192];
    int w = snprintf(a, sizeof a, COMMON " %s", args);
    assert_true(w > 0 && (size_t)w < sizeof a);
    return cli_train(a);
}

static void train_ok(const char *args)
{
    int rc = train(args);
    if (rc != 0) fail_msg("dynapipe train %s: exit %d: %s", args, rc, slurp(err_path));
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

/* The toy tokenizer: bytes 0..255, then the merges' results in order, then
 * "</s>" (special, the EOS of tokenizer_config.json). Every answer is one
 * token after its merges. */
static const char *const MERGES[][2] = {{"s", "t"}, {"o", "p"}, {"st", "op"}, {"g", "o"}, {"s", "k"},
                                        {"sk", "y"}, {"s", "u"}, {"su", "n"}, {"s", "n"}, {"sn", "o"},
                                        {"sno", "w"}, {"n", "i"}, {"ni", "g"}, {"h", "t"}, {"nig", "ht"}};
#define N_MERGES ((int)(sizeof MERGES / sizeof MERGES[0]))
#define TOK_EOS (256 + N_MERGES)

static void write_tokenizer(void)
{
    snprintf(g_tok, sizeof g_tok, "%s/tok", dir);
    char p[800];
    snprintf(p, sizeof p, "mkdir -p '%s'", g_tok);
    assert_int_equal(system(p), 0);
    snprintf(p, sizeof p, "%s/tokenizer.json", g_tok);
    FILE *fp = fopen(p, "w");
    assert_non_null(fp);
    fputs("{\"model\":{\"type\":\"BPE\",\"vocab\":{", fp);
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        fprintf(fp, "%s\"%s%s\":%d", b ? "," : "", (c[0] == '"' || c[0] == '\\') ? "\\" : "", c, b);
    }
    for (int i = 0; i < N_MERGES; i++) fprintf(fp, ",\"%s%s\":%d", MERGES[i][0], MERGES[i][1], 256 + i);
    fputs("},\"merges\":[", fp);
    for (int i = 0; i < N_MERGES; i++) fprintf(fp, "%s\"%s %s\"", i ? "," : "", MERGES[i][0], MERGES[i][1]);
    fprintf(fp,
            "]},\"added_tokens\":[{\"id\":%d,\"content\":\"</s>\",\"special\":true}],"
            "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
            "\"post_processor\":null}",
            TOK_EOS);
    assert_int_equal(fclose(fp), 0);
    write_file("tok/tokenizer_config.json", "{\"eos_token\": \"</s>\"}", p, sizeof p);
}

static int setup(void **state)
{
    (void)state;
    if (cli_setup_dir() != 0) return -1;
    char text[2048];
    size_t n = 0;
    for (int i = 0; i < N_PAIRS; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"input\": \"%s\", \"target\": \"%s\"}\n", PAIRS[i][0],
                              PAIRS[i][1]);
    write_file("pairs.jsonl", text, g_data, sizeof g_data);
    write_tokenizer();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

/* Whether the last command's stderr has needle. */
static int stderr_has(const char *needle)
{
    char *e = slurp(err_path);
    int has = strstr(e, needle) != NULL;
    free(e);
    return has;
}

/* `eval --prompt` of every pair on checkpoint ck: the answer exactly, ended
 * by the end-of-sequence token. */
static void expect_answers(const char *ck)
{
    for (int i = 0; i < N_PAIRS; i++) {
        char args[2048], want[64];
        snprintf(args, sizeof args, "--checkpoint '%s' --prompt '%s' --max-new 12", ck, PAIRS[i][0]);
        int rc = cli_run("eval", args);
        char *out = slurp(out_path), *err = slurp(err_path);
        snprintf(want, sizeof want, "%s\n", PAIRS[i][1]);
        if (rc != 0 || strcmp(out, want) != 0 || strstr(err, "ended by the end-of-sequence token") == NULL)
            fail_msg("eval %s: exit %d, stdout '%s' (want '%s'), stderr %s", args, rc, out, PAIRS[i][1], err);
        free(out);
        free(err);
    }
}

/* The byte vocabulary: inputs end with the separator and targets with the
 * end-of-sequence token (258), so the model learns to stop. */
static void test_bytes_learn_and_stop(void **state)
{
    (void)state;
    char ck[800], args[4096];
    snprintf(ck, sizeof ck, "%s/ck-bytes", dir);
    snprintf(args, sizeof args, "--data '%s' " LEARN " --save '%s'", g_data, ck);
    train_ok(args);
    expect_answers(ck);
    char p[900];
    snprintf(p, sizeof p, "%s/step-00000150/trainer_state.json", ck);
    char *st = slurp(p);
    if (strstr(st, "\"data_options\"") == NULL || strstr(st, "\"tokenizer\":\t\"bytes\"") == NULL ||
        strstr(st, "\"eos_token_id\":\t258") == NULL)
        fail_msg("no byte data settings in %s: %s", p, st);
    free(st);
}

/* A tokenizer and a template: the checkpoint records both and eval applies
 * them to the prompt; the answers are single tokens followed by "</s>". */
static void test_tokenizer_learn_and_stop(void **state)
{
    (void)state;
    char ck[800], args[4096];
    snprintf(ck, sizeof ck, "%s/ck-bpe", dir);
    snprintf(args, sizeof args, "--data '%s' --tokenizer '%s' --template '{input} => {target}' " LEARN " --save '%s'",
             g_data, g_tok, ck);
    train_ok(args);
    expect_answers(ck);
    char p[900], want[900];
    snprintf(p, sizeof p, "%s/step-00000150/trainer_state.json", ck);
    char *st = slurp(p);
    char *abs = realpath(g_tok, NULL);
    assert_non_null(abs);
    snprintf(want, sizeof want, "\"tokenizer\":\t\"%s/tokenizer.json\"", abs);
    free(abs);
    char eos[64];
    snprintf(eos, sizeof eos, "\"eos_token_id\":\t%d", TOK_EOS);
    if (strstr(st, want) == NULL || strstr(st, "\"template\":\t\"{input} => {target}\"") == NULL ||
        strstr(st, eos) == NULL || strstr(st, "\"truncate\":\t0") == NULL)
        fail_msg("data settings missing from %s: %s", p, st);
    free(st);
    /* config.json carries the tokenizer's ids (pad: its eos, as it has no pad) */
    snprintf(p, sizeof p, "%s/step-00000150/config.json", ck);
    st = slurp(p);
    char pad[64], bos[64];
    snprintf(pad, sizeof pad, "\"pad_token_id\":\t%d", TOK_EOS);
    snprintf(bos, sizeof bos, "\"bos_token_id\":\t%d", TOK_EOS);
    if (strstr(st, eos) == NULL || strstr(st, pad) == NULL || strstr(st, bos) == NULL)
        fail_msg("%s has not the tokenizer's special ids: %s", p, st);
    free(st);
    /* eval --tokenizer of another file (the same tokens, a space more) is
     * refused, naming it */
    char orig[800], bad[800], cfg[800];
    snprintf(orig, sizeof orig, "%s/tokenizer.json", g_tok);
    char *text = slurp(orig);
    char *more = malloc(strlen(text) + 2);
    assert_non_null(more);
    snprintf(more, strlen(text) + 2, "%s ", text);
    free(text);
    snprintf(cfg, sizeof cfg, "mkdir -p '%s/other'", dir);
    assert_int_equal(system(cfg), 0);
    write_file("other/tokenizer.json", more, bad, sizeof bad);
    write_file("other/tokenizer_config.json", "{\"eos_token\": \"</s>\"}", cfg, sizeof cfg);
    free(more);
    snprintf(args, sizeof args, "--checkpoint '%s' --tokenizer '%s' --prompt red", ck, bad);
    cli_assert_one_line_error("eval", args, cli_run("eval", args), 1, "not the file the checkpoint was trained with");

    /* --init DIR: DIR's tokenizer unless --tokenizer says (a checkpoint's
     * recorded one; a model folder's tokenizer.json), and --template reaches
     * the run's options */
    snprintf(args, sizeof args, "--init '%s' --data '%s' --machine cpu --steps 2 --print-options", ck, g_data);
    if (cli_run("train", args) != 0) fail_msg("train %s: %s", args, slurp(err_path));
    char *opts = slurp(out_path);
    char *abs2 = realpath(g_tok, NULL);
    assert_non_null(abs2);
    snprintf(want, sizeof want, "\"tokenizer\":\"%s/tokenizer.json\"", abs2);
    free(abs2);
    if (strstr(opts, want) == NULL) fail_msg("--init %s: not its tokenizer: %s", ck, opts);
    free(opts);
    char hf[800], cmd[4000];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    /* a model folder: the checkpoint's config and weights, the tokenizer */
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s/step-00000150/config.json' '%s'/step-00000150/*.safetensors* "
             "'%s/tokenizer.json' '%s/'", hf, ck, ck, g_tok, hf);
    assert_int_equal(system(cmd), 0);
    snprintf(args, sizeof args,
             "--init '%s' --data '%s' --machine cpu --steps 2 --template '{input}={target}' --print-options", hf,
             g_data);
    if (cli_run("train", args) != 0) fail_msg("train %s: %s", args, slurp(err_path));
    opts = slurp(out_path);
    snprintf(want, sizeof want, "\"tokenizer\":\"%s\"", hf);
    if (strstr(opts, want) == NULL || strstr(opts, "\"template\":\"{input}={target}\"") == NULL)
        fail_msg("--init %s: not its tokenizer, or no template: %s", hf, opts);
    free(opts);
}

/* --truncate is recorded: eval reads the over-long record clipped, as the
 * run did; --resume takes it (and the tokenizer) without the flags and
 * refuses a contradicting --template. */
static void test_truncate_and_resume(void **state)
{
    (void)state;
    char data[800], ck[800], out[800], args[4096];
    char text[1024];
    size_t n = 0;
    n += (size_t)snprintf(text + n, sizeof text - n, "{\"input\": \"");
    for (int i = 0; i < 100; i++) text[n++] = (char)('a' + i % 26);
    n += (size_t)snprintf(text + n, sizeof text - n, "\", \"target\": \"long\"}\n");
    for (int i = 0; i < N_PAIRS; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "{\"input\": \"%s\", \"target\": \"%s\"}\n", PAIRS[i][0],
                              PAIRS[i][1]);
    write_file("long.jsonl", text, data, sizeof data);
    snprintf(ck, sizeof ck, "%s/ck-trunc", dir);
    snprintf(out, sizeof out, "%s/ck-trunc2", dir);
    /* without --truncate the run refuses the record */
    snprintf(args, sizeof args, "--data '%s' --steps 2 --save '%s'", data, ck);
    assert_int_not_equal(train(args), 0);
    assert_true(stderr_has("exceeds max_seqlen 64"));
    snprintf(args, sizeof args, "--data '%s' --tokenizer '%s' --truncate --steps 2 --save-every 1 --save '%s'", data,
             g_tok, ck);
    train_ok(args);
    snprintf(args, sizeof args, "--checkpoint '%s' --no-accuracy", ck);
    if (cli_run("eval", args) != 0) fail_msg("eval %s: %s", args, slurp(err_path));
    /* --truncate takes no value: it is a flag */
    snprintf(args, sizeof args, "--checkpoint '%s' --no-accuracy --truncate", ck);
    if (cli_run("eval", args) != 0) fail_msg("eval %s: %s", args, slurp(err_path));
    /* resume from step 1 with no data flags: the checkpoint's truncation and tokenizer */
    snprintf(args, sizeof args, "--data '%s' --steps 2 --resume '%s/step-00000001' --save '%s'", data, ck, out);
    train_ok(args);
    char p[900];
    snprintf(p, sizeof p, "%s/step-00000002/trainer_state.json", out);
    char *st = slurp(p);
    if (strstr(st, "\"truncate\":\t1") == NULL || strstr(st, "tok/tokenizer.json") == NULL)
        fail_msg("the resumed run did not keep the data settings: %s", st);
    free(st);
    /* a contradicting template: one line */
    snprintf(args, sizeof args,
             "--data '%s' --steps 2 --template 'Q {input} A {target}' --resume '%s/step-00000001' --save '%s'", data,
             ck, out);
    int rc = train(args);
    cli_assert_one_line_error("train", args, rc, 1, "--template: the checkpoint was trained with no template");
}

/* Both sides of issue 29 at once: the data settings (tokenizer,
 * truncation) and the evaluation set (--eval-split, --eval-data). A run
 * with --tokenizer --truncate --eval-split records "order" and
 * "data_options" side by side; eval with no flags evaluates the held-out
 * part, read with the recorded settings; eval --eval-data of a file with an
 * over-long record reads it truncated and tokenised as training did, and
 * its loss is the one train --eval-every printed on the same validation
 * set from the same weights (so both read it with the same tokenizer). */
static void test_eval_set_with_data_settings(void **state)
{
    (void)state;
    char data[800], valid[800], ck[800], metrics[800], args[4096], text[4096];
    size_t n = 0;
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < N_PAIRS; i++)
            n += (size_t)snprintf(text + n, sizeof text - n, "{\"input\": \"%s\", \"target\": \"%s\"}\n", PAIRS[i][0],
                                  PAIRS[i][1]);
    n += (size_t)snprintf(text + n, sizeof text - n, "{\"input\": \"");
    for (int i = 0; i < 100; i++) text[n++] = (char)('a' + i % 26);
    n += (size_t)snprintf(text + n, sizeof text - n, "\", \"target\": \"long\"}\n");
    write_file("both.jsonl", text, data, sizeof data); /* 19 records, one over max_seqlen */
    n = 0;
    n += (size_t)snprintf(text + n, sizeof text - n, "{\"input\": \"");
    for (int i = 0; i < 90; i++) text[n++] = (char)('z' - i % 26);
    n += (size_t)snprintf(text + n, sizeof text - n, "\", \"target\": \"snow\"}\n{\"input\": \"gold\", \"target\": \"sun\"}\n");
    write_file("both-valid.jsonl", text, valid, sizeof valid);
    snprintf(ck, sizeof ck, "%s/ck-both", dir);
    snprintf(metrics, sizeof metrics, "%s/both-metrics.jsonl", dir);
    /* the held-out part (--eval-split; --eval-data is the other run below) */
    snprintf(args, sizeof args,
             "--data '%s' --tokenizer '%s' --truncate --eval-split 0.25 --steps 4 --save '%s'", data, g_tok, ck);
    train_ok(args);
    char p[900];
    snprintf(p, sizeof p, "%s/step-00000004/trainer_state.json", ck);
    char *st = slurp(p);
    if (strstr(st, "\"order\":") == NULL || strstr(st, "\"eval_split\":\t0.25") == NULL ||
        strstr(st, "\"data_options\":") == NULL || strstr(st, "\"truncate\":\t1") == NULL ||
        strstr(st, "tok/tokenizer.json") == NULL)
        fail_msg("trainer_state.json lacks the order or the data settings: %s", st);
    free(st);
    /* eval, no flags: the held-out part of the data, read as trained */
    snprintf(text, sizeof text, "--checkpoint '%s' --no-accuracy --samples 100", ck);
    if (cli_run("eval", text) != 0) fail_msg("eval %s: %s", text, slurp(err_path));
    char *out = slurp(out_path), want[64];
    snprintf(want, sizeof want, ", never trained), %ld samples: held-out loss ", lround(0.25 * 19));
    if (strstr(out, "held-out 0.25 of ") == NULL || strstr(out, want) == NULL) fail_msg("eval said: %s", out);
    free(out);
    /* a validation set with an over-long record, at train --eval-every and in eval */
    snprintf(args, sizeof args,
             "--data '%s' --tokenizer '%s' --truncate --steps 4 --save '%s/v' --eval-every 4 --eval-data '%s' "
             "--eval-samples 100 --metrics '%s'",
             data, g_tok, ck, valid, metrics);
    train_ok(args);
    /* read here, not by slurp: GCC 12 takes a pointer into slurp's text
     * for a dangling one once it is inlined (cli_testlib.h) */
    char *m = NULL;
    assert_int_equal(dyn_file_read_all(metrics, &m, NULL, NULL), DYN_OK);
    size_t lm = strstr(m, "\"eval_loss\":") ? (size_t)(strstr(m, "\"eval_loss\":") - m) : strlen(m);
    if (m[lm] == '\0' || strstr(m + lm, "\"eval_on\":\"validation\"") == NULL) fail_msg("no validation loss: %s", m);
    double train_loss = atof(m + lm + strlen("\"eval_loss\":"));
    free(m);
    snprintf(text, sizeof text, "--checkpoint '%s/v' --no-accuracy --eval-data '%s'", ck, valid);
    if (cli_run("eval", text) != 0) fail_msg("eval %s: %s", text, slurp(err_path));
    out = NULL;
    assert_int_equal(dyn_file_read_all(out_path, &out, NULL, NULL), DYN_OK);
    const char *said = "2 samples: validation loss ";
    size_t le = strstr(out, said) ? (size_t)(strstr(out, said) - out) : strlen(out);
    if (strstr(out, "validation set ") == NULL || out[le] == '\0') fail_msg("eval said: %s", out);
    double eval_loss = atof(out + le + strlen(said));
    if (fabs(eval_loss - train_loss) > 1e-3)
        fail_msg("eval's validation loss %.6f, train --eval-every's %.6f: %s", eval_loss, train_loss, out);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_learn_and_stop),
        cmocka_unit_test(test_tokenizer_learn_and_stop),
        cmocka_unit_test(test_truncate_and_resume),
        cmocka_unit_test(test_eval_set_with_data_settings),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
