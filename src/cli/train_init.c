/* train_init.c — `dynapipe train --init DIR` on the command line's side
 * (train_init.h): the shape comes from config.json, so the shape flags may
 * only restate it, and the folder is checked once before mpirun starts so
 * that a bad folder never starts a job. Each rank loads its own tensors
 * (src/runtime/train.c, init_weights). */
#include "cli/train_init.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"               /* defines: cli_errorf, CLI_EXIT_* */
#include "dynapipe/model_config.h" /* defines: dyn_model_kind_name */
#include "model/hf_load.h"         /* defines: dyn_hf_* */
#include "runtime/checkpoint.h"    /* defines: rt_ckpt_resolve */

/* Was flag given on the command line (as "--flag V" or "--flag=V")? */
static int given(int argc, char **argv, const char *flag)
{
    size_t n = strlen(flag);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], flag, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '=')) return 1;
    return 0;
}

/* A checkpoint root of `train --save DIR` has no config.json of its own:
 * its `latest` step folder is the model folder. */
static const char *resolve(const char *dir)
{
    static char step[4096];
    char p[4096];
    struct stat sb;
    dyn_error e;
    if ((size_t)snprintf(p, sizeof p, "%s/config.json", dir) < sizeof p && stat(p, &sb) == 0) return dir;
    if ((size_t)snprintf(p, sizeof p, "%s/latest", dir) < sizeof p && stat(p, &sb) == 0 &&
        rt_ckpt_resolve(dir, step, sizeof step, &e) == DYN_OK)
        return step;
    return dir; /* dyn_hf_config_read says what is missing */
}

int train_init_apply(const char *cmd, const char **dirp, int argc, char **argv, plan_args *a, dyn_hf_tokens *tokens)
{
    dyn_hf_config hf;
    dyn_error e;
    const char *dir = *dirp = resolve(*dirp);
    /* The run's length (--max-seqlen or training's default): a Llama's
     * rotary tables and a sliding window are judged against it. */
    if (dyn_hf_config_read(dir, a->opt.max_seqlen, &hf, &e) != DYN_OK) {
        cli_errorf(cmd, "--init: %s", e.msg);
        return CLI_EXIT_FAIL;
    }
    const dyn_hf_arch *row = dyn_hf_arch_find(hf.arch);
    const dyn_model_config *c = &hf.model;
    if (a->model_config != NULL) {
        cli_errorf(cmd, "--model-config %s and --init %s: the shape comes from %s/config.json; give one",
                   a->model_config, dir, dir);
        return CLI_EXIT_USAGE;
    }
    if (a->have_kind && a->kind != c->kind) {
        cli_errorf(cmd, "--model %s contradicts --init %s/config.json (%s)", dyn_model_kind_name(a->kind), dir,
                   hf.arch);
        return CLI_EXIT_USAGE;
    }
    /* The shape flags in dyn_hf_arch.field's order. */
    struct {
        const char *flag;
        int32_t *given, file;
    } f[7] = {{"--layers", &a->layers, c->n_layers}, {"--dec-layers", &a->dec_layers, c->n_dec_layers},
              {"--hidden", &a->hidden, c->hidden},   {"--heads", &a->heads, c->heads},
              {"--head-dim", &a->head_dim, c->head_dim}, {"--ffn", &a->ffn, c->ffn},
              {"--vocab", &a->vocab, c->vocab}};
    for (int i = 0; i < 7; i++) {
        if (*f[i].given != 0 && *f[i].given != f[i].file) {
            cli_errorf(cmd, "%s %d contradicts --init %s/config.json (%s %d)", f[i].flag, *f[i].given, dir,
                       row->field[i] ? row->field[i] : "no such field", f[i].file);
            return CLI_EXIT_USAGE;
        }
    }
    if (hf.fixed_seqlen && given(argc, argv, "--max-seqlen") && a->opt.max_seqlen != c->max_seqlen) {
        cli_errorf(cmd, "--max-seqlen %d contradicts --init %s/config.json (n_positions %d: the position table's rows)",
                   a->opt.max_seqlen, dir, c->max_seqlen);
        return CLI_EXIT_USAGE;
    }
    a->have_kind = 1;
    a->kind = c->kind;
    for (int i = 0; i < 7; i++) *f[i].given = f[i].file;
    if (hf.fixed_seqlen) a->opt.max_seqlen = c->max_seqlen;
    a->have_init_model = 1;
    a->init_model = *c;
    *tokens = (dyn_hf_tokens){hf.bos_id, hf.eos_id, hf.pad_id};
    return 0;
}

int train_init_check(const char *cmd, const char *dir, const dyn_model_config *model)
{
    dyn_error e;
    dyn_hf_folder *f = dyn_hf_open(dir, model->max_seqlen, &e);
    dyn_status st = f ? dyn_hf_check(f, model, &e) : e.code;
    dyn_hf_close(f);
    if (st != DYN_OK) {
        cli_errorf(cmd, "--init: %s", e.msg);
        return -1;
    }
    return 0;
}
