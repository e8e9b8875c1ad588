"""How a run is filed in MLflow: the tag and metric names that the orchestrator writes
and the analysis reads. Experiment = campaign; one MLflow run per run key; params are
the hyperparameters (and `recipe.<option>`); the eval curve is logged as metrics with
step = tokens (plus `samples` at the same step)."""

from __future__ import annotations

TAG_PREFIX = "rcpforge."
TAG_CAMPAIGN = "rcpforge.campaign"
TAG_ROLE = "rcpforge.role"
TAG_RUN_KEY = "rcpforge.run_key"
# The run key with the seed left out: one value for every seed of one configuration, so a
# cell whose runs were made under two settings shows as two (analysis/mixtures.py).
TAG_CONFIG_KEY = "rcpforge.config_key"
TAG_RECIPE = "rcpforge.recipe"
# A campaign's model axis (`models:`): the run's model, its parameter count and its training
# FLOPs per token (docs/models.md); all three absent for a run of a campaign without one.
TAG_MODEL = "rcpforge.model"
TAG_MODEL_PARAMS = "rcpforge.model_params"
TAG_MODEL_FLOPS_PER_TOKEN = "rcpforge.model_flops_per_token"
TAG_BATCH_SIZE = "rcpforge.batch_size"
TAG_SEED = "rcpforge.seed"
TAG_STATUS = "rcpforge.status"
TAG_ATTEMPTS = "rcpforge.attempts"
TAG_TRAINER = "rcpforge.trainer"
TAG_TARGET_METRIC = "rcpforge.target_metric"
TAG_SPEC = "rcpforge.spec"
TAG_ERROR = "rcpforge.error"
# A failed run's kind of error (trainers/contract/run.py's ErrorKind: configuration,
# startup, transient, cancelled); a run failed by configuration is a failure, never an outcome.
TAG_ERROR_KIND = "rcpforge.error_kind"
# How many of a run's attempts were the campaign's failures, not the run's (a configuration
# error that stopped the campaign, the attempts that stop cancelled): they do not count
# against backend.max_attempts. Kept in the store, so a restarted orchestrator decides the same.
TAG_FREE_ATTEMPTS = "rcpforge.free_attempts"
# Where an imported run came from (`rcpforge import`): the result file's path.
TAG_SOURCE = "rcpforge.source"
# Where the run's current attempt executes when a cluster owns it (`slurm:<job id>`), so
# a restarted orchestrator or `rcpforge status` can tell a live job from a lost one.
TAG_BACKEND_JOB = "rcpforge.backend_job"
# Tune runs (role tune) only: the Optuna study and trial number the run belongs to.
TAG_TUNE_STUDY = "rcpforge.tune.study"
TAG_TUNE_TRIAL = "rcpforge.tune.trial"
# The RCPs' benchmark: a run's campaign's `rcp.benchmark` as it was when the run was made,
# or the submission_benchmark an imported result file names. With TAG_SUBMISSION_RUNS (the
# campaign's `rcp.submission_runs`, N), a campaign opened by name from its store is analysed
# as its file said (`rcpforge.load(tracking_uri=, campaign=)`); neither enters the run key.
TAG_BENCHMARK = "rcpforge.benchmark"
TAG_SUBMISSION_RUNS = "rcpforge.submission_runs"
# The recipe the campaign's factors compare with (an adaptive campaign's may be other than bf16).
TAG_REFERENCE = "rcpforge.reference"

METRIC_TOKENS_TO_TARGET = "tokens_to_target"
METRIC_SAMPLES_TO_TARGET = "samples_to_target"
METRIC_TOKENS_TRAINED = "tokens_trained"
METRIC_WALL_S = "run_wall_s"
# The attempt's compute beside its wall time: GPU-hours when its ranks hold GPUs, else
# CPU core-hours (wall time x processes).
METRIC_GPU_HOURS = "gpu_hours"
METRIC_CORE_HOURS = "core_hours"
# Where a Slurm run's cost metric came from once its job ended: `sacct <job>: AllocTRES ...
# x ElapsedRaw ... s` (orchestrator/billing.py); absent where the worker's asked figure stands.
TAG_BILLED = "rcpforge.billed"
# When the run's current attempt started (UTC, ISO 8601): on a cluster backend, whose
# queue holds submitted runs, the MLflow start time is the submission, this the start.
TAG_ATTEMPT_STARTED = "rcpforge.attempt_started"
# MLPerf's time to train: run_start to run_stop of the run's MLLOG, in seconds.
METRIC_TIME_TO_TRAIN = "time_to_train_s"
# MLPerf disclosure keys a run's MLLOG holds (lowest_numerical_precision_in_linear, ...):
# one tag each, `rcpforge.mllog.<key>`.
TAG_DISCLOSED = "rcpforge.mllog."
# The run's per-layer precision map (its MLLOG's `rcpforge_precision_map`) as compact
# JSON; left out where it is longer than a tag may be (the map stays in result.txt).
TAG_PRECISION_MAP = "rcpforge.precision_map"
MAX_TAG_CHARS = 8000  # MLflow's limit on a tag's value
# Something about a run worth a look that does not change its outcome (a disclosed
# precision that contradicts its recipe's).
TAG_WARNING = "rcpforge.warning"
# The ranks of the run's gang (its world size).
TAG_WORLD_SIZE = "rcpforge.world_size"
# Where an imported run stands in a published round (`rcpforge import` of a round's root,
# `<submitter>/results/<system>/<benchmark>/`): its results directory (the submission),
# and what the directory's place and `systems/<system>.json` say (falling back to the
# MLLOG `submission_*` lines where there is no system file).
TAG_RESULTS_DIR = "rcpforge.results_dir"
TAG_SUBMITTER = "rcpforge.submitter"
TAG_SYSTEM = "rcpforge.system"
TAG_DIVISION = "rcpforge.division"
TAG_FRAMEWORK = "rcpforge.framework"
TAG_ACCELERATOR = "rcpforge.accelerator"
TAG_ACCELERATORS_PER_NODE = "rcpforge.accelerators_per_node"
TAG_NODES = "rcpforge.nodes"
