"""The GPU path, on a CUDA device of compute capability 9.0 or more (Hopper): our real
FP8 GEMMs (`torch._scaled_mm`) of `fp8_tensorwise` and `fp8_rowwise` agree with the
emulation, other recipes run emulated on the device, the tiny LM trains to target
there, and the fused path (torchao's float8 GEMMs compiled with the model, the default
where torchao imports) agrees with the emulation and reaches the target within the
emulated path's seed spread. Skipped, with the reason, where no such device is present (CI has
none); run on an H200 with the command in benchmarks/RESULTS.md."""

from __future__ import annotations

import pytest
import torch

from rcpforge.sweeps.expand import expand
from rcpforge.sweeps.spec import parse_campaign
from rcpforge.trainers.contract import RunStatus
from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm.train import TinyLMTrainer

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)
pytestmark = pytest.mark.skipif(not HOPPER, reason="needs a CUDA device of compute capability 9.0 or more")


def _problem(device, m=256, k=128, n=96, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ts = (torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen) * 0.1,
          torch.randn(n, generator=gen), torch.randn(m, n, generator=gen))
    return tuple(t.to(device) for t in ts)


def _run(gemm, x, w, b, dy):
    x, w, b = (t.clone().requires_grad_() for t in (x, w, b))
    out = gemm(x, w, b)
    out.backward(dy)
    return [t.detach().double().cpu() for t in (out, x.grad, w.grad)]


def _rel(a, ref):
    return float((a - ref).norm() / ref.norm())


@pytest.mark.parametrize("name", ["fp8_tensorwise", "fp8_rowwise"])
def test_real_fp8_gemms_by_default_agree_with_the_emulation(name, monkeypatch):
    calls = []
    scaled_mm = torch._scaled_mm
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: calls.append(a[0].dtype) or scaled_mm(*a, **k))
    recipe = resolve_recipe(name)
    problem = _problem("cuda")
    real = _run(QuantizedGemm(recipe), *problem)
    assert len(calls) == 3 and all(d in (torch.float8_e4m3fn, torch.float8_e5m2) for d in calls)
    emulated = _run(QuantizedGemm(recipe, real_fp8=False), *problem)
    assert len(calls) == 3
    on_cpu = _run(QuantizedGemm(recipe), *_problem("cpu"))
    for r, e, c in zip(real, emulated, on_cpu):
        # same FP8 operands: only the BF16 output rounding of the real GEMM differs
        assert _rel(r, e) < 2**-7
        # the emulation on the GPU is the CPU's up to summation order inside the BF16
        # GEMM (about one BF16 step); different operands would differ by FP8 steps
        assert _rel(e, c) < 2**-8


@pytest.mark.parametrize("name, options", [
    ("fp8_delayed", {}), ("mxfp8", {}), ("mor", {}),
    # stochastic rounding draws from a generator on the tensor's device: other numbers
    # than the CPU's, so the comparison with the CPU is made without it
    ("nvfp4", {"stochastic_rounding": False}),
])
def test_emulated_recipes_run_on_the_gpu_as_on_the_cpu(name, options):
    gpu = _run(QuantizedGemm(resolve_recipe(name, options), seed=3), *_problem("cuda"))
    cpu = _run(QuantizedGemm(resolve_recipe(name, options), seed=3), *_problem("cpu"))
    for g, c in zip(gpu, cpu):
        # same scales and grids; an FP32 summation-order difference (the Hadamard
        # transform, the GEMMs) can move an element across a rounding boundary, hence a
        # bound well under one format step in norm, not equality
        assert _rel(g, c) < 1e-2


def test_stochastic_rounding_on_the_gpu_is_unbiased():
    recipe = resolve_recipe("nvfp4")
    gemm = QuantizedGemm(recipe, seed=3)
    dy = torch.randn(512, 256, generator=torch.Generator().manual_seed(1)).cuda()
    draws = torch.stack([gemm.quantize(dy, "dy") for _ in range(64)])
    assert gemm.generator.device.type == "cuda"
    assert not torch.equal(draws[0], draws[1])  # fresh draws each call
    # the mean of 64 draws is closer to dy than one round-to-nearest quantization is
    rne = QuantizedGemm(resolve_recipe("nvfp4", {"stochastic_rounding": False})).quantize(dy, "dy")
    assert _rel(draws.mean(0).double().cpu(), dy.double().cpu()) < 0.5 * _rel(rne.double().cpu(), dy.double().cpu())


