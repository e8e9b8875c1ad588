from __future__ import annotations

import json
import os
import subprocess
import sys

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import RunSpec, Target
from tests.conftest import ROOT
from tests.helpers.campaigns import tiny_campaign


def _first_spec(**overrides) -> RunSpec:
    return expand(parse_campaign(tiny_campaign(**overrides)))[0]


def test_run_key_is_the_same_for_the_same_runs():
    assert _first_spec().run_key == _first_spec().run_key


def test_run_key_ignores_campaign_name_and_dict_order():
    base = _first_spec()
    renamed = _first_spec(name="another-name")
    assert renamed.run_key == base.run_key
    reordered = RunSpec.model_validate(dict(reversed(list(json.loads(base.model_dump_json()).items()))))
    assert reordered.run_key == base.run_key


def test_run_key_changes_with_every_decisive_field():
    base = _first_spec()
    data = tiny_campaign()
    data["hparams"][16]["lr"] = 0.02
    changed = [
        base.model_copy(update={"seed": 1}),
        base.model_copy(update={"recipe": "fp8_tensorwise"}),
        base.model_copy(update={"batch_size": 64}),
        base.model_copy(update={"target": Target(metric="eval_excess_loss", mode="min", value=0.2)}),
        expand(parse_campaign(data))[0],
        _first_spec(budget={"max_tokens": 500_000, "eval_every_tokens": 4096}),
    ]
    trainer = dict(base.trainer, d_model=64)
    changed.append(base.model_copy(update={"trainer": trainer}))
    keys = {spec.run_key for spec in changed}
    assert base.run_key not in keys and len(keys) == len(changed)


def test_run_key_is_stable_across_processes():
    spec = _first_spec()
    code = (
        "import sys; from rcpforge.trainers.contract import RunSpec; "
        "print(RunSpec.model_validate_json(sys.stdin.read()).run_key)"
    )
    for hashseed in ("1", "987"):
        out = subprocess.run(
            [sys.executable, "-c", code], input=spec.model_dump_json(), cwd=ROOT, text=True,
            capture_output=True, check=True, env={**os.environ, "PYTHONHASHSEED": hashseed},
        )
        assert out.stdout.strip() == spec.run_key


def test_target_reached_follows_the_mode():
    low = Target(metric="m", mode="min", value=1.0)
    high = Target(metric="m", mode="max", value=1.0)
    assert low.reached(1.0) and low.reached(0.5) and not low.reached(1.01)
    assert high.reached(1.0) and not high.reached(0.99)
    assert not low.reached(float("nan")) and not high.reached(float("inf"))


def test_a_recipes_numerics_revision_changes_its_run_keys_only(monkeypatch):
    """A code change that gives a recipe new numerics bumps its revision: a resumed
    campaign then re-runs that recipe's old runs (new keys) and keeps every other
    recipe's runs (same keys)."""
    import rcpforge.trainers.contract.revisions as revisions
    import rcpforge.trainers.recipes.config as recipes

    base = _first_spec()
    specs = {name: base.model_copy(update={"recipe": name}) for name in ("bf16", "fp8_tensorwise", "mor")}
    before = {name: s.run_key for name, s in specs.items()}
    monkeypatch.setitem(revisions.RECIPE_REVISIONS, "mor", 3)
    after = {name: s.run_key for name, s in specs.items()}
    assert after["mor"] != before["mor"]
    assert after["bf16"] == before["bf16"] and after["fp8_tensorwise"] == before["fp8_tensorwise"]
    # a name the registry does not know (a command trainer's own recipe) has revision 1
    assert recipes.recipe_revision("my_trainers_recipe") == 1


def test_every_revised_recipe_is_a_registered_one():
    """The revisions table of the run contract names recipes of the registry (a typo
    there would leave the misspelt recipe's old runs pooled with its new ones)."""
    from rcpforge.trainers.contract.revisions import RECIPE_REVISIONS
    from rcpforge.trainers.recipes.named import RECIPES

    assert set(RECIPE_REVISIONS) <= set(RECIPES)
    assert {name: RECIPES[name].revision for name in RECIPE_REVISIONS} == RECIPE_REVISIONS
    assert RECIPES["bf16"].revision == 1
