"""mxfp4_sr_rht (MXFP4, SR on dY, a random 32-point Hadamard on the wgrad copies, arXiv
2502.20586) and mxfp4_dethad (a deterministic 32-point Hadamard, arXiv 2605.09825): the
transform is undone exactly in the wgrad GEMM, each GEMM is its oracle's, and the random
signs come from the layer's seeded stream, one draw per GEMM."""

from __future__ import annotations

import pytest
import torch

from rcpforge.trainers.precision import quantize
from rcpforge.trainers.precision.hadamard import hadamard_last_dim, hadamard_matrix
from rcpforge.trainers.precision.linear import QuantizedGemm
from rcpforge.trainers.recipes.config import same_gemms
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm.precision_map import disclosed_precisions, precision_map
from tests.trainers.precision.test_linear import _oracle_grads, _problem, _rel, _run


def _mx(t: torch.Tensor) -> torch.Tensor:
    return quantize(t, "e2m1", block=32, scale_mode="floor")


@pytest.mark.parametrize("name", ["mxfp4_sr_rht", "mxfp4_dethad"])
def test_the_wgrad_hadamard_is_undone_exactly_in_the_gemm(name):
    gemm = QuantizedGemm(resolve_recipe(name), seed=3)
    h = gemm.wgrad_hadamard()
    assert h.shape == (32, 32) and torch.allclose(h @ h.t(), torch.eye(32), atol=1e-6)
    gen = torch.Generator().manual_seed(5)
    dy_t, x_t = torch.randn(48, 200, generator=gen), torch.randn(64, 200, generator=gen)  # 200 tokens: padded
    a, b = hadamard_last_dim(dy_t, h), hadamard_last_dim(x_t, h)
    assert a.shape == (48, 224) and not torch.allclose(a[:, :200], dy_t)
    exact = dy_t.double() @ x_t.double().t()
    assert _rel(a @ b.t(), exact) < 1e-6  # no quantization: the untransformed GEMM up to float rounding


def test_the_deterministic_hadamard_has_no_signs_and_the_random_one_is_drawn_per_gemm():
    plain = QuantizedGemm(resolve_recipe("mxfp4_dethad")).wgrad_hadamard()
    assert torch.equal(plain, hadamard_matrix(torch.float32, 32, False)) and (plain[0] > 0).all()
    rht = QuantizedGemm(resolve_recipe("mxfp4_sr_rht"), seed=7)
    first, second = rht.wgrad_hadamard(), rht.wgrad_hadamard()
    assert not torch.equal(first, second)  # a new sign vector per GEMM
    assert torch.equal(first, QuantizedGemm(resolve_recipe("mxfp4_sr_rht"), seed=7).wgrad_hadamard())  # seeded
    # the 16-point NVFP4 transform is what it was: the fixed random signs
    assert QuantizedGemm(resolve_recipe("nvfp4")).wgrad_hadamard() is None
    assert torch.equal(hadamard_matrix(torch.float32, 16, True), hadamard_matrix(torch.float32))


def test_mxfp4_dethad_gemms_equal_their_oracle():
    x, w, b, dy = _problem(1, m=128, k=64, n=48)
    out, gx, gw, _ = _run(QuantizedGemm(resolve_recipe("mxfp4_dethad")), x, w, b, dy)
    h = hadamard_matrix(torch.float32, 32, False)
    ref_out, ref_dx, ref_dw = _oracle_grads(x, w, dy, (_mx, _mx), (_mx, _mx),
                                            (lambda t: _mx(hadamard_last_dim(t, h)),) * 2)
    for got, ref in ((out - b, ref_out), (gx, ref_dx), (gw, ref_dw)):
        assert _rel(got, ref) < 3e-3
    plain = _run(QuantizedGemm(resolve_recipe("mxfp4")), x, w, b, dy)
    assert torch.equal(plain[1], gx) and not torch.equal(plain[2], gw)  # only the wgrad GEMM changes


def test_mxfp4_sr_rht_is_seeded_and_its_wgrad_is_unbiased_enough():
    x, w, b, dy = _problem(2, m=128, k=64, n=48)
    runs = [_run(QuantizedGemm(resolve_recipe("mxfp4_sr_rht"), seed=s), x, w, b, dy) for s in (0, 0, 1)]
    assert torch.equal(runs[0][2], runs[1][2]) and not torch.equal(runs[0][2], runs[2][2])
    exact = dy.double().t() @ x.double()
    # SR and a fresh random transform per draw: the mean of 16 draws is closer than one draw
    draws = [_run(QuantizedGemm(resolve_recipe("mxfp4_sr_rht"), seed=s), x, w, b, dy)[2] for s in range(16)]
    assert _rel(torch.stack(draws).mean(0), exact) < 0.5 * _rel(draws[0], exact)


def test_the_new_recipes_are_distinct_and_disclose_mxfp4():
    rht, det, mx = (resolve_recipe(n) for n in ("mxfp4_sr_rht", "mxfp4_dethad", "mxfp4"))
    assert not same_gemms(rht, det) and not same_gemms(det, mx)
    assert "32-point deterministic Hadamard" in det.summary()["wgrad"]
    assert "32-point random (signs drawn per GEMM) Hadamard" in rht.summary()["wgrad"]
    assert "stochastic rounding" in rht.summary()["dy"]
    keys = disclosed_precisions(precision_map(rht, 2))
    assert keys["lowest_numerical_precision_in_linear"] == "mxfp4"


def test_a_run_with_random_hadamards_and_fp8_attention_resumes_bit_for_bit(tmp_path):
    from tests.helpers.campaigns import tiny_run_specs
    from tests.trainers.test_tinylm_checkpoint import cut_and_resumed

    spec = tiny_run_specs(["bf16", {"rht": {"base": "mxfp4_sr_rht", "fp8_attention": True}}], 1536, every=2)["rht"]
    # killed after its 5th eval; the last checkpoint is at the 4th
    whole, _, second = cut_and_resumed(spec, tmp_path, stop_after=5)
    assert [p.tokens for p in second] == [p.tokens for p in whole[4:]] and second
    assert [p.metrics for p in second] == [p.metrics for p in whole[4:]]
