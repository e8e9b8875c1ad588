"""A campaign's runs in its tracking store, as a handle (`Campaign`) whose methods give the
runs table and what `rcpforge analyze` computes from it: the RCP table, the convergence
factors, the selection risk, and on a model axis the factor against model size.
`rcpforge analyze` calls the same methods, so a notebook and the command line get the
same numbers. On a model axis (docs/models.md) each model is analysed apart, as the
command line does (`model=`).

Heavy libraries (pandas, MLflow, SQLAlchemy) are imported inside the methods: importing
rcpforge stays cheap and torch-free."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcpforge.errors import RcpforgeError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rcpforge.analysis.analyze import AnalysisRequest, AnalysisResult
    from rcpforge.sweeps.spec import Campaign as CampaignSpec

DEFAULT_REFERENCE = "bf16"  # the analysis' reference recipe where the campaign file names none


@dataclass(frozen=True)
class Model:
    """One model of a campaign's model axis, as its analysis sees it."""

    name: str
    benchmark: str  # its RCPs' benchmark: `<benchmark>_<model>`
    hparams: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # its RCP records' Hyperparams


@dataclass(frozen=True)
class Campaign:
    """One campaign (an MLflow experiment of rcpforge runs, or an imported round) and what
    its analysis needs: `rcpforge.load` opens it. Every method reads the store anew (a
    campaign still running gains runs), or analyses the `runs` table it is given."""

    name: str
    tracking_uri: str
    benchmark: str  # the RCPs' benchmark name
    submission_runs: int  # N, the runs of one submission: the RCP statistics' N
    recipes: tuple[str, ...]  # in the campaign file's order (sorted, for a store without one)
    reference: str = DEFAULT_REFERENCE  # the recipe the factors compare with, unless told
    hparams: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # batch size -> the RCP records' Hyperparams
    checker_runs: int | None = None  # the MLCommons checker's N for the benchmark; None where it knows none
    # An adaptive campaign's looks and stops, read by `rcpforge analyze` from the ledger
    # (orchestrator/adaptive.py): analyze's factors.json and summary then say where each
    # cell stopped. None from `rcpforge.load`.
    adaptive: dict | None = None
    # The model axis (`models:`), in the campaign file's order; () without one.
    models: tuple[Model, ...] = ()

    def runs_arrow(self) -> pa.Table:
        """The runs table as a pyarrow Table, one row per run (the schema of
        `rcpforge.analysis.load.RUN_SCHEMA`: run_id, run_key, recipe, batch_size, seed, status,
        tokens_to_target, samples_to_target, tokens_trained, wall_s, error, hparams, and the
        model axis' model, model_params, model_flops_per_token: docs/models.md, and
        accelerator: the GPUs a run ran on, null for a CPU run; config_key: its run key
        without the seed), sorted by
        model, recipe, batch size, seed: what `rcpforge export --parquet` writes."""
        from rcpforge.analysis.load_sql import load_campaign_runs

        return load_campaign_runs(self.tracking_uri, self.name)

    def runs(self) -> pd.DataFrame:
        """The runs table as a pandas DataFrame (`runs_arrow()`, hparams as dicts)."""
        return self.runs_arrow().to_pandas(maps_as_pydicts="strict")

    def curves_arrow(self, metric: str | None = None) -> pa.Table:
        """Every eval point of every run as a pyarrow Table, a row per point: run_id,
        run_name, run_key, model, recipe, batch_size, seed, metric, tokens, samples, value
        (`rcpforge.analysis.curves.CURVE_SCHEMA`), sorted by model, recipe, batch size,
        seed, run and tokens. `metric`: the metric to read (any the runs logged at their
        eval points); None, the campaign's target metric. `tokens` is MLflow's step;
        `samples` the samples the run logged at that step (an imported run's points step
        by samples: tokens null). Read in bulk: one query of a SQL store, a request per 100
        runs of a tracking server."""
        from rcpforge.analysis.curves import load_curves

        return load_curves(self.tracking_uri, self.name, None if metric is None else [metric])

    def curves(self, metric: str | None = None) -> pd.DataFrame:
        """`curves_arrow(metric)` as a pandas DataFrame."""
        return self.curves_arrow(metric).to_pandas()

    def rcp_table(self, runs: pa.Table | None = None, *, model: str | None = None) -> pd.DataFrame:
        """The RCP table, one row per (recipe, batch size): runs, converged, not_converged,
        diverged, pending_or_failed, olympic_mean, stdev, min_acceptable_mean,
        max_speedup (samples to converge, as the MLCommons checker computes them), is_rcp,
        degenerate, note: `rcpforge analyze`'s rcp_table.parquet. On a model axis, the
        table of `model` (required where the campaign has more than one), under its
        benchmark: `<out>/<model>/rcp_table.parquet`."""
        from rcpforge.analysis.rcp_table import rcp_table

        chosen = self._model(model)
        benchmark = self.benchmark if chosen is None else chosen.benchmark
        return rcp_table(self._runs(runs, chosen), benchmark, self.submission_runs).to_pandas()

    def factors(self, reference: str | None = None, *, confidence: float = 0.95, resamples: int = 10_000,
                seed: int = 0, runs: pa.Table | None = None, model: str | None = None) -> pd.DataFrame:
        """The convergence factors against `reference` (default: the campaign's): one row
        per (candidate recipe, batch size) the reference also ran, with factor (the
        candidate's olympic mean over the reference's), ci_low and ci_high (a stratified
        bootstrap interval at `confidence`; None where unbounded, see ci_*_unbounded and
        reason), prob_candidate_faster, mann_whitney_p and verdict (slower, faster, not
        significant, undefined): `rcpforge analyze`'s factors.json "factors". On a model
        axis, `model`'s candidates against the reference recipe of the same model."""
        import pandas as pd

        from rcpforge.analysis.analyze import reference_factors
        from rcpforge.analysis.factors import Factor

        chosen = self._model(model)
        request = self.request(reference, seed=seed, resamples=resamples, confidence=confidence, model=chosen)
        found = reference_factors(self._runs(runs, chosen), request)
        return pd.DataFrame([asdict(f) for f in found], columns=[f.name for f in fields(Factor)])

    def selection_risk(self, reference: str | None = None, *, seed: int = 0, runs: pa.Table | None = None,
                       model: str | None = None) -> pd.DataFrame:
        """What selecting among runs is worth, per (recipe, batch size), tested against the
        reference recipe's RCP at that batch size: honest_* (the olympic mean of N honest
        runs: mean, stdev, quantiles, pass_prob), best_of_k and best_n_of_m (lists of
        dicts: pass probability, expected olympic mean, gain), runs_required and
        outlier_sets: `rcpforge analyze`'s selection.json "cells", `honest` spread out. On a
        model axis, `model`'s cells against the same model's reference RCPs."""
        import pandas as pd

        from rcpforge.analysis.analyze import cell_selections
        from rcpforge.analysis.rcp_table import rcp_table

        chosen = self._model(model)
        table_runs = self._runs(runs, chosen)
        request = self.request(reference, seed=seed, model=chosen)
        table = rcp_table(table_runs, request.benchmark, self.submission_runs)
        rows = []
        for cell in cell_selections(table_runs, table, request):
            row = asdict(cell)
            honest = row.pop("honest")
            rows.append({**row, **{f"honest_{k}": v for k, v in honest.items()}})
        return pd.DataFrame(rows)

    def analyze(self, out: str | Path, reference: str | None = None, *, seed: int = 0, resamples: int = 10_000,
                reference_rcps: dict | None = None, runs: pa.Table | None = None,
                model: str | None = None, pool_mixed: bool = False) -> AnalysisResult:
        """Write into folder `out` what `rcpforge analyze` writes (the RCP table as CSV and
        Parquet, RCP files per recipe and derived ones per candidate, factors.json,
        selection.json, summary.md); returns the RCP table (Arrow), the paths written and
        the notes. `reference_rcps`: MLCommons RCP records to derive the candidates' RCPs
        from instead of the campaign's reference-recipe RCPs. On a model axis, `model`'s
        analysis: what `rcpforge analyze` writes into `<out>/<model>/`. `pool_mixed`: an RCP
        record also for a cell whose runs are of more than one configuration (analysis/mixtures.py)."""
        from rcpforge.analysis.analyze import analyze_runs

        chosen = self._model(model)
        request = self.request(reference, seed=seed, resamples=resamples, reference_rcps=reference_rcps,
                               model=chosen, pool_mixed=pool_mixed)
        return analyze_runs(self._runs(runs, chosen), request, Path(out))

    def scale(self, reference: str | None = None, *, confidence: float = 0.95, resamples: int = 10_000,
              seed: int = 0, extrapolate_to: float | None = None, runs: pa.Table | None = None) -> dict:
        """The factor against model size (docs/scale.md) over all the runs' models: what
        `rcpforge analyze` writes as `scale.json`, a dict whose `trends` (one per candidate
        recipe and batch size: slope, slope_low, slope_high, verdict, ...) and `cells` (each
        model's factor) are lists of dicts (`pandas.DataFrame(result["trends"])`).
        `extrapolate_to`: a parameter count to predict each factor at, labelled an
        extrapolation. RcpforgeError where the runs hold fewer than two models."""
        from rcpforge.analysis.analyze import scale_of

        request = self.request(reference, seed=seed, resamples=resamples, confidence=confidence,
                               extrapolate_to=extrapolate_to)
        found = scale_of(self._runs(runs), request)
        if found is None:
            raise RcpforgeError(f"campaign {self.name}: a factor against model size needs runs of two or more "
                                "models; give the campaign a models: axis (docs/models.md) and run it")
        return found.as_json()

    def request(self, reference: str | None = None, *, seed: int = 0, model: Model | None = None,
                **settings: Any) -> AnalysisRequest:
        """The analysis of this campaign in the terms `rcpforge.analysis.analyze` takes (internal:
        the methods above and the command line build theirs here); narrowed to `model`
        where given (analysis/per_model.py, as `rcpforge analyze` does per model)."""
        from rcpforge.analysis.analyze import AnalysisRequest
        from rcpforge.analysis.per_model import model_request
        from rcpforge.analysis.selection import SelectionSettings

        request = AnalysisRequest(
            campaign=self.name, benchmark=self.benchmark, submission_runs=self.submission_runs,
            checker_runs=self.checker_runs, recipes=list(self.recipes), hparams=dict(self.hparams),
            reference=checked_reference(self.recipes, reference or self.reference), seed=seed,
            selection=SelectionSettings(seed=seed), adaptive=self.adaptive, **settings,
        )
        return request if model is None else model_request(request, model.benchmark, model.hparams, model.name)

    def _model(self, model: str | None) -> Model | None:
        """The model an analysis is of: None without the axis, the only one, or the one
        named (a model's RCPs and factors are its own, so models are never mixed)."""
        names = [m.name for m in self.models]
        if not self.models:
            if model is not None:
                raise RcpforgeError(f"model={model!r}: campaign {self.name} has no model axis (no models: "
                                    "section); leave model= out")
            return None
        if model is None and len(self.models) == 1:
            return self.models[0]
        if model is None:
            raise RcpforgeError(f"campaign {self.name} has {len(names)} models, each analysed apart: give "
                                f"model= one of {', '.join(names)}")
        if model not in names:
            raise RcpforgeError(f"model={model!r}: not one of the campaign's models; give one of {', '.join(names)}")
        return self.models[names.index(model)]

    def _runs(self, runs: pa.Table | None, model: Model | None = None) -> pa.Table:
        from rcpforge.analysis.per_model import model_runs

        table = self.runs_arrow() if runs is None else runs
        return table if model is None else model_runs(table, model.name)


