"""Like with like across a round: submissions grouped by settings keys (same benchmark,
batch size, framework stack and accelerator by default), the spread within each group,
and per submission how unusual its olympic mean is.

Two numbers per submission, both one-sided (only "too fast" is suspicious):

- `robust_z`: the modified z-score of Iglewicz and Hoaglin, 0.6745 (x - median) / MAD,
  over the group's submissions (`rcpforge.analysis.stats.robust_z`), x being each submission's
  olympic mean divided by its RCP mean where every member of the group has one (so a
  grouping without batch size still compares like with like), else the olympic mean
  itself. Only for groups of at least `MIN_GROUP` submissions with an olympic mean.
- `p_value`: the probability that honest seeds give an olympic mean at least that fast:
  P(olympic mean of M honest runs <= the submission's), M its own run count and the
  olympic mean the checker's (the slowest and fastest run dropped; four each for UNet3D).
  `p_value_rcp`: the honest runs come from the RCP's own run distribution at that batch
  size (the record the verdict used, found or interpolated), modelled as a **lognormal**
  with the RCP's mean and stdev (samples to converge are positive and right-skewed; a
  normal with a wide RCP's stdev puts mass below zero). That mean and stdev are
  estimates from the RCP's n runs (2N for an interpolated one, as the checker counts),
  so the p is the posterior predictive of the fit (`p_lognormal`): an honest submission
  is not flagged for the RCP's own sampling error. The RCP's runs all converged, so the
  model has no failures; a submission's own non-converged runs count as the checker
  counts them (1e9, dropped as the slowest). No `p_value_rcp` where it would model
  nothing: a degenerate RCP (every run converged at one eval, stdev 0, as the 5.0
  Llama 3.1 405B one at batch size 1152), or the smallest RCP standing in for a batch
  size below it (a smaller batch legitimately converges in fewer samples).
  `p_value_pooled`: the honest runs are drawn with replacement from the pooled runs of
  the group's *other* submissions (non-converged ones included, as 1e9), on the scale of
  `robust_z`. `p_value` is the RCP one where there is one, else the pooled one.

The probabilities are Monte Carlo with a fixed seed (deterministic): one matrix of
`draws` x M uniforms is sorted row by row, and since a quantile function is monotone,
the sorted runs of any distribution are its quantile function of those sorted uniforms,
so every submission with M runs shares one set of draws (common random numbers; a
lognormal costs one exp per kept entry). The estimate is (hits + 1) / (draws + 1), never
0: with the default 50,000 draws the smallest p is 2e-5 and its standard error at
p = 0.001 about 1.4e-4.

Flagged: p_value below `p_threshold` or robust_z below -`z_threshold` (3.5, Iglewicz and
Hoaglin's cut-off); `flag_reason` gives the numbers."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from rcpforge.analysis.rcp_set import RcpError
from rcpforge.analysis.stats import robust_z

# keys a submission carries that a grouping may name
GROUP_KEYS = ("benchmark", "batch_size", "submitter", "system", "division", "framework", "accelerator",
              "accelerators_per_node", "nodes", "precision")
DEFAULT_GROUP_KEYS = ("benchmark", "batch_size", "framework", "accelerator")
MIN_GROUP = 3  # a robust z of two submissions is always +-0.6745: it says nothing
NOT_CONVERGED = 1e9  # the checker's value of a run that did not converge


@dataclass(frozen=True)
class FlagSettings:
    p_threshold: float = 0.001
    z_threshold: float = 3.5
    draws: int = 50_000
    seed: int = 0


def parse_group_keys(text: str | None) -> tuple[str, ...]:
    if text is None:
        return DEFAULT_GROUP_KEYS
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in keys if k not in GROUP_KEYS]
    if unknown or not keys:
        raise RcpError(f"--group-by {text!r}: unknown key {unknown[0] if unknown else '(none)'!r}; "
                       f"keys: {', '.join(GROUP_KEYS)}")
    return keys


def trim_of(benchmark) -> int:
    return 4 if benchmark == "unet3d" else 1


@functools.lru_cache(maxsize=8)
def _sorted_uniforms(m: int, trim: int, draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The kept (middle) columns of `draws` sorted rows of m uniforms, and their normal
    quantiles."""
    rng = np.random.default_rng([seed, m, trim])
    kept = np.sort(rng.random((draws, m)), axis=1)[:, trim : m - trim]
    kept = np.clip(kept, 1e-300, 1 - 1e-16)
    kept.setflags(write=False)
    normal = ndtri(kept)
    normal.setflags(write=False)
    return kept, normal


