/* cli_plan.c — `dynapipe plan`: cut global batches into micro-batches and
 * print what the planner chose, per global batch and in total; optionally
 * write the plans as JSON (atomically, so a failed run leaves no file).
 *
 * JSON: {"model": "gpt"|"t5"|"llama", "method": ..., "stages": S, "dp": D,
 *        "chunks": V, "memory_limit_mb": ..., "global_batches": [
 *          {"index": i, "n_samples": n, "objective_ms": ..., "balanced_ms": ...,
 *           "plan_time_ms": ..., "peak_mb": ..., "real_tokens": ...,
 *           "padded_tokens": ..., "padding_efficiency": ...,
 *           "microbatches": [{"samples": [ids], "input_len": L, "target_len": M,
 *                             "rows": r, "replica": d, "time_ms": ...,
 *                             "stored_mb": ..., "peak_mb": ...}, ...]}, ...]}
 * input_len / target_len are the micro-batch's padded lengths: for GPT
 * input_len is the padded whole sequence (input + target) and target_len is
 * 0; for T5 they are the padded encoder and decoder lengths. Sample ids are
 * dataset ids (0-based in file or generation order). plan_time_ms is a
 * measured wall time, the only field that differs between identical runs.
 *
 * --show-plan / --plan-out / --schedule: turn each global batch's
 * micro-batches into every replica's execution plan, the one the runtime
 * would run (dyn_pipeline_plan, dynapipe/pipeline.h: schedule --schedule,
 * default auto, chosen by simulation; validated), and print it readably
 * and/or write its binary form (one file per global batch and replica, each
 * atomic). The JSON then also has, per global batch,
 *   "replica_plans": [{"replica": d, "schedule": name, "recompute": name,
 *                      "chunks": v, "makespan_ms": ..., "microbatches": [j]}]
 * where microbatches[k] is the index, in the batch's "microbatches" array,
 * of the plan's micro-batch k (so its sample ids are traceable). Each
 * replica plan also has its simulated "max_peak_mb" and "bubble_fraction"
 * (1 - compute time of its ranks / (S * makespan)); the batch has
 * "makespan_ms" (the slowest replica's), "bubble_fraction" over all S * D
 * devices, and "tokens_per_s" (its real tokens / makespan).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"                /* defines: cli_errorf, CLI_EXIT_* */
#include "cli/plan_args.h"         /* defines: plan_args_*, plan_inputs_* */
#include "dynapipe/model_config.h" /* defines: dyn_model_kind_name */
#include "dynapipe/pipeline.h"     /* defines: dyn_pipeline_*, DYN_SCHEDULE_AUTO */
#include "dynapipe/sched.h"        /* defines: dyn_schedule_*, dyn_exec_plan_* */
#include "util/util.h"              /* defines: dyn_atomic_*, DYN_RESERVE */

#define CMD "plan"

/* 1 - (compute time of the replica's ranks) / (ranks * makespan); 0 for an
 * idle replica. */
static double replica_bubble(const dyn_replica_plan *rp)
{
    if (rp->n_microbatches == 0 || !(rp->makespan_ms > 0)) return 0;
    double busy = 0;
    for (int32_t k = 0; k < rp->plan.n_ranks; k++) busy += rp->rank_busy_ms[k];
    return 1.0 - busy / (rp->plan.n_ranks * rp->makespan_ms);
}

/* The replica plans of one global batch as a JSON array (header comment);
 * 0 on allocation failure. */
