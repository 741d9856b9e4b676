/* jinja.h — a small interpreter for the Jinja template language, the subset
 * that Hugging Face chat templates use, with output equal to Python jinja2's
 * (3.1) byte for byte under the environment transformers builds for them:
 * trim_blocks and lstrip_blocks on, keep_trailing_newline off, loop controls
 * (break, continue), a tojson filter that writes json.dumps(x,
 * ensure_ascii=False), and the global raise_exception(msg). It knows nothing
 * of chats: variables come in as one JSON object.
 *
 * Supported: {{ }}, {% %}, {# #} with whitespace control (- and +); if /
 * elif / else, for (loop.index, index0, revindex, revindex0, first, last,
 * length, previtem, nextitem; else; a trailing `if` filter; unpacking
 * `for k, v in ...`), set (names, namespace attributes, block set), break,
 * continue, generation (rendered as its body); literals, subscripts,
 * slices, attributes, calls, arithmetic, comparisons, and / or / not, in,
 * is-tests, ternaries, the filters, tests and string/dict methods listed in
 * jinja.c. Anything else (macros, include, extends, call blocks, unknown
 * filters or methods, strftime_now) is refused with one line naming the
 * construct and its line:column, never rendered differently from jinja2.
 *
 * Known departures, documented rather than hidden: integers are 64-bit (an
 * overflow is an error); upper/lower/title/capitalize change ASCII letters
 * only; a JSON number without a fraction is an integer (1.0 in the JSON
 * prints "1", jinja2 would print "1.0").
 *
 * Bounded: templates nest at most DYN_JINJA_MAX_DEPTH deep, a render writes
 * at most DYN_JINJA_MAX_OUTPUT bytes, evaluates at most DYN_JINJA_MAX_STEPS
 * nodes and allocates at most DYN_JINJA_MAX_MEMORY bytes; past any of them it
 * stops with an error, so a hostile template cannot crash or hang a run.
 *
 * Errors are one line, "line L:C: what" (L, C from 1, in the template).
 * Threads: a compiled template is read-only while rendering; renders of one
 * template may run in several threads at once.
 */
#ifndef DYN_UTIL_JINJA_H
#define DYN_UTIL_JINJA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "dynapipe/common.h"

#define DYN_JINJA_MAX_DEPTH 128
#define DYN_JINJA_MAX_OUTPUT ((size_t)64 << 20)  /* bytes */
#define DYN_JINJA_MAX_MEMORY ((size_t)512 << 20) /* bytes */
#define DYN_JINJA_MAX_STEPS 50000000LL           /* nodes evaluated per render */

typedef struct dyn_jinja dyn_jinja;

/* Compile the template src[0..len) (UTF-8; need not be NUL-terminated).
 * NULL with err set (DYN_ERR_PARSE "line L:C: what", DYN_ERR_NOMEM). */
dyn_jinja *dyn_jinja_create(const char *src, size_t len, dyn_error *err);

void dyn_jinja_free(dyn_jinja *t);

/* Render t with the variables of vars (a JSON object, or NULL for none) into
 * *out (malloc'ed, NUL-terminated, *out_len bytes without the NUL; the
 * caller frees it). On failure *out is NULL and err says why:
 * DYN_ERR_INVALID_ARG for an error of the template at run time ("line L:C:
 * ..."; raise_exception(msg) gives "line L:C: raise_exception: msg"),
 * DYN_ERR_NOMEM. */
dyn_status dyn_jinja_render(const dyn_jinja *t, const cJSON *vars, char **out, size_t *out_len, dyn_error *err);

#endif
