"""Adaptive against fixed campaigns, simulated on real run distributions.

Each simulated campaign takes one benchmark's reference runs at its smallest and largest
batch size (the samples- or epochs-to-converge lists of the 5.1.0 and 6.0.0 RCP files
that mlperf_logging ships), and makes candidate recipes from them by scaling every draw
by a known factor: FP8-like recipes (1.00 to 1.05) and FP4-like ones (1.3 to 1.8, a few
of whose runs do not converge). The same campaigns are run twice, asked the same
question (a verdict against the margin 1.02, equivalence within --equivalence, and with
--half-width a precision) and judged the same way:

- fixed: 2N runs per cell (MLPerf's design), the factor's interval as `rcpforge analyze`
  reports it (`rcpforge.analysis.factors.bootstrap_interval`, the expanded percentile bootstrap);
- adaptive: `orchestrator/adaptive.py`'s looks and allocator with `analysis/
  sequential.py`'s repeated confidence intervals (--spending, calibrated by default),
  futility stops unless --no-futility, max_seeds 2N + --extra-seeds.

Printed side by side per benchmark and in all: coverage of the reported intervals (of
the true factor), wrong verdicts (a verdict on the wrong side of the margin, or
equivalence declared for a factor outside the band), the median relative half-width,
runs in all, and the answered rate (the share of comparisons whose reported interval
answers the question); for the adaptive design, the share of each stop reason and, as a
diagnostic, the coverage of the interval its runs at the stop would give at one look's
95% (`coverage_adaptive_one_look`: what an analysis that ignores the looks reports), and
of that interval at first-look stops with the repeated one elsewhere
(`coverage_adaptive_first_one_look`).

What bounds the figures (`bounds` in the JSON): where each design's runs go and what
each kind of comparison gets answered (`runs_by_kind_*`, `answered_by_kind_*`: the
reference, FP8-like and FP4-like cells); the coverage of the stopping intervals by the
look they stopped at (first or later); and, with --joint, the boundaries' own
guarantee measured on the same runs: the same campaigns replayed with a question no
look can answer, so every comparison looks up to max_seeds, and the share of them whose
intervals cover the truth at every look (`coverage_adaptive_every_look`, nominal 95%).
--fixed-runs N runs the fixed design at N runs a cell instead of 2N (what a one-look
design answers on fewer runs); --first-look-share and --df-shift change the calibrated
spending's two constants (`rcpforge.analysis.sequential.FIRST_LOOK_SHARE`, `CALIBRATED_DF_SHIFT`)
for this run only, to measure what each buys and costs.

    python benchmarks/adaptive.py [--campaigns 1000] [--mix fp4_study|survey] [--json FILE] [--seed 0]
                                  [--joint] [--fixed-runs N] [--first-look-share S] [--df-shift D]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy import stats  # noqa: E402

import rcpforge.orchestrator.adaptive as adaptive_module  # noqa: E402
from rcpforge.analysis import sequential  # noqa: E402
from rcpforge.analysis.sequential import SPENDING, factor_interval  # noqa: E402
from rcpforge.orchestrator.adaptive import Outcome, replay_looks  # noqa: E402
from rcpforge.sweeps.adaptive_spec import AdaptiveSpec  # noqa: E402
from rcpforge.trainers.contract.submission import SUBMISSION_RUNS  # noqa: E402

# (ruleset, benchmark): the RCP files of two rounds that mlperf_logging ships
BENCHMARKS = {
    ("training_5.1.0", "bert"): "rcps_bert.json",
    ("training_5.1.0", "llama31_8b"): "rcps_llama31_8b.json",
    ("training_5.1.0", "flux1"): "rcps_flux1.json",
    ("training_6.0.0", "llama2_70b_lora"): "rcps_llama2_70b_lora.json",
    ("training_6.0.0", "gpt_oss_20b"): "rcps_gpt_oss_20b.json",
    ("training_6.0.0", "llama31_8b"): "rcps_llama31_8b.json",
}
FP8_FACTORS = (1.00, 1.01, 1.03, 1.05)
FP4_FACTORS = (1.3, 1.5, 1.8)
FP4_NOT_CONVERGED = 0.05  # share of an FP4-like recipe's runs that do not converge
MARGIN = 1.02
EQUIVALENCE = 0.03
CONFIDENCE = 0.95


def distributions() -> dict[tuple[str, str], list[np.ndarray]]:
    """(ruleset, benchmark) -> its reference runs at the smallest and the largest batch size."""
    import mlperf_logging

    root = Path(os.path.dirname(mlperf_logging.__file__)) / "rcp_checker"
    out = {}
    for (ruleset, bench), name in BENCHMARKS.items():
        [path] = glob.glob(str(root / ruleset / name))
        records = sorted(json.loads(Path(path).read_text()).values(), key=lambda r: r["BS"])
        key = next(k for k, v in records[0].items() if isinstance(v, list))
        out[(ruleset, bench)] = [np.asarray(records[0][key], float), np.asarray(records[-1][key], float)]
    return out


# Candidates per campaign, FP8-like and FP4-like: a precision survey (an FP8 and an FP4
# recipe of each kind), and an FP4 study (two FP8 recipes and an ablation of four FP4
# variants, e.g. Hadamard and stochastic rounding on and off).
MIXES = {"survey": (2, 2), "fp4_study": (2, 4)}


@dataclass(frozen=True)
class Question:
    """What both designs are asked of every comparison, and judged on."""

    margin: float = MARGIN
    equivalence: float | None = EQUIVALENCE
    half_width: float | None = None

    def answered(self, estimate, low, high) -> bool:
        """A verdict against the margin, equivalence within the band, or the precision goal."""
        if low is not None and low > self.margin or high is not None and high < self.margin:
            return True
        if low is None or high is None:
            return False
        if self.equivalence is not None and 1 / (1 + self.equivalence) < low and high < 1 + self.equivalence:
            return True
        return self.half_width is not None and estimate is not None and (high - low) / (2 * estimate) <= self.half_width


def draw_campaign(rng: np.random.Generator, mix: str = "survey") -> list[tuple[str, float, float]]:
    """(recipe, true factor, share not converging): the reference and the mix's FP8-like
    and FP4-like candidates."""
    n8, n4 = MIXES[mix]
    fp8 = rng.choice(FP8_FACTORS, n8)
    fp4 = rng.choice(FP4_FACTORS, n4)
    return ([("ref", 1.0, 0.0)] + [(f"fp8_{i}", float(f), 0.0) for i, f in enumerate(fp8)]
            + [(f"fp4_{i}", float(f), FP4_NOT_CONVERGED) for i, f in enumerate(fp4)])


def runs_of(source: np.ndarray, factor: float, fails: float, n: int, rng: np.random.Generator) -> list[float]:
    values = rng.choice(source, n) * factor
    return [math.inf if rng.random() < fails else float(v) for v in values]


def fixed(recipes, sources, n_runs, rng, resamples, question: Question) -> tuple[list[dict], int]:
    """The fixed 2N design, judged by the interval `rcpforge analyze` reports (`factors`'s
    expanded bootstrap)."""
    cells = {(r, b): runs_of(src, f, p, n_runs, rng) for r, f, p in recipes for b, src in enumerate(sources)}
    out = []
    for r, f, _ in recipes[1:]:
        for b in range(len(sources)):
            ci = fixed_interval(cells[(r, b)], cells[("ref", b)], resamples, int(rng.integers(1 << 31)))
            out.append({**_judged(f, ci.estimate, ci.low, ci.high, question), "kind": _kind(r)})
    return out, sum(len(v) for v in cells.values())


def fixed_interval(candidate, reference, resamples: int, seed: int):
    from rcpforge.analysis.factors import bootstrap_interval

    return bootstrap_interval(candidate, reference, trim=1, resamples=resamples, confidence=CONFIDENCE, seed=seed)


def adaptive(recipes, sources, settings: AdaptiveSpec, max_seeds: int, rng,
             question: Question) -> tuple[list[dict], int, int]:
    """Every seed a cell could run drawn up front: `replay_looks` reads only the seeds it
    asked for, so this is the campaign run look by look (tests/orchestrator/
    test_adaptive_simulation.py checks that shortcut), in one replay."""
    names = [r for r, _, _ in recipes]
    outcomes = {(r, b): [Outcome(v, tokens=1.0) for v in runs_of(src, f, p, max_seeds, rng)]
                for r, f, p in recipes for b, src in enumerate(sources)}
    state = replay_looks(settings, names, list(range(len(sources))), outcomes, max_seeds=max_seeds)
    assert state.finished and not state.waiting
    latest = state.latest()
    out = []
    for r, f, _ in recipes[1:]:
        for b in range(len(sources)):
            iv = latest[(r, b)].interval
            judged = _judged(f, iv.factor, iv.low, iv.high, question)
            judged["stop"] = state.stops[(r, b)].reason
            # a diagnostic, not a design: the same runs' interval at one look's 95%, as if
            # the stop had been planned (what ignoring the looks would report)
            cand = [o.value for o in outcomes[(r, b)][:iv.runs_candidate]]
            ref = [o.value for o in outcomes[("ref", b)][:iv.runs_reference]]
            naive = factor_interval(cand, ref, float(stats.norm.isf((1 - CONFIDENCE) / 2)))
            judged["covered_one_look"] = ((naive.low or 0.0) <= f <= (math.inf if naive.high is None else naive.high))
            # no look came before a first-look stop: for a verdict there the one-look interval is
            # the exact (stage-wise) one; for a stop in the middle (equivalence, futility) it is not
            first = sum(1 for e in state.looks if (e.candidate, e.batch_size) == (r, b)) == 1
            judged["covered_first_one_look"] = judged["covered_one_look"] if first else judged["covered"]
            judged["first_look"] = first
            judged["kind"] = _kind(r)
            out.append(judged)
    by_kind = {kind: sum(n for (r, _), n in state.seeds.items() if _kind(r) == kind) for kind in KINDS}
    return out, by_kind, len(state.looks)


def every_look_covers(recipes, sources, settings: AdaptiveSpec, max_seeds: int, rng) -> list[bool]:
    """Per comparison, whether its intervals cover the true factor at every look, on a
    replay whose question no look answers (a precision of 1e-9, no futility): every
    comparison looks up to max_seeds, so this measures what the boundaries promise, the
    confidence over all the looks, at the allocation's own information fractions."""
    names = [r for r, _, _ in recipes]
    outcomes = {(r, b): [Outcome(v, tokens=1.0) for v in runs_of(src, f, p, max_seeds, rng)]
                for r, f, p in recipes for b, src in enumerate(sources)}
    never = settings.model_copy(update={"margin": None, "equivalence": None, "half_width": 1e-9,
                                        "futility": False})
    state = replay_looks(never, names, list(range(len(sources))), outcomes, max_seeds=max_seeds)
    truth = {r: f for r, f, _ in recipes}
    covered: dict[tuple[str, int], bool] = {}
    for e in state.looks:
        iv, f = e.interval, truth[e.candidate]
        ok = (iv.low or 0.0) <= f <= (math.inf if iv.high is None else iv.high)
        covered[(e.candidate, e.batch_size)] = covered.get((e.candidate, e.batch_size), True) and ok
    return list(covered.values())


