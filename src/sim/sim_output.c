/*
 * sim_output.c — what a person looks at after a simulation: a Chrome /
 * Perfetto trace (JSON, open in ui.perfetto.dev or chrome://tracing) and an
 * SVG timeline (open in any browser).
 *
 * Both are written with plain fprintf into an atomic file: the trace of an
 * S = 8 plan has a few thousand events, and building a cJSON tree for it
 * would cost more than the simulation. Names in both are fixed strings from
 * this file, so nothing needs escaping.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dynapipe/sim.h"
#include "sim/sim_internal.h" /* defines: sim_last_result */
#include "util/util.h"        /* defines: dyn_atomic_* */

const char *dyn_sim_op_label(int op)
{
    switch (op) {
    case DYN_OP_LOAD_INPUT: return "load";
    case DYN_OP_FORWARD: return "F";
    case DYN_OP_BACKWARD: return "B";
    case DYN_OP_BACKWARD_INPUT: return "Bi";
    case DYN_OP_BACKWARD_WEIGHT: return "W";
    case DYN_OP_SEND_ACT_START: return "send act";
    case DYN_OP_SEND_ACT_FINISH: return "wait send act";
    case DYN_OP_RECV_ACT_START: return "recv act";
    case DYN_OP_RECV_ACT_FINISH: return "wait recv act";
    case DYN_OP_SEND_GRAD_START: return "send grad";
    case DYN_OP_SEND_GRAD_FINISH: return "wait send grad";
    case DYN_OP_RECV_GRAD_START: return "recv grad";
    case DYN_OP_RECV_GRAD_FINISH: return "wait recv grad";
    case DYN_OP_FREE_BUFFER: return "free";
    case DYN_OP_BARRIER: return "barrier";
    default: return "?";
    }
}

const char *dyn_sim_op_category(int op)
{
    switch (op) {
    case DYN_OP_FORWARD: return "forward";
    case DYN_OP_BACKWARD:
    case DYN_OP_BACKWARD_INPUT:
    case DYN_OP_BACKWARD_WEIGHT: return "backward";
    case DYN_OP_FREE_BUFFER:
    case DYN_OP_LOAD_INPUT: return "memory";
    case DYN_OP_BARRIER: return "sync";
    default: return "communication";
    }
}

static int is_compute_op(int op)
{
    return op == DYN_OP_FORWARD || op == DYN_OP_BACKWARD || op == DYN_OP_BACKWARD_INPUT ||
           op == DYN_OP_BACKWARD_WEIGHT;
}

static dyn_status need_result(const dyn_sim *sim, const dyn_exec_plan *plan,
                              const dyn_sim_result **res, dyn_error *err)
{
    *res = sim ? sim_last_result(sim) : NULL;
    if (*res == NULL || plan == NULL || (*res)->n_ranks != plan->n_ranks || (*res)->events == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "no simulation of this plan to write (run dyn_sim_run first, without skip_events)");
    int64_t n = 0;
    for (int32_t r = 0; r < plan->n_ranks; r++) n += plan->ranks[r].n_instrs;
    if (n != (*res)->n_instrs)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "the plan is not the one last simulated");
    /* JSON (and SVG) have no NaN or infinity: a non-finite number from a
     * cost is refused, naming where, rather than printed as "nan". */
    if (!isfinite((*res)->makespan_ms) || !isfinite((*res)->bubble_fraction))
        return dyn_error_set(err, DYN_ERR_NUMERIC, "the simulated makespan or bubble fraction is not finite");
    for (int32_t r = 0; r < plan->n_ranks; r++)
        for (int32_t i = 0; i < plan->ranks[r].n_instrs; i++) {
            const dyn_sim_event *e = &(*res)->events[(*res)->rank_offset[r] + i];
            if (!isfinite(e->start_ms) || !isfinite(e->end_ms) || !isfinite(e->mem_mb) || !isfinite(e->mem_peak_mb))
                return dyn_error_set(err, DYN_ERR_NUMERIC,
                                     "rank %d instruction %d: its simulated time or memory is not finite", r, i);
        }
    return DYN_OK;
}

