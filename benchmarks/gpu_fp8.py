"""BF16 vs real FP8 (`torch._scaled_mm`) training-step time of a d_model 4096 transformer
on one GPU: `fp8_tensorwise` and `fp8_rowwise` take the real-FP8 path on CUDA devices of
compute capability 9.0 or more (Hopper); the emulated path is timed too, for scale.

    PYTHONPATH=. python benchmarks/gpu_fp8.py                  # needs a CUDA GPU
    PYTHONPATH=. python benchmarks/gpu_fp8.py --layers 2 --batch 4 --context 2048

A step is BF16 autocast forward, backward and AdamW, as the tiny-LM trainer does; the
figure is the median over rounds of CUDA-synchronized steps, and the ratio is against
bf16 measured in the same run. Prints the relative difference between the real and the
emulated FP8 loss of the first step (same weights and batch) as a sanity check.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from trainers.precision import gpu
from trainers.precision.layers import gemm_factory
from trainers.recipes import resolve_recipe
from trainers.tinylm.model import TinyLM
from trainers.tinylm.settings import MarkovData, TinyLMSettings


def _model(cfg: TinyLMSettings, vocab: int, recipe: str, real: bool | None, device) -> torch.nn.Module:
    torch.manual_seed(0)
    make = gemm_factory(resolve_recipe(recipe), cfg.n_layers)

    def factory(name: str):
        g = make(name)
        if hasattr(g, "real_fp8"):
            g.real_fp8 = real  # None: decide by device (real on Hopper); False: emulate
        return g

    return TinyLM(cfg, vocab, factory, per_layer=True).to(device)


def _time(model, batch, steps: int, rounds: int) -> tuple[float, float]:
    """Median seconds per step, and the loss of the first forward (same initial weights
    and batch for every row, so real and emulated FP8 can be compared)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times, first = [], None
    for r in range(rounds + 1):  # the first round warms up
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(batch[:, :-1], batch[:, 1:])
            if first is None:
                first = loss.item()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        if r:
            times.append((time.perf_counter() - start) / steps)
    return statistics.median(times), first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d-model", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-emulated", action="store_true", help="skip the (slow) emulated FP8 rows")
    ap.add_argument("--compile-cast", action="store_true",
                    help="fuse the float8 cast (amax, scale, convert) with torch.compile; an experiment")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a GPU (the CPU path is recipe_overhead.py)")
        return 2
    if args.compile_cast:
        gpu._cast = torch.compile(gpu._cast, dynamic=False)  # compiled in the warm-up round
    device = torch.device("cuda")
    cc = torch.cuda.get_device_capability(device)
    print(f"{torch.cuda.get_device_name(device)}, compute capability {cc[0]}.{cc[1]}, torch {torch.__version__}")
    if not gpu.hopper_or_newer(device):
        print("compute capability < 9.0: no real FP8 GEMMs; only the emulated path would run")
    cfg = TinyLMSettings(
        data=MarkovData(vocab=args.vocab, branching=4), context=args.context, d_model=args.d_model,
        n_layers=args.layers, n_heads=args.heads,
    )
    batch = torch.randint(0, args.vocab, (args.batch, args.context + 1), device=device)
    rows = [("bf16", None)]
    for recipe in gpu.REAL_FP8_RECIPES:
        rows.append((recipe, None))
        if not args.no_emulated:
            rows.append((recipe, False))
    results = {}
    for recipe, real in rows:
        label = recipe + (" (emulated)" if real is False else " (real FP8)" if recipe != "bf16" else "")
        model = _model(cfg, args.vocab, recipe, real, device)
        results[label] = _time(model, batch, args.steps, args.rounds)
        del model
        torch.cuda.empty_cache()
    tokens = args.batch * args.context
    base = results["bf16"][0]
    print(f"d_model {args.d_model}, {args.layers} layers, batch {args.batch} x context {args.context}, "
          f"median of {args.rounds} rounds of {args.steps} steps" + (", float8 cast compiled" if args.compile_cast else ""))
    print(f"{'recipe':32s} {'ms/step':>9s} {'x bf16':>7s} {'tokens/s':>11s} {'loss0':>8s}")
    for label, (t, loss) in results.items():
        print(f"{label:32s} {1e3 * t:9.2f} {t / base:7.2f} {tokens / t:11.0f} {loss:8.4f}")
    for recipe in gpu.REAL_FP8_RECIPES:
        real, emu = results.get(f"{recipe} (real FP8)"), results.get(f"{recipe} (emulated)")
        if real and emu:
            print(f"{recipe}: first loss real vs emulated, relative difference {abs(real[1] - emu[1]) / abs(emu[1]):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
