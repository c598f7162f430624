# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
# Retail sales analysis: a year of synthetic point-of-sale data for a chain of stores.
# Fidelity notebook 01 (pandas): options set once and relied on later, a seeded Generator,
# DataFrames of 150k rows with mixed dtypes, groupby/merge/pivot/resample/rolling, files
# written and read back, and two cells that fail part-way on purpose.

# %% Imports
import json
import os

import numpy as np
import pandas as pd
from pandas import Categorical, IndexSlice, Timestamp, date_range
from pandas.api.types import CategoricalDtype

print("pandas", pd.__version__, "| numpy", np.__version__)

# %% Display options (every later print relies on these)
pd.set_option("display.max_columns", 12)
pd.set_option("display.width", 140)
pd.set_option("display.max_rows", 24)
pd.set_option("display.precision", 3)
pd.set_option("display.float_format", "{:,.2f}".format)
pd.set_option("display.show_dimensions", True)
CURRENCY = "$"
print({k: pd.get_option(k) for k in ["display.max_columns", "display.width", "display.max_rows", "display.precision"]})

# %% Parameters and the random generator
SEED = 20240501
rng = np.random.default_rng(SEED)
N_STORES, N_PRODUCTS, N_CUSTOMERS, N_TX = 40, 600, 25_000, 150_000
YEAR_START = Timestamp("2023-01-01")
REGIONS = ["North", "South", "East", "West", "Central"]
CATEGORIES = ["Grocery", "Household", "Electronics", "Apparel", "Toys", "Beauty", "Garden"]
PAYMENTS = ["card", "cash", "mobile", "gift_card"]
print(N_STORES, N_PRODUCTS, N_CUSTOMERS, N_TX, YEAR_START.date())

# %% Store master data
region_dtype = CategoricalDtype(REGIONS)
stores = pd.DataFrame({
    "store_id": np.arange(1, N_STORES + 1, dtype=np.int16),
    "region": Categorical(rng.choice(REGIONS, N_STORES, p=[0.25, 0.2, 0.2, 0.2, 0.15]), dtype=region_dtype),
    "city": [f"City-{c:02d}" for c in rng.integers(1, 18, N_STORES)],
    "opened": YEAR_START - pd.to_timedelta(rng.integers(200, 6000, N_STORES), unit="D"),
    "size_sqft": rng.normal(24_000, 6_000, N_STORES).round(-2).clip(8_000, None),
})
stores["format"] = np.where(stores["size_sqft"] > 28_000, "superstore", "standard")
print(stores.dtypes)
stores.head(8)

# %% Product catalogue
cat_weights = np.array([0.34, 0.18, 0.08, 0.14, 0.09, 0.1, 0.07])
products = pd.DataFrame({
    "product_id": np.arange(1, N_PRODUCTS + 1, dtype=np.int16),
    "category": Categorical(rng.choice(CATEGORIES, N_PRODUCTS, p=cat_weights), categories=CATEGORIES),
    "brand": [f"Brand{b}" for b in rng.integers(1, 41, N_PRODUCTS)],
})
base = products["category"].map({"Grocery": 4, "Household": 9, "Electronics": 120, "Apparel": 35,
                                 "Toys": 25, "Beauty": 18, "Garden": 30}).astype(float)
products["list_price"] = (base * rng.lognormal(0, 0.45, N_PRODUCTS)).round(2)
products["unit_cost"] = (products["list_price"] * rng.uniform(0.45, 0.8, N_PRODUCTS)).round(2)
products.groupby("category", observed=True)[["list_price", "unit_cost"]].median()

# %% Transactions: 150k rows with ints, floats, categoricals and datetimes
# Busier at weekends and in Nov/Dec; popular products sell more; a few percent of lines are
# returns (negative quantity).
days = date_range(YEAR_START, periods=365, freq="D")
day_weight = 1 + 0.35 * (days.dayofweek >= 5) + 0.2 * (days.month == 11) + 0.45 * (days.month == 12)
day_idx = rng.choice(365, N_TX, p=day_weight / day_weight.sum())
seconds = np.sort(day_idx * 86_400 + rng.integers(8 * 3600, 22 * 3600, N_TX))
ts = YEAR_START + pd.to_timedelta(seconds, unit="s")
popularity = 1.0 / np.arange(1, N_PRODUCTS + 1) ** 0.9
popularity = rng.permutation(popularity) / np.sqrt(products["list_price"].to_numpy())  # cheap items sell more
pop = rng.choice(products["product_id"].to_numpy(), N_TX, p=popularity / popularity.sum())
qty = rng.poisson(1.4, N_TX) + 1
returns = rng.random(N_TX) < 0.025
qty = np.where(returns, -qty, qty).astype(np.int8)
tx = pd.DataFrame({
    "tx_id": np.arange(1_000_000, 1_000_000 + N_TX, dtype=np.int32),
    "ts": ts,
    "store_id": rng.integers(1, N_STORES + 1, N_TX).astype(np.int16),
    "product_id": pop.astype(np.int16),
    "customer_id": rng.integers(1, N_CUSTOMERS + 1, N_TX).astype(np.int32),
    "qty": qty,
    "discount": np.where(rng.random(N_TX) < 0.3, rng.choice([0.05, 0.1, 0.15, 0.25], N_TX), 0.0).astype(np.float32),
    "payment": Categorical(rng.choice(PAYMENTS, N_TX, p=[0.55, 0.2, 0.2, 0.05]), categories=PAYMENTS),
})
print(tx.shape, f"{tx.memory_usage(deep=True).sum() / 2**20:.1f} MiB")
print(tx.dtypes.to_string())

