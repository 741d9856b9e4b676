/*
 * model_config.h — model shapes (dyn_model_config) and machine descriptions
 * (dyn_machine): built-in presets, JSON files and validation.
 *
 * Model JSON (docs/cost-model.md): an object with "kind" ("gpt" | "t5" |
 * "llama"), "n_layers", "hidden", "heads", "ffn", "vocab", "max_seqlen" and,
 * for T5, "n_dec_layers"; optionally "head_dim" (default hidden / heads);
 * for Llama optionally "kv_heads" (default heads), "tie_embeddings" and
 * "qkv_bias" (true/false or 0/1, default false), "rope_theta" (default
 * 10000) and "rms_eps" (default 1e-6) -- Hugging Face's config.json calls
 * them num_key_value_heads, tie_word_embeddings, (Qwen2's biases),
 * rope_theta and rms_norm_eps -- and these fields only for Llama, e.g.
 *   {"kind": "gpt", "n_layers": 12, "hidden": 768, "heads": 12,
 *    "ffn": 3072, "vocab": 50257, "max_seqlen": 1024}
 *   {"kind": "llama", "n_layers": 16, "hidden": 2048, "heads": 32,
 *    "kv_heads": 8, "ffn": 8192, "vocab": 128256, "max_seqlen": 4096,
 *    "tie_embeddings": true, "rope_theta": 500000, "rms_eps": 1e-5}
 * or {"preset": "gpt2-124m"} optionally overriding fields of the preset.
 *
 * Machine JSON: an object with every field of dyn_machine by its C name
 * ("name", "matmul_gflops", "attn_gflops", "mem_gbps", "bytes_per_elem",
 * "device_memory_mb", "link_latency_ms", "link_gbps", "dp_link_gbps"), or
 * {"base": "a100", ...} taking the missing fields from a built-in machine.
 */
#ifndef DYNAPIPE_MODEL_CONFIG_H
#define DYNAPIPE_MODEL_CONFIG_H

#include "dynapipe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Built-in shapes by name: "gpt-tiny", "gpt-mini", "gpt2-124m", "gpt-6.7b",
 * "t5-tiny", "t5-mini", "t5-base", "t5-11b", "llama-tiny", "llama-mini",
 * "smollm2-135m", "llama3.2-1b", "llama3-8b". DYN_ERR_INVALID_ARG (listing
 * the names) if unknown. */
dyn_status dyn_model_config_preset(const char *name, dyn_model_config *out, dyn_error *err);
/* Name of preset i (0-based) or NULL past the last one. */
const char *dyn_model_config_preset_name(int32_t i);

/* Read a model JSON file (format above). Errors name the file and the field. */
dyn_status dyn_model_config_load(const char *path, dyn_model_config *out, dyn_error *err);
/* Parse model JSON from text; `where` names the source in messages. */
dyn_status dyn_model_config_parse(const char *text, const char *where, dyn_model_config *out,
                                  dyn_error *err);

/* Check a shape: positive sizes; GPT: n_dec_layers == 0 and heads * head_dim ==
 * hidden; T5: n_dec_layers >= 1; Llama: n_dec_layers == 0, kv_heads divides
 * heads, head_dim even, tie_embeddings and qkv_bias 0 or 1, rope_theta and
 * rms_eps > 0, rope_scaling none or llama3 with factor > 0, 0 < low < high
 * and original context >= 1 (src/model's rules); max_seqlen >= 2; each
 * dimension at most its limit below (so every size derived from them is
 * finite and exact). The message names the field. */
#define DYN_MODEL_MAX_LAYERS 4096        /* n_layers, n_dec_layers */
#define DYN_MODEL_MAX_HIDDEN 65536       /* hidden, heads, head_dim, heads * head_dim */
#define DYN_MODEL_MAX_FFN (1 << 20)      /* ffn */
#define DYN_MODEL_MAX_VOCAB (1 << 24)    /* vocab */
#define DYN_MODEL_MAX_SEQLEN (1 << 20)   /* max_seqlen, tokens */
dyn_status dyn_model_config_validate(const dyn_model_config *cfg, dyn_error *err);

/* "gpt", "t5" or "llama"; and the reverse (DYN_ERR_INVALID_ARG if none). */
const char *dyn_model_kind_name(dyn_model_kind kind);
dyn_status dyn_model_kind_parse(const char *name, dyn_model_kind *out, dyn_error *err);

/* Parameter count (elements) of the whole model, each tensor once: GPT's
 * LM head tied to the token table counts once, as a Llama's does when
 * tie_embeddings (untied: both); T5's relative-bias tables and
 * encoder final norm are included. Equals the count of the model that
 * src/model builds (tests/test_cost_vs_model.c). Per-stage memory uses
 * dyn_cost_layer_states_mb, where a last stage holds its own head copy. */
int64_t dyn_model_config_params(const dyn_model_config *cfg);

/* Built-in machine descriptions by name ("cpu": one core of this kind of
 * machine, fp32; "a100": 8 x A100 40 GB with NVLink, bf16). NULL if unknown.*/
const dyn_machine *dyn_machine_builtin(const char *name);
/* Read a machine JSON file (format above). Errors name the file and field. */
dyn_status dyn_machine_load(const char *path, dyn_machine *out, dyn_error *err);
dyn_status dyn_machine_parse(const char *text, const char *where, dyn_machine *out,
                             dyn_error *err);
/* Check a machine: positive rates, bytes_per_elem 2 or 4, memory > 0,
 * latency >= 0. The message names the field. */
dyn_status dyn_machine_validate(const dyn_machine *m, dyn_error *err);
/* Oversubscription: the share of a core each thread gets when `ranks`
 * processes of `threads` threads run on `cores` cores, cores / (ranks x
 * threads) when that is below 1, else 1 (also for any argument < 1). */
double dyn_machine_core_share(int64_t ranks, int64_t threads, int64_t cores);
/* Scale m for threads that get `share` of a core (0 < share < 1; else no
 * change): the matrix, attention and memory rates times share, the
 * per-layer overhead divided by it. Links and memory size are unchanged. */
void dyn_machine_share_cores(dyn_machine *m, double share);
/* A built-in name ("cpu", "a100") or else a JSON file path. */
dyn_status dyn_machine_resolve(const char *name_or_path, dyn_machine *out, dyn_error *err);

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_MODEL_CONFIG_H */
