from __future__ import annotations

import pytest
import yaml

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import CampaignError, load_campaign, parse_campaign
from tests.helpers.campaigns import tiny_campaign, write_campaign
from tests.conftest import ROOT


def test_quickstart_is_valid_and_expands_to_every_cell():
    campaign = load_campaign(ROOT / "sweeps/examples/quickstart.yaml")
    specs = expand(campaign)
    cells = {(s.recipe, s.batch_size) for s in specs}
    assert cells == {(r, b) for r in ("bf16", "fp8_tensorwise") for b in (32, 128)}
    assert len(specs) == 4 * len(cells)
    assert len({s.run_key for s in specs}) == len(specs)
    assert campaign.tracking_uri.endswith("sweeps/examples/rcpforge-mlflow.db")


@pytest.mark.parametrize(("uri", "expected"), [
    ("sqlite:///my-store.db", "sqlite:///{base}/my-store.db"),
    ("sqlite:///stores/../my-store.db?timeout=30", "sqlite:///{base}/my-store.db?timeout=30"),
    ("sqlite:////abs/store.db", "sqlite:////abs/store.db"),
    ("postgresql://u@db:5432/mlflow", "postgresql://u@db:5432/mlflow"),
])
def test_a_relative_sqlite_store_is_beside_the_campaign_file_wherever_the_command_runs(tmp_path, monkeypatch, uri,
                                                                                         expected):
    folder = tmp_path / "camp"
    folder.mkdir()
    path = write_campaign(folder, {**tiny_campaign(), "tracking": {"uri": uri}})
    monkeypatch.chdir(tmp_path)  # another folder than the file's
    assert load_campaign(path).tracking_uri == expected.format(base=folder.resolve())


def test_the_distributed_example_is_the_quickstart_as_gangs_of_two():
    quickstart = load_campaign(ROOT / "sweeps/examples/quickstart.yaml")
    distributed = load_campaign(ROOT / "sweeps/examples/distributed.yaml")
    assert distributed.trainer == quickstart.trainer  # its trainer section is the quickstart's
    assert distributed.launch.world_size == 2 and distributed.gang.tasks == 2 and distributed.backend.kind == "local"
    specs = expand(distributed)
    assert len(specs) == len(expand(quickstart)) and all(s.world_size == 2 for s in specs)


