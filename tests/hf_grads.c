/* hf_grads.c — a test helper for tests/hf_torch_check.py: load a Hugging
 * Face model folder the way `dynapipe train --init` does (model/hf_load.h:
 * config.json through the one architecture table, shards memory-mapped,
 * bf16/fp16 converted), run one forward and backward of a micro-batch
 * given as JSON, print the loss and write every parameter's gradient under
 * its Hugging Face name and layout. The PyTorch side computes the same
 * from its own implementation of the HF classes and compares tensor by
 * tensor.
 *
 * Usage: hf_grads DIR BATCH.json GRADS.safetensors
 *   BATCH.json: {"max_len": L, "layout": "padded" | "docmask",
 *                "rows": [samples in row 0, in row 1, ...]   (docmask only),
 *                "samples": [{"input": [ids], "target": [ids]}, ...]}
 * stdout: "loss X": the mean target-token loss (sum / target tokens), and
 * the gradients are those of that mean. Exit 1 with one line on any error.
 * Not a test by itself (its name does not start with test_). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/hf_load.h" /* defines: dyn_hf_open, dyn_hf_check, dyn_hf_load */
#include "model/model.h"   /* defines: dyn_model_*, dyn_token_sample */
#include "util/util.h"     /* defines: dyn_file_read_all */

#define MAX_SAMPLES 64

static int fail(const char *what, const char *msg)
{
    fprintf(stderr, "hf_grads: %s: %s\n", what, msg);
    return 1;
}

/* An int array of JSON ids into a fresh allocation; NULL on a bad list. */
static int32_t *ids_of(const cJSON *a, int32_t *n)
{
    if (!cJSON_IsArray(a) || (*n = cJSON_GetArraySize(a)) < 1) return NULL;
    int32_t *v = malloc((size_t)*n * sizeof *v);
    if (v == NULL) return NULL;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) v[i++] = cJSON_IsNumber(e) ? (int32_t)e->valuedouble : -1;
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 4) return fail("usage", "hf_grads DIR BATCH.json GRADS.safetensors");
    dyn_error err;
    char *text = NULL;
    if (dyn_file_read_all(argv[2], &text, NULL, &err) != DYN_OK) return fail(argv[2], err.msg);
    cJSON *b = cJSON_Parse(text);
    free(text);
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(b, "max_len");
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(b, "layout");
    const cJSON *ss = cJSON_GetObjectItemCaseSensitive(b, "samples");
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(b, "rows");
    if (!cJSON_IsNumber(ml) || !cJSON_IsString(lay) || !cJSON_IsArray(ss) || cJSON_GetArraySize(ss) < 1 ||
        cJSON_GetArraySize(ss) > MAX_SAMPLES)
        return fail(argv[2], "not {max_len, layout, samples}");
    int docmask = strcmp(lay->valuestring, "docmask") == 0;
    dyn_token_sample s[MAX_SAMPLES];
    int32_t n = 0, row_counts[MAX_SAMPLES], B = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ss)
    {
        s[n].input = ids_of(cJSON_GetObjectItemCaseSensitive(e, "input"), &s[n].input_len);
        s[n].target = ids_of(cJSON_GetObjectItemCaseSensitive(e, "target"), &s[n].target_len);
        if (s[n].input == NULL || s[n].target == NULL) return fail(argv[2], "a sample's input or target is not ids");
        n++;
    }
    if (docmask) {
        if (!cJSON_IsArray(rows)) return fail(argv[2], "docmask needs rows");
        cJSON_ArrayForEach(e, rows) row_counts[B++] = (int32_t)e->valuedouble;
    }

    dyn_hf_folder *f = dyn_hf_open(argv[1], (int32_t)ml->valuedouble, &err);
    if (f == NULL) return fail(argv[1], err.msg);
    dyn_model_config cfg = dyn_hf_folder_config(f)->model;
    dyn_model *m = dyn_model_create(&cfg, 1, &err);
    if (m == NULL || dyn_hf_check(f, &cfg, &err) != DYN_OK || dyn_hf_load(f, m, &err) != DYN_OK)
        return fail(argv[1], err.msg);
    dyn_hf_close(f);

    dyn_model_microbatch *mb = docmask ? dyn_model_microbatch_create_packed(cfg.kind, s, n, row_counts, B, 0, 0, 1, &err)
                                       : dyn_model_microbatch_create_padded(cfg.kind, s, n, &err);
    dyn_model_acts *a = mb ? dyn_model_acts_create(&err) : NULL;
    double loss = 0;
    if (a == NULL || dyn_model_forward(m, a, mb, 0, &loss, NULL, &err) != DYN_OK ||
        dyn_model_backward(m, a, mb, 1.0f / (float)mb->n_target_tokens, &err) != DYN_OK)
        return fail("forward/backward", err.msg);
    printf("loss %.9g\n", loss / (double)mb->n_target_tokens);
    /* The gradients saved as if they were the weights: same names, shapes
     * and Hugging Face layouts. */
    memcpy(dyn_model_params(m), dyn_model_grads(m), dyn_model_num_params(m) * sizeof(float));
    if (dyn_model_save(m, argv[3], &err) != DYN_OK) return fail(argv[3], err.msg);
    for (int i = 0; i < n; i++) {
        free((void *)s[i].input);
        free((void *)s[i].target);
    }
    dyn_model_acts_free(a);
    dyn_model_microbatch_free(mb);
    dyn_model_free(m);
    cJSON_Delete(b);
    return 0;
}
