/* hf_config.h — a Hugging Face model folder's config.json read into the
 * dyn_model_config src/model builds, and the config.json of a Llama-family
 * model written so that transformers reads it back as the same
 * architecture (the model side of `dynapipe train --init DIR` and of
 * checkpoints; GPT-2 and T5 config.json writing stays in the runtime's
 * checkpoint code).
 *
 * Architectures read (the first entry of "architectures", else
 * "model_type"):
 *   GPT2LMHeadModel            n_embd, n_layer, n_head, n_inner (null: 4 n_embd;
 *                              other widths refused), vocab_size, n_positions;
 *                              activation gelu_new, layer_norm_epsilon 1e-5
 *   T5ForConditionalGeneration T5 v1.1 (feed_forward_proj gated-gelu): d_model,
 *                              d_kv, d_ff, num_layers, num_decoder_layers,
 *                              num_heads, vocab_size; 32 buckets, distance 128,
 *                              eps 1e-6, untied head
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

/* Parse config.json text[0..len) into *out (every field set; the model's
 * own checks run at dyn_model_create). DYN_ERR_PARSE on bad JSON or a
 * missing / mistyped field, DYN_ERR_INVALID_ARG for an architecture or
 * option this code does not compute (the message lists what it does). */
dyn_status dyn_hf_config_parse(const char *text, size_t len, const char *where, int32_t max_len,
                               dyn_model_config *out, dyn_error *err);
/* The same from a file (typically DIR/config.json). */
dyn_status dyn_hf_config_load(const char *path, int32_t max_len, dyn_model_config *out, dyn_error *err);

/* config.json text (malloc'ed, the caller frees) for a Llama-kind config:
 * LlamaForCausalLM, or Qwen2ForCausalLM when qkv_bias (Llama's
 * attention_bias would add an o_proj bias this model lacks), with the
 * fields above, rope_scaling when llama3, torch_dtype float32 and the byte
 * vocabulary's special ids. NULL and err for another kind or no memory. */
char *dyn_hf_config_llama_json(const dyn_model_config *c, dyn_error *err);

#endif
