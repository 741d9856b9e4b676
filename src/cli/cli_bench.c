/* cli_bench.c — `dynapipe bench layer`: time forward + backward of one GPT-2
 * block or one T5 decoder block on this CPU and print milliseconds, GFLOP/s,
 * the sgemm rate measured in the same run (src/model/layer_bench.c), the
 * measured FMA peak of one core and the BLAS kernel in use (model/blas.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"           /* defines: cli_errorf, cli_parse_i32, CLI_EXIT_* */
#include "model/blas.h"        /* defines: dyn_blas_describe, dyn_cpu_fma_peak_gflops */
#include "model/layer_bench.h" /* defines: dyn_layer_bench_run */
#include "model/threads.h"     /* defines: dyn_threads_init, dyn_threads_blas_kind */

static void bench_usage(FILE *out)
{
    fprintf(out,
            "usage: dynapipe bench layer --model gpt|t5 --hidden H --heads N --batch B --seq S\n"
            "                            [--enc-seq E] [--threads T] [--repeat R] [--verbose]\n\n"
            "Forward + backward of one transformer block in fp32 on random weights:\n"
            "  gpt  a GPT-2 block (pre-LayerNorm, causal attention, GELU MLP 4H)\n"
            "  t5   a T5 v1.1 decoder block (self + cross attention, gated-GELU FFN 4H,\n"
            "       d_kv = H / N) over an encoder output of E positions\n"
            "Every row is full (no padding). Prints the median milliseconds over R\n"
            "repeats (default 5, after one warm-up), the GFLOP credited (GPT:\n"
            "3 x (24 B S H^2 + 4 B S^2 H); T5: see docs/architecture.md), GFLOP/s and\n"
            "the sgemm GFLOP/s measured between the repeats. --threads (default 1)\n"
            "sets OpenMP and OpenBLAS threads (one shared pool; idle workers sleep:\n"
            "OMP_WAIT_POLICY=PASSIVE unless you set it). --enc-seq defaults to S.\n"
            "Also prints the fp32 FMA peak of one core, measured, and the block's share\n"
            "of T cores' peak. The BLAS line says which OpenBLAS kernel runs and why:\n"
            "the best one for this CPU unless you set OPENBLAS_CORETYPE, checked against\n"
            "a plain loop at start-up. --verbose adds the start-up environment.\n");
}

