/* cli_bench.c — `dynapipe bench layer`: time forward + backward of one GPT-2
 * block, one T5 decoder block or one Llama block on this CPU and print
 * milliseconds, GFLOP/s,
 * the sgemm rate measured in the same run (src/model/layer_bench.c), the
 * measured FMA peak of one core and the BLAS kernel in use (model/blas.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"           /* defines: cli_errorf, CLI_EXIT_* */
#include "cli/flags.h"         /* defines: cli_flag, cli_flags_parse, cli_flags_usage */
#include "dynapipe/model_config.h" /* defines: dyn_model_kind_parse, dyn_model_kind_name */
#include "model/blas.h"        /* defines: dyn_blas_describe, dyn_cpu_fma_peak_gflops */
#include "model/layer_bench.h" /* defines: dyn_layer_bench_run */
#include "model/threads.h"     /* defines: dyn_threads_init, dyn_threads_blas_kind */

/* The flags: the benchmark's configuration and two of the command's own. */
typedef struct bench_args {
    dyn_layer_bench_cfg cfg;
    int have_model, verbose;
} bench_args;

static int parse_kind(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    bench_args *a = args;
    if (dyn_model_kind_parse(v, &a->cfg.model, NULL) != DYN_OK) {
        cli_errorf(cmd, "%s needs gpt, t5 or llama, not '%s'", f->name, v);
        return -1;
    }
    a->have_model = 1;
    return 0;
}

#define BA bench_args
static const cli_flag bench_flags[] = {
    CLI_FN("--model", "gpt|t5|llama", parse_kind,
           "the block: a GPT-2 block, a T5 v1.1 decoder block or a\nLlama block (required)"),
    {.name = "--hidden", .metavar = "H", .type = CLI_FLAG_I32, .field = offsetof(BA, cfg.hidden), .min = 1,
     .max = 65536, .help = "hidden size", .def = "required"},
    {.name = "--heads", .metavar = "N", .type = CLI_FLAG_I32, .field = offsetof(BA, cfg.heads), .min = 1,
     .max = 4096, .help = "attention heads", .def = "required"},
    {.name = "--batch", .metavar = "B", .type = CLI_FLAG_I32, .field = offsetof(BA, cfg.batch), .min = 1,
     .max = 65536, .help = "rows", .def = "required"},
    {.name = "--seq", .metavar = "S", .type = CLI_FLAG_I32, .field = offsetof(BA, cfg.seq), .min = 1,
     .max = 1 << 20, .help = "sequence length (T5: the decoder's)", .def = "required"},
    {.name = "--enc-seq", .metavar = "E", .type = CLI_FLAG_I32, .field = offsetof(BA, cfg.enc_seq), .min = 1,
     .max = 1 << 20, .help = "t5: encoder positions", .def = "S"},
    CLI_I32("--threads", "T", BA, cfg.threads, 1, 1024, "OpenMP and OpenBLAS threads"),
    CLI_I32("--repeat", "R", BA, cfg.repeat, 1, 100000, "timed repeats, after one warm-up"),
    CLI_BOOL("--verbose", BA, verbose, 1, "add the start-up environment"),
    CLI_END,
};
#undef BA

static void bench_args_init(bench_args *a)
{
    memset(a, 0, sizeof *a);
    a->cfg = (dyn_layer_bench_cfg){DYN_MODEL_GPT, 0, 0, 0, 0, 0, 1, 5};
}

static void bench_usage(FILE *out)
{
    bench_args d;
    bench_args_init(&d);
    fprintf(out,
            "usage: dynapipe bench layer --model gpt|t5|llama --hidden H --heads N --batch B --seq S\n"
            "                            [--enc-seq E] [--threads T] [--repeat R] [--verbose]\n\n"
            "Forward + backward of one transformer block in fp32 on random weights:\n"
            "  gpt  a GPT-2 block (pre-LayerNorm, causal attention, GELU MLP 4H)\n"
            "  t5   a T5 v1.1 decoder block (self + cross attention, gated-GELU FFN 4H,\n"
            "       d_kv = H / N) over an encoder output of E positions\n"
            "  llama  a Llama block (RMSNorm, rotary embedding, grouped-query causal\n"
            "       attention with N/4 key/value heads when 4 divides N, SwiGLU FFN of\n"
            "       8H/3 rounded up to 64)\n"
            "Every row is full (no padding). Prints the median milliseconds over R\n"
            "repeats (after one warm-up), the GFLOP credited (GPT:\n"
            "3 x (24 B S H^2 + 4 B S^2 H); T5: see docs/architecture.md; Llama: 3 x its\n"
            "forward products and full S x S attention), GFLOP/s and\n"
            "the sgemm GFLOP/s measured between the repeats. --threads\n"
            "sets OpenMP and OpenBLAS threads (one shared pool; idle workers sleep:\n"
            "OMP_WAIT_POLICY=PASSIVE unless you set it).\n"
            "Also prints the fp32 FMA peak of one core, measured, and the block's share\n"
            "of T cores' peak. The BLAS line says which OpenBLAS kernel runs and why:\n"
            "the best one for this CPU unless you set OPENBLAS_CORETYPE, checked against\n"
            "a plain loop at start-up.\n\n");
    cli_flag_set set = {bench_flags, &d};
    cli_flags_usage(out, &set, 1, NULL);
}

static int bench_layer_main(int argc, char **argv)
{
    const char *cmd = "bench layer";
    bench_args ba;
    bench_args_init(&ba);
    cli_flag_set set = {bench_flags, &ba};
    int p = cli_flags_parse(cmd, &set, 1, argc, argv);
    if (p == 1) {
        bench_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (p != 0) return CLI_EXIT_USAGE;
    dyn_layer_bench_cfg cfg = ba.cfg;
    int verbose = ba.verbose;
    if (!ba.have_model || !cfg.hidden || !cfg.heads || !cfg.batch || !cfg.seq) {
        cli_errorf(cmd, "--model, --hidden, --heads, --batch and --seq are required (try --help)");
        return CLI_EXIT_USAGE;
    }
    if (cfg.hidden % cfg.heads != 0) {
        cli_errorf(cmd, "--hidden %d is not divisible by --heads %d", cfg.hidden, cfg.heads);
        return CLI_EXIT_USAGE;
    }
    if (cfg.model == DYN_MODEL_LLAMA && (cfg.hidden / cfg.heads) % 2 != 0) {
        cli_errorf(cmd, "--model llama needs an even head dim (rotary pairs): --hidden %d / --heads %d = %d",
                   cfg.hidden, cfg.heads, cfg.hidden / cfg.heads);
        return CLI_EXIT_USAGE;
    }
    if (cfg.model != DYN_MODEL_T5 && cfg.enc_seq) {
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
    printf("model %s hidden %d heads %d batch %d seq %d", dyn_model_kind_name(cfg.model), cfg.hidden, cfg.heads,
           cfg.batch, cfg.seq);
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
                "  layer   forward + backward of one transformer block (GPT-2, T5 decoder or Llama)\n\n"
                "'dynapipe bench layer --help' lists its options.\n");
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "layer") == 0) return bench_layer_main(argc - 1, argv + 1);
    cli_errorf("bench", "unknown benchmark '%s' (try --help)", argv[1]);
    return CLI_EXIT_USAGE;
}
