/* test_cli_plan.c — `dynapipe plan` as a user runs it: the built binary
 * (env DYN_CLI) on good and bad input. Bad input must give exit 1 (runtime)
 * or 2 (usage), exactly one line "dynapipe plan: ..." on stderr, and leave
 * no JSON file (nor a temporary one) behind. A good run's JSON is parsed
 * with cJSON and checked against its documented structure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dynapipe/cost.h"         /* defines: dyn_cost_table_write_from_model */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "dynapipe/sched.h"        /* defines: dyn_exec_plan_deserialize, dyn_exec_plan_validate */
#include "cli_testlib.h"           /* defines: cli_run, slurp, write_file, dir, out_path, err_path */

static char json_path[600];

static int setup(void **state)
{
    (void)state;
    if (cli_setup_dir() != 0) return -1;
    snprintf(json_path, sizeof json_path, "%s/plan.json", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

/* Run `$DYN_CLI plan <args>`; returns its exit status. */
static int run_plan(const char *args) { return cli_run("plan", args); }

/* Only plain files the test made may be in dir: no JSON, no temporary. */
static void assert_no_json_left(void)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) assert_null(strstr(e->d_name, "plan.json"));
    closedir(d);
}

/* Expect exit `code`, one stderr line starting "dynapipe plan: " and
 * containing `needle`, and no JSON. */
static void expect_error(const char *args, int code, const char *needle)
{
    char full[3000];
    snprintf(full, sizeof full, "%s --json '%s'", args, json_path);
    cli_assert_one_line_error("plan", args, run_plan(full), code, needle);
    assert_no_json_left();
}

/* --machine cpu: the built-in's figures, and no measurement (--machine auto,
 * the default, is tests/test_machine_auto.c's) */
#define BASE "--model gpt --model-config gpt-tiny --global-batch-tokens 4096 --max-seqlen 256 --stages 2 --machine cpu"

static void test_help(void **state)
{
    (void)state;
    assert_int_equal(run_plan("--help"), 0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "usage: dynapipe plan"));
    assert_non_null(strstr(out, "--global-batch-tokens"));
    assert_non_null(strstr(out, "--method"));
    free(out);
}