def _error(data) -> str:
    with pytest.raises(CampaignError) as info:
        parse_campaign(data, source="c.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_field_is_named():
    data = tiny_campaign()
    data["bugdet"] = data.pop("budget")
    message = _error(data)
    assert "bugdet" in message and "budget" in message


@pytest.mark.parametrize(("where", "typo", "meant"), [
    ((), "sedes", "seeds"),
    (("budget",), "eval_every_tokns", "eval_every_tokens"),
    (("backend",), "array_paralelism", "array_parallelism"),
    (("rcp",), "benchmak", "benchmark"),
    (("trainer",), "d_modl", "d_model"),
    (("trainer", "data"), "vocb", "vocab"),
    (("hparams", 16), "betaa1", "beta1"),
])
def test_a_misspelt_field_gets_the_closest_valid_name(where, typo, meant):
    data = tiny_campaign(backend={"kind": "slurm"})
    parent = data
    for part in where:
        parent = parent[part]
    parent[typo] = parent.pop(meant, 1)
    message = _error(data)
    assert f"is not a known field; did you mean `{meant}`?" in message, message


def test_a_field_like_no_valid_one_lists_the_valid_ones():
    data = tiny_campaign()
    data["launch"] = {"nodes": 1, "ranks": 4}
    message = _error(data)
    assert "launch.ranks: is not a known field" in message and "did you mean" not in message
    assert "(the fields here: gpu_type, gpus_per_process, nodes, processes_per_node)" in message, message


def test_one_batch_size_is_refused_with_the_reason_for_two():
    message = _error(tiny_campaign(batch_sizes=[16]))
    assert "batch_sizes: needs at least two batch sizes" in message
    assert "at the minimum and at the maximum batch size" in message and "List should" not in message


def test_a_model_deeper_than_the_bound_is_refused_before_any_layer_is_listed():
    """n_layers is bounded (a fuzzed 10**6 once listed 6 million layer names at load)."""
    data = tiny_campaign()
    data["trainer"]["n_layers"] = 10**6
    assert "trainer.n_layers: Input should be less than or equal to 1024" in _error(data)


def test_unknown_recipe_lists_valid_ones():
    message = _error(tiny_campaign(recipes=["bf16", "fp9"]))
    assert "fp9" in message and "fp8_tensorwise" in message and "recipes" in message


def test_batch_sizes_min_above_max():
    message = _error(tiny_campaign(batch_sizes=[64, 16]))
    assert "batch_sizes" in message and "[16, 64]" in message


def test_missing_target():
    data = tiny_campaign()
    del data["target"]
    assert "target" in _error(data)


def test_missing_hparams_for_a_batch_size():
    data = tiny_campaign(batch_sizes=[16, 32, 64])
    message = _error(data)
    assert "hparams: no entry for batch size 32" in message and "needs lr and warmup_tokens" in message


def test_missing_hparams_of_a_program_asks_for_an_entry_not_the_tiny_lms_settings(tmp_path):
    from tests.helpers.trainer_kinds import command

    kind = command(tmp_path)
    data = tiny_campaign(batch_sizes=[16, 32, 64], trainer=kind.trainer, target=kind.converges, budget=kind.budget,
                         hparams=kind.hparams)
    message = _error(data)
    assert "hparams: no entry for batch size 32" in message and "trainer kind command needs an entry" in message
    assert "warmup_tokens" not in message


def test_bad_hparam_names_the_field_and_valid_ones():
    data = tiny_campaign()
    data["hparams"][16] = {"lr": -1, "warmup_tokens": 0}
    message = _error(data)
    assert "hparams.16.lr" in message


def test_unknown_hparam_is_rejected():
    data = tiny_campaign()
    data["hparams"][16]["momentum"] = 0.9
    assert "momentum" in _error(data)


def test_seeds_per_recipe_override():
    campaign = parse_campaign(tiny_campaign(seeds={"default": 2, "fp8_tensorwise": 5}))
    counts = {}
    for spec in expand(campaign):
        counts[spec.recipe] = counts.get(spec.recipe, 0) + 1
    assert counts == {"bf16": 2 * 2, "fp8_tensorwise": 5 * 2}
    assert "nvfp4" in _error(tiny_campaign(seeds={"default": 2, "nvfp4": 3}))


def test_recipe_options_unknown_option():
    message = _error(tiny_campaign(recipes=["bf16", {"fp8_tensorwise": {"hadamard": True}}]))
    assert "hadamard" in message


def test_eval_cadence_larger_than_budget():
    message = _error(tiny_campaign(budget={"max_tokens": 100, "eval_every_tokens": 1000}))
    assert "eval_every_tokens" in message


def test_bad_trainer_setting():
    data = tiny_campaign()
    data["trainer"]["n_heads"] = 3
    assert "n_heads" in _error(data)


def test_cli_reports_one_line_without_traceback(tmp_path, cli):
    data = tiny_campaign(recipes=["bf16", "fp9"])
    path = write_campaign(tmp_path, data)
    proc = cli("run", str(path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "fp9" in lines[0]


def test_cli_reports_bad_yaml_with_position(tmp_path, cli):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\ntarget: [1, 2\n")
    proc = cli("run", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "line" in proc.stderr and "broken.yaml" in proc.stderr


def test_cli_validation_does_not_import_torch(tmp_path):
    # campaign validation is on the path of every command: keep it light
    import subprocess
    import sys

    code = (
        "import sys; from rcpforge.sweeps.spec import load_campaign; "
        f"load_campaign({str(ROOT / 'sweeps/examples/quickstart.yaml')!r}); "
        "print('torch' in sys.modules, 'mlflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_yaml_roundtrip_keeps_integer_batch_keys(tmp_path):
    path = write_campaign(tmp_path, tiny_campaign())
    assert yaml.safe_load(path.read_text())["hparams"][16]["lr"] == 0.01
    assert load_campaign(path).hparams[16]["lr"] == 0.01


def test_a_target_metric_the_tiny_lm_never_reports_fails_the_campaign_as_it_loads():
    """A typo in target.metric is one line naming the field and the metrics there are,
    before anything runs (not a failure of every run in its worker)."""
    typo = tiny_campaign(target={"metric": "eval_los", "mode": "min", "value": 0.3})
    reported = r"target\.metric: 'eval_los' is not reported .* eval_excess_loss, eval_loss"
    with pytest.raises(CampaignError, match=reported) as raised:
        parse_campaign(typo)
    assert str(raised.value).startswith("campaign: target.metric: ")  # the field first, no "(top level)"
    # the excess loss needs a source of known entropy: a text file has none
    text = tiny_campaign()
    text["trainer"] = dict(text["trainer"], data={"source": "text", "path": "corpus.txt"})
    with pytest.raises(CampaignError, match=r"it reports eval_loss: set target\.metric"):
        parse_campaign(text)
    text["target"] = {"metric": "eval_loss", "mode": "min", "value": 3.0}
    assert parse_campaign(text).target.metric == "eval_loss"


# --- rcp.submission_runs against the MLCommons checker's N (mlperf_logging is the oracle) ---

def _checker_n(benchmark: str) -> int:
    import mlperf_logging.rcp_checker.rcp_checker as checker_mod

    return checker_mod.submission_runs["training"][benchmark]


def test_a_submission_runs_other_than_the_checkers_is_refused_for_a_benchmark_it_knows():
    message = _error(tiny_campaign(rcp={"benchmark": "llama31_8b", "submission_runs": 5}))
    assert message.startswith("c.yaml: rcp.submission_runs: ")  # the field first
    assert f"counts {_checker_n('llama31_8b')} runs per submission of benchmark llama31_8b, not 5" in message
    assert "remove rcp.submission_runs" in message and "rcp.override_checker_runs: true" in message


def test_the_override_keeps_a_different_submission_runs_and_says_the_checker_differs():
    campaign = parse_campaign(tiny_campaign(rcp={"benchmark": "llama31_8b", "submission_runs": 5,
                                                 "override_checker_runs": True}))
    assert (campaign.submission_runs, campaign.checker_runs) == (5, _checker_n("llama31_8b"))


def test_an_unset_submission_runs_is_the_checkers_own_n():
    assert parse_campaign(tiny_campaign(rcp={"benchmark": "llama31_8b"})).submission_runs == _checker_n("llama31_8b")
    # the benchmark may come from the campaign's name
    named = parse_campaign(tiny_campaign(name="llama31_405b", rcp={}))
    assert (named.benchmark, named.submission_runs) == ("llama31_405b", _checker_n("llama31_405b"))
    # the checker's own N, written out, needs no override
    same = parse_campaign(tiny_campaign(rcp={"benchmark": "unet3d", "submission_runs": _checker_n("unet3d")}))
    assert same.submission_runs == 40


def test_a_benchmark_the_checker_does_not_know_keeps_the_campaigns_own_n():
    assert parse_campaign(tiny_campaign(rcp={"benchmark": "rcpforge_tiny", "submission_runs": 7})).submission_runs == 7
    assert parse_campaign(tiny_campaign(seeds=10, rcp={"benchmark": "rcpforge_tiny"})).submission_runs == 5
    assert parse_campaign(tiny_campaign(seeds=4, rcp={"benchmark": "rcpforge_tiny"})).submission_runs == 3


def test_an_override_that_overrides_nothing_is_refused():
    alone = _error(tiny_campaign(rcp={"benchmark": "llama31_8b", "override_checker_runs": True}))
    assert "rcp.override_checker_runs: there is no rcp.submission_runs to keep" in alone
    unknown = _error(tiny_campaign(rcp={"benchmark": "rcpforge_tiny", "submission_runs": 3,
                                        "override_checker_runs": True}))
    assert "rcp.override_checker_runs: the MLCommons checker does not know benchmark rcpforge_tiny" in unknown


def test_the_campaigns_n_gives_the_checkers_minimum_acceptable_mean_on_a_shipped_rcp_file():
    """Why a different N is refused: on the same RCP file it moves the minimum acceptable
    mean away from the checker's."""
    import mlperf_logging.rcp_checker.rcp_checker as checker_mod

    from rcpforge.analysis.rcp_set import RcpSet

    checker = checker_mod.RCP_Checker("training", "6.1.0", "llama31_8b", False)
    campaign = parse_campaign(tiny_campaign(rcp={"benchmark": "llama31_8b"}))
    overridden = parse_campaign(tiny_campaign(rcp={"benchmark": "llama31_8b", "submission_runs": 5,
                                                   "override_checker_runs": True}))
    ours = RcpSet.from_ruleset("6.1.0", "llama31_8b", submission_runs=campaign.submission_runs)
    other = RcpSet.from_ruleset("6.1.0", "llama31_8b", submission_runs=overridden.submission_runs)
    for name, record in checker.rcp_data.items():
        assert ours.full[name].min_epochs == record["Min Epochs"]
        assert other.full[name].min_epochs < record["Min Epochs"]


def _late(data, field, value):
    """`data` with the dotted `field` set to `value`."""
    *path, last = field.split(".")
    node = data
    for key in path:
        node = node[int(key) if key.isdigit() else key]
    node[last] = value
    return data


# (field, bad value, what the one line says): each once failed every run at run time
LATE_ERRORS = [
    ("target.metric", "eval_accuracy", "target.metric: 'eval_accuracy' is not reported by the tinylm trainer"),
    ("hparams.16.warmup_tokens", 500_000, "hparams.16.warmup_tokens: 500,000 is above budget.max_tokens (400,000)"),
    ("trainer.device", "cuda", "trainer.device: cuda, but this machine has no CUDA device"),
]


@pytest.mark.parametrize("field,value,says", LATE_ERRORS, ids=[e[0] for e in LATE_ERRORS])
def test_a_mistake_that_would_fail_every_run_is_refused_before_any_runs(tmp_path, monkeypatch, field, value, says):
    from tests.helpers.cli import invoke, one_line_usage_error

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no CUDA device, on any machine
    path = write_campaign(tmp_path, _late(tiny_campaign(), field, value))
    one_line_usage_error(invoke("run", str(path)), says)
    assert not (tmp_path / "rcpforge-mlflow.db").exists()  # refused before the store was touched
    if field == "trainer.device":
        # the machine that loads a Ray or Slurm campaign may have no GPU: its runs check on theirs
        ray = _late(tiny_campaign(), field, value) | {"backend": {"kind": "ray"}}
        assert parse_campaign(ray, tmp_path).trainer["device"] == "cuda"
