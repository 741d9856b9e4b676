/* test_runtime_ckpt_trust.c — a checkpoint is trusted only where its facts
 * agree, and no run or file carries a NaN or an infinity (issue 30, defect
 * classes 1 and 2). Real MPI runs of `dynapipe train`, each under
 * `timeout`, and `dynapipe eval`.
 *
 *   - A run driven to divergence (--lr 1 --weight-decay 1e6) stops with a
 *     non-zero exit naming the step ("step K/N: gradient norm is nan" or
 *     "loss is ..."); its metrics file is JSON lines, every line parsed by
 *     cJSON and every number in it finite; the checkpoint it resumed from
 *     (and `latest`) is byte for byte what it was, and no later step was
 *     saved.
 *   - A NaN planted in one weight of a shard, or in one optimizer moment,
 *     is refused by --resume (and, for the weight, by eval) with one line
 *     naming the file, the tensor and the element.
 *   - One fact edited per case, the files re-hashed into trainer_state.json
 *     as a tool rewriting the checkpoint would: n_layers or heads in
 *     trainer_state.json, a key of config.json, an extra tensor in a shard
 *     (listed in the index or not), the sampler position, the step, an
 *     emptied "files" list. Each is refused with exit 1 and one line naming
 *     both places that disagree; nothing is written.
 *   - dyn_safetensors_write refuses a NaN before writing anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli_testlib.h"
#include "model/safetensors.h" /* defines: dyn_safetensors_* */
#include "runtime/ckpt_fs.h"   /* defines: rt_ckpt_fnv1a64 */
#include "util/util.h"

#define COMMON "--threads 1 --samples 2000 --data builtin:3 --global-batch-tokens 2048 --max-seqlen 128 --quiet"
#define GPT "--model gpt --model-config gpt-tiny --layers 4 --stages 2 --schedule auto"
#define STEP "step-00000002"

/* `dynapipe train COMMON args` under timeout; its exit code. */
static int train(const char *args)
{
    char a[8192];
    int w = snprintf(a, sizeof a, COMMON " %s", args);
    assert_true(w > 0 && (size_t)w < sizeof a);
    return cli_train(a);
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Folder `to` replaced by a copy of folder `from`. */
static void copy_dir(const char *from, const char *to)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    assert_int_equal(system(cmd), 0);
}

static char base[700]; /* a 2-step GPT checkpoint of 2 stages, made once */

static int setup(void **state)
{
    (void)state;
    if (cli_setup_dir() != 0) return -1;
    snprintf(base, sizeof base, "%s/base", dir);
    char args[2048];
    snprintf(args, sizeof args, GPT " --steps 2 --save '%s'", base);
    return train(args) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return cli_teardown_dir();
}

/* A fresh copy of the base checkpoint's step folder at <dir>/<name>; its
 * path into out[cap]. */
static void fresh_copy(const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", dir, name);
    char from[800];
    snprintf(from, sizeof from, "%s/" STEP, base);
    copy_dir(from, out);
}

/* In file path, the first `from` replaced by `to` (from must occur). */
static void edit_file(const char *path, const char *from, const char *to)
{
    char *text = NULL;
    assert_int_equal(dyn_file_read_all(path, &text, NULL, NULL), DYN_OK);
    char *at = strstr(text, from);
    if (at == NULL) fail_msg("%s: no '%s'", path, from);
    size_t n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    assert_non_null(s);
    snprintf(s, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    assert_int_equal(dyn_file_write_atomic(path, s, strlen(s), NULL), DYN_OK);
    free(s);
    free(text);
}

/* Recompute the size and FNV-1a hash of every file trainer_state.json of
 * step folder d lists, as a tool rewriting the checkpoint would. */
static void rehash(const char *d)
{
    char p[1200];
    snprintf(p, sizeof p, "%s/trainer_state.json", d);
    char *text = slurp(p);
    cJSON *r = cJSON_Parse(text);
    free(text);
    assert_non_null(r);
    cJSON *files = cJSON_GetObjectItemCaseSensitive(r, "files"), *f = NULL;
    cJSON_ArrayForEach(f, files)
    {
        char fp[1400], hex[32];
        snprintf(fp, sizeof fp, "%s/%s", d, f->string);
        char *data = NULL;
        size_t len = 0;
        assert_int_equal(dyn_file_read_all(fp, &data, &len, NULL), DYN_OK);
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)rt_ckpt_fnv1a64((unsigned char *)data, len));
        free(data);
        cJSON_ReplaceItemInObjectCaseSensitive(f, "bytes", cJSON_CreateNumber((double)len));
        cJSON_ReplaceItemInObjectCaseSensitive(f, "fnv1a64", cJSON_CreateString(hex));
    }
    char *out = cJSON_Print(r);
    assert_non_null(out);
    assert_int_equal(dyn_file_write_atomic(p, out, strlen(out), NULL), DYN_OK);
    free(out);
    cJSON_Delete(r);
}