static void test_bad_files(void **state)
{
    (void)state;
    char path[700], cmd[2000];
    snprintf(cmd, sizeof cmd, BASE " --lengths '%s/missing.tsv'", dir);
    expect_error(cmd, 1, "missing.tsv");
    write_file("bad.tsv", "# lengths\ninput\ttarget\n10\t5\n12\tx\n", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --lengths '%s'", path);
    expect_error(cmd, 1, "bad.tsv:4");
    write_file("zero.tsv", "10\t5\n0\t3\n", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --lengths '%s'", path);
    expect_error(cmd, 1, "zero.tsv:2");
    write_file("neg.tsv", "10\t5\n7\t-3\n", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --lengths '%s'", path);
    expect_error(cmd, 1, "neg.tsv:2");
    write_file("few.tsv", "10\n", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --lengths '%s'", path);
    expect_error(cmd, 1, "few.tsv:1");
    /* over --max-seqlen: error, or clipped with --clip */
    write_file("long.tsv", "10\t5\n250\t20\n", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --lengths '%s'", path);
    expect_error(cmd, 1, "long.tsv:2");
    snprintf(cmd, sizeof cmd, BASE " --lengths '%s' --clip", path);
    assert_int_equal(run_plan(cmd), 0);
    /* a directory is not a readable file */
    snprintf(cmd, sizeof cmd, BASE " --lengths '%s'", dir);
    expect_error(cmd, 1, dir);
}

static void test_bad_flags(void **state)
{
    (void)state;
    expect_error(BASE " --synthetic flan --bogus", 2, "--bogus");
    expect_error(BASE " --synthetic flan --method magic", 2, "magic");
    expect_error(BASE " --synthetic flan --recompute sometimes", 2, "sometimes");
    expect_error(BASE " --synthetic flan --dp zero", 2, "--dp");
    expect_error(BASE " --synthetic flan --dp 0", 2, "--dp");
    expect_error(BASE " --synthetic flan --memory-limit -5", 2, "--memory-limit");
    expect_error(BASE " --synthetic flan --stages", 2, "--stages");
    expect_error(BASE " --synthetic zipf", 2, "zipf");
    expect_error(BASE " --synthetic flan:abc", 2, "abc");
    expect_error("--model gpt --synthetic flan --max-seqlen 256 --stages 2", 2,
                 "--global-batch-tokens");
    expect_error("--model bert --global-batch-tokens 4096 --max-seqlen 256 --stages 2 --synthetic flan",
                 2, "bert");
    expect_error(BASE, 2, "--lengths");
    expect_error(BASE " --synthetic flan --model-config t5-tiny", 2, "t5");
    expect_error(BASE " --synthetic flan --model-config nosuchpreset", 1, "nosuchpreset");
    expect_error(BASE " --synthetic flan --machine nosuchmachine", 1, "nosuchmachine");
    expect_error(BASE " --synthetic flan --stages 9", 2, "9 pipeline stages");
}

/* Flags that contradict each other or the model, sizes that cannot be
 * planned, and the messages that must say which flag or file is wrong. */
static void test_contradictions_and_limits(void **state)
{
    (void)state;
    char cmd[2000], path[700];
#define NOSHAPE "--model gpt --global-batch-tokens 4096 --max-seqlen 256 --stages 2"
    /* A cost table brings its own model and machine. */
    expect_error(NOSHAPE " --synthetic flan --cost-model t.tsv --machine missing.json", 2, "--machine contradicts");
    /* Shape flags may restate the table's shape, not name another. */
    const char *src = getenv("DYN_SOURCE_DIR");
    assert_non_null(src);
    snprintf(cmd, sizeof cmd, NOSHAPE " --synthetic flan --cost-model %s/docs/examples/gpt-tiny-cpu-cost.tsv --layers 4",
             src);
    expect_error(cmd, 2, "another shape");
    snprintf(cmd, sizeof cmd,
             NOSHAPE " --synthetic flan --cost-model %s/docs/examples/gpt-tiny-cpu-cost.tsv --model-config gpt2-124m", src);
    expect_error(cmd, 2, "another shape");
    snprintf(cmd, sizeof cmd,
             NOSHAPE " --synthetic flan --cost-model %s/docs/examples/gpt-tiny-cpu-cost.tsv --model-config gpt-tiny --batches 1",
             src);
    assert_int_equal(cli_run("plan", cmd), 0);
    /* More chunks than the model has layers, and interleaved without chunks. */
    expect_error(BASE " --synthetic flan --model-config gpt-tiny --chunks 4", 2, "only 2 layers");
    expect_error(BASE " --synthetic flan --model-config gpt-tiny --schedule interleaved", 1, "--chunks 2");
    /* --hidden alone names --heads. */
    expect_error(NOSHAPE " --synthetic flan --hidden 256", 2, "--heads");
    /* A budget no machine could draw. */
    expect_error("--model gpt --synthetic flan --global-batch-tokens 34359738368 --max-seqlen 256 --stages 2", 2,
                 "--global-batch-tokens");
    /* Model dimensions whose products overflow. */
    write_file("huge.json",
               "{\"kind\": \"gpt\", \"n_layers\": 2, \"hidden\": 1500000000, \"heads\": 1,\n"
               " \"ffn\": 64, \"vocab\": 100, \"max_seqlen\": 256}\n",
               path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --synthetic flan --model-config '%s'", path);
    expect_error(cmd, 1, "hidden = 1500000000 is above the limit");
    /* A bad preset inside a model file names the file. */
    write_file("preset.json", "{\"preset\": \"gpt-huge\"}", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --synthetic flan --model-config '%s'", path);
    expect_error(cmd, 1, "preset.json: unknown model preset");
    /* JSON syntax errors give the line and column; trailing text and
     * duplicate keys are refused. */
    write_file("syntax.json", "{\"kind\": \"gpt\",\n  \"n_layers\": 2 2}\n", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --synthetic flan --model-config '%s'", path);
    expect_error(cmd, 1, "line 2, column 17");
    write_file("trail.json", "{\"base\": \"cpu\"}\n}", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --synthetic flan --model-config gpt-tiny --machine '%s'", path);
    expect_error(cmd, 1, "line 2, column 1: text after");
    write_file("dup.json", "{\"base\": \"cpu\", \"mem_gbps\": 5, \"mem_gbps\": 50}", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --synthetic flan --model-config gpt-tiny --machine '%s'", path);
    expect_error(cmd, 1, "\"mem_gbps\" appears twice");
    /* Over-long samples name --clip. */
    write_file("long.tsv", "300\t10\n", path, sizeof path);
    snprintf(cmd, sizeof cmd, BASE " --model-config gpt-tiny --lengths '%s'", path);
    expect_error(cmd, 1, "give --clip");
}

/* The shipped example cost table plans the shipped lengths. */
static void test_example_cost_table(void **state)
{
    (void)state;
    const char *src = getenv("DYN_SOURCE_DIR");
    assert_non_null(src);
    char cmd[2000];
    snprintf(cmd, sizeof cmd,
             "--model gpt --cost-model '%s/docs/examples/gpt-tiny-cpu-cost.tsv' --lengths '%s/docs/examples/lengths.tsv' "
             "--clip --global-batch-tokens 4096 --max-seqlen 512 --stages 2 --quiet",
             src, src);
    assert_int_equal(run_plan(cmd), 0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "hidden 64"));
    assert_non_null(strstr(out, "total: "));
    free(out);
}

/* GPT lengths with no target, read from standard input. */
static void test_gpt_zero_target_from_stdin(void **state)
{
    (void)state;
    char cmd[2000], path[700];
    write_file("zero.tsv", "input_len\ttarget_len\n100\t0\n50\t0\n", path, sizeof path);
    snprintf(cmd, sizeof cmd,
             "--model gpt --model-config gpt-tiny --lengths - --global-batch-tokens 200 --max-seqlen 128 "
             "--stages 1 --json '%s' < '%s'",
             json_path, path);
    assert_int_equal(run_plan(cmd), 0);
    char *text = slurp(json_path);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *gb = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "global_batches"), 0);
    assert_non_null(gb);
    assert_int_equal(cJSON_GetObjectItem(gb, "n_samples")->valueint, 2);
    assert_int_equal(cJSON_GetObjectItem(gb, "real_tokens")->valueint, 150);
    cJSON_Delete(root);
    free(text);
    remove(json_path);
    /* T5 still needs a target. */
    snprintf(cmd, sizeof cmd,
             "--model t5 --model-config t5-tiny --lengths '%s' --global-batch-tokens 200 --max-seqlen 128 "
             "--stages 1",
             path);
    expect_error(cmd, 1, "target_len 0 must be positive");
}

static void test_impossible_memory(void **state)
{
    (void)state;
    /* below the model states */
    expect_error(BASE " --synthetic flan --model-config gpt2-124m --memory-limit 100", 1,
                 "model states");
    /* room for the states but not for the longest sample */
    char path[700], cmd[2000];
    write_file("one.tsv", "16\t8\n200\t50\n", path, sizeof path);
    snprintf(cmd, sizeof cmd,
             "--model gpt --model-config gpt2-124m --global-batch-tokens 4096 --max-seqlen 256 "
             "--stages 2 --lengths '%s' --memory-limit 1300 --machine cpu",
             path);
    expect_error(cmd, 1, "sample 1 ");
}

static void test_json_structure(void **state)
{
    (void)state;
    char args[2000];
    /* GPT, T5 and Llama (decoder-only: one length per micro-batch, as GPT) */
    const char *kinds[3] = {"gpt", "t5", "llama"}, *configs[3] = {"gpt-tiny", "t5-tiny", "llama-tiny"};
    for (int k = 0; k < 3; k++) {
        int t5 = k == 1;
        snprintf(args, sizeof args,
                 "--model %s --model-config %s --synthetic flan:3 --global-batch-tokens 8192 "
                 "--max-seqlen 256 --stages 2 --dp 2 --batches 3 --json '%s'",
                 kinds[k], configs[k], json_path);
        assert_int_equal(run_plan(args), 0);
        char *out = slurp(out_path);
        assert_non_null(strstr(out, "global batch 2:"));
        assert_non_null(strstr(out, "total: 3 global batches"));
        free(out);
        char *text = slurp(json_path);
        cJSON *root = cJSON_Parse(text);
        free(text);
        assert_non_null(root);
        cJSON *gbs = cJSON_GetObjectItemCaseSensitive(root, "global_batches");
        assert_true(cJSON_IsArray(gbs));
        assert_int_equal(cJSON_GetArraySize(gbs), 3);
        int first_id = 0;
        cJSON *gb;
        cJSON_ArrayForEach(gb, gbs) {
            cJSON *n = cJSON_GetObjectItemCaseSensitive(gb, "n_samples");
            assert_true(cJSON_IsNumber(n));
            assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(gb, "objective_ms")));
            assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(gb, "plan_time_ms")));
            int count = n->valueint;
            char *seen = calloc((size_t)count, 1);
            assert_non_null(seen);
            cJSON *mbs = cJSON_GetObjectItemCaseSensitive(gb, "microbatches"), *mb;
            assert_true(cJSON_IsArray(mbs));
            assert_true(cJSON_GetArraySize(mbs) >= 1);
            cJSON_ArrayForEach(mb, mbs) {
                cJSON *ids = cJSON_GetObjectItemCaseSensitive(mb, "samples"), *id;
                cJSON *in = cJSON_GetObjectItemCaseSensitive(mb, "input_len");
                cJSON *tg = cJSON_GetObjectItemCaseSensitive(mb, "target_len");
                assert_true(cJSON_IsArray(ids) && cJSON_IsNumber(in) && cJSON_IsNumber(tg));
                assert_true(in->valueint % 8 == 0 && in->valueint > 0 && in->valueint <= 256);
                if (t5) assert_true(tg->valueint % 8 == 0 && tg->valueint > 0);
                else assert_int_equal(tg->valueint, 0);
                assert_true(cJSON_GetObjectItemCaseSensitive(mb, "time_ms")->valuedouble > 0);
                assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(mb, "stored_mb")));
                assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(mb, "peak_mb")));
                cJSON_ArrayForEach(id, ids) {
                    /* batches are consecutive samples: ids first_id .. first_id+count-1 */
                    int k = id->valueint - first_id;
                    assert_true(k >= 0 && k < count);
                    assert_int_equal(seen[k], 0);
                    seen[k] = 1;
                }
            }
            for (int k = 0; k < count; k++) assert_int_equal(seen[k], 1);
            free(seen);
            first_id += count;
        }
        cJSON_Delete(root);
    }
}

