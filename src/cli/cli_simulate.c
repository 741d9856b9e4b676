/*
 * cli_simulate.c — `dynapipe simulate`: plan global batches with one or more
 * batching methods, schedule them with one or more pipeline schedules (or
 * pick the best per batch with `--schedule auto`), simulate every plan and
 * compare: makespan, bubble fraction, peak memory, throughput and speed-up
 * over packing. Or simulate an explicit what-if list of micro-batches
 * (`--microbatches FILE`, docs/simulator.md).
 *
 * A plan covers one data-parallel replica: with --dp D every replica's plan
 * is simulated and the iteration ends with the slowest.
 *
 * Every output file (--json, --trace, --svg) is written atomically after all
 * batches succeeded, so a failing run leaves none of them behind. The trace
 * and SVG show the first global batch under the first method and the first
 * schedule listed (for auto: the schedule auto chose).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"       /* defines: cli_errorf, cli_parse_*, CLI_EXIT_* */
#include "cli/flags.h"     /* defines: cli_flag, cli_flags_parse, cli_flags_usage */
#include "cli/plan_args.h" /* defines: plan_args_*, plan_inputs_* */
#include "dynapipe/data.h"
#include "dynapipe/model_config.h"
#include "dynapipe/pipeline.h" /* defines: dyn_pipeline_*, dyn_replica_plan_*, DYN_SCHEDULE_AUTO */
#include "dynapipe/plan.h"
#include "dynapipe/sched.h"
#include "dynapipe/sim.h"
#include "util/util.h" /* defines: dyn_calloc, DYN_RESERVE, dyn_file_write_atomic */

#define CMD "simulate"

typedef struct sim_args {
    plan_args plan;                 /* the planning flags of `dynapipe plan` */
    int32_t n_sched;
    int32_t sched[DYN_SCHEDULE_COUNT + 1]; /* dyn_schedule or DYN_SCHEDULE_AUTO */
    int32_t n_methods;
    dyn_batching methods[DYN_BATCHING_COUNT];
    const char *trace, *svg, *json, *microbatches;
    int32_t order_groups;
    int skip_infeasible;
    int markdown; /* --markdown: the summary as a markdown table, methods x schedules */
    int interleaved_named; /* --schedule named interleaved itself (not only through all) */
    int no_comm; /* --no-comm: messages take no time (what-if studies) */
    int have_methods; /* --methods given */
} sim_args;

/* One (batch, method, schedule) result. */
typedef struct sim_row {
    int32_t batch, method, sched; /* method: index into args.methods, or -1 (what-if) */
    int feasible;
    int32_t chosen_sched, chosen_rc; /* what ran (auto picks) */
    double makespan_ms, bubble, busy_ms, tokens_per_s;
    int32_t n_microbatches;
    int64_t real_tokens;
    double *peak_mb; /* [n_ranks] */
    double ideal_ms; /* the batch's ideal bound (pipeline.h dyn_ideal_bound_of); 0: not known */
    double step_ms;  /* the optimizer step of the busiest rank, over every replica */
    int32_t won_method; /* dynapipe: the method of the winning candidate's plan (-1: not dynapipe) */
    int64_t won_knob;
} sim_row;

/* Split a comma list in place into items; returns the count or -1. */
static int split_list(char *text, char **items, int max)
{
    int n = 0;
    for (char *p = text; p && *p;) {
        char *comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (*p == '\0' || n == max) return -1;
        items[n++] = p;
        p = comma ? comma + 1 : NULL;
    }
    return n;
}

static int parse_schedules(const char *cmd, const cli_flag *f, const char *text, void *args)
{
    sim_args *a = args;
    (void)cmd, (void)f;
    char buf[256];
    if (strlen(text) >= sizeof buf) {
        cli_errorf(CMD, "--schedule: list too long");
        return -1;
    }
    strcpy(buf, text);
    char *items[16];
    int n = split_list(buf, items, 16);
    if (n <= 0) {
        cli_errorf(CMD, "--schedule: empty or malformed list '%s'", text);
        return -1;
    }
    a->n_sched = 0;
    for (int i = 0; i < n; i++) {
        int32_t add[DYN_SCHEDULE_COUNT + 1], n_add = 0;
        if (strcmp(items[i], "all") == 0) {
            for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) add[n_add++] = k;
        } else {
            dyn_schedule s;
            dyn_error err;
            if (dyn_schedule_parse(items[i], &s, &err) != DYN_OK) {
                cli_errorf(CMD, "--schedule: %s, or all", err.msg);
                return -1;
            }
            add[n_add++] = (int32_t)s;
            if (s == DYN_SCHEDULE_INTERLEAVED) a->interleaved_named = 1;
        }
        for (int j = 0; j < n_add; j++) {
            int dup = 0;
            for (int k = 0; k < a->n_sched; k++) dup |= a->sched[k] == add[j];
            if (!dup) a->sched[a->n_sched++] = add[j];
        }
    }
    return 0;
}

static int parse_methods(const char *cmd, const cli_flag *f, const char *text, void *args)
{
    sim_args *a = args;
    (void)cmd, (void)f;
    char buf[256];
    if (strlen(text) >= sizeof buf) {
        cli_errorf(CMD, "--methods: list too long");
        return -1;
    }
    strcpy(buf, text);
    char *items[16];
    int n = split_list(buf, items, 16);
    if (n <= 0) {
        cli_errorf(CMD, "--methods: empty or malformed list '%s'", text);
        return -1;
    }
    a->n_methods = 0;
    for (int i = 0; i < n; i++) {
        dyn_batching m;
        dyn_error err;
        if (dyn_batching_parse(items[i], &m, &err) != DYN_OK) {
            cli_errorf(CMD, "--methods: %s", err.msg);
            return -1;
        }
        int dup = 0;
        for (int k = 0; k < a->n_methods; k++) dup |= a->methods[k] == m;
        if (!dup) a->methods[a->n_methods++] = m;
    }
    a->have_methods = 1;
    return 0;
}

