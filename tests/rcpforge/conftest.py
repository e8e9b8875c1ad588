"""A small finished campaign for the API's tests: two recipes at two batch sizes on the
instant command trainer (tests/helpers/factor_program.py: fp8_like needs 25% more
samples than bf16), run once by the real command line, then analysed and exported by it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers.adaptive_campaigns import factor_program
from tests.helpers.campaigns import write_campaign

SEEDS = 4


def demo_campaign() -> dict:
    """The campaign docs/analysts.md reads: `demo`, bf16 and fp8_like, four seeds a cell."""
    return {
        "name": "demo",
        **factor_program(),
        "recipes": [{"bf16": {"slowdown": 1.0}}, {"fp8_like": {"slowdown": 1.25}}],
        "batch_sizes": [16, 64],
        "seeds": SEEDS,
        "hparams": {16: {"lr": 0.01}, 64: {"lr": 0.02}},
        "backend": {"kind": "local", "workers": 2},
        "rcp": {"benchmark": "rcpforge_demo", "submission_runs": 3},
    }


@dataclass(frozen=True)
class Demo:
    folder: Path  # the campaign file, its store, and what the command line wrote (below)
    campaign_file: Path

    @property
    def analysis(self) -> Path:
        """What `rcpforge analyze` wrote."""
        return self.folder / "analysis"

    @property
    def runs_file(self) -> Path:
        """What `rcpforge export --parquet` wrote."""
        return self.folder / "runs.parquet"

    @property
    def results(self) -> Path:
        """What `rcpforge export --results` wrote: <recipe>/bs<N>/result_<i>.txt."""
        return self.folder / "results"


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Demo:
    folder = tmp_path_factory.mktemp("demo")
    path = write_campaign(folder, demo_campaign())
    ran = run_cli("run", str(path))
    assert ran.returncode == 0, ran.stderr
    demo = Demo(folder, path)
    for args in (("analyze", "--out", demo.analysis),
                 ("export", "--parquet", demo.runs_file, "--results", demo.results)):
        done = run_cli(args[0], str(path), *map(str, args[1:]))
        assert done.returncode == 0, done.stderr
    return demo
