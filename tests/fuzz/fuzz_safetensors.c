/* fuzz_safetensors.c — libFuzzer harness for the safetensors reader
 * (dyn_safetensors_open): a file opens and every tensor named in it can be
 * asked for its shape, or it is refused with one clean line. */
#include "fuzz_common.h"

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_scratch(data, size, ".safetensors");
    dyn_error err;
    dyn_error_clear(&err);
    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    fuzz_check_message(st ? DYN_OK : DYN_ERR_CORRUPT, &err);
    for (int i = 0; st && i < dyn_safetensors_count(st); i++) {
        int64_t shape[8];
        if (dyn_safetensors_shape(st, dyn_safetensors_name(st, i), shape, NULL) < 0) abort();
    }
    dyn_safetensors_free(st);
    unlink(path);
    return 0;
}
