"""Settings of the built-in tiny language model (torch-free: campaigns validate them)."""

from __future__ import annotations

import ctypes
import fnmatch
import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from rcpforge.trainers.contract.run_key import keyed
from rcpforge.trainers.settings import TrainerSettings

# The linear layers of each block (trainers/tinylm/model.py), named blocks.<i>.<layer>:
# the GEMMs a recipe quantizes and its placement (bf16_layers) names.
LINEAR_LAYERS = ("qkv", "proj", "fc1", "fc2")
# The attention matmuls of each block (S = Q K^T, O = P V), blocks.<i>.attn_qk|attn_pv:
# in BF16 unless a recipe's fp8_attention quantizes them; placement names them too.
ATTENTION_MATMULS = ("attn_qk", "attn_pv")

# Settings added after the first campaigns, with their defaults: they enter the run key
# only off them (trainers/contract/run_key.py: `keyed`).
ADDED_LATER: dict[str, Any] = {"checkpoint_every_evals": None, "device": "cpu", "fp8_gemm": "auto"}


def no_cuda_device() -> bool:
    """Whether this process surely sees no CUDA device: no NVIDIA driver, one that counts
    none, or CUDA_VISIBLE_DEVICES hiding them all. Asked of the driver's NVML, not of
    torch: importing torch costs seconds, and a CUDA context made before the workers
    fork would break theirs (NVML makes none). A driver that cannot answer is no proof:
    the run's own check (torch's) decides then."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return True
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return True  # no NVIDIA driver
    try:
        if nvml.nvmlInit_v2() != 0:
            return False
        count = ctypes.c_uint(0)
        answered = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
        nvml.nvmlShutdown()
    except AttributeError:  # an old driver without these entry points
        return False
    return answered and count.value == 0


class MarkovData(BaseModel):
    """A seeded sparse order-2 Markov source over `vocab` symbols: each context has
    `branching` successors with Dirichlet(1) weights, mixed with `noise` uniform mass.
    Its entropy rate is known exactly, so a target like 'eval loss within 0.4 nat of the
    best possible loss' means the same thing for every recipe."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: Literal["markov"] = "markov"
    vocab: int = Field(32, ge=4, le=4096)
    branching: int = Field(4, ge=1)
    noise: float = Field(0.01, ge=0.0, lt=1.0)
    data_seed: int = Field(1234, ge=0)

    @model_validator(mode="after")
    def _branching_fits(self) -> MarkovData:
        if self.branching > self.vocab:
            raise ValueError(f"branching ({self.branching}) cannot exceed vocab ({self.vocab})")
        return self