/* ---- Chrome / Perfetto trace ---- */

static void trace_body(const dyn_sim_result *res, const dyn_exec_plan *plan, FILE *f)
{
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":\"%s\",\"makespan_ms\":%.6f,"
               "\"bubble_fraction\":%.6f},\n\"traceEvents\":[\n",
            plan->schedule >= 0 && plan->schedule < DYN_SCHEDULE_COUNT
                ? (const char *[]){"1f1b", "cyclic", "wait-free-cyclic", "interleaved", "zb"}[plan->schedule]
                : "unknown",
            res->makespan_ms, res->bubble_fraction);
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"pipeline\"}}");
    for (int32_t r = 0; r < plan->n_ranks; r++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                r, r);
    for (int32_t r = 0; r < plan->n_ranks; r++) {
        const dyn_rank_plan *rp = &plan->ranks[r];
        for (int32_t i = 0; i < rp->n_instrs; i++) {
            const dyn_instr *in = &rp->instrs[i];
            int32_t k = res->rank_offset[r] + i;
            /* Perfetto wants microseconds. */
            double ts = res->events[k].start_ms * 1e3, dur = (res->events[k].end_ms - res->events[k].start_ms) * 1e3;
            fprintf(f, ",\n{\"name\":\"%s%d\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,"
                       "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"op\":\"%s\",\"instr\":%d,\"microbatch\":%d,"
                       "\"stage\":%d,\"peer\":%d,\"bytes\":%lld,\"memory_mb\":%.3f}}",
                    dyn_sim_op_label(in->op), in->microbatch, dyn_sim_op_category(in->op), r, ts, dur,
                    dyn_sim_op_label(in->op), i, in->microbatch, in->stage, in->peer, (long long)in->bytes,
                    res->events[k].mem_mb);
            /* Memory counter: the high-water mark while it runs, then after. */
            fprintf(f, ",\n{\"name\":\"memory rank %d (MB)\",\"ph\":\"C\",\"pid\":0,\"ts\":%.3f,"
                       "\"args\":{\"MB\":%.3f}}",
                    r, ts, res->events[k].mem_peak_mb);
            if (dur > 0 || res->events[k].mem_peak_mb != res->events[k].mem_mb)
                fprintf(f, ",\n{\"name\":\"memory rank %d (MB)\",\"ph\":\"C\",\"pid\":0,\"ts\":%.3f,"
                           "\"args\":{\"MB\":%.3f}}",
                        r, ts + dur, res->events[k].mem_mb);
        }
    }
    fprintf(f, "\n]}\n");
}

dyn_status dyn_sim_trace_to_stream(const dyn_sim *sim, const dyn_exec_plan *plan, FILE *out, dyn_error *err)
{
    const dyn_sim_result *res;
    dyn_status st = need_result(sim, plan, &res, err);
    if (st != DYN_OK) return st;
    trace_body(res, plan, out);
    if (ferror(out)) return dyn_error_set(err, DYN_ERR_IO, "trace: write error");
    return DYN_OK;
}

dyn_status dyn_sim_write_trace(const dyn_sim *sim, const dyn_exec_plan *plan, const char *path,
                               dyn_error *err)
{
    const dyn_sim_result *res;
    dyn_status st = need_result(sim, plan, &res, err);
    if (st != DYN_OK) return st;
    dyn_atomic_file af;
    if ((st = dyn_atomic_open(&af, path, err)) != DYN_OK) return st;
    trace_body(res, plan, af.fp);
    if (ferror(af.fp)) {
        dyn_atomic_abort(&af);
        return dyn_error_set(err, DYN_ERR_IO, "%s: write error", path);
    }
    return dyn_atomic_commit(&af, err);
}

/* ---- SVG timeline ---- */

/* Layout, in pixels. */
#define SVG_LEFT 70.0
#define SVG_RIGHT 30.0
#define SVG_TOP 50.0
#define SVG_ROW 34.0
#define SVG_ROW_GAP 6.0
#define SVG_PLOT_W 1100.0

