"""sampler.py — a batch sampler for PyTorch-style data loaders (no torch
needed): cut a dataset into global batches by a token budget with the C
library's sampler (consecutive samples while input + target tokens stay
within the budget) and plan each into micro-batches of dataset indices.

    sampler = DynaPipeBatchSampler(inputs, targets, global_batch_tokens=65536,
                                   model="gpt2-124m", max_seqlen=2048, stages=4)
    loader = torch.utils.data.DataLoader(MicroBatchDataset(ds), batch_sampler=sampler,
                                         collate_fn=my_collate)
    for micro_batches in loader: ...   # one global batch: a list, one entry per micro-batch

Each item the sampler yields is one global batch: a list of micro-batches,
each a list of dataset indices, in the order the planner put them
(replica by replica; per replica the order it executes them). A
DataLoader looks up each element of a yielded batch in its dataset;
MicroBatchDataset makes one element a whole micro-batch (a list of
samples), so collate_fn receives the global batch as a list of micro-batches
of samples.
"""
import ctypes
import random

from . import _args, _lib
from .planner import SCHEDULES, Planner, _choice, _int, _lengths

__all__ = ["DynaPipeBatchSampler", "MicroBatchDataset"]


class DynaPipeBatchSampler:
    """Global batches of micro-batches of dataset indices.

    input_lengths, target_lengths: tokens of every sample of the dataset.
    global_batch_tokens: budget of input + target tokens per global batch.
    planner: a Planner to use (borrowed), or None to make one from
        planner_options (Planner's keywords: model, max_seqlen, stages, ...).
    shuffle, seed: visit the dataset in a permutation drawn from
        random.Random(seed + epoch) (set_epoch), else in order.
    replica: yield only the micro-batches of that data-parallel replica (one
        process per replica); None: all of them.
    schedule: None to yield micro-batches in the planner's order; a
        schedule name (dynapipe.SCHEDULES, "auto" included) to build each
        global batch's execution plans and yield the micro-batches in the
        order those plans run them (replica by replica); plans() then
        carries the plans (BatchPlan.replica_plans).
    """

    def __init__(self, input_lengths, target_lengths, global_batch_tokens, planner=None, *, shuffle=False,
                 seed=0, replica=None, schedule=None, **planner_options):
        self._inputs = _lengths("input_lengths", input_lengths)
        self._targets = _lengths("target_lengths", target_lengths)
        if len(self._inputs) != len(self._targets):
            raise ValueError(f"input_lengths has {len(self._inputs)} samples, "
                             f"target_lengths {len(self._targets)}")
        if not self._inputs:
            raise ValueError("the dataset has no samples")
        self.global_batch_tokens = _int("global_batch_tokens", global_batch_tokens, 1, 1 << 40)
        self.seed = _int("seed", seed, 0, 2**63 - 1)
        self.shuffle = _args.check_bool("shuffle", shuffle)
        if planner is not None and not isinstance(planner, Planner):
            raise TypeError(f"planner must be a dynapipe.Planner, not {type(planner).__name__}")
        if planner is not None and planner_options:
            raise ValueError("give either planner or planner options, not both")
        if schedule is not None:
            _choice("schedule", schedule, SCHEDULES)
        self.schedule = schedule
        self._own = planner is None
        self.planner = Planner(**planner_options) if planner is None else planner
        if replica is not None:
            replica = _int("replica", replica, 0, self.planner.options["dp"] - 1)
        self.replica = replica
        self.epoch = 0
        # Lengths over max_seqlen would fail in the middle of an epoch: say so now.
        probe = self.planner._samples(self._inputs, self._targets, None)
        del probe

    def set_epoch(self, epoch):
        """Use the permutation of this epoch (shuffle=True), as
        torch.utils.data.DistributedSampler.set_epoch does."""
        self.epoch = _int("epoch", epoch, 0, 2**62)

    def order(self):
        """Dataset indices in the order this epoch visits them."""
        order = list(range(len(self._inputs)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def _cut(self):
        """Yield (ctypes sample array, count) per global batch, ids = dataset
        indices, through the C sampler."""
        lib = _lib.load()
        order = self.order()
        arr = (_lib.DynSample * len(order))()
        for k, i in enumerate(order):
            arr[k].id, arr[k].task, arr[k].input_len, arr[k].target_len = i, -1, self._inputs[i], self._targets[i]
        ds = _lib.DynDataset(len(order), ctypes.cast(arr, ctypes.POINTER(_lib.DynSample)))
        err = _lib.DynError()
        sampler = lib.dyn_sampler_create(ctypes.byref(ds), self.global_batch_tokens, ctypes.byref(err))
        if not sampler:
            _lib.raise_error(err)
        try:
            batch = ctypes.POINTER(_lib.DynSample)()
            n = _lib.i32()
            while True:
                _lib.check(lib.dyn_sampler_next(sampler, ctypes.byref(batch), ctypes.byref(n),
                                                ctypes.byref(err)), err)
                if n.value == 0:
                    return
                yield batch, n.value
        finally:
            lib.dyn_sampler_free(sampler)
            del ds, arr

    def global_batches(self):
        """The dataset indices of each global batch, unplanned."""
        for batch, n in self._cut():
            yield [batch[k].id for k in range(n)]

    def plans(self):
        """A BatchPlan per global batch (sample ids = dataset indices)."""
        self.planner._check_open()
        for batch, n in self._cut():
            yield self.planner._plan_c(batch, n, self.schedule)

    def __iter__(self):
        for plan in self.plans():
            mbs = plan.microbatches if self.schedule is None else plan.execution_order()
            yield [list(mb.samples) for mb in mbs if self.replica is None or mb.replica == self.replica]

    def __len__(self):
        """Global batches of the current epoch (the cut depends on the order,
        so a shuffled epoch may have one more or one fewer)."""
        return sum(1 for _ in self._cut())

    def close(self):
        if self._own:
            self.planner.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class MicroBatchDataset:
    """A map-style dataset whose element for a list of indices is the list
    of the wrapped dataset's samples: with DynaPipeBatchSampler as
    batch_sampler, a DataLoader then hands collate_fn one global batch as a
    list of micro-batches, each a list of samples."""

    def __init__(self, dataset):
        if not hasattr(dataset, "__getitem__"):
            raise TypeError(f"dataset must be indexable (a map-style dataset), not {type(dataset).__name__}")
        self.dataset = dataset

    def __getitem__(self, indices):
        """indices: one micro-batch, a list of dataset indices (as the
        sampler yields them)."""
        hi = len(self.dataset) - 1 if hasattr(self.dataset, "__len__") else 2**63 - 1
        idx = _args.check_ints("indices", indices, 0, hi)
        return [self.dataset[i] for i in idx]

    def __len__(self):
        return len(self.dataset)
