# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
# Numerical methods workbook: signals, linear algebra, ODEs, optimisation and interpolation.
# Fidelity notebook 02 (numpy/scipy): global RNG seeds and print options set once and relied on
# later, module aliases, functions that read globals rebound later, closures, lambdas, a
# decorator, an lru_cache, a dataclass, eval/globals() in a method, `_`, and two cells that fail
# part-way on purpose.

# %% Imports
import dataclasses
import functools
import math
import random
from dataclasses import dataclass, field

import numpy as np
import scipy
import scipy.linalg as sla
from scipy import integrate, signal
from scipy.interpolate import CubicSpline, interp1d
from scipy.optimize import brentq, curve_fit, minimize

print("numpy", np.__version__, "| scipy", scipy.__version__)

# %% Reproducibility and display settings (used by every later cell)
np.random.seed(42)
random.seed(1234)
np.set_printoptions(precision=3, suppress=True, linewidth=100)
print(np.get_printoptions()["precision"], np.get_printoptions()["suppress"])

# %% A long noisy signal: 400k samples (the noise comes from the global RNG seeded above)
fs = 2_000.0
t = np.arange(400_000) / fs
clean = np.sin(2 * np.pi * 5 * t) + 0.5 * np.sin(2 * np.pi * 47 * t) + 0.2 * np.sin(2 * np.pi * 310 * t)
noise = np.random.normal(0.0, 0.4, t.size)
y = clean + noise
print(t.size, y.dtype, f"{y.nbytes / 2**20:.2f} MiB")
print(y[:8])
y.mean(), y.std()

# %% Stdlib random draws (seeded above)
picks = random.sample(range(1000), 6)
jitter = [round(random.gauss(0, 1), 4) for _ in range(4)]
print(picks, jitter)

# %% Linear algebra on a 300x300 SPD system
A = np.random.rand(300, 300)
M = A @ A.T + 300 * np.eye(300)
b = np.random.rand(300)
c, low = sla.cho_factor(M)
x_chol = sla.cho_solve((c, low), b)
evals = sla.eigvalsh(M)
print("cond:", round(evals[-1] / evals[0], 3), "| smallest eigenvalues:", evals[:4])
print("residual:", np.linalg.norm(M @ x_chol - b))
x_chol[:6]

# %% Least squares on a tall system, three ways
X = np.column_stack([np.ones(5000), np.random.normal(size=(5000, 4))])
beta_true = np.array([1.5, -2.0, 0.0, 0.75, 3.0])
yy = X @ beta_true + np.random.normal(0, 0.1, 5000)
beta_np, *_rest = np.linalg.lstsq(X, yy, rcond=None)
beta_sla = sla.lstsq(X, yy)[0]
Q, R = np.linalg.qr(X)
beta_qr = sla.solve_triangular(R, Q.T @ yy)
print(np.vstack([beta_np, beta_sla, beta_qr]))
resid = yy - X @ beta_qr
np.linalg.norm(resid)

# %% Use the previous cell's value through `_`
residual_norm = _
print(f"residual norm {residual_norm:.4f}, sigma-hat {residual_norm / math.sqrt(len(yy) - 5):.4f}")

# %% Jacobi iteration: reads the module-level tolerance and iteration cap
tol = 1e-3
max_iter = 500

def jacobi(Amat, rhs):
    D = np.diag(Amat)
    R_ = Amat - np.diagflat(D)
    xk = np.zeros_like(rhs)
    for k in range(1, max_iter + 1):
        x_new = (rhs - R_ @ xk) / D
        if np.linalg.norm(x_new - xk, np.inf) < tol * np.linalg.norm(x_new, np.inf):
            return x_new, k
        xk = x_new
    return xk, max_iter

Dd = M + np.diag(np.abs(M).sum(axis=1))  # strictly diagonally dominant, so Jacobi converges
xj, iters = jacobi(Dd, b)
print("iterations at tol=1e-3:", iters, "| error:", f"{np.linalg.norm(xj - np.linalg.solve(Dd, b)):.2e}")

# %% Tighter tolerance and a higher cap: rebind the globals and call the same function
tol = 1e-10
max_iter = 2_000
xj, iters = jacobi(Dd, b)
print("iterations at tol=1e-10:", iters, "of", max_iter, "| error:", f"{np.linalg.norm(xj - np.linalg.solve(Dd, b)):.2e}")
iters

# %% Closures and lambdas
def make_poly(*coeffs):
    def p(v):
        return sum(cf * v ** i for i, cf in enumerate(coeffs))
    p.degree = len(coeffs) - 1
    return p

def make_accumulator(start=0.0):
    total = start
    def add(v):
        nonlocal total
        total += v
        return total
    return add

