# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
# Visual report for a synthetic sensor/sales dataset with matplotlib and seaborn.
# Fidelity notebook 04 (plots): styles and rcParams set in one cell and relied on later, module
# aliases (mpl, cm, mticker), a registered colormap, figures and axes (a 3-D one too) created
# in one cell and drawn on and saved in later ones, seaborn themes and plots, and two cells
# that fail part-way on purpose.

# %% Imports
import os

import matplotlib as mpl
import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import cm
from matplotlib.colors import LinearSegmentedColormap, Normalize

print("matplotlib", mpl.__version__, "| seaborn", sns.__version__)

# %% Synthetic data
rng = np.random.default_rng(2024)
n = 1_500
groups = np.array(["alpha", "beta", "gamma", "delta"])
df = pd.DataFrame({
    "group": rng.choice(groups, n, p=[0.4, 0.3, 0.2, 0.1]),
    "x": rng.normal(0, 1, n),
    "size": rng.integers(10, 200, n),
})
df["y"] = 1.8 * df["x"] + df["group"].map({"alpha": 0, "beta": 1.5, "gamma": -1, "delta": 3}) + rng.normal(0, 0.8, n)
df["value"] = rng.gamma(shape=df["group"].map({"alpha": 2, "beta": 3, "gamma": 5, "delta": 8}).to_numpy(), scale=1.2)
months = pd.date_range("2023-01-01", periods=24, freq="MS")
sales = pd.DataFrame({"month": months,
                      "online": 100 + np.cumsum(rng.normal(4, 6, 24)),
                      "store": 140 + np.cumsum(rng.normal(1, 5, 24))})
print(df.shape, sales.shape)
df.groupby("group")[["x", "y", "value"]].mean().round(3)

# %% Use the ggplot style for everything that follows
plt.style.use("ggplot")
print(plt.rcParams["axes.facecolor"], plt.rcParams["axes.prop_cycle"].by_key()["color"][:3])

# %% Monthly sales line chart (ggplot style)
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(sales["month"], sales["online"], label="online")
ax.plot(sales["month"], sales["store"], label="store")
ax.set_title("Monthly sales (units)")
ax.legend()
plt.show()
len(ax.lines), ax.get_title()

# %% House rcParams: thicker lines, smaller figures, bigger titles
mpl.rcParams["lines.linewidth"] = 3
plt.rcParams.update({
    "figure.figsize": (5.5, 3.2),
    "figure.dpi": 72,
    "savefig.dpi": 72,
    "axes.titlesize": 13,
    "axes.titleweight": "bold",
    "font.size": 9,
    "legend.frameon": False,
})

# %% Check the settings took (printed in a later cell than they were set)
for key in ["lines.linewidth", "figure.figsize", "figure.dpi", "axes.titlesize", "axes.titleweight",
            "axes.facecolor", "legend.frameon"]:
    print(f"{key:18s} {mpl.rcParams[key]!r}")

# %% The same chart with the house settings, with tick formatters from mticker
fig2, ax2 = plt.subplots()
ax2.plot(sales["month"], sales["online"] / sales["online"].iloc[0] - 1, label="online growth")
ax2.yaxis.set_major_formatter(mticker.PercentFormatter(xmax=1.0, decimals=0))
ax2.xaxis.set_major_locator(mpl.dates.MonthLocator(bymonth=[1, 7]))
ax2.xaxis.set_major_formatter(mpl.dates.DateFormatter("%b %y"))
ax2.set_title("Online growth since Jan 2023")
plt.show()
[line.get_linewidth() for line in ax2.lines]

# %% A figure set up now and drawn on later
fig_q, ax_q = plt.subplots(figsize=(5, 3))
ax_q.set_title("Revenue by quarter")
ax_q.set_ylabel("revenue")
ax_q.yaxis.set_major_locator(mticker.MaxNLocator(5))
fig_q.get_size_inches().tolist(), ax_q.get_title()

# %% Draw on the earlier axes and save the figure under its own name
quarters = sales.set_index("month").resample("QS").sum()
labels = [f"Q{q.quarter} {q.year % 100:02d}" for q in quarters.index]
ax_q.bar(labels, quarters["online"], color=cm.viridis(0.3), label="online")
ax_q.bar(labels, quarters["store"], bottom=quarters["online"], color=cm.viridis(0.75), label="store")
ax_q.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _pos: f"{v / 1000:.1f}k"))
ax_q.tick_params(axis="x", rotation=45)
ax_q.legend(loc="upper left")
fig_q.savefig("revenue_by_quarter.png", bbox_inches="tight")
len(ax_q.patches), ax_q.get_ylim()[1] > quarters.sum(axis=1).max()

