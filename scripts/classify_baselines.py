#!/usr/bin/env python3
"""classify_baselines.py — how far counting letters, or letter pairs, gets on
the built-in classify task: a yardstick for what a trained model has learned.

A linear softmax classifier (full-batch Adam on the cross-entropy, no
regularisation) is fitted on train samples of `builtin:SEED:classify` and
scored on held-out samples, once on the counts of the 26 letters of the
input's words (a bag of letters: the most a model gets without relating
neighbouring positions) and once on those counts plus the counts of the 676
adjacent letter pairs (a bag of bigrams). The samples come from
`dynapipe data show`, so they are exactly what `dynapipe train` sees.

Usage: classify_baselines.py DYNAPIPE_BINARY [MAX_SEQLEN 64] [TRAIN 30000]
       [HELDOUT 500] [SEED 1]. Needs numpy. Prints one line per feature set:
held-out accuracy of the predicted category.
"""
import subprocess
import sys

import numpy as np

CATEGORIES = ["animal", "colour", "food", "tool"]


def samples(cli, seed, split, n, max_seqlen):
    """(input words, category index) of the first n samples of a split."""
    out = subprocess.run([cli, "data", "show", "builtin:%d:classify" % seed, "--split", split,
                          "--samples", str(n), "--count", str(n), "--max-seqlen", str(max_seqlen)],
                         check=True, capture_output=True, text=True).stdout.split("\n")
    res = []
    for k in range(0, len(out) - 2, 3):
        inp = out[k + 1].split("input:  ", 1)[1]
        tgt = out[k + 2].split("target: ", 1)[1]
        assert inp.startswith("classify ") and inp.endswith("<sep>") and tgt.endswith("<eos>")
        res.append((inp[len("classify "):-len("<sep>")], CATEGORIES.index(tgt[:-len("<eos>")])))
    assert len(res) == n
    return res


def features(data, pairs):
    """Counts of letters (26) and, with pairs, of adjacent letter pairs (676)."""
    x = np.zeros((len(data), 26 + (676 if pairs else 0)))
    for r, (text, _) in enumerate(data):
        for c in text:
            if "a" <= c <= "z":
                x[r, ord(c) - 97] += 1
        if pairs:
            for a, b in zip(text, text[1:]):
                if "a" <= a <= "z" and "a" <= b <= "z":
                    x[r, 26 + (ord(a) - 97) * 26 + ord(b) - 97] += 1
    return x, np.array([y for _, y in data])


def fit(x, y, steps=300, lr=0.05):
    """Softmax regression weights (features + 1 bias, 4) by full-batch Adam."""
    x = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros((x.shape[1], 4))
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    onehot = np.eye(4)[y]
    for t in range(1, steps + 1):
        z = x @ w
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        g = x.T @ (p - onehot) / len(x)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w -= lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return w


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cli = sys.argv[1]
    max_seqlen, n_train, n_held, seed = [int(a) for a in sys.argv[2:6]] + [64, 30000, 500, 1][len(sys.argv[2:6]):]
    train = samples(cli, seed, "train", n_train, max_seqlen)
    held = samples(cli, seed, "heldout", n_held, max_seqlen)
    for pairs in (False, True):
        x, y = features(train, pairs)
        xh, yh = features(held, pairs)
        w = fit(x, y)
        acc = np.mean((np.hstack([xh, np.ones((len(xh), 1))]) @ w).argmax(1) == yh)
        print("max_seqlen %d, %s: held-out accuracy %.1f%% (%d train, %d held-out samples)"
              % (max_seqlen, "letters + letter pairs" if pairs else "letters", 100 * acc, n_train, n_held))


if __name__ == "__main__":
    main()
