"""dynapipe — Python binding of the dynapipe planner (ctypes, standard
library only): cut global batches of variable-length samples into
micro-batches that minimise the predicted pipeline iteration time, from a
PyTorch data loader or anywhere else.

    import dynapipe
    with dynapipe.Planner(model="gpt2-124m", max_seqlen=2048, stages=4, machine="a100") as p:
        plan = p.plan(input_lengths, target_lengths)
        for mb in plan.microbatches:
            print(mb.samples, mb.rows, mb.input_len, mb.time_ms)

See docs/guide-python.md of the repository. The shared library is found as
dynapipe._lib.find_library says (DYNAPIPE_LIB, the build tree of a source
checkout, an installed prefix).
"""
from ._lib import (CorruptError, Error, FileError, InfeasibleError, InvalidArgumentError, ParseError,
                   VERSION as __version__, find_library)
from .collate import IGNORE_INDEX, flatten_rows, pad_rows
from .planner import (METHODS, MODEL_PRESETS, RECOMPUTE, SCHEDULES, BatchPlan, Instruction, MicroBatch, Planner,
                      ReplicaPlan, plan_batch)
from .sampler import DynaPipeBatchSampler, MicroBatchDataset

__all__ = ["Planner", "BatchPlan", "MicroBatch", "ReplicaPlan", "Instruction", "plan_batch", "SCHEDULES", "DynaPipeBatchSampler", "MicroBatchDataset",
           "flatten_rows", "pad_rows", "IGNORE_INDEX", "METHODS", "RECOMPUTE", "MODEL_PRESETS", "Error",
           "InvalidArgumentError", "FileError", "ParseError", "InfeasibleError", "CorruptError",
           "find_library", "__version__"]
