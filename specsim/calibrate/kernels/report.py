"""Run the measured-kernel calibration end to end: fit, check held out, write profiles, report.

`calibrate_from_kernels` is what `specsim calibrate kernels` runs:

1. per system, `kernels.fit_system` fits the roofline's kernel terms to the kernel tables;
2. per (system, backend) with TPOT rows of a supported model, the rows are priced with that
   backend's own kernel tables at the version nearest the rows' engine version (MoE kernels
   differ by engine and version; labelled in the table), and `engine_overhead.fit_overheads`
   fits the engine overheads on the *fit split* and predicts the *held-out split*, by model:
   fit on the dense Llama-3.1 rows (8B, 70B) of that system and backend, hold out every
   Qwen3-32B and Qwen3-235B-A22B row (other family, other sizes, dense and MoE) -- nothing of
   a held-out model enters any fit. A (system, backend) with held-out rows but no fit rows is
   predicted with the overheads of the same backend on its sibling GPU (b200 <-> gb200,
   h100 <-> h200), labelled transferred;
3. the profile gets the kernel fit, and the overheads of the vLLM fit (specsim simulates vLLM):
   from that system's own vLLM rows where they exist, else transferred from the sibling GPU's
   vLLM fit (then h200's), labelled so in the profile (CPU-side costs, same engine);
4. residual, per-MoE-shape and held-out tables are returned (printed by the CLI; docs/calibration.md
   quotes them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from specsim import inputs
from specsim.atomic import dump_yaml, write_text
from specsim.calibrate.kernels import engine_overhead as eo
from specsim.calibrate.kernels import tables as kt
from specsim.calibrate.kernels.system import SystemFit, fit_system, provenance
from specsim.catalog.hardware import PROFILE_DIR, load_hardware
from specsim.errors import SpecError

FIT_MODELS = ("Llama-3.1-8B", "Llama-3.1-70B")
SPLIT = ("fit on Llama-3.1-8B and Llama-3.1-70B rows (dense), held out: every other supported model's "
         "rows (Qwen3-32B, Qwen3-235B-A22B)")


def sibling_of(system: str) -> str | None:
    """The system whose same-backend overheads predict `system` when it has only held-out rows:
    its profile's `kernel_tables.sibling` (b200 <-> gb200, h100 <-> h200)."""
    return kt.system_of(load_hardware(kt.systems()[system]).kernel_tables.sibling)


def overhead_donors(system: str) -> list[str]:
    """The systems whose vLLM overhead fits `system`'s profile takes, in order, without one of its
    own: its profile's `kernel_tables.overhead_donors`."""
    return [kt.system_of(p) for p in load_hardware(kt.systems()[system]).kernel_tables.overhead_donors]


@dataclass
class KernelCalibration:
    """Per-system kernel fits, per-(system, backend) overhead fits, and where profiles went."""

    fits: dict[str, SystemFit]
    overheads: dict[tuple[str, str], eo.OverheadFit] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    tpot_fits: dict[tuple[str, str], SystemFit] = field(default_factory=dict)  # per-backend kernel fits

    def residual_table(self) -> pd.DataFrame:
        return pd.DataFrame([r for f in self.fits.values() for r in f.residual_rows()])

    def tpot_table(self) -> pd.DataFrame:
        parts = [o.summary().assign(kernel_tables=f"{b} " + (self.tpot_fits[(s, b)].tables()
                                                              if (s, b) in self.tpot_fits else ""))
                 for (s, b), o in self.overheads.items()]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def overhead_table(self) -> pd.DataFrame:
        return pd.DataFrame([{"system": s, "backend": b, "step_overhead_ms": o.step_overhead_s * 1e3,
                              "per_seq_overhead_us": o.per_seq_overhead_s * 1e6,
                              "insitu_stream_factor": o.insitu_stream_factor,
                              "fit_rows": int((o.rows["role"] == "fit").sum()),
                              "excluded": int((o.rows["role"] == "fit-excluded").sum()),
                              "fit_models": ", ".join(sorted(set(o.rows.loc[o.rows["role"] == "fit", "model"])))
                              or f"- (transferred from {o.transferred_from})",
                              "at_bound": ", ".join(o.at_bound) or "-"}
                             for (s, b), o in self.overheads.items()])

    def ttft_bound_table(self) -> pd.DataFrame:
        """The prefill pricing against the rows' measured TTFT, which it never saw: a TTFT holds at
        least the request's own prefill pass (tpot_model.RowPricing.prefill_alone_s), so rows
        where measured TTFT < priced prefill are over-priced prefills. Per system, backend and
        model: rows, violations, the smallest TTFT / priced-prefill ratio, and the median ratio
        over the rows at concurrency <= 4 with isl >= 4000 (little queueing, the prefill most of
        the TTFT; NaN where there are none)."""
        recs = []
        for (s, b), o in self.overheads.items():
            r = o.rows[np.isfinite(o.rows["ttft_s"]) & (o.rows["prefill_alone_s"] > 0)]
            ratio = r["ttft_s"] / r["prefill_alone_s"]
            lone = (r["clients"] <= 4) & (r["isl"] >= 4000)
            for m, g in ratio.groupby(r["model"]):
                q = g[lone.loc[g.index]]
                recs.append({"system": s, "backend": b, "model": m, "rows": len(g),
                             "ttft_below_prefill": int((g < 1.0).sum()), "min_ratio": float(g.min()),
                             "median_ratio_long_prompt_low_conc": float(q.median()) if len(q) else float("nan")})
        return pd.DataFrame(recs)

    def moe_shape_table(self) -> pd.DataFrame:
        """Kernel-fit residual on each catalog MoE shape: cross-shape law vs per-shape fit, for the
        profile fits and the per-backend fits that price the TPOT rows."""
        seen = {(f.system, f.backend, f.tables()) for f in self.fits.values()}
        fits = [*self.fits.values(), *(f for f in self.tpot_fits.values()
                                       if (f.system, f.backend, f.tables()) not in seen)]
        return pd.DataFrame([r for f in fits for r in f.moe_shape_rows()])


