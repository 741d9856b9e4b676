/* test_runtime_ckpt_state.c — trainer_state.json of a checkpoint, without
 * MPI (ckpt_state.h's field table).
 *
 * - A trainer_state.json in the layout `dynapipe train --save` writes
 *   (copied from a checkpoint of the format-1 writer, tabs and all) reads
 *   into the values written here by hand, and writing what was read gives
 *   the same bytes back: the one field table drives both directions.
 * - Every numeric field out of its range (1e300, a negative count, 1.5 for
 *   an integer, a layer cut or a file size of 1e300, a learning rate of
 *   1e300) and a wrong kind or format are refused with DYN_ERR_CORRUPT and
 *   one line naming the file and the field; never converted first.
 * - "lr_schedule" and "order" may be absent (older checkpoints), not
 *   incomplete; "order"'s epoch and index must be sampler_position's;
 *   "tokens" may be absent (then the byte vocabulary's ids); a Llama's
 *   "llama" fields are required for it and round-trip every digit.
 * - "data_options" may be absent (older checkpoints: bytes, no template, no
 *   truncation), and its settings compare field by field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/checkpoint.h"
#include "runtime/ckpt_state.h"
#include "util/util.h"

static const char STATE[] =
    "{\n"
    "\t\"format\":\t1,\n"
    "\t\"step\":\t3,\n"
    "\t\"sampler_position\":\t54,\n"
    "\t\"rng\":\t\"none\",\n"
    "\t\"model\":\t{\n"
    "\t\t\"kind\":\t\"gpt\",\n"
    "\t\t\"n_layers\":\t4,\n"
    "\t\t\"n_dec_layers\":\t0,\n"
    "\t\t\"hidden\":\t64,\n"
    "\t\t\"heads\":\t4,\n"
    "\t\t\"head_dim\":\t16,\n"
    "\t\t\"ffn\":\t256,\n"
    "\t\t\"vocab\":\t512,\n"
    "\t\t\"max_seqlen\":\t128\n"
    "\t},\n"
    "\t\"tokens\":\t{\n"
    "\t\t\"bos_token_id\":\t258,\n"
    "\t\t\"eos_token_id\":\t258,\n"
    "\t\t\"pad_token_id\":\t256\n"
    "\t},\n"
    "\t\"seed\":\t\"00000000000000a1\",\n"
    "\t\"stages\":\t2,\n"
    "\t\"dp\":\t1,\n"
    "\t\"chunks\":\t1,\n"
    "\t\"stage_first_layer\":\t[0, 3, 6],\n"
    "\t\"data\":\t\"builtin:3\",\n"
    "\t\"samples\":\t2000,\n"
    "\t\"split\":\t0,\n"
    "\t\"global_batch_tokens\":\t2048,\n"
    "\t\"lr_schedule\":\t{\n"
    "\t\t\"lr\":\t0.0010000000474974513,\n"
    "\t\t\"min_lr\":\t9.99999974737875e-05,\n"
    "\t\t\"warmup\":\t0,\n"
    "\t\t\"total_steps\":\t6\n"
    "\t},\n"
    "\t\"order\":\t{\n"
    "\t\t\"shuffle\":\t1,\n"
    "\t\t\"epochs\":\t4,\n"
    "\t\t\"eval_split\":\t0.1,\n"
    "\t\t\"samples_per_epoch\":\t20,\n"
    "\t\t\"epoch\":\t2,\n"
    "\t\t\"index\":\t14,\n"
    "\t\t\"eval_data\":\t\"v.jsonl\"\n"
    "\t},\n"
    "\t\"files\":\t{\n"
    "\t\t\"a.txt\":\t{\n"
    "\t\t\t\"bytes\":\t1,\n"
    "\t\t\t\"fnv1a64\":\t\"44bd8ad473cd9906\"\n"
    "\t\t}\n"
    "\t}\n"
    "}\n";

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/dyn_test_ckpt_state_%ld", (long)getpid());
    if (mkdir(dir, 0777) != 0) return -1;
    char p[512];
    snprintf(p, sizeof p, "%s/a.txt", dir);
    return dyn_file_write_atomic(p, "a", 1, NULL) == DYN_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* STATE with the first `from` replaced by `to` (from must occur). */