# %% A 3-D surface; the axes is kept for later
X, Y = np.meshgrid(np.linspace(-3, 3, 60), np.linspace(-3, 3, 60))
Z = np.sin(X) * np.cos(Y) * np.exp(-(X ** 2 + Y ** 2) / 8)
fig3d = plt.figure(figsize=(5, 4))
ax3d = fig3d.add_subplot(projection="3d")
surf = ax3d.plot_surface(X, Y, Z, cmap=cm.coolwarm, linewidth=0, antialiased=True, rstride=2, cstride=2)
fig3d.colorbar(surf, shrink=0.6, pad=0.1)
ax3d.set_title("sin(x) cos(y) envelope")
type(ax3d).__name__, ax3d.name

# %% Reuse the 3-D axes: new viewpoint, contours on the floor, save
ax3d.view_init(elev=40, azim=-35)
ax3d.contour(X, Y, Z, zdir="z", offset=Z.min() - 0.3, cmap=cm.coolwarm, levels=12)
ax3d.set_zlim(Z.min() - 0.3, Z.max())
ax3d.set_xlabel("x")
ax3d.set_ylabel("y")
fig3d.savefig("surface_3d.png")
print("elev/azim:", ax3d.elev, ax3d.azim)
tuple(round(v, 3) for v in ax3d.get_zlim())

# %% A brand colormap registered with matplotlib
brand = LinearSegmentedColormap.from_list("brand", ["#0b3954", "#bfd7ea", "#ff6663"], N=256)
mpl.colormaps.register(brand, name="brand", force=True)
print("brand" in mpl.colormaps, brand.N, np.round(brand(0.5), 3))

# %% Use the registered colormap by name
fig_c, ax_c = plt.subplots()
sc = ax_c.scatter(df["x"], df["y"], c=df["value"], cmap="brand", s=8, norm=Normalize(0, 20))
fig_c.colorbar(sc, ax=ax_c, label="value")
ax_c.set_title("y vs x, coloured by value")
plt.show()
sc.get_cmap().name

# %% Residual plot, then a typo in the second series (fails after the first is drawn)
fit = np.polyfit(df["x"], df["y"], 1)
resid = df["y"] - np.polyval(fit, df["x"])
fig_r, ax_r = plt.subplots()
ax_r.plot(np.sort(df["x"]), np.sort(resid), ".", markersize=3, label="sorted residuals")
print("fit:", np.round(fit, 4), "| residual sd:", round(float(resid.std()), 4))
ax_r.plot(np.sort(df["x"]), np.sort(resid)[:-1], label="oops")

# %% Finish the residual figure started in the failed cell
ax_r.axhline(0, color="black", linewidth=1)
ax_r.set_title("Residuals (sorted)")
ax_r.legend()
fig_r.savefig("residuals.png")
len(ax_r.lines), round(float(resid.abs().max()), 4)

# %% Colormap sampling: discrete colours from a continuous map
viridis = mpl.colormaps["viridis"].resampled(5)
plasma_colors = cm.plasma(np.linspace(0, 1, 4))
print(np.round(viridis.colors, 3))
[mpl.colors.to_hex(c) for c in plasma_colors]

# %% A stand-alone colorbar with a discrete norm
bounds = [0, 2, 4, 8, 16, 32]
norm = mpl.colors.BoundaryNorm(bounds, ncolors=256, extend="max")
fig_cb, ax_cb = plt.subplots(figsize=(5, 0.6))
fig_cb.colorbar(cm.ScalarMappable(norm=norm, cmap="brand"), cax=ax_cb, orientation="horizontal", label="value band")
plt.show()
np.digitize(df["value"].to_numpy()[:10], bounds).tolist()

# %% Switch to seaborn's theme from here on
sns.set_theme(style="whitegrid", palette="deep", rc={"lines.linewidth": 2.0, "figure.dpi": 72, "savefig.dpi": 72})
print(mpl.rcParams["axes.facecolor"], mpl.rcParams["lines.linewidth"], mpl.rcParams["axes.grid"])

# %% Distribution of values by group (histogram with KDE)
fig_h, ax_h = plt.subplots(figsize=(6, 3.5))
sns.histplot(data=df, x="value", hue="group", hue_order=list(groups), kde=True, element="step", stat="density",
             common_norm=False, bins=40, ax=ax_h)
ax_h.set_title("value by group")
plt.show()
len(ax_h.collections), len(ax_h.lines)

