/*
 * whatif.c — the "what-if" micro-batch file: per-micro-batch, per-stage
 * times (and optionally memory and token counts) written by hand or by
 * another tool, so the simulator can answer questions about micro-batches
 * the planner did not produce.
 *
 * Format (docs/simulator.md): '#' starts a comment line; blank lines are
 * skipped; the first other line is a header naming the columns, separated by
 * tabs or spaces; then one row per (micro-batch, stage). Required columns:
 * mb, stage, fwd_ms, bwd_ms. Optional: bwd_input_ms and bwd_weight_ms
 * (together; default half of bwd_ms each), stored_mb, peak_mb, send_mb
 * (default 0), states_mb (per stage: equal on every row of a stage), tokens
 * (real tokens of the micro-batch: equal on every row of a micro-batch).
 * Micro-batches are 0..M-1 and stages 0..S-1, M and S the largest indices
 * + 1; every pair must appear exactly once. Every error names path:line.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/cost.h" /* defines: DYN_COST_VALUE_MAX */
#include "dynapipe/sim.h"
#include "util/util.h" /* defines: dyn_calloc, DYN_RESERVE, dyn_file_read_all, dyn_parse_finite */

#define WHATIF_MAX_INDEX 65535
#define WHATIF_MAX_CELLS (1 << 22)

enum {
    COL_MB, COL_STAGE, COL_FWD, COL_BWD, COL_BWD_INPUT, COL_BWD_WEIGHT, COL_STORED, COL_PEAK,
    COL_SEND, COL_STATES, COL_TOKENS, COL_COUNT
};
static const char *const col_names[COL_COUNT] = {
    "mb", "stage", "fwd_ms", "bwd_ms", "bwd_input_ms", "bwd_weight_ms", "stored_mb", "peak_mb",
    "send_mb", "states_mb", "tokens"};

typedef struct whatif_row {
    int32_t line;
    double v[COL_COUNT];
} whatif_row;

/* Split line [p, end) into whitespace-separated fields, NUL-terminating each
 * in place. Returns the count (up to max; more fields return max + 1). */
static int split_fields(char *p, char **fields, int max)
{
    int n = 0;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (*p == '\0') break;
        if (n == max) return max + 1;
        fields[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r') p++;
        if (*p) *p++ = '\0';
    }
    return n;
}

static int blank_or_comment(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    return *p == '\0' || *p == '#';
}

/* Parse the header: map field i to a column; check required columns. */
static dyn_status parse_header(const char *name, int32_t line, char **fields, int nf, int *col_of,
                               int *present, dyn_error *err)
{
    for (int c = 0; c < COL_COUNT; c++) present[c] = 0;
    for (int i = 0; i < nf; i++) {
        int found = -1;
        for (int c = 0; c < COL_COUNT; c++)
            if (strcmp(fields[i], col_names[c]) == 0) found = c;
        if (found < 0)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: unknown column '%s'", name, line, fields[i]);
        if (present[found])
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: column '%s' appears twice", name, line,
                                 fields[i]);
        present[found] = 1;
        col_of[i] = found;
    }
    for (int c = COL_MB; c <= COL_BWD; c++)
        if (!present[c])
            return dyn_error_set(err, DYN_ERR_PARSE,
                                 "%s:%d: header lacks column '%s' (need mb, stage, fwd_ms, bwd_ms)",
                                 name, line, col_names[c]);
    if (present[COL_BWD_INPUT] != present[COL_BWD_WEIGHT])
        return dyn_error_set(err, DYN_ERR_PARSE,
                             "%s:%d: bwd_input_ms and bwd_weight_ms must be given together", name, line);
    return DYN_OK;
}

/* Parse one data row into row->v; indices must be whole and in range, values >= 0. */
static dyn_status parse_row(const char *name, int32_t line, char **fields, int nf, int nf_header,
                            const int *col_of, whatif_row *row, dyn_error *err)
{
    if (nf != nf_header)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: %s fields than the header's %d", name,
                             line, nf > nf_header ? "more" : "fewer", nf_header);
    memset(row, 0, sizeof *row);
    row->line = line;
    for (int i = 0; i < nf; i++) {
        int c = col_of[i];
        double v;
        if (dyn_parse_finite(fields[i], &v) != 0)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: %s '%s' is not a number", name, line,
                                 col_names[c], fields[i]);
        if (v < 0)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: %s is negative (%g)", name, line,
                                 col_names[c], v);
        if ((c == COL_MB || c == COL_STAGE || c == COL_TOKENS) && v != floor(v))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: %s '%s' is not a whole number", name,
                                 line, col_names[c], fields[i]);
        if ((c == COL_MB || c == COL_STAGE) && v > WHATIF_MAX_INDEX)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: %s %g is above %d", name, line,
                                 col_names[c], v, WHATIF_MAX_INDEX);
        if (c == COL_TOKENS && v > 1e15)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: tokens %g is too large", name, line, v);
        /* Times and sizes are summed over up to 2^16 x 2^16 rows and along
         * the schedule: the bound shared with the cost table keeps every sum
         * finite (DYN_COST_VALUE_MAX, cost.h). */
        if (c != COL_TOKENS && c != COL_MB && c != COL_STAGE && v > DYN_COST_VALUE_MAX)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: %s %g is above the limit %g", name, line,
                                 col_names[c], v, DYN_COST_VALUE_MAX);
        row->v[c] = v;
    }
    return DYN_OK;
}

