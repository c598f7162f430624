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
# # Churn model: a session that runs out of memory half-way
# A quick sequence of cells builds a customer table, engineers features and fits models
# without random_state (they draw from numpy's global generator, seeded once), then one
# cell asks for far more memory than the sandbox has and is killed. The cells after it
# go on with what the cells before it bound, as a session does that resumes its last
# answered state: the same outcomes as with every state stored before its answer.

# %% Imports and one global seed
import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import classification_report, roc_auc_score
from sklearn.model_selection import train_test_split

np.random.seed(11)
pd.set_option("display.width", 120)
pd.set_option("display.precision", 3)
print("seeded")

# %% A customer table of 50k rows
n = 50_000
customers = pd.DataFrame({
    "tenure": np.random.exponential(24, n).round(1),
    "monthly": np.random.gamma(3.0, 20.0, n).round(2),
    "tickets": np.random.poisson(1.2, n),
    "plan": np.random.choice(["basic", "plus", "pro"], n, p=[0.5, 0.35, 0.15]),
})
logit = -1.2 - 0.04 * customers.tenure + 0.01 * customers.monthly + 0.35 * customers.tickets
customers["churned"] = np.random.random_sample(n) < 1 / (1 + np.exp(-logit))
customers.describe().loc[["mean", "std"]]

# %% Features
features = pd.get_dummies(customers.drop(columns="churned"), columns=["plan"], dtype=float)
target = customers.churned.astype(int)
X_train, X_test, y_train, y_test = train_test_split(features, target, test_size=0.3, stratify=target)
X_train.shape, round(y_train.mean(), 4)

# %% A baseline
baseline = LogisticRegression(max_iter=500).fit(X_train, y_train)
round(roc_auc_score(y_test, baseline.predict_proba(X_test)[:, 1]), 4)

# %% A forest without random_state: it draws from the global generator
forest = RandomForestClassifier(n_estimators=30, max_depth=8, n_jobs=1).fit(X_train, y_train)
scores = {"baseline": roc_auc_score(y_test, baseline.predict_proba(X_test)[:, 1]),
          "forest": roc_auc_score(y_test, forest.predict_proba(X_test)[:, 1])}
{name: round(value, 4) for name, value in scores.items()}

# %% A sample of the customers, also from the global generator
sample = customers.sample(5)
sample

# %% An out-of-memory cell: a dense 30000 x 30000 matrix of floats (7 GB)
# fidelity-kills: oom
similarity = np.ones((30_000, 30_000)) * features.tenure.mean()

# %% The names bound before it are all here
print(customers.shape, X_train.shape, sorted(scores))
"similarity" in globals()

# %% A second forest, unseeded: the global generator goes on where the session left it
forest2 = RandomForestClassifier(n_estimators=30, max_depth=8, n_jobs=1).fit(X_train, y_train)
print(classification_report(y_test, forest2.predict(X_test), digits=3))

# %% Scores of the three models
scores["forest2"] = roc_auc_score(y_test, forest2.predict_proba(X_test)[:, 1])
pd.Series(scores).round(4).sort_values()

# %% More draws from the global generator
np.random.randint(0, 1000, 5), customers.sample(3).index.tolist()