def _p(olympics: np.ndarray, observed: float) -> float:
    hits = int(np.count_nonzero(olympics <= observed * (1 + 1e-12)))
    return (hits + 1) / (len(olympics) + 1)


def p_lognormal(observed: float, m: int, trim: int, mean: float, stdev: float, rcp_runs: int | None = None,
                draws: int = 50_000, seed: int = 0) -> float | None:
    """P(olympic mean of m runs from a lognormal of this mean and stdev <= observed).
    With `rcp_runs` (the n runs the mean and stdev were measured on), the lognormal's
    log-mean and log-sd are themselves uncertain: each simulated submission first draws
    them from their posterior (Jeffreys prior: sigma^2 = (n - 1) s^2 / chi2(n - 1),
    mu ~ N(mu_hat, sigma^2 / n)), then its m runs: the posterior predictive."""
    if not math.isfinite(observed):
        return None
    olympics = lognormal_olympics(m, trim, mean, stdev, rcp_runs, draws, seed)
    return None if olympics is None else _p(olympics, observed)


def lognormal_olympics(m: int, trim: int, mean: float, stdev: float, rcp_runs: int | None = None,
                       draws: int = 50_000, seed: int = 0) -> np.ndarray | None:
    """The `draws` olympic means of honest m-run submissions that `p_lognormal` counts
    (None where it models nothing); `rcpforge.analysis.policy` flags whole arrays of submissions
    against them."""
    if m <= 2 * trim or not (mean > 0) or not math.isfinite(stdev) or stdev < 0:
        return None
    sigma2 = math.log1p((stdev / mean) ** 2)
    mu, sigma = math.log(mean) - sigma2 / 2, math.sqrt(sigma2)
    _, normal = _sorted_uniforms(m, trim, draws, seed)
    if rcp_runs is None or rcp_runs < 2:
        return np.exp(mu + sigma * normal).mean(axis=1)
    rng = np.random.default_rng([seed, m, trim, rcp_runs, 1])
    sigmas = sigma * np.sqrt((rcp_runs - 1) / rng.chisquare(rcp_runs - 1, draws))
    mus = mu + sigmas * rng.standard_normal(draws) / math.sqrt(rcp_runs)
    return np.exp(mus[:, None] + sigmas[:, None] * normal).mean(axis=1)


def p_pooled(observed: float, m: int, trim: int, pool: Sequence[float],
             draws: int = 50_000, seed: int = 0) -> float | None:
    """P(olympic mean of m runs drawn with replacement from `pool` <= observed)."""
    values = np.sort(np.asarray(pool, float))
    if m <= 2 * trim or len(values) < m or not math.isfinite(observed):
        return None
    kept, _ = _sorted_uniforms(m, trim, draws, seed)
    index = np.minimum((kept * len(values)).astype(np.int64), len(values) - 1)
    return _p(values[index].mean(axis=1), observed)


def group_label(row: dict, keys: Sequence[str]) -> str:
    return " / ".join("?" if row.get(k) is None else str(row[k]) for k in keys)