static int replica_plans_json(cJSON *b, const dyn_pipeline_result *res)
{
    cJSON *arr = cJSON_AddArrayToObject(b, "replica_plans");
    if (arr == NULL) return 0;
    for (int32_t r = 0; r < res->n_replicas; r++) {
        const dyn_replica_plan *rp = &res->replicas[r];
        cJSON *o = cJSON_CreateObject();
        if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
            cJSON_Delete(o);
            return 0;
        }
        cJSON *ids = cJSON_CreateIntArray(rp->mb_index, rp->n_microbatches);
        if (ids == NULL) return 0;
        cJSON_AddItemToObject(o, "microbatches", ids);
        if (!cJSON_AddNumberToObject(o, "replica", rp->replica) ||
            !cJSON_AddStringToObject(o, "schedule", dyn_schedule_name(rp->schedule)) ||
            !cJSON_AddStringToObject(o, "recompute", dyn_recompute_name(rp->recompute)) ||
            !cJSON_AddNumberToObject(o, "chunks", rp->chunks) ||
            !cJSON_AddNumberToObject(o, "makespan_ms", rp->makespan_ms) ||
            !cJSON_AddNumberToObject(o, "max_peak_mb", rp->max_peak_mb) ||
            !cJSON_AddNumberToObject(o, "bubble_fraction", replica_bubble(rp)))
            return 0;
    }
    /* The global batch is done when its slowest replica is; an idle
     * replica's S devices count as idle throughout. */
    double makespan = 0, busy = 0;
    int32_t ranks = 0; /* S, the same for every replica that has a plan */
    for (int32_t r = 0; r < res->n_replicas; r++) {
        const dyn_replica_plan *rp = &res->replicas[r];
        if (rp->n_microbatches == 0) continue;
        if (rp->makespan_ms > makespan) makespan = rp->makespan_ms;
        for (int32_t k = 0; k < rp->plan.n_ranks; k++) busy += rp->rank_busy_ms[k];
        ranks = rp->plan.n_ranks;
    }
    double devices = (double)ranks * res->n_replicas;
    return cJSON_AddNumberToObject(b, "makespan_ms", makespan) &&
           cJSON_AddNumberToObject(b, "bubble_fraction", makespan > 0 ? 1.0 - busy / (devices * makespan) : 0) &&
           cJSON_AddNumberToObject(b, "tokens_per_s",
                                   makespan > 0 ? (double)res->batch.real_tokens / (makespan * 1e-3) : 0);
}

/* One global batch as a JSON object (with its replica plans if res is not
 * NULL); NULL on allocation failure. */
static cJSON *batch_json(int32_t index, const dyn_batch_plan *pl, const dyn_pipeline_result *res, int t5)
{
    cJSON *b = cJSON_CreateObject();
    if (b == NULL) return NULL;
    cJSON *mbs = cJSON_AddArrayToObject(b, "microbatches");
    int ok = mbs != NULL && cJSON_AddNumberToObject(b, "index", index) &&
             cJSON_AddNumberToObject(b, "n_samples", pl->n_samples) &&
             cJSON_AddNumberToObject(b, "objective_ms", pl->objective_ms) &&
             cJSON_AddStringToObject(b, "method", dyn_batching_name((dyn_batching)pl->method)) &&
             cJSON_AddNumberToObject(b, "knob", (double)pl->knob) &&
             (res == NULL || (cJSON_AddNumberToObject(b, "ideal_ms", res->ideal.bound_ms) &&
                              cJSON_AddNumberToObject(b, "efficiency", res->efficiency))) &&
             cJSON_AddNumberToObject(b, "balanced_ms", pl->balanced_ms) &&
             cJSON_AddNumberToObject(b, "plan_time_ms", pl->plan_time_ms) &&
             cJSON_AddNumberToObject(b, "peak_mb", pl->device_peak_mb) &&
             cJSON_AddNumberToObject(b, "real_tokens", (double)pl->real_tokens) &&
             cJSON_AddNumberToObject(b, "padded_tokens", (double)pl->padded_tokens) &&
             cJSON_AddNumberToObject(b, "padding_efficiency",
                                     pl->padded_tokens ? (double)pl->real_tokens / pl->padded_tokens : 0) &&
             (res == NULL || replica_plans_json(b, res));
    for (int32_t m = 0; ok && m < pl->n_microbatches; m++) {
        const dyn_plan_microbatch *mb = &pl->mbs[m];
        cJSON *o = cJSON_CreateObject();
        cJSON *ids = cJSON_CreateIntArray(pl->sample_ids + mb->first, mb->n_samples);
        if (o == NULL || ids == NULL) {
            cJSON_Delete(o);
            cJSON_Delete(ids);
            ok = 0;
            break;
        }
        cJSON_AddItemToArray(mbs, o);
        cJSON_AddItemToObject(o, "samples", ids);
        ok = cJSON_AddNumberToObject(o, "input_len", mb->shape.enc_len) &&
             cJSON_AddNumberToObject(o, "target_len", t5 ? mb->shape.dec_len : 0) &&
             cJSON_AddNumberToObject(o, "rows", mb->shape.rows) &&
             cJSON_AddNumberToObject(o, "replica", mb->replica) &&
             cJSON_AddNumberToObject(o, "time_ms", mb->time_ms) &&
             cJSON_AddNumberToObject(o, "stored_mb", mb->stored_mb) &&
             cJSON_AddNumberToObject(o, "peak_mb", mb->peak_mb);
    }
    if (!ok) {
        cJSON_Delete(b);
        return NULL;
    }
    return b;
}

