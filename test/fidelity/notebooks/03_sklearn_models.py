# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---
# Model comparison on scikit-learn's bundled datasets (digits, breast cancer, wine, iris,
# diabetes, and synthetic ones).
# Fidelity notebook 03 (scikit-learn): fitted models and a dataset Bunch used in later cells,
# pipelines, grid search, cross-validation, a manifold, global display settings, a model refit
# in a cell that then fails, and a second failing cell.

# %% Imports
import numpy as np
import pandas as pd
import sklearn
from sklearn import set_config
from sklearn.datasets import (load_breast_cancer, load_diabetes, load_digits, load_iris, load_wine,
                              make_classification, make_regression)
from sklearn.decomposition import PCA
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
from sklearn.linear_model import LogisticRegression, Ridge, RidgeCV
from sklearn.manifold import Isomap
from sklearn.metrics import (accuracy_score, adjusted_rand_score, classification_report, confusion_matrix,
                             mean_absolute_error, r2_score, roc_auc_score)
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score, train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier, export_text

print("scikit-learn", sklearn.__version__)

# %% Notebook-wide settings
RANDOM_STATE = 0
np.set_printoptions(precision=4, suppress=True, linewidth=110)
pd.set_option("display.precision", 4)
pd.set_option("display.max_colwidth", 40)
pd.set_option("display.max_columns", 10)
pd.set_option("display.width", 130)
print(np.get_printoptions()["precision"], pd.get_option("display.max_columns"))
scores = {}  # model name -> held-out score, filled in as we go

# %% Load the digits dataset (the Bunch is used throughout)
digits = load_digits()
print(type(digits).__name__, sorted(digits.keys()))
print(digits.data.shape, digits.images.shape, digits.target_names)
print(digits.DESCR.splitlines()[0])
np.bincount(digits.target)

# %% Train/test split, stratified
X_train, X_test, y_train, y_test = train_test_split(
    digits.data, digits.target, test_size=0.25, stratify=digits.target, random_state=RANDOM_STATE)
X_train.shape, X_test.shape

# %% Scaled logistic regression in a pipeline
logreg = Pipeline([("scale", StandardScaler()), ("clf", LogisticRegression(C=0.5, max_iter=3000))])
logreg.fit(X_train, y_train)
scores["digits/logreg"] = logreg.score(X_test, y_test)
print(f"digits logistic regression accuracy: {scores['digits/logreg']:.4f}")
logreg

# %% Confusion matrix and per-class report
y_pred_lr = logreg.predict(X_test)
cm = confusion_matrix(y_test, y_pred_lr)
print(pd.DataFrame(cm, index=[f"true {d}" for d in digits.target_names], columns=digits.target_names))
print(classification_report(y_test, y_pred_lr, digits=3))

# %% Random forest on the same split
rf = RandomForestClassifier(n_estimators=100, random_state=RANDOM_STATE)
rf.fit(X_train, y_train)
scores["digits/rf"] = rf.score(X_test, y_test)
print(f"random forest accuracy: {scores['digits/rf']:.4f}, trees: {len(rf.estimators_)}, "
      f"mean depth: {np.mean([e.get_depth() for e in rf.estimators_]):.2f}")

# %% Which pixels matter? (feature_importances_ as an 8x8 image)
imp = rf.feature_importances_.reshape(8, 8)
print((imp * 1000).round(1))
top_pixels = np.argsort(rf.feature_importances_)[::-1][:5]
top_pixels

# %% The forest's mistakes, drawn from the Bunch's images
proba = rf.predict_proba(X_test)
wrong = np.flatnonzero(rf.predict(X_test) != y_test)
print(f"{len(wrong)} mistakes; first few (true -> predicted, confidence):")
for i in wrong[:5]:
    print(f"  {y_test[i]} -> {rf.classes_[proba[i].argmax()]}  ({proba[i].max():.2f})")
idx = int(np.flatnonzero((digits.data == X_test[wrong[0]]).all(axis=1))[0])
print("\n".join("".join(" .:-=+*#%@"[int(v * 9 / 16)] for v in row) for row in digits.images[idx]))

# %% Isomap embedding of a 500-image subsample
sub = np.random.default_rng(RANDOM_STATE).choice(len(digits.data), 500, replace=False)
# Pixels are integers, so many pairwise distances tie exactly; a tiny jitter breaks the ties so the
# neighbour graph does not depend on how many threads the search used.
jitter = np.random.default_rng(RANDOM_STATE + 1)
iso = Isomap(n_neighbors=10, n_components=2, eigen_solver="dense")
emb = iso.fit_transform(digits.data[sub] + jitter.normal(0, 1e-6, (len(sub), 64)))
print(emb.shape, iso.reconstruction_error().round(3))
pd.DataFrame(emb, columns=["c1", "c2"]).assign(digit=digits.target[sub]).groupby("digit").mean().round(2)

