"""Tiny-LM training-step time on this CPU, per recipe and model width, against FP32
eager and against the "ideal" step: the model's GEMMs alone, as FP32 torch.mm.

A step is what the tiny-LM trainer does per batch: the forward pass inside
`rcpforge.trainers.tinylm.train.reference_precision` (the trainer's precision context),
backward, gradient clipping at 1.0 and AdamW. "fp32 eager" is the bf16 recipe's model
run in plain FP32 (no precision context at all), the same step otherwise. "ideal" is
the forward, dgrad and wgrad GEMMs of every linear layer (per block qkv d->3d, proj d->d,
fc1 d->mlp_ratio*d, fc2 mlp_ratio*d->d; the LM head d->vocab) as FP32 torch.mm on
preallocated tensors, M = batch x context tokens: forward M x K @ K x N, dgrad
M x N @ N x K, wgrad N x M @ M x K. All steppers of one size are timed in interleaved
rounds (so a change in machine load hits them all alike); each figure is the median
over rounds.

    PYTHONPATH=. python benchmarks/cpu_step.py                           # d_model 64..512
    PYTHONPATH=. python benchmarks/cpu_step.py --sizes 64 --rounds 2 --steps 2 --json OUT.json

Targets: bf16 <= 4.5x ideal at d_model 64 and <= 2.0x ideal at d_model >= 256 (none at
other widths); FP8-class recipes <= 1.5x the bf16 step; FP4-class <= 2.5x the bf16 step
(the classes of benchmarks/recipe_overhead.py). Larger widths are slow (a bf16 step at
d_model 512 can take seconds): progress goes to stderr. `--json PATH` writes the machine,
the settings and, per size, every row's `ms`, `x_ideal`, `x_bf16`, `target` and `met`
(null where a row has no target), with each stepper's per-round figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.recipe_overhead import FP4, FP8
from rcpforge.trainers.precision.heap import keep_freed_memory
from rcpforge.trainers.precision.layers import attention_factory, gemm_factory
from rcpforge.trainers.recipes.named import RECIPES
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm.data import Batches
from rcpforge.trainers.tinylm.model import TinyLM
from rcpforge.trainers.tinylm.settings import LINEAR_LAYERS, MarkovData, TinyLMSettings
from rcpforge.trainers.tinylm.train import optimizer, reference_precision

DEFAULT_RECIPES = "bf16,fp8_tensorwise,mxfp8,nvfp4,mxfp4"
N_HEADS = 4
VOCAB = 32
FP32_EAGER = "fp32 eager"
IDEAL = "ideal"
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
CPU = torch.device("cpu")

Stepper = Callable[[], None]


# --- flags -------------------------------------------------------------------------------

def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def _sizes(text: str) -> list[int]:
    sizes = []
    for part in text.split(","):
        try:
            d = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
        if d < 8 or d % N_HEADS:
            raise argparse.ArgumentTypeError(f"d_model {d}: must be >= 8 and divisible by n_heads ({N_HEADS})")
        if d not in sizes:
            sizes.append(d)
    return sizes


def _recipes(text: str) -> list[str]:
    names = []
    for part in text.split(","):
        name = part.strip()
        if name not in RECIPES:
            raise argparse.ArgumentTypeError(f"unknown recipe {name!r}; known: {', '.join(sorted(RECIPES))}")
        if name not in names:
            names.append(name)
    return names


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=_sizes, default=_sizes("64,128,256,512"),
                    help="d_model values, comma-separated (default 64,128,256,512)")
    ap.add_argument("--recipes", type=_recipes, default=_recipes(DEFAULT_RECIPES),
                    help=f"recipes to time (default {DEFAULT_RECIPES}); bf16 is always timed: the ratios need it")
    ap.add_argument("--layers", type=_positive, default=2)
    ap.add_argument("--context", type=_positive, default=16)
    ap.add_argument("--batch", type=_positive, default=32)
    ap.add_argument("--steps", type=_positive, default=5, help="steps per round")
    ap.add_argument("--rounds", type=_positive, default=5)
    ap.add_argument("--warmup", type=_positive, default=2, help="warm-up steps of each stepper, per size")
    ap.add_argument("--threads", type=_positive, default=1, help="1: one run per core, as campaigns run")
    ap.add_argument("--json", type=Path, metavar="PATH", help="write every figure here as JSON")
    args = ap.parse_args(argv)
    if not 2 <= args.context <= 4096:
        ap.error(f"argument --context: must be between 2 and 4096: {args.context}")
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"argument --json: no such directory: {str(args.json.parent)!r}")
    if "bf16" not in args.recipes:
        args.recipes.insert(0, "bf16")
    return args


# --- the machine -------------------------------------------------------------------------

def machine() -> dict:
    """This CPU's model name and which of the flags that matter for BF16 GEMMs it has."""
    name, flags = None, None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name is None:
                name = value.strip()
            elif key.strip() == "flags" and flags is None:
                flags = set(value.split())
    except OSError:
        pass
    return {
        "cpu": name or platform.processor() or platform.machine(),
        "flags": {f: f in (flags or ()) for f in CPU_FLAGS},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


# --- the steppers ------------------------------------------------------------------------

def _settings(args: argparse.Namespace, d_model: int) -> TinyLMSettings:
    return TinyLMSettings(data=MarkovData(vocab=VOCAB), context=args.context, d_model=d_model,
                          n_layers=args.layers, n_heads=N_HEADS)


def _train_stepper(model: TinyLM, batch: torch.Tensor, cfg: TinyLMSettings, precision: bool) -> Stepper:
    """One training step as the trainer takes it (its parameter groups, AdamW, clipping);
    the forward in the trainer's precision context, or in plain FP32 when not `precision`."""
    opt = optimizer(model, cfg.weight_decay, 1e-3, (0.9, 0.95))
    inputs, targets = batch[:, :-1], batch[:, 1:]

    def step() -> None:
        if precision:
            with reference_precision(CPU):
                loss = model(inputs, targets)
        else:
            loss = model(inputs, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()

    return step


def gemm_shapes(cfg: TinyLMSettings, vocab: int) -> list[tuple[str, int, int]]:
    """(layer, K = in features, N = out features) of every linear layer of the model."""
    d, hidden = cfg.d_model, cfg.mlp_ratio * cfg.d_model
    per_block = {"qkv": (d, 3 * d), "proj": (d, d), "fc1": (d, hidden), "fc2": (hidden, d)}
    assert set(per_block) == set(LINEAR_LAYERS)
    shapes = [(f"blocks.{i}.{layer}", *per_block[layer]) for i in range(cfg.n_layers) for layer in LINEAR_LAYERS]
    return shapes + [("head", d, vocab)]


def _ideal_stepper(shapes: list[tuple[str, int, int]], m: int) -> tuple[Stepper, float]:
    """The forward, dgrad and wgrad GEMMs of every layer as FP32 torch.mm into
    preallocated outputs, and their FLOPs per step."""
    gen = torch.Generator().manual_seed(0)
    calls = []
    for _name, k, n in shapes:
        x, w_t = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
        dy, w = torch.randn(m, n, generator=gen), torch.randn(n, k, generator=gen)
        dy_t = torch.randn(n, m, generator=gen)
        calls += [(x, w_t, torch.empty(m, n)),  # forward  y  = x @ W^T
                  (dy, w, torch.empty(m, k)),  # dgrad    dx = dy @ W
                  (dy_t, x, torch.empty(n, k))]  # wgrad   dW = dy^T @ x
    flops = sum(3 * 2.0 * m * k * n for _name, k, n in shapes)

    def step() -> None:
        for a, b, out in calls:
            torch.mm(a, b, out=out)

    return step, flops


def steppers_for(args: argparse.Namespace, d_model: int) -> tuple[dict[str, Stepper], float]:
    cfg = _settings(args, d_model)
    batches = Batches(cfg.data, cfg.context, 64, seed=0)
    batch = torch.from_numpy(batches.next(args.batch))
    steppers: dict[str, Stepper] = {}
    for name in args.recipes:
        torch.manual_seed(0)
        recipe = resolve_recipe(name)
        model = TinyLM(cfg, batches.vocab, gemm_factory(recipe, cfg.n_layers), per_layer=True,
                       attention=attention_factory(recipe, cfg.n_layers))
        steppers[name] = _train_stepper(model, batch, cfg, precision=True)
    torch.manual_seed(0)
    bf16 = resolve_recipe("bf16")
    model = TinyLM(cfg, batches.vocab, gemm_factory(bf16, cfg.n_layers), per_layer=True,
                   attention=attention_factory(bf16, cfg.n_layers))
    steppers[FP32_EAGER] = _train_stepper(model, batch, cfg, precision=False)
    steppers[IDEAL], flops = _ideal_stepper(gemm_shapes(cfg, batches.vocab), args.batch * args.context)
    return steppers, flops


# --- targets -----------------------------------------------------------------------------

def recipe_class(name: str) -> str | None:
    """'fp8' or 'fp4' (recipe_overhead.py's lists first, then the name's prefix), else None."""
    if name in FP4:
        return "fp4"
    if name in FP8 or name.startswith(("fp8", "mxfp8")):
        return "fp8"
    if name.startswith(("nvfp4", "mxfp4")):
        return "fp4"
    return None


def target(row: str, d_model: int) -> tuple[str, str, float] | None:
    """(description, what it is against: 'ideal' or 'bf16', the largest ratio) or None."""
    if row == "bf16":
        if d_model == 64:
            return "<= 4.5x ideal", "ideal", 4.5
        if d_model >= 256:
            return "<= 2.0x ideal", "ideal", 2.0
        return None
    kind = None if row in (FP32_EAGER, IDEAL) else recipe_class(row)
    if kind == "fp8":
        return "<= 1.5x bf16", "bf16", 1.5
    if kind == "fp4":
        return "<= 2.5x bf16", "bf16", 2.5
    return None


# --- the run -----------------------------------------------------------------------------

def time_size(args: argparse.Namespace, d_model: int) -> dict:
    started = time.perf_counter()
    print(f"d_model {d_model}: building {len(args.recipes) + 2} steppers", file=sys.stderr, flush=True)
    steppers, flops = steppers_for(args, d_model)
    for step in steppers.values():
        for _ in range(args.warmup):
            step()
    warm = time.perf_counter() - started
    print(f"d_model {d_model}: built and warmed up in {warm:.1f} s; timing {args.rounds} rounds of "
          f"{args.steps} steps (about {warm * args.rounds * args.steps / args.warmup:.0f} s)",
          file=sys.stderr, flush=True)
    times: dict[str, list[float]] = {name: [] for name in steppers}
    for r in range(args.rounds):
        for name, step in steppers.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[name].append((time.perf_counter() - start) / args.steps)
        print(f"d_model {d_model}: round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    med = {name: statistics.median(v) for name, v in times.items()}
    ideal, bf16 = med[IDEAL], med["bf16"]
    rows = []
    for name, t in med.items():
        row = {"row": name, "ms": 1e3 * t, "x_ideal": t / ideal, "x_bf16": t / bf16, "target": None, "met": None}
        goal = target(name, d_model)
        if goal is not None:
            row["target"] = goal[0]
            row["met"] = row["x_ideal" if goal[1] == IDEAL else "x_bf16"] <= goal[2]
        rows.append(row)
    return {"d_model": d_model, "ideal_ms": 1e3 * ideal, "bf16_ms": 1e3 * bf16,
            "ideal_gflop_per_step": flops / 1e9, "ideal_gflops": flops / ideal / 1e9,
            "per_round_ms": {name: [1e3 * t for t in v] for name, v in times.items()}, "rows": rows}


def print_size(args: argparse.Namespace, found: dict) -> None:
    print(f"\nd_model {found['d_model']}, {args.layers} layers, {N_HEADS} heads, batch {args.batch} x context "
          f"{args.context}, median of {args.rounds} rounds of {args.steps} steps; ideal: "
          f"{found['ideal_gflop_per_step']:.3f} GFLOP/step at {found['ideal_gflops']:.1f} GFLOP/s")
    print(f"{'row':16s} {'ms/step':>9s} {'x ideal':>8s} {'x bf16':>7s}  target")
    for row in found["rows"]:
        verdict = "" if row["target"] is None else f"{row['target']}: {'met' if row['met'] else 'MISSED'}"
        print(f"{row['row']:16s} {row['ms']:9.2f} {row['x_ideal']:8.2f} {row['x_bf16']:7.2f}  {verdict}".rstrip())


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as the tiny-LM trainer does
    info = machine()
    present = [f for f, on in info["flags"].items() if on]
    absent = [f for f, on in info["flags"].items() if not on]
    print(f"CPU: {info['cpu']} ({info['cores']} logical cores); torch {info['torch']}, "
          f"{info['threads']} thread(s), ATen CPU capability {info['cpu_capability']}")
    print(f"CPU flags present: {', '.join(present) or 'none'}; absent: {', '.join(absent) or 'none'}")
    sizes = []
    for d_model in args.sizes:
        sizes.append(time_size(args, d_model))
        print_size(args, sizes[-1])
        sys.stdout.flush()
    if args.json is not None:
        settings = {k: getattr(args, k) for k in ("recipes", "layers", "context", "batch", "steps", "rounds",
                                                  "warmup", "threads")}
        settings.update(n_heads=N_HEADS, vocab=VOCAB)
        doc = {"machine": info, "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
               "settings": settings, "sizes": sizes}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
