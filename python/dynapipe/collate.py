"""collate.py — turning a micro-batch of token samples into model inputs,
as plain Python lists (wrap them in torch.tensor in a collate function).

Two layouts for a decoder-only (causal LM) model whose sample is an input
(prompt) and a target (answer); the loss counts target tokens only, as
dynapipe's models do, and labels use -100 for "no loss" (PyTorch's
cross-entropy ignore_index and Hugging Face's convention). The model shifts
labels itself (label at position p is predicted from positions < p).

- pad_rows: one row per sample, padded to a length (the micro-batch's
  planned padded length), with an attention mask.
- flatten_rows: every sample of the micro-batch concatenated into one row
  without padding; position_ids restart at 0 for each sample, so attention
  kernels that take position_ids (Hugging Face models with
  flash-attention, like its DataCollatorWithFlattening) keep samples apart;
  cu_seqlens gives the same boundaries for variable-length kernels. The
  first token of each sample gets label -100 so that no sample learns to
  predict its first token from the previous sample.
"""

__all__ = ["pad_rows", "flatten_rows", "IGNORE_INDEX"]

IGNORE_INDEX = -100


def _check_sample(k, sample):
    try:
        inp, tgt = sample
    except (TypeError, ValueError):
        raise TypeError(f"sample {k} must be a pair (input_ids, target_ids)") from None
    inp, tgt = list(inp), list(tgt)
    if not inp and not tgt:
        raise ValueError(f"sample {k} has no tokens")
    return inp, tgt


def flatten_rows(samples):
    """samples: [(input_ids, target_ids), ...]. Returns a dict of lists, each
    of one row of sum(len(input) + len(target)) entries: input_ids,
    labels, position_ids; and cu_seqlens [0, l0, l0+l1, ...]."""
    ids, labels, pos, cu = [], [], [], [0]
    for k, sample in enumerate(samples):
        inp, tgt = _check_sample(k, sample)
        seq = inp + tgt
        lab = [IGNORE_INDEX] * len(inp) + tgt
        lab[0] = IGNORE_INDEX
        ids += seq
        labels += lab
        pos += range(len(seq))
        cu.append(cu[-1] + len(seq))
    if len(cu) == 1:
        raise ValueError("a micro-batch needs at least one sample")
    return {"input_ids": [ids], "labels": [labels], "position_ids": [pos], "cu_seqlens": cu}


def pad_rows(samples, length, pad_id):
    """samples: [(input_ids, target_ids), ...]; length: tokens per row (at
    least the longest sample). Returns a dict of lists of rows: input_ids
    (padded with pad_id at the end), labels (-100 on input and pad),
    attention_mask (1 on tokens, 0 on pad) and position_ids."""
    out = {"input_ids": [], "labels": [], "attention_mask": [], "position_ids": []}
    for k, sample in enumerate(samples):
        inp, tgt = _check_sample(k, sample)
        n = len(inp) + len(tgt)
        if n > length:
            raise ValueError(f"sample {k} has {n} tokens, more than the row length {length}")
        pad = length - n
        out["input_ids"].append(inp + tgt + [pad_id] * pad)
        out["labels"].append([IGNORE_INDEX] * len(inp) + tgt + [IGNORE_INDEX] * pad)
        out["attention_mask"].append([1] * n + [0] * pad)
        out["position_ids"].append(list(range(n)) + [0] * pad)
    if not out["input_ids"]:
        raise ValueError("a micro-batch needs at least one sample")
    return out
