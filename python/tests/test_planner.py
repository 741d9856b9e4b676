"""Planner: results identical to `dynapipe plan --json` on the same inputs
and options, for each method, both model kinds, dp, memory limits,
recompute, rounding, model and machine given as dicts or files, and Llama; C errors
arrive as exceptions with the C message; bad arguments raise TypeError /
ValueError before C."""
import ctypes
import json
import os
import random
import tempfile
import unittest

from dyntest import REPO, CliError, assert_batch_equal, cli_plan, dynapipe


def lengths(seed, n, max_in, max_tgt):
    r = random.Random(seed)
    return [r.randint(1, max_in) for _ in range(n)], [r.randint(1, max_tgt) for _ in range(n)]


class PlannerMatchesCli(unittest.TestCase):
    def check(self, py_options, cli_args, inputs, targets):
        with dynapipe.Planner(**py_options) as p:
            plan = p.plan(inputs, targets)
        cli = cli_plan(cli_args, inputs, targets)
        self.assertEqual(len(cli["global_batches"]), 1)
        assert_batch_equal(self, plan, cli["global_batches"][0])
        # Every sample exactly once, whatever the method.
        ids = sorted(s for mb in plan.microbatches for s in mb.samples)
        self.assertEqual(ids, list(range(len(inputs))))
        return plan

    def test_gpt_methods(self):
        inputs, targets = lengths(1, 60, 700, 120)
        for method in dynapipe.METHODS:
            with self.subTest(method=method):
                self.check(dict(model="gpt2-124m", max_seqlen=1024, stages=4, machine="a100", method=method),
                           ["--model", "gpt", "--model-config", "gpt2-124m", "--max-seqlen", 1024, "--stages", 4,
                            "--machine", "a100", "--method", method, "--untuned"], inputs, targets)

    def test_t5_methods(self):
        inputs, targets = lengths(2, 50, 500, 200)
        for method in ("dynapipe", "padding", "packing-docmask"):
            with self.subTest(method=method):
                plan = self.check(dict(model="t5", max_seqlen=512, stages=2, machine="a100", method=method),
                                  ["--model", "t5", "--max-seqlen", 512, "--stages", 2, "--machine", "a100",
                                   "--method", method, "--untuned"], inputs, targets)
                self.assertTrue(all(mb.target_len > 0 for mb in plan.microbatches))

    def test_llama_methods(self):
        # Llama is decoder-only: one length per micro-batch (target_len 0),
        # its default preset as the CLI's, and a model dict with Llama fields.
        inputs, targets = lengths(5, 60, 700, 120)
        for method in ("dynapipe", "padding", "token"):
            with self.subTest(method=method):
                plan = self.check(dict(model="llama", max_seqlen=1024, stages=4, machine="a100", method=method),
                                  ["--model", "llama", "--max-seqlen", 1024, "--stages", 4, "--machine", "a100",
                                   "--method", method, "--untuned"], inputs, targets)
                self.assertTrue(all(mb.target_len == 0 for mb in plan.microbatches))
        with dynapipe.Planner(model={"preset": "llama3-8b", "kv_heads": 4}, max_seqlen=2048, stages=8,
                              machine="a100") as p:
            self.assertEqual(p.kind, "llama")
            self.assertEqual(p.model["kv_heads"], 4)
            self.assertEqual(p.model["vocab"], 128256)

    def test_dp_memory_recompute_rounding(self):
        inputs, targets = lengths(3, 80, 900, 100)
        plan = self.check(dict(model="gpt", max_seqlen=1024, stages=2, dp=2, machine="a100", memory_limit_mb=3000,
                               recompute="selective", round_to=16),
                          ["--model", "gpt", "--max-seqlen", 1024, "--stages", 2, "--dp", 2, "--machine", "a100",
                           "--memory-limit", 3000, "--recompute", "selective", "--round-to", 16], inputs, targets)
        self.assertEqual({mb.replica for mb in plan.microbatches}, {0, 1})
        self.assertTrue(all(mb.input_len % 16 == 0 for mb in plan.microbatches))

    def test_baseline_knobs_and_chunks(self):
        inputs, targets = lengths(4, 40, 400, 60)
        # (gpt-tiny has 2 layers: room for 1 stage x 2 chunks; more chunks than layers are refused)
        self.check(dict(model="gpt-tiny", max_seqlen=512, stages=1, chunks=2, method="padding", mb_samples=3),
                   ["--model", "gpt", "--model-config", "gpt-tiny", "--max-seqlen", 512, "--stages", 1, "--chunks", 2,
                    "--method", "padding", "--mb-samples", 3], inputs, targets)
        self.check(dict(model="gpt-tiny", max_seqlen=512, stages=2, method="token", mb_tokens=1500),
                   ["--model", "gpt", "--model-config", "gpt-tiny", "--max-seqlen", 512, "--stages", 2,
                    "--method", "token", "--mb-tokens", 1500], inputs, targets)
        self.check(dict(model="gpt-tiny", max_seqlen=512, stages=2, method="packing", pack_rows=2),
                   ["--model", "gpt", "--model-config", "gpt-tiny", "--max-seqlen", 512, "--stages", 2,
                    "--method", "packing", "--pack-rows", 2], inputs, targets)

    def test_model_dict_and_machine_file(self):
        inputs, targets = lengths(5, 30, 300, 50)
        machine = os.path.join(REPO, "docs", "examples", "a100-80gb.json")
        self.check(dict(model={"preset": "gpt2-124m", "n_layers": 6, "hidden": 512, "heads": 8, "head_dim": 64},
                        max_seqlen=512, stages=3, machine=machine),
                   ["--model", "gpt", "--layers", 6, "--hidden", 512, "--heads", 8, "--max-seqlen", 512,
                    "--stages", 3, "--machine", machine], inputs, targets)
        with open(machine) as f:
            as_dict = json.load(f)
        with dynapipe.Planner(model="gpt", max_seqlen=512, stages=3, machine=machine) as a, \
                dynapipe.Planner(model="gpt", max_seqlen=512, stages=3, machine=as_dict) as b:
            self.assertEqual(a.plan(inputs, targets).to_dict()["microbatches"],
                             b.plan(inputs, targets).to_dict()["microbatches"])
            self.assertEqual(a.machine, b.machine)

    def test_sample_ids_are_passed_through(self):
        inputs, targets = lengths(6, 20, 300, 30)
        ids = [1000 + 7 * k for k in range(20)]
        with dynapipe.Planner(model="gpt", max_seqlen=512, stages=2) as p:
            a = p.plan(inputs, targets)
            b = p.plan(inputs, targets, sample_ids=ids)
        self.assertEqual([[ids[s] for s in mb.samples] for mb in a.microbatches],
                         [mb.samples for mb in b.microbatches])

    def test_plan_fields(self):
        with dynapipe.Planner(model="gpt", max_seqlen=1024, stages=4, machine="a100") as p:
            self.assertEqual(p.kind, "gpt")
            self.assertEqual(p.model["n_layers"], 12)
            self.assertEqual(p.memory_limit_mb, p.machine["device_memory_mb"])
            self.assertGreater(p.states_mb, 0)
            plan = p.plan([100, 500, 20], [10, 20, 5])
        self.assertEqual(plan.real_tokens, 655)
        self.assertEqual(plan.padded_tokens, sum(mb.rows * mb.input_len for mb in plan.microbatches))
        self.assertAlmostEqual(plan.padding_efficiency, 655 / plan.padded_tokens)
        for mb in plan.microbatches:
            self.assertEqual(len(mb.sample_rows), len(mb.samples))
            self.assertTrue(all(0 <= r < mb.rows for r in mb.sample_rows))
        self.assertEqual(plan.replica(0), plan.microbatches)


