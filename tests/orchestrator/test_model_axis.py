"""The model axis (`models:`, docs/models.md) on the instant command trainer
(tests/helpers/recording_program.py): each model's settings reach its program as
placeholders, its runs are filed, shown and exported per model, and a second run of the
campaign runs nothing twice. Run keys of campaigns without the axis are pinned."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from mlflow import MlflowClient

from rcpforge.analysis.load import RUN_SCHEMA
from rcpforge.analysis.load_sql import load_campaign_runs
from rcpforge.orchestrator.adaptive import campaign_looks, look_specs
from rcpforge.orchestrator.campaign import run_campaign
from rcpforge.orchestrator.cli.analysis import analysis_request
from rcpforge.orchestrator.cli.render import status_table
from rcpforge.orchestrator.dryrun import dry_run
from rcpforge.orchestrator.ledger import LedgerEntry
from rcpforge.orchestrator.models_analysis import analyze_models
from rcpforge.orchestrator.results_dirs import export_results
from rcpforge.orchestrator.status import campaign_status
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import CampaignError, load_campaign, parse_campaign
from rcpforge.trainers.contract import RunStatus
from rcpforge.trainers.contract.schema import (
    METRIC_SAMPLES_TO_TARGET,
    TAG_MODEL,
    TAG_MODEL_FLOPS_PER_TOKEN,
    TAG_MODEL_PARAMS,
    TAG_RUN_KEY,
)
from tests.conftest import ROOT, run_cli
from tests.helpers.campaigns import tiny_campaign, write_campaign

PROGRAM = ROOT / "tests" / "helpers" / "recording_program.py"
EXAMPLES = ROOT / "sweeps" / "examples"

# (example, run name, run key) computed before the model axis existed: a campaign without
# one keeps every key (tests/trainers/test_run_key_golden.py pins all of them).
PINNED = [
    ("quickstart", "bf16-bs32-s0", "b8d2d566153b8fd8bb45acbc"),
    ("quickstart", "fp8_tensorwise-bs128-s3", "3ba4adca2771b7d5a424c1dd"),
    ("command", "bf16-bs128-s2", "0029ff1f9b05a9f3706eb4fb"),
    ("adaptive", "nvfp4-bs64-s10", "be19b80859b724e83e4add5d"),
    ("recipe_lab", "nvfp4-hadamard_off-sr_off-bs128-s2", "77dd36d87efd195333db0476"),
]


def _axis_campaign(**overrides) -> dict:
    """Two models of a command trainer, each with a free setting and a size; 8 instant runs."""
    data = {
        "name": "axis",
        "trainer": {"kind": "command", "metric_key": "eval_accuracy", "unit": "epochs", "max_wall_s": 60,
                    "argv": ["{python}", str(PROGRAM), "{output_dir}", "{model}", "{model_layers}",
                             "{model_params}", "{lr}"]},
        "target": {"metric": "eval_accuracy", "mode": "max", "value": 0.9},
        "budget": {"max_tokens": 1000, "eval_every_tokens": 10},
        "recipes": ["bf16", {"fp8": {"precision": "fp8"}}],
        "batch_sizes": [16, 64],
        "seeds": 1,
        "hparams": {16: {"lr": 0.1}, 64: {"lr": 0.2}},
        "models": [
            {"name": "small", "layers": 2, "params": 1.2e9, "flops_per_token": 7.4e9},
            {"name": "large", "layers": 8, "params": 8.0e9, "flops_per_token": 4.8e10, "max_wall_s": 90,
             "hparams": {16: {"lr": 0.05}, 64: {"lr": 0.07}}},
        ],
        "backend": {"kind": "local", "workers": 2},
        "rcp": {"benchmark": "axis_bench", "submission_runs": 3},
    }
    data.update(overrides)
    return data


@pytest.mark.parametrize(("example", "name", "key"), PINNED)
def test_run_keys_without_the_axis_are_unchanged(example, name, key):
    specs = {s.run_name: s for s in expand(load_campaign(EXAMPLES / f"{example}.yaml"))}
    assert specs[name].run_key == key
    assert specs[name].model == "" and specs[name].model_params is None


def test_a_models_settings_enter_its_run_key_and_its_size_does_not():
    specs = expand(parse_campaign(_axis_campaign()))
    assert len(specs) == 2 * 2 * 2 and len({s.run_key for s in specs}) == 8
    assert [s.run_name for s in specs[:2]] == ["small-bf16-bs16-s0", "small-bf16-bs64-s0"]
    large = next(s for s in specs if s.model == "large")
    assert large.trainer["max_wall_s"] == 90 and large.model_settings == {"layers": 8}  # a trainer setting, a free one
    assert large.hparams == {"lr": 0.05} and large.model_params == 8_000_000_000
    resized = _axis_campaign()
    resized["models"][0]["params"] = 1.3e9  # a corrected count does not re-run the model's runs
    relayered = _axis_campaign()
    relayered["models"][0]["layers"] = 3
    before = [s.run_key for s in specs if s.model == "small"]
    assert [s.run_key for s in expand(parse_campaign(resized)) if s.model == "small"] == before
    assert not set(s.run_key for s in expand(parse_campaign(relayered)) if s.model == "small") & set(before)


def test_tiny_lm_models_override_trainer_settings_and_get_their_size():
    data = tiny_campaign(models=[{"name": "w32", "d_model": 32}, {"name": "w64", "d_model": 64, "n_heads": 4}])
    specs = expand(parse_campaign(data))
    sizes = {s.model: (s.trainer["d_model"], s.trainer["n_heads"], s.model_params) for s in specs}
    assert sizes["w32"][:2] == (32, 2) and sizes["w64"][:2] == (64, 4)
    assert sizes["w64"][2] > 3 * sizes["w32"][2]  # the blocks grow with the square of the width
    plain = {s.run_key for s in expand(parse_campaign(tiny_campaign()))}
    assert not plain & {s.run_key for s in specs}  # the axis names its runs' model: new keys


WRONG_AXES = [
    ([{"name": "a", "d_model": 32}, {"name": "a", "d_model": 64}],
     "models: two models are named a; give each model its own name"),
    ([{"name": "a", "d_modle": 32}], "models.a.d_modle: is not a known field; did you mean `d_model`?"),
    ([{"name": "a", "d_model": 30, "n_heads": 4}],
     "models.a.d_model: 30 is not divisible by n_heads (4); give a d_model that is a multiple of n_heads"),
    ([{"name": "a", "hparams": {16: {"lr": 0.01, "warmup_tokens": 0}}}],
     "models.a.hparams: no entry for batch size 64 of model a; give every batch size its hyperparameters"),
    ([{"d_model": 32}], "models[0]: the model has no name; give it name:"),
    ([{"name": "a", "params": 1000}], "models.a.params: the tinylm trainer computes it from the model's shapes"),
    ([{"name": "a", "kind": "command"}], "models.a.kind: a model varies the settings of the campaign's trainer"),
]


@pytest.mark.parametrize(("models", "says"), WRONG_AXES)
def test_a_wrong_axis_is_one_line_naming_the_field(models, says):
    with pytest.raises(CampaignError) as err:
        parse_campaign(tiny_campaign(models=models))
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_placeholder_of_a_setting_some_model_lacks_is_refused():
    data = _axis_campaign()
    del data["models"][1]["layers"]
    with pytest.raises(CampaignError, match=r"trainer.argv\[4\]: placeholder \{model_layers\} is not a setting of "
                                            r"model large; give every model layers:"):
        parse_campaign(data)
    with pytest.raises(CampaignError, match=r"placeholder \{model_layers\} is a model's setting, but the campaign "
                                            r"has no models: section"):
        parse_campaign({k: v for k, v in _axis_campaign().items() if k != "models"})


def test_the_cli_refuses_a_wrong_axis_with_exit_2(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign(models=[{"name": "a"}, {"name": "a"}]))
    proc = run_cli("run", str(path), "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "models: two models are named a; give each model its own name")


def test_adaptive_looks_compare_within_a_model():
    """Each model's fp8 against its own bf16: small's is twice as slow, large's as fast; a
    comparison across models (large fp8 against small bf16) would say 0.5."""
    campaign = parse_campaign(_axis_campaign(seeds=None, adaptive={"margin": 1.05, "min_seeds": 4, "max_seeds": 8}))
    state = campaign_looks(campaign, {})
    assert set(state.seeds) == {(f"{m}/{r}", b) for m in ("small", "large") for r in ("bf16", "fp8") for b in (16, 64)}
    assert state.reference == "bf16" and not state.looks and state.waiting == 8 * 4
    asked = look_specs(campaign, state)
    assert Counter(s.model for s in asked) == {"small": 16, "large": 16}
    samples = {("small", "bf16"): 100, ("small", "fp8"): 200, ("large", "bf16"): 50, ("large", "fp8"): 50}
    ledger = {s.run_key: LedgerEntry(f"id{i}", s.run_key, RunStatus.converged, 1, model=s.model, recipe=s.recipe,
                                     batch_size=s.batch_size,
                                     metrics={METRIC_SAMPLES_TO_TARGET: samples[(s.model, s.recipe)] + s.seed})
              for i, s in enumerate(asked)}
    looked = campaign_looks(campaign, ledger)
    factors = {(e.candidate, e.batch_size): e.interval.factor for e in looked.looks if e.look == 1}
    assert set(factors) == {(f"{m}/fp8", b) for m in ("small", "large") for b in (16, 64)}
    assert factors[("small/fp8", 16)] == pytest.approx(2.0, rel=0.02)
    assert factors[("large/fp8", 64)] == pytest.approx(1.0, rel=0.02)


def test_a_campaign_with_the_axis_runs_once_resumes_and_shows_its_models(tmp_path):
    path = write_campaign(tmp_path, _axis_campaign(recipes=["bf16"]))  # 2 models x 2 batch sizes
    campaign = load_campaign(path)
    assert dict(run_campaign(campaign).statuses) == {"converged": 4}

    again = run_campaign(load_campaign(path))  # a second run: every key has its outcome
    assert again.launched == 0 and again.plan is not None and again.plan.done == 4
    client = MlflowClient(campaign.tracking_uri)
    experiment = client.get_experiment_by_name("axis")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert sorted(Counter(r.data.tags[TAG_RUN_KEY] for r in runs).values()) == [1] * 4
    assert {(r.data.tags[TAG_MODEL], r.data.tags[TAG_MODEL_PARAMS], r.data.tags[TAG_MODEL_FLOPS_PER_TOKEN])
            for r in runs} == {("small", "1200000000", "7400000000.0"), ("large", "8000000000", "48000000000.0")}

    for spec in expand(campaign):  # the program got the model's settings, as argv and as variables
        started = json.loads((campaign.run_dir(spec) / "started.json").read_text())
        layers = str(spec.model_settings["layers"])
        assert started["argv"][-5:] == [str(campaign.run_dir(spec)), spec.model, layers, str(spec.model_params),
                                        str(spec.hparams["lr"])]
        env = started["env"]
        assert (env["RCPFORGE_MODEL"], env["RCPFORGE_MODEL_LAYERS"]) == (spec.model, layers)
        assert env["RCPFORGE_BENCHMARK"] == f"axis_bench_{spec.model}"

    table = load_campaign_runs(campaign.tracking_uri, "axis")
    rows = {(r["model"], r["recipe"], r["batch_size"]): r for r in table.to_pylist()}
    assert rows[("large", "bf16", 64)]["model_params"] == 8_000_000_000
    assert rows[("small", "bf16", 16)]["model_flops_per_token"] == 7.4e9
    assert str(table.schema.field("model_params").type) == "int64"

    found = campaign_status(campaign)
    cells = {(c["model"], c["recipe"], c["batch_size"]): c["converged"]
             for c in (cell.as_dict() for cell in found.cells)}  # as `status --json` prints them
    view = status_table(campaign, found, "core_hours", 0)
    assert [c.header for c in view.columns][:3] == ["model", "recipe", "batch size"]
    assert sorted(view.columns[0]._cells) == ["large", "large", "small", "small"]
    assert cells == {(m, "bf16", b): 1 for m in ("small", "large") for b in (16, 64)}

    out = tmp_path / "results"
    exported = export_results(campaign.tracking_uri, "axis", out, campaign.run_dir)
    assert {(c.model, c.recipe, c.batch_size) for c in exported} == set(cells)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("result_*.txt"))
    assert files == sorted(f"{m}/bf16/bs{b}/result_0.txt" for m in ("small", "large") for b in (16, 64))
    assert '"value": "axis_bench_large"' in Path(out / "large" / "bf16" / "bs16" / "result_0.txt").read_text()


def test_analyze_writes_each_models_rcps_and_factors_apart(tmp_path):
    """Synthetic runs: small's fp8 needs twice the samples of its bf16, large's the same;
    each model's RCP files carry its benchmark and the hyperparameters its runs recorded."""
    campaign = parse_campaign(_axis_campaign())
    slow = {("small", "bf16"): 100, ("small", "fp8"): 200, ("large", "bf16"): 50, ("large", "fp8"): 50}
    rows = [{"run_id": f"r{i}", "run_key": f"k{i}", "recipe": s.recipe, "batch_size": s.batch_size, "seed": seed,
             "status": "converged", "tokens_to_target": None, "wall_s": 1.0, "tokens_trained": 1.0, "error": None,
             "samples_to_target": float(slow[(s.model, s.recipe)] + seed),
             "hparams": sorted((k, str(v)) for k, v in s.hparams.items()), "model": s.model,
             "model_params": s.model_params, "model_flops_per_token": s.model_flops_per_token}
            for i, (s, seed) in enumerate((s, seed) for s in expand(campaign) for seed in range(4))]
    table = pa.Table.from_pylist(rows, schema=RUN_SCHEMA)
    done = dict(analyze_models(campaign, table, analysis_request(campaign, None, 0, resamples=200), tmp_path))
    assert list(done) == ["small", "large"]
    records = json.loads((tmp_path / "large" / "rcps_axis_bf16.json").read_text())
    assert {(r["Benchmark"], r["BS"], r["Hyperparams"]["lr"]) for r in records.values()} == {
        ("axis_bench_large", 16, 0.05), ("axis_bench_large", 64, 0.07)}
    factors = {m: {(f["candidate"], f["batch_size"]): f["factor"] for f in
                   json.loads((tmp_path / m / "factors.json").read_text())["factors"]} for m in done}
    assert factors["small"][("fp8", 16)] == pytest.approx(2.0, rel=0.02)
    assert factors["large"][("fp8", 64)] == pytest.approx(1.0, rel=0.02)