def checked_reference(recipes: tuple[str, ...] | list[str], reference: str) -> str:
    """`reference`, where it is one of the campaign's recipes."""
    if reference not in recipes:
        raise RcpforgeError(f"--reference {reference!r}: not one of the campaign's recipes; "
                            f"give one of {', '.join(recipes)}")
    return reference


def load(campaign_file: str | Path | None = None, *, tracking_uri: str | None = None, campaign: str | None = None,
         benchmark: str | None = None, submission_runs: int | None = None) -> Campaign:
    """Open a campaign: from its campaign file (the store it names), or from a tracking
    store by campaign name (`tracking_uri=`, `campaign=`: also the campaign
    `rcpforge import` or `rcpforge round` made of results directories). Without a file,
    `benchmark` and `submission_runs` (and the reference recipe) are what the campaign's
    runs recorded when they were made, so the analysis is the campaign file's; where they
    recorded none (a store from before they did, imported result files), `benchmark`
    defaults to the one the imported result files name (else the campaign's name) and
    `submission_runs` to the checker's N for it (else half the smallest cell, at least
    3), and a warning says so, once. Given, they win: give them for a round of several
    benchmarks.
    Raises RcpforgeError for a campaign file that does not validate and for a store
    without the campaign (nothing is created in the store)."""
    if campaign_file is not None:
        if tracking_uri is not None or campaign is not None or benchmark is not None or submission_runs is not None:
            raise RcpforgeError("rcpforge.load: give a campaign file, or tracking_uri= and campaign= (with "
                                "benchmark= and submission_runs= if needed), not both")
        from rcpforge.sweeps.spec import CampaignError, load_campaign

        try:
            spec = load_campaign(campaign_file)
        except CampaignError as err:
            raise RcpforgeError(str(err)) from None
        require_in_store(spec.tracking_uri, spec.name,
                         f"run `rcpforge run {campaign_file}` first, or check tracking.uri")
        return from_spec(spec)
    if tracking_uri is None or campaign is None:
        raise RcpforgeError("rcpforge.load: give a campaign file, or tracking_uri= and campaign=")
    require_in_store(tracking_uri, campaign, "check tracking_uri= and campaign= (`rcpforge import` makes a "
                                             "campaign of results directories)")
    return _from_store(tracking_uri, campaign, benchmark, submission_runs)


