"""Which of a campaign's warnings still apply, from what its store holds.

Today a campaign warns about one thing (`Campaign.warnings`): a command trainer whose
`unit` disagrees with the unit the checker reads for the campaign's benchmark, so that
the program must log a key (epoch_num or samples_count) it may not log. The command
trainer enforces that on every eval line (a line without the key fails the run at once,
`trainers/command/trainer.py`), so a run whose evals were read has logged the key. Once
the store holds such runs and none that broke the rule, the warning says nothing new: it
is left out, and comes back as soon as a run breaks the rule (until that run, fixed, logs
the key). Only the runs of the campaign as its file now stands count (its run keys: a run
an earlier version of the file asked for says nothing of this one). Reading the store
never makes it: a store or a campaign not there yet keeps the warning."""

from __future__ import annotations

from typing import Any


def warnings_that_apply(campaign: Any) -> list[str]:
    """`campaign.warnings`, less those its recorded runs show settled."""
    warnings = list(campaign.warnings)
    if not warnings:
        return warnings
    from rcpforge.sweeps.expand import expand

    keys = {spec.run_key for spec in expand(campaign)}
    return [] if _runs_logged_the_key(campaign.tracking_uri, campaign.name, keys) else warnings


def _runs_logged_the_key(uri: str, name: str, keys: set[str]) -> bool:
    from rcpforge.analysis.load import NoSuchCampaign
    from rcpforge.analysis.load_sql import load_campaign_runs
    from rcpforge.orchestrator.tracking import TrackingUnavailable, absent_sqlite_store, probe_store

    if absent_sqlite_store(uri) is not None:
        return False  # no store yet (and opening it would make one)
    try:
        probe_store(uri)  # a store that does not answer soon: no evidence, and no long wait for it
        runs = load_campaign_runs(uri, name)
    except (NoSuchCampaign, TrackingUnavailable):
        return False
    return unit_rule_settled(runs.select(["run_key", "tokens_trained", "error"]).to_pylist(), keys)


def unit_rule_settled(runs: list[dict[str, Any]], keys: set[str]) -> bool:
    """Some run of `keys` (the campaign's) has evals read under the unit rule, and every
    one that broke it has run again since and logged the key (the same run key, the
    file fixed). `runs`: rows of the runs table (run_key, tokens_trained, error)."""
    from rcpforge.trainers.command.trainer import broke_unit_rule

    logged, broke = set(), set()
    for row in runs:
        if row["run_key"] not in keys:
            continue
        if broke_unit_rule(row["error"]):
            broke.add(row["run_key"])
        elif row["tokens_trained"]:  # evals read, each under the rule
            logged.add(row["run_key"])
    return bool(logged) and broke <= logged
