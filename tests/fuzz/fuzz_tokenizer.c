/* fuzz_tokenizer.c — libFuzzer harness for the Hugging Face tokenizer.json
 * reader (src/data/tok_bpe.c): the input is written as tokenizer.json in a
 * folder of its own and loaded; it is refused with one clean line, or
 * loaded, and then encoding a few fixed texts and the input itself (any
 * bytes) succeeds with every id in the vocabulary, or fails with one clean
 * line (a file's regex may exceed PCRE2's match limit), and decoding the
 * ids succeeds or fails cleanly. SentencePiece (a C++ library not built with the
 * sanitizers here) is stubbed out. */
#include "fuzz_common.h"

#include <sys/stat.h>

#include "data/tokenizer.h"

dyn_tokenizer *dyn_tokenizer_load_spm(const char *path, dyn_error *err)
{
    dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: SentencePiece is not part of this harness", path);
    return NULL;
}

static void encode_check(dyn_tokenizer *t, const char *text, size_t n)
{
    dyn_token_buf ids = {0};
    dyn_byte_buf back = {0};
    dyn_error err;
    dyn_status st = dyn_tokenizer_encode(t, text, n, 1, &ids, &err);
    fuzz_check_message(st, &err); /* a file's regex may exceed PCRE2's match limit */
    if (st != DYN_OK) return;
    for (size_t i = 0; i < ids.n; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= dyn_tokenizer_vocab_size(t)) abort();
    st = dyn_tokenizer_decode(t, ids.ids, ids.n, 0, &back, &err);
    fuzz_check_message(st, &err);
    dyn_token_buf_free(&ids);
    dyn_byte_buf_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[128], path[160];
    if (dir[0] == '\0') {
        snprintf(dir, sizeof dir, "/tmp/dyn_fuzz_tok_%ld", (long)getpid());
        mkdir(dir, 0700);
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    if (size > 0 && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f) != 0) abort();
    dyn_error err;
    dyn_error_clear(&err);
    dyn_tokenizer *t = dyn_tokenizer_load(path, &err);
    if (t == NULL) {
        fuzz_check_message(err.code, &err);
        return 0;
    }
    static const char *texts[] = {"Hello world's 123  \n\t", "\xff\xfe" "abc\xe2\x82", "", "日本語 😀"};
    for (int i = 0; i < 4; i++) encode_check(t, texts[i], strlen(texts[i]));
    encode_check(t, (const char *)data, size);
    dyn_tokenizer_free(t);
    return 0;
}
