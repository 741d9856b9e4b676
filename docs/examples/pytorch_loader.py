"""pytorch_loader.py — dynapipe's micro-batches through a PyTorch DataLoader.

A dataset of token samples (input, target), cut into global batches of at
most 8,192 tokens and each planned into micro-batches by dynapipe; the
DataLoader hands the training loop one global batch at a time as a list of
collated micro-batches, in the order the pipeline schedule runs them. Two
collate functions:

  collate_padded  rows padded to the micro-batch's padded length (what
                  dynapipe planned and costed), with an attention mask;
  collate_packed  padding-free: each micro-batch's samples concatenated into
                  one row, position_ids restarting at 0 per sample, like
                  Hugging Face's DataCollatorWithFlattening (models with
                  flash-attention keep the samples apart by position_ids).

Run from the repository root: python3 docs/examples/pytorch_loader.py
[padded|packed]. It needs torch and the dynapipe package (pip install
./python, or PYTHONPATH=python). A real loop would, per global batch, run
forward + backward on each micro-batch with the loss divided by the global
batch's target tokens (so every micro-batching gives the same gradient),
then step the optimizer once.
"""
import sys

import torch
from torch.utils.data import DataLoader

import dynapipe

PAD_ID = 0
ROUND_TO = 8  # the planner's padding granularity (Planner round_to)


def read_lengths(path):
    inputs, targets = [], []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) == 2 and fields[0].isdigit():
                inputs.append(int(fields[0]))
                targets.append(int(fields[1]))
    return inputs, targets


class TokenDataset:
    """Sample i: (input token ids, target token ids) of the given lengths
    (made-up tokens; a real dataset would tokenize text here)."""

    def __init__(self, inputs, targets):
        self.inputs, self.targets = inputs, targets

    def __len__(self):
        return len(self.inputs)

    def __getitem__(self, i):
        base = 1 + i % 1000
        return ([base + k for k in range(self.inputs[i])], [base + 7 * k for k in range(self.targets[i])])


def collate_padded(micro_batches):
    """One global batch (a list of micro-batches of samples) -> a list of
    dicts of (rows, length) tensors, length the longest sample rounded up to
    ROUND_TO, as the planner padded it."""
    out = []
    for samples in micro_batches:
        longest = max(len(i) + len(t) for i, t in samples)
        length = -(-longest // ROUND_TO) * ROUND_TO
        rows = dynapipe.pad_rows(samples, length, PAD_ID)
        out.append({k: torch.tensor(v) for k, v in rows.items()})
    return out


def collate_packed(micro_batches):
    """One global batch -> a list of dicts of (1, tokens) tensors: the
    micro-batch's samples in one row, no padding."""
    out = []
    for samples in micro_batches:
        row = dynapipe.flatten_rows(samples)
        mb = {k: torch.tensor(row[k]) for k in ("input_ids", "labels", "position_ids")}
        mb["cu_seqlens"] = torch.tensor(row["cu_seqlens"], dtype=torch.int32)
        out.append(mb)
    return out


def make_loader(lengths_path, layout="packed"):
    inputs, targets = read_lengths(lengths_path)
    sampler = dynapipe.DynaPipeBatchSampler(inputs, targets, 8192, model="gpt2-124m", max_seqlen=1024,
                                            stages=4, machine="a100", round_to=ROUND_TO, schedule="auto")
    collate = collate_packed if layout == "packed" else collate_padded
    dataset = dynapipe.MicroBatchDataset(TokenDataset(inputs, targets))
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)


def main(layout="packed", lengths_path="docs/examples/lengths.tsv"):
    for step, micro_batches in enumerate(make_loader(lengths_path, layout)):
        shapes = [tuple(mb["input_ids"].shape) for mb in micro_batches]
        targets = sum(int((mb["labels"] != -100).sum()) for mb in micro_batches)
        print(f"global batch {step}: {len(micro_batches)} micro-batches {shapes[:4]}..., "
              f"{targets} target tokens")
        # for mb in micro_batches:
        #     loss = model(**mb).loss_sum / target_tokens_of_the_global_batch
        #     loss.backward()
        # optimizer.step(); optimizer.zero_grad()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "packed")
