/* machine.c — machine descriptions: the two built-in machines and JSON
 * machine files. The numbers of the built-ins are argued in
 * docs/cost-model.md; the short version sits next to each field. */
#include "dynapipe/cost.h"
#include "dynapipe/model_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "util/json.h" /* defines: dyn_json_parse */
#include "util/util.h" /* defines: dyn_file_read_all */

static const dyn_machine MACHINES[] = {
    {
        .name = "cpu",
        /* One core of the Intel Xeon this project runs on (family 6 model
         * 207; AVX-512), fp32, OpenBLAS 0.3.21 with its SkylakeX kernel
         * (src/model/blas.h selects it; the generic kernel OpenBLAS falls
         * back to there is 4x slower). Single GPT-sized products reach
         * 145-155 GFLOP/s at quiet moments (2048 rows, hidden 512-768); the
         * rate, n_half and attn_gflops below make the analytic model's
         * GPT-2 block (hidden 512) predictions 0.94-1.05 of the quietest
         * measured block times (docs/performance.md, "BLAS kernel and layer
         * speed on the Xeon"). Before: 78 on an AMD EPYC (Zen 3, AVX2). */
        .matmul_gflops = 140.0,
        /* Attention runs as many small per-head products (head_dim 64) plus
         * masking: about half the large-gemm rate, as before. */
        .attn_gflops = 70.0,
        /* One core streams ~12 GB/s from DRAM (a single core cannot saturate
         * the socket's channels); not re-measured on the Xeon. */
        .mem_gbps = 12.0,
        .bytes_per_elem = 4,
        /* 23 GiB of RAM shared by the ranks of one host; 8 GiB per stage
         * leaves room for the OS and a second replica. */
        .device_memory_mb = 8192.0,
        /* Ranks on one host talk through MPI shared memory. */
        .link_latency_ms = 0.005,
        .link_gbps = 4.0,
        .dp_link_gbps = 4.0,
        /* Inside a block every product costs ~32 extra rows on the Xeon: the
         * AVX-512 kernel computes twice as fast as the AMD's, so streaming
         * the weights (and, in the weight-gradient pass, the gradients)
         * costs about twice the rows (14 there). bench/bench_calibrate's
         * block fits gave 32.7 and 40.4 under load 6-10 (medians); an sgemm
         * alone, weights hot in cache, gives ~20. The fixed part fits to
         * <= 0, as before: one thread, no fork-join, no launches. */
        .gemm_n_half = 32.0,
        .layer_overhead_ms = 0.0,
    },
    {
        .name = "a100",
        /* A100 40 GB, bf16: 312 TFLOP/s peak dense tensor-core rate; large
         * Megatron-style GEMMs sustain about half of it. */
        .matmul_gflops = 156000.0,
        /* Fused attention kernels reach ~35% of peak at these head sizes. */
        .attn_gflops = 110000.0,
        /* 1555 GB/s HBM2 peak; elementwise kernels reach ~85%. */
        .mem_gbps = 1300.0,
        .bytes_per_elem = 2,
        /* 40 GiB minus ~2 GiB for the CUDA context, workspaces and
         * allocator fragmentation. */
        .device_memory_mb = 38912.0,
        /* NVLink 3 inside a node: ~150 GB/s achieved point to point. */
        .link_latency_ms = 0.01,
        .link_gbps = 150.0,
        /* Ring allreduce bus bandwidth over NVLink (8 GPUs). */
        .dp_link_gbps = 100.0,
        /* Not measured here (no GPU): from public figures, argued in
         * docs/cost-model.md. Below ~64 token rows a bf16 product is bound
         * by reading its weights (2 K N bytes at ~1.3 TB/s = the time of
         * ~120 rows at 156 TFLOP/s; tiles keep part of it hidden), so
         * n_half = 64; a layer pass launches ~10 kernels at ~4 us each. */
        .gemm_n_half = 64.0,
        .layer_overhead_ms = 0.04,
    },
};
#define N_MACHINES ((int)(sizeof MACHINES / sizeof MACHINES[0]))

const dyn_machine *dyn_machine_builtin(const char *name)
{
    for (int i = 0; name != NULL && i < N_MACHINES; i++)
        if (strcmp(name, MACHINES[i].name) == 0) return &MACHINES[i];
    return NULL;
}

