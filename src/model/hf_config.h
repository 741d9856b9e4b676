/* hf_config.h — the one reader of a Hugging Face model folder's config.json:
 * the table of architectures dynapipe computes (name, model kind, how
 * config.json's fields map to a dyn_model_config, how the folder's tensor
 * names map to the model's), and the config.json of a Llama-family model
 * written back so that transformers reads it as the same architecture.
 * Used by `dynapipe train --init DIR` (hf_load.h) and by checkpoints
 * (GPT-2 and T5 config.json writing stays in the runtime's checkpoint code).
 *
 * Architectures (the first entry of "architectures", else "model_type"):
 *   GPT2LMHeadModel            n_embd, n_layer, n_head, n_inner (null: 4 n_embd;
 *                              other widths refused), vocab_size, n_positions;
 *                              activation gelu_new, layer_norm_epsilon 1e-5,
 *                              tied head; save_pretrained's "transformer."
 *                              prefix and old attention-mask buffers accepted
 *   T5ForConditionalGeneration T5 v1.1 (feed_forward_proj gated-gelu): d_model,
 *                              d_kv, d_ff, num_layers, num_decoder_layers,
 *                              num_heads, vocab_size; 32 buckets, distance 128,
 *                              eps 1e-6, untied head (HF's defaults are v1.0's:
 *                              relu and tied, refused)
 *   LlamaForCausalLM           hidden_size, intermediate_size, num_hidden_layers,
 *                              num_attention_heads, num_key_value_heads (default
 *                              heads), head_dim (default hidden/heads), vocab_size,
 *                              max_position_embeddings, rms_norm_eps, rope_theta
 *                              (default 10000), rope_scaling (null, "default" or
 *                              "llama3"; others refused), tie_word_embeddings
 *                              (default false); attention_bias / mlp_bias true and
 *                              hidden_act other than silu are refused
 *   Qwen2ForCausalLM           Llama with q/k/v biases (qkv_bias = 1)
 *   MistralForCausalLM         Llama; a sliding window applies only if shorter
 * For Qwen2 and Mistral a sliding window shorter than the run's sequence
 * limit would change the computation, and is refused.
 *
 * max_len: the run's sequence limit (tokens), which becomes max_seqlen (the
 * rotary tables cover it); 0 takes the model's max_position_embeddings /
 * n_positions (T5 has none: then max_len is required). A max_len above the
 * model's positions is refused for GPT-2 (learned positions) and allowed for
 * the rotary models (as transformers allows it).
 *
 * Errors: one line naming `where` and the field ("DIR/config.json: field
 * num_key_value_heads = 3 must divide num_attention_heads = 32"). */
#ifndef DYN_MODEL_HF_CONFIG_H
#define DYN_MODEL_HF_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "dynapipe/common.h"

/* What config.json says, mapped. */
typedef struct dyn_hf_config {
    char arch[64];          /* the architecture's row name, e.g. "LlamaForCausalLM" */
    dyn_model_config model; /* the shape; max_seqlen as described above */
    int fixed_seqlen;       /* 1: the weights fix max_seqlen (GPT-2's n_positions rows of wpe) */
    int32_t positions;      /* n_positions / max_position_embeddings; 0: none (T5) */
    /* Token ids the file names (-1: absent or null; T5's bos is its
     * decoder_start_token_id): what a checkpoint of a model started from
     * this folder writes back. */
    int32_t bos_id, eos_id, pad_id;
} dyn_hf_config;

/* Token ids of a config.json written by dynapipe (-1: written as null). */
typedef struct dyn_hf_tokens {
    int32_t bos_id, eos_id, pad_id;
} dyn_hf_tokens;

/* One row of the architecture table. Adding an architecture whose model
 * kind src/model builds is a row: its names, kind, whether its weights fix
 * the sequence length, prefix, alias_of and the config.json names of the
 * shape fields (for messages about contradicting flags); the field mapping
 * is the parser of its kind in hf_config.c. */
typedef struct dyn_hf_arch {
    const char *name;       /* config.json "architectures"[0] */
    const char *model_type; /* config.json "model_type" */
    dyn_model_kind kind;
    int fixed_positions;    /* 1: max_len must not pass the position table (GPT-2) */
    const char *prefix;     /* a prefix save_pretrained may put before every name, or NULL */
    /* A name the file may carry that the model does not hold: NULL if not
     * one; "" for a buffer whose shape is not checked (GPT-2's attention
     * mask, Llama's rotary inv_freq); else the tensor it must have the shape
     * of (a tied copy). */
    const char *(*alias_of)(const char *name);
    /* config.json's names for n_layers, n_dec_layers, hidden, heads,
     * head_dim, ffn, vocab (NULL: not a field of this architecture). */
    const char *field[7];
} dyn_hf_arch;

/* The row of architecture name, or NULL. */
const dyn_hf_arch *dyn_hf_arch_find(const char *name);

/* The architectures supported, ", "-separated, for messages. */
const char *dyn_hf_supported(void);

/* Parse config.json text[0..len) into *out (every field set; the model's
 * own checks run at dyn_model_create). DYN_ERR_PARSE on bad JSON or a
 * missing / mistyped field, DYN_ERR_INVALID_ARG for an architecture or
 * option this code does not compute (the message lists what it does). */
dyn_status dyn_hf_config_parse(const char *text, size_t len, const char *where, int32_t max_len,
                               dyn_model_config *out, dyn_error *err);
/* The same with the architecture and token ids. */
dyn_status dyn_hf_config_parse_full(const char *text, size_t len, const char *where, int32_t max_len,
                                    dyn_hf_config *out, dyn_error *err);
/* The same from a file (typically DIR/config.json). */
dyn_status dyn_hf_config_load(const char *path, int32_t max_len, dyn_model_config *out, dyn_error *err);

/* dir/config.json for `train --init`: parsed as above with max_len the
 * run's sequence limit (ignored where the weights fix it: GPT-2 takes
 * n_positions), then the shape checked as dyn_model_create would check it
 * and the vocabulary at least the byte one dynapipe's data needs. One line
 * naming the file and the field. */
dyn_status dyn_hf_config_read(const char *dir, int32_t max_len, dyn_hf_config *out, dyn_error *err);

/* config.json text (malloc'ed, the caller frees) for a Llama-kind config:
 * LlamaForCausalLM, or Qwen2ForCausalLM when qkv_bias (Llama's
 * attention_bias would add an o_proj bias this model lacks), with the
 * fields above, rope_scaling when llama3, torch_dtype float32 and the token
 * ids tok (NULL: the byte vocabulary's, DYN_TOK_*). NULL and err for another
 * kind or no memory. */
char *dyn_hf_config_llama_json(const dyn_model_config *c, const dyn_hf_tokens *tok, dyn_error *err);

#endif
