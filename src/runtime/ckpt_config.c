/* ckpt_config.c — config.json of a checkpoint (checkpoint.h): the Hugging
 * Face config of the trained shape (GPT2LMHeadModel or
 * T5ForConditionalGeneration with the data's special ids: the byte
 * vocabulary's, or the tokenizer's),
 * so that the checkpoint loads in transformers. Written, never read: the
 * shape dynapipe resumes from is trainer_state.json's. */
#include <cjson/cJSON.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_config */
#include "model/layers.h"          /* defines: DYN_LN_EPS, DYN_RMS_EPS, DYN_T5_* */
#include "runtime/checkpoint.h"    /* declares: rt_ckpt_hf_config*; dyn_model_specials through model/model.h */

char *rt_ckpt_hf_config(const dyn_model_config *c, dyn_error *err)
{
    dyn_model_specials bytes = dyn_model_specials_bytes();
    return rt_ckpt_hf_config_ids(c, &bytes, err);
}

char *rt_ckpt_hf_config_ids(const dyn_model_config *c, const dyn_model_specials *sp, dyn_error *err)
{
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
        cJSON_AddNumberToObject(r, "decoder_start_token_id", sp->decoder_start);
    }
    cJSON_AddNumberToObject(r, "pad_token_id", sp->pad);
    if (sp->eos >= 0) cJSON_AddNumberToObject(r, "eos_token_id", sp->eos);
    else cJSON_AddNullToObject(r, "eos_token_id");
    /* GPT-2's convention: bos = eos when the vocabulary has no bos of its own */
    int32_t bos = sp->bos >= 0 ? sp->bos : sp->eos;
    if (gpt && bos >= 0) cJSON_AddNumberToObject(r, "bos_token_id", bos);
    else if (gpt) cJSON_AddNullToObject(r, "bos_token_id");
    cJSON_AddStringToObject(r, "torch_dtype", "float32");
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    if (text == NULL) dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for config.json");
    return text;
}
