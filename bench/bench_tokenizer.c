/* bench_tokenizer.c — how fast a tokenizer encodes: every line of the given
 * text files encoded as one text (as `data convert` encodes records), with
 * a freshly loaded tokenizer per repeat so the piece cache starts cold;
 * prints bytes, tokens, MB/s and tokens/s, the median of the repeats, and
 * the load time. bench/bench_tokenizer_ref.mjs measures the JavaScript
 * references of tests/test_tokenizer_ref.c on the same files, for a side by
 * side comparison (docs give the command).
 *
 * usage: bench_tokenizer TOKENIZER FILE... [--repeats N (default 5)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h"     /* defines: bench_args_check */
#include "data/tokenizer.h" /* defines: dyn_tokenizer_load, dyn_tokenizer_encode */
#include "util/util.h"      /* defines: dyn_time_ms, dyn_median, dyn_file_read_all */

int main(int argc, char **argv)
{
    static const char *const known[] = {"--repeats", NULL};
    bench_args_check(argc, argv, "usage: bench_tokenizer TOKENIZER FILE... [--repeats N (default 5)]", known);
    int repeats = 5;
    const char *tok_path = NULL;
    char *text = NULL;
    size_t text_n = 0;
    dyn_error err;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
            repeats = atoi(argv[++i]);
            if (repeats < 1 || repeats > 100) {
                fprintf(stderr, "bench_tokenizer: --repeats must be 1..100\n");
                return 2;
            }
        } else if (tok_path == NULL) {
            tok_path = argv[i];
        } else {
            char *data;
            size_t n;
            if (dyn_file_read_all(argv[i], &data, &n, &err) != DYN_OK) {
                fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
                return 1;
            }
            char *p = realloc(text, text_n + n + 1);
            if (p == NULL) return fprintf(stderr, "bench_tokenizer: out of memory\n"), 1;
            text = p;
            memcpy(text + text_n, data, n);
            text_n += n;
            if (n && data[n - 1] != '\n') text[text_n++] = '\n';
            free(data);
        }
    }
    if (tok_path == NULL || text_n == 0) {
        fprintf(stderr, "bench_tokenizer: give a tokenizer and at least one non-empty text file (try --help)\n");
        return 2;
    }
    double enc_ms[100], load_ms[100];
    size_t tokens = 0;
    dyn_token_buf ids = {0};
    for (int r = 0; r < repeats; r++) {
        double t0 = dyn_time_ms();
        dyn_tokenizer *t = dyn_tokenizer_load(tok_path, &err);
        if (t == NULL) return fprintf(stderr, "bench_tokenizer: %s\n", err.msg), 1;
        double t1 = dyn_time_ms();
        tokens = 0;
        for (size_t at = 0; at < text_n;) {
            const char *nl = memchr(text + at, '\n', text_n - at);
            size_t len = (size_t)(nl - (text + at));
            ids.n = 0;
            if (dyn_tokenizer_encode(t, text + at, len, 0, &ids, &err) != DYN_OK)
                return fprintf(stderr, "bench_tokenizer: %s\n", err.msg), 1;
            tokens += ids.n;
            at += len + 1;
        }
        double t2 = dyn_time_ms();
        load_ms[r] = t1 - t0;
        enc_ms[r] = t2 - t1;
        dyn_tokenizer_free(t);
    }
    double ms = dyn_median(enc_ms, repeats);
    printf("bench_tokenizer: %s: %zu bytes -> %zu tokens in %.1f ms (median of %d): %.2f MB/s, %.0f tokens/s; load %.0f ms\n",
           tok_path, text_n, tokens, ms, repeats, (double)text_n / 1e6 / (ms / 1e3), (double)tokens / (ms / 1e3),
           dyn_median(load_ms, repeats));
    dyn_token_buf_free(&ids);
    free(text);
    return 0;
}
