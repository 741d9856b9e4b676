"""dyntest.py — what the Python tests share: where the repository, the
built command and an installed prefix are, running `dynapipe plan --json`
on lengths, and the rule that, when DYNAPIPE_TEST_REQUIRE_ALL=1 (ctest
sets it), a test may not skip because something it needs is missing."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TESTS = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(TESTS)
REPO = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)

import dynapipe  # noqa: E402  (the checkout's package, found through the path above)


def cli_path():
    return os.environ.get("DYNAPIPE_CLI") or os.path.join(REPO, "build", "dynapipe")


def require(condition, why):
    """Skip unless condition; a failure instead when every test must run."""
    if condition:
        return
    if os.environ.get("DYNAPIPE_TEST_REQUIRE_ALL") == "1":
        raise AssertionError(f"required but missing: {why}")
    raise unittest.SkipTest(why)


def write_tsv(path, inputs, targets):
    with open(path, "w") as f:
        f.write("input\ttarget\n")
        for i, t in zip(inputs, targets):
            f.write(f"{i}\t{t}\n")


def cli_plan(args, inputs=None, targets=None, lengths_path=None):
    """Run `dynapipe plan ARGS --lengths FILE --json OUT` and return the
    parsed JSON. With inputs/targets, they are written to a TSV first, and
    the global batch budget is their total (one global batch) unless ARGS
    give one."""
    with tempfile.TemporaryDirectory() as tmp:
        if lengths_path is None:
            lengths_path = os.path.join(tmp, "lengths.tsv")
            write_tsv(lengths_path, inputs, targets)
            if "--global-batch-tokens" not in args:
                args = list(args) + ["--global-batch-tokens", str(sum(inputs) + sum(targets))]
        out = os.path.join(tmp, "plan.json")
        args = [str(a) for a in args]
        if "--machine" not in args and "--cost-model" not in args:
            args += ["--machine", "cpu"]  # the Planner's default (the command's is auto: measured here)
        cmd = [cli_path(), "plan", "--quiet", "--lengths", lengths_path, "--json", out] + args
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise CliError(r.returncode, r.stderr.strip())
        with open(out) as f:
            return json.load(f)


class CliError(Exception):
    def __init__(self, code, stderr):
        super().__init__(f"exit {code}: {stderr}")
        self.code, self.stderr = code, stderr


def assert_batch_equal(test, py_plan, cli_batch):
    """py_plan (a BatchPlan) is the CLI's JSON batch: every key, exactly,
    except the wall-clock plan_time_ms."""
    got = py_plan.to_dict()
    want = dict(cli_batch)
    for d in (got, want):
        d.pop("plan_time_ms", None)
    want.pop("index", None)
    test.assertEqual(set(got), set(want))
    test.assertEqual(len(got["microbatches"]), len(want["microbatches"]))
    for m, (g, w) in enumerate(zip(got["microbatches"], want["microbatches"])):
        test.assertEqual(g, w, f"micro-batch {m}")
    got.pop("microbatches")
    want.pop("microbatches")
    test.assertEqual(got, want)
