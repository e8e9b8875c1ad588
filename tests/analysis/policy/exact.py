"""Small exact cases the policy tests enumerate: an RCP of 8 runs on 4 values (N = 4),
and the exact probabilities of what N runs drawn from it with replacement do."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np

from rcpforge.analysis.rcp_set import RcpSet


def small_set() -> RcpSet:
    """2N = 8 runs on 4 values (N = 4): an RCP small enough to enumerate."""
    runs = [100.0, 110.0, 110.0, 120.0, 120.0, 120.0, 130.0, 130.0]
    raw = {"small": {"Benchmark": "llama31_8b", "BS": 8, "Hyperparams": {}, "Epochs to converge": runs}}
    return RcpSet(raw, "llama31_8b", submission_runs=4)


def exact(values: list[float], n: int, accept) -> float:
    """P(accept(sorted runs)) over every multiset of n runs drawn with replacement."""
    probs = {v: c / len(values) for v, c in Counter(values).items()}
    total = 0.0
    for combo in itertools.combinations_with_replacement(sorted(probs), n):
        counts = Counter(combo)
        ways = math.factorial(n) / math.prod(math.factorial(c) for c in counts.values())
        total += ways * math.prod(probs[v] ** c for v, c in counts.items()) * accept(list(combo))
    return total


def olympic_pmf(values: list[float], n: int, trim: int) -> dict[float, float]:
    """The exact distribution of an N-run submission's olympic mean."""
    probs = {v: c / len(values) for v, c in Counter(values).items()}
    pmf: Counter = Counter()
    for combo in itertools.combinations_with_replacement(sorted(probs), n):
        counts = Counter(combo)
        ways = math.factorial(n) / math.prod(math.factorial(c) for c in counts.values())
        pmf[float(np.mean(combo[trim : n - trim]))] += ways * math.prod(probs[v] ** c for v, c in counts.items())
    return dict(pmf)