static const cli_flag sim_flags[] = {
    CLI_SECTION("simulation flags:"),
    CLI_FN("--schedule", "LIST", parse_schedules,
           "comma list of 1f1b, cyclic, wait-free-cyclic, interleaved, zb,\n"
           "auto (best schedule x order x recompute per batch), or all\n"
           "(default 1f1b)"),
    CLI_FN("--methods", "LIST", parse_methods,
           "comma list of batching methods to compare: dynapipe, padding,\n"
           "packing, packing-docmask, token (default: all five)"),
    CLI_I32("--order-groups", "K", sim_args, order_groups, 1, DYN_ORDER_MAX_GROUPS,
            "micro-batch order search groups for auto"),
    CLI_PATH("--microbatches", "FILE", sim_args, microbatches,
            "simulate the micro-batches of a what-if file instead of\n"
            "planning (format: docs/simulator.md)"),
    CLI_BOOL("--no-comm", sim_args, no_comm, 1, "messages take no time (instead of the machine's link model)"),
    CLI_BOOL("--skip-infeasible", sim_args, skip_infeasible, 1,
             "report a schedule that does not fit memory as infeasible\n"
             "instead of failing"),
    CLI_BOOL("--markdown", sim_args, markdown, 1,
             "print the summary as a markdown table: one row per method,\n"
             "one column per schedule, cells tokens/s (speed-up over packing)"),
    CLI_PATH("--trace", "FILE.json", sim_args, trace, "Chrome/Perfetto trace of the first batch, method, schedule"),
    CLI_PATH("--svg", "FILE.svg", sim_args, svg, "SVG timeline of the same run"),
    CLI_PATH("--json", "OUT", sim_args, json,
            "per global batch and method: makespan_ms, bubble_fraction,\n"
            "peak_memory_mb (per stage), tokens_per_s"),
    CLI_END,
};

/* The defaults, before any flag. */
static void sim_args_init(sim_args *a)
{
    memset(a, 0, sizeof *a);
    plan_args_init(&a->plan);
    a->n_sched = 1;
    a->sched[0] = DYN_SCHEDULE_1F1B;
    a->n_methods = DYN_BATCHING_COUNT;
    for (int i = 0; i < DYN_BATCHING_COUNT; i++) a->methods[i] = (dyn_batching)i;
    a->order_groups = 3;
}

static void usage(FILE *out)
{
    sim_args d;
    sim_args_init(&d);
    fprintf(out,
            "usage: dynapipe simulate [planning flags] [--schedule LIST] [--methods LIST]\n"
            "                         [--trace FILE.json] [--svg FILE.svg] [--json OUT]\n"
            "       dynapipe simulate --microbatches FILE [--stages S] [--machine NAME|FILE] ...\n\n"
            "Plan global batches, schedule and simulate them, and compare batching methods\n"
            "and pipeline schedules side by side.\n\n");
    cli_flag_set set = {sim_flags, &d};
    cli_flags_usage(out, &set, 1, NULL);
    fprintf(out, "  --help                    this text\n\n"
                 "planning flags (as `dynapipe plan`):\n");
    plan_args_usage(out, &d.plan, sim_flags);
}

/* Returns -1 on a usage error (message printed), 1 for --help, else 0. */
static int parse_args(sim_args *a, int argc, char **argv)
{
    sim_args_init(a);
    cli_flag_set sets[] = {{sim_flags, a}, {plan_args_flags, &a->plan}};
    int r = cli_flags_parse(CMD, sets, 2, argc, argv);
    if (r != 0) return r;
    int method_flag = a->plan.have_method, methods_flag = a->have_methods;
    /* `--method M` of `dynapipe plan` means the list with just M, unless
     * --methods came too. */
    if (method_flag && !methods_flag) {
        a->n_methods = 1;
        a->methods[0] = a->plan.opt.method;
    }
    if (a->microbatches == NULL && (plan_args_finish(CMD, &a->plan) != 0 ||
                                    plan_args_check_methods(CMD, &a->plan, a->methods, a->n_methods) != 0))
        return -1;
    /* A what-if file gives the costs: flags that would plan are contradictions. */
    if (a->microbatches) {
        const plan_args *p = &a->plan;
        const char *bad = p->lengths_path ? "--lengths" : p->synthetic ? "--synthetic" : p->data_spec ? "--data"
                          : p->global_batch_tokens ? "--global-batch-tokens" : p->model_config ? "--model-config"
                          : strcmp(p->cost_model, "analytic") != 0 ? "--cost-model" : methods_flag ? "--methods"
                          : p->layers || p->hidden || p->heads || p->ffn || p->vocab ? "a model shape flag" : NULL;
        if (bad) {
            cli_errorf(CMD, "%s has no effect with --microbatches (the what-if file gives the costs)", bad);
            return -1;
        }
    }
    /* `all` means every schedule that applies: interleaved needs v >= 2
     * chunks, so without --chunks it is left out rather than failing. */
    if (!a->interleaved_named && a->plan.opt.chunks < 2) {
        int32_t k = 0;
        for (int32_t j = 0; j < a->n_sched; j++)
            if (a->sched[j] != DYN_SCHEDULE_INTERLEAVED) a->sched[k++] = a->sched[j];
        a->n_sched = k;
    }
    return 0;
}

/* ---- running ---------------------------------------------------------- */

/* What the run keeps for the trace / SVG: one plan and its costs. */
typedef struct recorded {
    int have;
    dyn_exec_plan plan;
    dyn_stage_costs costs;
    char title[160];
} recorded;

typedef struct run_state {
    const sim_args *a;    /* the flags, read-only */
    dyn_machine machine;
    dyn_sim_options simopt;
    dyn_sim *sim;
    int32_t n_ranks;
    int32_t chunks_avail; /* what-if: chunks the file's stages imply (auto tries interleaved only if > 1) */
    double memory_limit_mb; /* what-if: --memory-limit, the machine's memory, or none (1e300) */
    int32_t dp;           /* data-parallel replicas simulated per batch */
    sim_row *rows;
    int32_t n_rows, cap_rows;
    recorded rec;
    int64_t knob[DYN_BATCHING_COUNT]; /* per method index: the size knob planned with (tuned or given) */
    const dyn_cost_model *cm;         /* planned runs: for the optimizer step; NULL for what-if */
} run_state;

