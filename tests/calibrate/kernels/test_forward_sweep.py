"""Forward-pass sweeps measured inside an engine (calibrate/kernels/forward_sweep.py): pricing semantics, the
in-situ streaming factor recovered from rows generated with a known one, every row reported, bad
input named."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.kernels.forward_sweep import fit_stream_factor, price_rows, read_sweep, write_stream_factor
from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import load_model
from specsim.cost.forward import decode_cost, pass_cost
from specsim.cost.layout import ParallelLayout
from specsim.errors import SpecError

ROOT = Path(__file__).resolve().parents[3]
A100 = load_hardware("a100_sxm")
Q7B = load_model("Qwen2.5-7B")


def _grid(beta: float, seed: int = 0) -> pd.DataFrame:
    b, s = (a.ravel() for a in np.meshgrid([1, 8, 32], [256, 1024, 4096]))
    rows = [pd.DataFrame({"model": "Qwen2.5-7B", "batch": b, "seq": s, "gamma": g, "mode": mode})
            for mode, g in (("target_decode", 0), ("target_verify", 7), ("drafter_decode", 7))]
    df = pd.concat(rows, ignore_index=True)
    hw = replace(A100, kernel_fit=replace(A100.kernel_fit, insitu_stream_factor=beta))
    t = price_rows(df, hw) * np.exp(np.random.default_rng(seed).normal(0, 0.002, len(df)))
    return df.assign(median_ms=t * 1e3, n_samples=100)


def test_forward_rows_have_no_lm_head_and_no_overheads():
    df = pd.DataFrame({"model": ["Qwen2.5-7B"], "batch": [4], "seq": [1000], "gamma": [0], "mode": ["target_decode"],
                       "median_ms": [10.0], "n_samples": [1]})
    lay = ParallelLayout(tp=1)
    got = price_rows(df, A100, generated_tokens=50)[0]
    want = float(pass_cost(Q7B, A100, lay, 4.0, 1.0, 0.0).time_s(4 * 1025.5))
    assert got == pytest.approx(want, rel=1e-12)
    with_head = float(decode_cost(Q7B, A100, lay, 4.0).time_s(4 * 1025.5))
    head_bytes = Q7B.hidden * Q7B.vocab * 2.0
    assert with_head - got > head_bytes / A100.hbm_bw_bytes_per_s   # the head streams at most at peak


def test_stream_factor_recovered_and_every_row_reported():
    df = _grid(1.07)
    before = replace(A100, kernel_fit=replace(A100.kernel_fit, insitu_stream_factor=1.3))
    fit = fit_stream_factor(df, before)
    assert fit.beta == pytest.approx(1.07, abs=0.01)
    assert fit.fit_rows == 3 and len(fit.rows) == len(df)
    assert set(fit.rows.loc[fit.rows["role"] == "fit", "batch"]) == {1}
    assert (fit.rows.loc[fit.rows["role"] == "fit", "mode"] == "target_decode").all()
    assert fit.rows["rel_error"].abs().max() < 0.02          # every row, fitted or not
    # a too-fast β prices the rows too fast: clearly the batch-1 decodes, where weights stream; barely
    # where the block time of multi-token or cascade attention (no streaming) dominates a row
    assert fit.rows.loc[fit.rows["role"] == "fit", "before_rel_error"].max() < -0.03
    assert fit.rows["before_rel_error"].median() < 0.0
    s = fit.summary()
    assert set(s["mode"]) == {"target_decode", "target_verify", "drafter_decode"}


def test_other_models_are_held_out_never_fitted():
    """With `fit_model`, only that model's batch-1 decode rows fit: another model's rows, even
    generated with a different β, cannot move the fit; they are reported as held-out."""
    qwen = _grid(1.07)
    llama = _grid(1.4, seed=1).assign(model="Llama-3.1-8B-Instruct")   # the sweep's name, catalog Llama-3.1-8B
    llama["median_ms"] = price_rows(llama, replace(A100, kernel_fit=replace(A100.kernel_fit, insitu_stream_factor=1.4))) * 1e3
    fit = fit_stream_factor(pd.concat([qwen, llama], ignore_index=True), A100, fit_model="Qwen2.5-7B")
    assert fit.beta == pytest.approx(1.07, abs=0.01)
    roles = fit.rows.groupby("model")["role"].unique()
    assert set(roles["Llama-3.1-8B-Instruct"]) == {"held-out"} and set(roles["Qwen2.5-7B"]) == {"fit", "check"}
    held = fit.rows[fit.rows["model"] == "Llama-3.1-8B-Instruct"]
    assert held["rel_error"].median() > 0.02     # priced at 1.07, measured at 1.4: over-priced, and reported


def test_bundled_sweep_reads_and_the_profile_write_keeps_it_loadable(tmp_path):
    df = read_sweep(ROOT / "calibration" / "published" / "efficientrollout_a100_qwen25_7b.csv")
    # every decode, verify and draft row at batch >= 1, all gammas (the source lacks two verify rows)
    assert len(df) == 45 + 4 * 45 + 4 * 45 - 2
    assert set(df["mode"]) == {"target_decode", "target_verify", "drafter_decode"}
    assert set(df["gamma"]) == {0, 3, 7, 11, 15}
    fit = fit_stream_factor(df, A100)
    assert fit.beta == pytest.approx(A100.kernel_fit.insitu_stream_factor, abs=2e-3)   # the bundled fit
    prof = tmp_path / "a100_sxm.yaml"
    prof.write_text((ROOT / "specsim" / "catalog" / "hardware_profiles" / "a100_sxm.yaml").read_text())
    write_stream_factor(prof, replace(fit, beta=1.1), "sweep.csv", "cmd")
    hw = load_hardware(str(prof))
    assert hw.kernel_fit.insitu_stream_factor == pytest.approx(1.1)
    assert "cmd" in hw.kernel_fit.provenance["insitu_stream_fit"]["how"]
    assert prof.read_text().startswith("# NVIDIA A100")          # the header comment survives


@pytest.mark.parametrize("text,field", [
    ("model,batch,seq,gamma,mode,median_ms\nQwen2.5-7B,1,256,0,target_decode,9.5\n", "columns"),
    ("model,batch,seq,gamma,mode,median_ms,n_samples\nQwen2.5-7B,1,256,0,prefill,9.5,3\n", "mode"),
    ("model,batch,seq,gamma,mode,median_ms,n_samples\nQwen2.5-7B,0,256,0,target_decode,9.5,3\n", "batch"),
    ("model,batch,seq,gamma,mode,median_ms,n_samples\nQwen2.5-7B,1,256,0,target_decode,-1,3\n", "median_ms"),
    ("model,batch,seq,gamma,mode,median_ms,n_samples\nQwen2.5-7B,1,256,0,target_verify,9.5,3\n", "gamma"),
])
def test_bad_sweep_rows_are_named(tmp_path, text, field):
    p = tmp_path / "s.csv"
    p.write_text(text)
    with pytest.raises(SpecError) as exc:
        read_sweep(p)
    assert exc.value.field == field and str(p) in str(exc.value)


def test_too_few_fit_rows_is_refused():
    df = _grid(1.0)
    with pytest.raises(SpecError, match="batch 1"):
        fit_stream_factor(df[df["batch"] > 1], A100)
