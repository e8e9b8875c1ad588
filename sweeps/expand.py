"""Campaign -> RunSpecs: one per (recipe, batch size, seed), in a stable order."""

from __future__ import annotations

from sweeps.spec import Campaign
from trainers.contract import RunSpec


def expand(campaign: Campaign) -> list[RunSpec]:
    specs = []
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
                        hparams=campaign.hparams[bs],
                        target=campaign.target,
                        budget=campaign.budget,
                        trainer=campaign.trainer,
                        world_size=campaign.launch.world_size,
                    )
                )
    return specs