/* What fill_costs has seen: the line of each (micro-batch, stage) pair,
 * of each stage's states_mb and of each micro-batch's tokens (0: none). */
typedef struct fill_seen {
    int32_t *pair;       /* [M * S] */
    int32_t *stage_line; /* [S] */
    int32_t *mb_line;    /* [M] */
    double *mb_tokens;   /* [M] */
} fill_seen;

/* One row into out: its pair given once, and states_mb and tokens equal to
 * what earlier rows of the same stage and micro-batch gave. */
static dyn_status fill_row(const char *name, const whatif_row *row, const int *present, int32_t S,
                           dyn_stage_costs *out, fill_seen *seen, dyn_error *err)
{
    int32_t mb = (int32_t)row->v[COL_MB], s = (int32_t)row->v[COL_STAGE];
    int32_t i = mb * S + s;
    if (seen->pair[i])
        return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: micro-batch %d stage %d already given at line %d",
                             name, row->line, mb, s, seen->pair[i]);
    seen->pair[i] = row->line;
    out->fwd_ms[i] = row->v[COL_FWD];
    out->bwd_ms[i] = row->v[COL_BWD];
    if (present[COL_BWD_INPUT]) {
        out->bwd_input_ms[i] = row->v[COL_BWD_INPUT];
        out->bwd_weight_ms[i] = row->v[COL_BWD_WEIGHT];
    } else {
        out->bwd_input_ms[i] = out->bwd_weight_ms[i] = 0.5 * row->v[COL_BWD];
    }
    out->stored_mb[i] = row->v[COL_STORED];
    out->peak_mb[i] = row->v[COL_PEAK];
    out->send_mb[i] = row->v[COL_SEND];
    if (seen->stage_line[s] && out->states_mb[s] != row->v[COL_STATES])
        return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: states_mb of stage %d differs from line %d",
                             name, row->line, s, seen->stage_line[s]);
    seen->stage_line[s] = row->line;
    out->states_mb[s] = row->v[COL_STATES];
    if (seen->mb_line[mb] && seen->mb_tokens[mb] != row->v[COL_TOKENS])
        return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: tokens of micro-batch %d differ from line %d",
                             name, row->line, mb, seen->mb_line[mb]);
    seen->mb_line[mb] = row->line;
    seen->mb_tokens[mb] = row->v[COL_TOKENS];
    return DYN_OK;
}

/* Rows -> costs: check every (mb, stage) once and per-stage / per-mb columns
 * consistent; fill out and real_tokens. */
static dyn_status fill_costs(const char *name, const whatif_row *rows, int32_t n_rows,
                             const int *present, int32_t M, int32_t S, dyn_stage_costs *out,
                             int64_t *real_tokens, dyn_error *err)
{
    dyn_status st = dyn_stage_costs_alloc(out, M, S, err);
    if (st != DYN_OK) return st;
    fill_seen seen = {dyn_calloc((size_t)M * S, sizeof(int32_t), "what-if rows", err),
                      dyn_calloc((size_t)S, sizeof(int32_t), "what-if rows", err),
                      dyn_calloc((size_t)M, sizeof(int32_t), "what-if rows", err),
                      dyn_calloc((size_t)M, sizeof(double), "what-if rows", err)};
    if (!seen.pair || !seen.stage_line || !seen.mb_line || !seen.mb_tokens) st = DYN_ERR_NOMEM;
    for (int32_t k = 0; k < n_rows && st == DYN_OK; k++) st = fill_row(name, &rows[k], present, S, out, &seen, err);
    for (int32_t mb = 0; mb < M && st == DYN_OK; mb++)
        for (int32_t s = 0; s < S && st == DYN_OK; s++)
            if (!seen.pair[mb * S + s])
                st = dyn_error_set(err, DYN_ERR_PARSE,
                                   "%s: micro-batch %d stage %d is missing (need every pair 0..%d x 0..%d)",
                                   name, mb, s, M - 1, S - 1);
    if (st == DYN_OK) {
        double total = 0;
        for (int32_t mb = 0; mb < M; mb++) total += seen.mb_tokens[mb];
        *real_tokens = (int64_t)total;
    }
    free(seen.pair);
    free(seen.stage_line);
    free(seen.mb_line);
    free(seen.mb_tokens);
    if (st != DYN_OK) dyn_stage_costs_free(out);
    return st;
}