def _quickstart_spec(recipe: str, seed: int = 0):
    campaign = parse_campaign({
        "name": "gpu", "trainer": {
            "kind": "tinylm", "device": "cuda", "context": 16, "d_model": 64, "n_layers": 2, "n_heads": 4,
            "data": {"source": "markov", "vocab": 32, "branching": 4, "noise": 0.01, "data_seed": 1234},
        },
        "target": {"metric": "eval_excess_loss", "mode": "min", "value": 0.4},
        "budget": {"max_tokens": 2_000_000, "eval_every_tokens": 16384},
        "recipes": [recipe], "batch_sizes": [32, 128], "seeds": seed + 1,
        "hparams": {32: {"lr": 0.01, "warmup_tokens": 100000}, 128: {"lr": 0.02, "warmup_tokens": 100000}},
    })
    return next(s for s in expand(campaign) if s.batch_size == 128 and s.seed == seed)


class _Recorder:
    output_dir = None

    def __init__(self):
        self.points = []

    def eval_point(self, point):
        self.points.append(point)


@pytest.mark.parametrize("recipe", ["bf16", "fp8_tensorwise", "fp8_rowwise", "nvfp4"])
def test_tiny_lm_trains_to_target_on_the_gpu(recipe):
    spec = _quickstart_spec(recipe)
    assert spec.trainer["device"] == "cuda"
    rec = _Recorder()
    result = TinyLMTrainer().train(spec, rec)
    assert result.status is RunStatus.converged, result
    assert rec.points[-1].metrics["eval_excess_loss"] <= 0.4
    assert all(p.metrics["eval_excess_loss"] > 0.4 for p in rec.points[:-1])


def _torchao_or_skip():
    from rcpforge.trainers.precision.fused import torchao_missing

    missing = torchao_missing()
    if missing:
        pytest.fail(f"{missing}: the fused path cannot be checked (make gpu-wheels and carry .whl)")


def test_the_fused_path_is_the_default_for_its_recipes_on_hopper():
    from rcpforge.trainers.precision.fused import fp8_gemm_path

    _torchao_or_skip()
    cuda = torch.device("cuda")
    assert fp8_gemm_path("auto", resolve_recipe("fp8_tensorwise"), cuda) == "torchao"
    assert fp8_gemm_path("auto", resolve_recipe("fp8_rowwise_gw_hp"), cuda) == "torchao"
    assert fp8_gemm_path("auto", resolve_recipe("nvfp4"), cuda) == "emulated"
    assert fp8_gemm_path("scaled_mm", resolve_recipe("fp8_tensorwise"), cuda) == "scaled_mm"


@pytest.mark.parametrize("name", ["fp8_tensorwise", "fp8_rowwise", "fp8_rowwise_gw_hp"])
def test_torchao_gemms_on_the_gpu_agree_with_the_emulation(name):
    from rcpforge.trainers.precision.fused import TorchaoFp8Gemm

    _torchao_or_skip()
    recipe = resolve_recipe(name)
    problem = _problem("cuda")
    fused = _run(TorchaoFp8Gemm(recipe), *problem)
    emulated = _run(QuantizedGemm(recipe, real_fp8=False), *problem)
    for f, e in zip(fused, emulated):
        # the same FP8 operands; the BF16 roundings of fused.py's list apart
        assert _rel(f, e) < 2**-7


def test_tiny_lm_on_the_fused_path_reaches_target_within_the_emulated_seed_spread():
    """fp8_tensorwise at batch size 128, three seeds on each path: every fused run's tokens
    to target lies within the emulated runs' range, widened by one eval interval."""
    _torchao_or_skip()
    found = {}
    for path in ("emulated", "auto"):
        for seed in range(3):
            spec = _quickstart_spec("fp8_tensorwise", seed=seed)
            spec = spec.model_copy(update={"trainer": {**spec.trainer, "fp8_gemm": path}})
            result = TinyLMTrainer().train(spec, _Recorder())
            assert result.status is RunStatus.converged, (path, seed, result)
            found.setdefault(path, []).append(result.tokens_to_target)
    step = 16384
    low, high = min(found["emulated"]) - step, max(found["emulated"]) + step
    assert all(low <= t <= high for t in found["auto"]), found