def assign_groups(rows: list[dict], keys: Sequence[str], settings: FlagSettings | None = None) -> None:
    """Adds group, group_size, score (the value compared: olympic mean / RCP mean, or the
    olympic mean), robust_z, p_value(_rcp, _pooled), flagged, flag_reason and the group's
    median score and spread (group_median, group_spread_pct) to every row (a submission
    of `rcpforge.analysis.round.verdicts`)."""
    settings = settings or FlagSettings()
    groups: dict[str, list[dict]] = {}
    for row in rows:
        row["group"] = group_label(row, keys)
        groups.setdefault(row["group"], []).append(row)
    for members in groups.values():
        _score_group(members, settings)
    for summary in group_summaries(rows):  # the group's spread on each of its submissions too
        for row in groups[summary["group"]]:
            row["group_median"], row["group_spread_pct"] = summary["median"], summary["spread_pct"]


def _score_group(members: list[dict], settings: FlagSettings) -> None:
    scaled = all(r["rcp_mean"] for r in members)
    scores = {}  # row index -> the compared value
    for i, r in enumerate(members):
        r["group_size"] = len(members)
        mean = r["olympic_mean"]
        r["score"] = None
        if mean is not None and math.isfinite(mean):
            scores[i] = r["score"] = mean / r["rcp_mean"] if scaled else mean
    z = dict(zip(scores, robust_z(list(scores.values())), strict=True)) if len(scores) >= MIN_GROUP else {}
    for i, r in enumerate(members):
        r["robust_z"] = None if i not in z else float(z[i])
        pool = [v / (o["rcp_mean"] if scaled else 1.0) for j, o in enumerate(members) if j != i
                for v in o["run_values"]]
        r["p_value_rcp"] = r["p_value_pooled"] = None
        if i in scores:
            m, trim = len(r["run_values"]), trim_of(r["benchmark"])
            # a stdev of 0 (a degenerate RCP) models nothing, and the smallest RCP standing in
            # for a smaller batch size is not that batch size's run distribution
            if r["rcp_mean"] and r.get("rcp_stdev") and r.get("rcp_used") in ("found", "interpolated"):
                r["p_value_rcp"] = p_lognormal(r["olympic_mean"], m, trim, r["rcp_mean"], r["rcp_stdev"],
                                               r.get("rcp_runs"), settings.draws, settings.seed)
            r["p_value_pooled"] = p_pooled(scores[i], m, trim, pool, settings.draws, settings.seed)
        r["p_value"] = r["p_value_rcp"] if r["p_value_rcp"] is not None else r["p_value_pooled"]
        _flag(r, settings)


def group_summaries(rows: list[dict]) -> list[dict]:
    """Per group (of `assign_groups`): its submissions, how many have a score, and the
    scores' median, MAD and spread (max - min, in percent of the median), and flags."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    out = []
    for label, members in groups.items():
        values = np.asarray([r["score"] for r in members if r["score"] is not None], float)
        med = float(np.median(values)) if len(values) else None
        out.append({"group": label, "submissions": len(members), "scored": len(values),
                    "scale": "vs RCP" if all(r["rcp_mean"] for r in members) else "raw",
                    "median": med, "mad": float(np.median(np.abs(values - med))) if med is not None else None,
                    "spread_pct": float((values.max() - values.min()) / med * 100) if med else None,
                    "flagged": sum(bool(r["flagged"]) for r in members)})
    return out


def _flag(row: dict, settings: FlagSettings) -> None:
    why = []
    p, z = row["p_value"], row["robust_z"]
    if p is not None and p < settings.p_threshold:
        source = "RCP lognormal" if row["p_value_rcp"] is not None else "group's pooled runs"
        why.append(f"p {p:.2g} < {settings.p_threshold:g} ({source}, {len(row['run_values'])} runs)")
    if z is not None and z < -settings.z_threshold:
        why.append(f"robust z {z:+.2f} < -{settings.z_threshold:g} in a group of {row['group_size']}")
    row["flagged"] = bool(why)
    row["flag_reason"] = "; ".join(why) or None

