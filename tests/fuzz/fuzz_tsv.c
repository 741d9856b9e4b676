/* fuzz_tsv.c — libFuzzer harness for the TSV length reader
 * (dyn_dataset_read_tsv), for both model kinds, with and without clipping:
 * every sample read back fits max_seqlen. */
#include "fuzz_common.h"

#include "dynapipe/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_scratch(data, size, ".tsv");
    for (int k = 0; k < 4; k++) {
        dyn_model_kind kind = k & 1 ? DYN_MODEL_T5 : DYN_MODEL_GPT;
        dyn_dataset ds = {0};
        dyn_error err;
        dyn_error_clear(&err);
        dyn_status st = dyn_dataset_read_tsv(path, 128, kind, k >> 1, &ds, &err);
        fuzz_check_message(st, &err);
        for (int32_t i = 0; st == DYN_OK && i < ds.n; i++)
            if (!dyn_lengths_fit(kind, 128, ds.samples[i].input_len, ds.samples[i].target_len)) abort();
        dyn_dataset_free(&ds);
    }
    unlink(path);
    return 0;
}