# %% Project held-out images with the fitted Isomap and classify by nearest centroid
centroids = np.vstack([emb[digits.target[sub] == d].mean(axis=0) for d in range(10)])
emb_test = iso.transform(X_test[:200] + jitter.normal(0, 1e-6, (200, 64)))
nearest = np.argmin(((emb_test[:, None, :] - centroids[None]) ** 2).sum(axis=2), axis=1)
scores["digits/isomap-centroid"] = accuracy_score(y_test[:200], nearest)
print(f"2-D isomap nearest-centroid accuracy: {scores['digits/isomap-centroid']:.3f}")
emb_test[:4]

# %% PCA: how many components keep 95% of the variance?
pca = PCA(n_components=0.95, svd_solver="full").fit(digits.data)
print(pca.n_components_, "components;", pca.explained_variance_ratio_[:5])
pca.explained_variance_ratio_.cumsum()[[4, 9, 19]]

# %% Breast cancer data as a DataFrame
bc = load_breast_cancer(as_frame=True)
bc_X, bc_y = bc.data, bc.target
Xb_train, Xb_test, yb_train, yb_test = train_test_split(bc_X, bc_y, test_size=0.3, stratify=bc_y,
                                                        random_state=RANDOM_STATE)
print(bc_X.shape, dict(zip(bc.target_names.tolist(), np.bincount(bc_y).tolist())))
bc_X.iloc[:3, :6]

# %% Grid search over a scaled logistic regression (small grid, 3 folds)
bc_pipe = make_pipeline(StandardScaler(), LogisticRegression(solver="liblinear", max_iter=500, random_state=RANDOM_STATE))
grid = GridSearchCV(bc_pipe, {"logisticregression__C": [0.01, 0.1, 1.0, 10.0],
                              "logisticregression__penalty": ["l1", "l2"]}, cv=3, scoring="roc_auc")
grid.fit(Xb_train, yb_train)
print("best:", grid.best_params_, f"cv AUC {grid.best_score_:.4f}")
cvres = pd.DataFrame(grid.cv_results_)[["param_logisticregression__C", "param_logisticregression__penalty",
                                        "mean_test_score", "std_test_score", "rank_test_score"]]
cvres.sort_values("rank_test_score").head(5)

# %% Evaluate the best estimator on the test set
best_bc = grid.best_estimator_
bc_proba = best_bc.predict_proba(Xb_test)[:, 1]
scores["bc/logreg-grid"] = roc_auc_score(yb_test, bc_proba)
coefs = pd.Series(best_bc[-1].coef_[0], index=bc_X.columns)
print(f"test AUC {scores['bc/logreg-grid']:.4f}; non-zero coefficients: {(coefs != 0).sum()}")
coefs.reindex(coefs.abs().sort_values(ascending=False).index).head(6)

# %% Refit with stronger regularisation, then look up a coefficient (fails: wrong feature name)
best_bc.set_params(logisticregression__C=0.05)
best_bc.fit(Xb_train, yb_train)
refit_auc = roc_auc_score(yb_test, best_bc.predict_proba(Xb_test)[:, 1])
print(f"refit with C=0.05: test AUC {refit_auc:.4f}")
weights = dict(zip(bc_X.columns, best_bc[-1].coef_[0]))
print("worst radius weight:", weights["worst_radius"])

# %% The refit model survives the failed cell
print("C now:", best_bc.named_steps["logisticregression"].C, "| penalty:", best_bc[-1].penalty)
print("non-zero coefficients after refit:", int((best_bc[-1].coef_ != 0).sum()))
scores["bc/logreg-refit"] = refit_auc
round(best_bc.score(Xb_test, yb_test), 4), round(weights["worst radius"], 4)

# %% Wine: cross-validated comparison of two models
wine = load_wine()
skf = StratifiedKFold(n_splits=5, shuffle=True, random_state=1)
cv_lr = cross_val_score(make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)), wine.data, wine.target, cv=skf)
cv_rf = cross_val_score(RandomForestClassifier(n_estimators=60, random_state=RANDOM_STATE), wine.data, wine.target, cv=skf)
print("logreg folds:", cv_lr.round(3), f"mean {cv_lr.mean():.3f} +/- {cv_lr.std():.3f}")
print("forest folds:", cv_rf.round(3), f"mean {cv_rf.mean():.3f} +/- {cv_rf.std():.3f}")
scores["wine/logreg-cv"], scores["wine/rf-cv"] = cv_lr.mean(), cv_rf.mean()

# %% Iris: a shallow decision tree, printed as rules
iris = load_iris()
tree_clf = DecisionTreeClassifier(max_depth=3, random_state=RANDOM_STATE).fit(iris.data, iris.target)
print(export_text(tree_clf, feature_names=[n.replace(" (cm)", "") for n in iris.feature_names]))
tree_clf.feature_importances_