KINDS = ("reference", "fp8_like", "fp4_like")


def _kind(recipe: str) -> str:
    return {"ref": "reference", "fp8": "fp8_like", "fp4": "fp4_like"}[recipe.split("_")[0]]


def _judged(truth: float, estimate, low, high, question: Question) -> dict:
    lo = 0.0 if low is None else low
    hi = math.inf if high is None else high
    wrong = (lo > MARGIN and truth <= MARGIN) or (hi < MARGIN and truth > MARGIN)
    if question.equivalence is not None and low is not None and high is not None:
        band = 1 + question.equivalence
        inside = 1 / band < low and high < band
        wrong = wrong or (inside and not 1 / band - 1e-12 <= truth <= band + 1e-12)
    width = (hi - lo) / (2 * estimate) if estimate and math.isfinite(hi) and low is not None else math.inf
    return {"covered": lo <= truth <= hi, "wrong": wrong, "width": width,
            "answered": question.answered(estimate, low, high)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", type=int, default=1000, help="simulated campaigns per benchmark")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extra-seeds", type=int, default=12, help="adaptive max_seeds is 2N plus this")
    parser.add_argument("--mix", default="fp4_study", choices=sorted(MIXES), help="the candidates of a campaign")
    parser.add_argument("--min-seeds", type=int, default=5)
    parser.add_argument("--step", type=int, default=3)
    parser.add_argument("--spending", default="calibrated", choices=list(SPENDING))
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples of the fixed design")
    parser.add_argument("--equivalence", type=float, default=EQUIVALENCE,
                        help="the question's equivalence band (0: none)")
    parser.add_argument("--half-width", default="none",
                        help="the question's precision goal: a number, 'fixed' (the fixed design's median "
                             "half-width on the benchmark) or none")
    parser.add_argument("--no-futility", action="store_true", help="adaptive cells never stop as futile")
    parser.add_argument("--benchmarks", default=None, help="comma-separated benchmark names (default: all)")
    parser.add_argument("--joint", action="store_true",
                        help="also replay every campaign to max_seeds and measure the intervals' joint coverage")
    parser.add_argument("--fixed-runs", type=int, default=None, help="runs per cell of the fixed design (default 2N)")
    parser.add_argument("--first-look-share", type=float, default=None,
                        help="the calibrated spending's share of the error at the first look (default: the design's)")
    parser.add_argument("--df-shift", type=float, default=None,
                        help="degrees of freedom the calibrated spending takes off Welch's (default: the design's)")
    args = parser.parse_args()
    if args.first_look_share is not None and not 0 < args.first_look_share < 1:
        parser.error("--first-look-share: a share of the error strictly between 0 and 1, such as 0.5")
    if args.df_shift is not None and args.df_shift < 0:
        parser.error("--df-shift: degrees of freedom to take off, 0 or more, such as 1")
    if args.fixed_runs is not None and args.fixed_runs < 5:
        parser.error("--fixed-runs: at least 5 runs a cell (an olympic mean and a spread on each side)")
    # before any boundary is computed: they are cached by look times alone
    if args.first_look_share is not None:
        sequential.FIRST_LOOK_SHARE = args.first_look_share
    if args.df_shift is not None:
        adaptive_module.CALIBRATED_DF_SHIFT = args.df_shift
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    totals: dict[str, list[dict]] = {k: [] for k in ("fixed", "adaptive")}
    runs = {"fixed": 0, "adaptive": 0}
    kind_runs = {"fixed": dict.fromkeys(KINDS, 0), "adaptive": dict.fromkeys(KINDS, 0)}
    every_look: list[bool] = []
    per_benchmark = {}
    print(f"{'benchmark':<24}{'design':<10}{'coverage':>9}{'wrong':>8}{'width':>8}{'runs':>8}{'answered':>10}")
    for (ruleset, bench), sources in distributions().items():
        if args.benchmarks and bench not in args.benchmarks.split(","):
            continue
        label = f"{bench} ({ruleset.removeprefix('training_')})"
        n = SUBMISSION_RUNS[bench]
        campaigns = [draw_campaign(rng, args.mix) for _ in range(args.campaigns)]
        seeds = [int(rng.integers(1 << 31)) for _ in campaigns]
        question = Question(equivalence=args.equivalence or None,
                            half_width=None if args.half_width in ("none", "fixed") else float(args.half_width))
        fixed_cells, fixed_runs = [], 0
        for recipes, s in zip(campaigns, seeds, strict=True):
            per_cell = args.fixed_runs or 2 * n
            cells, used = fixed(recipes, sources, per_cell, np.random.default_rng(s), args.resamples, question)
            fixed_cells += cells
            fixed_runs += used
            for r, _, _ in recipes:
                kind_runs["fixed"][_kind(r)] += per_cell * len(sources)
        if args.half_width == "fixed":  # the fixed design's median precision, asked of both
            question = Question(equivalence=question.equivalence, half_width=_median_width(fixed_cells))
            for c in fixed_cells:
                c["answered"] = c["answered"] or c["width"] <= question.half_width
        settings = AdaptiveSpec(margin=question.margin, half_width=question.half_width,
                                equivalence=question.equivalence, futility=not args.no_futility,
                                confidence=CONFIDENCE, min_seeds=args.min_seeds, step=args.step,
                                spending=args.spending)
        adaptive_cells, adaptive_runs = [], 0
        for recipes, s in zip(campaigns, seeds, strict=True):
            cells, by_kind, _ = adaptive(recipes, sources, settings, 2 * n + args.extra_seeds,
                                         np.random.default_rng(s + 1), question)
            adaptive_cells += cells
            adaptive_runs += sum(by_kind.values())
            for kind, used in by_kind.items():
                kind_runs["adaptive"][kind] += used
            if args.joint:  # the same runs (the same generator seed), looked at up to max_seeds
                every_look += every_look_covers(recipes, sources, settings, 2 * n + args.extra_seeds,
                                                np.random.default_rng(s + 1))
        for design, cells, used in (("fixed", fixed_cells, fixed_runs), ("adaptive", adaptive_cells, adaptive_runs)):
            totals[design] += cells
            runs[design] += used
            print(f"{label:<24}{design:<10}{_row(cells, used)}")
        stops = {r: float(np.mean([c["stop"] == r for c in adaptive_cells]))
                 for r in sorted({c["stop"] for c in adaptive_cells})}
        print(f"{'':<34}adaptive / fixed runs {adaptive_runs / fixed_runs:.3f}; adaptive stops "
              + ", ".join(f"{r} {v:.3f}" for r, v in stops.items())
              + f"; one-look 95% interval at the stop covers {_rate(adaptive_cells, 'covered_one_look'):.3f}"
              + f", at first-look stops (else the repeated one) {_rate(adaptive_cells, 'covered_first_one_look'):.3f}"
              + f"; stopped at the first look {_rate(adaptive_cells, 'first_look'):.3f}")
        per_benchmark[label] = {**_figures(fixed_cells, adaptive_cells, fixed_runs, adaptive_runs),
                                "stops_adaptive": stops, "half_width_goal": question.half_width}
    for design in ("fixed", "adaptive"):
        print(f"{'all':<24}{design:<10}{_row(totals[design], runs[design])}")
    ratio = runs["adaptive"] / runs["fixed"]
    bounds = _bounds(totals, kind_runs, every_look)
    for line in _bounds_lines(bounds):
        print(line)
    print(f"adaptive / fixed runs: {ratio:.3f} ({1 - ratio:.1%} fewer); "
          f"{len(totals['fixed'])} comparisons each; {time.perf_counter() - started:.0f} s")
    if args.json:
        figures = {**_figures(totals["fixed"], totals["adaptive"], runs["fixed"], runs["adaptive"]),
                   "campaigns": args.campaigns * len(per_benchmark), "benchmarks": per_benchmark,
                   "fixed_runs_per_cell": args.fixed_runs, "first_look_share": sequential.FIRST_LOOK_SHARE,
                   "df_shift": adaptive_module.CALIBRATED_DF_SHIFT, "bounds": bounds}
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


