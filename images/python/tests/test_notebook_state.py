"""A session as a notebook keeps it, across server processes: every cell below runs in a fresh
REPL with the state the cell before it left (what a kiln session without a live sandbox does),
and must answer as one live interpreter would."""

from typing import Any

from repl_client import ReplTestCase


class NotebookStateTest(ReplTestCase):
    def cells(self, *cells: str, data_dir: str | None = None) -> list[dict[str, Any]]:
        """Runs each cell in a new preloaded REPL, carrying the state; returns the answers."""
        state: bytes | None = None
        answers = []
        for code in cells:
            repl = self.start(preload=True, data_dir=data_dir)
            answer = repl.run(code, state=state, capture_state=True, timeout_ms=60_000)
            if answer["state_blob"] is not None:
                state = answer["state_blob"]
            elif not answer["state_unchanged"]:
                state = None
            answers.append(answer)
            repl.close()
        return answers

    def test_real_data_is_kept(self) -> None:
        # Pickle protocol 5 hands buffers of 64 KiB and more to the pickler's file as
        # PickleBuffers: every one of these was dropped as "unpicklable" once.
        setup, check = self.cells("""
from sklearn.datasets import load_digits
from sklearn.manifold import Isomap
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC
rng = np.random.default_rng(0)
edge, past = np.zeros(8191), np.zeros(8192)
series = pd.Series(np.arange(8192.0))
frame = pd.DataFrame({"n": np.arange(20_000), "x": rng.normal(size=20_000),
                      "city": rng.choice(["Lyon", "Oslo"], 20_000), "t": pd.date_range("2024", periods=20_000, freq="h")})
digits = load_digits()
iso = Isomap(n_components=2, n_neighbors=10).fit(digits.data[:200])
search = GridSearchCV(SVC(), {"C": [0.1, 1.0]}, cv=3).fit(digits.data[:300], digits.target[:300])
fig = plt.figure()
axes3d = fig.add_subplot(projection="3d")
""", """(past.shape, float(series.sum()), frame.shape, str(frame.t.dtype), digits.data.shape,
 iso.embedding_.shape, search.best_params_, type(axes3d).__name__)""")
        self.assertOk(setup)
        self.assertIsNone(setup["state_error"])
        self.assertOk(check)
        self.assertEqual(check["result"], "((8192,), 33550336.0, (20000, 4), 'datetime64[ns]', (1797, 64), (200, 2), "
                                          "{'C': 1.0}, 'Axes3D')")

    def test_functions_and_classes_see_the_globals_of_now(self) -> None:
        define, use = self.cells("""
import functools, pickle
from dataclasses import dataclass
x = 1
def f():
    return x
@dataclass
class Point:
    a: float
    def scaled(self):
        return self.a * x
class Lookup:
    def get(self, name):
        return eval(name)
@functools.lru_cache
def plus(n):
    return n + x
""", "x = 5\nf(), Point(2).scaled(), Lookup().get('x'), plus(1), pickle.loads(pickle.dumps(Point(3))) == Point(3)")
        self.assertOk(define)
        self.assertOk(use)
        self.assertEqual(use["result"], "(5, 10, 5, 6, True)")

    def test_modules_bound_to_names_come_back(self) -> None:
        *_, check, after = self.cells(
            "import matplotlib as mpl\nfrom scipy import signal\nimport scipy.linalg as sla\nimport xml.dom\n"
            "with open('mymod.py', 'w') as out:\n    out.write('VALUE = 7\\n')\nimport mymod as mm\nv = mm.VALUE",
            "import os\nos.remove('mymod.py')",
            "mpl.__name__, signal.__name__, float(sla.norm([3, 4])), xml.dom.__name__",
            "v, 'mm' in globals()",
            data_dir=self.shared_dir())
        self.assertOk(check)
        self.assertEqual(check["result"], "('matplotlib', 'scipy.signal', 5.0, 'xml.dom')")
        self.assertEqual(check["state_error"], "not restored (module no longer imports): mm (module mymod: "
                                               "ModuleNotFoundError: No module named 'mymod')")
        self.assertOk(after)
        self.assertEqual(after["result"], "(7, False)")

    def test_settings_carry_over(self) -> None:
        *_, check = self.cells(
            "plt.style.use('ggplot')\nmatplotlib.rcParams['lines.linewidth'] = 3\n"
            "pd.set_option('display.max_columns', 4)\nnp.set_printoptions(precision=2)\n"
            "np.random.seed(42)\nrandom.seed(7)\nfirst = (np.random.rand(), random.random())",
            "(matplotlib.rcParams['axes.facecolor'], matplotlib.rcParams['lines.linewidth'],\n"
            " pd.get_option('display.max_columns'), str(np.array([1/3])), first != (np.random.rand(), random.random()))")
        self.assertOk(check)
        self.assertEqual(check["result"], "('#E5E5E5', 3.0, 4, '[0.33]', True)")

    def test_random_sequences_go_on(self) -> None:
        seeded = "np.random.seed(3)\nrandom.seed(3)"
        draw = "(round(float(np.random.rand()), 12), round(random.random(), 12))"
        carried = self.cells(seeded, draw, draw)
        live = self.start(preload=True)
        live.run(seeded)
        want = [live.run(draw)["result"], live.run(draw)["result"]]
        self.assertEqual([answer["result"] for answer in carried[1:]], want)

    def test_the_global_generators_go_on_when_no_code_names_them(self) -> None:
        # An unseeded estimator draws from numpy's global generator; a gaussian drawn once
        # leaves its twin cached in both generators. A resumed session draws what the live
        # process would have.
        # The fit cell names neither generator: a run once had to name "random" for numpy's
        # to be kept.
        fit = ("from sklearn.ensemble import RandomForestRegressor\n"
               "from sklearn.datasets import make_regression\n"
               "import statistics\n"
               "X, y = make_regression(n_samples=7, n_features=2)\n"
               "model = RandomForestRegressor(n_estimators=5).fit(X, y)\n"
               "noise = statistics.NormalDist().samples(3)")
        self.assertNotIn("random", fit)
        draw = ("(round(float(np.random.standard_normal()), 12), round(random.gauss(0, 1), 12),"
                " round(float(RandomForestRegressor(n_estimators=3).fit(X, y).predict(X[:1])[0]), 9))")
        live = self.start(preload=True)
        captured = live.run(fit, capture_state=True)
        self.assertOk(captured)
        want = live.run(draw)
        resumed = self.start(preload=True)
        got = resumed.run(draw, state=captured["state_blob"], capture_state=True, timeout_ms=60_000)
        self.assertOk(got)
        self.assertEqual(got["result"], want["result"])

    def test_the_last_three_results(self) -> None:
        *_, check = self.cells("1", "'two'", "x = 5", "[3]", "(_, __, ___)")
        self.assertOk(check)
        self.assertEqual(check["result"], "([3], 'two', 1)")

    def test_working_directory_environment_and_path(self) -> None:
        *_, check = self.cells(
            "import os, sys\nos.makedirs('lib/sub', exist_ok=True)\n"
            "with open('lib/helper.py', 'w') as out:\n    out.write('def hi():\\n    return \"hi\"\\n')\n"
            "sys.path.append('lib')\nimport helper\nos.environ['MODE'] = 'full'\nos.chdir('lib/sub')",
            "helper.hi(), os.environ['MODE'], os.path.relpath(os.getcwd(), '/mnt/data') if False else os.getcwd().endswith('lib/sub')",
            data_dir=self.shared_dir())
        self.assertOk(check)
        self.assertEqual(check["result"], "('hi', 'full', True)")

    def shared_dir(self) -> str:
        """A data directory the cells share, as a session's files do."""
        import shutil
        import tempfile

        path = tempfile.mkdtemp(prefix="kiln-notebook-")
        self.addCleanup(shutil.rmtree, path, True)
        return path