static void test_every_method_runs(void **state)
{
    (void)state;
    const char *methods[] = {"dynapipe", "padding", "packing", "packing-docmask", "token"};
    char args[1000];
    for (int m = 0; m < 5; m++) {
        snprintf(args, sizeof args, BASE " --synthetic flan --batches 2 --method %s --quiet", methods[m]);
        assert_int_equal(run_plan(args), 0);
    }
    assert_int_equal(run_plan(BASE " --synthetic flan --batches 1 --verbose"), 0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "stored_mb"));
    free(out);
    assert_int_equal(run_plan(BASE " --synthetic flan --batches 1"), 0);
    out = slurp(out_path);
    assert_non_null(strstr(out, "shapes (rows x length):"));
    free(out);
    /* knobs */
    assert_int_equal(run_plan(BASE " --synthetic flan --batches 1 --method padding --mb-samples 4"), 0);
    assert_int_equal(run_plan(BASE " --synthetic flan --batches 1 --method packing --pack-rows 2"), 0);
    assert_int_equal(run_plan(BASE " --synthetic flan --batches 1 --method token --mb-tokens 1024"), 0);
}

/* A cost table written from the analytic model, a model JSON file, and a
 * malformed table. */
static void test_cost_table_and_model_files(void **state)
{
    (void)state;
    dyn_error err;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt-tiny", &cfg, &err), DYN_OK);
    cfg.max_seqlen = 256;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    int32_t rows[] = {1, 2, 4, 8, 16, 32, 64}, enc[] = {8, 16, 32, 64, 128, 256}, dec[] = {0};
    dyn_cost_grid g = {7, 6, 1, rows, enc, dec};
    char table[700], cmd[2000], path[700];
    snprintf(table, sizeof table, "%s/gpt.table", dir);
    assert_int_equal(dyn_cost_table_write_from_model(table, cm, &g, &err), DYN_OK);
    dyn_cost_model_free(cm);
    snprintf(cmd, sizeof cmd,
             "--model gpt --cost-model '%s' --synthetic flan --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 2 --json '%s'",
             table, json_path);
    assert_int_equal(run_plan(cmd), 0);
    char *text = slurp(json_path);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "global_batches")), 4);
    cJSON_Delete(root);
    remove(json_path);
    snprintf(cmd, sizeof cmd,
             "--model t5 --cost-model '%s' --synthetic flan --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 2",
             table);
    expect_error(cmd, 2, "does not match");
    write_file("bad.table", "dynapipe-cost-table 1\nmodel kind=gpt\n", path, sizeof path);
    snprintf(cmd, sizeof cmd,
             "--model gpt --cost-model '%s' --synthetic flan --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 2",
             path);
    expect_error(cmd, 1, "bad.table");
    write_file("model.json", "{\"preset\": \"gpt-tiny\", \"n_layers\": 4}", path, sizeof path);
    snprintf(cmd, sizeof cmd,
             "--model gpt --model-config '%s' --synthetic flan --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 4 --quiet",
             path);
    assert_int_equal(run_plan(cmd), 0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "(4 layers"));
    free(out);
}