static sim_row *new_row(run_state *rs, dyn_error *err)
{
    if (rs->n_rows == rs->cap_rows) {
        size_t c = (size_t)rs->cap_rows;
        if (DYN_RESERVE(rs->rows, c, c ? c + 1 : 64) != 0) {
            dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for results");
            return NULL;
        }
        rs->cap_rows = (int32_t)c;
    }
    sim_row *row = &rs->rows[rs->n_rows];
    memset(row, 0, sizeof *row);
    row->peak_mb = dyn_calloc((size_t)rs->n_ranks, sizeof(double), "results", err);
    if (row->peak_mb == NULL) return NULL;
    rs->n_rows++;
    return row;
}

/* Copy a replica plan's simulated figures into row (bubble and tokens/s
 * come from finish_rows, over all replicas). */
static void fill_row(run_state *rs, sim_row *row, const dyn_replica_plan *rp)
{
    row->feasible = 1;
    row->chosen_sched = rp->schedule;
    row->chosen_rc = rp->recompute;
    row->n_microbatches = rp->n_microbatches;
    row->makespan_ms = rp->makespan_ms;
    row->busy_ms = 0;
    for (int32_t r = 0; r < rp->plan.n_ranks && r < rs->n_ranks; r++) {
        row->busy_ms += rp->rank_busy_ms[r];
        row->peak_mb[r] = rp->rank_peak_mb[r];
    }
    row->step_ms = rs->cm ? dyn_replica_plan_step_ms(rs->cm, rp) : 0.0;
}

/* Keep rp's plan + costs for the trace/SVG (takes ownership of both). */
static void record(run_state *rs, dyn_replica_plan *rp, const char *title)
{
    rs->rec.plan = rp->plan;
    rs->rec.costs = rp->costs;
    memset(&rp->plan, 0, sizeof rp->plan);
    memset(&rp->costs, 0, sizeof rp->costs);
    snprintf(rs->rec.title, sizeof rs->rec.title, "%s", title);
    rs->rec.have = 1;
}

/* Where one replica's micro-batches come from: a planned batch (through
 * its method's pipeline) or a what-if file's costs. */
typedef struct replica_src {
    dyn_pipeline *pipe;        /* planned: the method's pipeline ... */
    const dyn_batch_plan *bp;  /* ... its plan of the batch ... */
    int32_t replica;           /* ... and the replica */
    dyn_costs_fn costs_fn;     /* what-if: costs per (chunks, recompute) */
    void *costs_ctx;
} replica_src;

/* Schedule + validate + simulate one (batch, method, schedule, replica):
 * the library's replica plan (dynapipe/pipeline.h). */
static dyn_status run_one(run_state *rs, sim_row *row, const replica_src *src, const char *method_name,
                          dyn_error *err)
{
    const sim_args *a = rs->a;
    dyn_replica_plan rp;
    dyn_status st;
    if (src->pipe) {
        st = dyn_pipeline_plan_replica(src->pipe, src->bp, src->replica, row->sched, &rp, err);
    } else {
        dyn_replica_request rq = {
            .schedule = row->sched,
            .n_ranks = rs->n_ranks,
            .chunks = rs->chunks_avail,
            .auto_chunks = rs->chunks_avail,
            .memory_limit_mb = rs->memory_limit_mb,
            .recompute = a->plan.opt.recompute,
            .order_groups = a->order_groups,
            .replica = 0,
        };
        dyn_sim_options so = rs->simopt;
        so.real_tokens = row->real_tokens;
        st = dyn_replica_plan_from_costs(rs->sim, &rq, src->costs_fn, src->costs_ctx, NULL, &so, &rp, err);
    }
    if (st != DYN_OK) return st;
    fill_row(rs, row, &rp);
    if (!rs->rec.have && (rs->a->trace || rs->a->svg)) {
        char title[160];
        snprintf(title, sizeof title, "%s, %s%s, S=%d, global batch %d", method_name,
                 row->sched == DYN_SCHEDULE_AUTO ? "auto: " : "", dyn_schedule_name((dyn_schedule)row->chosen_sched),
                 rs->n_ranks, row->batch);
        record(rs, &rp, title);
    }
    dyn_replica_plan_free(&rp);
    return DYN_OK;
}

static const char *sched_label(int32_t s)
{
    return dyn_schedule_name((dyn_schedule)s);
}

/* Run all schedules for one (batch, method). */
/* Merge one replica's result (tmp) into the batch's row: the iteration
 * ends with the slowest replica; busy time and micro-batches add up; peak
 * memory is the highest per stage. */
static void merge_row(run_state *rs, sim_row *row, const sim_row *tmp)
{
    if (tmp->makespan_ms > row->makespan_ms) row->makespan_ms = tmp->makespan_ms;
    if (tmp->step_ms > row->step_ms) row->step_ms = tmp->step_ms;
    row->busy_ms += tmp->busy_ms;
    row->n_microbatches += tmp->n_microbatches;
    for (int32_t q = 0; q < rs->n_ranks; q++)
        if (tmp->peak_mb[q] > row->peak_mb[q]) row->peak_mb[q] = tmp->peak_mb[q];
    if (row->chosen_sched < 0) {
        row->chosen_sched = tmp->chosen_sched;
        row->chosen_rc = tmp->chosen_rc;
    }
}

/* Run all schedules for one (batch, method) on one data-parallel replica.
 * rows: the batch's rows for this method (one per schedule), created by
 * the caller with begin_rows; each replica's result is merged into them. */
static int run_schedules(run_state *rs, int32_t first_row, const replica_src *src, const char *method_name)
{
    dyn_error err;
    sim_row tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.peak_mb = dyn_calloc((size_t)rs->n_ranks, sizeof(double), "results", &err);
    if (tmp.peak_mb == NULL) {
        cli_errorf(CMD, "%s", err.msg);
        return -1;
    }
    int ret = 0;
    for (int32_t k = 0; k < rs->a->n_sched; k++) {
        sim_row *row = &rs->rows[first_row + k];
        if (!row->feasible) continue; /* another replica already could not fit */
        tmp.batch = row->batch;
        tmp.method = row->method;
        tmp.sched = row->sched;
        tmp.real_tokens = row->real_tokens;
        dyn_status st = run_one(rs, &tmp, src, method_name, &err);
        if (st == DYN_ERR_INFEASIBLE && rs->a->skip_infeasible) {
            row->feasible = 0;
            continue;
        }
        if (st != DYN_OK) {
            cli_errorf(CMD, "global batch %d, %s, %s: %s", row->batch, method_name, sched_label(row->sched), err.msg);
            ret = -1;
            break;
        }
        merge_row(rs, row, &tmp);
    }
    free(tmp.peak_mb);
    return ret;
}