class CostTable(unittest.TestCase):
    """A cost table (written by the C library from the analytic model, as
    tests/test_cli_plan.c does) used by the binding and by the command."""

    def write_table(self, path):
        lib = dynapipe._lib.load()

        class Grid(ctypes.Structure):  # dyn_cost_grid (include/dynapipe/cost.h)
            _fields_ = [("n_rows", ctypes.c_int32), ("n_enc", ctypes.c_int32), ("n_dec", ctypes.c_int32),
                        ("rows", ctypes.POINTER(ctypes.c_int32)), ("enc_len", ctypes.POINTER(ctypes.c_int32)),
                        ("dec_len", ctypes.POINTER(ctypes.c_int32))]
        write = lib.dyn_cost_table_write_from_model
        write.restype = ctypes.c_int
        write.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(Grid), ctypes.POINTER(dynapipe._lib.DynError)]
        ints = lambda xs: (ctypes.c_int32 * len(xs))(*xs)  # noqa: E731
        rows, enc, dec = ints([1, 2, 4, 8, 16, 32, 64]), ints([8, 16, 32, 64, 128, 256]), ints([0])
        grid = Grid(7, 6, 1, rows, enc, dec)
        err = dynapipe._lib.DynError()
        with dynapipe.Planner(model="gpt-tiny", max_seqlen=256, stages=2) as analytic:
            dynapipe._lib.check(write(path.encode(), analytic._cm, ctypes.byref(grid), ctypes.byref(err)), err)

    def test_table(self):
        inputs, targets = lengths(7, 40, 200, 50)
        with tempfile.TemporaryDirectory() as tmp:
            table = os.path.join(tmp, "gpt.table")
            self.write_table(table)
            with dynapipe.Planner(cost_model=table, max_seqlen=256, stages=2) as p:
                self.assertEqual(p.kind, "gpt")
                plan = p.plan(inputs, targets)
            cli = cli_plan(["--model", "gpt", "--cost-model", table, "--max-seqlen", 256, "--stages", 2],
                           inputs, targets)
            assert_batch_equal(self, plan, cli["global_batches"][0])
            with self.assertRaises(ValueError) as ctx:
                dynapipe.Planner(cost_model=table, model="t5", max_seqlen=256, stages=2)
            self.assertIn("does not match the cost table", str(ctx.exception))
            bad = os.path.join(tmp, "bad.table")
            with open(bad, "w") as f:
                f.write("dynapipe-cost-table 1\nmodel kind=gpt\n")
            with self.assertRaises(dynapipe.Error) as ctx:
                dynapipe.Planner(cost_model=bad, max_seqlen=256, stages=2)
            self.assertIn("bad.table", str(ctx.exception))