# %% Prices, revenue and margin
price = products.set_index("product_id")["list_price"]
cost = products.set_index("product_id")["unit_cost"]
tx["unit_price"] = tx["product_id"].map(price).to_numpy()
tx["revenue"] = (tx["qty"] * tx["unit_price"] * (1 - tx["discount"].astype(float))).round(2)
tx["margin"] = (tx["revenue"] - tx["qty"] * tx["product_id"].map(cost)).round(2)
tx[["qty", "unit_price", "discount", "revenue", "margin"]].describe()

# %% Data quality check (fails: returns are still in the data)
dq_report = {
    "rows": int(len(tx)),
    "null_cells": int(tx.isna().sum().sum()),
    "negative_qty": int((tx["qty"] < 0).sum()),
    "duplicate_tx_ids": int(tx["tx_id"].duplicated().sum()),
}
print(dq_report)
if dq_report["negative_qty"]:
    raise ValueError(f"{dq_report['negative_qty']:,} transactions have negative quantities (returns)")
print("all checks passed")

# %% Split sales and returns (uses dq_report from the failed cell)
sales = tx[tx["qty"] > 0].copy()
returns_df = tx[tx["qty"] < 0].copy()
assert len(returns_df) == dq_report["negative_qty"]
return_rate = len(returns_df) / len(tx)
print(f"sales rows {len(sales):,}, returns {len(returns_df):,} ({return_rate:.2%})")
returns_df.groupby("payment", observed=True)["revenue"].agg(["count", "sum"])

# %% Revenue by region and category (merge + groupby with named aggregation)
enriched = sales.merge(stores[["store_id", "region", "format"]], on="store_id", how="left", validate="many_to_one")
enriched = enriched.merge(products[["product_id", "category", "brand"]], on="product_id", how="left")
by_region_cat = (enriched.groupby(["region", "category"], observed=True)
                 .agg(revenue=("revenue", "sum"), margin=("margin", "sum"), units=("qty", "sum"),
                      baskets=("tx_id", "nunique"))
                 .assign(margin_pct=lambda d: 100 * d["margin"] / d["revenue"]))
by_region_cat.head(12)

# %% Slice the MultiIndex with IndexSlice
by_region_cat.loc[IndexSlice[["North", "West"], ["Electronics", "Grocery"]], ["revenue", "margin_pct"]]

# %% Store league table joined back to store attributes
store_perf = (enriched.groupby("store_id")
              .agg(revenue=("revenue", "sum"), customers=("customer_id", "nunique"), lines=("tx_id", "size")))
store_perf = store_perf.join(stores.set_index("store_id")[["region", "city", "size_sqft", "format"]])
store_perf["rev_per_sqft"] = store_perf["revenue"] / store_perf["size_sqft"]
store_perf["rank"] = store_perf["rev_per_sqft"].rank(ascending=False, method="first").astype(int)
store_perf.sort_values("rank").head(10)

# %% Monthly pivot table by region
enriched["month"] = enriched["ts"].dt.to_period("M")
monthly_pivot = enriched.pivot_table(index="month", columns="region", values="revenue", aggfunc="sum",
                                     observed=True, margins=True, margins_name="Total")
monthly_pivot

# %% Payment mix per format (crosstab, normalised)
pd.crosstab(enriched["format"], enriched["payment"], values=enriched["revenue"], aggfunc="sum", normalize="index")

# %% Daily and weekly revenue with resample on a DatetimeIndex
daily = sales.set_index("ts")["revenue"].resample("D").sum()
weekly = sales.set_index("ts").resample("W-SUN").agg({"revenue": "sum", "qty": "sum", "tx_id": "count"})
weekly.columns = ["revenue", "units", "lines"]
print(daily.index.freqstr, len(daily), "days;", len(weekly), "weeks")
weekly.tail(6)

# %% Rolling windows and exponential smoothing
trend = pd.DataFrame({"daily": daily})
trend["ma7"] = trend["daily"].rolling(7).mean()
trend["ma28"] = trend["daily"].rolling(28, min_periods=14).mean()
trend["ewm14"] = trend["daily"].ewm(span=14, adjust=False).mean()
trend["std28"] = trend["daily"].rolling("28D").std()
trend.loc["2023-11-20":"2023-12-03"]

# %% Weekday profile
dow = daily.groupby(daily.index.day_name()).mean()
dow = dow.reindex(["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"])
(dow / dow.mean()).rename("index_vs_avg")

# %% Top products (fails part-way: a misspelt column)
top_products = (enriched.groupby(["product_id", "category", "brand"], observed=True)["revenue"].sum()
                .nlargest(15).reset_index())