cubic = make_poly(1.0, -3.0, 0.0, 0.5)
acc = make_accumulator(10.0)
transforms = {"square": lambda v: v ** 2, "log1p": np.log1p, "softplus": lambda v: np.log1p(np.exp(v))}
print(cubic.degree, cubic(2.0), [acc(v) for v in (1, 2, 3)])
{k: np.round(fn(np.array([0.5, 1.0, 2.0])), 4).tolist() for k, fn in transforms.items()}

# %% The accumulator keeps its state between cells
acc(100.0), cubic(np.array([0.0, 1.0, 3.0]))

# %% A call-counting decorator
def counted(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fn(*args, **kwargs)
    wrapper.calls = 0
    return wrapper

@counted
def rosen(p):
    """Rosenbrock function."""
    return sum(100.0 * (p[1:] - p[:-1] ** 2) ** 2 + (1 - p[:-1]) ** 2)

res_nm = minimize(rosen, x0=np.array([-1.2, 1.0, 0.8]), method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-8})
print(rosen.__name__, "|", rosen.__doc__, "| calls:", rosen.calls, "| nfev:", res_nm.nfev)
res_nm.x

# %% More calls through the same decorated function
res_bfgs = minimize(rosen, x0=np.array([-1.2, 1.0, 0.8]), method="BFGS", jac=None)
print("BFGS success:", res_bfgs.success, "| nit:", res_bfgs.nit)
print("total calls so far:", rosen.calls)
np.round(res_bfgs.x, 5)

# %% Memoised recursion with lru_cache
@functools.lru_cache(maxsize=None)
def partitions(n, k):
    """Number of partitions of n into parts no larger than k."""
    if n == 0:
        return 1
    if n < 0 or k == 0:
        return 0
    return partitions(n - k, k) + partitions(n, k - 1)

print([partitions(n, n) for n in range(1, 13)])
partitions.cache_info()

# %% The cache is warm from the previous cell
# fidelity: restore: an lru_cache comes back empty (CPython's cache does not show its entries), so its statistics differ
big_p = partitions(120, 120)
print("p(120) =", big_p)
partitions.cache_info()

# %% A damped oscillator as a dataclass
@dataclass
class Oscillator:
    k: float
    m: float = 1.0
    c: float = 0.0
    label: str = "osc"
    history: list = field(default_factory=list)

    @property
    def omega0(self):
        return math.sqrt(self.k / self.m)

    def rhs(self, _t, state):
        pos, vel = state
        return [vel, -(self.c * vel + self.k * pos) / self.m]

osc = Oscillator(k=4.0, c=0.3, label="lightly damped")
print(osc.omega0, dataclasses.asdict(osc))
osc

# %% Integrate the oscillator with solve_ivp
sol = integrate.solve_ivp(osc.rhs, (0, 20), [1.0, 0.0], t_eval=np.linspace(0, 20, 11), rtol=1e-9, atol=1e-12)
osc.history.append(("solve_ivp", sol.nfev))
print(sol.status, sol.message)
print(sol.y[0])
osc.history

# %% Quadrature: quad, and trapezoid/simpson on the long signal
val, err = integrate.quad(lambda s: np.exp(-s ** 2) * np.cos(3 * s), -np.inf, np.inf)
exact = math.sqrt(math.pi) * math.exp(-9 / 4)
energy_trap = integrate.trapezoid(y ** 2, t)
energy_simp = integrate.simpson(y[:100_001] ** 2, x=t[:100_001])
print(f"quad {val:.12f} vs exact {exact:.12f} (err est {err:.1e})")
print(f"signal energy: trapezoid {energy_trap:.3f}, simpson(first 50 s) {energy_simp:.3f}")

# %% A model whose method looks its parameters up by name in the notebook's globals
gain = 2.5
offset = -1.0

class LinearResponse:
    def __init__(self, gain_name, offset_name):
        self.gain_name, self.offset_name = gain_name, offset_name

    def __call__(self, v):
        return eval(self.gain_name) * v + globals()[self.offset_name]

    def __repr__(self):
        return f"LinearResponse({self.gain_name}={eval(self.gain_name)}, {self.offset_name}={globals()[self.offset_name]})"

resp = LinearResponse("gain", "offset")
print(resp(np.array([0.0, 1.0, 2.0])))
resp

# %% Retune the globals: the same object now answers differently
gain, offset = 0.5, 3.0
print(resp(np.array([0.0, 1.0, 2.0])))
resp