static int bench_layer_main(int argc, char **argv)
{
    const char *cmd = "bench layer";
    dyn_layer_bench_cfg cfg = {DYN_MODEL_GPT, 0, 0, 0, 0, 0, 1, 5};
    int have_model = 0, verbose = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int32_t *dst = NULL;
        int32_t lo = 1, hi = 1 << 20;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            bench_usage(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(a, "--model") == 0) {
            if (!v || (strcmp(v, "gpt") != 0 && strcmp(v, "t5") != 0)) {
                cli_errorf(cmd, "--model needs gpt or t5");
                return CLI_EXIT_USAGE;
            }
            cfg.model = strcmp(v, "gpt") == 0 ? DYN_MODEL_GPT : DYN_MODEL_T5;
            have_model = 1;
            i++;
            continue;
        } else if (strcmp(a, "--verbose") == 0) {
            verbose = 1;
            continue;
        } else if (strcmp(a, "--hidden") == 0) {
            dst = &cfg.hidden;
            hi = 65536;
        } else if (strcmp(a, "--heads") == 0) {
            dst = &cfg.heads;
            hi = 4096;
        } else if (strcmp(a, "--batch") == 0) {
            dst = &cfg.batch;
            hi = 65536;
        } else if (strcmp(a, "--seq") == 0) {
            dst = &cfg.seq;
        } else if (strcmp(a, "--enc-seq") == 0) {
            dst = &cfg.enc_seq;
        } else if (strcmp(a, "--threads") == 0) {
            dst = &cfg.threads;
            hi = 1024;
        } else if (strcmp(a, "--repeat") == 0) {
            dst = &cfg.repeat;
            hi = 100000;
        } else {
            cli_errorf(cmd, "unknown option '%s' (try --help)", a);
            return CLI_EXIT_USAGE;
        }
        if (cli_parse_i32(cmd, a, v, lo, hi, dst) != 0) return CLI_EXIT_USAGE;
        i++;
    }
    if (!have_model || !cfg.hidden || !cfg.heads || !cfg.batch || !cfg.seq) {
        cli_errorf(cmd, "--model, --hidden, --heads, --batch and --seq are required (try --help)");
        return CLI_EXIT_USAGE;
    }
    if (cfg.hidden % cfg.heads != 0) {
        cli_errorf(cmd, "--hidden %d is not divisible by --heads %d", cfg.hidden, cfg.heads);
        return CLI_EXIT_USAGE;
    }
    if (cfg.model == DYN_MODEL_GPT && cfg.enc_seq) {
        cli_errorf(cmd, "--enc-seq applies to --model t5 only");
        return CLI_EXIT_USAGE;
    }
    if (cfg.model == DYN_MODEL_T5 && !cfg.enc_seq) cfg.enc_seq = cfg.seq;
    dyn_layer_bench_result r;
    dyn_error err;
    dyn_error_clear(&err);
    if (dyn_layer_bench_run(&cfg, &r, &err) != DYN_OK) {
        cli_errorf(cmd, "%s", err.msg);
        return CLI_EXIT_FAIL;
    }
    printf("model %s hidden %d heads %d batch %d seq %d", cfg.model == DYN_MODEL_GPT ? "gpt" : "t5",
           cfg.hidden, cfg.heads, cfg.batch, cfg.seq);
    if (cfg.model == DYN_MODEL_T5) printf(" enc-seq %d", cfg.enc_seq);
    printf(" threads %d repeat %d\n", cfg.threads, cfg.repeat);
    const char *wait = getenv("OMP_WAIT_POLICY");
    printf("threading         OpenBLAS %s, OMP_WAIT_POLICY %s\n", dyn_threads_blas_kind(),
           wait ? wait : "unset");
    printf("blas              %s\n", dyn_blas_describe());
    if (verbose) {
        const char *core = getenv("OPENBLAS_CORETYPE"), *mark = getenv(DYN_BLAS_MARKER);
        printf("start-up env      OPENBLAS_CORETYPE %s, %s %s\n", core ? core : "unset",
               DYN_BLAS_MARKER, mark ? mark : "unset");
    }
    double peak = dyn_cpu_fma_peak_gflops(40.0);
    printf("forward+backward  %.2f ms median (min %.2f ms)\n", r.ms, r.ms_min);
    printf("credited work     %.2f GFLOP\n", r.gflop);
    printf("block rate        %.1f GFLOP/s\n", r.gflops);
    printf("sgemm rate        %.1f GFLOP/s (same run)\n", r.sgemm_gflops);
    printf("block / sgemm     %.2f\n", r.gflops / r.sgemm_gflops);
    printf("fma peak          %.1f GFLOP/s per core (measured)\n", peak);
    if (peak > 0.0)
        printf("block / peak      %.2f (of %d core%s)\n", r.gflops / (peak * cfg.threads),
               cfg.threads, cfg.threads == 1 ? "" : "s");
    printf("activations       %.1f MB per block\n", r.act_mb);
    return CLI_EXIT_OK;
}

int cli_bench_main(int argc, char **argv)
{
    /* Idle OpenMP workers must sleep, not spin, and OpenBLAS must run the
     * right kernel (threads.h); may re-execute this command. */
    dyn_threads_init();
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: dynapipe bench <what> [options]\n\n"
                "  layer   forward + backward of one transformer block (GPT-2 or T5 decoder)\n\n"
                "'dynapipe bench layer --help' lists its options.\n");
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "layer") == 0) return bench_layer_main(argc - 1, argv + 1);
    cli_errorf("bench", "unknown benchmark '%s' (try --help)", argv[1]);
    return CLI_EXIT_USAGE;
}
