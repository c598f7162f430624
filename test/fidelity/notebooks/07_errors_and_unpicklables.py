# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Sensor log triage: a messy working session
# A realistic exploratory session over a week of readings from 8 sensors: several cells fail
# half-way (the names they bound before the failure stay usable), a name is deleted, a function
# is redefined, and a few live resources are kept at top level (a generator, an open log file,
# a lock, an in-memory SQLite database). Those cannot be pickled, so a restored session cannot
# carry them: cells that use them later are marked with a `# fidelity:` comment.

# %% Imports
import math
import sqlite3
import statistics as st
import threading

import numpy as np
import pandas as pd

pd.set_option("display.width", 120)
pd.set_option("display.precision", 4)
pd.set_option("display.max_columns", 12)
SENSORS = [f"S{i:02d}" for i in range(8)]
print(len(SENSORS), "sensors;", "statistics alias:", st.__name__)

# %% Simulated readings: one week at 1-minute resolution, 8 sensors (80k values)
rng = np.random.default_rng(1234)
minutes = 7 * 24 * 60
t = np.arange(minutes)
base_temp = 21 + 3 * np.sin(2 * np.pi * t / 1440 - 1.2)
temps = base_temp[:, None] + rng.normal(0, 0.4, (minutes, len(SENSORS))) + np.linspace(-1.5, 1.5, len(SENSORS))
temps[rng.integers(0, minutes, 40), rng.integers(0, len(SENSORS), 40)] = 85.0  # stuck-at-max glitches
temps[5000:5180, 3] = np.nan  # S03 offline for three hours
print(temps.shape, temps.dtype, f"{temps.nbytes / 1024:.0f} KiB")
readings = pd.DataFrame(temps, columns=SENSORS, index=pd.date_range("2024-03-04", periods=minutes, freq="min"))
readings.iloc[:3].round(3)

# %% Per-sensor summary
summary = readings.agg(["mean", "std", "min", "max", "count"]).T
summary["missing"] = minutes - summary["count"].astype(int)
summary.round(3)

# %% Use the previous result through _
worst = _["max"].idxmax()
flagged = _.index[_["max"] > 60].tolist()
print("hottest reading on", worst, "| sensors with glitches:", len(flagged))
len(flagged)