/* --model llama: a real shape on the a100 (128,256-token vocabulary), a
 * model JSON of kind llama, a Llama cost table (its model line carries
 * kv_heads etc.: a table of another kv_heads is another shape), and the
 * kind mismatches, each one line. */
static void test_llama(void **state)
{
    (void)state;
    char cmd[2000], path[700], table[700];
    assert_int_equal(run_plan("--model llama --model-config llama3-8b --machine a100 --synthetic flan "
                              "--global-batch-tokens 65536 --max-seqlen 4096 --stages 8 --batches 1 --quiet"),
                     0);
    char *out = slurp(out_path);
    assert_non_null(strstr(out, "llama model (32 layers, hidden 4096)"));
    free(out);
    write_file("llama.json", "{\"preset\": \"llama-tiny\", \"n_layers\": 4, \"kv_heads\": 4, \"tie_embeddings\": true}",
               path, sizeof path);
    snprintf(cmd, sizeof cmd,
             "--model llama --model-config '%s' --machine cpu --synthetic flan --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 4 --quiet",
             path);
    assert_int_equal(run_plan(cmd), 0);
    out = slurp(out_path);
    assert_non_null(strstr(out, "llama model (4 layers"));
    free(out);
    snprintf(cmd, sizeof cmd,
             "--model gpt --model-config '%s' --machine cpu --synthetic flan --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 2",
             path);
    expect_error(cmd, 2, "does not match");
    expect_error("--model llama --model-config gpt-tiny --machine cpu --synthetic flan --global-batch-tokens 4096 "
                 "--max-seqlen 256 --stages 2",
                 2, "does not match");
    expect_error("--model llama --model-config llama-tiny --machine cpu --synthetic flan --global-batch-tokens 4096 "
                 "--max-seqlen 256 --stages 2 --heads 1",
                 2, "kv_heads = 2 must divide heads = 1");

    /* a Llama cost table */
    dyn_error err;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("llama-tiny", &cfg, &err), DYN_OK);
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("cpu"), &err);
    assert_non_null(cm);
    int32_t rows[] = {1, 4, 16, 64}, enc[] = {8, 32, 128, 256}, dec[] = {0};
    dyn_cost_grid g = {4, 4, 1, rows, enc, dec};
    snprintf(table, sizeof table, "%s/llama.table", dir);
    assert_int_equal(dyn_cost_table_write_from_model(table, cm, &g, &err), DYN_OK);
    dyn_cost_model_free(cm);
    snprintf(cmd, sizeof cmd,
             "--model llama --cost-model '%s' --synthetic flan --global-batch-tokens 4096 --max-seqlen 256 "
             "--stages 2 --model-config llama-tiny --quiet",
             table);
    assert_int_equal(run_plan(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "--model gpt --cost-model '%s' --synthetic flan --global-batch-tokens 4096 --max-seqlen 256 --stages 2",
             table);
    expect_error(cmd, 2, "does not match");
    write_file("llama-kv.json", "{\"preset\": \"llama-tiny\", \"kv_heads\": 4}", path, sizeof path);
    snprintf(cmd, sizeof cmd,
             "--model llama --cost-model '%s' --model-config '%s' --synthetic flan --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 2",
             table, path);
    expect_error(cmd, 2, "kv_heads=2 tie_embeddings=0 qkv_bias=0, the run wants kv_heads=4");
}

