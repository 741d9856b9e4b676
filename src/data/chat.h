/* chat.h — a tokenizer folder's chat template (Hugging Face's
 * apply_chat_template) turned into the two texts of an input/target pair.
 * Internal to src/data: the codec (codec.c) encodes what it renders.
 *
 * Where the template comes from (the first that exists), as transformers
 * reads a folder: DIR/chat_template.jinja; else "chat_template" of
 * DIR/tokenizer_config.json, a string or a list of {"name", "template"}
 * objects of which "default" is taken. The variables it sees: messages,
 * add_generation_prompt, tools and documents (None, as transformers passes
 * them without tools), and bos_token / eos_token / unk_token / pad_token
 * as strings (tokenizer_config.json's, a string or {"content": ...}; else
 * special_tokens_map.json's; absent when neither gives one).
 *
 * The split (docs/guide-chat.md): the input is the rendering of every
 * message but the last with add_generation_prompt true; the target is the
 * rest of the rendering of the whole conversation (add_generation_prompt
 * false), whose last message must be the assistant's and which must start
 * with the input's text. */
#ifndef DYN_DATA_CHAT_H
#define DYN_DATA_CHAT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "dynapipe/common.h"

typedef struct dyn_chat dyn_chat;

/* The chat template of the tokenizer folder dir, or *out = NULL (DYN_OK)
 * when the folder has none. A malformed tokenizer_config.json or
 * chat_template field is DYN_ERR_PARSE naming the file; the template itself
 * is compiled at the first render. */
dyn_status dyn_chat_load(const char *dir, dyn_chat **out, dyn_error *err);
void dyn_chat_free(dyn_chat *c);

/* The template's text and the file it came from. */
const char *dyn_chat_text(const dyn_chat *c);
const char *dyn_chat_source(const dyn_chat *c);

/* Render messages (a JSON array of {"role", "content", ...}) as an input
 * text (*prompt, *prompt_len bytes) and a target text (*target, bytes), both
 * NUL-terminated and owned by c until its next render. One line on error:
 * a template error ("chat template FILE: line L:C: ..."), a conversation
 * whose last message is not the assistant's, or a rendering that does not
 * start with the prompt's. */
dyn_status dyn_chat_render(dyn_chat *c, const cJSON *messages, const char **prompt, size_t *prompt_len,
                           const char **target, size_t *target_len, dyn_error *err);

#endif
