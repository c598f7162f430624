"""In-process tests of KILN_PRELOAD's reading."""

import unittest

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.preload import PRELOADS, STDLIB_PRELOADS, preload_plan


class PreloadPlanTest(unittest.TestCase):
    def test_cases(self) -> None:
        matplotlib_then_seaborn = [("matplotlib", "matplotlib"), ("plt", "matplotlib.pyplot"), ("sns", "seaborn")]
        cases = [
            (None, PRELOADS, []),
            ("all", PRELOADS, []),
            ("", STDLIB_PRELOADS, []),
            ("none", STDLIB_PRELOADS, []),
            (" NumPy ", [("np", "numpy")] + STDLIB_PRELOADS, []),
            ("seaborn, matplotlib,nosuch", matplotlib_then_seaborn + STDLIB_PRELOADS, ["nosuch"]),
            ("bogus,all", PRELOADS, ["bogus"]),
        ]
        for groups, want_pairs, want_unknown in cases:
            with self.subTest(groups=groups):
                self.assertEqual(preload_plan(groups), (want_pairs, want_unknown))


if __name__ == "__main__":
    unittest.main()