/* A round step for the time axis: about 10 ticks, 1/2/5 x 10^k ms. */
static double axis_step(double span)
{
    if (!(span > 0)) return 1.0;
    double raw = span / 10.0, p = pow(10.0, floor(log10(raw)));
    double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* Write text with the XML special characters escaped (the title is the
 * caller's). */
static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* Colours. Up to SVG_MB_HUES micro-batches each get their own hue, spread
 * by the golden angle so neighbours differ. Beyond that, hues repeating
 * every few boxes would only mislead, so the hue says the micro-batch's size
 * class instead (log2 of its padded tokens, rows x (enc + dec)) and the
 * number label says which one it is. The kind of work is the lightness, so
 * it reads even on boxes too small for a label: F light, Bi medium, B dark,
 * W medium with a hatch. */
#define SVG_MB_HUES 24

static int svg_size_class(const dyn_exec_plan *plan, int32_t mb)
{
    if (plan->mb_shape == NULL || mb < 0 || mb >= plan->n_microbatches) return 0;
    const dyn_mb_shape *sh = &plan->mb_shape[mb];
    double tokens = (double)sh->rows * ((double)sh->enc_len + sh->dec_len);
    return tokens >= 1 ? (int)floor(log2(tokens)) : 0;
}

static double svg_hue(const dyn_exec_plan *plan, int32_t mb, int by_class)
{
    int32_t key = by_class ? svg_size_class(plan, mb) : mb;
    return fmod(key * 137.508, 360.0);
}

/* kind: 0 forward, 1 input-gradient backward, 2 backward, 3 weight backward */
static void svg_colour(double hue, int kind, char *out, size_t n)
{
    static const int light[4] = {74, 50, 32, 50}, sat[4] = {70, 60, 55, 45};
    snprintf(out, n, "hsl(%.0f,%d%%,%d%%)", hue, sat[kind], light[kind]);
}

static int svg_kind(int op)
{
    switch (op) {
    case DYN_OP_FORWARD: return 0;
    case DYN_OP_BACKWARD_INPUT: return 1;
    case DYN_OP_BACKWARD_WEIGHT: return 3;
    default: return 2;
    }
}

/* The timeline's geometry: the plot's size in px, the time scale and
 * whether hues mean size classes. */
typedef struct svg_geom {
    double span;           /* ms on the time axis */
    double plot_w, plot_h; /* px */
    double scale;          /* px per ms */
    int by_class;          /* more micro-batches than hues: hue = size class */
} svg_geom;

/* Wide enough for about 14 px per box on the busiest rank (room for a
 * number label), within [1100, 8000] px. */
static svg_geom svg_geometry(const dyn_exec_plan *plan, const dyn_sim_result *res)
{
    svg_geom g;
    int32_t R = plan->n_ranks, most = 0;
    g.span = res->makespan_ms > 0 ? res->makespan_ms : 1.0;
    for (int32_t r = 0; r < R; r++) {
        int32_t c = 0;
        for (int32_t i = 0; i < plan->ranks[r].n_instrs; i++) c += is_compute_op(plan->ranks[r].instrs[i].op);
        if (c > most) most = c;
    }
    g.plot_w = 14.0 * most;
    if (g.plot_w < SVG_PLOT_W) g.plot_w = SVG_PLOT_W;
    if (g.plot_w > 8000.0) g.plot_w = 8000.0;
    g.by_class = plan->n_microbatches > SVG_MB_HUES;
    g.scale = g.plot_w / g.span;
    g.plot_h = R * (SVG_ROW + SVG_ROW_GAP);
    return g;
}

/* The document's opening: size, the hatch pattern, background, title and
 * the run's figures. */
static void svg_header(FILE *f, const svg_geom *g, const dyn_sim_result *res, const char *title)
{
    double width = SVG_LEFT + g->plot_w + SVG_RIGHT, height = SVG_TOP + g->plot_h + (g->by_class ? 140 : 100);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n",
            width, height, width, height);
    fprintf(f, "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
               "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"none\"/>"
               "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"black\" stroke-width=\"2\" "
               "stroke-opacity=\"0.45\"/></pattern></defs>\n");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", SVG_LEFT);
    xml_text(f, title ? title : "pipeline timeline");
    fprintf(f, "</text>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"40\" font-size=\"12\" fill=\"#444\">makespan %.3f ms, bubble "
               "fraction %.3f, peak memory %.1f MB</text>\n",
            SVG_LEFT, res->makespan_ms, res->bubble_fraction, res->max_peak_mb);
}

/* Time axis: grid lines and tick labels. */
static void svg_time_axis(FILE *f, const svg_geom *g)
{
    double step = axis_step(g->span);
    for (int t = 0; t * step <= g->span * 1.0001; t++) {
        double x = SVG_LEFT + t * step * g->scale;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x,
                SVG_TOP, x, SVG_TOP + g->plot_h);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", x,
                SVG_TOP + g->plot_h + 14, t * step);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">time (ms)</text>\n",
            SVG_LEFT + g->plot_w / 2, SVG_TOP + g->plot_h + 30);
}

