"""Bit-identity check for speed work on the quantizers: a fingerprint of every recipe's
results, to compare before and after a change on the same machine.

It records, as exact hex floats or SHA-256 digests: the eval curve (every metric,
telemetry included) of a short tiny-LM run per recipe and option variant on two model
shapes (one a multiple of every block size, one that pads every block), and the output
bits of the public `quantize` for every format, block, scale mode and rounding on random
data with zeros, ties, tiny and non-finite values mixed in.

    PYTHONPATH=. python benchmarks/recipe_bits.py --save /tmp/before.json   # old code
    PYTHONPATH=. python benchmarks/recipe_bits.py --compare /tmp/before.json  # new code

Exit code 1 when anything differs. GEMM kernels differ between CPUs, so a fingerprint
only means something on the machine (and thread count) that wrote it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import torch

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.precision import quantize
from rcpforge.trainers.tinylm.train import TinyLMTrainer
from tests.helpers.campaigns import tiny_campaign

VARIANTS: list = [
    "bf16", "fp8_tensorwise", "fp8_channelwise", "fp8_delayed", "fp8_rowwise", "fp8_rowwise_gw_hp",
    "fp8_block", "mxfp8", "mxfp4", "nvfp4", "mor",
    {"fp8_delayed": {"amax_history_len": 4, "margin": 1}},
    {"mxfp8": {"scale_mode": "rceil", "grad_format": "e5m2"}},
    {"mxfp4": {"scale_mode": "rceil"}},
    {"nvfp4": {"stochastic_rounding": False, "hadamard": False, "weight_2d": False}},
    {"nvfp4": {"scale_clamp": True, "bf16_last_blocks": 1}},
    {"mor": {"granularity": "block", "block_size": 16, "threshold": 0.03}},
    {"fp8_block": {"use_f32_scales": True}},
    {"fp8_tensorwise": {"quantize_residual": True}},
    {"nvfp4": {"quantize_residual": True}},
]
SHAPES = {"d64": {"d_model": 64, "n_heads": 4}, "d40": {"d_model": 40, "n_heads": 2}}


class _Recorder:
    output_dir = None

    def __init__(self) -> None:
        self.points: list = []

    def eval_point(self, point) -> None:
        self.points.append(point)


def _runs() -> dict[str, list]:
    out: dict[str, list] = {}
    for shape, dims in SHAPES.items():
        for variant in VARIANTS:  # one campaign each: a campaign lists a recipe once
            data = tiny_campaign(recipes=[variant], seeds=1, batch_sizes=[32, 64],
                                 hparams={b: {"lr": 0.01, "warmup_tokens": 2048} for b in (32, 64)},
                                 budget={"max_tokens": 6144, "eval_every_tokens": 2048})
            data["trainer"].update(dims, n_layers=2, context=16, telemetry_steps=2,
                                   data={"source": "markov", "vocab": 32})
            spec = next(s for s in expand(parse_campaign(data)) if s.batch_size == 32)
            rec = _Recorder()
            result = TinyLMTrainer().train(spec, rec)
            key = f"{shape} {spec.recipe} {json.dumps(spec.recipe_options, sort_keys=True)}"
            curve = [{k: float(v).hex() for k, v in sorted(p.metrics.items())} for p in rec.points]
            out[key] = [result.status.value, curve]
            print(key, result.status.value, curve[-1]["eval_loss"], flush=True)
    return out


def _data(seed: int, shape: tuple[int, int]) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * torch.exp(torch.randn(shape, generator=gen) * 3)
    flat = x.view(-1)
    flat[::37] = 0.0
    flat[5::41] = -0.0
    flat[7::53] = 2.0 ** torch.randint(-30, 10, flat[7::53].shape, generator=gen).float() * 1.0625
    flat[11::59] = 1e-42
    if seed % 2:
        flat[3] = float("inf")
        flat[4] = float("-inf")
        flat[6] = float("nan")
    return x


def _quantizers() -> dict[str, str]:
    out = {}
    cases = [(None, m) for m in ("fp32", "pow2", "nvfp4")]
    cases += [(16, m) for m in ("floor", "rceil", "fp32", "pow2", "nvfp4", "nvfp4_clamped")]
    cases += [(32, "floor"), (32, "rceil"), (128, "fp32"), ((16, 16), "nvfp4"),
              ((16, 16), "nvfp4_clamped"), ((128, 128), "fp32")]
    for fmt in ("e4m3", "e5m2", "e2m1"):
        for block, mode in cases:
            for rounding in ("rne", "sr"):
                for seed, shape in ((0, (48, 80)), (1, (130, 200)), (2, (256, 64))):
                    q = quantize(_data(seed, shape), fmt, block=block, scale_mode=mode,
                                 rounding=rounding, seed=seed)
                    key = f"{fmt} {block} {mode} {rounding} {shape}"
                    out[key] = hashlib.sha256(q.contiguous().view(torch.int32).numpy().tobytes()).hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save")
    group.add_argument("--compare")
    args = ap.parse_args()
    torch.set_num_threads(1)
    now = {"quantize": _quantizers(), "runs": _runs()}
    if args.save:
        with open(args.save, "w") as fh:
            json.dump(now, fh, indent=1, sort_keys=True)
        print(f"saved {len(now['quantize'])} quantizer digests and {len(now['runs'])} runs to {args.save}")
        return
    with open(args.compare) as fh:
        before = json.load(fh)
    bad = 0
    for part in ("quantize", "runs"):
        for key, value in before[part].items():
            if now[part].get(key) != value:
                bad += 1
                print(f"DIFFERS: {part} {key}")
    total = len(before["quantize"]) + len(before["runs"])
    print(f"{total - bad} of {total} identical ({len(before['quantize'])} quantizer outputs, "
          f"{len(before['runs'])} runs)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
