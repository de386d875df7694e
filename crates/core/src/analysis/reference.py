#!/usr/bin/env python3
"""Makes reference.json: scipy's answers on generated samples, which the
judge's tests compare with (scipy is a tool of this script, not a
dependency of the product).

    python3 -m venv /tmp/scipy && /tmp/scipy/bin/pip install scipy
    /tmp/scipy/bin/python crates/core/src/analysis/reference.py

The Hodges-Lehmann interval has no scipy function: it is computed here from
its textbook definition (order statistics of the pairwise differences at the
ranks the normal approximation of U gives), independently of the Rust code.
"""
import json
import os

import numpy as np
import scipy
from scipy import stats

rng = np.random.default_rng(20261207)


def rounded(v, places):
    return [round(float(x), places) for x in v]


def values_case(n1, n2, shift, ties):
    x = rng.lognormal(mean=np.log(100.0) + shift, sigma=0.3, size=n1)
    y = rng.lognormal(mean=np.log(100.0), sigma=0.3, size=n2)
    # Coarse values (whole milliseconds, or tens) give ties, as a
    # histogram's buckets do.
    places = -1 if ties else 3
    return rounded(x, places), rounded(y, places)


def hodges_lehmann(x, y, confidence):
    d = np.sort(np.subtract.outer(np.array(x), np.array(y)).ravel())
    n1, n2 = len(x), len(y)
    z = stats.norm.ppf(1 - (1 - confidence) / 2)
    k = int(np.floor(n1 * n2 / 2 - z * np.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)))
    k = min(max(k, 1), len(d))
    return float(np.median(d)), float(d[k - 1]), float(d[len(d) - k])


values = []
for n1, n2, shift, ties in [
    (8, 8, 0.0, False), (10, 12, 0.3, False), (20, 20, 0.0, True),
    (30, 25, 0.1, True), (50, 50, 0.2, False), (60, 40, -0.2, True),
    (100, 100, 0.05, False), (15, 40, 0.5, True), (200, 150, 0.0, True),
]:
    x, y = values_case(n1, n2, shift, ties)
    case = {"canary": x, "baseline": y}
    for alt in ["greater", "less", "two-sided"]:
        r = stats.mannwhitneyu(x, y, alternative=alt, method="asymptotic")
        case[alt] = {"u": float(r.statistic), "p": float(r.pvalue)}
    est, lo, hi = hodges_lehmann(x, y, 0.95)
    case["hodges_lehmann_95"] = {"estimate": est, "low": lo, "high": hi}
    values.append(case)

counts = []
for a, n1, c, n2 in [
    (0, 100, 0, 100), (0, 1000, 3, 1000), (5, 1000, 0, 1000),
    (12, 400, 3, 400), (1, 20, 0, 25), (30, 100000, 20, 100000),
    (150, 5000, 100, 5000), (7, 7, 0, 10), (2, 50, 9, 60),
]:
    case = {"canary": [a, n1], "baseline": [c, n2]}
    table = [[a, n1 - a], [c, n2 - c]]
    for alt in ["greater", "less", "two-sided"]:
        r = stats.fisher_exact(table, alternative=alt)
        case[alt] = float(r.pvalue)
    counts.append(case)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.json")
with open(out, "w") as f:
    json.dump({"scipy": scipy.__version__, "values": values, "counts": counts}, f, indent=1)
    f.write("\n")
print(f"wrote {out} (scipy {scipy.__version__})")