/* One compute instruction of rank r as a box at row y, from event ev: its
 * colour, a hatch for W, a tooltip, and a label where it fits. */
static void svg_box(FILE *f, const svg_geom *g, const dyn_exec_plan *plan, int32_t r, const dyn_instr *in,
                    const dyn_sim_event *ev, double y)
{
    double x = SVG_LEFT + ev->start_ms * g->scale;
    double w = (ev->end_ms - ev->start_ms) * g->scale;
    int kind = svg_kind(in->op), dark = kind != 0;
    char colour[48];
    svg_colour(svg_hue(plan, in->microbatch, g->by_class), kind, colour, sizeof colour);
    fprintf(f, "<rect class=\"instr\" data-op=\"%s\" data-mb=\"%d\" data-stage=\"%d\" x=\"%.2f\" "
               "y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\" stroke=\"white\" "
               "stroke-width=\"0.6\"><title>rank %d %s mb %d stage %d: %.3f-%.3f ms</title></rect>\n",
            dyn_sim_op_label(in->op), in->microbatch, in->stage, x, y, w, SVG_ROW, colour, r,
            dyn_sim_op_label(in->op), in->microbatch, in->stage, ev->start_ms, ev->end_ms);
    if (in->op == DYN_OP_BACKWARD_WEIGHT)
        fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"url(#hatch)\"/>\n",
                x, y, w, SVG_ROW);
    /* Label when it fits: about 7 px per character at 11 px. */
    char label[24];
    snprintf(label, sizeof label, "%s%d", dyn_sim_op_label(in->op), in->microbatch);
    if (w >= 7.0 * (double)strlen(label) + 2)
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\" fill=\"%s\">%s</text>\n",
                x + w / 2, y + SVG_ROW / 2 + 4, dark ? "white" : "black", label);
    else if (w >= 9.0)
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\" fill=\"%s\">%d</text>\n",
                x + w / 2, y + SVG_ROW / 2 + 3, dark ? "white" : "black", in->microbatch);
}

/* Rank r's row: its name, the background and a box per compute instruction. */
static void svg_rank_row(FILE *f, const svg_geom *g, const dyn_exec_plan *plan, const dyn_sim_result *res,
                         int32_t r)
{
    double y = SVG_TOP + r * (SVG_ROW + SVG_ROW_GAP);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">rank %d</text>\n",
            SVG_LEFT - 8, y + SVG_ROW / 2 + 4, r);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" fill=\"#f4f4f4\"/>\n",
            SVG_LEFT, y, g->plot_w, SVG_ROW);
    const dyn_rank_plan *rp = &plan->ranks[r];
    for (int32_t i = 0; i < rp->n_instrs; i++) {
        const dyn_instr *in = &rp->instrs[i];
        if (!is_compute_op(in->op)) continue;
        svg_box(f, g, plan, r, in, &res->events[res->rank_offset[r] + i], y);
    }
}