static char *edit(const char *from, const char *to)
{
    const char *at = strstr(STATE, from);
    assert_non_null(at);
    size_t n = strlen(STATE) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, "%.*s%s%s", (int)(at - STATE), STATE, to, at + strlen(from));
    return s;
}

/* text through the field table (rt_ckpt_state_from_json): the schema
 * alone, not the layout's file list, which rt_ckpt_read also checks
 * (test_runtime_checkpoint.c). */
static dyn_status read_text(const char *text, rt_ckpt_meta *m, dyn_error *err)
{
    char p[512];
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    cJSON *r = cJSON_Parse(text);
    assert_non_null(r);
    dyn_status st = rt_ckpt_state_from_json(r, p, m, err);
    cJSON_Delete(r);
    return st;
}

static void test_reads_what_was_written(void **state)
{
    (void)state;
    rt_ckpt_meta *m = calloc(1, sizeof *m);
    assert_non_null(m);
    dyn_error err;
    if (read_text(STATE, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(m->step, 3);
    assert_int_equal(m->sampler_pos, 54);
    assert_int_equal(m->model.kind, DYN_MODEL_GPT);
    assert_int_equal(m->model.n_layers, 4);
    assert_int_equal(m->model.n_dec_layers, 0);
    assert_int_equal(m->model.hidden, 64);
    assert_int_equal(m->model.heads, 4);
    assert_int_equal(m->model.head_dim, 16);
    assert_int_equal(m->model.ffn, 256);
    assert_int_equal(m->model.vocab, 512);
    assert_int_equal(m->model.max_seqlen, 128);
    assert_int_equal(m->seed, 0xa1);
    assert_int_equal(m->stages, 2);
    assert_int_equal(m->dp, 1);
    assert_int_equal(m->chunks, 1);
    assert_int_equal(m->n_stages, 2);
    assert_int_equal(m->lay_first[0], 0);
    assert_int_equal(m->lay_first[1], 3);
    assert_int_equal(m->lay_first[2], 6);
    assert_string_equal(m->data_spec, "builtin:3");
    assert_int_equal(m->n_samples, 2000);
    assert_int_equal(m->split, 0);
    assert_int_equal(m->global_batch_tokens, 2048);
    assert_true(m->lr.max_lr == 1e-3f);
    assert_true(m->lr.min_lr == 1e-4f);
    assert_int_equal(m->lr.warmup_steps, 0);
    assert_int_equal(m->lr.total_steps, 6);
    assert_int_equal(m->shuffle, 1);
    assert_int_equal(m->epochs, 4);
    assert_true(m->eval_split == 0.1);
    assert_int_equal(m->per_epoch, 20);
    assert_int_equal(m->epoch, 2);
    assert_int_equal(m->index, 14);
    assert_string_equal(m->eval_data, "v.jsonl");
    assert_int_equal(m->n_files, 1);
    assert_string_equal(m->files[0].name, "a.txt");
    assert_int_equal(m->files[0].bytes, 1);
    /* the hash of "a": (basis ^ 'a') * prime. The basis of format 1 is
     * 1469598103934665603, not FNV's published 14695981039346656037 (a
     * digit short); checkpoints carry it, so it stays. */
    assert_true(m->files[0].fnv == (uint64_t)((1469598103934665603ULL ^ 0x61) * 1099511628211ULL));
    /* and back: the same bytes */
    cJSON *j = rt_ckpt_state_to_json(m);
    assert_non_null(j);
    char *text = cJSON_Print(j);
    assert_non_null(text);
    size_t n = strlen(text);
    assert_int_equal(n + 1, strlen(STATE));
    assert_memory_equal(text, STATE, n);
    free(text);
    cJSON_Delete(j);
    free(m);
}

/* Older checkpoints lack "tokens": the byte vocabulary's ids of the kind
 * (what their config.json says); -1 is a null id; ids out of range are
 * refused. */
static void test_tokens(void **state)
{
    (void)state;
    rt_ckpt_meta *m = calloc(1, sizeof *m);
    assert_non_null(m);
    dyn_error err;
    const char *from = "\t\"tokens\":\t{\n\t\t\"bos_token_id\":\t258,\n\t\t\"eos_token_id\":\t258,\n"
                       "\t\t\"pad_token_id\":\t256\n\t},\n";
    char *text = edit(from, "");
    if (read_text(text, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(m->tokens.bos_id, DYN_TOK_EOS); /* GPT-2's bos = eos */
    assert_int_equal(m->tokens.eos_id, DYN_TOK_EOS);
    assert_int_equal(m->tokens.pad_id, DYN_TOK_PAD);
    free(text);
    text = edit("\"pad_token_id\":\t256", "\"pad_token_id\":\t-1");
    if (read_text(text, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(m->tokens.pad_id, -1);
    free(text);
    text = edit("\"eos_token_id\":\t258", "\"eos_token_id\":\t1e300");
    assert_int_equal(read_text(text, m, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "tokens.eos_token_id"));
    free(text);
    free(m);
}

/* A Llama-family model's fields travel in "llama" (written for that kind
 * only, every digit of the doubles kept) and are required for it. */
static void test_llama_fields(void **state)
{
    (void)state;
    rt_ckpt_meta *m = calloc(1, sizeof *m);
    assert_non_null(m);
    dyn_error err;
    char *text = edit("\"kind\":\t\"gpt\"", "\"kind\":\t\"llama\"");
    assert_int_equal(read_text(text, m, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "\"llama\" missing"));
    free(text);
    /* A GPT checkpoint's state made a Llama's: written and read back. */
    if (read_text(STATE, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    m->model.kind = DYN_MODEL_LLAMA;
    m->model.kv_heads = 2;
    m->model.tie_embeddings = 1;
    m->model.qkv_bias = 1;
    m->model.rms_eps = 1e-5;
    m->model.rope_theta = 500000.0;
    m->model.rope_scaling = DYN_ROPE_LLAMA3;
    m->model.rope_factor = 8.0;
    m->model.rope_low_freq = 1.0;
    m->model.rope_high_freq = 4.0;
    m->model.rope_orig_ctx = 8192;
    cJSON *j = rt_ckpt_state_to_json(m);
    assert_non_null(j);
    rt_ckpt_meta *back = calloc(1, sizeof *back);
    assert_non_null(back);
    char p[512];
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    if (rt_ckpt_state_from_json(j, p, back, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(back->model.kind, DYN_MODEL_LLAMA);
    assert_int_equal(back->model.kv_heads, 2);
    assert_int_equal(back->model.tie_embeddings, 1);
    assert_int_equal(back->model.qkv_bias, 1);
    assert_true(back->model.rms_eps == 1e-5);
    assert_true(back->model.rope_theta == 500000.0);
    assert_int_equal(back->model.rope_scaling, DYN_ROPE_LLAMA3);
    assert_true(back->model.rope_factor == 8.0 && back->model.rope_low_freq == 1.0 &&
                back->model.rope_high_freq == 4.0);
    assert_int_equal(back->model.rope_orig_ctx, 8192);
    cJSON_Delete(j);
    free(back);
    free(m);
}

/* Older checkpoints lack "lr_schedule": total_steps stays 0 (unknown). */
static void test_lr_schedule_optional(void **state)
{
    (void)state;
    rt_ckpt_meta *m = calloc(1, sizeof *m);
    assert_non_null(m);
    const char *from = "\t\"lr_schedule\":\t{\n\t\t\"lr\":\t0.0010000000474974513,\n\t\t\"min_lr\":\t9.99999974737875e-05,\n"
                       "\t\t\"warmup\":\t0,\n\t\t\"total_steps\":\t6\n\t},\n";
    char *text = edit(from, "");
    dyn_error err;
    if (read_text(text, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(m->lr.total_steps, 0);
    assert_true(m->lr.max_lr == 0);
    free(text);
    free(m);
}

/* Older checkpoints lack "order": they trained in dataset order, nothing
 * held out (all 0). */
static void test_order_optional(void **state)
{
    (void)state;
    rt_ckpt_meta *m = calloc(1, sizeof *m);
    assert_non_null(m);
    const char *from = "\t\"order\":\t{\n\t\t\"shuffle\":\t1,\n\t\t\"epochs\":\t4,\n\t\t\"eval_split\":\t0.1,\n"
                       "\t\t\"samples_per_epoch\":\t20,\n\t\t\"epoch\":\t2,\n\t\t\"index\":\t14,\n"
                       "\t\t\"eval_data\":\t\"v.jsonl\"\n\t},\n";
    char *text = edit(from, "");
    dyn_error err;
    if (read_text(text, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(m->shuffle, 0);
    assert_int_equal(m->per_epoch, 0);
    assert_true(m->eval_split == 0);
    assert_int_equal(m->sampler_pos, 54);
    free(text);
    free(m);
}

/* "data_options" (the run's data settings, rt_ckpt_data): absent from an
 * older checkpoint, read as the byte vocabulary's and written back absent;
 * present, read field by field and written back byte for byte; out of range,
 * refused naming the field. */
static const char DATA_OPTIONS[] =
    "\t\"data_options\":\t{\n"
    "\t\t\"truncate\":\t1,\n"
    "\t\t\"tokenizer\":\t\"/m/tokenizer.json\",\n"
    "\t\t\"tokenizer_fnv1a64\":\t\"00000000000000ff\",\n"
    "\t\t\"vocab\":\t300,\n"
    "\t\t\"template\":\t\"Q: {input} A: {target}\",\n"
    "\t\t\"chat_template_fnv1a64\":\t\"0000000000000abc\",\n"
    "\t\t\"pad_token_id\":\t299,\n"
    "\t\t\"bos_token_id\":\t-1,\n"
    "\t\t\"eos_token_id\":\t299,\n"
    "\t\t\"decoder_start_token_id\":\t299\n"
    "\t},\n"
    "\t\"files\":\t{\n";

static void test_data_options(void **state)
{
    (void)state;
    rt_ckpt_meta *m = calloc(1, sizeof *m);
    assert_non_null(m);
    dyn_error err;
    if (read_text(STATE, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(m->data.recorded, 0);
    assert_int_equal(m->data.truncate, 0);
    assert_string_equal(m->data.tokenizer, "bytes");
    assert_string_equal(m->data.template_str, "");
    assert_int_equal(m->data.sp.pad, DYN_TOK_PAD);
    assert_int_equal(m->data.sp.eos, DYN_TOK_EOS);
    assert_int_equal(m->data.sp.decoder_start, DYN_TOK_BOS);
    char *text = edit("\t\"files\":\t{\n", DATA_OPTIONS);
    if (read_text(text, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_int_equal(m->data.recorded, 1);
    assert_int_equal(m->data.truncate, 1);
    assert_string_equal(m->data.tokenizer, "/m/tokenizer.json");
    assert_true(m->data.tokenizer_fnv == 0xff);
    assert_int_equal(m->data.vocab, 300);
    assert_string_equal(m->data.template_str, "Q: {input} A: {target}");
    assert_true(m->data.chat_fnv == 0xabc);
    assert_int_equal(m->data.sp.pad, 299);
    assert_int_equal(m->data.sp.bos, -1);
    assert_int_equal(m->data.sp.eos, 299);
    assert_int_equal(m->data.sp.decoder_start, 299);
    cJSON *j = rt_ckpt_state_to_json(m);
    assert_non_null(j);
    char *back = cJSON_Print(j);
    assert_non_null(back);
    assert_int_equal(strlen(back) + 1, strlen(text));
    assert_memory_equal(back, text, strlen(back));
    free(back);
    cJSON_Delete(j);
    /* a checkpoint from the same run compares equal; each setting changed is named */
    rt_ckpt_data run = m->data;
    assert_int_equal(rt_ckpt_data_check(&m->data, &run, &err), DYN_OK);
    run.truncate = 0;
    assert_int_equal(rt_ckpt_data_check(&m->data, &run, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "--truncate"));
    run = m->data;
    snprintf(run.template_str, sizeof run.template_str, "%s", "{input}{target}");
    assert_int_equal(rt_ckpt_data_check(&m->data, &run, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "--template"));
    run = m->data;
    run.tokenizer_fnv = 1;
    assert_int_equal(rt_ckpt_data_check(&m->data, &run, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "not the file the checkpoint was trained with"));
    run = m->data;
    run.chat_fnv = 0;
    assert_int_equal(rt_ckpt_data_check(&m->data, &run, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "its folder has no chat template"));
    run = m->data;
    run.sp.eos = 3;
    assert_int_equal(rt_ckpt_data_check(&m->data, &run, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "special ids"));
    free(text);
    /* a checkpoint from before chat templates were recorded: none */
    char *old = edit("\t\"files\":\t{\n", DATA_OPTIONS);
    char *field = strstr(old, "\t\t\"chat_template_fnv1a64\"");
    assert_non_null(field);
    memmove(field, strchr(field, '\n') + 1, strlen(strchr(field, '\n') + 1) + 1);
    if (read_text(old, m, &err) != DYN_OK) fail_msg("%s", err.msg);
    assert_true(m->data.recorded == 1 && m->data.chat_fnv == 0);
    free(old);
    /* out of range: named */
    static const struct { const char *from, *to, *needle; } bad[] = {
        {"\"truncate\":\t1", "\"truncate\":\t2", "\"data_options.truncate\""},
        {"\"vocab\":\t300", "\"vocab\":\t1e300", "\"data_options.vocab\""},
        {"\"eos_token_id\":\t299", "\"eos_token_id\":\t-2", "\"data_options.eos_token_id\""},
        {"\"tokenizer\":\t\"/m/tokenizer.json\"", "\"tokenizer\":\t3", "\"data_options.tokenizer\""},
    };
    char *with = edit("\t\"files\":\t{\n", DATA_OPTIONS);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *at = strstr(with, bad[i].from);
        assert_non_null(at);
        size_t n = strlen(with) + strlen(bad[i].to) + 1;
        char *t = malloc(n);
        assert_non_null(t);
        snprintf(t, n, "%.*s%s%s", (int)(at - with), with, bad[i].to, at + strlen(bad[i].from));
        assert_int_equal(read_text(t, m, &err), DYN_ERR_CORRUPT);
        if (strstr(err.msg, bad[i].needle) == NULL) fail_msg("'%s': %s", bad[i].to, err.msg);
        free(t);
    }
    free(with);
    free(m);
}

static void test_refuses_out_of_range(void **state)
{
    (void)state;
    static const struct { const char *from, *to, *needle; } cases[] = {
        {"\"format\":\t1", "\"format\":\t2", "checkpoint format 2"},
        {"\"format\":\t1", "\"format\":\t1e300", "\"format\""},
        {"\"step\":\t3", "\"step\":\t1e300", "\"step\""},
        {"\"step\":\t3", "\"step\":\t-1", "\"step\""},
        {"\"step\":\t3", "\"step\":\t\"3\"", "\"step\""},
        {"\"sampler_position\":\t54", "\"sampler_position\":\t1e300", "\"sampler_position\""},
        {"\"kind\":\t\"gpt\"", "\"kind\":\t\"llama9\"", "\"model.kind\""},
        {"\"n_layers\":\t4", "\"n_layers\":\t1e300", "\"model.n_layers\""},
        {"\"n_layers\":\t4", "\"n_layers\":\t-1e300", "\"model.n_layers\""},
        {"\"hidden\":\t64", "\"hidden\":\t64.5", "\"model.hidden\""},
        {"\"max_seqlen\":\t128", "\"max_seqlen\":\t1e300", "\"model.max_seqlen\""},
        {"\"seed\":\t\"00000000000000a1\"", "\"seed\":\t1", "\"seed\""},
        {"\"stages\":\t2", "\"stages\":\t1e300", "\"stages\""},
        {"\"dp\":\t1", "\"dp\":\t0", "\"dp\""},
        {"\"chunks\":\t1", "\"chunks\":\t1e300", "\"chunks\""},
        {"[0, 3, 6]", "[0, 1e300, 6]", "\"stage_first_layer[1]\""},
        {"[0, 3, 6]", "[0, 3, -6]", "\"stage_first_layer[2]\""},
        {"[0, 3, 6]", "[0, 3.5, 6]", "\"stage_first_layer[1]\""},
        {"[0, 3, 6]", "[0, 6]", "stage_first_layer"},
        {"\"samples\":\t2000", "\"samples\":\t1e300", "\"samples\""},
        {"\"split\":\t0", "\"split\":\t2", "\"split\""},
        {"\"global_batch_tokens\":\t2048", "\"global_batch_tokens\":\t1e300", "\"global_batch_tokens\""},
        {"\"lr\":\t0.0010000000474974513", "\"lr\":\t1e300", "\"lr_schedule.lr\""},
        {"\"min_lr\":\t9.99999974737875e-05", "\"min_lr\":\t-1", "\"lr_schedule.min_lr\""},
        {"\"warmup\":\t0", "\"warmup\":\t1e300", "\"lr_schedule.warmup\""},
        {"\t\t\"warmup\":\t0,\n", "", "\"lr_schedule.warmup\""},
        {"\"total_steps\":\t6", "\"total_steps\":\t1e300", "\"lr_schedule.total_steps\""},
        {"\"bytes\":\t1,", "\"bytes\":\t1e300,", "\"files.a.txt.bytes\""},
        {"\"bytes\":\t1,", "\"bytes\":\t-1,", "\"files.a.txt.bytes\""},
        {"\"shuffle\":\t1", "\"shuffle\":\t2", "\"order.shuffle\""},
        {"\"epochs\":\t4", "\"epochs\":\t-1", "\"order.epochs\""},
        {"\"eval_split\":\t0.1", "\"eval_split\":\t1", "\"order.eval_split\""},
        {"\"eval_split\":\t0.1", "\"eval_split\":\t1e300", "\"order.eval_split\""},
        {"\"samples_per_epoch\":\t20", "\"samples_per_epoch\":\t1e300", "\"order.samples_per_epoch\""},
        {"\t\t\"index\":\t14,\n", "", "\"order.index\""},
        {"\"index\":\t14", "\"index\":\t15", "is not sampler_position 54"},
        {"\"epoch\":\t2", "\"epoch\":\t1", "is not sampler_position 54"},
        {"\"samples_per_epoch\":\t20", "\"samples_per_epoch\":\t21", "is not sampler_position 54"},
    };
    rt_ckpt_meta *m = calloc(1, sizeof *m);
    assert_non_null(m);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = edit(cases[i].from, cases[i].to);
        dyn_error err;
        memset(&err, 0, sizeof err);
        dyn_status st = read_text(text, m, &err);
        if (st != DYN_ERR_CORRUPT || strstr(err.msg, cases[i].needle) == NULL ||
            strstr(err.msg, "trainer_state.json") == NULL || strchr(err.msg, '\n') != NULL)
            fail_msg("%s -> %s: status %d, '%s' (wanted one line naming %s)", cases[i].from, cases[i].to, (int)st,
                     err.msg, cases[i].needle);
        free(text);
    }
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_what_was_written),
        cmocka_unit_test(test_lr_schedule_optional),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_llama_fields),
        cmocka_unit_test(test_order_optional),
        cmocka_unit_test(test_data_options),
        cmocka_unit_test(test_refuses_out_of_range),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
