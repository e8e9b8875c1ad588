"""The report's precision maps: read from the runs' tags in a real MLflow store, one
table per recipe of layer x GEMM -> format, in HTML and markdown."""

from __future__ import annotations

import json

from rcpforge.analysis.layer_map import layer_map_sections, load_layer_maps
from rcpforge.analysis.load import load_runs
from rcpforge.analysis.report import render_html, render_markdown
from rcpforge.trainers.contract.schema import TAG_DISCLOSED, TAG_PRECISION_MAP
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm.precision_map import disclosed_precisions, precision_map
from tests.analysis.stores import file_runs
from tests.analysis.test_report import _Tables


def _map(name: str, options: dict | None = None, tokens_per_step: int = 128) -> dict:
    return precision_map(resolve_recipe(name, options or {}), 2, tokens_per_step, 4096)


def _tables(sections) -> dict[str, dict]:
    tables = _Tables()
    tables.feed(render_html("r", sections))
    return tables.tables


def test_one_table_per_recipe_of_layer_by_gemm():
    maps = {("bf16", 16): _map("bf16"), ("bf16", 64): _map("bf16"),
            ("fp8_tensorwise", 16): {**_map("fp8_tensorwise", {"bf16_first_blocks": 1}),
                                     "disclosed": {"linear": "fp8", "attn": "bfloat16", "comm": "fp32"}}}
    sections = layer_map_sections(maps)
    assert [s.key for s in sections] == ["precision-map-bf16", "precision-map-fp8_tensorwise"]
    assert "lowest numerical precision): linear fp8, attn bfloat16, comm fp32" in sections[1].text
    table = _tables(sections)["table-precision-map-fp8_tensorwise"]
    assert table["header"] == ["layer", "fprop", "dgrad", "wgrad"]
    rows = {r["layer"]: (r["fprop"], r["dgrad"], r["wgrad"]) for r in table["rows"]}
    assert rows["blocks.0.fc1"] == ("bf16", "bf16", "bf16")  # kept in BF16 by placement
    assert rows["blocks.1.fc1"] == ("e4m3", "e5m2 x e4m3", "e5m2 x e4m3")
    assert rows["blocks.1.attn_qk"] == rows["lm_head"] == ("bf16", "bf16", "bf16")
    assert len(rows) == 13


def test_a_schedule_shows_its_switch_and_batch_sizes_with_other_switches_apart(tmp_path):
    late = {"bf16_from_tokens": 1100}
    maps = {("nvfp4", 16): _map("nvfp4", late, 128), ("nvfp4", 64): _map("nvfp4", late, 512)}
    sections = layer_map_sections(maps)
    assert [s.title for s in sections] == ["Precision map: nvfp4 (batch size 16)",
                                           "Precision map: nvfp4 (batch size 64)"]
    last = _tables(sections)["table-precision-map-nvfp4"]["rows"][-1]
    assert last == {"layer": "every layer from 1,152 tokens on", "fprop": "bf16", "dgrad": "bf16", "wgrad": "bf16"}
    text = render_markdown("r", sections, tmp_path)
    assert "| every layer from 1,536 tokens on | bf16 | bf16 | bf16 |" in text
    assert "| blocks.0.qkv | nvfp4 | nvfp4 | nvfp4 |" in text


def test_maps_are_read_from_the_runs_tags(tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/m.db"
    runs = [{"recipe": r, "batch_size": bs, "seed": s, "status": "converged", "samples": 10}
            for r in ("bf16", "fp8_tensorwise") for bs in (16, 64) for s in (0, 1)]
    ids = file_runs(uri, "c", (tmp_path / "art").as_uri(), runs)
    client = MlflowClient(tracking_uri=uri)
    fp8 = _map("fp8_tensorwise", {"fp8_attention": True})
    for run_id, r in zip(ids, runs, strict=True):
        if r["recipe"] == "fp8_tensorwise" and r["batch_size"] == 16:
            client.set_tag(run_id, TAG_PRECISION_MAP, json.dumps(fp8, separators=(",", ":")))
            for key, value in disclosed_precisions(fp8).items():
                client.set_tag(run_id, TAG_DISCLOSED + key, value)
    maps = load_layer_maps(uri, load_runs(uri, "c"))
    assert list(maps) == [("fp8_tensorwise", 16)]  # runs without the tag (before maps existed): none
    assert maps[("fp8_tensorwise", 16)]["phases"] == fp8["phases"]
    assert maps[("fp8_tensorwise", 16)]["disclosed"] == {"linear": "fp8", "attn": "fp8", "comm": "fp32"}
