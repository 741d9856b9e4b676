/*
 * common.h — types shared by every part of dynapipe: status codes and the
 * error record, samples, model shapes, machine descriptions and the shape of
 * a micro-batch.
 *
 * Units, everywhere in the project unless a name says otherwise:
 *   lengths in tokens, times in milliseconds (ms), memory in MiB ("MB",
 *   2^20 bytes), rates in the unit their field name gives.
 *
 * Error convention: a function that can fail returns dyn_status and takes a
 * `dyn_error *err` last; on failure it fills err (which may be NULL) with a
 * one-line message that says what is wrong and where, and leaves its outputs
 * untouched or freed. Constructors return NULL on failure.
 *
 * Ownership convention: opaque handles are made by *_create (or *_load) and
 * released by the matching *_free, which accepts NULL; a handle that keeps a
 * pointer to another object ("borrows" it) says so, and that object must
 * outlive it. Result structs the library fills (dyn_batch_plan, dyn_dataset,
 * dyn_exec_plan, dyn_stage_costs, ...) own their arrays and are released by
 * their *_free, which is also safe on a zeroed struct. Strings returned as
 * `const char *` are static unless a comment says otherwise.
 *
 * Threads: no function keeps global state; distinct handles may be used from
 * different threads, one handle from one thread at a time unless its header
 * says more (const cost-model queries are thread-safe).
 */
#ifndef DYNAPIPE_COMMON_H
#define DYNAPIPE_COMMON_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dyn_status {
    DYN_OK = 0,
    DYN_ERR_INVALID_ARG = 1, /* a bad argument, flag or value */
    DYN_ERR_IO = 2,          /* a file could not be opened, read or written */
    DYN_ERR_PARSE = 3,       /* malformed input (file:line in the message) */
    DYN_ERR_NOMEM = 4,       /* an allocation failed */
    DYN_ERR_INFEASIBLE = 5,  /* no plan satisfies the memory limit */
    DYN_ERR_CORRUPT = 6,     /* bad magic, version, checksum or truncation */
    DYN_ERR_INTERNAL = 7,    /* a broken invariant: a bug in dynapipe */
    DYN_ERR_NUMERIC = 8      /* a NaN or infinity where a finite number must be (a diverged run) */
} dyn_status;

#define DYN_ERROR_MSG_MAX 512

typedef struct dyn_error {
    dyn_status code;
    char msg[DYN_ERROR_MSG_MAX];
} dyn_error;

/* Fill err (if not NULL) with code and a printf-style message; returns code so
 * that error paths read `return dyn_error_set(err, DYN_ERR_IO, "...")`. */
