/* bench_layer.c — forward + backward of one GPT-2 block (hidden 512, 8 heads,
 * fp32) at (batch, seq) = (16,128), (4,512), (1,2048), (8,256) and one T5
 * decoder block (decoder 128, encoder 512, batch 4), each with one thread and
 * with two, printed beside the sgemm rate measured in the same run.
 *
 * usage: bench_layer [repeat]   (default 5; medians over the repeats) */
#include <stdio.h>
#include <stdlib.h>

#include "model/layer_bench.h" /* defines: dyn_layer_bench_run */

int main(int argc, char **argv)
{
    int repeat = argc > 1 ? atoi(argv[1]) : 5;
    if (repeat < 1) {
        fprintf(stderr, "usage: bench_layer [repeat >= 1]\n");
        return 2;
    }
    const struct { dyn_model_kind m; int b, s, e; } shapes[] = {
        {DYN_MODEL_GPT, 16, 128, 0}, {DYN_MODEL_GPT, 4, 512, 0}, {DYN_MODEL_GPT, 1, 2048, 0},
        {DYN_MODEL_GPT, 8, 256, 0},  {DYN_MODEL_T5, 4, 128, 512},
    };
    printf("%-5s %5s %5s %5s %7s %10s %9s %9s %11s %7s %8s\n", "model", "batch", "seq", "enc",
           "threads", "ms(med)", "GFLOP", "GFLOP/s", "sgemm GF/s", "ratio", "act MB");
    for (int th = 1; th <= 2; th++) {
        for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
            dyn_layer_bench_cfg cfg = {shapes[i].m, 512, 8, shapes[i].b, shapes[i].s, shapes[i].e,
                                       th, repeat};
            dyn_layer_bench_result r;
            dyn_error err;
            if (dyn_layer_bench_run(&cfg, &r, &err) != DYN_OK) {
                fprintf(stderr, "bench_layer: %s\n", err.msg);
                return 1;
            }
            printf("%-5s %5d %5d %5d %7d %10.2f %9.2f %9.1f %11.1f %7.2f %8.1f\n",
                   shapes[i].m == DYN_MODEL_GPT ? "gpt" : "t5", shapes[i].b, shapes[i].s,
                   shapes[i].e, th, r.ms, r.gflop, r.gflops, r.sgemm_gflops,
                   r.gflops / r.sgemm_gflops, r.act_mb);
            fflush(stdout);
        }
    }
    return 0;
}
