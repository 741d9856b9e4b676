"""flatten_rows and pad_rows against hand-built expectations."""
import unittest

from dyntest import dynapipe

IGN = dynapipe.IGNORE_INDEX


class Collate(unittest.TestCase):
    def test_flatten(self):
        out = dynapipe.flatten_rows([([11, 12, 13], [14, 15]), ([21], [22, 23, 24]), ([31, 32], [33])])
        self.assertEqual(out["input_ids"], [[11, 12, 13, 14, 15, 21, 22, 23, 24, 31, 32, 33]])
        self.assertEqual(out["position_ids"], [[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2]])
        self.assertEqual(out["labels"], [[IGN, IGN, IGN, 14, 15, IGN, 22, 23, 24, IGN, IGN, 33]])
        self.assertEqual(out["cu_seqlens"], [0, 5, 9, 12])
        # A sample with an empty input: its first (target) token has no label.
        self.assertEqual(dynapipe.flatten_rows([([], [5, 6])])["labels"], [[IGN, 6]])

    def test_pad(self):
        out = dynapipe.pad_rows([([1, 2], [3]), ([4], [5, 6, 7])], 6, 0)
        self.assertEqual(out["input_ids"], [[1, 2, 3, 0, 0, 0], [4, 5, 6, 7, 0, 0]])
        self.assertEqual(out["labels"], [[IGN, IGN, 3, IGN, IGN, IGN], [IGN, 5, 6, 7, IGN, IGN]])
        self.assertEqual(out["attention_mask"], [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]])
        self.assertEqual(out["position_ids"], [[0, 1, 2, 0, 0, 0], [0, 1, 2, 3, 0, 0]])

    def test_errors(self):
        with self.assertRaises(ValueError):
            dynapipe.pad_rows([([1, 2], [3])], 2, 0)
        with self.assertRaises(ValueError):
            dynapipe.flatten_rows([])
        with self.assertRaises(TypeError):
            dynapipe.flatten_rows([[1, 2, 3]])
        with self.assertRaises(ValueError):
            dynapipe.flatten_rows([([], [])])


if __name__ == "__main__":
    unittest.main()
