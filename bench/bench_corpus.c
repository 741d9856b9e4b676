/* bench_corpus.c — what token data costs: generating built-in samples
 * (lengths and tokens), opening a JSONL file (one parse of every record to
 * build the byte-offset index) and reading random records from it, and the
 * same for the Megatron dataset converted from it. Medians of `repeats`
 * runs; the files are written under /tmp and removed.
 *
 * usage: bench_corpus [samples (default 20000)] [repeats (default 3)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "dynapipe/corpus.h" /* defines: dyn_corpus_* */
#include "util/rng.h"        /* defines: dyn_rng_* */
#include "util/util.h"       /* defines: dyn_time_ms, dyn_median, dyn_loadavg_print */

static int fail(const char *what, const dyn_error *err)
{
    fprintf(stderr, "bench_corpus: %s: %s\n", what, err->msg);
    return 1;
}

/* Built-in samples as a JSONL text-pair file (the text without sep / eos;
 * the tasks' text has no quotes or backslashes to escape). */
static int write_jsonl(const char *path, int64_t n, dyn_error *err)
{
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.builtin_samples = n;
    dyn_corpus *c = dyn_corpus_open("builtin:1", &o, err);
    if (c == NULL) return -1;
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) return dyn_corpus_free(c), -1;
    for (int64_t i = 0; i < n; i++) {
        dyn_corpus_sample s;
        if (dyn_corpus_read(c, i, &s, err) != DYN_OK) return fclose(fp), dyn_corpus_free(c), -1;
        fputs("{\"input\": \"", fp);
        for (int32_t k = 0; k + 1 < s.input_len; k++) fputc(s.input[k], fp);
        fputs("\", \"target\": \"", fp);
        for (int32_t k = 0; k + 1 < s.target_len; k++) fputc(s.target[k], fp);
        fputs("\"}\n", fp);
    }
    dyn_corpus_free(c);
    return fclose(fp) == 0 ? 0 : -1;
}

/* Median ms of opening spec, and median us per random read. */
static int time_source(const char *name, const char *spec, int64_t n, int repeats)
{
    double open_ms[16], read_us[16];
    dyn_error err;
    for (int r = 0; r < repeats; r++) {
        double t0 = dyn_time_ms();
        dyn_corpus *c = dyn_corpus_open(spec, NULL, &err);
        if (c == NULL) return fail(spec, &err);
        open_ms[r] = dyn_time_ms() - t0;
        dyn_rng rng;
        dyn_rng_seed(&rng, 7);
        int64_t tokens = 0;
        t0 = dyn_time_ms();
        for (int64_t k = 0; k < n; k++) {
            dyn_corpus_sample s;
            if (dyn_corpus_read(c, (int64_t)dyn_rng_below(&rng, (uint64_t)n), &s, &err) != DYN_OK)
                return fail(spec, &err);
            tokens += s.input_len + s.target_len;
        }
        read_us[r] = (dyn_time_ms() - t0) * 1e3 / (double)n;
        dyn_corpus_free(c);
        if (tokens == 0) return 1;
    }
    printf("%-22s open %9.1f ms  random read %7.2f us/sample\n", name, dyn_median(open_ms, repeats),
           dyn_median(read_us, repeats));
    return 0;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_corpus [samples] [repeats <= 16]\n  times the built-in corpus (lengths and tokens) and reading a JSONL file", NULL);
    int64_t n = argc > 1 ? atoll(argv[1]) : 20000;
    int repeats = argc > 2 ? atoi(argv[2]) : 3;
    if (n < 1 || repeats < 1 || repeats > 16) {
        fprintf(stderr, "usage: bench_corpus [samples] [repeats <= 16]\n");
        return 2;
    }
    dyn_loadavg_print("before");
    dyn_error err;
    /* built-in: lengths (one generation each) and sequential reads */
    double gen_ns[16], read_ns[16];
    dyn_corpus_options o;
    dyn_corpus_options_default(&o);
    o.builtin_samples = n;
    for (int r = 0; r < repeats; r++) {
        dyn_corpus *c = dyn_corpus_open("builtin:1", &o, &err);
        dyn_dataset ds = {0};
        if (c == NULL) return fail("builtin", &err);
        double t0 = dyn_time_ms();
        if (dyn_corpus_lengths(c, &ds, &err) != DYN_OK) return fail("builtin lengths", &err);
        gen_ns[r] = (dyn_time_ms() - t0) * 1e6 / (double)n;
        t0 = dyn_time_ms();
        for (int64_t i = 0; i < n; i++) {
            dyn_corpus_sample s;
            if (dyn_corpus_read(c, i, &s, &err) != DYN_OK) return fail("builtin read", &err);
        }
        read_ns[r] = (dyn_time_ms() - t0) * 1e6 / (double)n;
        dyn_dataset_free(&ds);
        dyn_corpus_free(c);
    }
    printf("built-in (max_seqlen 2048): lengths %.0f ns/sample, read %.0f ns/sample\n", dyn_median(gen_ns, repeats),
           dyn_median(read_ns, repeats));

    char dir[] = "/tmp/dyn_bench_corpus_XXXXXX";
    if (mkdtemp(dir) == NULL) return 1;
    char jsonl[128], prefix[128];
    snprintf(jsonl, sizeof jsonl, "%s/data.jsonl", dir);
    snprintf(prefix, sizeof prefix, "%s/data", dir);
    if (write_jsonl(jsonl, n, &err) != 0) return fail("writing JSONL", &err);
    struct stat sb;
    if (stat(jsonl, &sb) != 0) return 1;
    printf("JSONL: %lld samples, %.1f MB\n", (long long)n, (double)sb.st_size / (1 << 20));
    int rc = time_source("JSONL", jsonl, n, repeats);
    dyn_corpus *c = rc == 0 ? dyn_corpus_open(jsonl, NULL, &err) : NULL;
    double t0 = dyn_time_ms();
    if (rc == 0 && (c == NULL || dyn_corpus_write_indexed(c, prefix, &err) != DYN_OK)) rc = fail("convert", &err);
    if (rc == 0) printf("convert JSONL -> Megatron: %.1f ms\n", dyn_time_ms() - t0);
    dyn_corpus_free(c);
    if (rc == 0) rc = time_source("Megatron pair (mmap)", prefix, n, repeats);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) rc = 1;
    dyn_loadavg_print("after");
    return rc;
}