/* Rows for (batch, method), one per schedule, feasible until a replica
 * says otherwise; returns the index of the first or -1. */
static int32_t begin_rows(run_state *rs, int32_t batch, int32_t method, int64_t real_tokens, int feasible)
{
    int32_t first = rs->n_rows;
    for (int32_t k = 0; k < rs->a->n_sched; k++) {
        dyn_error err;
        sim_row *row = new_row(rs, &err);
        if (row == NULL) {
            cli_errorf(CMD, "%s", err.msg);
            return -1;
        }
        row->batch = batch;
        row->method = method;
        row->sched = rs->a->sched[k];
        row->real_tokens = real_tokens;
        row->feasible = feasible;
        row->chosen_sched = -1;
        row->won_method = -1;
    }
    return first;
}

/* After every replica: the figures of the whole data-parallel group. The
 * dp * ranks devices are busy for busy_ms in all out of dp * ranks *
 * makespan; tokens are the whole batch's. */
static void finish_rows(run_state *rs, int32_t first_row, int32_t dp)
{
    for (int32_t k = 0; k < rs->a->n_sched; k++) {
        sim_row *row = &rs->rows[first_row + k];
        if (!row->feasible || row->makespan_ms <= 0) continue;
        row->bubble = 1.0 - row->busy_ms / ((double)rs->n_ranks * dp * row->makespan_ms);
        row->tokens_per_s = (double)row->real_tokens / (row->makespan_ms * 1e-3);
    }
}

/* ---- what-if input ---------------------------------------------------- */

typedef struct whatif_ctx {
    const dyn_stage_costs *costs;
    int32_t chunks;
} whatif_ctx;

/* The file's costs serve every recompute mode (the file has one set) and
 * only the chunk count the file's stage count implies. */
static dyn_status whatif_costs(void *vctx, int32_t chunks, dyn_recompute rc, const dyn_stage_costs **out,
                               dyn_error *err)
{
    whatif_ctx *w = vctx;
    (void)rc;
    if (chunks != w->chunks)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "the micro-batch file has %d stages = %d chunks per rank; %d chunks requested",
                             w->costs->n_stages, w->chunks, chunks);
    *out = w->costs;
    return DYN_OK;
}

static int run_whatif(run_state *rs)
{
    const sim_args *a = rs->a;
    dyn_stage_costs costs;
    int64_t tokens = 0;
    dyn_error err;
    if (dyn_whatif_load(a->microbatches, &costs, &tokens, &err) != DYN_OK) {
        cli_errorf(CMD, "%s", err.msg);
        return -1;
    }
    int32_t S = a->plan.have_stages ? a->plan.opt.stages : costs.n_stages;
    if (S < 1 || costs.n_stages % S != 0) {
        cli_errorf(CMD, "%s has %d stages, not a multiple of --stages %d", a->microbatches, costs.n_stages, S);
        dyn_stage_costs_free(&costs);
        return -1;
    }
    rs->n_ranks = S;
    /* The memory limit: --memory-limit, else the machine's memory when the
     * file has memory columns, else none (a file of times only says nothing
     * about memory, and a default limit would throttle the schedule
     * silently). Said in one line, with the link model. */
    int has_mem = 0;
    for (int64_t i = 0; i < (int64_t)costs.n_microbatches * costs.n_stages; i++)
        has_mem |= costs.stored_mb[i] > 0 || costs.peak_mb[i] > 0;
    for (int32_t q = 0; q < costs.n_stages; q++) has_mem |= costs.states_mb[q] > 0;
    const char *limit_src = "--memory-limit";
    rs->memory_limit_mb = a->plan.opt.memory_limit_mb;
    if (!(rs->memory_limit_mb > 0)) {
        rs->memory_limit_mb = has_mem ? rs->machine.device_memory_mb : 1e300;
        limit_src = has_mem ? "the machine's memory" : "none: the file has no memory columns";
    }
    char links[128];
    if (rs->simopt.link_latency_ms == 0 && !(rs->simopt.link_gbps > 0))
        snprintf(links, sizeof links, "none (--no-comm)");
    else
        snprintf(links, sizeof links, "%s's (%g ms + %g GB/s per message)", rs->machine.name,
                 rs->simopt.link_latency_ms, rs->simopt.link_gbps);
    if (rs->memory_limit_mb < 1e300)
        printf("what-if: memory limit %.0f MB (%s); links %s\n", rs->memory_limit_mb, limit_src, links);
    else
        printf("what-if: no memory limit (%s); links %s\n", limit_src, links);
    whatif_ctx w = {&costs, costs.n_stages / S};
    rs->chunks_avail = w.chunks;
    rs->dp = 1;
    int32_t first = begin_rows(rs, 0, -1, tokens, 1);
    replica_src src = {.costs_fn = whatif_costs, .costs_ctx = &w};
    int rc = first < 0 ? -1 : run_schedules(rs, first, &src, "what-if");
    if (rc == 0) finish_rows(rs, first, 1);
    dyn_stage_costs_free(&costs);
    return rc;
}

/* ---- planning input --------------------------------------------------- */

/* dynapipe under schedule row->sched: its pipeline (made for that schedule)
 * chose among its candidates by simulation under that same schedule; copy
 * every busy replica's figures into the row and keep the first plan for the
 * trace. */
static int take_result(run_state *rs, sim_row *row, dyn_pipeline_result *res, const char *method_name)
{
    dyn_error err;
    sim_row tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.peak_mb = dyn_calloc((size_t)rs->n_ranks, sizeof(double), "results", &err);
    if (tmp.peak_mb == NULL) {
        cli_errorf(CMD, "%s", err.msg);
        return -1;
    }
    for (int32_t r = 0; r < res->n_replicas; r++) {
        dyn_replica_plan *rp = &res->replicas[r];
        if (rp->n_microbatches == 0) continue; /* an idle replica: it only waits */
        fill_row(rs, &tmp, rp);
        merge_row(rs, row, &tmp);
        if (!rs->rec.have && (rs->a->trace || rs->a->svg)) {
            char title[160];
            snprintf(title, sizeof title, "%s, %s%s, S=%d, global batch %d", method_name,
                     row->sched == DYN_SCHEDULE_AUTO ? "auto: " : "", dyn_schedule_name(rp->schedule), rs->n_ranks,
                     row->batch);
            record(rs, rp, title);
        }
    }
    row->won_method = res->batch.method;
    row->won_knob = res->batch.knob;
    free(tmp.peak_mb);
    return 0;
}

