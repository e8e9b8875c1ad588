"""The reference precision's BF16 GEMMs on a CPU (trainers/precision/reference.py): FP32
GEMMs on BF16 operands with the output rounded to BF16, bit for bit; within FP32
accumulation bounds of the exact product; every BF16 GEMM of a tiny-LM step is one of
them (none left to torch's CPU BF16 kernels); the run keys that change and those that do
not."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from rcpforge.trainers.contract import RunSpec, revisions
from rcpforge.trainers.precision import reference
from rcpforge.trainers.precision.layers import attention_factory, gemm_factory
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm.data import Batches
from rcpforge.trainers.tinylm.model import TinyLM
from rcpforge.trainers.tinylm.settings import MarkovData, TinyLMSettings
from rcpforge.trainers.tinylm.train import reference_precision

EPS32 = 2.0**-24  # FP32's unit roundoff


def _rounded(t: torch.Tensor) -> torch.Tensor:
    return t.bfloat16().float()


def _spread(*shape: int, seed: int) -> torch.Tensor:
    """Values over a few binades and both signs: BF16 rounding changes most of them."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * torch.exp2(torch.randint(-6, 6, shape, generator=g).float())


def test_linear_is_an_fp32_gemm_of_bf16_operands_rounded_to_bf16_bit_for_bit():
    x, w, b = _spread(3, 40, 96, seed=0), _spread(72, 96, seed=1), _spread(72, seed=2)
    x.requires_grad_(True), w.requires_grad_(True), b.requires_grad_(True)
    y = reference.linear(x, w, b)
    assert y.dtype == torch.bfloat16 and y.shape == (3, 40, 72)  # as autocast's linear
    want = torch.addmm(_rounded(b), _rounded(x.detach().reshape(-1, 96)), _rounded(w.detach()).t()).bfloat16()
    assert torch.equal(y.reshape(-1, 72), want)
    dy = _spread(3, 40, 72, seed=3).bfloat16()
    y.backward(dy)
    g = dy.reshape(-1, 72).float()
    assert torch.equal(x.grad.reshape(-1, 96), torch.mm(g, _rounded(w.detach())).bfloat16().float())
    assert torch.equal(w.grad, torch.mm(g.t(), _rounded(x.detach().reshape(-1, 96))).bfloat16().float())
    assert torch.equal(b.grad, dy.reshape(-1, 72).sum(0).float())
    assert x.grad.dtype == w.grad.dtype == b.grad.dtype == torch.float32


def test_matmul_and_a_quantized_recipes_gemm_are_fp32_gemms_of_bf16_operands():
    a, b = _spread(8, 16, 32, seed=4).bfloat16(), _spread(8, 32, 16, seed=5).bfloat16()
    out = reference.matmul(a, b)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, torch.bmm(a.float(), b.float()).bfloat16())
    # the high-precision wgrad of fp8_rowwise_gw_hp (and the backward override's GEMMs)
    p, q = _spread(64, 48, seed=6), _spread(48, 24, seed=7)
    assert torch.equal(reference.gemm(p, q), torch.mm(_rounded(p), _rounded(q)).bfloat16().float())


@pytest.mark.parametrize("k", [16, 256, 4096])
def test_the_error_against_float64_is_within_fp32_accumulation_bounds(k):
    """|fp32 GEMM - exact| <= K eps32 sum|a_i b_i| per output, before the BF16 rounding,
    which adds at most half a BF16 unit (2^-8 relative)."""
    a, b = _rounded(_spread(32, k, seed=k)), _rounded(_spread(k, 24, seed=k + 1))
    exact = a.double() @ b.double()
    bound = k * EPS32 * (a.double().abs() @ b.double().abs())
    fp32 = torch.mm(a, b).double()
    assert ((fp32 - exact).abs() <= bound).all()
    out = reference.gemm_bf16_out(a, b).double()
    assert ((out - exact).abs() <= bound + 2.0**-8 * fp32.abs()).all()
    # the one output rounding: to nearest, half a BF16 unit at most (2^-9 relative, at
    # most 2^-8 of the value)
    assert ((out - fp32).abs() <= 2.0**-8 * fp32.abs()).all()


