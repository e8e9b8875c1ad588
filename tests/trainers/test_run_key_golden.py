"""Golden run keys: every example campaign's (sweeps/examples/*.yaml), and probe campaigns
that give each setting added after run keys existed at and off its default, each
revised recipe as a run's own, as a `base:` and as a switch target, and the trainers'
settings. The keys were computed before the rule of what enters a run key became one
function (trainers/contract/run_key.py) and must never change: a changed key re-runs
every ledgered run of it.

A new example campaign (or probe) is pinned with
`python -m tests.trainers.test_run_key_golden`, which adds the missing ones and never
rewrites a pinned key."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import load_campaign, parse_campaign
from tests.conftest import ROOT
from tests.helpers.campaigns import tiny_campaign

GOLDEN = Path(__file__).parent / "golden" / "run_keys.json"
EXAMPLES = ROOT / "sweeps" / "examples"

_FP8 = {"x": {"format": "e4m3"}, "w": {"format": "e4m3"}, "dy": {"format": "e5m2"}}
_NVFP4 = {
    "x": {"format": "e2m1", "scaling": "nvfp4", "block": 16},
    "w": {"format": "e2m1", "scaling": "nvfp4", "tile": [16, 16]},
    "dy": {"format": "e2m1", "scaling": "nvfp4", "rounding": "sr"},
    "wgrad": {"transform": "hadamard"},
}
_AT_DEFAULTS = {"bf16_first_blocks": 0, "bf16_last_blocks": 0, "bf16_layers": [], "bf16_from_tokens": None,
                "fp8_attention": False, "backward": "quantized"}
_NAMED = ["bf16", "fp8_tensorwise", "fp8_channelwise", "fp8_delayed", "fp8_rowwise", "fp8_rowwise_gw_hp",
          "fp8_block", "mxfp8", "mxfp4", "mxfp4_sr_rht", "mxfp4_dethad", "nvfp4", "nvfp4_4over6",
          "nvfp4_rowscaled", "mxfp8_fwd_nvfp4_bwd", "nvfp4_fwd_mxfp8_bwd", "mor"]


def _probe(recipes: list[Any], **trainer: Any) -> dict[str, Any]:
    """A tiny-LM campaign of one seed per recipe and batch size (2 blocks, so placements fit)."""
    data = tiny_campaign(recipes=recipes, seeds=1)
    data["trainer"] = {**data["trainer"], "n_layers": 2, **trainer}
    return data


def _command(**trainer: Any) -> dict[str, Any]:
    data = yaml.safe_load((EXAMPLES / "command.yaml").read_text())
    data["trainer"] = {**data["trainer"], **trainer}
    data["seeds"] = 1
    return data


def _switch(target: Any) -> dict[str, Any]:
    return {"switch_to": target, "switch_from_tokens": 200_000}


PROBES: dict[str, dict[str, Any]] = {
    "named": _probe(_NAMED),
    "named_added_later_at_defaults": _probe([
        "bf16", {"fp8_tensorwise": _AT_DEFAULTS}, {"nvfp4": _AT_DEFAULTS}, {"mxfp4": {"bf16_last_blocks": 0}},
        {"fp8_block": {**_AT_DEFAULTS, "use_f32_scales": False}}, {"mor": {"bf16_layers": [], "threshold": 0.05}},
    ]),
    "named_added_later_off_defaults": _probe([
        "bf16", {"fp8_tensorwise": {"fp8_attention": True}},
        {"nvfp4": {"bf16_last_blocks": 1, "backward": "dequantized"}},
        {"mxfp8": {"bf16_layers": ["*.qkv"], "scale_mode": "rceil"}},
        {"fp8_channelwise": {"bf16_from_tokens": 200_000}},
        {"fp8_block": {"bf16_first_blocks": 1, "use_f32_scales": True}}, {"mor": {"backward": "high_precision"}},
        {"mxfp4": {"bf16_last_blocks": 1}},
    ]),
    "based": _probe([
        "bf16",
        {"b_defaults": {"base": "fp8_tensorwise", **_AT_DEFAULTS}},
        {"b_first": {"base": "fp8_tensorwise", "bf16_first_blocks": 1}},
        {"b_last": {"base": "fp8_tensorwise", "bf16_last_blocks": 1}},
        {"b_layers": {"base": "fp8_tensorwise", "bf16_layers": ["blocks.0.fc2"]}},
        {"b_from": {"base": "fp8_tensorwise", "bf16_from_tokens": 200_000}},
        {"b_attn": {"base": "fp8_tensorwise", "fp8_attention": True}},
        {"b_hp": {"base": "fp8_tensorwise", "backward": "high_precision"}},
        {"b_nv_last0": {"base": "nvfp4", "bf16_last_blocks": 0}},
        {"b_nv_last1": {"base": "nvfp4", "bf16_last_blocks": 1, "hadamard": False}},
        {"b_block": {"base": "fp8_block", "use_f32_scales": True}},
        {"b_channel": {"base": "fp8_channelwise"}},
        {"b_mor": {"base": "mor", "granularity": "block"}},
        {"b_delayed": {"base": "fp8_delayed", "margin": 1}},
    ]),
    "written": _probe([
        "bf16",
        {"w_nvfp4": _NVFP4},
        {"w_had32": {**_NVFP4, "wgrad": {"transform": "hadamard", "size": 32, "signs": "random"}}},
        {"w_had_none": {**_NVFP4, "wgrad": {"transform": "hadamard", "signs": "none"}}},
        {"w_fp8": _FP8},
        {"w_bf16_wgrad": {**_FP8, "wgrad": {"precision": "bf16"}}},
        {"w_attn": {**_FP8, "fp8_attention": True}},
        {"w_back": {**_FP8, "backward": "dequantized"}},
        {"w_placed": {**_FP8, "bf16_first_blocks": 1, "bf16_layers": ["*.fc1"]}},
        {"w_from": {**_FP8, "bf16_from_tokens": 200_000}},
        {"w_dgrad": {**_FP8, "w_dgrad": {"format": "e4m3", "scaling": "rowwise"}}},
        {"w_delayed": {"x": {"format": "e4m3", "scaling": "delayed"}, "w": {"format": "e4m3", "scaling": "delayed"},
                       "dy": {"format": "e5m2", "scaling": "delayed"}, "amax_history_len": 16}},
        {"w_mor": {"x": {"format": "e4m3", "scaling": "mor"}, "w": {"format": "e4m3", "scaling": "mor"},
                   "dy": {"format": "e4m3", "scaling": "mor"}, "threshold": 0.1}},
    ]),
    "written_and_based_added_later_at_defaults": _probe([
        "bf16",
        {"w_nvfp4": {**_NVFP4, "wgrad": {"transform": "hadamard", "size": 16, "signs": "fixed"}, **_AT_DEFAULTS}},
        {"w_fp8": {**_FP8, "wgrad": {"precision": "quantized", "transform": "none"}, **_AT_DEFAULTS}},
        {"b_channel": {"base": "fp8_channelwise", **_AT_DEFAULTS}},
    ]),
    "switches": _probe([
        "bf16",
        {"nvfp4": _switch("mxfp8")},
        {"fp8_tensorwise": _switch("fp8_block")},
        {"mxfp8": _switch({"s_mor": {"base": "mor", "threshold": 0.1}})},
        {"mxfp4": _switch({"s_fp8": _FP8})},
        {"fp8_rowwise": _switch("bf16")},
        {"fp8_channelwise": _switch({"fp8_tensorwise": {"bf16_last_blocks": 1}})},
        {"fp8_block": _switch({"mxfp8": {"scale_mode": "rceil"}})},
        {"s_written": {**_FP8, **_switch("mor")}},
        {"s_based": {"base": "fp8_channelwise", **_switch("nvfp4")}},
    ]),
    "grid": _probe(["bf16", {"nvfp4": {"grid": {"hadamard": [True, False], "bf16_last_blocks": [0, 1]}}}]),
    "tinylm_added_later_at_defaults": _probe(["bf16", "fp8_tensorwise"], device="cpu", fp8_gemm="auto",
                                             checkpoint_every_evals=None),
    "tinylm_cuda": _probe(["bf16", "fp8_tensorwise", "fp8_block"], device="cuda"),
    "tinylm_cuda_scaled_mm": _probe(["bf16", "fp8_tensorwise"], device="cuda", fp8_gemm="scaled_mm"),
    "tinylm_fp8_gemm": _probe(["bf16", "fp8_tensorwise"], fp8_gemm="emulated"),
    "tinylm_checkpoints": _probe(["bf16", "fp8_tensorwise"], checkpoint_every_evals=2),
    "tinylm_settings": _probe(["bf16", "fp8_tensorwise"], qk_layernorm=True, softmax_cap=30.0, threads=2,
                              telemetry_steps=0),
    # a text file's data, pinned before the corpus source existed, and the corpus (issue 50)
    "tinylm_text_file": {**_probe(["bf16", "fp8_tensorwise"], data={"source": "text", "path": "corpus.txt"}),
                         "target": {"metric": "eval_loss", "mode": "min", "value": 2.0}},
    "tinylm_corpus": {**_probe(["bf16", "fp8_tensorwise"], data={"source": "corpus", "name": "shakespeare"}),
                      "target": {"metric": "eval_loss", "mode": "min", "value": 2.0}},
    "tinylm_gang": {**_probe(["bf16", "mor"]), "launch": {"nodes": 1, "processes_per_node": 2},
                    "backend": {"kind": "local", "workers": 1}},
    "command_added_later_at_defaults": _command(start="per_rank", mllog_file=None),
    "command_mllog_file": _command(mllog_file="mllog.txt"),
    "command_per_node": _command(start="per_node"),
    # issue 33: the new recipes, and 4-over-6's options off their defaults (at them:
    # "named" above) and TE's recipe with an option off its own defaults
    "fp6_4over6_dethad16": _probe([
        "bf16", "mxfp6", "mxfp4_dethad16", "nvfp4_4over6_te",
        {"nvfp4_4over6": {"error": "mae", "global_scale_max": 256}},
        {"te_mse": {"base": "nvfp4_4over6_te", "error": "mse"}},
        {"my_mxfp6": {"x": {"format": "e2m3", "scaling": "mx"}, "w": {"format": "e2m3", "scaling": "mx"},
                      "dy": {"format": "e3m2", "scaling": "mx"}}},
    ]),
}


def _keys(specs) -> list[list[str]]:
    return sorted([s.run_name, s.run_key] for s in specs)


def _campaigns() -> dict[str, Any]:
    """Label -> a function giving the campaign (loaded when asked, so one that cannot
    load fails its own test only)."""
    out: dict[str, Any] = {f"examples/{p.stem}": (lambda p=p: load_campaign(p))
                           for p in sorted(EXAMPLES.glob("*.yaml"))}
    out.update({f"probes/{label}": (lambda d=d, label=label: parse_campaign(copy.deepcopy(d), EXAMPLES, label))
                for label, d in PROBES.items()})
    return out


def _golden() -> dict[str, list[list[str]]]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def test_every_example_campaign_and_probe_is_pinned():
    missing = sorted(set(_campaigns()) - set(_golden()))
    assert not missing, f"no golden run keys for {missing}: pin them with python -m tests.trainers.test_run_key_golden"


@pytest.mark.parametrize("label", sorted(_golden()))
def test_run_keys_equal_the_golden_keys(label):
    campaigns = _campaigns()
    assert label in campaigns, f"{label}: pinned but no longer an example campaign or probe; remove it from {GOLDEN}"
    assert _keys(expand(campaigns[label]())) == _golden()[label]


def test_settings_added_later_at_their_defaults_are_the_runs_that_leave_them_out():
    """The probes that give each setting added later at its default pin the keys of the
    campaigns that leave it out; off its default, every key differs."""
    golden = _golden()
    named = dict(golden["probes/named"])
    at_defaults = dict(golden["probes/named_added_later_at_defaults"])
    assert at_defaults == {run: named[run] for run in at_defaults}
    off = dict(golden["probes/named_added_later_off_defaults"])
    assert all(off[run] != named[run] for run in off if not run.startswith("bf16-"))
    assert dict(golden["probes/tinylm_added_later_at_defaults"]).items() <= named.items()
    assert golden["probes/command_added_later_at_defaults"] == [
        [run, key] for run, key in golden["examples/command"] if run.endswith("-s0")]
    given = dict(golden["probes/written_and_based_added_later_at_defaults"])
    assert given.items() <= {**dict(golden["probes/written"]), **dict(golden["probes/based"])}.items()
    keys = [key for pinned in golden.values() for _, key in pinned]
    assert len(set(keys)) > 100


if __name__ == "__main__":
    pinned = _golden()
    for label, campaign in _campaigns().items():
        pinned.setdefault(label, _keys(expand(campaign())))
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(dict(sorted(pinned.items())), indent=1) + "\n")
    print(f"{GOLDEN}: {len(pinned)} campaigns, {sum(map(len, pinned.values()))} run keys")
