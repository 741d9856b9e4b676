/* chat.c — a tokenizer folder's chat template rendered into an input and a
 * target text (chat.h), by the project's Jinja interpreter (util/jinja.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/chat.h"
#include "util/jinja.h" /* defines: dyn_jinja_create, dyn_jinja_render */
#include "util/json.h"  /* defines: dyn_json_parse */
#include "util/util.h"  /* defines: dyn_file_read_all */

struct dyn_chat {
    char *text;        /* the template */
    char *source;      /* the file it came from */
    cJSON *tokens;     /* {"bos_token": "...", ...}: the special tokens' texts */
    dyn_jinja *tmpl;   /* compiled at the first render */
    char *prompt, *full;
    size_t prompt_len, full_len;
};

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static dyn_status read_object(const char *path, cJSON **root, dyn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    *root = NULL;
    dyn_status st = dyn_file_read_all(path, &text, &len, err);
    if (st == DYN_OK) st = dyn_json_parse(text, len, path, root, err);
    free(text);
    if (st == DYN_OK && !cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        st = dyn_error_set(err, DYN_ERR_PARSE, "%s: not a JSON object", path);
    }
    return st;
}

/* tokenizer_config.json's chat_template: a string, or the "default" of a
 * list of {name, template}; NULL when absent. */
static dyn_status config_template(const char *path, const cJSON *root, const char **out, dyn_error *err)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    *out = NULL;
    if (ct == NULL || cJSON_IsNull(ct)) return DYN_OK;
    if (cJSON_IsString(ct)) {
        *out = ct->valuestring;
        return DYN_OK;
    }
    if (!cJSON_IsArray(ct))
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: \"chat_template\" is neither a string nor a list", path);
    for (const cJSON *e = ct->child; e; e = e->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(e, "template");
        if (!cJSON_IsString(name) || !cJSON_IsString(tpl))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: \"chat_template\" list items need string \"name\" and "
                                 "\"template\"", path);
        if (strcmp(name->valuestring, "default") == 0) *out = tpl->valuestring;
    }
    if (*out == NULL)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: \"chat_template\" is a list without a \"default\" template",
                             path);
    return DYN_OK;
}

/* The special tokens' texts from root (a string or {"content": ...}) into
 * c->tokens, where not yet there. */
static dyn_status collect_tokens(dyn_chat *c, const char *path, const cJSON *root, dyn_error *err)
{
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (v == NULL || cJSON_IsNull(v) || cJSON_GetObjectItemCaseSensitive(c->tokens, keys[k]) != NULL) continue;
        if (!cJSON_IsString(v))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: \"%s\" is neither a string nor {\"content\": string}",
                                 path, keys[k]);
        if (cJSON_AddStringToObject(c->tokens, keys[k], v->valuestring) == NULL)
            return dyn_error_set(err, DYN_ERR_NOMEM, "chat template: out of memory");
    }
    return DYN_OK;
}