def test_attention_matches_its_definition_and_its_gradients_are_bf16():
    q, k, v = (_spread(2, 4, 16, 16, seed=s).bfloat16().requires_grad_(True) for s in (8, 9, 10))
    out = reference.attention(q, k, v)
    s = torch.matmul(q.float(), k.float().transpose(-2, -1)) / 4.0
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    p = s.masked_fill(~mask, float("-inf")).softmax(-1)
    assert torch.equal(out, torch.matmul(_rounded(p), v.float()).bfloat16())
    out.sum().backward()
    assert q.grad.dtype == k.grad.dtype == v.grad.dtype == torch.bfloat16
    # the same attention in float64 agrees within BF16's rounding of its steps
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    s64 = (q64 @ k64.transpose(-2, -1)) / 4.0
    o64 = s64.masked_fill(~mask, float("-inf")).softmax(-1) @ v64
    o64.sum().backward()
    for ours, exact in ((out, o64), (q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        scale = exact.abs().max().item()
        assert (ours.double() - exact).abs().max().item() <= 2.0**-6 * scale


class _BF16Gemms(TorchDispatchMode):
    """Counts the GEMMs (mm, bmm, addmm, baddbmm) that run with a BF16 operand."""

    GEMMS = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_flash_attention_for_cpu_backward"}

    def __init__(self):
        super().__init__()
        self.bf16: list[str] = []
        self.fp32 = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        if name in self.GEMMS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if any(t.dtype == torch.bfloat16 for t in tensors):
                self.bf16.append(name)
            else:
                self.fp32 += 1
        return func(*args, **(kwargs or {}))


def _model(recipe: str, options: dict | None = None, **settings) -> tuple[TinyLM, torch.Tensor]:
    cfg = TinyLMSettings(data=MarkovData(vocab=32), context=8, d_model=32, n_layers=2, n_heads=4, **settings)
    torch.manual_seed(0)
    r = resolve_recipe(recipe, options or {})
    model = TinyLM(cfg, 32, gemm_factory(r, cfg.n_layers), per_layer=True,
                   attention=attention_factory(r, cfg.n_layers))
    return model, torch.from_numpy(Batches(cfg.data, cfg.context, 64, seed=0).next(4))


CASES = [("bf16", {}, {}), ("bf16", {}, {"softmax_cap": 5.0}), ("fp8_tensorwise", {}, {}),
         ("fp8_tensorwise", {"fp8_attention": True}, {}), ("fp8_rowwise_gw_hp", {}, {}), ("mxfp8", {}, {}),
         ("nvfp4", {"backward": "high_precision"}, {}), ("nvfp4", {"backward": "dequantized"}, {}),
         ("mxfp4", {}, {}), ("bf16", {"bf16_layers": ["*.fc2"]}, {}),
         ("fp8_tensorwise", {"bf16_layers": ["*.attn_pv"], "fp8_attention": True}, {})]


@pytest.mark.parametrize(("recipe", "options", "settings"), CASES)
def test_no_gemm_of_a_cpu_training_step_runs_on_torchs_bf16_kernels(recipe, options, settings):
    """Under the trainer's context, and under CPU autocast too (a benchmark or a user's
    loop): every GEMM of the forward and backward pass is an FP32 GEMM, and the step's
    loss and gradients are the same either way (autocast has nothing left to change)."""
    results = []
    for context in (reference_precision(torch.device("cpu")), torch.autocast("cpu", dtype=torch.bfloat16)):
        model, batch = _model(recipe, options, **settings)
        counter = _BF16Gemms()
        with counter:
            with context:
                loss = model(batch[:, :-1], batch[:, 1:])
            loss.backward()
        assert counter.bf16 == [], f"GEMMs on torch's BF16 kernels: {counter.bf16}"
        assert counter.fp32 >= 3 * 4 * 2  # forward, dgrad and wgrad of the blocks' 8 layers at least
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b, strict=True))


