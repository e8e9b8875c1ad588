"""The per-layer precision maps of a campaign's runs in its report: per recipe, a table of
layer x GEMM (fprop, dgrad, wgrad) -> the format it ran in, read from each run's tag
`rcpforge.precision_map` (the map its MLLOG header carries), with the MLPerf disclosure
keys the run derived from it."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from rcpforge.analysis.load import StoreReader
from rcpforge.analysis.report import Section
from rcpforge.trainers.contract.schema import TAG_DISCLOSED, TAG_PRECISION_MAP

_KEYS = ("linear", "attn", "comm")


def load_layer_maps(tracking_uri: str, runs: pa.Table) -> dict[tuple[str, int], dict[str, Any]]:
    """(recipe, batch size) -> the map of its first run that has one, with that run's
    disclosed precisions under `disclosed` (a map depends on the recipe, the model and,
    through the schedule's switch step, the batch size: one run per cell tells it)."""
    store = StoreReader(tracking_uri)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for row in runs.select(["run_id", "recipe", "batch_size"]).to_pylist():
        cell = (row["recipe"], int(row["batch_size"]))
        if cell in out:
            continue
        tags = store.tags(row["run_id"])
        if TAG_PRECISION_MAP not in tags:
            continue
        found = json.loads(tags[TAG_PRECISION_MAP])
        found["disclosed"] = {k: tags.get(f"{TAG_DISCLOSED}lowest_numerical_precision_in_{k}") for k in _KEYS}
        out[cell] = found
    return out


def _rows(pmap: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    gemms = list(pmap["gemms"])
    rows = []
    for i, phase in enumerate(pmap["phases"]):
        layers = phase["layers"]
        start = phase["from_tokens"]
        formats = {tuple(v) for v in layers.values()}
        if i and len(formats) == 1:  # after a switch: every GEMM alike (BF16), one row
            same = next(iter(formats))
            rows.append({"layer": f"every layer from {start:,} tokens on", **dict(zip(gemms, same, strict=True))})
            continue
        prefix = f"from {start:,} tokens: " if i else ""
        rows += [{"layer": prefix + name, **dict(zip(gemms, v, strict=True))} for name, v in layers.items()]
    return ["layer", *gemms], rows


def layer_map_sections(maps: dict[tuple[str, int], dict[str, Any]]) -> list[Section]:
    """One section per recipe (per distinct map of a recipe where batch sizes differ)."""
    by_recipe: dict[str, dict[str, tuple[dict[str, Any], list[int]]]] = {}
    for (recipe, bs), pmap in sorted(maps.items()):
        body = {k: v for k, v in pmap.items() if k != "disclosed"}
        key = json.dumps(body, sort_keys=True)
        entry = by_recipe.setdefault(recipe, {}).setdefault(key, (pmap, []))
        entry[1].append(bs)
    sections = []
    for recipe, distinct in by_recipe.items():
        for n, (pmap, sizes) in enumerate(distinct.values()):
            columns, rows = _rows(pmap)
            where = f" (batch size {', '.join(map(str, sizes))})" if len(distinct) > 1 else ""
            disclosed = ", ".join(f"{k} {v}" for k, v in pmap.get("disclosed", {}).items() if v)
            comm = ", ".join(f"{k} in {v}" for k, v in pmap.get("comm", {}).items())
            text = (f"Which GEMM of each layer ran in which format ('a x b': the gradient in a times the other "
                    f"operand in b){'; ' + comm if comm else ''}."
                    + (f" MLPerf disclosure (lowest numerical precision): {disclosed}." if disclosed else ""))
            key = f"precision-map-{recipe}" + (f"-{n}" if n else "")
            sections.append(Section(key, f"Precision map: {recipe}{where}", text=text, columns=columns, rows=rows))
    return sections