/* Count lines of text that start with prefix. */
static int count_lines_starting(const char *text, const char *prefix)
{
    int n = 0;
    size_t plen = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, prefix, plen) == 0) n++;
    return n;
}

/* --plan-out writes one binary plan per global batch and replica that parses
 * and validates; --show-plan prints the same plan, one line per instruction. */
static void test_show_and_write_execution_plans(void **state)
{
    (void)state;
    char prefix[700], cmd[2048];
    snprintf(prefix, sizeof prefix, "%s/run", dir);
    snprintf(cmd, sizeof cmd,
             "--model gpt --model-config gpt-tiny --synthetic flan:3 --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 2 --dp 2 --batches 2 --quiet --schedule 1f1b --show-plan "
             "--plan-out '%s'",
             prefix);
    assert_int_equal(run_plan(cmd), 0);
    char *out = slurp(out_path);
    int shown = count_lines_starting(out, "  r");
    int total = 0;
    for (int b = 0; b < 2; b++) {
        for (int r = 0; r < 2; r++) {
            char path[800];
            snprintf(path, sizeof path, "%s.%d.%d.dynplan", prefix, b, r);
            char *bytes = NULL;
            size_t len = 0;
            assert_int_equal(dyn_file_read_all(path, &bytes, &len, NULL), DYN_OK);
            dyn_exec_plan plan;
            dyn_error err;
            assert_int_equal(dyn_exec_plan_deserialize((const uint8_t *)bytes, len, &plan, &err), DYN_OK);
            assert_int_equal(dyn_exec_plan_validate(&plan, &err), DYN_OK);
            assert_int_equal(plan.schedule, DYN_SCHEDULE_1F1B);
            assert_int_equal(plan.replica, r);
            assert_int_equal(plan.n_ranks, 2);
            for (int32_t k = 0; k < plan.n_ranks; k++) total += plan.ranks[k].n_instrs;
            dyn_exec_plan_free(&plan);
            free(bytes);
        }
    }
    assert_true(total > 0);
    assert_int_equal(shown, total);
    free(out);
    expect_error("--model gpt --synthetic flan --global-batch-tokens 4096 --max-seqlen 256 --stages 2 "
                 "--schedule fastest",
                 2, "unknown schedule");
}

