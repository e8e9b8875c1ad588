"""The cases a policy run simulates, one per batch size: from the RCPs a ruleset ships
(`--rcps RULESET`, one benchmark or every one) or from a campaign's own runs (its reference recipe's
complete cells as the RCPs, its candidate recipe's runs as the candidate's distribution).
Bad input raises `PolicyError`, one line naming the flag and the fix."""

from __future__ import annotations

from collections.abc import Sequence

from rcpforge.analysis.policy.distributions import Distribution, campaign_distributions, rcp_distributions
from rcpforge.analysis.policy.health import coarse_mark
from rcpforge.analysis.policy.simulate import Case
from rcpforge.analysis.policy.thresholds import bootstrapped, today
from rcpforge.analysis.rcp import trimmed_count
from rcpforge.analysis.rcp_set import RULESETS, RcpError, RcpSet, convergence_key, load_rcp_sets, ruleset_folder


class PolicyError(ValueError):
    """Bad input for a policy run, said in one line."""


def _chosen(available: Sequence[int], wanted: Sequence[int] | None, where: str) -> list[int]:
    if not wanted:
        return sorted(available)
    missing = [b for b in wanted if b not in available]
    if missing:
        raise PolicyError(f"--batch-size {missing[0]}: {where} has no RCP at that batch size; "
                          f"give one of {', '.join(map(str, sorted(available)))}")
    return sorted(dict.fromkeys(wanted))


def _endpoints(reference: dict[int, Distribution], candidate: dict[int, Distribution]) -> list:
    both = sorted(set(reference) & set(candidate))
    return [(reference[b], candidate[b]) for b in dict.fromkeys((both[0], both[-1]))]


def _cases(rcp_set: RcpSet, reference: dict[int, Distribution], candidate: dict[int, Distribution],
           batch_sizes: list[int], ruleset: str | None, sims: int) -> list[Case]:
    pairs = _endpoints(reference, candidate)
    trim = trimmed_count(rcp_set.benchmark)
    out = []
    for bs in batch_sizes:
        def threshold(rng, bs: int = bs):
            return today(rcp_set, bs, ruleset) if rng is None else bootstrapped(rcp_set, bs, ruleset, rng, sims)

        out.append(Case(rcp_set.benchmark, bs, rcp_set.submission_runs, trim, candidate[bs], threshold, pairs,
                        ruleset, coarse_mark(list(reference[bs].values)) if bs in reference else None))
    return out


def ruleset_cases(ruleset: str, benchmark: str | None, batch_sizes: Sequence[int] | None, sims: int) -> list[Case]:
    """Every batch size with an RCP in the ruleset (or those named), of one benchmark or
    (`benchmark` None) of every benchmark the ruleset ships: the RCP's runs are the honest
    candidate's distribution at factor 1."""
    if ruleset not in RULESETS:
        raise PolicyError(f"--rcps {ruleset!r} is not a ruleset the checker knows; give one of {', '.join(RULESETS)}")
    if benchmark is None:
        if batch_sizes:
            raise PolicyError("--batch-size needs --benchmark: batch sizes differ between benchmarks; "
                              "name the benchmark, or drop --batch-size to simulate every RCP")
        return [case for rcp_set in load_rcp_sets(ruleset)
                for case in rcp_set_cases(rcp_set, None, ruleset, sims, f"ruleset {ruleset}'s {rcp_set.benchmark}")]
    try:
        rcp_set = RcpSet.from_ruleset(ruleset, benchmark)
    except RcpError:
        shipped = sorted(p.stem[5:] for p in ruleset_folder(ruleset).glob("rcps_*.json"))
        raise PolicyError(f"--benchmark {benchmark!r}: ruleset {ruleset} ships no RCPs for it; "
                          f"give one of {', '.join(shipped)}") from None
    return rcp_set_cases(rcp_set, batch_sizes, ruleset, sims, f"ruleset {ruleset}'s {benchmark}")


def rcp_set_cases(rcp_set: RcpSet, batch_sizes: Sequence[int] | None, ruleset: str | None, sims: int,
                  where: str = "the RCP set") -> list[Case]:
    """The cases of a set of RCP records: each batch size's runs are the candidate's
    distribution at factor 1, and the factor's baseline runs too."""
    dists = rcp_distributions(rcp_set)
    return _cases(rcp_set, dists, dists, _chosen(list(dists), batch_sizes, where), ruleset, sims)


def campaign_cases(table, benchmark: str, submission_runs: int, reference: str, candidate: str,
                   batch_sizes: Sequence[int] | None, sims: int) -> list[Case]:
    """A campaign's runs (`rcpforge.analysis.load`'s table): the reference recipe's complete cells
    (every run converged, as real RCPs are) are the RCPs, the candidate's runs its
    distribution, at the batch sizes both have."""
    ref = campaign_distributions(table, reference)
    cand = campaign_distributions(table, candidate)
    for flag, name, cells in (("--reference", reference, ref), ("--candidate", candidate, cand)):
        if not cells:
            raise PolicyError(f"{flag} {name!r}: the campaign's store has no runs of that recipe; "
                              "give a recipe of the campaign that has runs")
    complete = {b: d for b, d in ref.items() if d.distinct and len(d.values) > 2 * trimmed_count(benchmark)
                and all(v < float("inf") for v in d.values)}
    key = convergence_key(benchmark)
    raw = {f"{reference}_bs{b}": {"Benchmark": benchmark, "BS": b, "Hyperparams": {}, key: [float(v) for v in d.values]}
           for b, d in complete.items()}
    common = sorted(set(complete) & set(cand))
    if not common:
        raise PolicyError(f"--reference {reference!r} / --candidate {candidate!r}: no batch size has both a complete "
                          "reference cell (every run converged) and candidate runs; run both recipes at one batch size")
    rcp_set = RcpSet(raw, benchmark, submission_runs=submission_runs)
    chosen = _chosen(common, batch_sizes, f"the campaign ({reference} with {candidate} runs)")
    return _cases(rcp_set, complete, cand, chosen, "6.0.0", sims)
