"""The cheaters (`pick_mode`s) against independent brute force on small exact cases: every
run sequence or RCP of the 4-value, N = 4 RCP enumerated, and the vectorised pickers
against plain loops over a few hundred small random submissions."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
from scipy import stats

from rcpforge.analysis.policy.cases import rcp_set_cases
from rcpforge.analysis.policy.rules import parse_rule, preset_rules
from rcpforge.analysis.policy.simulate import PolicySettings, simulate_case
from rcpforge.analysis.policy.submitters import strategic_pick
from rcpforge.analysis.policy.thresholds import today
from rcpforge.analysis.policy.windows import best_windows, luckiest_stretches
from tests.analysis.policy.exact import exact, olympic_pmf, small_set

SIMS = 40_000


def _rows(rules, picks, modes, seed, sims=SIMS, factors=(1.0,)) -> dict:
    case = rcp_set_cases(small_set(), None, None, sims)[0]
    rows = simulate_case(case, PolicySettings(sims=sims, seed=seed, rules=tuple(rules), factors=factors,
                                              picks=picks, pick_modes=modes))
    return {(r["policy"], r["pick"], r["pick_mode"]): r for r in rows}


def _close(row: dict, probability: float) -> bool:
    return abs(row["caught"] - probability) < 4.5 * math.sqrt(probability * (1 - probability) / row["sims"]) + 1e-12


def _olympic(runs) -> float:
    """The olympic mean of 4 runs, written out: the middle two."""
    ordered = sorted(runs)
    return (ordered[1] + ordered[2]) / 2


def test_window_cheater_matches_every_sequence_of_its_runs():
    """N = 4, k = 2: 8 runs in order, the fastest of their 5 windows of 4 designated."""
    threshold = today(small_set(), 8, None).minimum
    values = sorted(small_set().full["small"].epochs)
    probs = {v: c / len(values) for v, c in Counter(values).items()}
    values_, chances = np.array(sorted(probs)), np.array([probs[v] for v in sorted(probs)])
    codes = np.stack(np.unravel_index(np.arange(4**8), (4,) * 8), axis=1)  # every sequence, 4^8
    sequences, weights = values_[codes], np.prod(chances[codes], axis=1)
    windows = np.sort(np.stack([sequences[:, i : i + 4] for i in range(5)], axis=1), axis=2)
    best = windows[:, :, 1:3].mean(axis=2).min(axis=1)  # each window's middle two; the fastest window
    caught = float(weights[best < threshold].sum())
    by = _rows([preset_rules()["today"]], (1, 2), ("window",), seed=11)
    honest = exact(values, 4, lambda s: _olympic(s) < threshold)
    assert _close(by[("today", 2, "window")], caught)
    assert caught > 1 - (1 - honest) ** 2 + 0.01  # its 5 windows see more than the best of 2 sets


def test_window_pickers_equal_plain_loops():
    rng = np.random.default_rng(4)
    runs = rng.choice([1.0, 2.0, 3.0, 5.0, np.inf], size=(200, 3, 6), p=[0.3, 0.3, 0.2, 0.15, 0.05])

    def score(window, n=3):  # N = 3: the olympic mean is the middle run; two failures: invalid
        return math.inf if sum(map(math.isinf, window)) > 1 else sorted(window)[1]

    def median_window(stretch, n=3):  # M = 6: 4 windows of 3, the lower middle one
        return sorted(score(stretch[i : i + n]) for i in range(len(stretch) - n + 1))[1]

    windows = best_windows(runs[:, :, :3].copy(), (1, 3), 3, 1)
    stretches = luckiest_stretches(runs, (2, 3), 3, 1)
    for i in range(len(runs)):
        sets = runs[i, :, :3].ravel().tolist()
        sequence = runs[i].ravel().tolist()
        assert windows[1][i] == score(sets[:3])
        assert windows[3][i] == min(score(sets[j : j + 3]) for j in range(7))
        for k in (2, 3):
            assert stretches[k][i] == min(median_window(sequence[j : j + 6]) for j in range((k - 1) * 6 + 1))


def test_strategic_picker_is_caught_only_where_no_set_passes():
    threshold = today(small_set(), 8, None).minimum
    honest = exact(sorted(small_set().full["small"].epochs), 4, lambda s: _olympic(s) < threshold)
    by = _rows([preset_rules()["today"]], (1, 2, 3), ("sets", "strategic"), seed=12)
    for k in (2, 3):
        assert _close(by[("today", k, "strategic")], honest**k)  # every one of its k sets rejected
        assert _close(by[("today", k, "sets")], 1 - (1 - honest) ** k)
    scores = np.random.default_rng(0).integers(0, 9, size=(300, 4)).astype(float)
    rejected = scores < 4
    chosen = strategic_pick(scores, rejected, 4)
    for i in range(len(scores)):
        passing = [s for s, r in zip(scores[i], rejected[i], strict=True) if not r]
        assert scores[i, chosen[i]] == (min(passing) if passing else scores[i].min())


def _precision_thresholds(values: list[float]) -> dict[float, tuple[float, float]]:
    """Every RCP of 2N = 8 runs of the candidate: {minimum acceptable mean: (probability,
    RCP mean)}, the checker's t-test written out (6 reference runs after the trim, 2
    submission runs)."""
    probs = {v: c / len(values) for v, c in Counter(values).items()}
    t = stats.t.ppf(0.95, 6)
    out: dict[float, tuple[float, float]] = {}
    for combo in itertools.combinations_with_replacement(sorted(probs), 8):
        counts = Counter(combo)
        ways = math.factorial(8) / math.prod(math.factorial(c) for c in counts.values())
        p = ways * math.prod(probs[v] ** c for v, c in counts.items())
        mean = float(np.mean(combo[1:7]))
        minimum = max(mean - t * float(np.std(combo)) * math.sqrt(1 / 6 + 1 / 2), 0.0)
        out[minimum] = (out.get(minimum, (0.0, mean))[0] + p, mean)
    return out


def test_poisoned_precision_rcp_lowers_the_threshold_as_enumeration_says():
    """Best of 2 submissions against the best of 2 precision RCPs (the lower minimum kept),
    against the same submissions before an honest RCP."""
    values = sorted(small_set().full["small"].epochs)
    thresholds = _precision_thresholds(values)
    below = {m: sum(p for x, (p, _) in thresholds.items() if x > m) for m in thresholds}  # P(one RCP's > m)
    best = Counter()
    for (a, pa), (b, pb) in itertools.product(olympic_pmf(values, 4, 1).items(), repeat=2):
        best[min(a, b)] += pa * pb
    honest_ref = sum(pb * p for x, pb in best.items() for m, (p, _) in thresholds.items() if x < m)
    # P(min of two RCP minimums = m) = P(>= m)^2 - P(> m)^2
    poisoned_min = {m: (below[m] + p) ** 2 - below[m] ** 2 for m, (p, _) in thresholds.items()}
    poisoned = sum(pb * p for x, pb in best.items() for m, p in poisoned_min.items() if x < m)
    by = _rows([preset_rules()["precision_rcp"]], (1, 2), ("sets", "poisoned"), seed=13)
    assert _close(by[("precision_rcp", 2, "sets")], honest_ref)
    assert _close(by[("precision_rcp", 2, "poisoned")], poisoned)
    assert poisoned < honest_ref - 0.02


def test_poisoned_factor_catches_no_more_and_equals_sets_where_nothing_is_measured():
    rules = [parse_rule("m0=3,norm=point"), preset_rules()["today"]]
    by = _rows(rules, (1, 5), ("sets", "poisoned"), seed=14, sims=4000, factors=(1.08,))
    sets, poisoned = by[("m0=3,norm=point", 5, "sets")], by[("m0=3,norm=point", 5, "poisoned")]
    assert poisoned["caught"] <= sets["caught"] and poisoned["caught"] < 0.5
    assert poisoned["advantage_kept_pct"] > sets["advantage_kept_pct"]  # a smaller factor normalizes less away
    assert by[("today", 5, "poisoned")] == {**by[("today", 5, "sets")], "pick_mode": "poisoned"}