/* With execution plans, the JSON maps every plan micro-batch back to the
 * batch's "microbatches" entry (its sample ids): each replica plan lists
 * its own replica's micro-batches, every one exactly once, and the shapes
 * agree with the binary plan written beside it. */
static void test_json_replica_plans(void **state)
{
    (void)state;
    char prefix[700], cmd[2048];
    snprintf(prefix, sizeof prefix, "%s/map", dir);
    snprintf(cmd, sizeof cmd,
             "--model gpt --model-config gpt-tiny --synthetic flan:5 --global-batch-tokens 8192 "
             "--max-seqlen 256 --stages 2 --dp 2 --batches 2 --quiet --schedule auto --plan-out '%s' "
             "--json '%s'",
             prefix, json_path);
    assert_int_equal(run_plan(cmd), 0);
    char *text = slurp(json_path);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *batches = cJSON_GetObjectItem(root, "global_batches");
    assert_int_equal(cJSON_GetArraySize(batches), 2);
    for (int b = 0; b < 2; b++) {
        const cJSON *gb = cJSON_GetArrayItem(batches, b);
        const cJSON *mbs = cJSON_GetObjectItem(gb, "microbatches");
        const cJSON *rps = cJSON_GetObjectItem(gb, "replica_plans");
        int n_mbs = cJSON_GetArraySize(mbs);
        assert_int_equal(cJSON_GetArraySize(rps), 2);
        int seen[512] = {0};
        assert_true(n_mbs > 0 && n_mbs <= 512);
        for (int r = 0; r < 2; r++) {
            const cJSON *rp = cJSON_GetArrayItem(rps, r);
            assert_int_equal(cJSON_GetObjectItem(rp, "replica")->valueint, r);
            assert_true(cJSON_GetObjectItem(rp, "makespan_ms")->valuedouble > 0);
            dyn_schedule kind;
            assert_int_equal(dyn_schedule_parse(cJSON_GetObjectItem(rp, "schedule")->valuestring, &kind, NULL), DYN_OK);
            char path[800];
            snprintf(path, sizeof path, "%s.%d.%d.dynplan", prefix, b, r);
            char *bytes = NULL;
            size_t len = 0;
            dyn_exec_plan plan;
            assert_int_equal(dyn_file_read_all(path, &bytes, &len, NULL), DYN_OK);
            assert_int_equal(dyn_exec_plan_deserialize((const uint8_t *)bytes, len, &plan, NULL), DYN_OK);
            assert_int_equal((int)plan.schedule, (int)kind);
            const cJSON *idx = cJSON_GetObjectItem(rp, "microbatches");
            assert_int_equal(cJSON_GetArraySize(idx), plan.n_microbatches);
            for (int j = 0; j < plan.n_microbatches; j++) {
                int k = cJSON_GetArrayItem(idx, j)->valueint;
                assert_true(k >= 0 && k < n_mbs);
                const cJSON *mb = cJSON_GetArrayItem(mbs, k);
                assert_int_equal(cJSON_GetObjectItem(mb, "replica")->valueint, r);
                assert_int_equal(cJSON_GetObjectItem(mb, "rows")->valueint, plan.mb_shape[j].rows);
                assert_int_equal(cJSON_GetObjectItem(mb, "input_len")->valueint, plan.mb_shape[j].enc_len);
                seen[k]++;
            }
            dyn_exec_plan_free(&plan);
            free(bytes);
        }
        for (int k = 0; k < n_mbs; k++) assert_int_equal(seen[k], 1);
    }
    cJSON_Delete(root);
    free(text);
    remove(json_path);
}