def _version_of(rows: pd.DataFrame) -> str | None:
    """The engine version most of a backend's TPOT rows were measured on (None if unlabelled)."""
    v = rows["backend_version"].replace({"nan": ""})
    v = v[v != ""]
    return str(v.mode().iloc[0]) if len(v) else None


def _fit_tpot(system: str, silicon: pd.DataFrame, data, fits: dict, pending: dict) -> dict[tuple[str, str], eo.OverheadFit]:
    """Per backend with TPOT rows on `system`: price its rows with *that backend's* kernel tables at
    the version nearest the rows' engine version (TPOT rows of TensorRT-LLM with TensorRT-LLM's
    kernels, ...), then fit the engine overheads on the fit split and predict the held-out split.
    The SystemFit used is stored in `fits[(system, backend)]`; a backend with held-out rows but
    no fit rows goes to `pending[(system, backend)] = (rows, kernel_s, pricing, label)`."""
    rows = silicon[(silicon["why_not"] == "") & (silicon["system"] == system)].reset_index(drop=True)
    out = {}
    for backend in sorted(rows["backend"].unique()) if len(rows) else []:
        sub = rows[rows["backend"] == backend].reset_index(drop=True)
        fm = sub["model"].isin(FIT_MODELS).to_numpy()
        ver = _version_of(sub)
        try:
            fit = fit_system(system, backend, root=data, version=ver)
        except SpecError:
            continue  # no kernel tables of this backend on this system
        fits[(system, backend)] = fit
        ks, pre = eo.kernel_tpot_s(sub, fit.hw, fit.for_quant)
        label = f"{system}/{backend}: {SPLIT}; kernels {backend} nearest {ver or 'newest'} ({fit.tables()})"
        reprice = _repricer(sub, fit)
        if (fm & np.isfinite(ks)).sum() >= 3:
            out[(system, backend)] = eo.fit_overheads(sub, pre, fm, label, reprice,
                                                      fit.kernel_fit.max_useful_stream_factor())
        elif np.isfinite(ks).any():
            pending[(system, backend)] = (sub, ks, pre, label, reprice)
    return out


def _repricer(rows: pd.DataFrame, fit: SystemFit):
    """β -> the rows' pricing with `fit`'s kernels streaming at β times their isolated rates."""
    def reprice(beta: float):
        return eo.kernel_tpot_s(rows, fit.hw, lambda g, m: fit.for_quant(g, m).with_insitu_stream_factor(beta))[1]
    return reprice


def _transfer(pending: dict, overheads: dict) -> dict[tuple[str, str], eo.OverheadFit]:
    """Predict each pending (system, backend) -- only held-out rows -- with the same backend's
    overheads fitted on the sibling GPU (sibling_of); none when the sibling has no fit either."""
    out = {}
    for (s, b), (sub, ks, pre, label, reprice) in pending.items():
        donor = overheads.get((sibling_of(s), b))
        if donor is not None and not donor.transferred_from:
            name = f"{sibling_of(s)}/{b}"
            out[(s, b)] = eo.predict_with(sub, pre, donor, name,
                                          f"{label}; no fit rows here: overheads and in-situ streaming factor "
                                          f"of the {name} fit", reprice)
    return out


