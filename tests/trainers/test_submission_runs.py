"""N per benchmark is the installed RCP checker's own `submission_runs` table, read from
its source: a release that adds a benchmark needs no change in rcpforge."""

from __future__ import annotations

from pathlib import Path

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import pytest

from rcpforge.trainers.contract.submission import SUBMISSION_RUNS, CheckerTableMissing, checker_submission_runs


def test_the_table_is_the_installed_checkers():
    assert SUBMISSION_RUNS == checker_mod.submission_runs["training"]


def test_a_release_with_a_new_benchmark_is_read_as_it_stands(tmp_path):
    source = Path(checker_mod.__file__).read_text(encoding="utf-8")
    newer = source.replace("'dlrmv4': 10,", "'dlrmv4': 10,\n        'brand_new_bench': 7,", 1)
    assert newer != source
    (tmp_path / "rcp_checker.py").write_text(newer, encoding="utf-8")
    table = checker_submission_runs(tmp_path / "rcp_checker.py")
    assert table == {**SUBMISSION_RUNS, "brand_new_bench": 7}
    assert checker_submission_runs(tmp_path / "rcp_checker.py", "hpc") == checker_mod.submission_runs["hpc"]


def test_a_checker_without_the_table_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "rcp_checker.py").write_text("runs = {}\n", encoding="utf-8")
    with pytest.raises(CheckerTableMissing, match=r"rcp_checker.py: no `submission_runs` table"):
        checker_submission_runs(tmp_path / "rcp_checker.py")
