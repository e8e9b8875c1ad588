"""`rcpforge run --dry-run`: what one run of each distinct configuration (recipe x batch
size; the seed changes no shape) would start, with nothing launched and nothing written.

Built from the code that launches, not a copy of it: the command trainer's `launch_of`
(its argv, the variables it sets, its working folder and MLLOG file), `Gang.task_env`
(the per-task variables every backend sets), the executor's `task_folder` and the
campaign's `run_dir`. A trainer that runs in the worker's process (the tiny LM, a
`module:Class` kind) shows the settings it would be handed instead of a program.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rcpforge.orchestrator.execute import task_folder
from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import Campaign
from rcpforge.trainers.contract import RunSpec
from rcpforge.trainers.contract.mllog.write import RESULT_FILE
from rcpforge.trainers.contract.redact import redact, redact_argv

# Where task 0's rendezvous is, per backend: chosen as the run starts (a port free then),
# so a dry run names it instead of making one up.
RENDEZVOUS = {
    "local": ("127.0.0.1", "<a free port, chosen as the run starts>"),
    "ray": ("<the address of task 0's Ray node>", "<a free port there, chosen as the run starts>"),
    "slurm": ("<the address of the job's first node>", "<a free port there, chosen as the job starts>"),
}


def dry_run(campaign: Campaign) -> list[dict[str, Any]]:
    """One entry per distinct configuration: its first run's launch, and each gang task's."""
    shown: dict[tuple[str, str, int], dict[str, Any]] = {}
    counts: dict[tuple[str, str, int], int] = {}
    for spec in expand(campaign):
        cell = (spec.model, spec.recipe, spec.batch_size)
        counts[cell] = counts.get(cell, 0) + 1
        if cell not in shown:
            shown[cell] = describe(campaign, spec)
    for cell, entry in shown.items():
        entry["runs"] = counts[cell]
    return list(shown.values())


def describe(campaign: Campaign, spec: RunSpec) -> dict[str, Any]:
    gang = campaign.gang
    run_dir = campaign.run_dir(spec).resolve()
    address, port = RENDEZVOUS[campaign.backend.kind]
    tasks = [_task(campaign, spec, task_folder(run_dir, task), gang.task_env(task, address, port))
             for task in range(gang.tasks)]
    first = tasks[0]
    return {
        **({"model": spec.model} if spec.model else {}),
        "recipe": spec.recipe, "batch_size": spec.batch_size, "seed": spec.seed, "run_name": spec.run_name,
        "run_key": spec.run_key, "backend": campaign.backend.kind, "trainer": spec.trainer_kind,
        "output_dir": str(run_dir), "result_file": str(run_dir / RESULT_FILE),
        **{k: v for k, v in first.items() if k != "variables"},
        # Every task's own variables and what of its launch differs from task 0's.
        "tasks": [{"task": n, "variables": t["variables"], **_differs(t, first)} for n, t in enumerate(tasks)],
    }


def _differs(task: dict[str, Any], first: dict[str, Any]) -> dict[str, Any]:
    """Task `task`'s launch where it is not task 0's (environment: the variables that differ)."""
    out = {k: v for k, v in task.items() if k not in ("variables", "env") and first.get(k) != v}
    env = {k: v for k, v in task.get("env", {}).items() if first["env"].get(k) != v}
    return {**out, "env": env} if env else out


def _task(campaign: Campaign, spec: RunSpec, folder: Path, variables: dict[str, str]) -> dict[str, Any]:
    """What one gang task starts: a program (the command trainer) or a call in the worker."""
    if spec.trainer_kind != "command":
        return {"variables": variables, "in_process": True, "folder": str(folder),
                "settings": redact(dict(spec.trainer), shown=True), "hparams": dict(spec.hparams),
                "recipe_options": dict(spec.recipe_options), "budget": spec.budget.model_dump(mode="json"),
                "target": spec.target.model_dump(mode="json"), "world_size": spec.world_size}
    from rcpforge.trainers.command.inputs import missing_inputs
    from rcpforge.trainers.command.trainer import command_settings, launch_of

    launch = launch_of(spec, command_settings(spec), folder, campaign.base_dir.resolve(),
                       campaign.benchmark_of(spec.model), env=variables)
    # Under the one redaction rule (trainers/contract/redact.py): a secret's entry is *** or
    # where its value comes from, as `launch_of` shows it; launch.env holds none.
    return {"variables": variables, "argv": redact_argv(launch.argv), "env": {**launch.env, **launch.secrets},
            "workdir": str(launch.workdir),
            "mllog_file": str(launch.mllog_file) if launch.mllog_file else None,
            # what the launch would fail on as a configuration error, if missing where it runs too
            "missing_inputs": missing_inputs(launch.argv, launch.workdir, folder)}