/* Overwrite element `elem` of tensor `name` in safetensors file path with
 * value v, in place (the header parsed here, independently of the reader). */
static void plant(const char *path, const char *name, int elem, float v)
{
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(dyn_file_read_all(path, &data, &len, NULL), DYN_OK);
    uint64_t hlen = 0;
    memcpy(&hlen, data, 8);
    char *h = malloc(hlen + 1);
    assert_non_null(h);
    memcpy(h, data + 8, hlen);
    h[hlen] = '\0';
    cJSON *r = cJSON_Parse(h);
    free(h);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, name);
    if (t == NULL) fail_msg("%s: no tensor %s", path, name);
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    size_t at = 8 + hlen + (size_t)cJSON_GetArrayItem(off, 0)->valuedouble + (size_t)elem * sizeof(float);
    assert_true(at + sizeof v <= len);
    memcpy(data + at, &v, sizeof v);
    assert_int_equal(dyn_file_write_atomic(path, data, len, NULL), DYN_OK);
    cJSON_Delete(r);
    free(data);
}

/* Rewrite safetensors file path with one more F32 tensor `extra` (4
 * floats), keeping every tensor and metadata key. */
static void add_tensor(const char *path, const char *extra)
{
    dyn_error err;
    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    assert_non_null(st);
    int n = dyn_safetensors_count(st);
    dyn_st_entry *e = calloc((size_t)n + 1, sizeof *e);
    float **bufs = calloc((size_t)n + 1, sizeof *bufs);
    assert_non_null(e);
    assert_non_null(bufs);
    for (int i = 0; i < n; i++) {
        e[i].name = dyn_safetensors_name(st, i);
        e[i].ndim = dyn_safetensors_shape(st, e[i].name, e[i].shape, NULL);
        size_t numel = 1;
        for (int d = 0; d < e[i].ndim; d++) numel *= (size_t)e[i].shape[d];
        bufs[i] = calloc(numel, sizeof(float));
        assert_non_null(bufs[i]);
        assert_int_equal(dyn_safetensors_read(st, e[i].name, e[i].ndim, e[i].shape, bufs[i], &err), DYN_OK);
        e[i].data = bufs[i];
    }
    static const float four[4] = {1, 2, 3, 4};
    e[n] = (dyn_st_entry){extra, 1, {4}, four};
    const char *keys[3] = {"format", "dynapipe.config", "dynapipe.layers"};
    const char *meta[6];
    int n_meta = 0;
    for (int k = 0; k < 3; k++)
        if (dyn_safetensors_meta(st, keys[k]) != NULL) {
            meta[2 * n_meta] = keys[k];
            meta[2 * n_meta + 1] = dyn_safetensors_meta(st, keys[k]);
            n_meta++;
        }
    /* the names and metadata live in st: write before freeing it */
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%.1200s.new", path);
    assert_int_equal(dyn_safetensors_write(tmp, e, n + 1, meta, n_meta, &err), DYN_OK);
    assert_int_equal(rename(tmp, path), 0);
    for (int i = 0; i < n; i++) free(bufs[i]);
    free(bufs);
    free(e);
    dyn_safetensors_free(st);
}

