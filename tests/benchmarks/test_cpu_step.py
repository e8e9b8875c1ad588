"""benchmarks/cpu_step.py at a toy size: its rows, its JSON and its flag errors (its
figures are not checked: a test never asserts a timing threshold)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

SCRIPT = str(ROOT / "benchmarks/cpu_step.py")


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_toy_run_writes_every_row_with_consistent_ratios(tmp_path):
    out = tmp_path / "cpu_step.json"
    made = _run("--sizes", "16", "--rounds", "1", "--steps", "1", "--recipes", "bf16,nvfp4", "--json", str(out))
    assert made.returncode == 0, made.stdout + made.stderr
    found = json.loads(out.read_text())
    assert set(found["machine"]["flags"]) == {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
    assert found["machine"]["threads"] == 1
    [size] = found["sizes"]
    assert size["d_model"] == 16
    rows = {r["row"]: r for r in size["rows"]}
    assert list(rows) == ["bf16", "nvfp4", "fp32 eager", "ideal"]
    ideal, bf16 = rows["ideal"]["ms"], rows["bf16"]["ms"]
    assert size["ideal_ms"] == ideal and size["bf16_ms"] == bf16
    for row in rows.values():
        assert row["ms"] > 0
        assert row["x_ideal"] == pytest.approx(row["ms"] / ideal)
        assert row["x_bf16"] == pytest.approx(row["ms"] / bf16)
    assert rows["ideal"]["x_ideal"] == pytest.approx(1.0) and rows["bf16"]["x_bf16"] == pytest.approx(1.0)
    # d_model 16 has no bf16 target; nvfp4 is FP4-class (<= 2.5x bf16): a verdict either way
    assert rows["bf16"]["target"] is None and rows["bf16"]["met"] is None
    assert rows["nvfp4"]["target"] == "<= 2.5x bf16" and isinstance(rows["nvfp4"]["met"], bool)
    assert rows["fp32 eager"]["target"] is None and rows["ideal"]["target"] is None
    for name in rows:
        assert name in made.stdout
    assert "CPU flags present:" in made.stdout and "torch" in made.stdout


def test_a_bad_flag_is_argparses_usage_error_at_the_command_line():
    made = _run("--sizes", "abc", timeout=60)
    assert made.returncode == 2
    assert "Traceback" not in made.stderr
    assert made.stderr.splitlines()[-1] == (
        "cpu_step.py: error: argument --sizes: not a comma-separated list of integers: 'abc'")


@pytest.mark.parametrize("flags, message", [
    (["--sizes", "64,x"], "argument --sizes: not a comma-separated list of integers"),
    (["--sizes", "30"], "argument --sizes: d_model 30: must be >= 8 and divisible by n_heads (4)"),
    (["--recipes", "bf16,no_such_recipe"], "argument --recipes: unknown recipe 'no_such_recipe'"),
    (["--rounds", "0"], "argument --rounds: must be at least 1"),
    (["--context", "1"], "argument --context: must be between 2 and 4096"),
    (["--json", "/no/such/dir/out.json"], "argument --json: no such directory"),
])
def test_a_bad_flag_is_a_usage_error(flags, message, capsys):
    spec = importlib.util.spec_from_file_location("cpu_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exited:
        module._parse(flags)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_bf16_is_always_timed_and_recipes_are_deduplicated():
    spec = importlib.util.spec_from_file_location("cpu_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._parse(["--recipes", "nvfp4,mxfp8,nvfp4"]).recipes == ["bf16", "nvfp4", "mxfp8"]
    assert module._parse([]).sizes == [64, 128, 256, 512]
    assert [module.recipe_class(r) for r in ("fp8_tensorwise", "mxfp8", "mor", "nvfp4", "mxfp4",
                                             "mxfp8_fwd_nvfp4_bwd", "bf16")] == [
        "fp8", "fp8", "fp8", "fp4", "fp4", "fp4", None]
