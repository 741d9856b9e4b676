"""The guides' examples run and print what the guides show: the command
line guide's shell blocks (docs/guide-cli.md), the Python guide's blocks in
one namespace (docs/guide-python.md), and docs/examples/pytorch_loader.py
with torch (or, without it, a stand-in for torch.tensor and DataLoader).
The C guide's example is built and run by tests/install/run.sh."""
import contextlib
import importlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import guidecheck
from dyntest import REPO, TESTS, cli_path, dynapipe

DOCS = os.path.join(REPO, "docs")


class Scratch:
    """A scratch folder that sees the repository's docs/ (examples read
    docs/examples/..., and write their outputs here)."""

    def __enter__(self):
        self.dir = tempfile.mkdtemp()
        os.symlink(DOCS, os.path.join(self.dir, "docs"))
        return self.dir

    def __exit__(self, *exc):
        shutil.rmtree(self.dir)


def pairs(path):
    """[(language, code, expected output or None)] of a guide."""
    out = []
    for kind, lang, text in guidecheck.blocks(path):
        if kind == "run":
            out.append([lang, text, None])
        elif not out or out[-1][2] is not None:
            raise AssertionError(f"{path}: an output block without an example before it")
        else:
            out[-1][2] = text
    return out


class Guides(unittest.TestCase):
    def check_output(self, guide, k, expected, actual):
        if expected is None:
            return
        bad = guidecheck.mismatch(expected, actual)
        self.assertIsNone(bad, f"{guide} example {k}: no output line matches {bad!r}; output:\n{actual}")

    def test_matcher(self):
        self.assertIsNone(guidecheck.mismatch("a ... c\nx\n", "a b c\nnoise\nx\n"))
        self.assertEqual(guidecheck.mismatch("x\na b c\n", "a b c\nx\n"), "a b c")  # order matters
        self.assertEqual(guidecheck.mismatch("a.c\n", "abc\n"), "a.c")  # only ... is a wildcard

    def test_cli_guide(self):
        guide = os.path.join(DOCS, "guide-cli.md")
        examples = pairs(guide)
        self.assertGreaterEqual(len(examples), 4)
        env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(cli_path())) + os.pathsep + os.environ["PATH"])
        with Scratch() as tmp:
            for k, (lang, code, expected) in enumerate(examples):
                self.assertEqual(lang, "sh")
                # coreutils timeout ends the block's whole process group (a
                # `dynapipe train` in it starts mpirun, which would outlive a
                # killed bash and hold the pipe open); Python's is a backstop
                r = subprocess.run(["timeout", "300", "bash", "-c", "set -eo pipefail\n" + code], cwd=tmp, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=330)
                self.assertEqual(r.returncode, 0, f"{guide} example {k} failed:\n{code}\n{r.stdout}")
                self.check_output(guide, k, expected, r.stdout)

    def test_python_guide(self):
        guide = os.path.join(DOCS, "guide-python.md")
        examples = pairs(guide)
        self.assertGreaterEqual(len(examples), 4)
        namespace = {}
        with Scratch() as tmp:
            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                for k, (lang, code, expected) in enumerate(examples):
                    self.assertEqual(lang, "python")
                    out = io.StringIO()
                    with contextlib.redirect_stdout(out):
                        exec(compile(code, f"{guide} example {k}", "exec"), namespace)
                    self.check_output(guide, k, expected, out.getvalue())
            finally:
                os.chdir(cwd)

    def test_pytorch_example(self):
        try:
            import torch  # noqa: F401  (the real one, if installed)
            stand_in = False
        except ImportError:
            stand_in = True
            sys.path.insert(0, os.path.join(TESTS, "fake_torch"))
        sys.path.insert(0, os.path.join(DOCS, "examples"))
        try:
            example = importlib.import_module("pytorch_loader")
            lengths = os.path.join(DOCS, "examples", "lengths.tsv")
            inputs, targets = example.read_lengths(lengths)
            sampler = dynapipe.DynaPipeBatchSampler(inputs, targets, 8192, model="gpt2-124m", max_seqlen=1024,
                                                    stages=4, machine="a100", schedule="auto")
            want = list(sampler)  # the global batches, micro-batches in execution order
            data = example.TokenDataset(inputs, targets)
            for layout in ("packed", "padded"):
                got = list(example.make_loader(lengths, layout))
                self.assertEqual(len(got), len(want))
                for batch, idx in zip(got, want):
                    self.assertEqual(len(batch), len(idx))
                    for mb, samples in zip(batch, idx):
                        ids = mb["input_ids"].tolist()
                        if layout == "packed":
                            self.assertEqual(ids, [[t for s in samples for t in data[s][0] + data[s][1]]])
                            self.assertEqual(mb["position_ids"].tolist(),
                                             [[p for s in samples for p in range(inputs[s] + targets[s])]])
                        else:
                            self.assertEqual(len(ids), len(samples))
                            self.assertEqual(len(ids[0]) % example.ROUND_TO, 0)
                        self.assertEqual(int((mb["labels"] != -100).sum()), sum(targets[s] for s in samples))
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    example.main(layout, lengths)
                self.assertEqual(out.getvalue().count("global batch"), len(want))
            if stand_in:
                self.assertTrue(example.torch.__file__.startswith(os.path.join(TESTS, "fake_torch")))
        finally:
            sys.path.remove(os.path.join(DOCS, "examples"))
            if stand_in:
                sys.path.remove(os.path.join(TESTS, "fake_torch"))
                for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
                    del sys.modules[name]
            sys.modules.pop("pytorch_loader", None)


if __name__ == "__main__":
    unittest.main()
