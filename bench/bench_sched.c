/* bench_sched.c — speed of the schedule generators, the validator and the
 * binary round trip at pipeline sizes the planner uses (S = 4 and 8, M = 16
 * to 64 micro-batches of random sizes).
 *
 * Prints, per schedule, the median over repetitions of: build time, time per
 * instruction, validation time and serialise + parse time, and each build
 * time as a ratio to 1F1B's: in every repetition 1F1B is built on the same
 * costs right after the schedule, and vs_1f1b is the median of those paired
 * ratios (robust to load changing between schedules). The machine is shared
 * and noisy: read medians and ratios, not single times.
 *
 * Usage: bench_sched [reps (default 21)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_args.h" /* defines: bench_args_check */
#include "dynapipe/sched.h"
#include "util/rng.h"  /* defines: dyn_rng_* */
#include "util/util.h" /* defines: dyn_time_ms, dyn_median */

static void random_costs(dyn_stage_costs *c, int32_t M, int32_t ns, uint64_t seed)
{
    dyn_rng rng;
    dyn_rng_seed(&rng, seed);
    if (dyn_stage_costs_alloc(c, M, ns, NULL) != DYN_OK) exit(1);
    for (int32_t m = 0; m < M; m++) {
        double size = 0.5 + 1.5 * dyn_rng_uniform(&rng);
        for (int32_t s = 0; s < ns; s++) {
            size_t k = (size_t)m * ns + s;
            c->fwd_ms[k] = size;
            c->bwd_ms[k] = 2 * size;
            c->bwd_input_ms[k] = size;
            c->bwd_weight_ms[k] = size;
            c->stored_mb[k] = 40 * size;
            c->peak_mb[k] = 5 * size;
            c->send_mb[k] = 2 * size;
        }
    }
}

/* Build 1F1B on the costs random_costs(M, S, seed) gives; *ms: its time. */
static int paired_1f1b(int32_t M, int32_t S, uint64_t seed, double *ms)
{
    dyn_stage_costs c;
    dyn_sched_options o;
    dyn_exec_plan p;
    dyn_error err;
    random_costs(&c, M, S, seed);
    dyn_sched_options_default(&o);
    o.n_ranks = S;
    double t0 = dyn_time_ms();
    dyn_status st = dyn_schedule_build(DYN_SCHEDULE_1F1B, &c, NULL, &o, &p, &err);
    *ms = dyn_time_ms() - t0;
    dyn_stage_costs_free(&c);
    if (st != DYN_OK) {
        fprintf(stderr, "bench_sched: %s\n", err.msg);
        return 1;
    }
    dyn_exec_plan_free(&p);
    return 0;
}

int main(int argc, char **argv)
{
    bench_args_check(argc, argv, "usage: bench_sched [reps 1..10000]\n  times building, validating and serialising schedules at S = 4 and 8", NULL);
    int reps = argc > 1 ? atoi(argv[1]) : 21;
    if (reps < 1 || reps > 10000) {
        fprintf(stderr, "bench_sched: reps must be 1..10000\n");
        return 2;
    }
    double *tb = malloc(sizeof(double) * (size_t)reps), *tv = malloc(sizeof(double) * (size_t)reps);
    double *ts = malloc(sizeof(double) * (size_t)reps), *tr = malloc(sizeof(double) * (size_t)reps);
    if (!tb || !tv || !ts || !tr) return 1;
    const int sizes[][2] = {{4, 16}, {8, 32}, {8, 64}};
    printf("%-17s %2s %3s %2s %8s %11s %9s %8s %11s %10s\n", "schedule", "S", "M", "v", "instrs",
           "build_ms", "ns/instr", "vs_1f1b", "validate_ms", "serde_ms");
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        int32_t S = sizes[z][0], M = sizes[z][1];
        for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
            int32_t v = k == DYN_SCHEDULE_INTERLEAVED ? 2 : 1;
            dyn_stage_costs c;
            random_costs(&c, M, S * v, 1000 + z);
            dyn_sched_options o;
            dyn_sched_options_default(&o);
            o.n_ranks = S;
            o.chunks = v;
            int64_t n_instrs = 0;
            for (int r = 0; r < reps; r++) {
                dyn_exec_plan p, q;
                dyn_error err;
                /* the paired 1F1B build runs before the schedule's on even
                 * repetitions and after it on odd ones, so neither gains
                 * from the other's warm caches */
                double pair_ms = 0;
                if (k != DYN_SCHEDULE_1F1B && r % 2 == 0 && paired_1f1b(M, S, 1000 + z, &pair_ms)) return 1;
                double t0 = dyn_time_ms();
                if (dyn_schedule_build((dyn_schedule)k, &c, NULL, &o, &p, &err) != DYN_OK) {
                    fprintf(stderr, "bench_sched: %s\n", err.msg);
                    return 1;
                }
                double t1 = dyn_time_ms();
                tb[r] = t1 - t0;
                if (k != DYN_SCHEDULE_1F1B && r % 2 == 1 && paired_1f1b(M, S, 1000 + z, &pair_ms)) return 1;
                tr[r] = k == DYN_SCHEDULE_1F1B ? 1 : pair_ms > 0 ? tb[r] / pair_ms : 1;
                t1 = dyn_time_ms();
                if (dyn_exec_plan_validate(&p, &err) != DYN_OK) {
                    fprintf(stderr, "bench_sched: %s\n", err.msg);
                    return 1;
                }
                double t2 = dyn_time_ms();
                uint8_t *buf;
                size_t len;
                if (dyn_exec_plan_serialize(&p, &buf, &len, &err) != DYN_OK ||
                    dyn_exec_plan_deserialize(buf, len, &q, &err) != DYN_OK) {
                    fprintf(stderr, "bench_sched: %s\n", err.msg);
                    return 1;
                }
                double t3 = dyn_time_ms();
                tv[r] = t2 - t1;
                ts[r] = t3 - t2;
                n_instrs = 0;
                for (int32_t rr = 0; rr < p.n_ranks; rr++) n_instrs += p.ranks[rr].n_instrs;
                free(buf);
                dyn_exec_plan_free(&p);
                dyn_exec_plan_free(&q);
            }
            double b = dyn_median(tb, reps);
            printf("%-17s %2d %3d %2d %8lld %11.4f %9.1f %8.2f %11.4f %10.4f\n",
                   dyn_schedule_name((dyn_schedule)k), S, M, v, (long long)n_instrs, b,
                   b * 1e6 / (double)n_instrs, dyn_median(tr, reps), dyn_median(tv, reps), dyn_median(ts, reps));
            dyn_stage_costs_free(&c);
        }
    }
    free(tb);
    free(tv);
    free(ts);
    free(tr);
    return 0;
}