def test_a_model_reads_its_own_tune_table(tmp_path):
    (tmp_path / "hparams.w64.yaml").write_text(
        "# written by `rcpforge tune`\nhparams:\n  16: {lr: 0.003, warmup_tokens: 512}\n  64: {lr: 0.006}\n")
    data = tiny_campaign(models=[{"name": "w32"}, {"name": "w64", "d_model": 64, "hparams_from": "hparams.w64.yaml",
                                                   "hparams": {64: {"lr": 0.1, "warmup_tokens": 256}}}])
    campaign = parse_campaign(data, base_dir=tmp_path)
    hparams = {(s.model, s.batch_size): (s.hparams["lr"], s.hparams["warmup_tokens"]) for s in expand(campaign)}
    assert hparams[("w64", 16)] == (0.003, 512) and hparams[("w64", 64)] == (0.006, 256)  # the table wins
    assert hparams[("w32", 64)] == (0.02, 8192)  # the campaign's
    data["models"][1]["hparams_from"] = "no-such-table.yaml"
    with pytest.raises(CampaignError, match=r"models.w64.hparams_from: cannot read .*no-such-table.yaml"):
        parse_campaign(data, base_dir=tmp_path)


def test_the_dry_run_shows_one_configuration_per_model_with_its_placeholders_filled(tmp_path):
    shown = dry_run(parse_campaign(_axis_campaign(), base_dir=tmp_path))
    assert [(c["model"], c["recipe"], c["batch_size"]) for c in shown][:3] == [
        ("small", "bf16", 16), ("small", "bf16", 64), ("small", "fp8", 16)]
    large = next(c for c in shown if c["model"] == "large")
    assert large["argv"][-4:] == ["large", "8", "8000000000", "0.05"]
    assert large["env"]["RCPFORGE_MODEL_FLOPS_PER_TOKEN"] == "48000000000.0"
