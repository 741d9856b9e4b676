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

from collections.abc import Mapping

from . import _args

__all__ = ["pad_rows", "flatten_rows", "IGNORE_INDEX"]

IGNORE_INDEX = -100


def _check_samples(samples):
    """samples as a list of (input_ids, target_ids) pairs of token-id lists;
    TypeError/ValueError naming the sample and the field."""
    out = []
    for k, sample in enumerate(_args.check_sequence("samples", samples, "(input_ids, target_ids) pairs")):
        if isinstance(sample, (str, bytes, Mapping)) or not hasattr(sample, "__len__") or len(sample) != 2:
            raise TypeError(f"samples[{k}] must be a pair (input_ids, target_ids), not {type(sample).__name__}"
                            + (f" of {len(sample)}" if hasattr(sample, "__len__") else ""))
        # bytes are byte tokens (a sequence of ints 0..255); str is refused
        inp, tgt = (list(x) if isinstance(x, (bytes, bytearray)) else x for x in sample)
        inp = _args.check_ints(f"samples[{k}] input_ids", inp, 0, _args.INT32_MAX)
        tgt = _args.check_ints(f"samples[{k}] target_ids", tgt, 0, _args.INT32_MAX)
        if not inp and not tgt:
            raise ValueError(f"samples[{k}] has no tokens")
        out.append((inp, tgt))
    if not out:
        raise ValueError("samples: a micro-batch needs at least one sample")
    return out


def flatten_rows(samples):
    """samples: [(input_ids, target_ids), ...]. Returns a dict of lists, each
    of one row of sum(len(input) + len(target)) entries: input_ids,
    labels, position_ids; and cu_seqlens [0, l0, l0+l1, ...]."""
    ids, labels, pos, cu = [], [], [], [0]
    for inp, tgt in _check_samples(samples):
        seq = inp + tgt
        lab = [IGNORE_INDEX] * len(inp) + tgt
        lab[0] = IGNORE_INDEX
        ids += seq
        labels += lab
        pos += range(len(seq))
        cu.append(cu[-1] + len(seq))
    return {"input_ids": [ids], "labels": [labels], "position_ids": [pos], "cu_seqlens": cu}


def pad_rows(samples, length, pad_id):
    """samples: [(input_ids, target_ids), ...] (token ids, ints >= 0);
    length: tokens per row (at least the longest sample); pad_id: the token
    id (an int >= 0) that fills a row. Returns a dict of lists of rows: input_ids
    (padded with pad_id at the end), labels (-100 on input and pad),
    attention_mask (1 on tokens, 0 on pad) and position_ids."""
    samples = _check_samples(samples)
    length = _args.check_int("length", length, 1, _args.INT32_MAX)
    pad_id = _args.check_int("pad_id", pad_id, 0, _args.INT32_MAX)
    out = {"input_ids": [], "labels": [], "attention_mask": [], "position_ids": []}
    for k, (inp, tgt) in enumerate(samples):
        n = len(inp) + len(tgt)
        if n > length:
            raise ValueError(f"samples[{k}] has {n} tokens, more than the row length {length}")
        pad = length - n
        out["input_ids"].append(inp + tgt + [pad_id] * pad)
        out["labels"].append([IGNORE_INDEX] * len(inp) + tgt + [IGNORE_INDEX] * pad)
        out["attention_mask"].append([1] * n + [0] * pad)
        out["position_ids"].append(list(range(n)) + [0] * pad)
    return out