# %% Interpolation: spline through coarse samples, evaluated on a fine grid
xs = np.linspace(0, 2 * np.pi, 25)
spline = CubicSpline(xs, np.sin(xs), bc_type="periodic")
lin = interp1d(xs, np.sin(xs), kind="linear")
fine = np.linspace(0, 2 * np.pi, 200_000)
err_spline = np.abs(spline(fine) - np.sin(fine)).max()
err_lin = np.abs(lin(fine) - np.sin(fine)).max()
print(f"max error: cubic spline {err_spline:.2e}, linear {err_lin:.2e}")
spline(np.array([0.1, 1.0, 2.0])), spline.derivative()(np.array([0.0, np.pi]))

# %% Polynomial fit, then a Cholesky that fails (the matrix is not positive definite)
coeffs = np.polyfit(xs, np.sin(xs), 5)
fit_report = {"degree": 5, "max_abs_err": float(np.abs(np.polyval(coeffs, fine) - np.sin(fine)).max())}
print(coeffs)
print(fit_report)
indefinite = np.array([[1.0, 2.0], [2.0, 1.0]])
L = sla.cholesky(indefinite, lower=True)

# %% Use what the failed cell bound before it raised
print("coefficients kept:", coeffs.round(4))
fit_report["max_abs_err"] < 0.05

# %% Filtering the long signal with scipy.signal
sos = signal.butter(4, 20, btype="low", fs=fs, output="sos")
smooth = signal.sosfiltfilt(sos, y)
freqs, psd = signal.welch(y, fs=fs, nperseg=4096)
peaks, props = signal.find_peaks(psd, height=psd.max() * 0.01)
print("peak frequencies (Hz):", freqs[peaks])
print("rms error of the low-passed signal vs the 5 Hz component:",
      round(float(np.sqrt(np.mean((smooth - np.sin(2 * np.pi * 5 * t)) ** 2))), 4))

# %% FFT of the raw signal
spec = np.abs(np.fft.rfft(y)) / y.size
fgrid = np.fft.rfftfreq(y.size, d=1 / fs)
top = np.argsort(spec)[-3:][::-1]
np.column_stack([fgrid[top], 2 * spec[top]])

# %% Curve fitting with noise from the global RNG
def decay(s, a, k, c0):
    return a * np.exp(-k * s) + c0

sx = np.linspace(0, 5, 400)
sy = decay(sx, 2.5, 1.3, 0.5) + np.random.normal(0, 0.05, sx.size)
popt, pcov = curve_fit(decay, sx, sy, p0=(1, 1, 0))
print("params:", popt, "| std errors:", np.sqrt(np.diag(pcov)))

# %% Root finding with a closure over fitted parameters
half_life = lambda: brentq(lambda s: decay(s, *popt) - (popt[0] / 2 + popt[2]), 0, 5)
print(f"half-life {half_life():.5f} vs ln2/k {math.log(2) / popt[1]:.5f}")

# %% Monte Carlo with the legacy global RNG
pts = np.random.rand(250_000, 2)
inside = (pts ** 2).sum(axis=1) <= 1.0
pi_hat = 4 * inside.mean()
print(f"pi ~ {pi_hat:.5f} from {len(pts):,} points")
pts[:3]

# %% A projection that fails on a shape mismatch (B is bound first)
B = np.random.normal(size=(60, 40))
gram = B.T @ B
proj = B @ np.random.rand(30)

# %% Continue with B and gram from the failed cell
s_vals = sla.svdvals(B)
print(B.shape, gram.shape, "| top singular values:", s_vals[:4])
np.allclose(s_vals ** 2, np.sort(sla.eigvalsh(gram))[::-1])

# %% Stdlib random again: the stream continues from the earlier draws
deck = [f"{r}{s}" for s in "SHDC" for r in "A23456789TJQK"]
random.shuffle(deck)
print(deck[:5], round(random.random(), 6), random.randint(1, 6))

# %% A large sparse system: 1-D Poisson equation with 100k unknowns
from scipy.sparse import diags
from scipy.sparse.linalg import spsolve

n = 100_000
h = 1.0 / (n + 1)
lap = diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1], format="csc") / h ** 2
grid = np.linspace(h, 1 - h, n)
u = spsolve(lap, np.pi ** 2 * np.sin(np.pi * grid))
print("nnz:", lap.nnz, "| max error vs sin(pi x):", f"{np.abs(u - np.sin(np.pi * grid)).max():.2e}")
u[::20_000]

# %% Summary of the session's results
# fidelity: restore: the lru_cache of partitions comes back empty, so its size differs
summary = {
    "jacobi_iters": iters,
    "tol": tol,
    "rosen_calls": rosen.calls,
    "partitions_cache": partitions.cache_info().currsize,
    "accumulator": acc(0.0),
    "response_at_1": float(resp(1.0)),
    "pi_hat": round(pi_hat, 5),
    "half_life": round(half_life(), 5),
}
summary