/* dynapipe with its candidates (method index m): under each schedule k its
 * pipeline dyn_pipes[k] (made for that schedule) keeps the fastest candidate
 * by simulation under that same schedule. 0, or -1 (printed). */
static int simulate_dynapipe(run_state *rs, dyn_pipeline **dyn_pipes, int32_t b, int32_t m, const dyn_sample *batch,
                             int32_t n, double ideal_ms)
{
    const sim_args *a = rs->a;
    const char *name = dyn_batching_name(a->methods[m]);
    int64_t tokens = 0;
    for (int32_t i = 0; i < n; i++) tokens += (int64_t)batch[i].input_len + batch[i].target_len;
    int32_t first = begin_rows(rs, b, m, tokens, 1);
    if (first < 0) return -1;
    for (int32_t k = 0; k < a->n_sched; k++) {
        sim_row *row = &rs->rows[first + k];
        row->ideal_ms = ideal_ms;
        dyn_error err;
        dyn_pipeline_result res;
        dyn_status pst = dyn_pipeline_plan(dyn_pipes[k], batch, n, &res, &err);
        if (pst == DYN_ERR_INFEASIBLE && a->skip_infeasible) {
            row->feasible = 0;
            continue;
        }
        if (pst != DYN_OK) {
            cli_errorf(CMD, "global batch %d, %s, %s: %s", b, name, sched_label(a->sched[k]), err.msg);
            return -1;
        }
        int rc = take_result(rs, row, &res, name);
        dyn_pipeline_result_free(&res);
        if (rc != 0) return -1;
    }
    finish_rows(rs, first, a->plan.opt.dp);
    return 0;
}

/* Plan global batch b with method index m (its planner and pipeline) and
 * simulate every replica under every schedule into the batch's rows.
 * 0, or -1 (printed). */
static int simulate_method(run_state *rs, dyn_planner *planner, dyn_pipeline *pipe, int32_t b, int32_t m,
                           const dyn_sample *batch, int32_t n, double ideal_ms)
{
    const sim_args *a = rs->a;
    const char *name = dyn_batching_name(a->methods[m]);
    dyn_error err;
    dyn_batch_plan bp;
    memset(&bp, 0, sizeof bp);
    dyn_status pst;
    pst = dyn_planner_plan(planner, batch, n, &bp, &err);
    if (pst == DYN_ERR_INFEASIBLE && a->skip_infeasible) {
        /* This method cannot plan the batch: infeasible rows. */
        dyn_batch_plan_free(&bp);
        return begin_rows(rs, b, m, 0, 0) < 0 ? -1 : 0;
    }
    if (pst != DYN_OK) {
        cli_errorf(CMD, "global batch %d, %s: %s", b, name, err.msg);
        dyn_batch_plan_free(&bp);
        return -1;
    }
    /* Each replica runs its own plan; the iteration ends with the slowest.
     * Tokens: the whole batch's. */
    int64_t tokens = 0;
    for (int32_t i = 0; i < n; i++) tokens += (int64_t)batch[i].input_len + batch[i].target_len;
    int32_t first = begin_rows(rs, b, m, tokens, 1);
    int rc = first < 0 ? -1 : 0;
    for (int32_t k = 0; rc == 0 && k < a->n_sched; k++) rs->rows[first + k].ideal_ms = ideal_ms;
    for (int32_t rep = 0; rc == 0 && rep < a->plan.opt.dp; rep++) {
        int has = 0;
        for (int32_t i = 0; i < bp.n_microbatches; i++) has |= bp.mbs[i].replica == rep;
        if (!has) continue; /* an idle replica: it only waits */
        replica_src src = {.pipe = pipe, .bp = &bp, .replica = rep};
        rc = run_schedules(rs, first, &src, name);
    }
    if (rc == 0) finish_rows(rs, first, a->plan.opt.dp);
    dyn_batch_plan_free(&bp);
    return rc;
}