def require_in_store(tracking_uri: str, campaign: str, then: str) -> None:
    """RcpforgeError, `then` saying what to do, where the store does not exist yet or holds
    no experiment of the campaign; asked without making either (MLflow would make the
    SQLite file, a database's tables, a server's experiment; and a mistyped store would
    then read as a campaign whose runs are lost)."""
    from rcpforge.analysis.load_sql import campaign_in_store
    from rcpforge.trainers.contract.redact import redact_uri
    from rcpforge.trainers.contract.uri import absent_sqlite_store

    if (db := absent_sqlite_store(tracking_uri)) is not None:
        raise RcpforgeError(f"no runs of campaign {campaign} at {db} (no such store yet): {then}")
    if not campaign_in_store(tracking_uri, campaign):
        raise RcpforgeError(f"no runs of campaign {campaign} at {redact_uri(tracking_uri)}: {then}")


def from_spec(spec: CampaignSpec, adaptive: dict | None = None) -> Campaign:
    """The handle of a validated campaign file (`rcpforge.sweeps.spec.Campaign`)."""
    return Campaign(
        name=spec.name, tracking_uri=spec.tracking_uri, benchmark=spec.benchmark,
        submission_runs=spec.submission_runs, recipes=tuple(r.name for r in spec.recipes),
        reference=spec.reference, hparams=spec.hparams, checker_runs=spec.checker_runs, adaptive=adaptive,
        models=tuple(Model(m.name, spec.benchmark_of(m.name), m.hparams or {}) for m in spec.models or []),
    )


