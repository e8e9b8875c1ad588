# Everything a fresh machine needs: `make demo` and `make test` each build .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DEMO := sweeps/examples/quickstart.yaml

.PHONY: install demo test clean mlflow-server mlflow-server-down

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: 2.13.0 is a local CPU wheel here; anything else pulls a CUDA build of several GB
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/rcpforge run $(DEMO)
	$(BIN)/rcpforge analyze $(DEMO) --out demo-out

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=15

clean:
	rm -rf $(VENV) demo-out sweeps/examples/rcpforge-mlflow.db sweeps/examples/mlartifacts sweeps/examples/.rcpforge

# A private PostgreSQL cluster + MLflow tracking server on 127.0.0.1 (cluster/dev/mlflow_server.sh).
mlflow-server: $(STAMP)
	PYTHON=$(abspath $(BIN))/python cluster/dev/mlflow_server.sh start

mlflow-server-down:
	PYTHON=$(abspath $(BIN))/python cluster/dev/mlflow_server.sh stop