def calibrate_from_kernels(systems: list[str] | str = "all", backend: str = "vllm", root=None,
                           out_dir: str | Path | None = None, date: str | None = None) -> KernelCalibration:
    """Fit every named system (or 'all'); write fitted profiles into `out_dir` when given."""
    names = list(kt.systems()) if systems in ("all", ["all"]) else ([systems] if isinstance(systems, str) else systems)
    for s in names:
        kt.check_system(s)
    data = kt.data_root(root)
    cal = KernelCalibration(fits={s: fit_system(s, backend, root=data) for s in names})
    try:
        silicon = eo.supported_rows(eo.read_silicon(data), eo.model_configs_dir(data))
    except SpecError as exc:
        silicon = None
        cal.notes.append(f"no TPOT rows ({exc}); engine overheads keep their priors")
    if silicon is not None:
        pending: dict = {}
        for s in kt.systems():  # overheads may be transferred, so fit every system with rows
            cal.overheads.update(_fit_tpot(s, silicon, data, cal.tpot_fits, pending))
        cal.overheads.update(_transfer(pending, cal.overheads))
    if out_dir is not None:
        for s, f in cal.fits.items():
            cal.written[s] = str(write_fitted_profile(f, cal, Path(out_dir), date))
    return cal


def _overhead_for(system: str, cal: KernelCalibration):
    """The vLLM overheads a profile carries: its own fit, else the first of its overhead donors
    (overhead_donors: the sibling GPU's, then h200's, h100's) whose step overhead did not end at the
    bound 0 (not determined)."""
    own = cal.overheads.get((system, "vllm"))
    if own is not None and not own.transferred_from:
        models = ", ".join(sorted(set(own.rows.loc[own.rows["role"] == "fit", "model"])))
        return own, f"fitted to {system} vLLM TPOT rows of silicon_sample.csv ({models}; {own.fit_on})"
    for donor in overhead_donors(system):
        d = cal.overheads.get((donor, "vllm"))
        if d is not None and not d.transferred_from and "step_overhead_s" not in d.at_bound:
            return d, (f"transferred from the {donor} vLLM TPOT fit, the nearest same-engine fit that determines "
                       f"the step overhead (no vLLM TPOT rows of a fitted model on {system}; CPU-side engine cost; "
                       f"{d.fit_on})")
    return None, ""