/* Legend, by size class: one swatch per size class present, in increasing
 * size, at legend row ly. */
static void svg_legend_classes(FILE *f, const dyn_exec_plan *plan, double ly)
{
    int lo = 99, hi = -1;
    for (int32_t m = 0; m < plan->n_microbatches; m++) {
        int c = svg_size_class(plan, m);
        if (c < lo) lo = c;
        if (c > hi) hi = c;
    }
    double cx = SVG_LEFT;
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\" fill=\"#444\">colour = micro-batch size "
               "(padded tokens, rows x length):</text>\n",
            cx, ly + 34);
    cx += 330;
    for (int c = lo; c <= hi && hi >= 0; c++) {
        int used = 0;
        for (int32_t m = 0; m < plan->n_microbatches && !used; m++) used = svg_size_class(plan, m) == c;
        if (!used) continue;
        char col[48];
        svg_colour(fmod(c * 137.508, 360.0), 0, col, sizeof col);
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"18\" height=\"14\" fill=\"%s\"/>"
                   "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\">%.0f-%.0f</text>\n",
                cx, ly + 23, col, cx + 22, ly + 34, pow(2, c), pow(2, c + 1) - 1);
        cx += 110;
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\" fill=\"#444\">number = micro-batch index "
               "(where there is room; hover a box for its details); gaps = idle (bubbles)</text>\n",
            SVG_LEFT, ly + 58);
}

/* Legend: every kind of box by name, then what the hue means. */
static void svg_legend(FILE *f, const svg_geom *g, const dyn_exec_plan *plan)
{
    double ly = SVG_TOP + g->plot_h + 48, lx = SVG_LEFT;
    static const char *const kind_name[4] = {"F = forward", "Bi = input-gradient backward", "B = backward",
                                             "W = weight-gradient backward"};
    for (int k = 0; k < 4; k++) {
        char c[48];
        svg_colour(svg_hue(plan, 0, 0), k, c, sizeof c);
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"18\" height=\"14\" fill=\"%s\"/>", lx, ly, c);
        if (k == 3)
            fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"18\" height=\"14\" fill=\"url(#hatch)\"/>", lx, ly);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\">%s</text>\n", lx + 24, ly + 11, kind_name[k]);
        lx += 24 + 7.0 * (double)strlen(kind_name[k]) + 20;
    }
    if (g->by_class)
        svg_legend_classes(f, plan, ly);
    else
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"12\" fill=\"#444\">colour = micro-batch; "
                   "number = micro-batch index; gaps = idle (bubbles)</text>\n",
                SVG_LEFT, ly + 32);
}

dyn_status dyn_sim_svg_to_stream(const dyn_sim *sim, const dyn_exec_plan *plan, const char *title,
                                 FILE *f, dyn_error *err)
{
    const dyn_sim_result *res;
    dyn_status st = need_result(sim, plan, &res, err);
    if (st != DYN_OK) return st;
    svg_geom g = svg_geometry(plan, res);
    svg_header(f, &g, res, title);
    svg_time_axis(f, &g);
    for (int32_t r = 0; r < plan->n_ranks; r++) svg_rank_row(f, &g, plan, res, r);
    svg_legend(f, &g, plan);
    fprintf(f, "</svg>\n");
    if (ferror(f)) return dyn_error_set(err, DYN_ERR_IO, "SVG: write error");
    return DYN_OK;
}

dyn_status dyn_sim_write_svg(const dyn_sim *sim, const dyn_exec_plan *plan, const char *title,
                             const char *path, dyn_error *err)
{
    const dyn_sim_result *res;
    dyn_status st = need_result(sim, plan, &res, err);
    if (st != DYN_OK) return st;
    dyn_atomic_file af;
    if ((st = dyn_atomic_open(&af, path, err)) != DYN_OK) return st;
    if ((st = dyn_sim_svg_to_stream(sim, plan, title, af.fp, err)) != DYN_OK) {
        dyn_atomic_abort(&af);
        return dyn_error_set(err, st, "%s: write error", path);
    }
    return dyn_atomic_commit(&af, err);
}