class PlannerErrors(unittest.TestCase):
    def test_c_errors_carry_the_c_message(self):
        # A memory limit below the model states: the planner's own message.
        with self.assertRaises(dynapipe.InfeasibleError) as ctx:
            dynapipe.Planner(model="gpt2-124m", max_seqlen=1024, stages=1, memory_limit_mb=100)
        self.assertIn("model states need", str(ctx.exception))
        self.assertEqual(ctx.exception.status, "infeasible")
        # A sample that fits nowhere: the same message the command prints.
        inputs, targets = [1000, 20], [20, 3]
        args = ["--model", "gpt", "--max-seqlen", 1024, "--stages", 4, "--memory-limit", 1200]
        with self.assertRaises(CliError) as cli:
            cli_plan(args, inputs, targets)
        with dynapipe.Planner(model="gpt", max_seqlen=1024, stages=4, memory_limit_mb=1200) as p:
            with self.assertRaises(dynapipe.InfeasibleError) as ctx:
                p.plan(inputs, targets)
        self.assertIn(str(ctx.exception), cli.exception.stderr)
        self.assertIn("sample 0", str(ctx.exception))

    def test_bad_files_and_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "model.json")
            with open(bad, "w") as f:
                f.write('{"kind": "gpt", "n_layers": "twelve"}')
            with self.assertRaises(dynapipe.Error) as ctx:
                dynapipe.Planner(model=bad, max_seqlen=512, stages=1)
            self.assertIn("n_layers", str(ctx.exception))
            with self.assertRaises(dynapipe.Error) as ctx:
                dynapipe.Planner(model="gpt", max_seqlen=512, stages=1, machine={"base": "a100", "mem_gbps": -1})
            self.assertIn("mem_gbps", str(ctx.exception))
            with self.assertRaises(dynapipe.Error) as ctx:
                dynapipe.Planner(model="gpt", max_seqlen=512, stages=1, machine=os.path.join(tmp, "none.json"))
            with self.assertRaises(dynapipe.Error):
                dynapipe.Planner(model="gpt", max_seqlen=512, stages=100)  # more stages than layers?

    def test_bad_arguments_raise_before_c(self):
        ok = dict(model="gpt", max_seqlen=512, stages=2)
        cases = [
            (TypeError, dict(stages=2.0)), (TypeError, dict(stages=True)), (ValueError, dict(stages=0)),
            (TypeError, dict(max_seqlen="512")), (ValueError, dict(max_seqlen=1)), (ValueError, dict(dp=0)),
            (ValueError, dict(method="greedy")), (TypeError, dict(method=1)), (ValueError, dict(recompute="some")),
            (ValueError, dict(memory_limit_mb=-5)), (ValueError, dict(memory_limit_mb=float("nan"))),
            (TypeError, dict(memory_limit_mb="1GB")), (ValueError, dict(round_to=0)), (ValueError, dict(mb_samples=0)),
            (TypeError, dict(model=12)), (ValueError, dict(model="gpt-13b")), (TypeError, dict(machine=None)),
            (ValueError, dict(cost_model="no-such-table.txt")), (ValueError, dict(model=None)),
        ]
        for exc, change in cases:
            with self.subTest(change=change):
                with self.assertRaises(exc) as ctx:
                    dynapipe.Planner(**{**ok, **change})
                self.assertNotIsInstance(ctx.exception, dynapipe.Error, "raised by C, not before")
        with dynapipe.Planner(**ok) as p:
            plan_cases = [
                (TypeError, ([1.5], [2])), (TypeError, ("12", [2])), (ValueError, ([0], [2])),
                (ValueError, ([10, 20], [2])), (ValueError, ([], [])), (ValueError, ([500], [20])),
                (TypeError, ([True], [2])), (TypeError, (5, 5)),
            ]
            for exc, args in plan_cases:
                with self.subTest(args=args):
                    with self.assertRaises(exc) as ctx:
                        p.plan(*args)
                    self.assertNotIsInstance(ctx.exception, dynapipe.Error)
            with self.assertRaises(ValueError):
                p.plan([10, 20], [1, 2], sample_ids=[1])
            with self.assertRaises(ValueError):
                p.plan([10], [1], sample_ids=[-1])
        with self.assertRaises(ValueError):  # closed
            p.plan([10], [2])


if __name__ == "__main__":
    unittest.main()