static int run_planned(run_state *rs, plan_inputs *in)
{
    const sim_args *a = rs->a;
    dyn_error err;
    int ret = -1;
    rs->n_ranks = a->plan.opt.stages;
    rs->dp = a->plan.opt.dp;
    dyn_planner *planners[DYN_BATCHING_COUNT] = {0};
    dyn_pipeline *pipes[DYN_BATCHING_COUNT] = {0};
    /* dynapipe with its candidates: one pipeline per schedule, so that the
     * candidate kept is the fastest under the schedule it is reported for */
    dyn_pipeline *dyn_pipes[DYN_SCHEDULE_COUNT + 1] = {0};
    int32_t dyn_m = -1;
    rs->cm = in->cm;
    dyn_pipeline_options pipe_opt;
    dyn_pipeline_options_default(&pipe_opt);
    pipe_opt.order_groups = a->order_groups;
    for (int32_t m = 0; m < a->n_methods; m++) {
        dyn_plan_options po = a->plan.opt;
        po.method = a->methods[m];
        int knob_tuned = !a->plan.untuned && dyn_tune_knob_get(&po) == 0;
        if (!a->plan.untuned && plan_tune_method(CMD, in, &po, a->order_groups, stdout) != 0) goto done;
        if (a->plan.stage_split == PLAN_SPLIT_TUNED &&
            plan_tune_split(CMD, in, &po, a->order_groups, knob_tuned, stdout) != 0)
            goto done;
        rs->knob[m] = dyn_tune_knob_get(&po);
        planners[m] = dyn_planner_create(in->cm, &po, &err);
        if (planners[m] == NULL) {
            cli_errorf(CMD, "%s: %s", dyn_batching_name(a->methods[m]), err.msg);
            goto done;
        }
        if ((pipes[m] = dyn_pipeline_create(planners[m], &pipe_opt, &err)) == NULL) {
            cli_errorf(CMD, "%s", err.msg);
            goto done;
        }
        if (a->methods[m] == DYN_BATCH_DYNAPIPE && a->plan.opt.enable_packing) {
            dyn_m = m;
            for (int32_t k = 0; k < a->n_sched; k++) {
                dyn_pipeline_options so = pipe_opt;
                so.schedule = a->sched[k];
                if ((dyn_pipes[k] = dyn_pipeline_create(planners[m], &so, &err)) == NULL) {
                    cli_errorf(CMD, "dynapipe, %s: %s", sched_label(a->sched[k]), err.msg);
                    goto done;
                }
            }
        }
    }
    for (int32_t b = 0;; b++) {
        const dyn_sample *batch;
        int32_t n;
        if (plan_inputs_next(CMD, in, &batch, &n) != 0) goto done;
        if (n == 0) break;
        dyn_ideal_bound ideal;
        if (dyn_ideal_bound_of(in->cm, batch, n, a->plan.opt.stages, a->plan.opt.dp, &ideal, &err) != DYN_OK) {
            cli_errorf(CMD, "global batch %d: %s", b, err.msg);
            goto done;
        }
        for (int32_t m = 0; m < a->n_methods; m++) {
            int rc = m == dyn_m ? simulate_dynapipe(rs, dyn_pipes, b, m, batch, n, ideal.bound_ms)
                                : simulate_method(rs, planners[m], pipes[m], b, m, batch, n, ideal.bound_ms);
            if (rc != 0) goto done;
        }
    }
    ret = 0;
done:
    for (int32_t k = 0; k <= DYN_SCHEDULE_COUNT; k++) dyn_pipeline_free(dyn_pipes[k]);
    for (int32_t m = 0; m < DYN_BATCHING_COUNT; m++) {
        dyn_pipeline_free(pipes[m]);
        dyn_planner_free(planners[m]);
    }
    return ret;
}

/* ---- output ----------------------------------------------------------- */

typedef struct summary {
    double makespan, busy, tokens, peak;
    double ideal, step; /* sums of the ideal bounds and the optimizer steps, ms */
    int32_t n, infeasible;
} summary;

static void summarise(const run_state *rs, int32_t method, int32_t sched, summary *s)
{
    memset(s, 0, sizeof *s);
    for (int32_t i = 0; i < rs->n_rows; i++) {
        const sim_row *r = &rs->rows[i];
        if (r->method != method || r->sched != sched) continue;
        if (!r->feasible) {
            s->infeasible++;
            continue;
        }
        s->n++;
        s->makespan += r->makespan_ms;
        s->busy += r->busy_ms;
        s->tokens += (double)r->real_tokens;
        s->ideal += r->ideal_ms;
        s->step += r->step_ms;
        for (int32_t q = 0; q < rs->n_ranks; q++)
            if (r->peak_mb[q] > s->peak) s->peak = r->peak_mb[q];
    }
}

static double summary_tps(const summary *s) { return s->makespan > 0 ? s->tokens / (s->makespan * 1e-3) : 0; }

/* The ideal bounds over the iterations (makespan + optimizer step), summed
 * over the batches; "-" when not known (what-if files). */
static void summary_eff(const summary *s, char *buf, size_t cap)
{
    if (s->ideal > 0 && s->makespan + s->step > 0)
        snprintf(buf, cap, "%.1f%%", 100.0 * s->ideal / (s->makespan + s->step));
    else snprintf(buf, cap, "-");
}

/* "pack-rows=2": the size knob method index m planned with; "-" for
 * dynapipe and what-if files. */
static void knob_label(const run_state *rs, int32_t m, char *buf, size_t cap)
{
    const char *name = rs->a->microbatches ? NULL : dyn_tune_knob_name(rs->a->methods[m]);
    if (name == NULL) snprintf(buf, cap, "-");
    else snprintf(buf, cap, "%s=%lld", name, (long long)rs->knob[m]);
}

/* Which candidate dynapipe kept, per schedule: "dynapipe x2,
 * packing-docmask pack-rows=2 x1" over the global batches. */
static void print_winners(const run_state *rs)
{
    const sim_args *a = rs->a;
    for (int32_t k = 0; k < a->n_sched; k++) {
        char line[512] = "";
        size_t len = 0;
        int any = 0;
        for (int32_t i = 0; i < rs->n_rows; i++) {
            const sim_row *r = &rs->rows[i];
            if (r->sched != a->sched[k] || r->won_method < 0 || !r->feasible) continue;
            int seen = 0; /* counted already with an earlier row */
            for (int32_t j = 0; j < i && !seen; j++) {
                const sim_row *q = &rs->rows[j];
                seen = q->sched == r->sched && q->feasible && q->won_method == r->won_method && q->won_knob == r->won_knob;
            }
            if (seen) continue;
            int count = 0;
            for (int32_t j = i; j < rs->n_rows; j++) {
                const sim_row *q = &rs->rows[j];
                count += q->sched == r->sched && q->feasible && q->won_method == r->won_method && q->won_knob == r->won_knob;
            }
            const char *knob = dyn_tune_knob_name((dyn_batching)r->won_method);
            char item[96];
            if (knob) snprintf(item, sizeof item, "%s%s %s=%lld x%d", any ? ", " : "", dyn_batching_name((dyn_batching)r->won_method), knob, (long long)r->won_knob, count);
            else snprintf(item, sizeof item, "%s%s x%d", any ? ", " : "", dyn_batching_name((dyn_batching)r->won_method), count);
            if (len + strlen(item) < sizeof line) {
                memcpy(line + len, item, strlen(item) + 1);
                len += strlen(item);
            }
            any = 1;
        }
        if (any) printf("dynapipe's plans (%s): %s\n", sched_label(a->sched[k]), line);
    }
}

