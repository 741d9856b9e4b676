/* ckpt_config.c — config.json of a checkpoint (checkpoint.h): the Hugging
 * Face config of the trained shape (GPT2LMHeadModel,
 * T5ForConditionalGeneration, or the Llama family through
 * model/hf_config.h), with the token ids of the model (rt_ckpt_tokens:
 * the tokenizer's, an --init folder's, or the byte vocabulary's), so that
 * the checkpoint loads in transformers. Written here, and read back only to compare it with
 * trainer_state.json: the shape dynapipe resumes from is trainer_state's. */
#include <cjson/cJSON.h>
#include <string.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_config */
#include "model/hf_config.h"       /* defines: dyn_hf_config_llama_json */
#include "model/layers.h"          /* defines: DYN_LN_EPS, DYN_RMS_EPS, DYN_T5_* */
#include "runtime/checkpoint.h"    /* declares: rt_ckpt_hf_config*; dyn_model_specials through model/model.h */

dyn_hf_tokens rt_ckpt_byte_tokens(dyn_model_kind k)
{
    dyn_hf_tokens t = {k == DYN_MODEL_GPT ? DYN_TOK_EOS : DYN_TOK_BOS, DYN_TOK_EOS, DYN_TOK_PAD};
    return t;
}

dyn_hf_tokens rt_ckpt_tokens(const dyn_model_config *cfg, const rt_ckpt_data *data, const dyn_hf_tokens *init)
{
    if (data != NULL && data->recorded && strcmp(data->tokenizer, "bytes") != 0) {
        const dyn_model_specials *sp = &data->sp;
        /* T5 writes bos as its decoder start; GPT-2's convention is bos =
         * eos when the vocabulary has no bos of its own */
        int32_t bos = cfg->kind == DYN_MODEL_T5 ? sp->decoder_start
                      : sp->bos >= 0           ? sp->bos
                      : cfg->kind == DYN_MODEL_GPT ? sp->eos
                                                   : -1;
        dyn_hf_tokens t = {bos, sp->eos, sp->pad};
        return t;
    }
    return init != NULL ? *init : rt_ckpt_byte_tokens(cfg->kind);
}

/* key: id, or null for -1. */
static void add_id(cJSON *r, const char *key, int32_t id)
{
    if (id >= 0) cJSON_AddNumberToObject(r, key, id);
    else cJSON_AddNullToObject(r, key);
}

char *rt_ckpt_hf_config(const dyn_model_config *c, const dyn_hf_tokens *tok, dyn_error *err)
{
    dyn_hf_tokens bytes = rt_ckpt_byte_tokens(c->kind);
    if (tok == NULL) tok = &bytes;
    if (c->kind == DYN_MODEL_LLAMA) return dyn_hf_config_llama_json(c, tok, err);
    cJSON *r = cJSON_CreateObject();
    if (r == NULL) {
        dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for config.json");
        return NULL;
    }
    int gpt = c->kind == DYN_MODEL_GPT;
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(gpt ? "GPT2LMHeadModel" : "T5ForConditionalGeneration"));
    cJSON_AddStringToObject(r, "model_type", gpt ? "gpt2" : "t5");
    cJSON_AddNumberToObject(r, "vocab_size", c->vocab);
    if (gpt) {
        cJSON_AddNumberToObject(r, "n_positions", c->max_seqlen);
        cJSON_AddNumberToObject(r, "n_ctx", c->max_seqlen);
        cJSON_AddNumberToObject(r, "n_embd", c->hidden);
        cJSON_AddNumberToObject(r, "n_layer", c->n_layers);
        cJSON_AddNumberToObject(r, "n_head", c->heads);
        cJSON_AddNumberToObject(r, "n_inner", c->ffn);
        cJSON_AddStringToObject(r, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(r, "layer_norm_epsilon", DYN_LN_EPS);
        cJSON_AddNumberToObject(r, "resid_pdrop", 0);
        cJSON_AddNumberToObject(r, "embd_pdrop", 0);
        cJSON_AddNumberToObject(r, "attn_pdrop", 0);
        cJSON_AddBoolToObject(r, "tie_word_embeddings", 1);
        cJSON_AddBoolToObject(r, "scale_attn_weights", 1);
    } else {
        cJSON_AddNumberToObject(r, "d_model", c->hidden);
        cJSON_AddNumberToObject(r, "d_kv", c->head_dim);
        cJSON_AddNumberToObject(r, "d_ff", c->ffn);
        cJSON_AddNumberToObject(r, "num_layers", c->n_layers);
        cJSON_AddNumberToObject(r, "num_decoder_layers", c->n_dec_layers);
        cJSON_AddNumberToObject(r, "num_heads", c->heads);
        cJSON_AddNumberToObject(r, "relative_attention_num_buckets", DYN_T5_NUM_BUCKETS);
        cJSON_AddNumberToObject(r, "relative_attention_max_distance", DYN_T5_MAX_DISTANCE);
        cJSON_AddNumberToObject(r, "dropout_rate", 0);
        cJSON_AddNumberToObject(r, "layer_norm_epsilon", DYN_RMS_EPS);
        cJSON_AddStringToObject(r, "feed_forward_proj", "gated-gelu");
        cJSON_AddBoolToObject(r, "is_encoder_decoder", 1);
        cJSON_AddBoolToObject(r, "tie_word_embeddings", 0);
        add_id(r, "decoder_start_token_id", tok->bos_id);
    }
    add_id(r, "pad_token_id", tok->pad_id);
    add_id(r, "eos_token_id", tok->eos_id);
    if (gpt) add_id(r, "bos_token_id", tok->bos_id);
    cJSON_AddStringToObject(r, "torch_dtype", "float32");
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    if (text == NULL) dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for config.json");
    return text;
}
