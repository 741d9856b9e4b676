"""Every public argument of the package is checked before it is used: type
(TypeError), range, uniqueness and embedded NULs (ValueError), with a
message that names the argument. The cases of the audit that were accepted
or raised a raw exception ("'int' object is not iterable", "can't multiply
sequence by non-int") each appear here."""
import unittest

from dyntest import dynapipe

OK = dict(model="gpt", max_seqlen=512, stages=2)


class ArgumentChecks(unittest.TestCase):
    def raises(self, exc, name, fn, *args, **kw):
        """fn(*args, **kw) raises exc (not the C library's error) whose
        message names `name`."""
        with self.assertRaises(exc) as ctx:
            fn(*args, **kw)
        self.assertNotIsInstance(ctx.exception, dynapipe.Error, "raised by C, not before")
        self.assertIn(name, str(ctx.exception))
        return str(ctx.exception)

    def test_planner_options(self):
        P = dynapipe.Planner
        self.raises(ValueError, "machine", P, **OK, machine="a100\0evil")
        self.raises(ValueError, "model", P, **{**OK, "model": "gpt\0"})
        self.raises(ValueError, "cost_model", P, **OK, cost_model="analytic\0")
        self.raises(ValueError, "machine['name']", P, **OK, machine={"base": "a100", "name": "x\0y"})
        self.raises(ValueError, "machine: key", P, **OK, machine={"base": "a100", "na\0me": "x"})
        self.raises(ValueError, "machine['mem_gbps']", P, **OK, machine={"base": "a100", "mem_gbps": float("nan")})
        self.raises(TypeError, "machine['mem_gbps']", P, **OK, machine={"base": "a100", "mem_gbps": {1, 2}})
        self.raises(TypeError, "machine: key 3", P, **OK, machine={"base": "a100", 3: 1})
        self.raises(ValueError, "model['n_layers']", P, **{**OK, "model": {"preset": "gpt-tiny", "n_layers": float("inf")}})
        # a baseline knob with a method it does not apply to would be ignored
        self.raises(ValueError, "pack_rows = 4 applies to method packing", P, **OK, method="dynapipe", pack_rows=4)
        self.raises(ValueError, "mb_samples", P, **OK, method="packing", mb_samples=2)
        self.raises(ValueError, "mb_tokens", P, **OK, method="padding", mb_tokens=100)
        with P(**OK, method="packing-docmask", pack_rows=2):
            pass

    def test_plan_arguments(self):
        with dynapipe.Planner(**OK) as p:
            # both micro-batches would list sample 3
            msg = self.raises(ValueError, "sample_ids[2] = 3 appears twice", p.plan, [10, 20, 30], [1, 2, 3],
                              sample_ids=[3, 4, 3])
            self.assertIn("sample_ids[0]", msg)
            # a dict is no list of lengths (its keys would be taken)
            self.raises(TypeError, "input_lengths", p.plan, {10: "a", 20: "b"}, [1, 2])
            self.raises(TypeError, "target_lengths", p.plan, [10, 20], {1, 2})
            self.raises(TypeError, "sample_ids", p.plan, [10, 20], [1, 2], sample_ids={0: 1, 1: 2})
            self.raises(TypeError, "input_lengths", p.plan, 5, [1])
            self.raises(TypeError, "input_lengths", p.plan, (x for x in [10]), [1])
            self.raises(TypeError, "sample_ids[1]", p.plan, [10, 20], [1, 2], sample_ids=[0, "1"])
            plan = p.plan([10, 20], [1, 2], sample_ids=[7, 9])
            self.assertEqual(sorted(i for mb in plan.microbatches for i in mb.samples), [7, 9])
            self.raises(TypeError, "r", plan.replica, "0")
            self.raises(ValueError, "schedule", p.plan, [10], [1], schedule="1F1B")
            splan = p.plan([10, 20], [1, 2], schedule="1f1b")
            self.raises(ValueError, "replica", splan.execution_order, 1)
            self.raises(TypeError, "replica", splan.execution_order, 0.0)

    def test_collate(self):
        good = [([1, 2], [3])]
        self.raises(TypeError, "pad_id", dynapipe.pad_rows, good, 4, None)  # None reached input_ids
        self.raises(TypeError, "pad_id", dynapipe.pad_rows, good, 4, 0.5)
        self.raises(ValueError, "pad_id", dynapipe.pad_rows, good, 4, -1)
        self.raises(TypeError, "length", dynapipe.pad_rows, good, 4.0, 0)  # "can't multiply sequence by non-int"
        self.raises(TypeError, "length", dynapipe.pad_rows, good, "4", 0)
        self.raises(TypeError, "samples[0] input_ids", dynapipe.pad_rows, [(5, [3])], 4, 0)  # "'int' object is not iterable"
        self.raises(TypeError, "samples[0] target_ids", dynapipe.flatten_rows, [([1], 3)])
        self.raises(TypeError, "samples[0] input_ids", dynapipe.flatten_rows, [("ab", [3])])
        self.raises(TypeError, "samples[0] target_ids[1]", dynapipe.flatten_rows, [([1], [3, None])])
        self.raises(ValueError, "samples[1] input_ids[0]", dynapipe.flatten_rows, [([1], [2]), ([-4], [3])])
        self.raises(TypeError, "samples[0] must be a pair", dynapipe.flatten_rows, [([1], [2], [3])])
        self.raises(TypeError, "samples", dynapipe.flatten_rows, {"a": ([1], [2])})
        self.raises(TypeError, "samples", dynapipe.flatten_rows, 7)
        self.raises(ValueError, "samples", dynapipe.flatten_rows, [])
        self.assertEqual(dynapipe.pad_rows([((1, 2), range(3, 4))], 3, 0)["input_ids"], [[1, 2, 3]])
        self.assertEqual(dynapipe.flatten_rows([(b"ab", b"c")])["input_ids"], [[97, 98, 99]])  # byte tokens

    def test_sampler(self):
        S = dynapipe.DynaPipeBatchSampler
        self.raises(TypeError, "input_lengths", S, {0: 10}, [1], 100, **OK)
        self.raises(TypeError, "shuffle", S, [10], [1], 100, shuffle="yes", **OK)
        self.raises(TypeError, "seed", S, [10], [1], 100, seed=1.5, **OK)
        self.raises(ValueError, "machine", S, [10], [1], 100, **OK, machine="cpu\0")
        s = S([10, 20], [1, 2], 100, **OK)
        self.raises(ValueError, "epoch", s.set_epoch, -1)
        s.close()
        self.raises(TypeError, "dataset", dynapipe.MicroBatchDataset, 5)
        ds = dynapipe.MicroBatchDataset(["a", "b", "c"])
        self.raises(TypeError, "indices", ds.__getitem__, 1)  # one index, not a micro-batch
        self.raises(ValueError, "indices[1] = 3", ds.__getitem__, [0, 3])
        self.raises(TypeError, "indices", ds.__getitem__, {0: 1})
        self.assertEqual(ds[[2, 0]], ["c", "a"])


if __name__ == "__main__":
    unittest.main()