print(top_products.head())
top_products["share"] = top_products["revenue"] / enriched["revnue"].sum()

# %% Top products again, with the right column (top_products survives the failed cell)
top_products["share"] = top_products["revenue"] / enriched["revenue"].sum()
print(f"top 15 products = {top_products['share'].sum():.1%} of revenue")
top_products

# %% Customer RFM segmentation
as_of = sales["ts"].max().normalize() + pd.Timedelta(days=1)
rfm = sales.groupby("customer_id").agg(last=("ts", "max"), frequency=("tx_id", "count"), monetary=("revenue", "sum"))
rfm["recency"] = (as_of - rfm["last"]).dt.days
rfm["R"] = pd.qcut(rfm["recency"], 4, labels=[4, 3, 2, 1]).astype(int)
rfm["F"] = pd.qcut(rfm["frequency"].rank(method="first"), 4, labels=[1, 2, 3, 4]).astype(int)
rfm["M"] = pd.qcut(rfm["monetary"], 4, labels=[1, 2, 3, 4]).astype(int)
rfm["segment"] = np.select([(rfm.R >= 3) & (rfm.F >= 3), rfm.R >= 3, rfm.F >= 3], ["champion", "new", "at_risk"],
                           default="dormant")
rfm["segment"].value_counts().sort_index()

# %% Segment value
seg_dtype = CategoricalDtype(["champion", "at_risk", "new", "dormant"], ordered=True)
rfm["segment"] = rfm["segment"].astype(seg_dtype)
rfm.groupby("segment", observed=True)[["recency", "frequency", "monetary"]].agg(["mean", "median"])

# %% Monthly cohorts: share of customers active N months after their first purchase
first = sales.groupby("customer_id")["ts"].min().dt.to_period("M").rename("cohort")
act = sales[["customer_id", "ts"]].assign(month=sales["ts"].dt.to_period("M")).join(first, on="customer_id")
act["age"] = (act["month"] - act["cohort"]).apply(lambda off: off.n)
cohort_counts = act.groupby(["cohort", "age"])["customer_id"].nunique().unstack(fill_value=0)
retention = cohort_counts.div(cohort_counts[0], axis=0)
retention.iloc[:6, :7]

# %% Price bands with pd.cut
bands = pd.cut(enriched["unit_price"], bins=[0, 5, 20, 50, 150, np.inf], labels=["<5", "5-20", "20-50", "50-150", "150+"])
enriched.groupby(bands, observed=True).agg(lines=("tx_id", "size"), revenue=("revenue", "sum"),
                                           avg_discount=("discount", "mean"))

# %% Currency formatting helper reading module-level globals
def money(x):
    return f"{CURRENCY}{x:,.0f}"

print("total revenue:", money(sales["revenue"].sum()))
print("returns value:", money(-returns_df["revenue"].sum()))

# %% Report in euros: the helper picks up the rebound globals
CURRENCY = "EUR "
EUR_RATE = 0.92
print("total revenue:", money(sales["revenue"].sum() * EUR_RATE))
store_perf.nlargest(3, "revenue")["revenue"].mul(EUR_RATE).map(money)

# %% Write the store summary to CSV and the monthly pivot to JSON
store_summary = store_perf.reset_index()[["store_id", "region", "city", "format", "revenue", "customers", "rank"]]
store_summary.to_csv("store_summary.csv", index=False, float_format="%.2f")
monthly_out = monthly_pivot.drop(index="Total").drop(columns="Total")
monthly_out.index = monthly_out.index.astype(str)
monthly_out.to_json("monthly_region.json", orient="split", double_precision=2)
with open("dq_report.json", "w") as fh:
    json.dump({**dq_report, "return_rate": round(return_rate, 5)}, fh, indent=2, sort_keys=True)
print(sorted(p for p in os.listdir(".") if p.endswith((".csv", ".json"))))

# %% Read the files back and check the round trip
back = pd.read_csv("store_summary.csv", dtype={"region": region_dtype})
back_monthly = pd.read_json("monthly_region.json", orient="split")
with open("dq_report.json") as fh:
    dq_back = json.load(fh)
print("csv equal:", back["revenue"].round(2).equals(store_summary["revenue"].round(2)), back.shape)
print("json shape:", back_monthly.shape, "| dq:", dq_back["negative_qty"], dq_back["return_rate"])
back.head()

# %% Region totals from the file, displayed with the options set at the top
from_file = back.groupby("region", observed=True)["revenue"].agg(["sum", "mean", "count"])
from_file["share"] = from_file["sum"] / from_file["sum"].sum()
from_file

# %% Year-end summary
summary = pd.Series({
    "revenue": sales["revenue"].sum(),
    "margin": sales["margin"].sum(),
    "avg_basket": sales.groupby("tx_id")["revenue"].sum().mean(),
    "return_rate_pct": 100 * return_rate,
    "best_store": float(store_perf["rank"].idxmin()),
    "peak_day_rev": daily.max(),
}, name="FY2023")
print("peak day:", daily.idxmax().date(), "| date range:", date_range("2023-01-01", periods=3, freq="MS").strftime("%b").tolist())
summary