def _from_store(tracking_uri: str, name: str, benchmark: str | None, submission_runs: int | None) -> Campaign:
    from collections import Counter

    from rcpforge.analysis.load_sql import load_campaign_runs
    from rcpforge.trainers.contract.submission import SUBMISSION_RUNS, model_benchmark, name_as_benchmark

    runs = load_campaign_runs(tracking_uri, name)
    cells = Counter(zip(runs["model"].to_pylist(), runs["recipe"].to_pylist(), runs["batch_size"].to_pylist(),
                        strict=True))
    recipes = tuple(sorted({recipe for _, recipe, _ in cells if recipe is not None}))
    models = sorted({model for model, _, _ in cells if model})  # runs of a model axis name their model
    recorded = _recorded(tracking_uri, name)
    defaults = []  # what neither the caller nor the runs said, as the note names it
    if benchmark is None and (benchmark := recorded["benchmark"]) is None:
        benchmark = name_as_benchmark(name)
        defaults.append(f"benchmark={benchmark!r} (the campaign's name)")
    checker_runs = SUBMISSION_RUNS.get(benchmark)
    n = submission_runs or (int(recorded["submission_runs"]) if recorded["submission_runs"] else None)
    if n is None:  # the campaign file's rule (sweeps/spec.py): the checker's N, else half the smallest cell
        n = checker_runs or max(3, min(cells.values(), default=0) // 2)
        defaults.append(f"submission_runs={n} ("
                        + (f"the MLCommons checker's for {benchmark})" if checker_runs else "half the smallest cell)"))
    if defaults:
        import warnings

        warnings.warn(f"campaign {name}: its runs record no rcp settings (a store from before rcpforge recorded "
                      f"them, or imported result files), so rcpforge.load used {' and '.join(defaults)}; give "
                      "benchmark= and submission_runs= where you know better", UserWarning, stacklevel=3)
    return Campaign(name=name, tracking_uri=tracking_uri, benchmark=benchmark, submission_runs=n,
                    recipes=recipes, checker_runs=checker_runs, reference=recorded["reference"] or DEFAULT_REFERENCE,
                    models=tuple(Model(m, model_benchmark(benchmark, m)) for m in models))


def _recorded(tracking_uri: str, campaign: str) -> dict[str, str | None]:
    """What the campaign's runs record of its analysis (`rcpforge.orchestrator.tracking.records.campaign_tags`:
    the campaign file's benchmark, N and reference recipe as it ran; an imported run, the
    benchmark its result file names); where runs disagree (a file edited between runs),
    what most of them say. None where no run records it."""
    from rcpforge.analysis.load_sql import campaign_tag_values
    from rcpforge.trainers.contract.schema import TAG_BENCHMARK, TAG_REFERENCE, TAG_SUBMISSION_RUNS

    tags = {"benchmark": TAG_BENCHMARK, "submission_runs": TAG_SUBMISSION_RUNS, "reference": TAG_REFERENCE}
    found = campaign_tag_values(tracking_uri, campaign, tuple(tags.values()))
    return {field: (found[tag].most_common(1)[0][0] if found[tag] else None) for field, tag in tags.items()}