dyn_status dyn_machine_validate(const dyn_machine *m, dyn_error *err)
{
    if (memchr(m->name, '\0', sizeof m->name) == NULL || m->name[0] == '\0')
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine: name must be 1..63 characters");
    for (const char *c = m->name; *c; c++)
        if (*c == ' ' || *c == '\t' || *c == '\n' || *c == '=' || *c == '"')
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "machine: name '%s' must not contain spaces, '=' or quotes", m->name);
    struct { const char *name; double v; } pos[] = {
        {"matmul_gflops", m->matmul_gflops}, {"attn_gflops", m->attn_gflops},
        {"mem_gbps", m->mem_gbps},           {"device_memory_mb", m->device_memory_mb},
        {"link_gbps", m->link_gbps},         {"dp_link_gbps", m->dp_link_gbps},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (!(pos[i].v > 0) || !isfinite(pos[i].v))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine %s: %s = %g must be positive",
                                 m->name, pos[i].name, pos[i].v);
    struct { const char *name; double v; } nonneg[] = {
        {"link_latency_ms", m->link_latency_ms},
        {"gemm_n_half", m->gemm_n_half},
        {"layer_overhead_ms", m->layer_overhead_ms},
        {"optimizer_ms_per_mparam", m->optimizer_ms_per_mparam},
    };
    for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
        if (!(nonneg[i].v >= 0) || !isfinite(nonneg[i].v))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine %s: %s = %g must be >= 0", m->name,
                                 nonneg[i].name, nonneg[i].v);
    /* the two latencies are added once per message or layer along a run:
     * the cost inputs' bound keeps those sums finite */
    if (m->link_latency_ms > DYN_COST_VALUE_MAX || m->layer_overhead_ms > DYN_COST_VALUE_MAX)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine %s: %s = %g is too large (at most %s)", m->name,
                             m->link_latency_ms > DYN_COST_VALUE_MAX ? "link_latency_ms" : "layer_overhead_ms",
                             m->link_latency_ms > DYN_COST_VALUE_MAX ? m->link_latency_ms : m->layer_overhead_ms,
                             DYN_COST_VALUE_MAX_TEXT);
    if (m->optimizer_ms_per_mparam > DYN_COST_VALUE_MAX)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "machine %s: optimizer_ms_per_mparam = %g is too large (at most %s)", m->name,
                             m->optimizer_ms_per_mparam, DYN_COST_VALUE_MAX_TEXT);
    if (m->bytes_per_elem != 2 && m->bytes_per_elem != 4)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "machine %s: bytes_per_elem = %d must be 2 or 4",
                             m->name, m->bytes_per_elem);
    return DYN_OK;
}

/* Every key of root is one a machine file may have. */
static dyn_status machine_keys_check(const cJSON *root, const char *where, dyn_error *err)
{
    static const char *const KEYS[] = {"base", "name", "matmul_gflops", "attn_gflops", "mem_gbps",
                                       "bytes_per_elem", "device_memory_mb", "link_latency_ms",
                                       "link_gbps", "dp_link_gbps", "gemm_n_half", "layer_overhead_ms",
                                       "optimizer_ms_per_mparam", NULL};
    for (const cJSON *it = root->child; it; it = it->next) {
        int known = 0;
        for (int k = 0; KEYS[k]; k++) known |= strcmp(it->string, KEYS[k]) == 0;
        if (!known) return dyn_error_set(err, DYN_ERR_PARSE, "%s: unknown field \"%s\"", where, it->string);
    }
    return DYN_OK;
}

/* "base" (a built-in machine whose fields the file overrides; *have_base)
 * and "name" (required without a base) into *m. */
static dyn_status machine_base_name(const cJSON *root, const char *where, dyn_machine *m, int *have_base,
                                    dyn_error *err)
{
    const cJSON *base = cJSON_GetObjectItemCaseSensitive(root, "base");
    *have_base = 0;
    if (base != NULL) {
        const dyn_machine *b = cJSON_IsString(base) ? dyn_machine_builtin(base->valuestring) : NULL;
        if (b == NULL)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"base\" must name a built-in machine (cpu, a100)",
                                 where);
        *m = *b;
        *have_base = 1;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (name != NULL) {
        if (!cJSON_IsString(name) || strlen(name->valuestring) >= sizeof m->name)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"name\" must be a string of 1..63 characters",
                                 where);
        snprintf(m->name, sizeof m->name, "%s", name->valuestring);
    } else if (!*have_base) {
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: missing field \"name\"", where);
    }
    return DYN_OK;
}

