"""The built-in trainer: trains the tiny LM until the first eval that meets the target,
the token budget, or divergence. All randomness derives from the run's seed."""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import numpy as np
import torch

from rcpforge.trainers.contract import EvalPoint, Reporter, RunResult, RunSpec, RunStatus, Trainer
from rcpforge.trainers.contract.mllog.read import PRECISION_MAP_KEY
from rcpforge.trainers.precision.fused import fp8_gemm_path
from rcpforge.trainers.precision.heap import keep_freed_memory
from rcpforge.trainers.precision.layers import attention_factory, gemm_factory, residual_quantizer, switch_recipe
from rcpforge.trainers.precision.telemetry import Telemetry
from rcpforge.trainers.recipes.resolve import resolve_recipe
from rcpforge.trainers.tinylm import checkpoint
from rcpforge.trainers.tinylm.data import Batches, EvalSet
from rcpforge.trainers.tinylm.distributed import DataParallel
from rcpforge.trainers.tinylm.model import TinyLM
from rcpforge.trainers.tinylm.precision_map import disclosed_precisions, precision_map
from rcpforge.trainers.tinylm.settings import TinyLMHParams, TinyLMSettings

EVAL_BATCH = 256


def reference_precision(device: torch.device):
    """The context a step's forward pass runs in: everything that is not a quantized
    GEMM input runs in the BF16 reference precision. On CUDA that is BF16 autocast. On a
    CPU the model's BF16 GEMMs are its own (trainers/precision/reference.py: BF16
    operands, FP32 accumulation, BF16 outputs, as autocast's), so no autocast: every other
    op runs in the dtype it runs in under CPU autocast anyway (norms, activations and
    softmax in their input's dtype)."""
    if device.type == "cpu":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def _device(cfg: TinyLMSettings) -> torch.device:
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "trainer.device is 'cuda' but this worker sees no CUDA device "
            "(torch.cuda.is_available() is False); run it where a GPU is (backend num_gpus / "
            "gpus_per_node) or set trainer.device: cpu"
        )
    return torch.device(cfg.device)


@torch.no_grad()
def evaluate(model: TinyLM, eval_set: EvalSet) -> dict[str, float]:
    # In a data-parallel run every rank evaluates the whole set: the quantized GEMMs of
    # the forward pass take part in collectives (delayed scaling's amax reduction), so
    # every rank must run the same ones; the replicas agree, so the metrics do too.
    model.eval()
    device = next(model.parameters()).device
    seqs = torch.from_numpy(eval_set.tokens).to(device)
    total, count = 0.0, 0
    for i in range(0, len(seqs), EVAL_BATCH):
        chunk = seqs[i : i + EVAL_BATCH]
        with reference_precision(device):
            loss = model(chunk[:, :-1], chunk[:, 1:])
        total += float(loss) * chunk.shape[0]
        count += chunk.shape[0]
    model.train()
    metrics = {"eval_loss": total / count}
    if eval_set.source_loss is not None:
        metrics["eval_excess_loss"] = metrics["eval_loss"] - eval_set.source_loss
    return metrics


def run_precision_map(spec: RunSpec) -> dict:
    """The run's precision map (trainers/tinylm/precision_map.py): its recipe on this model, the
    schedule's switch at the step it happens."""
    cfg = TinyLMSettings.model_validate({k: v for k, v in spec.trainer.items() if k != "kind"})
    recipe = resolve_recipe(spec.recipe, spec.recipe_options)
    return precision_map(recipe, cfg.n_layers, spec.batch_size * cfg.context, spec.budget.max_tokens)


def optimizer(model: TinyLM, weight_decay: float, lr: float, betas: tuple[float, float]) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices but the embeddings. foreach: the same
    arithmetic per tensor as the for-loop form (bit for bit, the CPU's foreach ops loop
    over the tensors), with a fraction of the Python calls."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "pos" not in name and "tok" not in name else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, foreach=True)


def lr_at(tokens: int, hp: TinyLMHParams) -> float:
    if hp.warmup_tokens and tokens < hp.warmup_tokens:
        return hp.lr * (tokens + 1) / hp.warmup_tokens
    return hp.lr


