"""KILN_PRELOAD: the host's choice of pre-imported groups."""

import unittest

from repl_client import ReplTestCase

STDLIB_NAMES = "json csv datetime collections itertools functools math random re os sys"


class PreloadTest(ReplTestCase):
    def test_numpy_only(self) -> None:
        repl = self.start(preload=True, env={"KILN_PRELOAD": "numpy"})
        self.assertEqual(list(repl.ready["preloaded"]), ["numpy"])
        response = repl.run(
            "import sys\n"
            f"assert all(name in globals() for name in {STDLIB_NAMES.split()!r})\n"
            "(np.__name__, 'pd' in globals(), 'pandas' in sys.modules)"
        )
        self.assertOk(response)
        self.assertEqual(response["result"], "('numpy', False, False)")

    def test_none_still_serves_and_imports_on_demand(self) -> None:
        repl = self.start(preload=True, env={"KILN_PRELOAD": "none"})
        self.assertEqual(repl.ready["preloaded"], {})
        response = repl.run("import pandas as pd\nint(pd.Series([1, 2]).sum())")
        self.assertOk(response)
        self.assertEqual(response["result"], "3")

    def test_groups_in_any_order_and_unknown_ones_logged(self) -> None:
        repl = self.start(preload=True, env={"KILN_PRELOAD": "seaborn, matplotlib,nosuch"})
        # seaborn imports pandas and friends itself; those count as pre-imported, sklearn not.
        self.assertTrue({"matplotlib", "seaborn"} <= set(repl.ready["preloaded"]), repl.ready["preloaded"])
        self.assertNotIn("sklearn", repl.ready["preloaded"])
        self.assertIn("unknown pre-import group 'nosuch'", repl.log_text())
        response = repl.run("import sys\n(plt.__name__, sns.__name__, matplotlib.get_backend(), 'pd' in globals(),\n"
                            " 'kiln_repl.mplbackend' in sys.modules)")
        self.assertOk(response)
        self.assertEqual(response["result"],
                         "('matplotlib.pyplot', 'seaborn', 'module://kiln_repl.mplbackend', False, True)",
                         "the backend is loaded with matplotlib")

    def test_the_collector_is_back_on_and_the_preloads_frozen(self) -> None:
        repl = self.start(preload=True, env={"KILN_PRELOAD": "numpy"})
        response = repl.run("import gc\n(gc.isenabled(), gc.get_freeze_count() > 10000)")
        self.assertOk(response)
        self.assertEqual(response["result"], "(True, True)")

    def test_untouched_preloads_of_the_chosen_groups_are_not_kept(self) -> None:
        repl = self.start(preload=True, env={"KILN_PRELOAD": "numpy"})
        response = repl.run("x = np.arange(3)", capture_state=True)
        self.assertOk(response)
        restored = self.start(preload=True, env={"KILN_PRELOAD": "none"})
        response = restored.run("'np' in globals(), int(x.sum())", state=response["state_blob"])
        self.assertOk(response)
        self.assertEqual(response["result"], "(False, 3)")


if __name__ == "__main__":
    unittest.main()
