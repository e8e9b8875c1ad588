"""`check` against the real `mlperf_logging.rcp_checker.check_directory` (the oracle) on
generated results directories that cover every branch of the checker."""

from __future__ import annotations

import json
import math
import re
import zlib

import mlperf_logging.rcp_checker.rcp_checker as checker_mod
import numpy as np
import pytest

from rcpforge.analysis.check import check_directory
from rcpforge.analysis.rcp_set import RcpSet, ruleset_file
from tests.analysis.mllog_dirs import mllog, rcp_file, result_lines, write_results

RESNET = {  # N = 5; bs 3072's mean is above the line from 1024 to 8192: pruning drops it
    1024: [30, 31, 32, 33, 34, 35, 36, 37, 38, 39],
    3072: [60, 62, 64, 66, 68, 70, 72, 74, 76, 78],
    8192: [70, 71, 72, 73, 74, 75, 76, 77, 78, 79],
}


def oracle(folder, ruleset, rcps, rcp_pass, train_samples=False):
    fh = open(rcps) if rcps else None
    try:
        return checker_mod.check_directory(str(folder), "training", ruleset, False, train_samples, rcp_file=fh,
                                           rcp_pass=f"{rcp_pass}_rcps")
    except Exception as err:  # the checker's own crash is part of its behaviour
        return err
    finally:
        if fh:
            fh.close()


def same(folder, ruleset="6.0.0", rcps=None, rcp_pass="pruned", train_samples=False):
    expected = oracle(folder, ruleset, rcps, rcp_pass, train_samples)
    ours = check_directory(folder, rcps, ruleset, rcp_pass, train_samples)
    if isinstance(expected, Exception):
        assert not ours.passed and ours.checker_error, (expected, ours)
        return ours, None
    passed, message, factor = expected
    assert (ours.passed, ours.message) == (passed, message)
    assert ours.norm_factor == factor or (math.isnan(ours.norm_factor) and math.isnan(factor))
    return ours, expected


@pytest.fixture
def resnet_rcps(tmp_path):
    return rcp_file(tmp_path / "rcps.json", "resnet", RESNET)


@pytest.mark.parametrize("rcp_pass", ["pruned", "full"])
@pytest.mark.parametrize("bs,values,used,passed", [
    (1024, [34.5, 35, 36, 37, 38], "found", True),          # slower than the mean: factor 1
    (1024, [33, 33.5, 34, 34.2, 35], "found", True),       # faster, within the speedup: normalized
    (1024, [20, 21, 22, 23, 24], "found", False),          # too fast
    (2048, [60, 60, 61, 62, 70], None, True),              # between RCPs
    (2048, [30, 30, 31, 32, 33], None, False),
    (512, [40, 41, 42, 43, 44], "smallest", True),         # below the smallest, slower
    (512, [10, 11, 12, 13, 14], "smallest", False),        # below the smallest, faster
    (16384, [80, 81, 82, 83, 84], "none", False),          # above the largest
    (3072, [69, 70, 71, 72, 73], None, True),              # pruned: interpolated; full: found
    (3072, [30, 31, 32, 33, 34], None, False),
])
def test_every_branch_equals_the_checker(tmp_path, resnet_rcps, rcp_pass, bs, values, used, passed):
    folder = write_results(tmp_path / "results", "resnet", bs, values)
    ours, expected = same(folder, rcps=resnet_rcps, rcp_pass=rcp_pass)
    assert expected is not None and ours.passed is passed
    if used is not None:
        assert ours.rcp_used == used
    if bs == 3072:
        assert ours.rcp_used == ("interpolated" if rcp_pass == "pruned" else "found")
    if ours.rcp_used != "none":
        assert ours.olympic_mean == pytest.approx(np.mean(sorted(values)[1:-1]))


def test_normalization_factor_when_faster_than_the_mean(tmp_path, resnet_rcps):
    folder = write_results(tmp_path / "r", "resnet", 1024, [33, 33.5, 34, 34.2, 35])
    ours, _ = same(folder, rcps=resnet_rcps)
    assert ours.norm_factor == pytest.approx(34.5 / np.mean([33.5, 34, 34.2])) and ours.norm_factor > 1


