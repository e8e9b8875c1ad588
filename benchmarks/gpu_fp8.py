"""BF16 vs FP8 training-step time of a transformer on one GPU (d_model 4096 and one larger
size by default), side by side: bf16; `fp8_tensorwise` and `fp8_rowwise` on our real FP8
GEMMs (`torch._scaled_mm`, unfused casts: `trainer.fp8_gemm: scaled_mm`) and on the fused
path (torchao's float8 GEMMs compiled with the model: `fp8_gemm: torchao`, the default on
Hopper); the emulation for scale (`--emulated`).

    PYTHONPATH=. python benchmarks/gpu_fp8.py                  # needs a CUDA GPU
    PYTHONPATH=. python benchmarks/gpu_fp8.py --sizes 4096 --json OUT/gpu_fp8.json

A step is BF16 autocast forward, backward and AdamW, as the tiny-LM trainer does; the
figure is the median over rounds of CUDA-synchronized steps after a warm-up round (which
holds torch.compile's compilation), beside the peak GPU memory of the timed rounds; the
ratio is against bf16 measured in the same run. Prints the relative difference between
each path's first loss and the emulated one's (same weights and batch) as a sanity
check. `--json FILE` writes the first size's figures of fp8_tensorwise on the fused path
(`device`, `torch`, `date`, `d_model`, `bf16_ms`, `fp8_fused_ms`, `speedup` = bf16_ms /
fp8_fused_ms) and every row.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from rcpforge.trainers.precision import fused, gpu
from rcpforge.trainers.precision.layers import gemm_factory
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm.model import TinyLM
from rcpforge.trainers.tinylm.settings import MarkovData, TinyLMSettings


def _model(cfg: TinyLMSettings, vocab: int, recipe: str, path: str, device) -> torch.nn.Module:
    """The tiny LM of `cfg` with the recipe's GEMMs on `path` (trainers/precision/fused.py),
    compiled for the fused path on a GPU, as the trainer does."""
    torch.manual_seed(0)
    model = TinyLM(cfg, vocab, gemm_factory(resolve_recipe(recipe), cfg.n_layers, fp8_gemm=path),
                   per_layer=True).to(device)
    return torch.compile(model) if path == "torchao" and device.type == "cuda" else model


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _time(model, batch, steps: int, rounds: int) -> tuple[float, float, float | None]:
    """Median seconds per step, the loss of the first forward (same initial weights and
    batch for every row, so the paths can be compared) and the peak GiB allocated in the
    timed rounds. The first round warms up (and compiles)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times, first = [], None
    cuda = batch.device.type == "cuda"
    for r in range(rounds + 1):
        _sync(batch.device)
        if r == 1 and cuda:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(steps):
            with torch.autocast(batch.device.type, dtype=torch.bfloat16):
                loss = model(batch[:, :-1], batch[:, 1:])
            if first is None:
                first = loss.item()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        _sync(batch.device)
        if r:
            times.append((time.perf_counter() - start) / steps)
    return statistics.median(times), first, torch.cuda.max_memory_allocated() / 2**30 if cuda else None


def _sizes(text: str) -> list[int]:
    """--sizes 4096,8192; a wrong value is argparse's one-line usage error."""
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give d_model values as whole numbers, e.g. 4096,8192") from None
    if any(v <= 0 for v in sizes):
        raise argparse.ArgumentTypeError(f"{text!r}: every d_model is above 0")
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=_sizes, default="4096,8192", help="d_model values, comma-separated")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--emulated", action="store_true", help="also time the (slow) emulated FP8 rows")
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a smoke run of this script (its figures mean nothing; the CPU path is recipe_overhead.py)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a GPU (the CPU path is recipe_overhead.py)")
        return 2
    if device.type == "cuda":
        cc = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        print(f"{name}, compute capability {cc[0]}.{cc[1]}, torch {torch.__version__}")
        if not gpu.hopper_or_newer(device):
            print("compute capability < 9.0: no real FP8 GEMMs; only the emulated path would run")
    else:
        name = "cpu (smoke run)"
    missing = fused.torchao_missing()
    print("torchao:", missing or f"torchao {__import__('torchao').__version__}, float8 training importable")
    # on a CPU our real FP8 path runs only forced, as the tests force it; torchao runs eager
    real = ["scaled_mm"] if device.type == "cuda" else []
    paths = real + ([] if missing else ["torchao"]) + (["emulated"] if args.emulated else [])
    rows = []
    for d_model in args.sizes:
        cfg = TinyLMSettings(
            data=MarkovData(vocab=args.vocab, branching=4), context=args.context, d_model=d_model,
            n_layers=args.layers, n_heads=args.heads,
        )
        batch = torch.randint(0, args.vocab, (args.batch, args.context + 1), device=device)
        for recipe, path in [("bf16", "emulated")] + [(r, p) for r in gpu.REAL_FP8_RECIPES for p in paths]:
            model = _model(cfg, args.vocab, recipe, path, device)
            try:
                t, loss, peak = _time(model, batch, args.steps, args.rounds)
            except Exception as err:  # one path failing (a compile error, say) must not hide the others
                print(f"d_model {d_model} {recipe} {path}: failed: {type(err).__name__}: {str(err)[:300]}")
                continue
            finally:
                del model
                torch.cuda.empty_cache()
            rows.append({"d_model": d_model, "recipe": recipe, "path": "bf16" if recipe == "bf16" else path,
                         "ms": 1e3 * t, "loss0": loss, "peak_gib": peak, "tokens_per_s": args.batch * args.context / t})
    print(f"{args.layers} layers, batch {args.batch} x context {args.context}, median of {args.rounds} rounds "
          f"of {args.steps} steps after a warm-up round")
    print(f"{'d_model':>7s} {'recipe':16s} {'path':10s} {'ms/step':>9s} {'x bf16':>7s} {'speedup':>8s} "
          f"{'tokens/s':>10s} {'peak GiB':>9s} {'loss0':>8s}")
    base = {r["d_model"]: r["ms"] for r in rows if r["recipe"] == "bf16"}
    for r in rows:
        b = base.get(r["d_model"])
        r["x_bf16"] = r["ms"] / b if b else None
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
        print(f"{r['d_model']:7d} {r['recipe']:16s} {r['path']:10s} {r['ms']:9.2f} {r['x_bf16'] or 0:7.2f} "
              f"{1 / r['x_bf16'] if r['x_bf16'] else 0:8.2f} {r['tokens_per_s']:10.0f} {peak:>9s} "
              f"{r['loss0']:8.4f}")
    emulated = {(r["d_model"], r["recipe"]): r["loss0"] for r in rows if r["path"] == "emulated"}
    for r in rows:
        ref = emulated.get((r["d_model"], r["recipe"]))
        if ref and r["path"] != "emulated":
            print(f"d_model {r['d_model']} {r['recipe']} {r['path']}: first loss against the emulated one, "
                  f"relative difference {abs(r['loss0'] - ref) / abs(ref):.2e}")
    if args.json:
        first = rows[0]["d_model"] if rows else None  # 4096 by default
        fused_row = next((r for r in rows if r["d_model"] == first and r["recipe"] == "fp8_tensorwise"
                          and r["path"] == "torchao"), None)
        out = {"device": name, "torch": torch.__version__, "date": datetime.date.today().isoformat(),
               "d_model": first, "bf16_ms": base.get(first), "fp8_fused_ms": fused_row and fused_row["ms"],
               "speedup": fused_row and base.get(first) and base[first] / fused_row["ms"],
               "torchao": missing or __import__("torchao").__version__, "rows": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