def write_fitted_profile(fit: SystemFit, cal: KernelCalibration, out_dir: Path, date: str | None = None) -> Path:
    """The bundled profile with fitted values (each with its source) and a `kernel_fit` block."""
    name = kt.systems()[fit.system]
    src = Path(fit.hw.path or PROFILE_DIR / f"{name}.yaml")
    text = inputs.read_text(src, "hardware", "hardware profile YAML")
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    doc = yaml.safe_load(text)
    pkg = f"{kt.PACKAGE}=={kt.package_version()}"
    t = fit.terms
    eff = doc["efficiency"]
    g = fit.kernel_fit.gemm_for("bf16")
    eff["compute"] = {"value": round(g.flops_eff_max, 4),
                      "source": f"fitted: bf16 GEMM plateau efficiency, {pkg} {t['gemm.bf16'].table}"}
    eff["memory"] = {"value": round(g.weight_bw_eff, 4),
                     "source": f"fitted: bf16 GEMM weight-streaming bandwidth share, {pkg} {t['gemm.bf16'].table}"}
    if "all_reduce" in t:
        eff["comm"] = {"value": round(t["all_reduce"].params["bw_eff"], 4),
                       "source": f"fitted: NVLink all-reduce bandwidth share, {pkg} {t['all_reduce'].table}"}
        doc.setdefault("collective_latency_us", {})["nvlink"] = {
            "value": round(t["all_reduce"].params["latency_us"], 3),
            "source": f"fitted: ring/tree all-reduce latency per log2 hop, {pkg} {t['all_reduce'].table}"}
        doc["collective_latency_us"]["nvlink_oneshot"] = {
            "value": round(t["all_reduce"].params["oneshot_latency_us"], 3),
            "source": f"fitted: one-shot custom all-reduce latency per call (groups of <= 8 GPUs), {pkg} "
                      f"{t['all_reduce'].table}"}
    ov, how = _overhead_for(fit.system, cal)
    if ov is not None:
        if ov.at_bound:
            how += f"; at a bound of the fit (not determined by these rows): {', '.join(ov.at_bound)}"
        eff["step_overhead_ms"] = {"value": round(ov.step_overhead_s * 1e3, 4), "source": how}
        eff["per_seq_overhead_us"] = {"value": round(ov.per_seq_overhead_s * 1e6, 4), "source": how}
    _label_prior(eff["train_mfu"], "prior (kernel and TPOT tables do not time training): ")
    if not str(eff["draft_overhead_ms"].get("source", "")).startswith(("fitted", "transferred")):  # kept as written
        _label_prior(eff["draft_overhead_ms"], "prior (no SD rows in the tables; fitted on EAGLE-3 rows elsewhere): ")
    lat = doc.get("collective_latency_us", {})
    if "scaleout" in lat:
        _label_prior(lat["scaleout"], "prior (no scale-out tables): ")
    kf = fit.kernel_fit
    prov = provenance(fit, date)
    beta = round(ov.insitu_stream_factor, 4) if ov is not None else 1.0
    kept = (doc.get("kernel_fit") or {}).get("provenance", {}).get("insitu_stream_fit")
    if kept and ov is not None and not how.startswith("fitted to"):
        # β fitted on this GPU's own engine timings (calibrate/kernels/forward_sweep.py) beats a transferred one
        beta, prov["insitu_stream_fit"] = float(doc["kernel_fit"]["insitu_stream_factor"]), kept
    old_kf = doc.get("kernel_fit") or {}
    multi_token = old_kf.get("multi_token_attention")  # fitted on engine timings (forward_sweep.py): kept
    if multi_token is not None and "multi_token_attention_fit" in old_kf.get("provenance", {}):
        prov["multi_token_attention_fit"] = old_kf["provenance"]["multi_token_attention_fit"]
    if ov is not None:
        prov["engine_overhead"] = {"split": ov.fit_on, "how": how,
                                   "fit_rows": int((ov.rows["role"] == "fit").sum()),
                                   "held_out_rows": int((ov.rows["role"] == "held-out").sum()),
                                   "fit_excluded_rows": int((ov.rows["role"] == "fit-excluded").sum()),
                                   "prefill": "priced as closed-loop mixed steps (calibrate/kernels/tpot_model.py), not fitted",
                                   "insitu_stream_factor": kept["how"] if "insitu_stream_fit" in prov else (
                                       f"fitted with the overheads ({how}): every fitted streaming efficiency "
                                       "(GEMM weights, MoE experts, decode-attention KV) times this factor, "
                                       "capped at 1"),
                                   "at_bound": list(ov.at_bound)}
    doc["kernel_fit"] = {
        "gemm": {dt: _gemm_yaml(gf) for dt, gf in kf.gemm.items()},
        "decode_attention": {"latency_us": round(kf.attn_latency_s * 1e6, 4),
                             "per_seq_us": round(kf.attn_per_seq_s * 1e6, 5), "kv_bw_eff": round(kf.attn_kv_bw_eff, 4)},
        "moe": {dt: _gemm_yaml(gf) for dt, gf in kf.moe.items()},
        "moe_shapes": {k: {dt: _gemm_yaml(gf) for dt, gf in v.items()} for k, v in kf.moe_shapes.items()},
        "insitu_stream_factor": beta,
        **({"multi_token_attention": multi_token} if multi_token is not None else {}),
        "provenance": prov,
    }
    out = out_dir / f"{name}.yaml"
    write_text(out, header + dump_yaml(doc, sort_keys=False, allow_unicode=True, width=120))
    load_hardware(str(out))  # the written profile must load
    return out


def _label_prior(entry: dict, label: str) -> None:
    """Prefix `entry['source']` with `label` once: rerunning the fit must not stack the label."""
    src = str(entry.get("source", ""))
    while True:
        stripped = src.removeprefix(label).removeprefix("prior: ")
        if stripped == src:
            break
        src = stripped
    entry["source"] = label + src


def _gemm_yaml(g) -> dict:
    out = {"latency_us": round(g.latency_s * 1e6, 4), "flops_eff_max": round(g.flops_eff_max, 4),
           "m_half_tokens": round(g.m_half_tokens, 3), "weight_bw_eff": round(g.weight_bw_eff, 4)}
    if g.token_s:  # dense GEMM only (MoE fits have no per-token term)
        out["per_token_ns"] = round(g.token_s * 1e9, 4)
    return out


def markdown(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A GitHub table of a frame (no tabulate dependency)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(format(v, floatfmt) if isinstance(v, (float, np.floating)) else str(v)
                                       for v in r) + " |")
    return "\n".join(lines)

