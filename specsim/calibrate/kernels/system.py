"""`specsim calibrate kernels`: fit a profile's roofline terms to measured kernels.

One call per system fits (terms.py): GEMM efficiency vs m and weight-streaming bandwidth for
bf16 and fp8 math, decode-attention KV bandwidth vs KV length and batch, MoE grouped-GEMM
efficiency vs tokens per expert (the cross-shape law, plus a per-shape fit on the rows of each
catalog MoE shape the table measured: one law across every shape of a table misprices a given
shape by 15-30 %), and NVLink all-reduce latency + bandwidth (the faster of a one-shot custom kernel
and a ring/tree). The profile's scalar efficiencies follow from them (compute = bf16 GEMM plateau,
memory = bf16 weight-streaming bandwidth, comm = all-reduce bandwidth share,
collective_latency_us.nvlink = ring/tree hop latency, collective_latency_us.nvlink_oneshot =
one-shot latency per call). The engine overheads are fitted to TPOT rows afterwards
(engine_overhead.py). What stays a prior, and why, is written into each value's `source`.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace
from pathlib import Path

from specsim.calibrate.kernels import tables as kt
from specsim.calibrate.kernels import terms as kf
from specsim.catalog.hardware import GemmFit, HardwareSpec, KernelFit, load_hardware, moe_shape_key
from specsim.catalog.models import list_models, load_model
from specsim.errors import SpecError

COMMAND = "specsim calibrate kernels --source aiconfigurator --system all --backend vllm --out specsim/catalog/hardware_profiles"


@dataclass
class SystemFit:
    """Every term fitted for one system: TermFits by name, the KernelFit and the fitted profile."""

    system: str
    backend: str
    terms: dict[str, kf.TermFit]
    kernel_fit: KernelFit
    hw: HardwareSpec
    notes: list[str] = field(default_factory=list)
    near_version: str | None = None  # tables nearest this engine version (None: newest)
    shape_terms: dict[str, dict[str, kf.TermFit]] = field(default_factory=dict)  # MoE shape -> dtype -> fit

    def tables(self) -> str:
        """The version folders the terms were fitted on, e.g. 'gemm 0.24.0, moe 0.19.0'."""
        out = {}
        for t in self.terms.values():
            for part in str(t.table).split(" + "):
                bits = part.split("/")
                if len(bits) >= 4 and bits[2] != "nccl":
                    out.setdefault(bits[1], bits[3])
        return ", ".join(f"{k} {v}" for k, v in out.items())

    def for_quant(self, gemm_quant: str, moe_quant: str) -> HardwareSpec:
        """The fitted profile pricing fp8 GEMMs and MoE with the kernels a TPOT row's engine ran:
        block-scaled fp8 GEMM (`gemm.fp8_block`) for gemm_quant 'fp8_block', per-tensor fp8 MoE
        (`moe.fp8_tensor`) for moe_quant 'fp8', where those variants were fitted."""
        kfit = self.kernel_fit
        g, m = self.terms.get("gemm.fp8_block"), self.terms.get("moe.fp8_tensor")
        if gemm_quant == "fp8_block" and g is not None:
            kfit = replace(kfit, gemm={**kfit.gemm, "fp8": _gemm_fit(g)})
        if moe_quant == "fp8" and m is not None:
            shapes = {k: {**v, "fp8": _gemm_fit(self.shape_terms[k]["fp8_tensor"])}
                      if "fp8_tensor" in self.shape_terms.get(k, {}) else v for k, v in kfit.moe_shapes.items()}
            kfit = replace(kfit, moe={**kfit.moe, "fp8": _gemm_fit(m)}, moe_shapes=shapes)
        return self.hw if kfit is self.kernel_fit else replace(self.hw, kernel_fit=kfit)

    def residual_rows(self) -> list[dict]:
        out = []
        for name, t in self.terms.items():
            out.append({"system": self.system, "term": name, "rows": t.rows,
                        "median_abs_rel_error": t.median_abs_rel_error, "p90_abs_rel_error": t.p90_abs_rel_error,
                        "at_bound": ",".join(t.at_bound) or "-", "table": t.table})
        return out

    def moe_shape_rows(self) -> list[dict]:
        """Kernel-fit residual on each catalog MoE shape's own rows: the cross-shape law (before)
        vs the per-shape fit (after), per dtype."""
        out = []
        for shape, by_dt in self.shape_terms.items():
            for dt, t in by_dt.items():
                law = self.terms.get(f"moe.{dt}")
                if law is None or law.residuals is None:
                    continue
                r = law.residuals
                r = r[[moe_shape_key(*x) == shape for x in
                       zip(r["hidden_size"], r["inter_size"], r["num_experts"], r["topk"])]]
                on, own = r["rel_error"].abs(), t.residuals
                out.append({"system": self.system, "backend": self.backend, "term": f"moe.{dt}", "shape": shape,
                            "rows": t.rows, "cross_shape_median": float(on.median()),
                            "cross_shape_p90": float(on.quantile(0.9)), "per_shape_median": t.median_abs_rel_error,
                            "per_shape_p90": t.p90_abs_rel_error,
                            # signed median at decode token counts (T <= 256): the bias a decode step sees
                            "decode_cross_signed": float(r.loc[r["num_tokens"] <= 256, "rel_error"].median()),
                            "decode_per_shape_signed": float(own.loc[own["num_tokens"] <= 256, "rel_error"].median()),
                            "at_bound": ",".join(t.at_bound) or "-"})
        return out


#: fewest rows of one MoE shape (one dtype) for a per-shape fit; below it the cross-shape law rules
MIN_SHAPE_ROWS = 20


def catalog_moe_shapes() -> dict[str, tuple[int, int, int, int]]:
    """The MoE shapes of specsim's catalog models, key -> (hidden, expert_ffn, experts, top_k):
    the shapes whose grouped GEMMs get their own fit where a kernel table measured them."""
    out = {}
    for name in list_models():
        m = load_model(name)
        if m.moe is not None:
            out[moe_shape_key(m.hidden, m.moe.expert_ffn, m.moe.experts, m.moe.top_k)] = (
                m.hidden, m.moe.expert_ffn, m.moe.experts, m.moe.top_k)
    return out


def _gemm_fit(t: kf.TermFit) -> GemmFit:
    p = t.params
    return GemmFit(latency_s=p["latency_us"] * 1e-6, flops_eff_max=p["flops_eff_max"],
                   m_half_tokens=p["m_half_tokens"], weight_bw_eff=p["weight_bw_eff"],
                   token_s=p.get("per_token_ns", 0.0) * 1e-9)


def _w4a16_rows(data: Path, system: str, backend: str, gemm, src: str, version: str | None):
    """(rows, table) of W4A16 weight-only GEMMs (`int4_wo`) on `system`: the backend's own table
    when it has them, else the first other backend's newest table that does (A100: TensorRT-LLM
    1.0.0; vLLM's table times bf16 only). A W4A16 GEMM dequantises in registers and runs bf16
    math, so its small-m time is the 4-bit weight stream plus a launch floor, not the bf16 law's:
    priced with the bf16 law, a Qwen2.5-7B 4-bit draft pass costs 0.72 of a bf16 decode pass on
    A100 (that law's small-m compute branch binds once the weights shrink 4x), where
    EfficientRollout's A100 forward timings measure 0.45 at batch 1. None when no table of the
    system has such rows (the bf16 law then prices int4 weights, KernelFit.gemm_for)."""
    rows = kt.gemm_rows(gemm, "int4")
    if len(rows):
        return rows, src
    for other in ("trtllm", "sglang", "vllm"):
        if other == backend:
            continue
        df, osrc = kt.read_table(data, system, "gemm", other, "gemm_perf", version)
        rows = kt.gemm_rows(df, "int4")
        if len(rows):
            return rows, osrc
    return None


def fit_system(system: str, backend: str = "vllm", hw: HardwareSpec | None = None,
               root: str | Path | None = None, version: str | None = None) -> SystemFit:
    """Fit every kernel term of `system` from its `backend` tables (NCCL from the nccl folder):
    the newest version of each table, or with `version` the one nearest that engine version
    (TPOT rows measured on that version). `moe.fp8` is the block-scaled kernel (per-tensor where
    no block rows exist); `moe.fp8_tensor` and `gemm.fp8_block`, fitted where both variants exist,
    price TPOT rows whose engine ran that variant (`for_quant`); not written into a profile."""
    kt.check_system(system)
    data = kt.data_root(root)
    hw = hw or load_hardware(kt.systems()[system])
    terms: dict[str, kf.TermFit] = {}
    notes: list[str] = []
    gemm, src = kt.read_table(data, system, "gemm", backend, "gemm_perf", version)
    if gemm.empty:
        raise SpecError("--backend", backend, f"a backend with a gemm_perf table for {system}", str(data / system))
    for dt in ("bf16", "fp8", "fp8_block"):
        rows = kt.gemm_rows(gemm, dt)
        if len(rows) and not (dt == "fp8_block" and (gemm["gemm_dtype"] == "fp8").sum() == 0):
            terms[f"gemm.{dt}"] = kf.fit_gemm(rows, hw, dt, src)
    w4 = _w4a16_rows(data, system, backend, gemm, src, version)
    if w4 is not None:
        terms["gemm.int4"] = kf.fit_gemm(w4[0], hw, "int4", w4[1])
        if w4[1].split("/")[2] != backend:
            notes.append(f"gemm.int4: W4A16 weight-only kernels measured under {w4[1].split('/')[2]} "
                         f"({w4[1]}); {backend}'s tables time none")
    att, src = kt.read_table(data, system, "attention", backend, "generation_attention_perf", version)
    terms["decode_attention"] = kf.fit_decode_attention(kt.decode_attention_rows(att), hw, src)
    moe, src = kt.read_table(data, system, "moe", backend, "moe_perf", version)
    shape_terms: dict[str, dict[str, kf.TermFit]] = {}
    for dt in ("bf16", "fp8", "fp8_tensor"):
        rows = kt.moe_rows(moe, dt)
        if len(rows) and not (dt == "fp8_tensor" and (moe["moe_dtype"] == "fp8_block").sum() == 0):
            terms[f"moe.{dt}"] = kf.fit_moe(rows, hw, dt, src)
            for shape, (h, i, e, k) in catalog_moe_shapes().items():
                own = rows[(rows["hidden_size"] == h) & (rows["inter_size"] == i) & (rows["num_experts"] == e)
                           & (rows["topk"] == k)]
                if len(own) >= MIN_SHAPE_ROWS:
                    shape_terms.setdefault(shape, {})[dt] = kf.fit_moe(own, hw, dt, f"{src} [{shape}]")
    custom, src_c = kt.read_table(data, system, "comm", backend, "custom_allreduce_perf", version)
    nccl, src_n = kt.read_table(data, system, "comm", "nccl", "nccl_perf")
    ar = kt.allreduce_rows(custom, nccl)
    if len(ar):
        terms["all_reduce"] = kf.fit_allreduce(ar, hw, " + ".join(s for s in (src_c, src_n) if s))
        gpus = sorted(int(g) for g in ar["num_gpus"].unique())
        if max(gpus) < hw.nvlink_domain_gpus:
            notes.append(f"all-reduce measured on {gpus} GPUs only; larger NVLink groups extrapolate the fitted "
                         f"per-hop latency and bandwidth share")
    for name, t in [*terms.items(), *((f"moe.{d}[{k}]", t) for k, v in shape_terms.items() for d, t in v.items())]:
        if t.at_bound:
            notes.append(f"{name}: {', '.join(t.at_bound)} at a bound of the fit (value not determined by the data)")
    a = terms["decode_attention"].params
    kfit = KernelFit(gemm={k.split(".")[1]: _gemm_fit(t) for k, t in terms.items()
                           if k.startswith("gemm.") and k != "gemm.fp8_block"},
                     attn_latency_s=a["latency_us"] * 1e-6, attn_per_seq_s=a["per_seq_us"] * 1e-6,
                     attn_kv_bw_eff=a["kv_bw_eff"],
                     moe={k.split(".")[1]: _gemm_fit(t) for k, t in terms.items()
                          if k.startswith("moe.") and k != "moe.fp8_tensor"},
                     moe_shapes={k: {d: _gemm_fit(t) for d, t in v.items() if d != "fp8_tensor"}
                                 for k, v in shape_terms.items()})
    g = kfit.gemm_for("bf16")
    changes = {"compute": g.flops_eff_max, "memory": g.weight_bw_eff}
    if "all_reduce" in terms:
        changes["comm"] = terms["all_reduce"].params["bw_eff"]

    fitted = replace(hw.with_efficiency(**changes), kernel_fit=kfit)
    if "all_reduce" in terms:
        ar = terms["all_reduce"].params
        fitted = replace(fitted, nvlink_latency_s=ar["latency_us"] * 1e-6,
                         nvlink_oneshot_latency_s=ar["oneshot_latency_us"] * 1e-6)
    return SystemFit(system, backend, terms, kfit, fitted, notes, version, shape_terms)


def provenance(fit: SystemFit, date: str | None = None) -> dict:
    """The `kernel_fit.provenance` block: package, version, tables, rows and residuals per term."""
    return {
        "package": f"{kt.PACKAGE}=={kt.package_version()}", "system": fit.system, "backend": fit.backend,
        "date": date or _dt.date.today().isoformat(), "command": COMMAND,
        "terms": {name: t.quality() for name, t in fit.terms.items()},
        "moe_law": ("kernel_fit.moe: one saturating-roofline law over every MoE shape of the table; "
                    "kernel_fit.moe_shapes: the same law fitted on the rows of one catalog MoE shape only, "
                    "used for that shape; any other shape falls back to kernel_fit.moe"),
        "moe_shapes": {f"{k}.{d}": t.quality() for k, v in fit.shape_terms.items() for d, t in v.items()
                       if d != "fp8_tensor"},
        "notes": list(fit.notes),
    }
