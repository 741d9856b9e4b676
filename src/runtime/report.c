/* report.c — what `dynapipe train` shows and writes about its iterations
 * (contract in report.h): the progress line, the metrics file and the
 * trace gathered from every rank. */
#include "runtime/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sched.h" /* defines: dyn_schedule_name */
#include "dynapipe/sim.h"   /* defines: dyn_sim_op_label, dyn_sim_op_category */
#include "util/util.h"      /* defines: dyn_atomic_*, dyn_calloc, dyn_median */

void rt_report_progress(const rt_iter *it, int64_t steps, int tty)
{
    double tps = it->iteration_ms > 0 ? (double)it->tokens / (it->iteration_ms / 1e3) : 0;
    double hidden = it->plan_ms > 0 ? 100.0 * (1.0 - (it->plan_wait_ms > it->plan_ms ? it->plan_ms : it->plan_wait_ms) /
                                                       it->plan_ms)
                                    : 100.0;
    char line[256];
    snprintf(line, sizeof line,
             "step %lld/%lld  loss %.4f  %.0f tokens/s  %.0f ms/iter (predicted %.0f)  efficiency %.0f%% "
             "(%.0f%% at measured rates)  bubble %.2f  plan %.1f ms, %.0f%% hidden  %s x%d",
             (long long)it->step + 1, (long long)steps, it->loss, tps, it->iteration_ms, it->predicted_ms,
             100.0 * it->efficiency, 100.0 * it->efficiency_rated, it->bubble, it->plan_ms, hidden,
             it->schedule >= 0 ? dyn_schedule_name((dyn_schedule)it->schedule) : "-", it->n_mb);
    if (tty && it->step + 1 < steps)
        fprintf(stderr, "\r%s\033[K", line);
    else
        fprintf(stderr, "%s%s\n", tty ? "\r" : "", line);
}

void rt_report_summary(const rt_iter *iters, int64_t first, int64_t end)
{
    int64_t all_from = first;
    if (end - first > 1) first++; /* the first iteration allocates */
    int64_t n = end - first;
    if (n < 1) return;
    double *tps = malloc((size_t)n * sizeof(double)), *ms = malloc((size_t)n * sizeof(double));
    if (tps == NULL || ms == NULL) { /* a summary is not worth failing the run for */
        free(tps);
        free(ms);
        return;
    }
    double ideal = 0, rated = 0, iter = 0;
    for (int64_t k = first; k < end; k++) {
        const rt_iter *it = &iters[k];
        tps[k - first] = it->iteration_ms > 0 ? (double)it->tokens / (it->iteration_ms / 1e3) : 0;
        ms[k - first] = it->iteration_ms;
        ideal += it->ideal_ms;
        rated += it->ideal_rated_ms;
        iter += it->iteration_ms;
    }
    /* the last evaluation, named for what it is on (held-out, validation, train-data) */
    char eval[96] = "";
    for (int64_t k = end - 1; k >= all_from && eval[0] == '\0'; k--)
        if (iters[k].eval_loss >= 0)
            snprintf(eval, sizeof eval, "; %s loss %.4f at step %lld", iters[k].eval_on ? iters[k].eval_on : "eval",
                     iters[k].eval_loss, (long long)k + 1);
    if (eval[0] != '\0' && iters[all_from].eval_before >= 0) {
        size_t at = strlen(eval);
        snprintf(eval + at, sizeof eval - at, " (%.4f at step 0)", iters[all_from].eval_before);
    }
    fprintf(stderr,
            "dynapipe train: %lld iterations: median %.0f tokens/s, %.1f ms/iter; efficiency %.1f%% of the ideal "
            "bound (%.1f of %.1f ms), %.1f%% at the measured rates%s\n",
            (long long)n, dyn_median(tps, (int)n), dyn_median(ms, (int)n), iter > 0 ? 100.0 * ideal / iter : 0.0, ideal,
            iter, iter > 0 ? 100.0 * rated / iter : 0.0, eval);
    free(tps);
    free(ms);
}

/* The name of the first NaN or infinite number of record it, or NULL: JSON
 * has no such numbers, so printf's "nan" must never reach the file. */