def test_the_bf16_recipe_on_a_cpu_stays_close_to_torchs_bf16_autocast():
    """The same arithmetic as torch's BF16 GEMMs but for the order of FP32 sums: a step's
    loss agrees with the old path (F.linear and SDPA under CPU autocast) to BF16 level."""
    model, batch = _model("bf16")
    loss = model(batch[:, :-1], batch[:, 1:])
    old, _ = _model("bf16")
    for block in old.blocks:
        for name in ("qkv", "proj", "fc1", "fc2"):
            getattr(block, name).gemm = F.linear
    old_head = old.head
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x = old.tok(batch[:, :-1]) + old.pos(torch.arange(batch.shape[1] - 1))
        for block in old.blocks:
            b, t, d = x.shape
            qkv = block.qkv(block.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, 4, d // 4).transpose(1, 2) for z in qkv)
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + block.proj(att.transpose(1, 2).reshape(b, t, d))
            x = x + block.fc2(F.gelu(block.fc1(block.ln2(x))))
        logits = old_head(old.ln_f(x)).float()
    old_loss = F.cross_entropy(logits.reshape(-1, 32), batch[:, 1:].reshape(-1))
    new, was = float(loss.detach()), float(old_loss.detach())
    assert abs(new - was) <= 2e-3 * was and new != was


def _spec(trainer: dict, recipe: str = "bf16") -> RunSpec:
    return RunSpec(campaign="c", recipe=recipe, batch_size=16, seed=3, hparams={"lr": 0.01, "warmup_tokens": 8192},
                   target={"metric": "eval_loss", "mode": "min", "value": 1.0},
                   budget={"max_tokens": 1000, "eval_every_tokens": 100}, trainer=trainer)


def test_only_the_tiny_lm_on_a_cpu_gets_new_run_keys(monkeypatch):
    """The revision is the trainer's on its device, not the bf16 recipe's: a command
    trainer's `bf16` runs and the tiny LM's CUDA runs keep the keys they had."""
    cpu = _spec({"kind": "tinylm", "d_model": 32})
    cuda = _spec({"kind": "tinylm", "d_model": 32, "device": "cuda"})
    command = _spec({"kind": "command", "command": ["python", "train.py"]})
    fp8_cpu = _spec({"kind": "tinylm", "d_model": 32}, recipe="fp8_tensorwise")
    # computed by the code of a0a8b28, before the revision existed
    before = {"cuda": "7b745f1db113172979b6d4b1", "command": "4112b00bc0649da48b95cb53",
              "cpu": "b846ce9f5773e6391e900c19", "fp8_cpu": "486bb3e164f83dfa6f42eb0f"}
    assert revisions.trainer_revision(cpu.trainer) == 2
    assert revisions.trainer_revision(cuda.trainer) == revisions.trainer_revision(command.trainer) == 1
    assert (cuda.run_key, command.run_key) == (before["cuda"], before["command"])
    # every recipe of the CPU tiny LM moved, and only by the revision
    assert cpu.run_key != before["cpu"] and fp8_cpu.run_key != before["fp8_cpu"]
    monkeypatch.setattr(revisions, "TRAINER_REVISIONS", {})
    assert (cpu.run_key, fp8_cpu.run_key) == (before["cpu"], before["fp8_cpu"])


# Eval losses (float.hex) of 8 steps of the tiny campaign's batch-16 run of each recipe,
# by the CPU's kernel capability (torch.backends.cpu.get_cpu_capability()): the numerics
# of this revision, computed when it was made (3982eea). Speed-ups since must keep every
# bit; a change that moves them is a new revision (trainers/contract/revisions.py).
PINNED = {
    "AVX2": {
        "bf16": ["0x1.ff45c80000000p+0", "0x1.f2aa2c0000000p+0", "0x1.d10b0e0000000p+0", "0x1.c191de0000000p+0"],
        "fp8_tensorwise": ["0x1.ff5bc80000000p+0", "0x1.f2cc780000000p+0", "0x1.d09cbe0000000p+0",
                           "0x1.c04e920000000p+0"],
        "fp8_delayed": ["0x1.ff53500000000p+0", "0x1.f2ac340000000p+0", "0x1.d153600000000p+0", "0x1.c0f7280000000p+0"],
        "mxfp8": ["0x1.ff4fd40000000p+0", "0x1.f2b7d00000000p+0", "0x1.d091560000000p+0", "0x1.c09c320000000p+0"],
        "nvfp4": ["0x1.ff945c0000000p+0", "0x1.f18fec0000000p+0", "0x1.d0a7b00000000p+0", "0x1.c170a60000000p+0"],
        "mxfp4": ["0x1.ffd4320000000p+0", "0x1.f30d700000000p+0", "0x1.d0e7620000000p+0", "0x1.c263b60000000p+0"],
        "mor": ["0x1.ff495a0000000p+0", "0x1.f2796e0000000p+0", "0x1.d07d460000000p+0", "0x1.c068d20000000p+0"],
    },
}


def test_the_cpu_revisions_numbers_are_pinned_bit_for_bit():
    from rcpforge.trainers.tinylm.train import TinyLMTrainer
    from tests.helpers.campaigns import tiny_run_specs

    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in PINNED:
        pytest.skip(f"pinned on {sorted(PINNED)} CPUs; FP32 GEMM kernels of {capability} sum in another order")
    specs = tiny_run_specs(list(PINNED[capability]), max_tokens=1024)

    class Points:
        output_dir = None

        def __init__(self) -> None:
            self.losses: list[str] = []

        def eval_point(self, point) -> None:
            self.losses.append(float(point.metrics["eval_loss"]).hex())

    got = {}
    for name in PINNED[capability]:
        points = Points()
        TinyLMTrainer().train(specs[name], points)
        got[name] = points.losses
    assert got == PINNED[capability]
