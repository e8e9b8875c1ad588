"""The files a command trainer's argv names as inputs (a script, a config): one missing is a
misconfigured run, not an unlucky one. `run` fails a run that ended before its first MLLOG
line with such a file missing as a configuration error (trainer.py); `run --dry-run`
warns of it before anything starts (orchestrator/cli/run.py)."""

from __future__ import annotations

from pathlib import Path

INPUT_SUFFIXES = (".py", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".ini")


def missing_inputs(argv: list[str], workdir: Path, output_dir: Path) -> list[str]:
    """The arguments of `argv` that name an input file (INPUT_SUFFIXES, outside the run's
    folder, where the program writes) that is not there."""
    return [arg for arg in argv[1:] if arg.endswith(INPUT_SUFFIXES) and not (workdir / arg).exists()
            and output_dir not in (workdir / arg).parents]


def missing_input_message(arg: str, workdir: Path) -> str:
    return (f"trainer.argv names {arg!r}, which does not exist in {workdir}: fix the path in trainer.argv "
            "(relative paths are the campaign folder's, or trainer.workdir's)")