/* Print one global batch. quiet: one line; default: plus the micro-batch
 * shapes (rows x padded length, runs of equal shapes counted); verbose: plus
 * a table with every micro-batch's time and memory. */
/* sim_ms: the simulated iteration time of the execution plans (the slowest
 * replica), or a negative value when none were built. The planner's
 * objective is the DP's estimate ((S - 1) t_max / v + t_sum / d), an upper
 * bound of the pipeline's time rather than a prediction of it: it is named
 * as such, with the simulated time beside it when there is one. */
/* run_method: the method asked for; when dynapipe's winning candidate is
 * another method's plan, the line names it. res: the built plans (NULL:
 * none), for the efficiency against the ideal bound. */
static void print_batch(int32_t index, const dyn_batch_plan *pl, int t5, int verbosity, double limit_mb,
                        double sim_ms, dyn_batching run_method, const dyn_pipeline_result *res)
{
    double eff = pl->padded_tokens ? 100.0 * (double)pl->real_tokens / pl->padded_tokens : 0;
    char sim[96];
    if (sim_ms >= 0 && res != NULL)
        snprintf(sim, sizeof sim, "simulated iteration %.2f ms (efficiency %.1f%% of the ideal bound)", sim_ms,
                 100.0 * res->efficiency);
    else if (sim_ms >= 0) snprintf(sim, sizeof sim, "simulated iteration %.2f ms", sim_ms);
    else snprintf(sim, sizeof sim, "simulated: give --schedule");
    char won[64] = "";
    if ((int32_t)run_method != pl->method) {
        const char *knob = dyn_tune_knob_name((dyn_batching)pl->method);
        snprintf(won, sizeof won, " (%s plan, %s=%lld)", dyn_batching_name((dyn_batching)pl->method),
                 knob ? knob : "-", (long long)pl->knob);
    }
    printf("global batch %d: %d samples, %lld tokens -> %d micro-batches%s; planner objective %.2f ms "
           "(balanced %.2f ms), %s, padding efficiency %.1f%%, peak %.1f MB, planned in %.3f ms\n",
           index, pl->n_samples, (long long)pl->real_tokens, pl->n_microbatches, won, pl->objective_ms,
           pl->balanced_ms, sim, eff, pl->device_peak_mb, pl->plan_time_ms);
    if (pl->device_peak_mb > limit_mb)
        printf("  (peak counts S micro-batches in flight; a sample over its share runs alone and the "
               "schedule keeps fewer in flight to stay within %.0f MB)\n",
               limit_mb);
    if (verbosity == 0) return;
    if (verbosity == 1) {
        printf("  shapes (rows x %s):", t5 ? "input+target" : "length");
        int col = 0;
        for (int32_t m = 0; m < pl->n_microbatches;) {
            const dyn_mb_shape *a = &pl->mbs[m].shape;
            int32_t e = m + 1;
            while (e < pl->n_microbatches && pl->mbs[e].replica == pl->mbs[m].replica &&
                   pl->mbs[e].shape.rows == a->rows && pl->mbs[e].shape.enc_len == a->enc_len &&
                   pl->mbs[e].shape.dec_len == a->dec_len)
                e++;
            char item[64];
            int len = t5 ? snprintf(item, sizeof item, " %dx%d+%d", a->rows, a->enc_len, a->dec_len)
                         : snprintf(item, sizeof item, " %dx%d", a->rows, a->enc_len);
            if (e - m > 1) len += snprintf(item + len, sizeof item - (size_t)len, "(*%d)", e - m);
            if (col + len > 72) {
                printf("\n   ");
                col = 0;
            }
            fputs(item, stdout);
            col += len;
            m = e;
        }
        printf("\n");
        return;
    }
    printf("  %4s %7s %7s %14s %10s %10s %10s\n", "mb", "replica", "samples", "rows x len", "time_ms",
           "stored_mb", "peak_mb");
    for (int32_t m = 0; m < pl->n_microbatches; m++) {
        const dyn_plan_microbatch *mb = &pl->mbs[m];
        char shape[48];
        if (t5)
            snprintf(shape, sizeof shape, "%d x %d+%d", mb->shape.rows, mb->shape.enc_len, mb->shape.dec_len);
        else
            snprintf(shape, sizeof shape, "%d x %d", mb->shape.rows, mb->shape.enc_len);
        printf("  %4d %7d %7d %14s %10.3f %10.2f %10.2f\n", m, mb->replica, mb->n_samples, shape,
               mb->time_ms, mb->stored_mb, mb->peak_mb);
    }
}

