/* ckpt_state.h — trainer_state.json of a checkpoint (checkpoint.h): the
 * schema of rt_ckpt_meta as one field table that drives both the writer
 * and the reader, so the two cannot drift apart. */
#ifndef DYN_RUNTIME_CKPT_STATE_H
#define DYN_RUNTIME_CKPT_STATE_H

#include <cjson/cJSON.h>

#include "runtime/checkpoint.h" /* defines: rt_ckpt_meta */

/* The checkpoint format this dynapipe writes and reads. */
#define RT_CKPT_FORMAT 1

/* *m as the trainer_state.json object (cJSON_Delete it); NULL when out of
 * memory. */
cJSON *rt_ckpt_state_to_json(const rt_ckpt_meta *m);

/* The trainer_state.json object r (read from path, named in messages)
 * into *m (zeroed first). Every field is checked: present, of its type and
 * within its range (numbers before any conversion); the first that is not
 * is DYN_ERR_CORRUPT naming the file and the field. "lr_schedule" may be
 * absent (checkpoints written before it was recorded; then
 * m->lr.total_steps stays 0 = unknown), but when present it is complete;
 * so may "data_options" (then m->data.recorded = 0 and m->data holds the
 * byte vocabulary's settings). */
dyn_status rt_ckpt_state_from_json(const cJSON *r, const char *path, rt_ckpt_meta *m, dyn_error *err);

#endif