/* Read the template and the special tokens of folder dir into c. */
static dyn_status load_files(dyn_chat *c, const char *dir, char *path, size_t cap, dyn_error *err)
{
    dyn_status st = DYN_OK;
    size_t len = 0;
    snprintf(path, cap, "%s/chat_template.jinja", dir);
    if (is_file(path)) {
        if ((st = dyn_file_read_all(path, &c->text, &len, err)) != DYN_OK) return st;
        if ((c->source = strdup(path)) == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory");
    }
    static const char *const files[] = {"tokenizer_config.json", "special_tokens_map.json"};
    for (int f = 0; f < 2 && st == DYN_OK; f++) {
        snprintf(path, cap, "%s/%s", dir, files[f]);
        if (!is_file(path)) continue;
        cJSON *root;
        const char *tpl = NULL;
        if ((st = read_object(path, &root, err)) != DYN_OK) return st;
        if (f == 0 && c->text == NULL && (st = config_template(path, root, &tpl, err)) == DYN_OK && tpl != NULL &&
            ((c->text = strdup(tpl)) == NULL || (c->source = strdup(path)) == NULL))
            st = dyn_error_set(err, DYN_ERR_NOMEM, "out of memory");
        if (st == DYN_OK) st = collect_tokens(c, path, root, err);
        cJSON_Delete(root);
    }
    return st;
}

dyn_status dyn_chat_load(const char *dir, dyn_chat **out, dyn_error *err)
{
    *out = NULL;
    dyn_chat *c = dyn_calloc(1, sizeof *c, "chat template", err);
    if (c == NULL) return DYN_ERR_NOMEM;
    size_t cap = strlen(dir) + 64;
    char *path = malloc(cap);
    c->tokens = cJSON_CreateObject();
    dyn_status st = path == NULL || c->tokens == NULL ? dyn_error_set(err, DYN_ERR_NOMEM, "out of memory")
                                                      : load_files(c, dir, path, cap, err);
    free(path);
    if (st != DYN_OK || c->text == NULL) {
        dyn_chat_free(c);
        return st;
    }
    *out = c;
    return DYN_OK;
}

void dyn_chat_free(dyn_chat *c)
{
    if (c == NULL) return;
    free(c->text);
    free(c->source);
    cJSON_Delete(c->tokens);
    dyn_jinja_free(c->tmpl);
    free(c->prompt);
    free(c->full);
    free(c);
}

const char *dyn_chat_text(const dyn_chat *c) { return c->text; }
const char *dyn_chat_source(const dyn_chat *c) { return c->source; }

/* The roles of messages checked: an array of objects, each with a string
 * "role", the last the assistant's. */
static dyn_status check_messages(const cJSON *messages, dyn_error *err)
{
    if (!cJSON_IsArray(messages) || messages->child == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "\"messages\" must be a non-empty list of {\"role\", "
                             "\"content\"} objects");
    const cJSON *last = NULL;
    int k = 0;
    for (const cJSON *m = messages->child; m; m = m->next, k++) {
        if (!cJSON_IsObject(m) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "role")))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "messages[%d] is not an object with a string \"role\"", k);
        last = m;
    }
    const char *role = cJSON_GetObjectItemCaseSensitive(last, "role")->valuestring;
    if (strcmp(role, "assistant") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "the last message must be the assistant's (the target), "
                             "not the '%.40s' role's", role);
    return DYN_OK;
}

/* Render with messages and add_generation_prompt into *out. */
static dyn_status render_one(dyn_chat *c, cJSON *messages, int gen, char **out, size_t *len, dyn_error *err)
{
    cJSON *vars = cJSON_Duplicate(c->tokens, 1);
    /* as transformers renders: tools and documents None when not given */
    if (vars == NULL || !cJSON_AddItemReferenceToObject(vars, "messages", messages) ||
        cJSON_AddNullToObject(vars, "tools") == NULL || cJSON_AddNullToObject(vars, "documents") == NULL ||
        cJSON_AddBoolToObject(vars, "add_generation_prompt", gen) == NULL) {
        cJSON_Delete(vars);
        return dyn_error_set(err, DYN_ERR_NOMEM, "chat template: out of memory");
    }
    free(*out);
    *out = NULL;
    dyn_error e;
    dyn_status st = dyn_jinja_render(c->tmpl, vars, out, len, &e);
    cJSON_Delete(vars);
    if (st != DYN_OK) return dyn_error_set(err, st, "chat template %s: %s", c->source, e.msg);
    return DYN_OK;
}

dyn_status dyn_chat_render(dyn_chat *c, const cJSON *messages, const char **prompt, size_t *prompt_len,
                           const char **target, size_t *target_len, dyn_error *err)
{
    dyn_status st = check_messages(messages, err);
    if (st != DYN_OK) return st;
    if (c->tmpl == NULL) {
        dyn_error e;
        c->tmpl = dyn_jinja_create(c->text, strlen(c->text), &e);
        if (c->tmpl == NULL) return dyn_error_set(err, e.code, "chat template %s: %s", c->source, e.msg);
    }
    cJSON *head = cJSON_Duplicate(messages, 1);
    if (head == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "chat template: out of memory");
    cJSON_DeleteItemFromArray(head, cJSON_GetArraySize(head) - 1);
    st = render_one(c, head, 1, &c->prompt, &c->prompt_len, err);
    cJSON_Delete(head);
    if (st == DYN_OK) st = render_one(c, (cJSON *)messages, 0, &c->full, &c->full_len, err);
    if (st != DYN_OK) return st;
    if (c->full_len < c->prompt_len || memcmp(c->full, c->prompt, c->prompt_len) != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "chat template %s: the conversation's rendering does not "
                             "start with the rendering of its prompt (every message but the last, with "
                             "add_generation_prompt), so it cannot be split into input and target", c->source);
    *prompt = c->prompt;
    *prompt_len = c->prompt_len;
    *target = c->full + c->prompt_len;
    *target_len = c->full_len - c->prompt_len;
    return DYN_OK;
}
