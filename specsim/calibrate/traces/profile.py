"""Write a calibrated profile YAML (efficiency block replaced by a fit, with provenance)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path

import yaml

from specsim import inputs
from specsim.atomic import dump_yaml
from specsim.atomic import write_text as atomic_write_text
from specsim.calibrate.traces.common import PARAMS, SCALE, YAML_NAME
from specsim.calibrate.traces.hardware_fit import HardwareFit
from specsim.catalog.hardware import HardwareSpec, efficiency_to_yaml_dict, load_hardware
from specsim.errors import SpecError, load_yaml_text


def write_calibrated_profile(
    hw: HardwareSpec,
    fit: HardwareFit,
    src_profile_path=None,
    out_path=None,
    traces: Sequence[str] | None = None,
    date: str | None = None,
) -> Path:
    """Write a profile YAML: the source profile with its efficiency block replaced by `fit`.

    Fitted values get `source: "fitted by specsim calibrate traces from <traces> on <date>; RMS rel. error
    x %"`; values not fitted keep the prior and say why. A `calibration:` block records the
    residual summary, the traces and each fitted parameter's standard error. Atomic write.
    """
    if out_path is None:
        raise SpecError("out", None, "a path for the calibrated profile YAML")
    src = Path(src_profile_path or hw.path or "")
    if not src.is_file():
        raise SpecError("hardware", str(src), "the source profile YAML the calibrated copy starts from")
    try:
        doc = load_yaml_text(inputs.read_text(src, "hardware", "hardware profile YAML"))
    except yaml.YAMLError as exc:
        raise SpecError("hardware", str(src), f"a valid YAML profile ({exc.__class__.__name__})") from None
    date = date or _dt.date.today().isoformat()
    traces = [str(t) for t in (traces if traces is not None else fit.sources)]
    trace_text = ", ".join(traces) if traces else "(in-memory traces)"
    rms_pct = fit.rms_rel_error * 100
    old = doc.get("efficiency") or {}
    block = efficiency_to_yaml_dict(fit.efficiency, "")
    for p in (*PARAMS, "train_mfu"):
        key, _ = YAML_NAME[p]
        if p in fit.fitted:
            block[key]["source"] = (
                f"fitted by specsim calibrate traces from {trace_text} on {date}; "
                f"RMS rel. error {rms_pct:.2f} % over {fit.n_rows} rows"
            )
        else:
            prev = old.get(key, {})
            prev_src = prev.get("source", "") if isinstance(prev, dict) else ""
            if isinstance(prev, dict) and "value" in prev:
                block[key]["value"] = prev["value"]
            reason = fit.not_fitted.get(p, "no data")
            block[key]["source"] = (
                f"{prev_src} [kept as prior by specsim calibrate traces on {date}: not fitted ({reason})]".strip()
            )
    doc["efficiency"] = block
    doc.pop("kernel_fit", None)  # the trace fit's scalar efficiencies replace measured-kernel terms
    summary = fit.residual_summary()
    doc["calibration"] = {
        "tool": "specsim calibrate traces",
        "date": date,
        "source_profile": str(src),
        "traces": traces,
        "rows": fit.n_rows,
        "rms_rel_error": round(float(fit.rms_rel_error), 6),
        "prior_rms_rel_error": round(float(fit.prior_rms_rel_error), 6),
        "max_abs_rel_error": round(float(summary["max_abs_rel_error"]), 6),
        "by_kind": {
            k: {kk: (round(float(vv), 6) if isinstance(vv, float) else vv) for kk, vv in v.items()}
            for k, v in summary.items()
            if isinstance(v, dict)
        },
        "fitted": [YAML_NAME[p][0] for p in fit.fitted],
        "stderr": {YAML_NAME[p][0]: float(f"{fit.stderr[p] / SCALE[p]:.4g}") for p in fit.fitted if p in fit.stderr},
        "not_fitted": {YAML_NAME[p][0]: r for p, r in fit.not_fitted.items()},
        "notes": list(fit.notes),
    }
    header = (
        f"# Calibrated copy of {src} written by specsim calibrate traces on {date}.\n"
        f"# Efficiency factors fitted to: {trace_text}\n"
    )
    text = header + dump_yaml(doc, sort_keys=False, allow_unicode=True, width=120)
    out = atomic_write_text(out_path, text)
    load_hardware(str(out))  # the written profile must load
    return out
