"""`rcpforge recipes`: the precision recipes a campaign may name."""

from __future__ import annotations

import json

import typer

from rcpforge.orchestrator.cli import render
from rcpforge.orchestrator.cli.app import app, console


@app.command()
def recipes(as_json: bool = typer.Option(False, "--json", help="machine-readable output (quantizer recipes)")) -> None:
    """List the precision recipes: the format of each GEMM operand and the options
    (with defaults) a campaign may set as `{recipe: {option: value}}`; the grammar of a
    recipe written in the campaign file by its operands and of an ablation `grid:`; and, for a command
    trainer (your own program), recipe labels and the placeholders of its argv and env."""
    from rcpforge.trainers.recipes.named import RECIPES

    rows = [r.summary() for r in RECIPES.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    console.print(render.recipes_table(rows))
    from rcpforge.trainers.recipes.written import grammar_lines

    console.print("\n".join(grammar_lines()), highlight=False, markup=False)
    _command_trainer_help()


def _command_trainer_help() -> None:
    from rcpforge.trainers.command.settings import MLPERF_PRECISIONS, PLACEHOLDERS

    console.print(
        "The recipes above are rcpforge's own quantizers, for the tiny LM (an unknown name is an error there).\n"
        "For a command trainer (your own program, which implements its precision) a recipe is a label: any name "
        "of letters, digits, '_', '.', '+', '-', with free-form scalar options, e.g.\n"
        "  recipes: [fp32, {te_nvfp4: {precision: nvfp4, block: 16}}]\n"
        "Each option reaches the program as {recipe_<option>} in argv/env/workdir/mllog_file and as "
        "RCPFORGE_RECIPE_<OPTION> in its environment. The option `precision` declares the label's lowest "
        f"precision in linear layers ({', '.join(MLPERF_PRECISIONS)}): a run whose MLLOG discloses another "
        "lowest_numerical_precision_in_linear gets the tag rcpforge.warning.",
        highlight=False, markup=False,
    )
    console.print(render.placeholders_table(PLACEHOLDERS))
