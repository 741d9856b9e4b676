/* generate.c — greedy decoding with a whole model, for `dynapipe eval`.
 *
 * No KV cache: each new token runs the model over the whole prefix again
 * (O(length^2) work per answer), which is fine for the short targets of the
 * built-in tasks and keeps this beside the training kernels with nothing of
 * its own to get wrong. Step t builds a one-sample micro-batch whose target
 * is the t tokens generated so far plus one placeholder, runs layers
 * [0, L-1) (everything but the head), and takes the position that predicts
 * the placeholder:
 *   GPT, Llama: sequence input ++ target; position in_len + t - 1 of
 *        hidden (N,C);
 *   T5:  decoder tokens [decoder start] ++ target[:-1]; decoder position t of the
 *        boundary [encoder output (N,C) | decoder hidden (Nd,C)].
 * The head is applied to that one row exactly as the model's head does it
 * (GPT: ln_f LayerNorm then the tied wte; T5: the decoder's final RMSNorm
 * then lm_head; Llama: model.norm then lm_head or the tied embed_tokens),
 * with the same kernels, and the arg-max over the vocabulary
 * (lowest id on ties) is the next token. Padding, the decoder start and the
 * stop are the model's special ids (dyn_model_specials_of). */
#include <stdlib.h>
#include <string.h>

#include "model/layers.h" /* defines: dyn_layernorm_forward, dyn_rmsnorm_forward */
#include "model/model.h"
#include "util/util.h"    /* defines: dyn_calloc */

static const float *tensor_of(dyn_model *m, const char *name)
{
    const dyn_param_tensor *t = dyn_model_find_tensor(m, name);
    return t ? dyn_model_params(m) + t->offset : NULL;
}

/* Arg-max over the vocabulary of the head applied to hidden row h (C). */
static int32_t head_argmax(dyn_model *m, const float *h, float *tmp)
{
    const dyn_model_config *c = dyn_model_cfg(m);
    int C = c->hidden;
    const float *w;
    float mean, rstd;
    if (c->kind == DYN_MODEL_GPT) {
        dyn_layernorm_forward(tmp, &mean, &rstd, h, tensor_of(m, "ln_f.weight"), tensor_of(m, "ln_f.bias"), 1, C);
        w = tensor_of(m, "wte.weight");
    } else if (c->kind == DYN_MODEL_LLAMA) {
        dyn_rmsnorm_forward_eps(tmp, &rstd, h, tensor_of(m, "model.norm.weight"), (float)c->rms_eps, 1, C);
        w = tensor_of(m, c->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    } else {
        dyn_rmsnorm_forward(tmp, &rstd, h, tensor_of(m, "decoder.final_layer_norm.weight"), 1, C);
        w = tensor_of(m, "lm_head.weight");
    }
    int32_t best = 0;
    double best_v = 0;
    for (int32_t v = 0; v < c->vocab; v++) {
        double s = 0;
        for (int i = 0; i < C; i++) s += (double)w[(size_t)v * C + i] * tmp[i];
        if (v == 0 || s > best_v) {
            best_v = s;
            best = v;
        }
    }
    return best;
}

dyn_status dyn_model_generate_greedy(dyn_model *m, dyn_model_acts *a, const int32_t *input, int32_t in_len,
                                     int32_t max_new, int32_t *out, int32_t *n_out, dyn_error *err)
{
    *n_out = 0;
    int first = 0, last = 0;
    dyn_model_stage_range(m, &first, &last);
    if (first != 0 || last != dyn_model_num_layers(m))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "generation needs a whole model, not layers [%d, %d)", first,
                             last);
    const dyn_model_config *c = dyn_model_cfg(m);
    const dyn_model_specials *sp = dyn_model_specials_of(m);
    int L = last, C = c->hidden;
    int gpt = c->kind != DYN_MODEL_T5; /* decoder-only: GPT and Llama */
    if (in_len < 1 || in_len > c->max_seqlen)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "prompt of %d tokens (the model takes 1..%d)", in_len,
                             c->max_seqlen);
    int32_t room = gpt ? c->max_seqlen - in_len : c->max_seqlen;
    if (max_new < 1)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%d tokens to generate (at least 1)", max_new);
    if (room < 1) /* an empty generation is no answer: say why */
        return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                             "a prompt of %d tokens leaves no room to generate: GPT's max_seqlen %d holds prompt "
                             "and generation together (at most %d prompt tokens)",
                             in_len, c->max_seqlen, c->max_seqlen - 1);
    if (max_new > room) max_new = room;
    int32_t *tgt = dyn_calloc((size_t)max_new + 1, sizeof(int32_t), "generation", err);
    float *tmp = dyn_calloc((size_t)C, sizeof(float), "generation", err);
    float *hid = NULL;
    size_t hid_cap = 0;
    dyn_status st = tgt && tmp ? DYN_OK : DYN_ERR_NOMEM;
    for (int32_t t = 0; st == DYN_OK && t < max_new; t++) {
        tgt[t] = 0; /* the placeholder whose prediction we read */
        dyn_token_sample s = {input, in_len, tgt, t + 1};
        dyn_model_microbatch *mb = dyn_model_microbatch_create_ex(sp, c->kind, &s, 1, NULL, 0, 0, 0, 0, err);
        if (mb == NULL) {
            st = err ? err->code : DYN_ERR_NOMEM;
            break;
        }
        size_t need = dyn_model_boundary_floats(m, L - 1, mb);
        if (need > hid_cap) {
            free(hid);
            hid_cap = need;
            if ((hid = malloc(need * sizeof(float))) == NULL) {
                dyn_model_microbatch_free(mb);
                st = dyn_error_set(err, DYN_ERR_NOMEM, "out of memory for %zu floats of generation", need);
                break;
            }
        }
        st = dyn_model_stage_forward(m, a, mb, 0, L - 1, NULL, hid, 0, NULL, NULL, err);
        dyn_model_microbatch_free(mb);
        if (st != DYN_OK) break;
        size_t row = gpt ? (size_t)(in_len + t - 1) : (size_t)in_len + (size_t)t;
        int32_t next = head_argmax(m, hid + row * (size_t)C, tmp);
        out[t] = next;
        tgt[t] = next;
        *n_out = t + 1;
        if (next == sp->eos) break;
    }
    free(hid);
    free(tmp);
    free(tgt);
    return st;
}