class TinyLMTrainer(Trainer):
    writes_mllog = False  # the executor writes result.txt from the eval points

    def disclosure(self, spec: RunSpec) -> dict[str, object]:
        """MLPerf's precision and parallelism keys for the run's result file, and the
        run's per-layer precision map they derive from (`PRECISION_MAP_KEY`): the lowest
        format of its linear GEMMs, of its attention matmuls and of its gradient
        all-reduce (FP32), after placement and over the schedule's phases; data parallel
        only, each rank a slice of the global batch."""
        pmap = run_precision_map(spec)
        return {
            **disclosed_precisions(pmap),
            "tensor_parallelism": 1, "pipeline_parallelism": 1, "context_parallelism": 1, "expert_parallelism": 1,
            "micro_batch_size": spec.batch_size // max(1, spec.world_size),
            PRECISION_MAP_KEY: pmap,
        }

    def train(self, spec: RunSpec, reporter: Reporter) -> RunResult:
        cfg = TinyLMSettings.model_validate({k: v for k, v in spec.trainer.items() if k != "kind"})
        device = _device(cfg)
        dp = DataParallel(spec.world_size, device)
        try:
            run = _Run(spec, Reporter.of(reporter), cfg, device, dp)
            run.resume()
            return run.loop()
        finally:
            dp.close()