/* The file as read so far: the header's columns and the rows. */
typedef struct whatif_read {
    const char *name;
    whatif_row *rows;
    int32_t n_rows, cap_rows, line, max_mb, max_stage;
    int have_header, nf_header;
    int col_of[COL_COUNT], present[COL_COUNT];
} whatif_read;

/* One line that is neither blank nor a comment (NUL-terminated, split in
 * place): the header if none yet, else a row. */
static dyn_status whatif_line(whatif_read *w, char *p, dyn_error *err)
{
    char *fields[COL_COUNT + 1];
    int nf = split_fields(p, fields, COL_COUNT);
    dyn_status st;
    if (!w->have_header) {
        if (nf > COL_COUNT)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: header has more than %d columns", w->name, w->line,
                                 COL_COUNT);
        if ((st = parse_header(w->name, w->line, fields, nf, w->col_of, w->present, err)) != DYN_OK) return st;
        w->have_header = 1;
        w->nf_header = nf;
        return DYN_OK;
    }
    if (w->n_rows == w->cap_rows) {
        size_t c = (size_t)w->cap_rows;
        if ((c ? 2 * c : 64) > WHATIF_MAX_CELLS || DYN_RESERVE(w->rows, c, c ? c + 1 : 64) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "%s:%d: too many rows", w->name, w->line);
        w->cap_rows = (int32_t)c;
    }
    whatif_row *row = &w->rows[w->n_rows];
    if ((st = parse_row(w->name, w->line, fields, nf, w->nf_header, w->col_of, row, err)) != DYN_OK) return st;
    if (row->v[COL_MB] > w->max_mb) w->max_mb = (int32_t)row->v[COL_MB];
    if (row->v[COL_STAGE] > w->max_stage) w->max_stage = (int32_t)row->v[COL_STAGE];
    w->n_rows++;
    return DYN_OK;
}

/* Read every line of buf (modified in place). */
static dyn_status whatif_lines(whatif_read *w, char *buf, dyn_error *err)
{
    char *p = buf;
    while (*p) {
        char *eol = strchr(p, '\n');
        char *next = eol ? eol + 1 : p + strlen(p);
        if (eol) *eol = '\0';
        w->line++;
        if (!blank_or_comment(p)) {
            dyn_status st = whatif_line(w, p, err);
            if (st != DYN_OK) return st;
        }
        p = next;
    }
    if (!w->have_header)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: no header line (need mb, stage, fwd_ms, bwd_ms)", w->name,
                             w->line);
    if (w->n_rows == 0)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s:%d: no micro-batch rows after the header", w->name, w->line);
    if ((int64_t)(w->max_mb + 1) * (w->max_stage + 1) > WHATIF_MAX_CELLS)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: %d micro-batches x %d stages is too many", w->name,
                             w->max_mb + 1, w->max_stage + 1);
    return DYN_OK;
}

dyn_status dyn_whatif_parse(const char *name, const char *text, dyn_stage_costs *out,
                            int64_t *real_tokens, dyn_error *err)
{
    memset(out, 0, sizeof *out);
    *real_tokens = 0;
    size_t len = strlen(text);
    char *buf = dyn_calloc(len + 1, 1, "what-if text", err);
    if (buf == NULL) return DYN_ERR_NOMEM;
    memcpy(buf, text, len);
    whatif_read w = {.name = name, .max_mb = -1, .max_stage = -1};
    dyn_status st = whatif_lines(&w, buf, err);
    if (st == DYN_OK)
        st = fill_costs(name, w.rows, w.n_rows, w.present, w.max_mb + 1, w.max_stage + 1, out, real_tokens, err);
    free(w.rows);
    free(buf);
    return st;
}

dyn_status dyn_whatif_load(const char *path, dyn_stage_costs *out, int64_t *real_tokens,
                           dyn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    dyn_status st = dyn_file_read_all(path, &text, &len, err);
    if (st != DYN_OK) return st;
    if (strlen(text) != len) {
        free(text);
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: contains a NUL byte (not a text file)", path);
    }
    st = dyn_whatif_parse(path, text, out, real_tokens, err);
    free(text);
    return st;
}
