"""DynaPipeBatchSampler: the same global batches and micro-batches as
`dynapipe plan --lengths FILE --global-batch-tokens N` over a whole file;
shuffled epochs are permutations, deterministic per (seed, epoch); replica
filtering; the DataLoader contract with MicroBatchDataset; bad arguments."""
import os
import random
import unittest

from dyntest import REPO, assert_batch_equal, cli_plan, dynapipe

LENGTHS = os.path.join(REPO, "docs", "examples", "lengths.tsv")


def read_tsv(path):
    inputs, targets = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip() or not line.split()[0].isdigit():
                continue
            i, t = line.split()
            inputs.append(int(i))
            targets.append(int(t))
    return inputs, targets


def fake_dataloader(dataset, batch_sampler, collate_fn):
    """What torch.utils.data.DataLoader does with a map-style dataset and a
    batch_sampler (one process): fetch each element of a batch, collate."""
    for batch in batch_sampler:
        yield collate_fn([dataset[i] for i in batch])


class SamplerMatchesCli(unittest.TestCase):
    OPTS = dict(model="gpt2-124m", max_seqlen=1024, stages=4, machine="a100")
    ARGS = ["--model", "gpt", "--max-seqlen", 1024, "--stages", 4, "--machine", "a100"]

    def test_whole_file(self):
        inputs, targets = read_tsv(LENGTHS)
        for budget in (3000, 8192):
            with self.subTest(budget=budget):
                s = dynapipe.DynaPipeBatchSampler(inputs, targets, budget, **self.OPTS)
                cli = cli_plan(self.ARGS + ["--global-batch-tokens", budget], lengths_path=LENGTHS)
                plans = list(s.plans())
                self.assertEqual(len(plans), len(cli["global_batches"]))
                self.assertEqual(len(s), len(plans))
                self.assertGreater(len(plans), 1)
                for p, c in zip(plans, cli["global_batches"]):
                    assert_batch_equal(self, p, c)
                self.assertEqual(list(s), [[mb.samples for mb in p.microbatches] for p in plans])
                # Consecutive samples within the budget, as the C sampler cuts them.
                flat = [i for b in s.global_batches() for i in b]
                self.assertEqual(flat, list(range(len(inputs))))
                for b in s.global_batches():
                    self.assertLessEqual(sum(inputs[i] + targets[i] for i in b), budget)
                s.close()

    def test_shared_planner_and_dp(self):
        inputs, targets = read_tsv(LENGTHS)
        with dynapipe.Planner(model="gpt", max_seqlen=1024, stages=2, dp=2, machine="a100") as p:
            everything = dynapipe.DynaPipeBatchSampler(inputs, targets, 6000, p)
            r0 = dynapipe.DynaPipeBatchSampler(inputs, targets, 6000, p, replica=0)
            r1 = dynapipe.DynaPipeBatchSampler(inputs, targets, 6000, p, replica=1)
            for plan, a, b in zip(everything.plans(), r0, r1):
                self.assertEqual(a, [mb.samples for mb in plan.replica(0)])
                self.assertEqual(b, [mb.samples for mb in plan.replica(1)])
                self.assertTrue(a and b)
            with self.assertRaises(ValueError):
                dynapipe.DynaPipeBatchSampler(inputs, targets, 6000, p, replica=2)


class SamplerShuffle(unittest.TestCase):
    def test_epochs(self):
        r = random.Random(3)
        inputs = [r.randint(1, 400) for _ in range(300)]
        targets = [r.randint(1, 100) for _ in range(300)]
        s = dynapipe.DynaPipeBatchSampler(inputs, targets, 4096, shuffle=True, seed=7, model="gpt", max_seqlen=512,
                                          stages=2)
        orders = []
        for epoch in (0, 1, 0):
            s.set_epoch(epoch)
            want = list(range(300))
            random.Random(7 + epoch).shuffle(want)
            self.assertEqual(s.order(), want)
            got = [i for gb in s for mb in gb for i in mb]
            self.assertEqual(sorted(got), list(range(300)))  # each sample once per epoch
            # An independent cut of the permutation: consecutive dataset
            # indices while input + target tokens stay within the budget.
            # Compared with both the unplanned and the planned batches, so a
            # sampler that reported positions in the shuffled order instead
            # of dataset indices (or cut elsewhere) fails here.
            cut, cur, tokens = [], [], 0
            for i in want:
                if tokens + inputs[i] + targets[i] > 4096:
                    cut.append(cur)
                    cur, tokens = [], 0
                cur.append(i)
                tokens += inputs[i] + targets[i]
            cut.append(cur)
            self.assertGreater(len(cut), 5)
            self.assertEqual(list(s.global_batches()), cut)
            planned = [sorted(i for mb in gb for i in mb) for gb in s]
            self.assertEqual(planned, [sorted(b) for b in cut])
            for plan, b in zip(s.plans(), cut):  # each micro-batch's tokens are its samples' lengths
                self.assertEqual(sum(mb.tokens for mb in plan.microbatches), sum(inputs[i] + targets[i] for i in b))
            orders.append(planned)
        self.assertEqual(orders[0], orders[2])
        self.assertNotEqual(orders[0], orders[1])


class SamplerLoaderContract(unittest.TestCase):
    def test_micro_batch_dataset(self):
        inputs, targets = read_tsv(LENGTHS)
        dataset = [(list(range(i)), list(range(t))) for i, t in zip(inputs, targets)]
        s = dynapipe.DynaPipeBatchSampler(inputs, targets, 8192, model="gpt", max_seqlen=1024, stages=4)
        seen = []
        for micro_batches, gb in zip(fake_dataloader(dynapipe.MicroBatchDataset(dataset), s, list), s):
            self.assertEqual(len(micro_batches), len(gb))
            for samples, idx in zip(micro_batches, gb):
                self.assertEqual(samples, [dataset[i] for i in idx])
                seen += idx
        self.assertEqual(sorted(seen), list(range(len(dataset))))
        self.assertEqual(len(dynapipe.MicroBatchDataset(dataset)), len(dataset))


class SamplerErrors(unittest.TestCase):
    def test_bad_arguments(self):
        ok = dict(model="gpt", max_seqlen=512, stages=1)
        for exc, args, kw in [
            (ValueError, ([10, 20], [1], 100), {}), (ValueError, ([], [], 100), {}), (TypeError, ([10.0], [1], 100), {}),
            (ValueError, ([10], [1], 0), {}), (TypeError, ([10], [1], "8k"), {}),
            (ValueError, ([600], [1], 1000), {}),  # over max_seqlen: said at construction
            (TypeError, ([10], [1], 100), {"shuffle": 1}), (TypeError, ([10], [1], 100, "planner"), {}),
        ]:
            with self.subTest(args=args, kw=kw):
                with self.assertRaises(exc):
                    dynapipe.DynaPipeBatchSampler(*args, **{**ok, **kw})

    def test_sample_over_budget_is_the_c_error(self):
        s = dynapipe.DynaPipeBatchSampler([100, 300], [10, 10], 200, model="gpt", max_seqlen=512, stages=1)
        with self.assertRaises(dynapipe.InfeasibleError) as ctx:
            list(s)
        self.assertIn("sample 1 alone has 310 tokens", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
