/* hostfile.h — an Open MPI hostfile read and checked by the launcher before
 * mpirun sees it (launch.c), so that a bad file is one line naming the file
 * and line rather than Open MPI's help pages, and the slot count is known
 * before any rank starts.
 *
 * The lines accepted (Open MPI's format, docs/multi-host.md):
 *   # a comment; blank lines
 *   HOST                     (slots: the host's cores, counted by mpirun)
 *   HOST slots=N [max_slots=M]
 * HOST is letters, digits and . - _ : @ [ ] (a name, user@name or an
 * address); N, M positive integers (at most DYN_RT_HOSTFILE_MAX_SLOTS), M
 * not below N. Also accepted: "slot", "count" and "cpu" for slots, and
 * "max-slots" / "maxslots" for max_slots, as Open MPI does. Anything else
 * (other keys, bytes that are not text) is refused. The file must be a
 * regular file (a FIFO would block). */
#ifndef DYN_RUNTIME_HOSTFILE_H
#define DYN_RUNTIME_HOSTFILE_H

#include <stdint.h>

#include "dynapipe/common.h" /* defines: dyn_status, dyn_error */

#define DYN_RT_HOSTFILE_MAX_SLOTS 1000000

typedef struct rt_hostfile_info {
    int32_t hosts;  /* host lines, >= 1 */
    int64_t slots;  /* sum of the slots= counts; -1 when some host gives none */
} rt_hostfile_info;

/* Read and check path: DYN_OK with *info, or an error whose message is
 * "PATH:LINE: what is wrong" (or "PATH: ..." for the whole file: unreadable,
 * not a regular file, no hosts). */
dyn_status rt_hostfile_read(const char *path, rt_hostfile_info *info, dyn_error *err);

#endif