/* Every output of a run appears only if the whole run succeeds: plans of
 * the first batches are not left behind when the --json path fails at the
 * end; and a character device given as --json is written, not replaced. */
static void test_outputs_all_or_nothing(void **state)
{
    (void)state;
    char prefix[700], cmd[2048];
    snprintf(prefix, sizeof prefix, "%s/partial", dir);
    snprintf(cmd, sizeof cmd,
             "--model gpt --model-config gpt-tiny --synthetic flan:3 --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 2 --batches 2 --quiet --schedule 1f1b --machine cpu --plan-out '%s' "
             "--json '%s/no/such/dir/out.json'",
             prefix, dir);
    cli_assert_one_line_error("plan", cmd, run_plan(cmd), 1, "out.json");
    char path[800];
    snprintf(path, sizeof path, "%s.0.0.dynplan", prefix);
    assert_int_not_equal(access(path, F_OK), 0);
    assert_no_json_left();

    snprintf(cmd, sizeof cmd,
             "--model gpt --model-config gpt-tiny --synthetic flan:3 --global-batch-tokens 4096 "
             "--max-seqlen 256 --stages 2 --batches 1 --quiet --json /dev/null");
    assert_int_equal(run_plan(cmd), 0);
    struct stat sb;
    assert_int_equal(stat("/dev/null", &sb), 0);
    assert_true(S_ISCHR(sb.st_mode));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_contradictions_and_limits),
        cmocka_unit_test(test_gpt_zero_target_from_stdin),
        cmocka_unit_test(test_example_cost_table),
        cmocka_unit_test(test_impossible_memory),
        cmocka_unit_test(test_json_structure),
        cmocka_unit_test(test_json_replica_plans),
        cmocka_unit_test(test_every_method_runs),
        cmocka_unit_test(test_cost_table_and_model_files),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_show_and_write_execution_plans),
        cmocka_unit_test(test_outputs_all_or_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
