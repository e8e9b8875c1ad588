"""What a trainer kind declares about itself before any run: the base of every kind's
settings model, with each check the registry asks of a campaign and its default.

A kind's settings model derives from `TrainerSettings` and overrides the hooks it needs
(classmethods: they see the campaign's values, not a parsed model). A settings model
that does not derive from it declares none: the registry asks the defaults. Torch-free:
campaigns are validated where torch is not installed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class TrainerSettings(BaseModel):
    """A trainer kind's settings model (its fields are the `trainer:` section of a
    campaign) and the kind's checks of a campaign, each a classmethod with its default."""

    @classmethod
    def check_campaign(cls, settings: dict[str, Any], hparams_by_bs: dict[int, dict[str, Any]],
                       recipes: dict[str, dict[str, Any]] | None = None) -> None:
        """Checks that need the settings, every batch size's hyperparameters and the
        recipes together; raises ValueError. Default: none."""

    @classmethod
    def reported_metrics(cls, settings: dict[str, Any]) -> list[str] | None:
        """The eval metrics a run reports with these settings, one of which the target
        must be; None: any (a command trainer's program may log anything)."""
        return None

    @classmethod
    def check_local_host(cls, settings: dict[str, Any]) -> None:
        """What the trainer needs of the machine a local campaign starts its runs on;
        raises ValueError. Default: nothing."""

    @classmethod
    def check_world_size(cls, batch_sizes: list[int], world_size: int) -> None:
        """Whether runs of `world_size` ranks can train these batch sizes; raises
        ValueError. Default: any."""

    @classmethod
    def launches_per_node(cls, settings: dict[str, Any]) -> bool:
        """Whether a gang is one task per node that starts the node's ranks itself
        (a program run through torchrun), not one task per rank."""
        return False

    @classmethod
    def recipe_labels(cls) -> bool:
        """Whether recipes are labels of the trainer's own precision with free-form
        options, not rcpforge's quantizer recipes."""
        return False

    @classmethod
    def validate_recipe(cls, name: str, options: dict[str, Any]) -> dict[str, Any] | None:
        """A campaign's recipe with its options completed, raising ValueError; None (the
        default): one of rcpforge's quantizer recipes, which the registry validates (the
        recipe modules import a kind's settings, so this one cannot import them)."""
        return None

    @classmethod
    def campaign_warnings(cls, settings: dict[str, Any], benchmark: str) -> list[str]:
        """What in a valid campaign makes wrong numbers likely. Default: nothing."""
        return []

    @classmethod
    def check_models(cls, settings: dict[str, Any], models: dict[str, dict[str, Any]]) -> None:
        """Checks of the settings against the campaign's models (`models:`, by name: each
        model's free settings, `free_model_settings`); raises ValueError. Default: none."""

    @classmethod
    def free_model_settings(cls) -> bool:
        """Whether a model's settings that are not fields of this model are the program's
        own (placeholders of a command trainer) rather than an error."""
        return False

    @classmethod
    def model_size(cls, settings: dict[str, Any]) -> tuple[int | None, float | None]:
        """A model's parameters and training FLOPs per token from the trainer's validated
        settings; (None, None) where the trainer cannot know them (the campaign's model
        entry gives them: `params`, `flops_per_token`)."""
        return None, None