dyn_status dyn_error_set(dyn_error *err, dyn_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepend "<prefix>: " to err's message and set its code (err may be NULL);
 * returns code. For callers that add where an error happened (a file name)
 * to the message of a function that did not know it. */
dyn_status dyn_error_prefix(dyn_error *err, dyn_status code, const char *prefix);
/* Reset err to DYN_OK with an empty message. */
void dyn_error_clear(dyn_error *err);
/* Short stable name of a status ("ok", "invalid argument", ...). */
const char *dyn_status_name(dyn_status code);

/* One training sample: its tokens are not needed for planning, only lengths.
 * For a decoder-only model (GPT) the sequence the model sees is input followed
 * by target (input_len + target_len tokens); for an encoder-decoder model (T5)
 * input feeds the encoder and target the decoder. */
typedef struct dyn_sample {
    int32_t id;         /* 0-based position in the dataset */
    int32_t task;       /* task family index (built-in generator) or -1 */
    int32_t input_len;  /* tokens, > 0 */
    int32_t target_len; /* tokens, > 0 */
} dyn_sample;

typedef enum dyn_model_kind {
    DYN_MODEL_GPT = 0, /* decoder-only, GPT-2 style */
    DYN_MODEL_T5 = 1,  /* encoder-decoder, T5 v1.1 style */
    DYN_MODEL_LLAMA = 2 /* decoder-only, Llama family (Llama 2/3, Qwen2, Mistral) */
} dyn_model_kind;

/* Decoder-only kinds (GPT, Llama) see input ++ target as one sequence and
 * share GPT's layer kinds (embedding, block, LM head); T5 is the one
 * encoder-decoder. */
static inline int dyn_model_kind_decoder_only(dyn_model_kind kind) { return kind != DYN_MODEL_T5; }

/* Rotary-embedding frequency scaling of a Llama-family model (Hugging
 * Face's rope_scaling.rope_type): none, or "llama3" (Llama 3.1+). */
typedef enum dyn_rope_scaling {
    DYN_ROPE_NONE = 0,
    DYN_ROPE_LLAMA3 = 1
} dyn_rope_scaling;

/* Model shape. GPT: n_layers blocks, n_dec_layers = 0, head_dim =
 * hidden / heads. T5: n_layers encoder blocks and n_dec_layers decoder
 * blocks; head_dim is d_kv and may differ from hidden / heads. Llama:
 * n_layers blocks, n_dec_layers = 0, ffn = intermediate_size, head_dim
 * (usually hidden / heads) even, and the fields after max_seqlen (all 0
 * for GPT and T5, which ignore them). */
typedef struct dyn_model_config {
    dyn_model_kind kind;
    int32_t n_layers;
    int32_t n_dec_layers;
    int32_t hidden;     /* d_model */
    int32_t heads;
    int32_t head_dim;   /* d_kv */
    int32_t ffn;        /* d_ff */
    int32_t vocab;
    int32_t max_seqlen; /* longest sequence (GPT: input+target; T5: each side) */
    /* Llama family (config.json names in quotes). */
    int32_t kv_heads;       /* "num_key_value_heads", divides heads (GQA) */
    int32_t tie_embeddings; /* "tie_word_embeddings": LM head = embed_tokens */
    int32_t qkv_bias;       /* Qwen2: q/k/v projections carry biases */
    int32_t rope_scaling;   /* dyn_rope_scaling of "rope_scaling" */
    double rope_theta;      /* "rope_theta", > 0 (10000, 500000, ...) */
    double rms_eps;         /* "rms_norm_eps", > 0 */
    double rope_factor;     /* llama3 "factor" (> 0) */
    double rope_low_freq;   /* llama3 "low_freq_factor" */
    double rope_high_freq;  /* llama3 "high_freq_factor" (> low) */
    int32_t rope_orig_ctx;  /* llama3 "original_max_position_embeddings" */
} dyn_model_config;

/* Activation recomputation per micro-batch: none keeps every activation the
 * backward pass needs; selective recomputes attention internals (scores,
 * softmax) and keeps the rest; full keeps only each layer's input and runs the
 * forward again during backward. */
typedef enum dyn_recompute {
    DYN_RECOMPUTE_NONE = 0,
    DYN_RECOMPUTE_SELECTIVE = 1,
    DYN_RECOMPUTE_FULL = 2
} dyn_recompute;
#define DYN_RECOMPUTE_COUNT 3

/* A machine: one device per pipeline stage and the links between them. The
 * analytic cost model reads the compute fields, the simulator the link ones.*/
typedef struct dyn_machine {
    char name[64];
    double matmul_gflops;    /* sustained dense matrix-product rate, GFLOP/s */
    double attn_gflops;      /* sustained attention-kernel rate, GFLOP/s */
    double mem_gbps;         /* device memory bandwidth, GB/s */
    int32_t bytes_per_elem;  /* activations and parameters: 4 fp32, 2 bf16 */
    double device_memory_mb; /* usable memory per device, MB */
    double link_latency_ms;  /* point-to-point message latency between stages */
    double link_gbps;        /* point-to-point bandwidth between stages, GB/s */
    double dp_link_gbps;     /* bandwidth for data-parallel gradient allreduce */
    /* Small-size efficiency (analytic model; docs/cost-model.md). A matrix
     * product over n token rows runs at matmul_gflops * n / (n + gemm_n_half)
     * (Hockney's half-performance size n_1/2): it costs the time of
     * gemm_n_half extra rows. This also covers reading the weights once per
     * product, which costs the same (bytes of K x N) whatever n is. */
    double gemm_n_half;       /* rows (tokens of the micro-batch), >= 0 */
    /* Fixed time per layer per pass -- forward, input-gradient backward and
     * weight-gradient backward each pay it once -- for kernel launches,
     * thread fork-join and framework dispatch, whatever the size. */
    double layer_overhead_ms; /* ms, >= 0 */
    /* The optimizer step (gradient norm, AdamW with clipping, zeroing the
     * gradients) measured per million parameters, ms; 0: priced as the
     * bytes it reads and writes at mem_gbps (dyn_cost_optimizer_ms). */
    double optimizer_ms_per_mparam; /* >= 0 */
} dyn_machine;

/* Shape of one micro-batch as the cost model and the schedules see it.
 * rows sequences, each padded to enc_len (GPT: the whole input+target
 * sequence; T5: the encoder input) and, for T5, dec_len (decoder target).
 * The *_attn fields count attended (query, key) pairs summed over the
 * attention segments of every row, ignoring causality (the cost model applies
 * the causal factor itself); 0 means dense: rows * len * len (cross:
 * rows * dec_len * enc_len). Packing with document masks sets them to the
 * sum over the packed samples; padding and plain packing leave them 0. */
typedef struct dyn_mb_shape {
    int32_t rows;
    int32_t enc_len;
    int32_t dec_len;    /* 0 for GPT */
    int64_t enc_attn;   /* GPT self-attention, or T5 encoder self-attention */
    int64_t dec_attn;   /* T5 decoder self-attention */
    int64_t cross_attn; /* T5 decoder-to-encoder attention */
} dyn_mb_shape;

#ifdef __cplusplus
}
#endif
#endif /* DYNAPIPE_COMMON_H */