class TextData(BaseModel):
    """Bytes of a user-supplied text file; the last `eval_fraction` is held out."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: Literal["text"]
    path: str
    eval_fraction: float = Field(0.1, gt=0.0, lt=0.5)


class CorpusData(BaseModel):
    """Bytes of a corpus that a Python package ships (trainers/tinylm/corpus.py), by name:
    `shakespeare`, the spoken lines of 38 plays, three of them held out whole for evals
    (docs/text-corpus.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: Literal["corpus"]
    name: Literal["shakespeare"]


class TinyLMSettings(TrainerSettings):
    model_config = ConfigDict(frozen=True, extra="forbid")
    data: MarkovData | TextData | CorpusData = Field(default_factory=MarkovData, discriminator="source")
    context: int = Field(16, ge=2, le=4096)
    d_model: int = Field(64, ge=8)
    n_layers: int = Field(2, ge=1, le=1024)  # bounded: the placement checks list every layer
    n_heads: int = Field(4, ge=1)
    mlp_ratio: int = Field(4, ge=1)
    eval_tokens: int = Field(8192, ge=64)
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    # Threads per run: results are deterministic for a fixed count; 1 suits one run
    # per core.
    threads: int = Field(1, ge=1)
    # A run whose eval loss exceeds this many nats is stopped as diverged.
    diverge_loss: float = Field(20.0, gt=0.0)
    # Stability options (arXiv 2410.16682): LayerNorm on q and k per head; LayerNorm after
    # the Proj and FC2 outputs; LayerNorm after QKV instead of the pre-norm; attention
    # logits capped as c * tanh(logits / c).
    qk_layernorm: bool = False
    ln_after_proj_fc2: bool = False
    ln_after_qkv: bool = False
    softmax_cap: float | None = Field(None, gt=0.0)
    # Numeric telemetry (saturated / flushed fractions, MoR FP8 fraction) is counted on
    # this many training steps before each eval, then logged with the eval; 0: off.
    telemetry_steps: int = Field(4, ge=0)
    # Save a checkpoint in the run's folder every this many evals and resume from it when
    # the run starts again (a preempted or requeued cluster job). None: never.
    checkpoint_every_evals: int | None = Field(None, ge=1)
    # Where the run trains. On CUDA devices of compute capability 9.0 or more (Hopper),
    # fp8_tensorwise and fp8_rowwise run real FP8 GEMMs; other recipes are emulated on
    # the device. Part of the run key: a GPU run's numerics differ from a CPU run's.
    device: Literal["cpu", "cuda"] = "cpu"
    # The FP8 GEMMs of fp8_tensorwise, fp8_rowwise and fp8_rowwise_gw_hp (and recipes with
    # their operands): auto takes the fastest the device has (on Hopper torchao's, casts
    # fused by torch.compile, else our real FP8 GEMMs; on a CPU the emulation); emulated,
    # scaled_mm (ours, real FP8, unfused casts) and torchao force one
    # (trainers/precision/fused.py says how each differs). Part of the run key when set.
    fp8_gemm: Literal["auto", "emulated", "scaled_mm", "torchao"] = "auto"

    @classmethod
    def reported_metrics(cls, settings: dict) -> list[str]:
        """The eval metrics a run reports, a campaign's target must be one of them: the
        excess loss over the source's entropy rate exists only for the Markov source,
        whose rate is known."""
        data = (settings.get("data") or {}).get("source", "markov")
        return ["eval_excess_loss", "eval_loss"] if data == "markov" else ["eval_loss"]

    @classmethod
    def check_local_host(cls, settings: dict) -> None:
        if (settings.get("data") or {}).get("source") == "corpus":
            from rcpforge.trainers.tinylm.corpus import CorpusNotFound, plays_folder  # torch-free

            try:
                plays_folder()
            except CorpusNotFound as err:
                raise ValueError(str(err)) from None
        if settings.get("device") == "cuda" and no_cuda_device():
            raise ValueError(
                "trainer.device: cuda, but this machine has no CUDA device (none visible to the NVIDIA driver, or "
                "CUDA_VISIBLE_DEVICES hides them); set trainer.device: cpu, or run the campaign where a GPU is "
                "(on this machine, or backend.kind: ray or slurm with GPUs)"
            )

    @classmethod
    def check_world_size(cls, batch_sizes: list[int], world_size: int) -> None:
        """Each rank of a data-parallel run trains on batch_size / world_size rows."""
        bad = [b for b in batch_sizes if b % world_size]
        if bad:
            raise ValueError(
                f"batch_sizes: {', '.join(map(str, bad))} cannot be split over the run's {world_size} ranks "
                f"(launch: nodes x processes_per_node); use batch sizes that are multiples of {world_size}"
            )

    @classmethod
    def check_campaign(cls, settings: dict[str, Any], hparams_by_bs: dict[int, dict[str, Any]],
                       recipes: dict[str, dict[str, Any]] | None = None) -> None:
        """A recipe's placement fits the model: its first and last BF16 blocks leave a
        block quantized, and every name or pattern of bf16_layers names a layer; so does
        the placement of the recipe its schedule switches to (`switch_to`)."""
        n = int(settings.get("n_layers", cls.model_fields["n_layers"].default))
        placed = dict(recipes or {})
        for name, opts in (recipes or {}).items():
            target = opts.get("switch_to")  # normalized: {target: its options}
            if isinstance(target, dict):
                placed.update({f"{name}.switch_to.{t}": o for t, o in target.items() if isinstance(o, dict)})
        layers = ([f"blocks.{i}.{g}" for i in range(n) for g in (*LINEAR_LAYERS, *ATTENTION_MATMULS)]
                  if any(opts.get("bf16_layers") for opts in placed.values()) else [])
        for name, opts in placed.items():
            first, last = int(opts.get("bf16_first_blocks", 0)), int(opts.get("bf16_last_blocks", 0))
            if first + last > n:
                raise ValueError(
                    f"recipes.{name}.bf16_first_blocks: {first} first and {last} last blocks in BF16 are more than "
                    f"the model's {n} (trainer.n_layers); lower them so that some block is quantized"
                )
            for pattern in opts.get("bf16_layers") or []:
                if not any(fnmatch.fnmatchcase(layer, pattern) for layer in layers):
                    raise ValueError(
                        f"recipes.{name}.bf16_layers: {pattern!r} names no layer of this model; its layers are "
                        f"blocks.<0-{n - 1}>.<{'|'.join((*LINEAR_LAYERS, *ATTENTION_MATMULS))}> (patterns such as "
                        "*.fc2 match several)"
                    )

    @classmethod
    def model_size(cls, settings: dict[str, Any]) -> tuple[int | None, float | None]:
        from rcpforge.trainers.tinylm.size import model_size  # a leaf: it imports no settings

        return model_size(settings)

    @model_serializer(mode="wrap")
    def _drop_defaults_added_later(self, handler):
        # Settings added after the first campaigns are left out of the dump (the run
        # key's trainer) while they hold their defaults, so run keys of campaigns that
        # never set them stay what they were before the settings existed.
        data = handler(self)
        return keyed(data, ADDED_LATER) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _scaled_mm_on_a_gpu(self) -> TinyLMSettings:
        if self.fp8_gemm == "scaled_mm" and self.device != "cuda":
            raise ValueError("fp8_gemm: scaled_mm runs real FP8 GEMMs on a GPU; set trainer.device: cuda, "
                             "or fp8_gemm: auto (the emulation on a CPU)")
        return self

    @model_validator(mode="after")
    def _heads_divide(self) -> TinyLMSettings:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model: {self.d_model} is not divisible by n_heads ({self.n_heads}); give a d_model "
                             f"that is a multiple of n_heads, or n_heads that divides d_model")
        return self


class TinyLMHParams(BaseModel):
    """Hyperparameters tuned per batch size. The LR warms up linearly over
    `warmup_tokens`, then stays constant."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    lr: float = Field(gt=0.0)
    warmup_tokens: int = Field(ge=0)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.95, ge=0.0, lt=1.0)