# %% Iris: k-means clusters vs the species
km = cluster.KMeans(n_clusters=3, n_init=10, random_state=RANDOM_STATE).fit(iris.data)
print("ARI vs species:", round(adjusted_rand_score(iris.target, km.labels_), 4))
pd.crosstab(pd.Series(iris.target_names[iris.target], name="species"), pd.Series(km.labels_, name="cluster"))

# %% Diabetes: ridge regression with a hand-picked alpha and with RidgeCV
diab = load_diabetes(scaled=True)
Xd_train, Xd_test, yd_train, yd_test = train_test_split(diab.data, diab.target, test_size=0.25,
                                                        random_state=RANDOM_STATE)
ridge = Ridge(alpha=1.0).fit(Xd_train, yd_train)
ridge_cv = RidgeCV(alphas=np.logspace(-3, 2, 20)).fit(Xd_train, yd_train)
scores["diabetes/ridge"] = r2_score(yd_test, ridge.predict(Xd_test))
scores["diabetes/ridgecv"] = r2_score(yd_test, ridge_cv.predict(Xd_test))
print(f"R2 ridge(1.0) {scores['diabetes/ridge']:.4f} | RidgeCV alpha={ridge_cv.alpha_:.4f} R2 {scores['diabetes/ridgecv']:.4f}")
pd.Series(ridge_cv.coef_, index=diab.feature_names).round(2)

# %% Synthetic regression with gradient boosting
Xr, yr, true_coef = make_regression(n_samples=2000, n_features=12, n_informative=5, noise=15.0, coef=True,
                                    random_state=RANDOM_STATE)
Xr_train, Xr_test, yr_train, yr_test = train_test_split(Xr, yr, random_state=RANDOM_STATE)
gbr = GradientBoostingRegressor(n_estimators=100, max_depth=3, learning_rate=0.1, subsample=0.8,
                                random_state=RANDOM_STATE).fit(Xr_train, yr_train)
scores["synth/gbr"] = r2_score(yr_test, gbr.predict(Xr_test))
print(f"GBR R2 {scores['synth/gbr']:.4f}, MAE {mean_absolute_error(yr_test, gbr.predict(Xr_test)):.2f}")
print("informative features:", np.flatnonzero(true_coef))
np.argsort(gbr.feature_importances_)[::-1][:5]

# %% Staged predictions: test R2 as trees are added
staged = [float(r2_score(yr_test, p)) for p in gbr.staged_predict(Xr_test)]
print([round(staged[k], 3) for k in (0, 9, 29, 59, 99)])
int(np.argmax(staged)) + 1

# %% Imbalanced synthetic classification: class weights
Xc, yc = make_classification(n_samples=4000, n_features=20, n_informative=6, weights=[0.9, 0.1], flip_y=0.02,
                             class_sep=0.8, random_state=RANDOM_STATE)
Xc_train, Xc_test, yc_train, yc_test = train_test_split(Xc, yc, stratify=yc, random_state=RANDOM_STATE)
plain = LogisticRegression(max_iter=1000).fit(Xc_train, yc_train)
balanced = LogisticRegression(max_iter=1000, class_weight="balanced").fit(Xc_train, yc_train)
for name, model in [("plain", plain), ("balanced", balanced)]:
    pred = model.predict(Xc_test)
    tn, fp, fn, tp = confusion_matrix(yc_test, pred).ravel()
    print(f"{name:9s} recall {tp / (tp + fn):.3f} precision {tp / (tp + fp):.3f} AUC "
          f"{roc_auc_score(yc_test, model.predict_proba(Xc_test)[:, 1]):.4f}")
scores["synth/balanced-auc"] = roc_auc_score(yc_test, balanced.predict_proba(Xc_test)[:, 1])

# %% Score the digits forest on the cancer data by mistake (fails: 30 features, not 64)
bc_scaled = StandardScaler().fit(Xb_train).transform(Xb_test)
bc_margin = best_bc.decision_function(Xb_test)
print("cancer margins:", np.round(bc_margin[:5], 3))
rf_on_bc = rf.predict(bc_scaled)

# %% Carry on with what the failed cell computed
print(bc_scaled.shape, "| mean |margin|:", round(float(np.abs(bc_margin).mean()), 4))
(bc_margin > 0).astype(int)[:20]

# %% Show every estimator parameter from now on
set_config(print_changed_only=False)
print(sklearn.get_config()["print_changed_only"])

# %% The repr of a fitted tree now lists all parameters
tree_clf

# %% Forest predictions for the first test digits, checked against the logistic pipeline
agree = (rf.predict(X_test) == logreg.predict(X_test)).mean()
print(f"forest and logistic regression agree on {agree:.1%} of test digits")
rf.predict(X_test[:12]), y_test[:12]

# %% Scoreboard
board = pd.Series(scores, name="score").sort_values(ascending=False)
board