static const char *nonfinite_field(const rt_iter *it, const dyn_rt_group *g)
{
    const struct { const char *name; double x; } f[] = {
        {"loss", it->loss},           {"iteration_ms", it->iteration_ms}, {"predicted_ms", it->predicted_ms},
        {"bubble_fraction", it->bubble}, {"plan_ms", it->plan_ms},       {"plan_wait_ms", it->plan_wait_ms},
        {"comm_wait_ms", it->comm_wait_ms}, {"comm_mb", it->comm_mb},   {"lr", it->lr},
        {"grad_norm", it->grad_norm}, {"makespan_ms", it->makespan_ms}, {"exec_ms", it->exec_ms},
        {"step_ms", it->step_ms},     {"eval_loss", it->eval_loss},       {"eval_loss_before", it->eval_before},
        {"ideal_ms", it->ideal_ms},   {"ideal_rated_ms", it->ideal_rated_ms},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (!isfinite(f[i].x)) return f[i].name;
    for (int w = 0; w < g->world_size; w++) {
        if (!isfinite(it->peak_mb[w])) return "peak_mem_mb";
        if (!isfinite(it->pred_peak_mb[w])) return "predicted_peak_mem_mb";
        if (!isfinite(it->compute_ms[2 * w])) return "compute_ms";
        if (!isfinite(it->compute_ms[2 * w + 1])) return "predicted_compute_ms";
    }
    for (int i = 0; it->time_scale != NULL && i < g->stages * RT_CALIB_DIRS; i++)
        if (!isfinite(it->time_scale[i])) return "time_scale";
    return NULL;
}

dyn_status rt_report_metrics(const char *path, const rt_iter *iters, int64_t first, int64_t end,
                             const dyn_rt_group *g, dyn_error *err)
{
    for (int64_t k = first; k < end; k++) {
        const char *bad = nonfinite_field(&iters[k], g);
        if (bad != NULL)
            return dyn_error_set(err, DYN_ERR_NUMERIC, "%s: step %lld's %s is not a finite number; not written", path,
                                 (long long)k, bad);
    }
    dyn_atomic_file af;
    dyn_status st = dyn_atomic_open(&af, path, err);
    if (st != DYN_OK) return st;
    for (int64_t k = first; k < end; k++) {
        const rt_iter *it = &iters[k];
        double tps = it->iteration_ms > 0 ? (double)it->tokens / (it->iteration_ms / 1e3) : 0;
        fprintf(af.fp,
                "{\"step\":%lld,\"loss\":%.6f,\"tokens\":%lld,\"target_tokens\":%lld,\"tokens_per_s\":%.1f,"
                "\"iteration_ms\":%.3f,\"predicted_ms\":%.3f,\"bubble_fraction\":%.4f,\"plan_ms\":%.3f,"
                "\"plan_wait_ms\":%.3f,\"comm_wait_ms\":%.3f,\"comm_mb\":%.3f,\"lr\":%.6g,\"grad_norm\":%.6g,\"schedule\":\"%s\","
                "\"n_microbatches\":%d,\"makespan_ms\":%.3f,\"exec_ms\":%.3f,\"step_ms\":%.3f,\"ideal_ms\":%.3f,"
                "\"efficiency\":%.4f,\"ideal_rated_ms\":%.3f,\"efficiency_rated\":%.4f,\"peak_mem_mb\":[",
                (long long)it->step, it->loss, (long long)it->tokens, (long long)it->target_tokens, tps,
                it->iteration_ms, it->predicted_ms, it->bubble, it->plan_ms, it->plan_wait_ms, it->comm_wait_ms,
                it->comm_mb, it->lr, it->grad_norm, it->schedule >= 0 ? dyn_schedule_name((dyn_schedule)it->schedule) : "-",
                it->n_mb, it->makespan_ms, it->exec_ms, it->step_ms, it->ideal_ms, it->efficiency,
                it->ideal_rated_ms, it->efficiency_rated);
        for (int w = 0; w < g->world_size; w++) fprintf(af.fp, "%s%.2f", w ? "," : "", it->peak_mb[w]);
        fprintf(af.fp, "],\"predicted_peak_mem_mb\":[");
        for (int w = 0; w < g->world_size; w++) fprintf(af.fp, "%s%.2f", w ? "," : "", it->pred_peak_mb[w]);
        fprintf(af.fp, "],\"compute_ms\":[");
        for (int w = 0; w < g->world_size; w++) fprintf(af.fp, "%s%.3f", w ? "," : "", it->compute_ms[2 * w]);
        fprintf(af.fp, "],\"predicted_compute_ms\":[");
        for (int w = 0; w < g->world_size; w++) fprintf(af.fp, "%s%.3f", w ? "," : "", it->compute_ms[2 * w + 1]);
        fprintf(af.fp, "],\"hosts\":[");
        for (int w = 0; w < g->world_size; w++) fprintf(af.fp, "%s\"%s\"", w ? "," : "", g->hosts[w]);
        fprintf(af.fp, "]");
        if (it->time_scale != NULL) {
            fprintf(af.fp, ",\"time_scale\":[");
            for (int r = 0; r < g->stages; r++) {
                const double *f = it->time_scale + (size_t)r * RT_CALIB_DIRS;
                fprintf(af.fp, "%s[%.4f,%.4f,%.4f]", r ? "," : "", f[RT_CALIB_FWD], f[RT_CALIB_BWD], f[RT_CALIB_OPT]);
            }
            fprintf(af.fp, "]");
        }
        if (it->epoch >= 0) fprintf(af.fp, ",\"epoch\":%.6f", it->epoch);
        if (it->eval_before >= 0) fprintf(af.fp, ",\"eval_loss_before\":%.6f", it->eval_before);
        if (it->eval_loss >= 0)
            fprintf(af.fp, ",\"eval_loss\":%.6f,\"eval_on\":\"%s\"", it->eval_loss, it->eval_on ? it->eval_on : "");
        fprintf(af.fp, "}\n");
    }
    if (ferror(af.fp)) {
        dyn_atomic_abort(&af);
        return dyn_error_set(err, DYN_ERR_IO, "%s: write failed", path);
    }
    return dyn_atomic_commit(&af, err);
}

dyn_status rt_report_order(const char *path, int32_t *const *order, const int32_t *order_n, const int64_t *pos_after,
                           int32_t per_epoch, int64_t first, int64_t end, dyn_error *err)
{
    dyn_atomic_file af;
    dyn_status st = dyn_atomic_open(&af, path, err);
    if (st != DYN_OK) return st;
    for (int64_t k = first; k < end; k++) {
        int64_t before = pos_after[k] - order_n[k];
        fprintf(af.fp, "{\"step\":%lld,\"epoch\":%lld,\"samples\":[", (long long)k,
                (long long)(per_epoch > 0 ? before / per_epoch : 0));
        for (int32_t i = 0; i < order_n[k]; i++) fprintf(af.fp, "%s%d", i ? "," : "", order[k][i]);
        fprintf(af.fp, "]}\n");
    }
    if (ferror(af.fp)) {
        dyn_atomic_abort(&af);
        return dyn_error_set(err, DYN_ERR_IO, "%s: write failed", path);
    }
    return dyn_atomic_commit(&af, err);
}

dyn_status rt_report_trace(const char *path, const rt_exec *x, const dyn_rt_group *g, double timeout_s, dyn_error *err)
{
    int64_t n = 0;
    const rt_event *ev = rt_exec_events(x, &n);
    int W = g->world_size;
    dyn_rt_gathered all;
    dyn_status st = dyn_rt_gather_bytes(g->world, ev, (int)(n * (int64_t)sizeof(rt_event)), timeout_s, "the trace gather",
                                        &all, err);
    if (st == DYN_OK && g->world_rank == 0) {
        dyn_atomic_file af;
        st = dyn_atomic_open(&af, path, err);
        if (st == DYN_OK) {
            FILE *f = af.fp;
            fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"dynapipe train\",\"stages\":%d,\"dp\":%d},\n"
                       "\"traceEvents\":[\n",
                    g->stages, g->dp);
            fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"pipeline\"}}");
            for (int w = 0; w < W; w++)
                fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d "
                           "(stage %d, replica %d, %s)\",\"host\":\"%s\"}}",
                        w, w, w % g->stages, w / g->stages, g->hosts[w], g->hosts[w]);
            for (int w = 0; w < W; w++) {
                const rt_event *e = (const rt_event *)(all.data + all.displs[w]);
                int64_t ne = all.counts[w] / (int)sizeof(rt_event);
                for (int64_t i = 0; i < ne; i++)
                    fprintf(f, ",\n{\"name\":\"%s%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                               "\"dur\":%.3f,\"args\":{\"op\":\"%s\",\"instr\":%d,\"microbatch\":%d,\"stage\":%d,"
                               "\"useful\":%.4f,\"predicted_ms\":%.4f,\"rows\":%d,\"len\":%d}}",
                            dyn_sim_op_label(e[i].op), e[i].microbatch, dyn_sim_op_category(e[i].op), w, e[i].t0_ms * 1e3,
                            (e[i].t1_ms - e[i].t0_ms) * 1e3, dyn_sim_op_label(e[i].op), e[i].instr, e[i].microbatch,
                            e[i].stage, e[i].useful, e[i].pred_ms, e[i].rows, e[i].len);
            }
            fprintf(f, "\n]}\n");
            if (ferror(f)) {
                dyn_atomic_abort(&af);
                st = dyn_error_set(err, DYN_ERR_IO, "%s: write failed", path);
            } else {
                st = dyn_atomic_commit(&af, err);
            }
        }
    }
    dyn_rt_gathered_free(&all);
    return st;
}