def _figures(fixed_cells: list[dict], adaptive_cells: list[dict], fixed_runs: int, adaptive_runs: int) -> dict:
    return {
        "coverage_fixed": _rate(fixed_cells, "covered"), "coverage_adaptive": _rate(adaptive_cells, "covered"),
        "wrong_verdicts_fixed": _rate(fixed_cells, "wrong"), "wrong_verdicts_adaptive": _rate(adaptive_cells, "wrong"),
        "width_fixed": _median_width(fixed_cells), "width_adaptive": _median_width(adaptive_cells),
        "runs_fixed": fixed_runs, "runs_adaptive": adaptive_runs,
        "answered_fixed": _rate(fixed_cells, "answered"), "answered_adaptive": _rate(adaptive_cells, "answered"),
        "coverage_adaptive_one_look": _rate(adaptive_cells, "covered_one_look"),
        "coverage_adaptive_first_one_look": _rate(adaptive_cells, "covered_first_one_look"),
    }


def _bounds(totals: dict[str, list[dict]], kind_runs: dict[str, dict[str, int]], every_look: list[bool]) -> dict:
    """Where the runs go and what bounds the coverage (see the module's docstring)."""
    adaptive = totals["adaptive"]
    first = [c for c in adaptive if c["first_look"]]
    later = [c for c in adaptive if not c["first_look"]]
    out = {
        "runs_by_kind_fixed": kind_runs["fixed"], "runs_by_kind_adaptive": kind_runs["adaptive"],
        "answered_by_kind_fixed": _by_kind(totals["fixed"], "answered"),
        "answered_by_kind_adaptive": _by_kind(adaptive, "answered"),
        "comparisons_by_kind": {k: sum(c["kind"] == k for c in adaptive) for k in KINDS[1:]},
        "stopped_at_first_look": len(first) / len(adaptive),
        "coverage_adaptive_first_look_stops": _rate(first, "covered") if first else None,
        "coverage_adaptive_later_stops": _rate(later, "covered") if later else None,
    }
    if every_look:
        out["coverage_adaptive_every_look"] = float(np.mean(every_look))
        out["comparisons_every_look"] = len(every_look)
    return out


