"""A cell whose runs ran on more than one kind of GPU is flagged (analysis/hardware.py):
in analyze's notes and in the report's RCP table (status and analyze on a real store:
tests/orchestrator/test_status.py)."""

from __future__ import annotations

import pyarrow as pa

from rcpforge.analysis.analyze import AnalysisRequest
from rcpforge.analysis.campaign_report import rcp_table_section
from rcpforge.analysis.hardware import mixed_hardware_notes
from rcpforge.analysis.load import RUN_SCHEMA
from rcpforge.analysis.rcp_table import rcp_table

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


def _runs(accelerators: dict[tuple[str, int], list[str | None]]) -> pa.Table:
    rows = [{"run_id": f"{recipe}-{bs}-{seed}", "run_key": f"{recipe}-{bs}-{seed}", "recipe": recipe, "batch_size": bs,
             "seed": seed, "status": "converged", "samples_to_target": 100.0 + seed, "model": "",
             "accelerator": name}
            for (recipe, bs), names in accelerators.items() for seed, name in enumerate(names)]
    return pa.Table.from_pylist(rows, schema=RUN_SCHEMA)


def test_only_a_cell_of_two_kinds_is_flagged():
    runs = _runs({("bf16", 16): [H100, H100, A100], ("bf16", 32): [H100] * 3, ("fp8", 16): [None, None, None],
                  ("fp8", 32): [A100, None, A100]})
    assert mixed_hardware_notes(runs) == [
        f"bf16 at batch size 16: its runs ran on 2 kinds of GPU (2 on {H100}, 1 on {A100}); mixing hardware "
        "mixes convergence: pin launch.gpu_type, or compare the kinds as separate campaigns"]


def test_the_reports_rcp_table_carries_the_flag():
    runs = _runs({("bf16", 16): [H100, A100, A100], ("bf16", 32): [H100] * 3})
    req = AnalysisRequest("c", "rcpforge_unit", 3, ["bf16"], {}, resamples=200)
    section = rcp_table_section(req, rcp_table(runs, req.benchmark, req.submission_runs), runs)
    assert "bf16 at batch size 16: its runs ran on 2 kinds of GPU (2 on NVIDIA A100-SXM4-80GB, 1 on" in section.text
    same = _runs({("bf16", 16): [H100] * 3, ("bf16", 32): [H100] * 3})
    assert "kinds of GPU" not in rcp_table_section(req, rcp_table(same, req.benchmark, 3), same).text