/* What --show-plan / --plan-out / --schedule need across global batches. */
typedef struct exec_out {
    int build;          /* build the execution plans: any of the three flags */
    int show;           /* --show-plan */
    const char *prefix; /* --plan-out */
    dyn_schedule schedule;   /* --schedule: dyn_schedule, or DYN_SCHEDULE_AUTO (the default) */
    dyn_pipeline *pipe; /* over the inputs' planner */
    /* Every output file of the run, written and finished as the run goes
     * and published together at its end (dyn_atomic_commit_all), so a
     * failing batch, replica or --json leaves none of them. */
    dyn_atomic_file *files;
    int n_files, cap_files;
} exec_out;

/* A new slot in eo->files (zeroed); NULL when out of memory (printed). */
static dyn_atomic_file *out_file_add(exec_out *eo)
{
    if (eo->n_files == eo->cap_files) {
        size_t c = (size_t)eo->cap_files;
        if (DYN_RESERVE(eo->files, c, c ? c + 1 : 16) != 0) {
            cli_errorf(CMD, "out of memory");
            return NULL;
        }
        eo->cap_files = (int)c;
    }
    dyn_atomic_file *af = &eo->files[eo->n_files++];
    memset(af, 0, sizeof *af);
    return af;
}

/* Publish every output (rc 0) or remove them all; returns the exit code. */
static int out_files_close(exec_out *eo, int rc)
{
    if (rc == CLI_EXIT_OK) {
        dyn_error err;
        if (dyn_atomic_commit_all(eo->files, eo->n_files, &err) != DYN_OK) {
            cli_errorf(CMD, "%s", err.msg);
            rc = CLI_EXIT_FAIL;
        }
    } else {
        for (int i = 0; i < eo->n_files; i++) dyn_atomic_abort(&eo->files[i]);
    }
    free(eo->files);
    eo->files = NULL;
    eo->n_files = eo->cap_files = 0;
    return rc;
}

/* --show-plan / --plan-out for one global batch's replica plans; prints
 * the error. */
