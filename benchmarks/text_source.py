"""Per-step cost of the tiny LM on the Shakespeare corpus (docs/text-corpus.md) against the
synthetic Markov source, at one width: the quickstart's model (2 layers, context 16, 4
heads) and batch size, one recipe, on each source.

Each source's run is built by the trainer itself (`_Run`, as a worker builds it, from a
campaign like the quickstart's), and its figures are the trainer's own work:

- `start s`: building the data, once per process (the corpus read, stripped and split;
  the Markov source's tables drawn), the eval set included;
- `batch us`: drawing one training batch (`Batches.next`);
- `step ms`: one training step (`_Run.step`: a batch drawn, forward, backward, clipping,
  AdamW); the corpus's model has a byte vocabulary (256) against the Markov source's 32,
  so its embedding and LM head are larger.

The sources take turns, step by step, and every step is timed alone (a load that comes and
goes hits both sources' neighbouring steps alike); each figure is a median over steps, and
the corpus's step against the Markov source's is the median of each pair's ratio, with
its quartiles.

    PYTHONPATH=. python benchmarks/text_source.py                      # d_model 64, batch 32, bf16
    PYTHONPATH=. python benchmarks/text_source.py --steps 20 --batch 128 --recipe nvfp4
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import platform
import statistics
import time
from pathlib import Path

import torch
import yaml

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import Reporter, RunSpec
from rcpforge.trainers.recipes.named import RECIPES
from rcpforge.trainers.tinylm.data import Batches
from rcpforge.trainers.tinylm.distributed import DataParallel
from rcpforge.trainers.tinylm.settings import TinyLMSettings
from rcpforge.trainers.tinylm.size import model_size
from rcpforge.trainers.tinylm.train import _Run

QUICKSTART = Path(__file__).resolve().parents[1] / "sweeps" / "examples" / "quickstart.yaml"
SOURCES = {"markov": None, "corpus": {"source": "corpus", "name": "shakespeare"}}


class _NoEvals(Reporter):
    """A run that is only stepped reports nothing."""

    def __init__(self, folder: Path):
        self.output_dir = folder

    def eval_point(self, point) -> None:
        pass


def _spec(data: dict | None, d_model: int, batch: int, recipe: str) -> RunSpec:
    """The quickstart's run at this batch size, recipe and width, on `data` (None: the
    quickstart's Markov source); its target is eval_loss, which both sources report."""
    campaign = yaml.safe_load(QUICKSTART.read_text())
    campaign["trainer"]["d_model"] = d_model
    if data is not None:
        campaign["trainer"]["data"] = copy.deepcopy(data)
    campaign.update(recipes=[recipe], seeds=1, target={"metric": "eval_loss", "mode": "min", "value": 0.0})
    return next(s for s in expand(parse_campaign(campaign)) if s.batch_size == batch)


def _build(spec: RunSpec) -> tuple[_Run, float]:
    """The trainer's run of `spec` and the seconds its data took to build."""
    cfg = TinyLMSettings.model_validate({k: v for k, v in spec.trainer.items() if k != "kind"})
    # the first build in the process, as a run's: the corpus is read once per process
    start = time.perf_counter()
    Batches(cfg.data, cfg.context, cfg.eval_tokens, spec.seed)
    built = time.perf_counter() - start
    device = torch.device("cpu")
    with contextlib.redirect_stdout(io.StringIO()):  # the run's start line: not a figure
        run = _Run(spec, Reporter.of(_NoEvals(Path("."))), cfg, device, DataParallel(1, device))
    return run, built


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _time_pairs(runs: dict[str, _Run], steps: int, batch: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each source's batch draws (us) and steps (ms), one of each source after the other,
    `steps` times: a load that comes and goes hits both sources' neighbouring steps alike."""
    draws: dict[str, list[float]] = {name: [] for name in runs}
    times: dict[str, list[float]] = {name: [] for name in runs}
    params = {name: list(run.model.parameters()) for name, run in runs.items()}
    for _ in range(steps):
        for name, run in runs.items():
            draws[name].append(_timed(lambda run=run: run.data.next(batch)) * 1e6)
            times[name].append(_timed(lambda run=run, name=name: run.step(params[name])) * 1e3)
    return draws, times


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=_positive, default=64)
    parser.add_argument("--batch", type=int, choices=(32, 128), default=32, help="a quickstart batch size")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="bf16", metavar="NAMED_RECIPE")
    parser.add_argument("--steps", type=_positive, default=200, help="timed steps (and batch draws) per source")
    args = parser.parse_args(argv)
    specs = {name: _spec(data, args.d_model, args.batch, args.recipe) for name, data in SOURCES.items()}
    built = {name: _build(spec) for name, spec in specs.items()}
    runs = {name: run for name, (run, _) in built.items()}
    _time_pairs(runs, 3, args.batch)  # warm-up: the first steps allocate
    draws, steps = _time_pairs(runs, args.steps, args.batch)
    paired = [c / m for c, m in zip(steps["corpus"], steps["markov"], strict=True)]
    quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else [paired[0]] * 3
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} "
          f"thread(s); d_model {args.d_model}, batch {args.batch} x context 16, {args.recipe}; medians of "
          f"{args.steps} steps a source, the sources' steps alternating")
    print("| source | vocab | parameters | start s | batch us | step ms | step x markov's, paired [quartiles] |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, run in runs.items():
        params, _ = model_size(specs[name].trainer)
        ratio = "1" if name == "markov" else f"{quartiles[1]:.2f} [{quartiles[0]:.2f}, {quartiles[2]:.2f}]"
        print(f"| {name} | {run.data.vocab} | {params:,} | {built[name][1]:.2f} | "
              f"{statistics.median(draws[name]):.0f} | {statistics.median(steps[name]):.2f} | {ratio} |")


if __name__ == "__main__":
    main()
