"""What the MLCommons RCP checker fixes per benchmark, in one place for the campaign
validator (`sweeps`) and the analysis: the runs of one submission, N (`submission_runs`
of `mlperf_logging.rcp_checker`, usage "training"). An RCP needs 2N runs; the checker's
minimum acceptable mean uses N - 2 submission runs, so a different N gives different
numbers from the checker's on the same RCP file. The table is the installed checker's."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path


class CheckerTableMissing(RuntimeError):
    """The installed mlperf-logging has no `submission_runs` table where rcpforge reads it."""


def checker_submission_runs(source: Path | None = None, usage: str = "training") -> dict[str, int]:
    """The checker's own `submission_runs[usage]`, read from the source of the installed
    `mlperf_logging/rcp_checker/rcp_checker.py` as a literal: importing the module would
    import scipy (most of a second on every `rcpforge` command), and reading the table
    rather than copying it means a new mlperf-logging release with a new benchmark needs
    no change here."""
    if source is None:
        spec = importlib.util.find_spec("mlperf_logging")
        if spec is None or not spec.submodule_search_locations:
            raise CheckerTableMissing("mlperf-logging is not installed; install rcpforge's dependencies "
                                      "(pip install -e .)")
        source = Path(next(iter(spec.submodule_search_locations))) / "rcp_checker" / "rcp_checker.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as err:
        raise CheckerTableMissing(f"{source}: cannot read the RCP checker's source ({err}); reinstall "
                                  "mlperf-logging") from None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "submission_runs"):
            table = ast.literal_eval(node.value)
            return {str(k): int(v) for k, v in table[usage].items()}
    raise CheckerTableMissing(f"{source}: no `submission_runs` table at the top level; this mlperf-logging "
                              "release moved it: rcpforge needs a change in trainers/contract/submission.py")


SUBMISSION_RUNS: dict[str, int] = checker_submission_runs()


def name_as_benchmark(campaign: str) -> str:
    """A campaign's benchmark where it sets no rcp.benchmark: its name, in the characters
    a benchmark name may hold."""
    return re.sub(r"[^A-Za-z0-9_]", "_", campaign)


def model_benchmark(benchmark: str, model: str) -> str:
    """The benchmark of one model's runs on a model axis (their MLLOG, their RCPs); the
    campaign's own without the axis (model "")."""
    return f"{benchmark}_{model}" if model else benchmark


def benchmark_origin(benchmark: str, campaign: str) -> str:
    """Where a campaign's benchmark comes from, for a message that names a clash with it."""
    return ("rcp.benchmark unset, so the campaign's name" if benchmark == name_as_benchmark(campaign)
            else "the campaign's rcp.benchmark")


# systems/<system>.json fields a round's analysis and import keep (setting name -> field)
SYSTEM_FIELDS: dict[str, str] = {
    "submitter": "submitter", "division": "division", "framework": "framework",
    "accelerator": "accelerator_model_name", "accelerators_per_node": "accelerators_per_node",
    "nodes": "number_of_nodes",
}


def system_settings(folder: Path) -> dict[str, str]:
    """What a results directory's place in a round says: `<submitter>/results/<system>/
    <benchmark>/` gives submitter and system, and `<submitter>/systems/<system>.json`
    beside it the `SYSTEM_FIELDS` it fills in. Empty for a folder outside that layout;
    submitter and system only where the system file is missing or unreadable."""
    folder = folder.resolve()
    if folder.parent.parent.name != "results":
        return {}
    submitter_dir, system = folder.parents[2], folder.parent.name
    found = {"submitter": submitter_dir.name, "system": system}
    try:
        described = json.loads((submitter_dir / "systems" / f"{system}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return found
    if isinstance(described, dict):
        for name, key in SYSTEM_FIELDS.items():
            value = described.get(key)
            if value not in (None, ""):
                found[name] = str(value).strip()
    return found