def _bounds_lines(bounds: dict) -> list[str]:
    lines = []
    for design in ("fixed", "adaptive"):
        runs, answered = bounds[f"runs_by_kind_{design}"], bounds[f"answered_by_kind_{design}"]
        lines.append(f"{design:<9} runs by kind: " + ", ".join(f"{k} {v}" for k, v in runs.items())
                     + "; answered by kind: " + ", ".join(f"{k} {v:.3f}" for k, v in answered.items()))
    lines.append(f"adaptive stopping intervals cover {bounds['coverage_adaptive_first_look_stops']:.4f} at "
                 f"first-look stops ({bounds['stopped_at_first_look']:.3f} of comparisons), "
                 f"{bounds['coverage_adaptive_later_stops']:.4f} at later ones")
    if "coverage_adaptive_every_look" in bounds:
        lines.append(f"looked at up to max_seeds, every look's interval covers in "
                     f"{bounds['coverage_adaptive_every_look']:.4f} of {bounds['comparisons_every_look']} comparisons "
                     f"(nominal {CONFIDENCE:.2f})")
    return lines


def _by_kind(cells: list[dict], key: str) -> dict[str, float]:
    return {k: _rate([c for c in cells if c["kind"] == k], key) for k in KINDS[1:]
            if any(c["kind"] == k for c in cells)}


def _rate(cells: list[dict], key: str) -> float:
    return float(np.mean([c[key] for c in cells]))


def _median_width(cells: list[dict]) -> float:
    return float(np.median([c["width"] for c in cells]))


def _row(cells: list[dict], used: int) -> str:
    answered = f"{_rate(cells, 'answered'):>10.3f}"
    return (f"{_rate(cells, 'covered'):>9.3f}{_rate(cells, 'wrong'):>8.3f}{_median_width(cells):>8.4f}"
            f"{used:>8}{answered}")


if __name__ == "__main__":
    main()
