/* lengths.c — the length-limit rule shared by the generator and the TSV reader
 * (which side a limit applies to for GPT and T5, and how clipping shortens a
 * sample), and releasing datasets. The rule is stated once in data.h. */
#include "dynapipe/data.h"

#include <stdlib.h>
#include <string.h>

void dyn_dataset_free(dyn_dataset *ds)
{
    if (ds == NULL) return;
    free(ds->samples);
    memset(ds, 0, sizeof *ds);
}

int dyn_lengths_fit(dyn_model_kind kind, int32_t max_seqlen, int32_t input_len, int32_t target_len)
{
    if (input_len <= 0 || target_len < (kind != DYN_MODEL_T5 ? 0 : 1)) return 0;
    if (kind != DYN_MODEL_T5) return (int64_t)input_len + target_len <= max_seqlen;
    return input_len <= max_seqlen && target_len <= max_seqlen;
}

void dyn_lengths_clip(dyn_model_kind kind, int32_t max_seqlen, int32_t *input_len,
                      int32_t *target_len)
{
    if (kind == DYN_MODEL_T5) {
        if (*input_len > max_seqlen) *input_len = max_seqlen;
        if (*target_len > max_seqlen) *target_len = max_seqlen;
        return;
    }
    /* GPT: keep as much target as possible (it carries the loss), leaving at
     * least one input token; then shorten the input to what is left. */
    if (*target_len > max_seqlen - 1) *target_len = max_seqlen - 1;
    if (*input_len > max_seqlen - *target_len) *input_len = max_seqlen - *target_len;
}