/* --resume of folder d refused with exit 1 and one line holding every
 * needle (NULL-terminated); nothing written to the --save folder. What the
 * launcher checks (rt_ckpt_read) is refused in exactly one line; what only
 * a rank sees as it loads its stage (a tensor's values or set) in one line
 * per failing rank ("dynapipe train: rank R (...): ..."), each of them
 * naming the file, and no other output but the schedule note. */
static void expect_refused(const char *d, const char *extra_flags, const char *const *needles, int one_line)
{
    char out[800], args[4096];
    snprintf(out, sizeof out, "%s/never", dir);
    snprintf(args, sizeof args, "%s %s --steps 4 --resume '%s' --save '%s'", GPT, extra_flags, d, out);
    int rc = train(args);
    if (one_line) {
        for (const char *const *n = needles; *n; n++) cli_assert_one_line_error("train", args, rc, 1, *n);
    } else {
        char *e = NULL;
        assert_int_equal(dyn_file_read_all(err_path, &e, NULL, NULL), DYN_OK);
        int found = 0, ok = rc == 1 && e[0] != '\0';
        for (char *line = strtok(e, "\n"); line; line = strtok(NULL, "\n")) {
            if (strncmp(line, "dynapipe train: note: ", 22) == 0) continue; /* the schedule note (resume) */
            ok = ok && strncmp(line, "dynapipe train: rank ", 21) == 0;
            int all = 1;
            for (const char *const *n = needles; *n; n++) all = all && strstr(line, *n) != NULL;
            found |= all;
        }
        if (!ok || !found) {
            char *again = slurp(err_path);
            fail_msg("train %s: exit %d, stderr: %s", args, rc, again);
        }
        free(e);
    }
    assert_false(exists(out));
}

static void expect_eval_refused(const char *d, const char *const *needles)
{
    char args[2048];
    snprintf(args, sizeof args, "--checkpoint '%s' --samples 4 --no-accuracy", d);
    int rc = cli_run("eval", args);
    for (const char *const *n = needles; *n; n++) cli_assert_one_line_error("eval", args, rc, 1, *n);
}

/* ---- class 1: non-finite numbers ------------------------------------------- */

/* Whether every number in JSON value v is finite (cJSON parses "nan" as no
 * number at all, so a written NaN fails the parse before this). */
static int all_finite(const cJSON *v)
{
    if (cJSON_IsNumber(v)) return isfinite(v->valuedouble);
    for (const cJSON *c = v->child; c; c = c->next)
        if (!all_finite(c)) return 0;
    return 1;
}

static void test_diverging_run_stops(void **state)
{
    (void)state;
    char ck[800], ref[800], metrics[800], args[4096], p[1200], q[1200];
    snprintf(ck, sizeof ck, "%s/div", dir);
    snprintf(ref, sizeof ref, "%s/div-ref", dir);
    snprintf(metrics, sizeof metrics, "%s/div.jsonl", dir);
    copy_dir(base, ck);
    copy_dir(base, ref);
    snprintf(args, sizeof args, "%s --steps 40 --lr 1 --weight-decay 1e6 --resume '%s' --save '%s' --metrics '%s'", GPT,
             ck, ck, metrics);
    int rc = train(args);
    char *e = slurp(err_path);
    if (rc == 0 || strstr(e, ": step ") == NULL ||
        (strstr(e, "loss is ") == NULL && strstr(e, "gradient norm is ") == NULL) ||
        strstr(e, "stopped before the optimizer step") == NULL)
        fail_msg("a diverging run: exit %d, stderr: %s", rc, e);
    free(e);
    /* the checkpoint it resumed from is untouched, and nothing was saved */
    static const char *names[] = {"latest", STEP "/trainer_state.json", STEP "/config.json",
                                  STEP "/model.safetensors.index.json", STEP "/model-00001-of-00002.safetensors",
                                  STEP "/model-00002-of-00002.safetensors", STEP "/optimizer-00001-of-00002.safetensors",
                                  STEP "/optimizer-00002-of-00002.safetensors"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", ck, names[i]);
        snprintf(q, sizeof q, "%s/%s", ref, names[i]);
        char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        assert_int_equal(dyn_file_read_all(p, &a, &la, NULL), DYN_OK);
        assert_int_equal(dyn_file_read_all(q, &b, &lb, NULL), DYN_OK);
        if (la != lb || memcmp(a, b, la) != 0) fail_msg("%s changed", p);
        free(a);
        free(b);
    }
    snprintf(p, sizeof p, "%s/step-00000003", ck);
    assert_false(exists(p));
    /* the metrics of the steps before: JSON lines, every number finite */
    char *text = slurp(metrics);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *r = cJSON_Parse(line);
        if (r == NULL || !all_finite(r)) fail_msg("metrics line %d is not JSON with finite numbers: %s", lines + 1, line);
        cJSON_Delete(r);
    }
    assert_true(lines >= 1);
    free(text);
}