static int emit_exec_plans(exec_out *eo, const dyn_pipeline_result *res, int32_t index)
{
    for (int32_t r = 0; r < res->n_replicas; r++) {
        const dyn_replica_plan *rp = &res->replicas[r];
        dyn_error err;
        if (rp->n_microbatches == 0) {
            cli_errorf(CMD, "global batch %d, replica %d: replica %d has no micro-batches", index, r, r);
            return CLI_EXIT_FAIL;
        }
        if (eo->show) {
            printf("execution plan: global batch %d, replica %d, schedule %s\n", index, r,
                   dyn_schedule_name(rp->schedule));
            dyn_exec_plan_dump(stdout, &rp->plan);
        }
        if (eo->prefix) {
            uint8_t *buf = NULL;
            size_t len = 0;
            char path[4096];
            snprintf(path, sizeof path, "%s.%d.%d.dynplan", eo->prefix, index, r);
            dyn_status st = dyn_exec_plan_serialize(&rp->plan, &buf, &len, &err);
            dyn_atomic_file *af = st == DYN_OK ? out_file_add(eo) : NULL;
            if (st == DYN_OK && af == NULL) {
                free(buf);
                return CLI_EXIT_FAIL;
            }
            if (st == DYN_OK) st = dyn_atomic_open(af, path, &err);
            if (st == DYN_OK && len > 0 && fwrite(buf, 1, len, af->fp) != len) {
                dyn_atomic_abort(af);
                st = dyn_error_set(&err, DYN_ERR_IO, "%s: write failed", path);
            }
            if (st == DYN_OK) st = dyn_atomic_finish(af, &err);
            free(buf);
            if (st != DYN_OK) {
                cli_errorf(CMD, "%s", err.msg);
                return CLI_EXIT_FAIL;
            }
        }
    }
    return CLI_EXIT_OK;
}

/* Everything the command line chose (read-only once parsed; the run's own
 * state is exec_out and plan_inputs). */
typedef struct plan_cmd {
    plan_args a;           /* the planning flags (plan_args.h) */
    const char *json_path; /* --json */
    int verbosity;         /* 0 --quiet, 1 default, 2 --verbose */
    int show;              /* --show-plan */
    const char *prefix;    /* --plan-out */
    dyn_schedule schedule;      /* --schedule: dyn_schedule, or DYN_SCHEDULE_AUTO (the default) */
    int have_schedule;     /* --schedule given */
} plan_cmd;

/* --schedule NAME (auto or a schedule); -1 on a bad name (printed). */
static int parse_schedule(const char *cmd, const cli_flag *f, const char *v, void *args)
{
    plan_cmd *pc = args;
    dyn_error err;
    if (dyn_schedule_parse(v, &pc->schedule, &err) != DYN_OK) {
        cli_errorf(cmd, "%s: %s", f->name, err.msg);
        return -1;
    }
    pc->have_schedule = 1;
    return 0;
}

static const cli_flag plan_flags[] = {
    CLI_SECTION("output:"),
    CLI_PATH("--json", "OUT", plan_cmd, json_path, "write the plans as JSON (key global_batches)"),
    CLI_BOOL("--quiet", plan_cmd, verbosity, 0, "print only the per-batch and total lines"),
    CLI_BOOL("--verbose", plan_cmd, verbosity, 2, "print every micro-batch's time and memory"),
    CLI_BOOL("--show-plan", plan_cmd, show, 1, "print each batch's execution plan (per-rank instructions)"),
    CLI_PATH("--plan-out", "PREFIX", plan_cmd, prefix, "write each plan, binary, to PREFIX.<batch>.<replica>.dynplan"),
    CLI_FN("--schedule", "NAME", parse_schedule,
           "schedule of those plans: 1f1b, cyclic, wait-free-cyclic,\n"
           "interleaved, zb, or auto (default: best by simulation);\n"
           "builds them (and their JSON) even without the two above"),
    CLI_END,
};

static void usage(FILE *out, const plan_cmd *defaults)
{
    fprintf(out, "usage: dynapipe plan --model gpt|t5|llama (--lengths FILE.tsv | --synthetic flan[:SEED])\n"
                 "         --global-batch-tokens N --max-seqlen L --stages S [options]\n\n"
                 "Cut each global batch into micro-batches that minimise the predicted pipeline\n"
                 "iteration time under the memory limit, and print the plan.\n\n");
    plan_args_usage(out, &defaults->a, plan_flags);
    cli_flag_set set = {plan_flags, (void *)defaults};
    cli_flags_usage(out, &set, 1, NULL);
    fprintf(out, "  --help                    this text\n");
}

