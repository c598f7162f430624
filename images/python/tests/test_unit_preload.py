"""In-process tests of KILN_PRELOAD's reading and of the collector's pause during the pre-imports."""

import gc
import unittest

import inprocess  # noqa: F401  (the server's package, by path)
from kiln_repl.preload import PRELOADS, STDLIB_PRELOADS, collector_paused, preload_plan


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


class CollectorPausedTest(unittest.TestCase):
    def setUp(self) -> None:
        self.addCleanup(gc.enable if gc.isenabled() else gc.disable)
        self.addCleanup(gc.unfreeze)

    def test_off_inside_and_what_was_made_is_frozen(self) -> None:
        gc.enable()
        frozen_before = gc.get_freeze_count()
        with collector_paused():
            self.assertFalse(gc.isenabled(), "the collector runs during the pre-imports")
            made = [[index] for index in range(1000)]  # tracked containers, as imports make
        self.assertTrue(gc.isenabled(), "the collector stays off after the pre-imports")
        self.assertGreaterEqual(gc.get_freeze_count() - frozen_before, len(made))

    def test_a_collector_that_was_off_stays_off(self) -> None:
        gc.disable()
        with collector_paused():
            pass
        self.assertFalse(gc.isenabled())

    def test_an_error_inside_still_turns_it_back_on(self) -> None:
        gc.enable()
        with self.assertRaises(RuntimeError), collector_paused():
            raise RuntimeError("import failed")
        self.assertTrue(gc.isenabled())


if __name__ == "__main__":
    unittest.main()