# %% Box plots with the group order fixed
fig_b, ax_b = plt.subplots(figsize=(5.5, 3.5))
sns.boxplot(data=df, x="group", y="value", order=list(groups), hue="group", palette="Set2", legend=False, ax=ax_b)
ax_b.yaxis.set_major_locator(mticker.MultipleLocator(5))
plt.show()
df.groupby("group")["value"].describe()[["25%", "50%", "75%"]].round(3)

# %% Correlation heatmap
num = df[["x", "y", "size", "value"]].assign(xy=df["x"] * df["y"])
corr = num.corr()
fig_hm, ax_hm = plt.subplots(figsize=(4.8, 4))
sns.heatmap(corr, annot=True, fmt=".2f", cmap="vlag", vmin=-1, vmax=1, square=True, ax=ax_hm, cbar_kws={"shrink": 0.7})
plt.show()
corr.round(3)

# %% Scatter plot with hue and size
fig_s, ax_s = plt.subplots(figsize=(6, 4))
sns.scatterplot(data=df.iloc[:600], x="x", y="y", hue="group", hue_order=list(groups), size="size",
                sizes=(10, 120), alpha=0.7, ax=ax_s)
ax_s.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
plt.show()
ax_s.get_legend().get_texts()[0].get_text()

# %% An old style name (fails: renamed in matplotlib 3.6)
style_before = dict(mpl.rcParams)["axes.facecolor"]
print("facecolor before:", style_before)
plt.style.use("seaborn-darkgrid")

# %% The renamed style, in a context only; style_before survives the failed cell
with plt.style.context("seaborn-v0_8-darkgrid"):
    inside = mpl.rcParams["axes.facecolor"]
    fig_d, ax_d = plt.subplots()
    ax_d.plot(sales["month"], sales["store"].rolling(3).mean(), color="C2")
    ax_d.set_title("Store sales, 3-month mean")
    plt.show()
print("before:", style_before, "| inside context:", inside, "| after:", mpl.rcParams["axes.facecolor"])

# %% Twin axes: units and growth on one chart, engineering-notation ticks
fig_t, ax_t = plt.subplots()
ax_t.bar(sales["month"], sales["store"] * 1000, width=20, color="C0", alpha=0.6, label="store units")
ax_t.yaxis.set_major_formatter(mticker.EngFormatter(places=0))
ax_t.xaxis.set_major_formatter(mpl.dates.DateFormatter("%b %y"))
ax_t.tick_params(axis="x", rotation=30)
ax_tw = ax_t.twinx()
ax_tw.plot(sales["month"], sales["store"].pct_change() * 100, color="C3", marker="o", markersize=3)
ax_tw.yaxis.set_major_formatter(mticker.FormatStrFormatter("%+.0f%%"))
ax_tw.grid(False)
plt.show()
[t.get_text() for t in ax_t.get_yticklabels()][:3]

# %% A 2x2 dashboard with shared axes
fig_g, axes = plt.subplots(2, 2, figsize=(7, 5), sharex="col")
for axis, grp in zip(axes.flat, groups):
    sub = df[df["group"] == grp]
    axis.hist(sub["value"], bins=25, color=mpl.colormaps["brand"](0.15 + 0.7 * list(groups).index(grp) / 3))
    axis.set_title(f"{grp} (n={len(sub)})")
    axis.xaxis.set_major_locator(mticker.MaxNLocator(4))
fig_g.suptitle("value by group")
fig_g.tight_layout()
plt.show()
axes.shape, [a.get_title() for a in axes.flat]

# %% Annotate the earlier 3-D axes once more and save a second view
ax3d.view_init(elev=15, azim=120)
ax3d.text(0, 0, float(Z.max()) + 0.1, "peak", color="black")
fig3d.savefig("surface_3d_side.png")
ax3d.elev, ax3d.azim, len(ax3d.texts)

# %% Smaller fonts for the facet grid that follows
sns.set_context("paper", font_scale=1.1)
print(mpl.rcParams["font.size"], mpl.rcParams["axes.labelsize"], mpl.rcParams["lines.linewidth"])

# %% Facets with seaborn's figure-level API
g = sns.relplot(data=df.iloc[:800], x="x", y="y", col="group", col_order=list(groups), col_wrap=2, height=2.2,
                s=10, color="C0")
g.set_titles("{col_name}")
plt.show()
type(g).__name__, g.axes.shape

# %% What the session's settings are now
print({k: mpl.rcParams[k] for k in ["lines.linewidth", "axes.titlesize", "font.size", "figure.dpi", "axes.grid"]})
print(sorted(p for p in os.listdir(".") if p.endswith(".png") and not p.startswith("figure-")))