@pytest.mark.parametrize("values,message", [
    ([34, 35, 36, 37, None], "RCP found"),                # one non-converged run is dropped
    ([34, 35, 36, None, None], "Insufficient convergence"),
])
def test_non_converged_runs(tmp_path, resnet_rcps, values, message):
    folder = write_results(tmp_path / "r", "resnet", 1024, values)
    ours, _ = same(folder, rcps=resnet_rcps)
    assert ours.message == message


def test_mismatched_batch_sizes_stop_the_checker_and_fail_here(tmp_path, resnet_rcps):
    folder = write_results(tmp_path / "r", "resnet", 1024, [34, 35, 36, 37, 38])
    (folder / "result_9.txt").write_text("\n".join(result_lines("resnet", 2048, 36)) + "\n")
    ours, expected = same(folder, rcps=resnet_rcps)
    assert expected is None and "batch sizes in files do not match" in ours.checker_error


def test_missing_batch_size(tmp_path, resnet_rcps):
    folder = tmp_path / "r"
    write_results(folder, "resnet", 1024, [34, 35, 36, 37, 38])
    for f in folder.glob("result_*.txt"):
        f.write_text("\n".join(l for l in f.read_text().splitlines() if "global_batch_size" not in l))
    ours, _ = same(folder, rcps=resnet_rcps)
    assert ours.message == "Could not detect global_batch_size"


def test_405b_slack_rule_on_the_shipped_rcps(tmp_path):
    rcps = RcpSet.from_ruleset("5.1.0", "llama31_405b")
    record = next(iter(rcps.full.values()))
    m_star = float(record.min_epochs)
    # Below the plain minimum acceptable mean, within one eval interval (46080) of it.
    values = [m_star - 40000, m_star - 30000, m_star - 20000]
    folder = write_results(tmp_path / "r", "llama31_405b", record.bs, values)
    ours, expected = same(folder, ruleset="5.1.0")
    assert expected[0] is True and ours.rcp_used == "found"
    assert ours.olympic_mean < m_star  # fails without the slack