static void print_table(const run_state *rs)
{
    const sim_args *a = rs->a;
    int32_t n_methods = a->microbatches ? 1 : a->n_methods;
    int32_t packing = -1;
    for (int32_t m = 0; m < n_methods && !a->microbatches; m++)
        if (a->methods[m] == DYN_BATCH_PACKING) packing = m;
    int32_t n_batches = 0;
    for (int32_t i = 0; i < rs->n_rows; i++)
        if (rs->rows[i].batch + 1 > n_batches) n_batches = rs->rows[i].batch + 1;
    printf("simulated %d global batch%s on %d pipeline stages, machine %s\n", n_batches,
           n_batches == 1 ? "" : "es", rs->n_ranks, rs->machine.name);
    printf("%-16s %-15s %-17s %12s %10s %8s %13s %13s %9s %10s\n", "method", "size", "schedule", "makespan_ms",
           "iter_ms", "bubble", "peak_mem_mb", "tokens/s", "vs packing", "efficiency");
    for (int32_t m = 0; m < n_methods; m++) {
        for (int32_t k = 0; k < a->n_sched; k++) {
            summary s, p;
            summarise(rs, a->microbatches ? -1 : m, a->sched[k], &s);
            const char *mname = a->microbatches ? "what-if" : dyn_batching_name(a->methods[m]);
            char size[48];
            knob_label(rs, m, size, sizeof size);
            if (s.infeasible > 0 || s.n == 0) {
                printf("%-16s %-15s %-17s %12s (%d of %d global batches)\n", mname, size,
                       sched_label(a->sched[k]), "infeasible", s.infeasible, s.infeasible + s.n);
                continue;
            }
            char speed[32] = "-";
            if (packing >= 0) {
                summarise(rs, packing, a->sched[k], &p);
                if (p.n == s.n && p.infeasible == 0 && summary_tps(&p) > 0)
                    snprintf(speed, sizeof speed, "%.2fx", summary_tps(&s) / summary_tps(&p));
            }
            double bubble = s.makespan > 0 ? 1.0 - s.busy / ((double)rs->n_ranks * rs->dp * s.makespan) : 0;
            char eff[32];
            summary_eff(&s, eff, sizeof eff);
            printf("%-16s %-15s %-17s %12.3f %10.3f %8.3f %13.1f %13.1f %9s %10s\n", mname, size,
                   sched_label(a->sched[k]), s.makespan, s.makespan / s.n, bubble, s.peak, summary_tps(&s),
                   speed, eff);
        }
    }
    if (!a->microbatches) {
        printf("efficiency: the ideal bound (every sample's own compute / (stages x replicas) + one optimizer\n"
               "step) over the simulated iteration (makespan + the busiest rank's optimizer step)\n");
        print_winners(rs);
    }
}

/* The same summary as a markdown pivot: methods x schedules, each cell
 * "tokens/s (speed-up over packing)"; used for docs/performance.md. */
static void print_markdown(const run_state *rs)
{
    const sim_args *a = rs->a;
    int32_t n_methods = a->microbatches ? 1 : a->n_methods;
    int32_t packing = -1;
    for (int32_t m = 0; m < n_methods && !a->microbatches; m++)
        if (a->methods[m] == DYN_BATCH_PACKING) packing = m;
    printf("| method |");
    for (int32_t k = 0; k < a->n_sched; k++) printf(" %s |", sched_label(a->sched[k]));
    printf("\n| --- |");
    for (int32_t k = 0; k < a->n_sched; k++) printf(" ---: |");
    printf("\n");
    for (int32_t m = 0; m < n_methods; m++) {
        char size[48];
        knob_label(rs, m, size, sizeof size);
        if (a->microbatches) printf("| what-if |");
        else if (strcmp(size, "-") == 0) printf("| %s |", dyn_batching_name(a->methods[m]));
        else printf("| %s (%s) |", dyn_batching_name(a->methods[m]), size);
        for (int32_t k = 0; k < a->n_sched; k++) {
            summary s, p;
            summarise(rs, a->microbatches ? -1 : m, a->sched[k], &s);
            if (s.infeasible > 0 || s.n == 0) {
                printf(" infeasible |");
                continue;
            }
            printf(" %.0f", summary_tps(&s));
            if (packing >= 0) {
                summarise(rs, packing, a->sched[k], &p);
                if (p.n == s.n && p.infeasible == 0 && summary_tps(&p) > 0) printf(" (%.2fx)", summary_tps(&s) / summary_tps(&p));
            }
            printf(" |");
        }
        printf("\n");
    }
}

static cJSON *row_json(const run_state *rs, const sim_row *r)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    int ok = 1;
    ok &= cJSON_AddStringToObject(o, "method", r->method < 0 ? "what-if" : dyn_batching_name(rs->a->methods[r->method])) != NULL;
    ok &= cJSON_AddStringToObject(o, "schedule", sched_label(r->sched)) != NULL;
    if (r->sched == DYN_SCHEDULE_AUTO) {
        ok &= cJSON_AddStringToObject(o, "chosen_schedule", dyn_schedule_name((dyn_schedule)r->chosen_sched)) != NULL;
        ok &= cJSON_AddStringToObject(o, "recompute", dyn_recompute_name((dyn_recompute)r->chosen_rc)) != NULL;
    }
    ok &= cJSON_AddBoolToObject(o, "feasible", r->feasible) != NULL;
    ok &= cJSON_AddNumberToObject(o, "makespan_ms", r->makespan_ms) != NULL;
    ok &= cJSON_AddNumberToObject(o, "bubble_fraction", r->bubble) != NULL;
    cJSON *peaks = cJSON_AddArrayToObject(o, "peak_memory_mb");
    ok &= peaks != NULL;
    for (int32_t q = 0; ok && q < rs->n_ranks; q++) {
        cJSON *x = cJSON_CreateNumber(r->peak_mb[q]);
        ok &= x != NULL && cJSON_AddItemToArray(peaks, x);
    }
    ok &= cJSON_AddNumberToObject(o, "tokens_per_s", r->tokens_per_s) != NULL;
    ok &= cJSON_AddNumberToObject(o, "real_tokens", (double)r->real_tokens) != NULL;
    ok &= cJSON_AddNumberToObject(o, "microbatches", r->n_microbatches) != NULL;
    if (r->won_method >= 0) {
        ok &= cJSON_AddStringToObject(o, "plan_method", dyn_batching_name((dyn_batching)r->won_method)) != NULL;
        ok &= cJSON_AddNumberToObject(o, "plan_knob", (double)r->won_knob) != NULL;
    }
    if (r->ideal_ms > 0 && r->makespan_ms + r->step_ms > 0) {
        ok &= cJSON_AddNumberToObject(o, "ideal_ms", r->ideal_ms) != NULL;
        ok &= cJSON_AddNumberToObject(o, "step_ms", r->step_ms) != NULL;
        ok &= cJSON_AddNumberToObject(o, "efficiency", r->ideal_ms / (r->makespan_ms + r->step_ms)) != NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static int write_json(const run_state *rs, const char *path, dyn_atomic_file *af)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *batches = root ? cJSON_AddArrayToObject(root, "global_batches") : NULL;
    int ok = batches != NULL;
    ok &= ok && cJSON_AddStringToObject(root, "machine", rs->machine.name) != NULL;
    ok &= ok && cJSON_AddNumberToObject(root, "stages", rs->n_ranks) != NULL;
    int32_t cur = -1;
    cJSON *results = NULL;
    for (int32_t i = 0; ok && i < rs->n_rows; i++) {
        const sim_row *r = &rs->rows[i];
        if (r->batch != cur) {
            cJSON *b = cJSON_CreateObject();
            ok &= b != NULL && cJSON_AddItemToArray(batches, b);
            ok &= ok && cJSON_AddNumberToObject(b, "index", r->batch) != NULL;
            results = ok ? cJSON_AddArrayToObject(b, "results") : NULL;
            ok &= results != NULL;
            cur = r->batch;
        }
        cJSON *o = ok ? row_json(rs, r) : NULL;
        ok &= o != NULL && cJSON_AddItemToArray(results, o);
    }
    if (!ok) {
        cJSON_Delete(root);
        cli_errorf(CMD, "%s: out of memory building JSON", path);
        return -1;
    }
    int rc = cli_json_stage(CMD, path, root, af);
    cJSON_Delete(root);
    return rc;
}