class _Run:
    """One run of the tiny LM, in nanoGPT's order: build (data, model, optimizer), resume
    from a checkpoint if the run has one, then the training loop with its evals."""

    def __init__(self, spec: RunSpec, reporter: Reporter, cfg: TinyLMSettings, device: torch.device,
                 dp: DataParallel):
        self.start = time.monotonic()
        self.spec, self.reporter, self.cfg, self.device, self.dp = spec, reporter, cfg, device, dp
        self.hp = TinyLMHParams.model_validate(spec.hparams)
        torch.set_num_threads(cfg.threads)
        keep_freed_memory()  # the same temporaries every step: keep their pages
        torch.manual_seed(spec.seed)
        self.data = Batches(cfg.data, cfg.context, cfg.eval_tokens, spec.seed, reporter.campaign_dir)
        recipe = resolve_recipe(spec.recipe, spec.recipe_options)
        self.telemetry = Telemetry()
        path = fp8_gemm_path(cfg.fp8_gemm, recipe, device)
        self.model = TinyLM(
            cfg, self.data.vocab, gemm_factory(recipe, cfg.n_layers, self.telemetry, spec.seed, dp.rank, path),
            residual=residual_quantizer(recipe), per_layer=True, attention=attention_factory(recipe, cfg.n_layers),
        ).to(device)
        # On a GPU torchao's GEMMs are compiled with the model, so each operand's cast is
        # one fused kernel; the eager model stays for evals, checkpoints and the switch.
        self.forward = torch.compile(self.model) if path == "torchao" and device.type == "cuda" else self.model
        if path != "emulated":
            print(f"rcpforge tinylm: {recipe.name}'s FP8 GEMMs: {path}"
                  f"{' (torch.compile)' if self.forward is not self.model else ''}", flush=True)
        self.opt = optimizer(self.model, cfg.weight_decay, self.hp.lr, (self.hp.beta1, self.hp.beta2))
        reported = evaluate(self.model, self.data.eval)
        if spec.target.metric not in reported:
            raise ValueError(
                f"target metric {spec.target.metric!r} is not reported by tinylm with "
                f"{cfg.data.source} data; it reports {sorted(reported)}"
            )
        self.tokens_per_step = spec.batch_size * cfg.context
        if dp.rank == 0:
            ranks = f" over {dp.world} ranks" if dp.active else ""
            print(f"rcpforge tinylm: {spec.run_name}: {spec.batch_size} sequences x {cfg.context} tokens = "
                  f"{self.tokens_per_step:,} tokens a step{ranks}, an eval every "
                  f"{spec.budget.eval_every_tokens:,} tokens, at most {spec.budget.max_tokens:,}", flush=True)
        self.tokens, self.next_eval = 0, spec.budget.eval_every_tokens
        self.metric: float | None = None
        self.evals = 0
        # A gang's ranks share the run's folder for checkpoints (each keeps its own
        # output_dir for anything else).
        self.folder = (Path(reporter.run_dir or reporter.output_dir)
                       if cfg.checkpoint_every_evals else None)
        self.switch = recipe.switch  # the recipe's schedule (also on a resumed run)

    def follow_schedule(self, at_tokens: int) -> None:
        if self.switch is not None and at_tokens >= self.switch.from_tokens:
            to = self.switch.to
            switch_recipe(self.model, to, self.cfg.n_layers, self.telemetry, self.spec.seed, self.dp.rank,
                          fp8_gemm_path(self.cfg.fp8_gemm, to, self.device))
            self.switch = None

    def resume(self) -> None:
        """A requeued job continues where its checkpoint left off."""
        if self.folder is None:
            return
        # a checkpoint taken after the switch holds the target's numeric state: switch first
        loop = checkpoint.restore(self.folder, self.model, self.opt, self.data._rng, self.dp.rank,
                                  before_numerics=lambda loop: self.follow_schedule(loop["tokens"]))
        if loop is not None:
            self.tokens, self.next_eval = loop["tokens"], loop["next_eval"]
            self.metric, self.evals = loop["metric"], loop["evals"]
        if self.dp.rank == 0:
            checkpoint.note_start(self.folder, self.tokens)

    def result(self, status: RunStatus, error: str | None = None) -> RunResult:
        if self.folder is not None and self.dp.rank == 0:
            checkpoint.discard(self.folder)
        converged = status is RunStatus.converged
        return RunResult(
            status=status,
            tokens_to_target=self.tokens if converged else None,
            samples_to_target=self.tokens // self.cfg.context if converged else None,
            tokens_trained=self.tokens,
            final_metric=self.metric,
            wall_s=time.monotonic() - self.start,
            error=error,
        )

    def loop(self) -> RunResult:
        spec, params = self.spec, list(self.model.parameters())
        while self.tokens < spec.budget.max_tokens:
            self.follow_schedule(self.tokens)  # at the first step at or after the switch point
            if not self.step(params):
                return self.result(RunStatus.diverged, f"non-finite training loss at {self.tokens} tokens")
            self.tokens += self.tokens_per_step
            if self.tokens < self.next_eval and self.tokens < spec.budget.max_tokens:
                continue
            ended = self.eval()
            if ended is not None:
                return ended
        return self.result(RunStatus.not_converged)

    def step(self, params: list[torch.nn.Parameter]) -> bool:
        """One training step; False when its loss is not finite (the run diverged)."""
        spec, dp = self.spec, self.dp
        # Every rank draws the same global batch and trains on its slice of it.
        batch = torch.from_numpy(dp.shard(self.data.next(spec.batch_size))).to(self.device)
        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.tokens, self.hp)
        # count numeric telemetry only on the last steps before an eval
        self.telemetry.active = self.next_eval - self.tokens <= self.cfg.telemetry_steps * self.tokens_per_step
        with reference_precision(self.device):
            try:
                loss = self.forward(batch[:, :-1], batch[:, 1:])
            except Exception as err:
                if self.forward is self.model:
                    raise
                # A compiler that fails here (no Triton, an unsupported op) costs the
                # fusion, not the run: the same GEMMs, eager.
                print(f"rcpforge tinylm: torch.compile failed ({type(err).__name__}: {str(err)[:200]}); "
                      "torchao's GEMMs run eager", flush=True)
                self.forward = self.model
                loss = self.forward(batch[:, :-1], batch[:, 1:])
        if not dp.active and not math.isfinite(loss.item()):
            return False
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        # the loss rides with the gradients: every rank decides alike
        if dp.active and not math.isfinite(dp.average_gradients(params, loss)):
            return False
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.opt.step()
        return True

    def eval(self) -> RunResult | None:
        """The eval at this token count: the run's result if it ends here (converged,
        diverged), else None (a checkpoint taken where one is due)."""
        spec, cfg, every = self.spec, self.cfg, self.spec.budget.eval_every_tokens
        self.next_eval = (self.tokens // every + 1) * every
        self.telemetry.active = False
        metrics = evaluate(self.model, self.data.eval)
        self.metric = metrics[spec.target.metric]
        metrics.update(self.telemetry.summary())
        self.reporter.eval_point(EvalPoint(tokens=self.tokens, samples=self.tokens // cfg.context, metrics=metrics))
        if spec.target.reached(self.metric):
            return self.result(RunStatus.converged)
        if not np.isfinite(metrics["eval_loss"]) or metrics["eval_loss"] > cfg.diverge_loss:
            return self.result(RunStatus.diverged, f"eval loss {metrics['eval_loss']:.3g} at {self.tokens} tokens")
        self.evals += 1
        if self.folder is not None and self.evals % cfg.checkpoint_every_evals == 0:
            loop = {"tokens": self.tokens, "next_eval": self.next_eval, "metric": self.metric, "evals": self.evals}
            checkpoint.save(self.folder, self.model, self.opt, self.data._rng, loop, self.dp)
        return None
