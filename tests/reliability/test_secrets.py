"""A campaign tracked straight in PostgreSQL, with the password in its `tracking.uri`:
the password appears nowhere rcpforge writes or prints (CLI output of run, report and
analyze, MLflow params and tags, run folders, report and analysis files)."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient

from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.helpers.trainer_kinds import command


def _files_containing(folder: Path, secret: str) -> list[str]:
    needle = secret.encode()
    return [str(p) for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_password_in_a_postgresql_tracking_uri_is_never_written(tmp_path, cli, mlflow_server):
    secret = mlflow_server.password
    kind = command(tmp_path)  # an instant trainer: this is about what is written, not training
    data = tiny_campaign(name="secret_pg", recipes=["bf16"], seeds=3, tracking={"uri": mlflow_server.backend_uri},
                         trainer=kind.trainer, target=kind.converges, budget=kind.budget, hparams=kind.hparams)
    path = write_campaign(tmp_path / "camp", data)
    outputs = [cli("run", str(path)), cli("report", str(path), "--out", str(tmp_path / "out" / "report.html")),
               cli("analyze", str(path), "--out", str(tmp_path / "out" / "analysis"))]
    assert outputs[0].returncode == 0, outputs[0].stderr[-2000:]
    for proc in outputs:
        assert secret not in proc.stdout + proc.stderr, proc.args
    assert (tmp_path / "out" / "report.html").is_file() and any((tmp_path / "out" / "analysis").iterdir())

    client = MlflowClient(tracking_uri=mlflow_server.backend_uri)
    runs = client.search_runs([client.get_experiment_by_name("secret_pg").experiment_id])
    assert len(runs) == 6
    for run in runs:
        assert secret not in repr(run.data.params) + repr(run.data.tags)
    assert not _files_containing(tmp_path / "camp" / "rcpforge-runs", secret)
    assert not _files_containing(tmp_path / "out", secret)
    # The campaign file itself holds the password: the check above is not vacuous.
    assert _files_containing(tmp_path / "camp", secret) == [str(path)]


def test_password_in_a_tracking_uri_stays_out_of_import_output_and_the_no_such_campaign_error(tmp_path, cli,
                                                                                              mlflow_server):
    """`rcpforge import --tracking-uri` and the SQL loader's "no such campaign" error name
    the store without its password."""
    from tests.analysis.mllog_dirs import write_results

    secret = mlflow_server.password
    folder = write_results(tmp_path / "sys" / "bench", "bench", 16, [300.0, 320.0, 310.0])
    imported = cli("import", str(folder), "--campaign", "secret_import", "--tracking-uri", mlflow_server.backend_uri)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert "3 runs imported" in imported.stdout and "tracking store:" in imported.stdout
    assert secret not in imported.stdout + imported.stderr

    data = tiny_campaign(name="secret_never_run", recipes=["bf16"], seeds=3,
                         tracking={"uri": mlflow_server.backend_uri})
    path = write_campaign(tmp_path / "camp", data)
    missing = cli("analyze", str(path), "--out", str(tmp_path / "out"))
    assert missing.returncode == 2 and "no runs of campaign secret_never_run at " in missing.stderr
    assert "***" in missing.stderr and secret not in missing.stdout + missing.stderr