/* All output files, only after every batch succeeded, and published
 * together: a failure in any leaves none (util.h, dyn_atomic_commit_all). */
static int write_outputs(run_state *rs)
{
    const sim_args *a = rs->a;
    dyn_error err;
    dyn_atomic_file af[3];
    memset(af, 0, sizeof af);
    int n = 0;
    dyn_status st = DYN_OK;
    if ((a->trace || a->svg) && rs->rec.have) {
        st = dyn_sim_run(rs->sim, &rs->rec.plan, &rs->rec.costs, &rs->simopt, NULL, &err);
        if (st == DYN_OK && a->trace && (st = dyn_atomic_open(&af[n], a->trace, &err)) == DYN_OK &&
            (st = dyn_sim_trace_to_stream(rs->sim, &rs->rec.plan, af[n++].fp, &err)) != DYN_OK)
            dyn_error_prefix(&err, st, a->trace);
        if (st == DYN_OK && a->svg && (st = dyn_atomic_open(&af[n], a->svg, &err)) == DYN_OK &&
            (st = dyn_sim_svg_to_stream(rs->sim, &rs->rec.plan, rs->rec.title, af[n++].fp, &err)) != DYN_OK)
            dyn_error_prefix(&err, st, a->svg);
    }
    int rc = st == DYN_OK ? 0 : -1;
    if (rc != 0) cli_errorf(CMD, "%s", err.msg);
    if (rc == 0 && a->json && write_json(rs, a->json, &af[n++]) != 0) rc = -1;
    if (rc == 0 && dyn_atomic_commit_all(af, n, &err) != DYN_OK) {
        cli_errorf(CMD, "%s", err.msg);
        rc = -1;
    }
    for (int i = 0; i < n; i++) dyn_atomic_abort(&af[i]);
    return rc;
}

int cli_simulate_main(int argc, char **argv)
{
    sim_args a;
    int p = parse_args(&a, argc, argv);
    if (p == 1) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (p != 0) return CLI_EXIT_USAGE;

    run_state rs;
    memset(&rs, 0, sizeof rs);
    rs.a = &a;
    dyn_error err;
    int ret = CLI_EXIT_FAIL;
    plan_inputs in;
    memset(&in, 0, sizeof in);
    rs.sim = dyn_sim_create(&err);
    if (rs.sim == NULL) {
        cli_errorf(CMD, "%s", err.msg);
        goto done;
    }
    if (a.microbatches) {
        /* the file gives the times: auto (the default) has nothing to
         * measure, and its links and memory are the built-in cpu's */
        const char *mname = strcmp(a.plan.machine, "auto") == 0 ? "cpu" : a.plan.machine;
        if (dyn_machine_resolve(mname, &rs.machine, &err) != DYN_OK) {
            cli_errorf(CMD, "--machine: %s", err.msg);
            goto done;
        }
    } else {
        plan_open po = {.tune = 0, .warn = 1}; /* run_planned tunes each method */
        int rc = plan_inputs_open(CMD, &a.plan, &po, &in);
        if (rc != 0) {
            ret = rc;
            goto done;
        }
        rs.machine = in.machine;
    }
    dyn_sim_options_from_machine(&rs.simopt, &rs.machine, 0);
    if (a.no_comm) {
        rs.simopt.link_latency_ms = 0;
        rs.simopt.link_gbps = 0; /* <= 0: infinite */
    }
    if (a.microbatches ? run_whatif(&rs) != 0 : run_planned(&rs, &in) != 0) goto done;
    if (write_outputs(&rs) != 0) goto done;
    if (a.markdown) print_markdown(&rs);
    else print_table(&rs);
    if ((a.trace || a.svg) && rs.rec.have) /* say what the picture shows and where it is */
        printf("%s%s%s%s: %s\n", a.svg ? "timeline " : "", a.svg ? a.svg : "",
               a.trace ? (a.svg ? ", trace " : "trace ") : "", a.trace ? a.trace : "", rs.rec.title);
    ret = CLI_EXIT_OK;
done:
    for (int32_t i = 0; i < rs.n_rows; i++) free(rs.rows[i].peak_mb);
    free(rs.rows);
    if (rs.rec.have) {
        dyn_exec_plan_free(&rs.rec.plan);
        dyn_stage_costs_free(&rs.rec.costs);
    }
    dyn_sim_free(rs.sim);
    plan_inputs_close(&in);
    return ret;
}
