/* test_cli_json.c — the numbers `dynapipe plan --json` writes read back as
 * exactly the doubles the library computes: the command's JSON for
 * docs/examples/lengths.tsv, parsed with cJSON (strtod), against the same
 * file planned in this process with the same options, compared with ==.
 * cJSON alone prints 15 significant digits whenever they come within one
 * DBL_EPSILON, which loses the last bits of some of these values (the
 * Python binding's tests rely on the JSON being exact). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/cost.h"         /* defines: dyn_cost_model_create_analytic, dyn_machine_builtin */
#include "dynapipe/data.h"         /* defines: dyn_dataset_read_tsv */
#include "dynapipe/model_config.h" /* defines: dyn_model_config_preset */
#include "dynapipe/plan.h"         /* defines: dyn_plan_batch_once */
#include "cli_testlib.h"           /* defines: cli_run, cli_assert_one_line_error, slurp, write_file, dir */

static int setup(void **state)
{
    (void)state;
    return cli_setup_dir();
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

static double number(const cJSON *obj, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    assert_true(cJSON_IsNumber(item));
    return item->valuedouble;
}

static void test_numbers_read_back_exactly(void **state)
{
    (void)state;
    const char *src = getenv("DYN_SOURCE_DIR");
    assert_non_null(src);
    char lengths[800], json[700], args[2000];
    snprintf(lengths, sizeof lengths, "%s/docs/examples/lengths.tsv", src);
    snprintf(json, sizeof json, "%s/plan.json", dir);
    /* One global batch: the budget holds the whole file. */
    snprintf(args, sizeof args,
             "--model gpt --model-config gpt2-124m --lengths '%s' --max-seqlen 1024 --stages 4 "
             "--machine a100 --global-batch-tokens 1000000 --quiet --json '%s'",
             lengths, json);
    assert_int_equal(cli_run("plan", args), 0);
    char *text = slurp(json);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    const cJSON *batches = cJSON_GetObjectItemCaseSensitive(root, "global_batches");
    assert_int_equal(cJSON_GetArraySize(batches), 1);
    const cJSON *b = cJSON_GetArrayItem(batches, 0);

    dyn_error err;
    dyn_model_config cfg;
    assert_int_equal(dyn_model_config_preset("gpt2-124m", &cfg, &err), DYN_OK);
    cfg.max_seqlen = 1024;
    dyn_cost_model *cm = dyn_cost_model_create_analytic(&cfg, dyn_machine_builtin("a100"), &err);
    assert_non_null(cm);
    dyn_dataset ds = {0};
    assert_int_equal(dyn_dataset_read_tsv(lengths, cfg.max_seqlen, cfg.kind, 0, &ds, &err), DYN_OK);
    dyn_plan_options opt;
    dyn_plan_options_default(&opt);
    opt.stages = 4;
    opt.max_seqlen = cfg.max_seqlen;
    dyn_batch_plan pl;
    assert_int_equal(dyn_plan_batch_once(cm, &opt, ds.samples, ds.n, &pl, &err), DYN_OK);

    assert_true(number(b, "objective_ms") == pl.objective_ms);
    assert_true(number(b, "balanced_ms") == pl.balanced_ms);
    assert_true(number(b, "peak_mb") == pl.device_peak_mb);
    const cJSON *mbs = cJSON_GetObjectItemCaseSensitive(b, "microbatches");
    assert_int_equal(cJSON_GetArraySize(mbs), pl.n_microbatches);
    int32_t m = 0;
    int inexact_at_15 = 0; /* values that 15 digits would not have kept */
    for (const cJSON *o = mbs->child; o != NULL; o = o->next, m++) {
        const dyn_plan_microbatch *mb = &pl.mbs[m];
        double want[3] = {mb->time_ms, mb->stored_mb, mb->peak_mb};
        const char *keys[3] = {"time_ms", "stored_mb", "peak_mb"};
        for (int k = 0; k < 3; k++) {
            if (number(o, keys[k]) != want[k])
                fprintf(stderr, "mb %d %s: JSON %.17g, library %.17g\n", m, keys[k], number(o, keys[k]), want[k]);
            assert_true(number(o, keys[k]) == want[k]);
            char buf[32];
            snprintf(buf, sizeof buf, "%.15g", want[k]);
            inexact_at_15 += strtod(buf, NULL) != want[k];
        }
        assert_int_equal((int)number(o, "rows"), mb->shape.rows);
    }
    /* The comparison means something: some of these values need > 15 digits. */
    assert_true(inexact_at_15 > 0);
    dyn_batch_plan_free(&pl);
    dyn_dataset_free(&ds);
    dyn_cost_model_free(cm);
    cJSON_Delete(root);
}

/* A run that fails leaves no JSON, exact or not. */
static void test_failed_run_writes_nothing(void **state)
{
    (void)state;
    char lengths[700], json[700], args[2000];
    write_file("bad.tsv", "input\ttarget\n10\t5\n12\tx\n", lengths, sizeof lengths);
    snprintf(json, sizeof json, "%s/bad.json", dir);
    snprintf(args, sizeof args,
             "--model gpt --lengths '%s' --max-seqlen 1024 --stages 1 --global-batch-tokens 100 --json '%s'",
             lengths, json);
    int rc = cli_run("plan", args);
    cli_assert_one_line_error("plan", args, rc, 1, "bad.tsv:3");
    FILE *fp = fopen(json, "rb");
    assert_null(fp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers_read_back_exactly),
        cmocka_unit_test(test_failed_run_writes_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
