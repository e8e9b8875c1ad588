"""What `rcpforge run` shows while it works: a progress bar on a terminal, one plain
line per event elsewhere (CI, Slurm logs)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from orchestrator.campaign import Plan
from trainers.contract import RunResult, RunSpec, RunStatus


def describe(result: RunResult) -> str:
    if result.status is RunStatus.converged:
        return f"converged at {result.tokens_to_target:,} tokens ({result.wall_s:.1f}s)"
    if result.status is RunStatus.failed:
        last = (result.error or "").strip().splitlines()[-1:] or ["unknown error"]
        return f"failed: {last[0]}"
    return f"{result.status.value} after {result.tokens_trained:,} tokens ({result.wall_s:.1f}s)"


class RunProgress:
    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self.progress: Progress | None = None
        self.task = None
        self.finished = 0
        self.total = 0
        self.start = time.monotonic()

    def on_plan(self, plan: Plan) -> None:
        self.total = len(plan.launch) + len(plan.elsewhere)
        live = f", {len(plan.elsewhere)} still running on the cluster" if plan.elsewhere else ""
        self.console.print(
            f"{len(plan.specs)} runs in the campaign: {plan.done} have an outcome, "
            f"{len(plan.gave_up)} failed with no attempts left, {len(plan.launch)} to launch{live}"
        )
        if self.live and self.total:
            self.progress = Progress(
                TextColumn("[bold]runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("eta"), TimeRemainingColumn(), console=self.console,
            )
            self.task = self.progress.add_task("runs", total=self.total)
            self.progress.start()

    def on_event(self, kind: str, spec: RunSpec, result: RunResult | None) -> None:
        if kind == "start":
            return  # queued, not yet running: only completions are worth a line
        assert result is not None
        if kind == "end":
            self.finished += 1
            self.console.print(f"[{self.finished}/{self.total}] {spec.run_name}: {describe(result)}")
        else:  # a failed attempt is launched again: one more run to wait for
            self.total += 1
            self.console.print(f"retry  {spec.run_name}")
        if self.progress is not None:
            self.progress.update(self.task, completed=self.finished, total=self.total)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
