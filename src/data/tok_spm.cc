/*
 * tok_spm.cc — SentencePiece models (tokenizer.model, spiece.model: T5,
 * Llama 2, Mistral) through Debian's libsentencepiece, behind tokenizer.h's
 * C interface. The only C++ in the library: it catches every exception at
 * this border, so none crosses into C.
 *
 * Encoding is the library's own (its normalizer, its model); add_special
 * adds what Hugging Face's classes add around one sequence: add_bos_token /
 * add_eos_token from tokenizer_config.json when given, else BOS when the
 * model has one (Llama) and EOS when it has none (T5). Special ids start
 * from the model's (pad, bos, eos; -1 when disabled) and the files beside it
 * override them (tokenizer.h). Decoding with skip_special = 0 writes control
 * pieces (</s>, <pad>) as their text, as Hugging Face's decode does.
 */
#include <sentencepiece_processor.h>

#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "data/tokenizer_impl.h" /* defines: struct dyn_tokenizer, dyn_tok_read_specials, buffers */

namespace {

struct spm {
    sentencepiece::SentencePieceProcessor proc;
    std::string path;
    std::vector<int> ids; /* scratch */
};

void spm_free(void *p) { delete static_cast<spm *>(p); }

int32_t spm_lookup(void *ctx, const char *token)
{
    const spm *s = static_cast<const spm *>(ctx);
    int id = s->proc.PieceToId(token);
    if (id == s->proc.unk_id() && s->proc.IdToPiece(id) != token) return -1;
    return id;
}

dyn_status spm_encode(dyn_tokenizer *t, const char *text, size_t len, int add_special, dyn_token_buf *out, dyn_error *err)
{
    spm *s = static_cast<spm *>(t->impl);
    try {
        s->ids.clear();
        sentencepiece::util::Status st = s->proc.Encode(absl::string_view(text, len), &s->ids);
        if (!st.ok()) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: %s", s->path.c_str(), st.ToString().c_str());
        int bos = add_special && t->add_bos && t->sp.bos >= 0, eos = add_special && t->add_eos && t->sp.eos >= 0;
        dyn_status ds = dyn_token_buf_reserve(out, s->ids.size() + 2, err);
        if (ds != DYN_OK) return ds;
        if (bos) out->ids[out->n++] = t->sp.bos;
        for (int id : s->ids) out->ids[out->n++] = id;
        if (eos) out->ids[out->n++] = t->sp.eos;
        return DYN_OK;
    } catch (const std::bad_alloc &) {
        return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", s->path.c_str());
    } catch (const std::exception &e) {
        return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: sentencepiece: %s", s->path.c_str(), e.what());
    }
}

dyn_status spm_decode(dyn_tokenizer *t, const int32_t *ids, size_t n, int skip_special, dyn_byte_buf *out, dyn_error *err)
{
    spm *s = static_cast<spm *>(t->impl);
    try {
        /* Runs of ordinary ids go through the library's decoder; a control
         * id ends a run and is written as its piece text (or skipped). */
        size_t i = 0;
        while (i < n) {
            s->ids.clear();
            while (i < n && !s->proc.IsControl(ids[i])) s->ids.push_back(ids[i++]);
            if (!s->ids.empty()) {
                std::string text;
                sentencepiece::util::Status st = s->proc.Decode(s->ids, &text);
                if (!st.ok()) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: %s", s->path.c_str(), st.ToString().c_str());
                dyn_status ds = dyn_byte_buf_append(out, text.data(), text.size(), err);
                if (ds != DYN_OK) return ds;
            }
            if (i < n) {
                if (!skip_special) {
                    const std::string &piece = s->proc.IdToPiece(ids[i]);
                    dyn_status ds = dyn_byte_buf_append(out, piece.data(), piece.size(), err);
                    if (ds != DYN_OK) return ds;
                }
                i++;
            }
        }
        return DYN_OK;
    } catch (const std::bad_alloc &) {
        return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", s->path.c_str());
    } catch (const std::exception &e) {
        return dyn_error_set(err, DYN_ERR_INTERNAL, "%s: sentencepiece: %s", s->path.c_str(), e.what());
    }
}

const dyn_tokenizer_ops spm_ops = {spm_encode, spm_decode, spm_free};

} // namespace

extern "C" dyn_tokenizer *dyn_tokenizer_load_spm(const char *path, dyn_error *err)
{
    spm *s = nullptr;
    try {
        s = new spm;
        s->path = path;
        sentencepiece::util::Status st = s->proc.Load(path);
        if (!st.ok()) {
            dyn_error_set(err, DYN_ERR_PARSE, "%s: not a SentencePiece model: %s", path, st.ToString().c_str());
            delete s;
            return nullptr;
        }
    } catch (const std::bad_alloc &) {
        delete s;
        dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", path);
        return nullptr;
    } catch (const std::exception &e) {
        delete s;
        dyn_error_set(err, DYN_ERR_PARSE, "%s: not a SentencePiece model: %s", path, e.what());
        return nullptr;
    }
    dyn_tokenizer *t = dyn_tokenizer_new(DYN_TOKENIZER_SPM, path, &spm_ops, s, err);
    if (t == nullptr) return nullptr;
    t->vocab = s->proc.GetPieceSize();
    t->sp.pad = s->proc.pad_id();
    t->sp.bos = s->proc.bos_id();
    t->sp.eos = s->proc.eos_id();
    t->add_bos = t->sp.bos >= 0;
    t->add_eos = t->sp.bos < 0 && t->sp.eos >= 0;
    char *dir = dyn_tok_dirname(path);
    dyn_status st = dir ? dyn_tok_read_specials(dir, t->vocab, spm_lookup, s, &t->sp, &t->add_bos, &t->add_eos, err)
                        : dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", path);
    free(dir);
    if (st != DYN_OK) {
        dyn_tokenizer_free(t);
        return nullptr;
    }
    return t;
}
