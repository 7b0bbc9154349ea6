"""Orchestration and reporting: :func:`calibrate` reads traces, runs each fit, summarises."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from specsim.calibrate.traces.acceptance_fit import detect_cap, fit_acceptance, fit_lengths
from specsim.calibrate.traces.common import where_of
from specsim.calibrate.traces.hardware_fit import HardwareFit, fit_hardware
from specsim.calibrate.traces.io import read_trace
from specsim.calibrate.traces.profile import write_calibrated_profile
from specsim.catalog.hardware import HardwareSpec, load_hardware
from specsim.errors import SpecError


@dataclass
class CalibrationReport:
    """What `specsim calibrate traces` did: per-kind fits, the traces used, and where it wrote the profile.

    hardware_fit: one joint fit over every kernel and engine trace. acceptance and lengths: one
    fit per trace file (each is one run / drafter / workload), keyed by file name.
    """

    hardware: str
    traces: list[dict]
    hardware_fit: HardwareFit | None = None
    hardware_status: str = ""
    acceptance: dict = field(default_factory=dict)
    acceptance_status: str = ""
    lengths: dict = field(default_factory=dict)
    stages: pd.DataFrame | None = None
    out: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_rows(self) -> list[dict]:
        """One row per parameter: parameter, unit, prior, fitted (None when not fitted), status."""
        rows: list[dict] = []
        if self.hardware_fit is not None:
            rows += self.hardware_fit.to_rows()
        else:
            rows.append(
                {
                    "parameter": "efficiency.*",
                    "unit": "",
                    "prior": None,
                    "fitted": None,
                    "status": f"not fitted ({self.hardware_status or 'no kernel or engine traces'})",
                }
            )
        for label, fit in self.acceptance.items():
            rows += fit.to_rows(f"acceptance[{label}]")
        if not self.acceptance and self.acceptance_status:
            rows.append(
                {
                    "parameter": "acceptance.alpha",
                    "unit": "",
                    "prior": None,
                    "fitted": None,
                    "status": f"not fitted ({self.acceptance_status})",
                }
            )
        for label, fit in self.lengths.items():
            for key, value in fit.params.items():
                if isinstance(value, (tuple, list)):
                    for i, v in enumerate(value):
                        rows.append(
                            {
                                "parameter": f"lengths[{label}].{key}[{i}]",
                                "unit": "",
                                "prior": None,
                                "fitted": float(v),
                                "status": f"fitted ({fit.kind}, n={fit.n}, KS={fit.ks_statistic:.3f})",
                            }
                        )
                else:
                    rows.append(
                        {
                            "parameter": f"lengths[{label}].{key}",
                            "unit": "tokens" if key.endswith("tokens") else "",
                            "prior": None,
                            "fitted": float(value),
                            "status": f"fitted ({fit.kind}, n={fit.n}, censored={fit.n_censored}, "
                            f"KS={fit.ks_statistic:.3f})",
                        }
                    )
        if self.stages is not None:
            for r in self.stages.itertuples(index=False):
                rows.append(
                    {
                        "parameter": f"stage[{r.mode}].{r.quantity}",
                        "unit": r.unit,
                        "prior": None,
                        "fitted": float(r.value),
                        "status": "measured (validation data, not a fit parameter)",
                    }
                )
        return rows

    def residual_stats(self) -> dict:
        out: dict = {}
        if self.hardware_fit is not None:
            out["hardware"] = self.hardware_fit.residual_summary()
        for label, fit in self.acceptance.items():
            out[f"acceptance[{label}]"] = {"rows": fit.n_rows, "rms_rel_tau_error": fit.rms_rel_tau_error}
        for label, fit in self.lengths.items():
            out[f"lengths[{label}]"] = {"n": fit.n, "ks_statistic": fit.ks_statistic, "ks_pvalue": fit.ks_pvalue}
        return out

    def summary(self) -> str:
        lines = [f"calibration of {self.hardware} from {len(self.traces)} trace(s):"]
        for t in self.traces:
            lines.append(f"  {t['kind']:7s} {t['rows']:6d} rows  {t['path']}")
        rows = self.to_rows()
        width = max([len(r["parameter"]) for r in rows] + [9])
        unit_w = max([len(r["unit"]) for r in rows] + [4])
        lines.append(f"  {'parameter':{width}s} {'prior':>10s} {'fitted':>10s} {'unit':{unit_w}s}  status")
        for r in rows:
            prior = "" if r["prior"] is None else f"{r['prior']:.6g}"
            fitted = "" if r["fitted"] is None else f"{r['fitted']:.6g}"
            lines.append(f"  {r['parameter']:{width}s} {prior:>10s} {fitted:>10s} {r['unit']:{unit_w}s}  {r['status']}")
        if self.hardware_fit is not None:
            s = self.hardware_fit.residual_summary()
            lines.append(
                f"  hardware fit: {s['rows']} rows, RMS rel. error {s['rms_rel_error'] * 100:.2f} % "
                f"(prior {s['prior_rms_rel_error'] * 100:.2f} %), max |rel. error| {s['max_abs_rel_error'] * 100:.2f} %"
            )
        for n in (
            self.notes
            + list(self.hardware_fit.notes if self.hardware_fit else [])
            + [n for fit in self.acceptance.values() for n in fit.notes]
        ):
            lines.append(f"  note: {n}")
        if self.out:
            lines.append(f"  wrote {self.out}")
        return "\n".join(lines)


def _stage_summary(dfs: list[pd.DataFrame]) -> pd.DataFrame:
    df = pd.concat(dfs, ignore_index=True)
    parts = ["generation_s", "reward_s", "logprob_s", "train_s", "weight_sync_s"]
    step = df["step_s"].astype(float) if "step_s" in df.columns else pd.Series(np.nan, index=df.index)
    step = step.where(step.notna(), df[parts].sum(axis=1))
    sd = (
        df["sd"].astype("boolean").fillna(False).to_numpy(dtype=bool) if "sd" in df.columns else np.zeros(len(df), bool)
    )
    rows = []
    for mode, m in (("ar", ~sd), ("sd", sd)):
        if not m.any():
            continue
        gen, st = df.loc[m, "generation_s"].astype(float), step[m]
        rows += [
            {"mode": mode, "quantity": "generation_s", "unit": "s", "value": float(gen.mean())},
            {"mode": mode, "quantity": "step_s", "unit": "s", "value": float(st.mean())},
            {"mode": mode, "quantity": "generation_share", "unit": "", "value": float((gen / st).mean())},
        ]
        if "tau" in df.columns and df.loc[m, "tau"].notna().any():
            rows.append(
                {
                    "mode": mode,
                    "quantity": "tau",
                    "unit": "tokens/verify",
                    "value": float(df.loc[m, "tau"].astype(float).mean()),
                }
            )
    return pd.DataFrame(rows)


def calibrate(
    paths: Sequence[str | Path],
    hardware: str | HardwareSpec,
    model: str | None = None,
    out: str | Path | None = None,
    *,
    drafter_kind: str | None = None,
    cap_tokens: int | None = None,
    date: str | None = None,
) -> CalibrationReport:
    """Read traces (kind sniffed per file), fit what each kind informs, optionally write a profile.

    kernel + engine traces -> hardware efficiencies (fit_hardware); engine traces with k > 0 ->
    acceptance (fit_acceptance); lengths traces -> a lognormal fit per file (cap: `cap_tokens`, or
    detected when the maximum length repeats); stage traces -> a measured summary (validation
    data, nothing fitted). `out`: write the calibrated profile there (needs kernel/engine traces).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise SpecError("traces", [], "at least one trace file")
    hw = hardware if isinstance(hardware, HardwareSpec) else load_hardware(str(hardware))
    by_kind: dict[str, list[pd.DataFrame]] = {"kernel": [], "engine": [], "lengths": [], "stage": []}
    traces = []
    for p in paths:
        df = read_trace(p)
        by_kind[df.attrs["kind"]].append(df)
        traces.append({"path": str(p), "kind": df.attrs["kind"], "rows": len(df)})
    report = CalibrationReport(hardware=hw.name, traces=traces)
    hw_paths = [t["path"] for t in traces if t["kind"] in ("kernel", "engine")]
    if by_kind["kernel"] or by_kind["engine"]:
        engine_for_hw = by_kind["engine"]
        if engine_for_hw and model is None:
            missing = [d for d in engine_for_hw if "model" not in d.columns or d["model"].isna().any()]
            if missing:
                report.notes.append(
                    "engine traces without a model column are not used for the hardware fit "
                    "(pass --model): " + ", ".join(where_of(d, "?") for d in missing)
                )
                engine_for_hw = [d for d in engine_for_hw if not any(d is m for m in missing)]
                hw_paths = [t for t in hw_paths if t not in {where_of(d, "?") for d in missing}]
        if by_kind["kernel"] or engine_for_hw:
            report.hardware_fit = fit_hardware(
                hw, by_kind["kernel"], engine_for_hw, model_name=model, drafter_kind=drafter_kind, sources=hw_paths
            )
        else:
            report.hardware_status = "engine traces need a model (--model) to be priced"
    else:
        report.hardware_status = "no kernel or engine traces"
    for d in by_kind["engine"]:
        if (d["k"] > 0).any():
            report.acceptance[Path(where_of(d, "engine")).name] = fit_acceptance(d)
    if by_kind["engine"] and not report.acceptance:
        report.acceptance_status = "engine traces have no speculative steps (k > 0)"
    for d in by_kind["lengths"]:
        x = d["length"].to_numpy(dtype=float)
        cap = cap_tokens
        if cap is None:
            cap = detect_cap(x)
            if cap is not None:
                report.notes.append(
                    f"{where_of(d, '?')}: {int((x == cap).sum())} responses at the maximum {cap} "
                    f"tokens: treated as truncated at cap_tokens={cap}"
                )
        report.lengths[Path(where_of(d, "lengths")).name] = fit_lengths(d, cap_tokens=cap)
    if by_kind["stage"]:
        report.stages = _stage_summary(by_kind["stage"])
    if out is not None:
        if report.hardware_fit is None:
            raise SpecError(
                "out", str(out), f"given only with kernel or engine traces (nothing to write: {report.hardware_status})"
            )
        src = hw.path
        report.out = str(write_calibrated_profile(hw, report.hardware_fit, src, out, hw_paths, date=date))
    return report