/* The numeric fields into *m, each required without a base except the
 * small-size terms: absent (and no base) means 0, the pure-rate model, so
 * machine files written before they existed still load. */
static dyn_status machine_numbers(const cJSON *root, const char *where, int have_base, dyn_machine *m,
                                  dyn_error *err)
{
    struct { const char *key; double *dst; int optional; } f[] = {
        {"matmul_gflops", &m->matmul_gflops, 0},       {"attn_gflops", &m->attn_gflops, 0},
        {"mem_gbps", &m->mem_gbps, 0},                 {"device_memory_mb", &m->device_memory_mb, 0},
        {"link_latency_ms", &m->link_latency_ms, 0},   {"link_gbps", &m->link_gbps, 0},
        {"dp_link_gbps", &m->dp_link_gbps, 0},         {"gemm_n_half", &m->gemm_n_half, 1},
        {"layer_overhead_ms", &m->layer_overhead_ms, 1},
        {"optimizer_ms_per_mparam", &m->optimizer_ms_per_mparam, 1},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, f[i].key);
        if (it == NULL) {
            if (have_base || f[i].optional) continue;
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: missing field \"%s\"", where, f[i].key);
        }
        if (!cJSON_IsNumber(it))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"%s\" must be a number", where, f[i].key);
        *f[i].dst = it->valuedouble;
    }
    const cJSON *bpe = cJSON_GetObjectItemCaseSensitive(root, "bytes_per_elem");
    if (bpe == NULL && !have_base)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: missing field \"bytes_per_elem\"", where);
    if (bpe != NULL) {
        if (!cJSON_IsNumber(bpe) || (bpe->valuedouble != 2 && bpe->valuedouble != 4))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: field \"bytes_per_elem\" must be 2 or 4", where);
        m->bytes_per_elem = (int32_t)bpe->valuedouble;
    }
    return DYN_OK;
}

dyn_status dyn_machine_parse(const char *text, const char *where, dyn_machine *out, dyn_error *err)
{
    cJSON *root = NULL;
    dyn_status st = dyn_json_parse(text, strlen(text), where, &root, err);
    if (st != DYN_OK) return st;
    dyn_machine m;
    memset(&m, 0, sizeof m);
    int have_base = 0;
    if (!cJSON_IsObject(root)) st = dyn_error_set(err, DYN_ERR_PARSE, "%s: expected a JSON object", where);
    if (st == DYN_OK) st = machine_keys_check(root, where, err);
    if (st == DYN_OK) st = machine_base_name(root, where, &m, &have_base, err);
    if (st == DYN_OK) st = machine_numbers(root, where, have_base, &m, err);
    /* Prefix the source so the user knows which file is wrong. */
    if (st == DYN_OK && dyn_machine_validate(&m, err) != DYN_OK) st = dyn_error_prefix(err, DYN_ERR_PARSE, where);
    if (st == DYN_OK) *out = m;
    cJSON_Delete(root);
    return st;
}

dyn_status dyn_machine_load(const char *path, dyn_machine *out, dyn_error *err)
{
    char *text = NULL;
    dyn_status st = dyn_file_read_all(path, &text, NULL, err);
    if (st != DYN_OK) return st;
    st = dyn_machine_parse(text, path, out, err);
    free(text);
    return st;
}

dyn_status dyn_machine_resolve(const char *name_or_path, dyn_machine *out, dyn_error *err)
{
    const dyn_machine *b = dyn_machine_builtin(name_or_path);
    if (b != NULL) {
        *out = *b;
        return DYN_OK;
    }
    return dyn_machine_load(name_or_path, out, err);
}

double dyn_machine_core_share(int64_t ranks, int64_t threads, int64_t cores)
{
    if (ranks < 1 || threads < 1 || cores < 1) return 1.0;
    double want = (double)ranks * (double)threads;
    return want > (double)cores ? (double)cores / want : 1.0;
}

void dyn_machine_share_cores(dyn_machine *m, double share)
{
    if (!(share > 0) || !(share < 1)) return;
    m->matmul_gflops *= share;
    m->attn_gflops *= share;
    m->mem_gbps *= share;
    m->layer_overhead_ms /= share;
    m->optimizer_ms_per_mparam /= share;
}