def _random_case(rng, rcps: RcpSet, n: int):
    records = list(rcps.full.values())
    sizes = [r.bs for r in records]
    choice = rng.integers(4)
    if choice == 0:
        r = records[rng.integers(len(records))]
        bs, mean, sd = r.bs, r.mean, r.stdev
    elif choice == 1 and len(records) > 1:
        i = rng.integers(len(records) - 1)
        bs = (sizes[i] + sizes[i + 1]) // 2 if sizes[i + 1] - sizes[i] > 1 else sizes[i]
        mean, sd = (records[i].mean + records[i + 1].mean) / 2, records[i].stdev
    elif choice == 2:
        bs, mean, sd = max(1, sizes[0] // 2), records[0].mean, records[0].stdev
    else:
        bs, mean, sd = sizes[-1] * 2, records[-1].mean, records[-1].stdev
    values = list(rng.normal(mean * rng.uniform(0.9, 1.05), max(sd, 1e-3 * mean), n))
    if rng.random() < 0.2:
        values[0] = None
    return int(bs), [None if v is None else float(round(v)) for v in values]


def _shipped():
    for ruleset in ("5.1.0", "6.0.0", "6.1.0"):
        for path in sorted(ruleset_file(ruleset, "x").parent.glob("rcps_*.json")):
            bench = path.stem[len("rcps_"):]
            if bench in checker_mod.submission_runs["training"]:
                yield ruleset, bench


@pytest.mark.parametrize("ruleset,benchmark", list(_shipped()))
def test_random_submissions_against_shipped_rcps(tmp_path, ruleset, benchmark):
    rng = np.random.default_rng(zlib.crc32(f"{ruleset}{benchmark}".encode()))
    rcps = RcpSet.from_ruleset(ruleset, benchmark)
    n = checker_mod.submission_runs["training"][benchmark]
    for k in range(4):
        bs, values = _random_case(rng, rcps, n)
        folder = write_results(tmp_path / f"r{k}", benchmark, bs, values)
        for rcp_pass in ("pruned", "full"):
            same(folder, ruleset=ruleset, rcp_pass=rcp_pass)


# Malformed files: a warning naming the file and line, and the checker's treatment.

def _one_bad(tmp_path, resnet_rcps, bad_line: str, replace: str | None = None):
    folder = write_results(tmp_path / "r", "resnet", 1024, [34, 35, 36, 37, 38])
    path = folder / "result_2.txt"
    lines = path.read_text().splitlines()
    if replace is None:
        lines.insert(4, bad_line)
    else:
        lines = [bad_line if replace in l else l for l in lines]
    path.write_text("\n".join(lines) + "\n")
    return folder, path


def test_truncated_json_on_an_unparsed_line_is_ignored_with_a_warning(tmp_path, resnet_rcps):
    folder, path = _one_bad(tmp_path, resnet_rcps, ':::MLLOG {"key": "init_start", "value": nu')
    ours, expected = same(folder, rcps=resnet_rcps)
    assert expected is not None and ours.passed
    assert any(w.startswith(f"{path}:5:") and "not valid JSON" in w for w in ours.warnings)


def test_truncated_json_on_an_eval_line_fails_naming_file_and_line(tmp_path, resnet_rcps):
    folder, path = _one_bad(tmp_path, resnet_rcps, ':::MLLOG {"key": "eval_accuracy", "value": 0.3, "metad',
                            replace='"eval_accuracy"')
    ours, expected = same(folder, rcps=resnet_rcps)
    assert expected is None and f"{path}:5" in ours.checker_error and "not valid JSON" in ours.checker_error


def test_missing_run_stop_counts_as_not_converged(tmp_path, resnet_rcps):
    folder = write_results(tmp_path / "r", "resnet", 1024, [34, 35, 36, 37, 38])
    path = folder / "result_1.txt"
    path.write_text("\n".join(l for l in path.read_text().splitlines() if "run_stop" not in l) + "\n")
    ours, expected = same(folder, rcps=resnet_rcps)
    assert expected is not None
    assert any(w.startswith(f"{path}:") and "no run_stop" in w for w in ours.warnings)


def test_non_numeric_epoch_fails_naming_file_and_line(tmp_path, resnet_rcps):
    bad = mllog("eval_accuracy", 0.9, epoch_num="thirty")
    folder, path = _one_bad(tmp_path, resnet_rcps, bad, replace='"eval_accuracy"')
    ours, expected = same(folder, rcps=resnet_rcps)
    assert expected is None and f"{path}:5" in ours.checker_error


def test_non_numeric_samples_count_is_warned_and_treated_as_the_checker_does(tmp_path):
    rcps = rcp_file(tmp_path / "rcps.json", "llama31_8b", {1024: [float(x) for x in range(100, 120)]})
    folder = write_results(tmp_path / "r", "llama31_8b", 1024, [float(x) for x in range(104, 114)])
    path = folder / "result_3.txt"
    lines = path.read_text().splitlines()
    lines[6] = mllog("eval_accuracy", 0.9, samples_count="many")
    path.write_text("\n".join(lines) + "\n")
    ours, expected = same(folder, rcps=rcps)
    assert any(w.startswith(f"{path}:7:") and "'many'" in w for w in ours.warnings)


@pytest.mark.parametrize("benchmark,bs,center", [("resnet", 1024, 35.0), ("llama31_8b", 32, 180_000.0)])
def test_corrupted_files_get_the_checkers_treatment(tmp_path, resnet_rcps, benchmark, bs, center):
    """Seeded corruptions (truncated lines, null or text values, dropped lines, duplicated
    run_stop): either the same verdict, message and factor, or both stop."""
    rng = np.random.default_rng(11)
    rcps = resnet_rcps if benchmark == "resnet" else None
    ruleset = "6.0.0" if benchmark == "resnet" else "6.1.0"
    n = checker_mod.submission_runs["training"][benchmark]
    stopped = agreed = 0
    for case in range(20):
        folder = write_results(tmp_path / f"c{case}", benchmark, bs, list(rng.normal(center, center * 0.02, n).round(3)))
        path = folder / f"result_{rng.integers(n)}.txt"
        lines = path.read_text().splitlines()
        i = int(rng.integers(1, len(lines)))
        kind = rng.integers(5)
        if kind == 0:
            lines[i] = lines[i][: int(rng.integers(len(":::MLLOG ") + 1, len(lines[i])))]
        elif kind == 1:
            lines[i] = lines[i].replace('"value": ', '"value": null, "x": ', 1)
        elif kind == 2:
            lines[i] = re.sub(r'("(epoch_num|samples_count)": )[0-9.e+]+', r'\1"n/a"', lines[i])
        elif kind == 3:
            del lines[i]
        else:
            lines.append(mllog("run_stop", None, status="aborted"))
        path.write_text("\n".join(lines) + "\n")
        ours, expected = same(folder, ruleset=ruleset, rcps=rcps)
        stopped += expected is None
        agreed += expected is not None
    assert stopped and agreed  # both kinds of outcome were exercised


def test_bert_train_samples(tmp_path):
    rcps = RcpSet.from_ruleset("5.1.0", "bert")
    record = next(iter(rcps.full.values()))
    folder = tmp_path / "r"
    rng = np.random.default_rng(3)
    write_results(folder, "bert", record.bs, [2.0] * 10)  # epoch_num would say 2
    for i, f in enumerate(sorted(folder.glob("result_*.txt"))):
        lines = f.read_text().splitlines()
        lines.insert(-1, mllog("train_samples", float(round(record.mean * rng.normal(1.02, 0.01)))))
        f.write_text("\n".join(lines) + "\n")
    for train_samples in (False, True):
        ours, expected = same(folder, ruleset="5.1.0", train_samples=train_samples)
        assert expected is not None
    assert ours.olympic_mean > 1000  # samples, not epochs


def test_envelope_pruning_changes_the_rcp_used_where_the_modes_differ(tmp_path):
    means = {100: 10.0, 200: 20.0, 300: 40.0, 400: 30.0, 500: 31.0}
    rcps = rcp_file(tmp_path / "r.json", "resnet", {bs: [m - 2, m - 1, m, m, m + 1, m + 2] for bs, m in means.items()})
    folder = write_results(tmp_path / "s", "resnet", 200, [19, 20, 21, 22, 23])
    mlperf, _ = same(folder, rcps=rcps)  # the checker keeps 200
    envelope = check_directory(folder, rcps, prune="envelope")
    assert (mlperf.rcp_used, envelope.rcp_used) == ("found", "interpolated")
    # The envelope runs from 100 straight to 500 (400 lies above that line too).
    assert envelope.rcp_mean == pytest.approx(10.0 + (31.0 - 10.0) * (200 - 100) / (500 - 100))


@pytest.mark.parametrize("bs,values", [(1024, [20, 21, 22, 23, 24]), (16384, [80, 81, 82, 83, 84]), (512, [10, 11, 12, 13, 14])])
def test_rcp_bypass_equals_the_checker(tmp_path, resnet_rcps, bs, values):
    folder = write_results(tmp_path / "r", "resnet", bs, values)
    with open(resnet_rcps) as fh:
        expected = checker_mod.check_directory(str(folder), "training", "6.0.0", False, False, rcp_file=fh,
                                               rcp_pass="pruned_rcps", rcp_bypass=True)
    ours = check_directory(folder, resnet_rcps, "6.0.0", "pruned", rcp_bypass=True)
    assert (ours.passed, ours.message, ours.norm_factor) == tuple(expected)
    assert ours.message.endswith("passed using rcp_bypass")


def test_a_submission_runs_other_than_the_checkers_is_ignored_with_a_warning(tmp_path, resnet_rcps):
    folder = write_results(tmp_path / "r", "resnet", 1024, [33, 33.5, 34, 34.2, 35])
    plain = check_directory(folder, resnet_rcps)
    told = check_directory(folder, resnet_rcps, submission_runs=7)
    assert (told.passed, told.message, told.norm_factor) == (plain.passed, plain.message, plain.norm_factor)
    assert any("--submission-runs 7 ignored: the checker counts 5 runs" in w for w in told.warnings)
    assert not any("--submission-runs" in w for w in plain.warnings)
