"""Trace rows grouped by model, layout and pass shape, each group priced by one vectorised cost call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specsim.calibrate.traces.common import DEFAULT_DRAFTER, drafter_cached, model_cached, optional_column, where_of
from specsim.calibrate.traces.io import validate_trace
from specsim.catalog.hardware import HardwareSpec
from specsim.catalog.models import ModelSpec
from specsim.cost.forward import draft_cost, pass_cost
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import step_cost
from specsim.errors import SpecError


@dataclass
class Group:
    """Rows that share a model, layout and pass shape: priced by one vectorised cost call."""

    kind: str  # kernel | engine
    op: str
    model: ModelSpec
    layout: ParallelLayout
    q: int  # q_per_seq (kernel) or k (engine)
    drafter: Any
    idx: np.ndarray
    n: np.ndarray
    ctx_total: np.ndarray

    def predict(self, hw: HardwareSpec) -> np.ndarray:
        if self.kind == "engine":
            cost = step_cost(self.model, self.drafter, hw, self.layout, self.n, self.q)
        elif self.op == "draft":
            cost = draft_cost(self.drafter, hw, self.layout, self.n)
        elif self.op == "prefill":
            cost = pass_cost(self.model, hw, self.layout, self.n, self.q, 1)
        else:  # decode (q=1) and verify (q=k+1): every new token needs logits
            cost = pass_cost(self.model, hw, self.layout, self.n, self.q, self.q)
        return np.asarray(cost.time_s(self.ctx_total), dtype=float) * np.ones(len(self.idx))



def kernel_groups(
    df: pd.DataFrame,
    offset: int,
    hw: HardwareSpec,
    drafter_kind: str | None,
    models: dict,
    drafters: dict,
    notes: list[str],
) -> tuple[list[Group], pd.DataFrame]:
    where = where_of(df, "<kernel trace>")
    df = validate_trace(df, "kernel", where) if df.attrs.get("kind") != "kernel" else df
    hwcol = optional_column(df, "hardware", "")
    for v in hwcol:
        if v and str(v).lower() != hw.name.lower():
            raise SpecError("hardware", v, f"'{hw.name}' (the profile being calibrated) or empty", where)
    wdt = optional_column(df, "weight_dtype", "bf16")
    kvdt = optional_column(df, "kv_dtype", "bf16")
    dk = optional_column(df, "drafter", drafter_kind or DEFAULT_DRAFTER)
    if (df["op"] == "draft").any() and drafter_kind is None and "drafter" not in df.columns:
        notes.append(f"{where}: op=draft rows priced as an {DEFAULT_DRAFTER} drafter (no drafter column)")
    keys = list(
        zip(
            df["model"],
            df["tp"],
            df["ep"],
            df["pp"],
            wdt,
            kvdt,
            df["op"],
            df["q_per_seq"],
            np.where(df["op"] == "draft", dk, ""),
        )
    )
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out = []
    for (mname, tp, ep, pp, w, kv, op, q, dkind), rows in groups.items():
        rows = np.asarray(rows)
        try:
            layout = ParallelLayout(tp=int(tp), ep=int(ep), pp=int(pp), weight_dtype=str(w), kv_dtype=str(kv))
        except SpecError as exc:
            raise SpecError(exc.field, exc.value, exc.allowed, where) from None
        model = model_cached(models, str(mname), where)
        _check_layout(layout, model, df, rows, where)
        drafter = None
        if op == "draft":
            drafter = drafter_cached(drafters, str(dkind), model, where)
            if drafter.model is None:
                raise SpecError("drafter", dkind, "a drafter with a GPU pass for op=draft rows (not ngram)", where)
        n = df["batch"].to_numpy(dtype=float)[rows]
        ctx = df["ctx_per_seq"].to_numpy(dtype=float)[rows] * n
        out.append(Group("kernel", str(op), model, layout, int(q), drafter, rows + offset, n, ctx))
    table = pd.DataFrame(
        {
            "source": where,
            "kind": "kernel",
            "row": np.arange(len(df)),
            "op": df["op"].to_numpy(),
            "model": df["model"].to_numpy(),
            "tp": df["tp"].to_numpy(),
            "batch": df["batch"].to_numpy(),
            "q_per_seq": df["q_per_seq"].to_numpy(),
            "k": np.nan,
            "ctx_per_seq": df["ctx_per_seq"].to_numpy(dtype=float),
            "measured_s": df["time_s"].to_numpy(dtype=float),
        }
    )
    return out, table


def engine_groups(
    df: pd.DataFrame,
    offset: int,
    model_name: str | None,
    drafter_kind: str | None,
    models: dict,
    drafters: dict,
    notes: list[str],
) -> tuple[list[Group], pd.DataFrame]:
    where = where_of(df, "<engine trace>")
    df = validate_trace(df, "engine", where) if df.attrs.get("kind") != "engine" else df
    mcol = optional_column(df, "model", model_name)
    if any(m is None for m in mcol):
        raise SpecError(
            "model",
            None,
            "a catalog model name: the engine trace has no model column, pass model_name (--model)",
            where,
        )
    tpcol = optional_column(df, "tp", 1)
    dk = optional_column(df, "drafter", drafter_kind)
    if (df["k"] > 0).any() and drafter_kind is None and any(d is None for d, k in zip(dk, df["k"]) if k > 0):
        notes.append(
            f"{where}: speculative steps priced with an {DEFAULT_DRAFTER} drafter (no drafter column or --drafter)"
        )
    dk = np.array([d if d is not None else DEFAULT_DRAFTER for d in dk], dtype=object)
    keys = list(zip(mcol, tpcol, df["k"], np.where(df["k"] > 0, dk, "")))
    groups: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out = []
    for (mname, tp, k, dkind), rows in groups.items():
        rows = np.asarray(rows)
        try:
            layout = ParallelLayout(tp=int(tp))
        except SpecError as exc:
            raise SpecError(exc.field, exc.value, exc.allowed, where) from None
        model = model_cached(models, str(mname), where)
        _check_layout(layout, model, df, rows, where)
        drafter = drafter_cached(drafters, str(dkind), model, where) if k > 0 else None
        n = df["active_batch"].to_numpy(dtype=float)[rows]
        ctx = df["total_context_tokens"].to_numpy(dtype=float)[rows]
        out.append(Group("engine", "step", model, layout, int(k), drafter, rows + offset, n, ctx))
    n = df["active_batch"].to_numpy(dtype=float)
    table = pd.DataFrame(
        {
            "source": where,
            "kind": "engine",
            "row": np.arange(len(df)),
            "op": "step",
            "model": mcol.astype(str),
            "tp": np.asarray(tpcol, dtype=int),
            "batch": df["active_batch"].to_numpy(),
            "q_per_seq": np.where(df["k"] > 0, df["k"] + 1, 1),
            "k": df["k"].to_numpy(dtype=float),
            "ctx_per_seq": df["total_context_tokens"].to_numpy(dtype=float) / n,
            "measured_s": df["step_s"].to_numpy(dtype=float),
        }
    )
    return out, table


def _check_layout(layout: ParallelLayout, model: ModelSpec, df: pd.DataFrame, rows: np.ndarray, where: str) -> None:
    """A trace row's layout must exist for its model (e.g. tp divides the attention heads)."""
    try:
        layout.check_fits_model(model, "trace")
    except SpecError as exc:
        line = f"row {int(rows[0]) + 1}" + (f" (and {len(rows) - 1} more)" if len(rows) > 1 else "")
        raise SpecError(exc.field.replace("trace.", ""), exc.value, f"{exc.allowed} ({line})", where) from None