static void test_planted_nan_refused(void **state)
{
    (void)state;
    char d[800], p[1200];
    fresh_copy("nan-w", d, sizeof d);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
    plant(p, "h.0.attn.c_attn.weight", 17, NAN);
    rehash(d);
    const char *w[] = {"model-00001-of-00002.safetensors", "h.0.attn.c_attn.weight",
                       "non-finite value at element 17", NULL};
    expect_refused(d, "", w, 0);
    expect_eval_refused(d, w);
    fresh_copy("nan-m", d, sizeof d);
    snprintf(p, sizeof p, "%s/optimizer-00002-of-00002.safetensors", d);
    plant(p, "h.3.mlp.c_fc.bias.exp_avg_sq", 5, INFINITY);
    rehash(d);
    const char *m[] = {"optimizer-00002-of-00002.safetensors", "h.3.mlp.c_fc.bias.exp_avg_sq",
                       "non-finite value at element 5", NULL};
    expect_refused(d, "", m, 0);
}

static void test_write_refuses_nan(void **state)
{
    (void)state;
    char p[800];
    snprintf(p, sizeof p, "%s/nan.safetensors", dir);
    float x[3] = {1, NAN, 2};
    dyn_st_entry e = {"w", 1, {3}, x};
    dyn_error err;
    assert_int_equal(dyn_safetensors_write(p, &e, 1, NULL, 0, &err), DYN_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "tensor w holds a non-finite value at element 1"));
    assert_false(exists(p));
}

/* ---- class 2: facts stored twice ------------------------------------------- */

static void test_trainer_state_shape_edited(void **state)
{
    (void)state;
    char d[800], p[1200];
    fresh_copy("nl", d, sizeof d);
    snprintf(p, sizeof p, "%s/trainer_state.json", d);
    edit_file(p, "\"n_layers\":\t4", "\"n_layers\":\t2");
    edit_file(p, "[0, 3, 6]", "[0, 2, 4]");
    const char *nl[] = {"config.json", "\"n_layer\" is 4", "trainer_state.json's model gives 2", NULL};
    expect_refused(d, "--layers 2", nl, 1);
    expect_eval_refused(d, nl);
    fresh_copy("heads", d, sizeof d);
    snprintf(p, sizeof p, "%s/trainer_state.json", d);
    edit_file(p, "\"heads\":\t4", "\"heads\":\t2");
    const char *h[] = {"config.json", "\"n_head\" is 4", "trainer_state.json's model gives 2", NULL};
    expect_refused(d, "", h, 1);
    expect_eval_refused(d, h);
}

static void test_config_json_edited(void **state)
{
    (void)state;
    char d[800], p[1200];
    fresh_copy("cfg", d, sizeof d);
    snprintf(p, sizeof p, "%s/config.json", d);
    edit_file(p, "\"n_inner\":\t256", "\"n_inner\":\t512");
    rehash(d);
    const char *n[] = {"config.json", "\"n_inner\" is 512", "trainer_state.json's model gives 256", NULL};
    expect_refused(d, "", n, 1);
    expect_eval_refused(d, n);
}

