"""`rcpforge import` of a published round's root: one run per result file, tagged with
where it stands in the round and what its system file says, its MLflow times the run's
own; a re-import adds nothing; a file cut off before its run_stop is said so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mlflow import MlflowClient
from mlperf_logging.rcp_checker import rcp_checker

from tests.conftest import run_cli

TRUNCATED = "tinycorp/results/tinybox_green/retinanet/result_4.txt"


def _events(path: Path) -> list[dict]:
    """The file's MLLOG events, read here independently of rcpforge's reader."""
    found = []
    for line in path.read_text(encoding="latin-1").splitlines():
        if ":::MLLOG " in line:
            try:
                found.append(json.loads(line.split(":::MLLOG ", 1)[1]))
            except ValueError:
                pass
    return found


def _runs(uri: str, campaign: str) -> list:
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(campaign)
    return client.search_runs([experiment.experiment_id], max_results=5000)


def test_a_round_imports_in_one_command_with_its_tags_and_times(round_v50_subset, tmp_path):
    root = tmp_path / "round"
    shutil.copytree(round_v50_subset, root)
    # a results directory outside the layout, with a 6.1 precision disclosure, rides along
    loose = tmp_path / "loose" / "mine"
    loose.mkdir(parents=True)
    source = root / "tinycorp/results/tinybox_red/bert/result_0.txt"
    disclosed = {"key": "lowest_numerical_precision_in_linear", "value": "fp8", "time_ms": 1, "metadata": {}}
    (loose / "result_0.txt").write_text(":::MLLOG " + json.dumps(disclosed) + "\n" + source.read_text())
    files = sorted(root.rglob("result_*.txt"))
    uri = f"sqlite:///{tmp_path / 'round.db'}"

    proc = run_cli("import", str(root), str(loose.parent), "--campaign", "v50", "--tracking-uri", uri)
    assert proc.returncode == 0, proc.stderr
    dirs = len({p.parent for p in files}) + 1
    assert f"{len(files) + 1} runs imported, 0 already there (from {dirs} results directories)" in proc.stdout
    notes = [line for line in proc.stderr.splitlines() if "no run_stop" in line]
    assert len(notes) == 1 and str(root / TRUNCATED) in notes[0]

    runs = _runs(uri, "v50")
    assert len(runs) == len(files) + 1
    by_source = {Path(r.data.tags["rcpforge.source"]): r for r in runs}
    for path in files:
        run, events = by_source[path.resolve()], _events(path)
        tags = run.data.tags
        submitter, _, system, benchmark = path.parent.relative_to(root).parts
        described = json.loads((root / submitter / "systems" / f"{system}.json").read_text())
        bs = rcp_checker.get_submission_epochs([str(path)], "5.0.0", False)[0]
        assert (tags["rcpforge.submitter"], tags["rcpforge.system"], tags["rcpforge.benchmark"]) == (
            submitter, system, benchmark)
        assert tags["rcpforge.batch_size"] == str(bs)
        assert tags["rcpforge.division"] == described["division"]
        assert tags["rcpforge.framework"] == described["framework"].strip()
        assert tags["rcpforge.accelerator"] == described["accelerator_model_name"].strip()
        assert tags["rcpforge.accelerators_per_node"] == described["accelerators_per_node"]
        assert tags["rcpforge.nodes"] == described["number_of_nodes"]
        assert tags["rcpforge.results_dir"] == str(path.parent.resolve())
        starts = [e["time_ms"] for e in events if e.get("key") == "run_start"]
        stops = [e["time_ms"] for e in events if e.get("key") == "run_stop"]
        assert run.info.start_time == starts[0]
        assert run.info.end_time == (stops[-1] if stops else events[-1]["time_ms"])
        assert run.info.status == "FINISHED"
        not_converged, value = rcp_checker.read_submission_file(str(path), "5.0.0", False)[:2]
        assert tags["rcpforge.status"] == ("not_converged" if not_converged else "converged")
        if not not_converged:
            assert run.data.metrics["samples_to_target"] == value
        assert ("rcpforge.warning" in tags) == (not stops)
        precision = {k for k in tags if k.startswith("rcpforge.mllog.lowest_numerical_precision")}
        assert not precision  # v5.0 predates the disclosure
    mine = by_source[(loose / "result_0.txt").resolve()].data.tags
    assert mine["rcpforge.mllog.lowest_numerical_precision_in_linear"] == "fp8"
    assert mine["rcpforge.submitter"] == "tinycorp"  # from its MLLOG submission_org, without a system file
    assert "rcpforge.framework" not in mine

    again = run_cli("import", str(root), str(loose.parent), "--campaign", "v50", "--tracking-uri", uri)
    assert again.returncode == 0, again.stderr
    assert f"0 runs imported, {len(files) + 1} already there" in again.stdout
    assert len(_runs(uri, "v50")) == len(files) + 1


def test_import_of_a_missing_folder_is_one_line(tmp_path):
    uri = f"sqlite:///{tmp_path / 'x.db'}"
    proc = run_cli("import", str(tmp_path / "nosuch"), "--campaign", "x", "--tracking-uri", uri)
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_round_imports_what_is_not_imported_yet_into_a_sqlite_file_here(round_v50_subset, tmp_path):
    """`rcpforge round` without a store: the round's files go into rcpforge-mlflow.db in
    the current folder, once (a second analysis imports nothing); --no-import writes
    nothing; both options together are one line."""
    files = sorted(round_v50_subset.rglob("result_*.txt"))
    here = tmp_path / "here"
    here.mkdir()
    first = run_cli("round", str(round_v50_subset), "--rcps", "5.0.0", "--json", cwd=here)
    assert first.returncode == 0, first.stderr
    assert f"imported {len(files)} runs, 0 already there" in first.stderr
    assert len(json.loads(first.stdout)) == 5  # standard output stays the one JSON document
    uri = f"sqlite:///{here / 'rcpforge-mlflow.db'}"
    assert len(_runs(uri, round_v50_subset.name)) == len(files)
    again = run_cli("round", str(round_v50_subset), "--rcps", "5.0.0", cwd=here)
    assert again.returncode == 0 and f"imported 0 runs, {len(files)} already there" in again.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert run_cli("round", str(round_v50_subset), "--rcps", "5.0.0", "--no-import", cwd=elsewhere).returncode == 0
    assert not list(elsewhere.iterdir())
    both = run_cli("round", str(round_v50_subset), "--rcps", "5.0.0", "--no-import", "--tracking-uri", uri)
    assert both.returncode == 2 and both.stderr.strip().count("\n") == 0 and "--no-import" in both.stderr