/* Parse argv into pc: 0, 1 for --help (usage printed), or -1 (usage error
 * printed). */
static int parse_flags(plan_cmd *pc, int argc, char **argv)
{
    memset(pc, 0, sizeof *pc);
    plan_args_init(&pc->a);
    pc->verbosity = 1;
    pc->schedule = DYN_SCHEDULE_AUTO;
    cli_flag_set sets[] = {{plan_args_flags, &pc->a}, {plan_flags, pc}};
    int r = cli_flags_parse(CMD, sets, 2, argc, argv);
    if (r == 1) {
        plan_cmd defaults;
        memset(&defaults, 0, sizeof defaults);
        plan_args_init(&defaults.a);
        usage(stdout, &defaults);
        return 1;
    }
    if (r != 0) return -1;
    if (plan_args_finish(CMD, &pc->a) != 0) return -1;
    return plan_args_check_methods(CMD, &pc->a, &pc->a.opt.method, 1) != 0 ? -1 : 0;
}

/* The JSON document's root with the run's fields; *batches receives its
 * "global_batches" array. NULL on allocation failure. */
static cJSON *json_root_new(const plan_cmd *pc, const plan_inputs *in, cJSON **batches)
{
    const plan_args *a = &pc->a;
    cJSON *root = cJSON_CreateObject();
    *batches = root ? cJSON_AddArrayToObject(root, "global_batches") : NULL;
    if (*batches == NULL || !cJSON_AddStringToObject(root, "model", dyn_model_kind_name(a->kind)) ||
        !cJSON_AddStringToObject(root, "method", dyn_batching_name(a->opt.method)) ||
        !cJSON_AddNumberToObject(root, "stages", a->opt.stages) || !cJSON_AddNumberToObject(root, "dp", a->opt.dp) ||
        !cJSON_AddNumberToObject(root, "chunks", a->opt.chunks) ||
        !cJSON_AddNumberToObject(root, "memory_limit_mb", dyn_planner_options(in->planner)->memory_limit_mb)) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* Sums over the global batches, for the last line. */
typedef struct plan_totals {
    int32_t batches, mbs, samples;
    int64_t real, padded;
    double objective_ms, plan_ms, max_peak_mb;
} plan_totals;

static void totals_add(plan_totals *t, const dyn_batch_plan *pl)
{
    t->mbs += pl->n_microbatches;
    t->samples += pl->n_samples;
    t->real += pl->real_tokens;
    t->padded += pl->padded_tokens;
    t->objective_ms += pl->objective_ms;
    t->plan_ms += pl->plan_time_ms;
    if (pl->device_peak_mb > t->max_peak_mb) t->max_peak_mb = pl->device_peak_mb;
    t->batches++;
}

/* Plan global batch `index` (and with eo.build every replica's execution
 * plan), print it, write its plans, add it to the JSON; 0 or an exit code
 * (printed). */
static int plan_one_batch(const plan_cmd *pc, exec_out *eo, plan_inputs *in, const dyn_sample *batch, int32_t n,
                          int32_t index, cJSON *batches, plan_totals *tot)
{
    dyn_pipeline_result res;
    memset(&res, 0, sizeof res);
    dyn_error err;
    dyn_status st = eo->build ? dyn_pipeline_plan(eo->pipe, batch, n, &res, &err)
                              : dyn_planner_plan(in->planner, batch, n, &res.batch, &err);
    if (st != DYN_OK) {
        cli_errorf(CMD, "global batch %d: %s", index, err.msg);
        return CLI_EXIT_FAIL;
    }
    const dyn_batch_plan *pl = &res.batch;
    const int t5 = pc->a.kind == DYN_MODEL_T5;
    double sim_ms = -1;
    for (int32_t r = 0; eo->build && r < res.n_replicas; r++)
        if (res.replicas[r].makespan_ms > sim_ms) sim_ms = res.replicas[r].makespan_ms;
    print_batch(index, pl, t5, pc->verbosity, dyn_planner_options(in->planner)->memory_limit_mb, sim_ms,
                dyn_planner_options(in->planner)->method, eo->build ? &res : NULL);
    int rc = eo->build ? emit_exec_plans(eo, &res, index) : CLI_EXIT_OK;
    if (rc == CLI_EXIT_OK && batches) {
        cJSON *b = batch_json(index, pl, eo->build ? &res : NULL, t5);
        if (b == NULL) {
            cli_errorf(CMD, "out of memory building JSON");
            rc = CLI_EXIT_FAIL;
        } else {
            cJSON_AddItemToArray(batches, b);
        }
    }
    if (rc == CLI_EXIT_OK) totals_add(tot, pl);
    dyn_pipeline_result_free(&res);
    return rc;
}

int cli_plan_main(int argc, char **argv)
{
    plan_cmd pc;
    int p = parse_flags(&pc, argc, argv);
    if (p != 0) return p > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    const plan_args *a = &pc.a;
    plan_open popen = {.tune = !a->untuned, .tune_report = stderr, .warn = 1};
    plan_inputs in;
    int rc = plan_inputs_open(CMD, a, &popen, &in);
    if (rc != 0) return rc;
    exec_out eo = {.build = pc.show || pc.prefix || pc.have_schedule, .show = pc.show, .prefix = pc.prefix,
                   .schedule = pc.schedule};
    if (eo.build) {
        dyn_error err;
        dyn_pipeline_options po;
        dyn_pipeline_options_default(&po);
        po.schedule = eo.schedule;
        if ((eo.pipe = dyn_pipeline_create(in.planner, &po, &err)) == NULL) {
            cli_errorf(CMD, "%s", err.msg);
            plan_inputs_close(&in);
            return err.code == DYN_ERR_INVALID_ARG ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
        }
    }
    cJSON *root = NULL, *batches = NULL;
    if (pc.json_path && (root = json_root_new(&pc, &in, &batches)) == NULL) {
        cli_errorf(CMD, "out of memory building JSON");
        dyn_pipeline_free(eo.pipe);
        plan_inputs_close(&in);
        return CLI_EXIT_FAIL;
    }
    const int t5 = a->kind == DYN_MODEL_T5;
    printf("dynapipe plan: %s model (%d%s layers, hidden %d), method %s, S=%d dp=%d v=%d, memory "
           "limit %.0f MB (model states %.1f MB/device), machine %s\n",
           dyn_model_kind_name(a->kind), in.model.n_layers + in.model.n_dec_layers, t5 ? " enc+dec" : "",
           in.model.hidden, dyn_batching_name(a->opt.method), a->opt.stages, a->opt.dp, a->opt.chunks,
           dyn_planner_options(in.planner)->memory_limit_mb, dyn_planner_states_mb(in.planner), in.machine.name);
    plan_totals tot;
    memset(&tot, 0, sizeof tot);
    for (;;) {
        const dyn_sample *batch;
        int32_t n;
        if ((rc = plan_inputs_next(CMD, &in, &batch, &n)) != 0 || n == 0) break;
        if ((rc = plan_one_batch(&pc, &eo, &in, batch, n, tot.batches, batches, &tot)) != 0) break;
    }
    if (rc == 0) {
        printf("total: %d global batches, %d samples, %d micro-batches, planner objective %.2f ms, padding "
               "efficiency %.1f%%, peak %.1f MB, mean plan time %.3f ms/batch\n",
               tot.batches, tot.samples, tot.mbs, tot.objective_ms,
               tot.padded ? 100.0 * (double)tot.real / tot.padded : 0, tot.max_peak_mb,
               tot.batches ? tot.plan_ms / tot.batches : 0);
        dyn_atomic_file *af = pc.json_path ? out_file_add(&eo) : NULL;
        if (pc.json_path && (af == NULL || cli_json_stage(CMD, pc.json_path, root, af) != 0)) rc = CLI_EXIT_FAIL;
    }
    rc = out_files_close(&eo, rc);
    cJSON_Delete(root);
    dyn_pipeline_free(eo.pipe);
    plan_inputs_close(&in);
    return rc;
}