# %% Fault rate: several names bound, then a division by zero
total_rows = len(readings) * len(SENSORS)
glitch_mask = readings.to_numpy() > 60
n_glitches = int(glitch_mask.sum())
glitch_hours = sorted({int(h) for h in np.nonzero(glitch_mask)[0] // 60})
hours_with_outage = 0
print(f"{n_glitches} glitches in {len(glitch_hours)} distinct hours out of {total_rows} values")
glitches_per_outage_hour = n_glitches / hours_with_outage

# %% The counts from the failed cell are still here
print(total_rows, n_glitches, glitch_hours[:5])
round(100 * n_glitches / total_rows, 4)

# %% Calibration from a config dict (the humidity key does not exist: KeyError)
calibration = {"S00": 0.98, "S01": 1.01, "S02": 1.00, "S03": 0.97, "S04": 1.02, "S05": 1.00, "S06": 0.99, "S07": 1.03}
thresholds = {"temp_high": 60.0, "temp_low": -20.0, "flatline_minutes": 30}
gains = np.array([calibration[s] for s in SENSORS])
calibrated = readings * gains
print("calibrated:", calibrated.shape, "mean", round(float(np.nanmean(calibrated.to_numpy())), 4))
humidity_limit = thresholds["humidity_high"]

# %% Calibration survived; use the thresholds that do exist
hot = calibrated.gt(thresholds["temp_high"])
print("hot values after calibration:", int(hot.to_numpy().sum()), "| keys:", sorted(thresholds))
calibrated.mean().round(3)

# %% Clean: mask glitches, interpolate short gaps, then a failed assert on the range
clean = calibrated.mask(calibrated > thresholds["temp_high"])
clean = clean.interpolate(limit=30, limit_direction="both")
still_missing = clean.isna().sum()
print("remaining NaN per sensor:", still_missing[still_missing > 0].to_dict())
assert clean.notna().all().all(), "the S03 outage is longer than the interpolation limit"

# %% Continue with the partially cleaned frame from the failed cell
clean = clean.interpolate(method="time")
print("NaN left:", int(clean.isna().sum().sum()))
clean.describe().loc[["mean", "min", "max"]].round(3)

# %% Hourly batches: the accumulation stops half-way (statistics error inside the loop)
hourly_means = []
batch_log = []
raw_copy = readings.copy()
raw_copy.iloc[6 * 60:7 * 60, :] = np.nan  # a full hour dropped by the gateway
for hour in range(12):
    block = raw_copy.iloc[hour * 60:(hour + 1) * 60].to_numpy().ravel()
    values = [float(v) for v in block if not math.isnan(v)]
    batch_log.append((hour, len(values)))
    hourly_means.append(round(st.mean(values), 4))

# %% What the loop accumulated before it failed
print("hours done:", len(hourly_means), "log entries:", len(batch_log), "last:", batch_log[-1])
print("median of hourly means:", st.median(hourly_means), " stdev:", round(st.stdev(hourly_means), 4))
hourly_means

# %% Free the copy
print(f"raw_copy holds {raw_copy.memory_usage().sum() / 1e6:.2f} MB; deleting it")
del raw_copy

# %% Check which working frames are still around
[name for name in ("readings", "calibrated", "clean", "raw_copy") if name in globals()]

# %% Was the copy really deleted?
'raw_copy' in globals()

# %% Smoothing window: rebind, then a typo in the parse (ValueError)
window = 15
smooth = clean.rolling(window, center=True, min_periods=1).mean()
window = 45
window_label = "45min"
window = int("45 min")

# %% The rebinding before the error sticks: window is 45, smooth still used 15
print("window:", window, window_label, "| smooth computed with 15, shape", smooth.shape)
smooth = clean.rolling(window, center=True, min_periods=1).mean()
(clean - smooth).abs().max().round(3)

# %% A scoring function
def anomaly_score(frame):
    z = (frame - frame.mean()) / frame.std()
    return z.abs().max()


anomaly_score(clean).round(3)

# %% Redefine the scoring function (robust version) and rescore
def anomaly_score(frame):
    med = frame.median()
    mad = (frame - med).abs().median() * 1.4826
    return ((frame - med) / mad).abs().quantile(0.999)


scores = anomaly_score(clean).round(3)
print("robust score, highest:", scores.idxmax())
scores

# %% Daily profile with an FFT
signal = clean["S00"].to_numpy()
spectrum = np.abs(np.fft.rfft(signal - signal.mean()))
freqs = np.fft.rfftfreq(len(signal), d=1.0)  # cycles per minute
top_k = np.argsort(spectrum)[::-1][:3]
print("dominant periods (hours):", [round(float(1 / freqs[k] / 60), 2) for k in top_k])
round(float(spectrum[top_k[0]] / spectrum.sum()), 5)

# %% A generator over the squared hours (lazy)
gen = (i * i for i in range(10))
first_square = next(gen)
print("first value:", first_square)
first_square

# %% Pull the next value from the generator
# fidelity: gen is a generator, which cannot be pickled, so a restored session does not have it
second_square = next(gen)
third_square = next(gen)
print(second_square, third_square)
list(gen)

# %% A chunked reader written as a generator function
def iter_days(frame):
    for day, block in frame.groupby(frame.index.date):
        yield str(day), block


days = iter_days(clean)
day_name, day_block = next(days)
print(day_name, day_block.shape)
day_block.mean().round(3).to_dict()

# %% Continue the day reader
# fidelity: days is a generator, which cannot be pickled, so a restored session does not have it
daily_max = {}
for day_name, day_block in days:
    daily_max[day_name] = round(float(day_block.to_numpy().max()), 3)
daily_max

# %% Open a triage log and keep it open
fh = open("log.txt", "w", encoding="utf-8")
fh.write("sensor triage log\n")
print("log open:", not fh.closed, "| mode:", fh.mode, "| name:", fh.name)

# %% Append findings to the open log
# fidelity: fh is an open file, which cannot be pickled, so a restored session does not have it
for sensor in SENSORS:
    fh.write(f"{sensor}: glitches={int(glitch_mask[:, SENSORS.index(sensor)].sum())} robust_score={scores[sensor]}\n")
fh.write(f"window={window}\n")
print("lines buffered, file still open:", not fh.closed)

# %% Close the log and read it back
# fidelity: fh is an open file, which cannot be pickled; its writes and the close are lost in a restored session
fh.close()
with open("log.txt", encoding="utf-8") as f:
    log_lines = f.read().splitlines()
print(len(log_lines), "lines")
log_lines[:3]

# %% A lock for the worker threads
lock = threading.Lock()
processed = []


def worker(sensor):
    peak = float(clean[sensor].max())
    with lock:
        processed.append((sensor, round(peak, 3)))


threads = [threading.Thread(target=worker, args=(s,)) for s in SENSORS]
for th in threads:
    th.start()
for th in threads:
    th.join()
del threads, th
sorted(processed)

# %% Use the lock again from the main thread
# fidelity: lock is a threading.Lock, which cannot be pickled, so a restored session does not have it
with lock:
    processed.append(("ALL", round(float(clean.to_numpy().max()), 3)))
print("lock free again:", not lock.locked())
len(processed)

# %% An in-memory SQLite database for ad-hoc queries
con = sqlite3.connect(":memory:")
hourly = clean.resample("h").mean().round(4)
hourly_long = hourly.stack().rename("temp").reset_index()
hourly_long.columns = ["ts", "sensor", "temp"]
hourly_long["ts"] = hourly_long["ts"].dt.strftime("%Y-%m-%d %H:%M")
con.execute("CREATE TABLE hourly (ts TEXT, sensor TEXT, temp REAL)")
con.executemany("INSERT INTO hourly VALUES (?, ?, ?)", hourly_long.itertuples(index=False, name=None))
con.commit()
con.execute("SELECT COUNT(*), COUNT(DISTINCT sensor) FROM hourly").fetchone()

# %% Query the database
# fidelity: con is a sqlite3 connection, which cannot be pickled, so a restored session does not have it
q = """
SELECT sensor, ROUND(AVG(temp), 3) AS avg_temp, ROUND(MAX(temp), 3) AS max_temp
FROM hourly
WHERE substr(ts, 12, 2) BETWEEN '12' AND '18'
GROUP BY sensor ORDER BY avg_temp DESC
"""
afternoon = pd.read_sql_query(q, con)
afternoon.head(4)

# %% One more query, then close the connection
# fidelity: con is a sqlite3 connection, which cannot be pickled, so a restored session does not have it
n_hot_hours = con.execute("SELECT COUNT(*) FROM hourly WHERE temp > 23.5").fetchone()[0]
con.close()
print("hot sensor-hours:", n_hot_hours)
n_hot_hours

# %% Final report from picklable state only
report = pd.DataFrame({
    "glitches": glitch_mask.sum(axis=0),
    "robust_score": scores,
    "mean_clean": clean.mean().round(3),
    "peak_thread": pd.Series(dict(p for p in processed if p[0] != "ALL")),
})
report["status"] = np.where(report["glitches"] > 5, "inspect", "ok")
print("window:", window, "| first square:", first_square, "| hourly means kept:", len(hourly_means))
report.sort_values("glitches", ascending=False)
