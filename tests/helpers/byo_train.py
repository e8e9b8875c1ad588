"""A submitter's own training program, as rcpforge's command trainer runs it: a small
real PyTorch model (an MLP classifying points of two overlapping Gaussian clouds) that implements its
own precision recipes and logs MLPerf `:::MLLOG` lines through `mlperf_logging.mllog`,
as reference implementations do. It knows nothing of rcpforge beyond its arguments.

Recipes: `fp32` trains in FP32; `te_nvfp4` fake-quantizes the weights of its linear
layers to E2M1 values with one scale per block of `--block` elements (the block comes
from the recipe's options, read here from RCPFORGE_RECIPE_BLOCK, which rcpforge sets
only for recipes that have the option)."""

from __future__ import annotations

import argparse
import os

import torch
from mlperf_logging import mllog
from mlperf_logging.mllog import constants as c

E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def fake_e2m1(w: torch.Tensor, block: int) -> torch.Tensor:
    """Quantize to E2M1 with a scale per block (amax maps to 6), then dequantize; the
    gradient passes straight through."""
    flat = w.reshape(-1, block)
    scale = flat.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 6.0
    x = (flat / scale).abs()
    nearest = E2M1[(x.unsqueeze(-1) - E2M1).abs().argmin(dim=-1)]
    q = (nearest * flat.sign() * scale).reshape(w.shape)
    return w + (q - w).detach()


class Net(torch.nn.Module):
    def __init__(self, block: int | None):
        super().__init__()
        self.block = block
        self.l1, self.l2 = torch.nn.Linear(2, 32), torch.nn.Linear(32, 2)

    def _linear(self, layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        w = fake_e2m1(layer.weight, self.block) if self.block else layer.weight
        return torch.nn.functional.linear(x, w, layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._linear(self.l2, torch.tanh(self._linear(self.l1, x)))


def clouds(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two Gaussian clouds around (1, 1) and (-1, -1): the best boundary is right 92% of
    the time, and a model starting from random weights needs a few hundred samples."""
    label = torch.randint(0, 2, (n,), generator=gen)
    centre = (label.float() * 2 - 1).unsqueeze(1).expand(n, 2)
    return centre + torch.randn(n, 2, generator=gen), label


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--recipe", required=True)
    p.add_argument("--precision", required=True)
    p.add_argument("--bs", type=int, required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--max-samples", type=int, required=True)
    p.add_argument("--eval-every", type=int, required=True)
    p.add_argument("--target", type=float, required=True)
    p.add_argument("--benchmark", required=True)
    p.add_argument("--mllog-file", default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.mllog_file:
        mllog.config(filename=args.mllog_file)
    log = mllog.get_mllogger()
    block = int(os.environ["RCPFORGE_RECIPE_BLOCK"]) if "RCPFORGE_RECIPE_BLOCK" in os.environ else None

    log.event(c.SUBMISSION_BENCHMARK, args.benchmark)
    log.event(c.SUBMISSION_DIVISION, c.CLOSED)
    log.start(c.INIT_START)
    log.event(c.SEED, args.seed)
    log.event(c.GLOBAL_BATCH_SIZE, args.bs)
    log.event(c.OPT_BASE_LR, args.lr)
    log.event(c.LOWEST_NUMERICAL_PRECISION_IN_LINEAR, args.precision)
    log.event(c.LOWEST_NUMERICAL_PRECISION_IN_ATTN, "fp32")
    log.event(c.LOWEST_NUMERICAL_PRECISION_IN_COMM, "fp32")
    log.event(c.TENSOR_PARALLELISM, 1)
    # What the program understood of its recipe, for the test to read back.
    log.event("recipe_options", {"recipe": args.recipe, "block": block})
    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    model = Net(block)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    eval_x, eval_y = clouds(1024, torch.Generator().manual_seed(1234))
    log.end(c.INIT_STOP)
    log.start(c.RUN_START)
    samples, status = 0, c.ABORTED
    while samples < args.max_samples:
        x, y = clouds(args.bs, gen)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        samples += args.bs
        if samples % args.eval_every < args.bs:
            with torch.no_grad():
                accuracy = float((model(eval_x).argmax(dim=1) == eval_y).float().mean())
            log.event(c.EVAL_ACCURACY, accuracy, metadata={c.EPOCH_NUM: samples, c.SAMPLES_COUNT: samples})
            if accuracy >= args.target:
                status = c.SUCCESS
                break
    log.end(c.RUN_STOP, metadata={c.STATUS: status})


if __name__ == "__main__":
    main()
