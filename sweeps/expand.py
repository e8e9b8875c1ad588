"""Campaign -> RunSpecs: one per (model, recipe, batch size, seed), in a stable order."""

from __future__ import annotations

from rcpforge.sweeps.models_spec import ModelChoice
from rcpforge.sweeps.spec import Campaign
from rcpforge.trainers.contract import RunSpec


def expand(campaign: Campaign) -> list[RunSpec]:
    specs = []
    models: list[ModelChoice | None] = [*campaign.models] if campaign.models else [None]
    for model in models:
        for recipe in campaign.recipes:
            for bs in campaign.batch_sizes:
                for seed in range(campaign.seeds_for(recipe.name)):
                    specs.append(
                        RunSpec(
                            campaign=campaign.name,
                            recipe=recipe.name,
                            recipe_options=recipe.options,
                            batch_size=bs,
                            seed=seed,
                            hparams=campaign.hparams[bs] if model is None else (model.hparams or {})[bs],
                            target=campaign.target,
                            budget=campaign.budget,
                            trainer=campaign.trainer if model is None else model.trainer,
                            world_size=campaign.launch.world_size,
                            **_model_fields(model),
                        )
                    )
    return specs


def _model_fields(model: ModelChoice | None) -> dict:
    """What a run of a model carries of it (nothing without the axis: its key is unchanged)."""
    if model is None:
        return {}
    return {"model": model.name, "model_settings": model.free, "model_params": model.params,
            "model_flops_per_token": model.flops_per_token}
