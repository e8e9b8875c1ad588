"""What `rcpforge run` shows while it works: on a terminal, a live bar per (recipe, batch
size) with its outcome counts and tokens trained; elsewhere (CI, Slurm logs) one plain
line per finished run."""

from __future__ import annotations

from collections import Counter, defaultdict

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rcpforge.orchestrator.adaptive import AdaptiveState, interval_text
from rcpforge.orchestrator.failfast import reason_line
from rcpforge.orchestrator.ledger import Plan
from rcpforge.trainers.contract import ErrorKind, RunResult, RunSpec, RunStatus

Cell = tuple[str, int]


def describe(result: RunResult) -> str:
    """The result in words, as rich markup: the error is escaped (a library's message may
    hold [brackets], gloo's a source path)."""
    last = (result.error or "").strip().splitlines()[-1:]
    if result.status is RunStatus.failed:
        if result.error_kind is ErrorKind.configuration:  # the campaign's closing line says why, once
            return "failed: a configuration error; the campaign stops (why: the last line)"
        # a program's crash: its own last line (the exception) with rcpforge's reason
        return f"failed: {escape(reason_line(result.error))}"
    if result.status is RunStatus.converged:
        said = f"converged at {result.tokens_to_target:,} tokens ({result.wall_s:.1f}s)"
    else:
        said = f"{result.status.value} after {result.tokens_trained:,} tokens ({result.wall_s:.1f}s)"
    # an outcome's note (why it stopped, unreadable lines, a contradicted precision)
    return f"{said}; {escape(last[0])}" if last else said


def _tokens(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


class RunProgress:
    def __init__(self, console: Console):
        self.console = console
        self.live = console.is_terminal
        self.progress: Progress | None = None
        self.tasks: dict[Cell, TaskID] = {}
        self.counts: dict[Cell, Counter] = defaultdict(Counter)
        self.tokens: Counter = Counter()
        self.cell_total: Counter = Counter()
        self.finished = 0
        self.total = 0
        self.looks_shown = 0
        self.looked_once = False

    def on_plan(self, plan: Plan) -> None:
        self.total = len(plan.launch) + len(plan.elsewhere)
        live = f", {len(plan.elsewhere)} still running on the cluster" if plan.elsewhere else ""
        self.console.print(
            f"{len(plan.specs)} runs in the campaign: {plan.done} have an outcome, "
            f"{len(plan.gave_up)} failed with no attempts left, {len(plan.launch)} to launch{live}"
        )
        if not (self.live and self.total):
            return
        self.progress = Progress(
            TextColumn("{task.description:<28}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=self.console,
        )
        per_cell = Counter(_cell(s) for s in plan.launch)
        self.cell_total.update(per_cell)
        for cell, n in sorted(per_cell.items()):
            self.tasks[cell] = self.progress.add_task(f"{cell[0]} bs{cell[1]}", total=n, counts="")
        self.progress.start()

    def on_look(self, looked: AdaptiveState, plan: Plan) -> None:
        """An adaptive campaign's looks since the last call, one line per comparison, and
        the runs the next look waits for."""
        latest = max((e.look for e in looked.looks), default=0)
        for entry in looked.looks:
            if entry.look <= self.looks_shown:
                continue
            stop = looked.stops.get((entry.candidate, entry.batch_size))
            after = f"stop: {stop.reason}: {stop.detail}" if stop and stop.look == entry.look else "goes on"
            self.console.print(f"look {entry.look}: {entry.candidate} bs{entry.batch_size} "
                               f"({entry.interval.runs_candidate} vs {entry.interval.runs_reference} runs): factor "
                               f"{interval_text(entry.interval)}; {after}", highlight=False, markup=False)
        waiting = len(plan.launch) + len(plan.elsewhere)
        if self.looked_once:  # the first look's runs are in on_plan's count
            self.total += waiting
            per_cell = Counter(_cell(s) for s in plan.launch)
            self.cell_total.update(per_cell)
            for cell, n in sorted(per_cell.items()):
                if self.progress is not None and cell not in self.tasks:
                    self.tasks[cell] = self.progress.add_task(f"{cell[0]} bs{cell[1]}", total=n, counts="")
                self._update(cell)
        self.looked_once = True
        self.looks_shown = latest
        if looked.finished:
            self.console.print(f"adaptive: every cell has stopped, after {latest} looks and "
                               f"{sum(looked.seeds.values())} runs")
        elif waiting:
            self.console.print(f"adaptive: look {latest + 1} waits for {waiting} more runs")

    def notice(self, line: str) -> None:
        """A line from the backend (a controller that said "not now")."""
        self.console.print(line, highlight=False, markup=False)

    def on_event(self, kind: str, spec: RunSpec, result: RunResult | None) -> None:
        if kind == "start" or result is None:
            return  # queued, not yet running: only completions are worth a line
        cell = _cell(spec)
        if kind == "retry":  # a failed attempt is launched again: one more run to wait for
            self.total += 1
            self.cell_total[cell] += 1
            self._update(cell)
            self.console.print(f"retry  {spec.run_name}")
            return
        self.finished += 1
        self.counts[cell][result.status.value] += 1
        self.tokens[cell] += result.tokens_trained
        self._update(cell)
        if not self.live:
            self.console.print(f"[{self.finished}/{self.total}] {spec.run_name}: {describe(result)}")
        elif result.status is not RunStatus.converged:
            self.console.print(f"{spec.run_name}: {describe(result)}")

    def _update(self, cell: Cell) -> None:
        if self.progress is None or cell not in self.tasks:
            return
        task = self.tasks[cell]
        c = self.counts[cell]
        counts = (
            f"conv {c['converged']}  not {c['not_converged']}  div {c['diverged']}  fail {c['failed']}"
            f"  {_tokens(self.tokens[cell])} tokens"
        )
        self.progress.update(task, completed=sum(c.values()), total=self.cell_total[cell], counts=counts)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _cell(spec: RunSpec) -> tuple[str, int]:
    """A run's progress bar: its recipe (model/recipe on a model axis) and batch size."""
    return (f"{spec.model}/{spec.recipe}" if spec.model else spec.recipe), spec.batch_size