static void test_extra_tensor(void **state)
{
    (void)state;
    char d[800], p[1200];
    /* in the shard only */
    fresh_copy("extra", d, sizeof d);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", d);
    add_tensor(p, "h.9.extra.weight");
    rehash(d);
    const char *a[] = {"model-00002-of-00002.safetensors", "h.9.extra.weight", "model.safetensors.index.json",
                       "does not list", NULL};
    expect_refused(d, "", a, 0);
    expect_eval_refused(d, a);
    /* in the shard and the index */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    edit_file(p, "\"weight_map\":\t{", "\"weight_map\":\t{\n\t\t\"h.9.extra.weight\":\t\"model-00002-of-00002.safetensors\",");
    rehash(d);
    const char *b[] = {"model-00002-of-00002.safetensors", "h.9.extra.weight", "not part of this model", NULL};
    expect_refused(d, "", b, 0);
    expect_eval_refused(d, b);
}

static void test_sampler_vs_cursor(void **state)
{
    (void)state;
    char d[800], p[1200];
    fresh_copy("cursor", d, sizeof d);
    snprintf(p, sizeof p, "%s/trainer_state.json", d);
    char *text = NULL;
    assert_int_equal(dyn_file_read_all(p, &text, NULL, NULL), DYN_OK);
    long long pos = -1;
    const char *at = strstr(text, "\"sampler_position\":");
    assert_non_null(at);
    assert_int_equal(sscanf(at + strlen("\"sampler_position\":"), "%lld", &pos), 1);
    free(text);
    char from[64], to[64], want[96];
    snprintf(from, sizeof from, "\"sampler_position\":\t%lld", pos);
    snprintf(to, sizeof to, "\"sampler_position\":\t%lld", pos + 1);
    edit_file(p, from, to);
    /* and the same position as "order" states it (epoch 0 of 2000 samples) */
    snprintf(from, sizeof from, "\"index\":\t%lld", pos);
    snprintf(to, sizeof to, "\"index\":\t%lld", pos + 1);
    edit_file(p, from, to);
    snprintf(want, sizeof want, "data cursor %lld", pos);
    char want2[96];
    snprintf(want2, sizeof want2, "trainer_state.json's sampler_position is %lld", pos + 1);
    const char *n[] = {"optimizer-0000", want, want2, NULL};
    expect_refused(d, "", n, 1);
}

static void test_step_mismatch(void **state)
{
    (void)state;
    char d[800], p[1200];
    fresh_copy("step", d, sizeof d);
    snprintf(p, sizeof p, "%s/trainer_state.json", d);
    edit_file(p, "\"step\":\t2", "\"step\":\t1");
    const char *n[] = {"optimizer-0000", "step 2, but", "trainer_state.json's step is 1", NULL};
    expect_refused(d, "", n, 1);
}

static void test_files_list_emptied(void **state)
{
    (void)state;
    char d[800], p[1200];
    fresh_copy("files", d, sizeof d);
    snprintf(p, sizeof p, "%s/trainer_state.json", d);
    char *text = NULL;
    assert_int_equal(dyn_file_read_all(p, &text, NULL, NULL), DYN_OK);
    char *at = strstr(text, "\"files\":");
    assert_non_null(at);
    snprintf(at, strlen(at) + 1, "\"files\": {}\n}\n");
    assert_int_equal(dyn_file_write_atomic(p, text, strlen(text), NULL), DYN_OK);
    free(text);
    /* a weight changed too: with hashing off it would load */
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
    plant(p, "h.0.attn.c_attn.weight", 3, 0.5f);
    const char *n[] = {"trainer_state.json", "\"files\" does not list config.json", "2 plan stages", NULL};
    expect_refused(d, "", n, 1);
    expect_eval_refused(d, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_refuses_nan),          cmocka_unit_test(test_diverging_run_stops),
        cmocka_unit_test(test_planted_nan_refused),        cmocka_unit_test(test_trainer_state_shape_edited),
        cmocka_unit_test(test_config_json_edited),         cmocka_unit_test(test_extra_tensor),
        cmocka_unit_test(test_sampler_vs_cursor),          cmocka_unit_test(test_step_mismatch),
        cmocka_unit_test(test_files_list_emptied),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
