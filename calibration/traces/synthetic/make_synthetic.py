"""Generate the SYNTHETIC example traces in this folder from KNOWN parameters.

These files are not measurements. They are produced by specsim's own cost model (kernel and
engine step times) and acceptance model (tokens per verify), with known efficiency factors and
acceptance, plus small multiplicative noise from a fixed seed, so that calibration can be
tested end to end: fitting them must give back the parameters below. Each file's header says
"synthetic, generated from known parameters: ...".

    python calibration/traces/synthetic/make_synthetic.py          # rewrite the files here
    python calibration/traces/synthetic/make_synthetic.py --check  # regenerate in memory, compare

The functions are imported by tests/calibrate/traces/test_trace_fit.py to build in-memory traces.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from specsim.catalog.hardware import HardwareSpec, load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.cost.forward import draft_cost, pass_cost
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import step_cost

HERE = Path(__file__).resolve().parent
SEED = 20240601
HARDWARE = "h200_sxm"
MODEL = "Qwen3-8B"
DRAFTER = "eagle3"

#: the KNOWN efficiency factors the synthetic timings are generated with (SI units)
TRUE_EFFICIENCY = {
    "compute": 0.72,
    "memory": 0.78,
    "comm": 0.62,
    "step_overhead_s": 2.5e-3,
    "per_seq_overhead_s": 25e-6,
    "draft_overhead_s": 0.6e-3,
}
#: the KNOWN acceptance the synthetic engine steps are sampled with
TRUE_ALPHA = 0.72
#: staleness of the synthetic RL run: alpha(v) = ALPHA0 * exp(-RATE * v), floor 0
TRUE_STALE_ALPHA0 = 0.80
TRUE_STALE_RATE = 0.008
#: the KNOWN length distribution (lognormal in tokens) and cap
TRUE_LENGTH_MU = 7.6
TRUE_LENGTH_SIGMA = 0.8
LENGTH_CAP = 8192
NOISE = 0.01


def true_hardware(name: str = HARDWARE) -> HardwareSpec:
    """The profile with the known synthetic efficiencies in place of its priors (its measured-kernel
    terms set aside: the trace fit prices ops with the scalar efficiencies it fits)."""
    from dataclasses import replace

    return replace(load_hardware(name), kernel_fit=None).with_efficiency(**TRUE_EFFICIENCY)


def _noise(rng: np.random.Generator, n: int, sigma: float) -> np.ndarray:
    return np.exp(rng.normal(0.0, sigma, n)) if sigma > 0 else np.ones(n)


def make_kernel_trace(
    rng: np.random.Generator,
    hw: HardwareSpec | None = None,
    noise: float = NOISE,
    tps=(1, 2, 4),
    model_name: str = MODEL,
) -> pd.DataFrame:
    """Forward-pass times of decode / verify / prefill / draft shapes priced by the cost model."""
    hw = hw or true_hardware()
    model = load_model(model_name)
    drafter = drafter_arch(DRAFTER, model)
    rows = []
    for tp in tps:
        layout = ParallelLayout(tp=tp)
        for batch in (1, 4, 16, 64, 256):
            for ctx in (512, 4096):
                t = pass_cost(model, hw, layout, batch, 1, 1).time_s(batch * ctx)
                rows.append(("decode", tp, batch, 1, ctx, float(t)))
        for batch in (1, 8, 64):
            for q in (2, 4):
                t = pass_cost(model, hw, layout, batch, q, q).time_s(batch * 1024)
                rows.append(("verify", tp, batch, q, 1024, float(t)))
        for batch, prompt in ((1, 512), (1, 2048), (4, 2048), (8, 1024), (2, 4096), (16, 512)):
            t = pass_cost(model, hw, layout, batch, prompt, 1).time_s(0.0)
            rows.append(("prefill", tp, batch, prompt, 0, float(t)))
        for batch in (1, 16, 128):
            t = draft_cost(drafter, hw, layout, batch).time_s(batch * 2048)
            rows.append(("draft", tp, batch, 1, 2048, float(t)))
    df = pd.DataFrame(rows, columns=["op", "tp", "batch", "q_per_seq", "ctx_per_seq", "time_s"])
    df["time_s"] = df["time_s"] * _noise(rng, len(df), noise)
    df.insert(1, "model", model_name)
    df.insert(3, "ep", 1)
    df.insert(4, "pp", 1)
    df["weight_dtype"] = "bf16"
    df["kv_dtype"] = "bf16"
    df["drafter"] = np.where(df["op"] == "draft", DRAFTER, None)
    df["hardware"] = hw.name
    df["machine"] = "synthetic (specsim cost model)"
    return df


def make_engine_trace(
    rng: np.random.Generator,
    hw: HardwareSpec | None = None,
    noise: float = NOISE,
    n_steps: int = 400,
    ks=(0, 1, 3, 5),
    alpha: float = TRUE_ALPHA,
    rl_steps=None,
    stale_alpha0: float = TRUE_STALE_ALPHA0,
    stale_rate: float = TRUE_STALE_RATE,
    model_name: str = MODEL,
    batches=None,
) -> pd.DataFrame:
    """Engine steps: step_s from step_cost (+ noise); tokens from per-sequence acceptance draws.

    rl_steps: if given, each step is assigned an RL step from this list and acceptance follows
    alpha(v) = stale_alpha0 * exp(-stale_rate * v) instead of the constant `alpha`.
    batches: if given, the active batch sizes to cycle through (else drawn: half log-uniform, half uniform).
    """
    from specsim.workload.acceptance.drafter import sample_tokens_per_verify

    hw = hw or true_hardware()
    model = load_model(model_name)
    drafter = drafter_arch(DRAFTER, model)
    layout = ParallelLayout(tp=1)
    # half the steps log-uniform in 1..256 (the shrinking tail), half uniform (the full-batch phase)
    log_uniform = np.rint(np.exp(rng.uniform(0, np.log(256), n_steps)))
    uniform = rng.integers(1, 257, n_steps)
    batch = np.clip(np.where(rng.random(n_steps) < 0.5, log_uniform, uniform), 1, 256).astype(int)
    if batches is not None:  # a given set of batch sizes, cycled
        batch = np.resize(np.asarray(batches, dtype=int), n_steps)
    ctx_per_seq = rng.uniform(256, 8192, n_steps)
    k = rng.choice(np.asarray(ks), n_steps)
    steps = None if rl_steps is None else rng.choice(np.asarray(rl_steps), n_steps)
    rows = []
    clock = 0.0
    for i in range(n_steps):
        n, kk = int(batch[i]), int(k[i])
        total_ctx = float(np.rint(n * ctx_per_seq[i]))
        t = float(step_cost(model, drafter if kk else None, hw, layout, n, kk).time_s(total_ctx))
        t *= float(_noise(rng, 1, noise)[0])
        clock += t
        if kk:
            a = alpha if steps is None else stale_alpha0 * np.exp(-stale_rate * steps[i])
            emitted = int(sample_tokens_per_verify(rng, np.full(n, a), kk).sum())
        else:
            emitted = n
        row = {
            "time_s": clock,
            "step_s": t,
            "active_batch": n,
            "total_context_tokens": total_ctx,
            "k": kk,
            "tokens_emitted": emitted,
            "accepted_tokens": emitted - n,
            "model": model_name,
            "tp": 1,
            "drafter": DRAFTER if kk else None,
        }
        if steps is not None:
            row["rl_step"] = int(steps[i])
        rows.append(row)
    return pd.DataFrame(rows)


def make_length_trace(
    rng: np.random.Generator,
    n: int = 1500,
    mu: float = TRUE_LENGTH_MU,
    sigma: float = TRUE_LENGTH_SIGMA,
    cap: int = LENGTH_CAP,
    group: int = 8,
) -> pd.DataFrame:
    """Lognormal response lengths (tokens), rounded, truncated at `cap`."""
    x = np.exp(rng.normal(mu, sigma, n))
    length = np.clip(np.rint(x), 1, cap).astype(int)
    return pd.DataFrame({"length": length, "prompt_id": [f"p{i // group:04d}" for i in range(n)], "rl_step": 0})


def make_stage_trace(rng: np.random.Generator, steps: int = 10) -> pd.DataFrame:
    """Per-RL-step stage times from arbitrary known means (AR then SD), 2 % noise."""
    rows = []
    means = {"generation_s": 120.0, "reward_s": 2.0, "logprob_s": 12.0, "train_s": 30.0, "weight_sync_s": 3.0}
    for sd in (False, True):
        for s in range(steps):
            r = {"rl_step": s}
            for key, m in means.items():
                m = m * (0.6 if sd and key == "generation_s" else 1.0)
                r[key] = float(m * np.exp(rng.normal(0, 0.02)))
            r["step_s"] = sum(r[k] for k in means)
            r["sd"] = sd
            r["tau"] = float(2.4 + rng.normal(0, 0.05)) if sd else np.nan
            rows.append(r)
    return pd.DataFrame(rows)


def _meta(what: str) -> dict:
    eff = ", ".join(f"{k}={v:g}" for k, v in TRUE_EFFICIENCY.items())
    known = what.format(
        eff=eff,
        alpha=TRUE_ALPHA,
        a0=TRUE_STALE_ALPHA0,
        rate=TRUE_STALE_RATE,
        mu=TRUE_LENGTH_MU,
        sigma=TRUE_LENGTH_SIGMA,
        cap=LENGTH_CAP,
        noise=NOISE,
    )
    return {
        "comment": f"synthetic, generated from known parameters: {known}. NOT a measurement: written by "
        f"calibration/traces/synthetic/make_synthetic.py (seed {SEED}) from specsim's own models.",
        "synthetic": "true",
    }


def build_all() -> dict[str, tuple[str, pd.DataFrame, dict]]:
    """file name -> (kind, frame, header metadata). Deterministic (fixed seed)."""
    rng = np.random.default_rng(SEED)
    return {
        "h200_qwen3_8b_kernel.csv": (
            "kernel",
            make_kernel_trace(rng),
            _meta(f"{HARDWARE} efficiency {{eff}}; {MODEL}, tp 1/2/4; multiplicative lognormal noise sigma={{noise}}"),
        ),
        "h200_qwen3_8b_engine.csv": (
            "engine",
            make_engine_trace(rng),
            _meta(
                f"{HARDWARE} efficiency {{eff}}; {MODEL} tp 1, {DRAFTER} drafter; alpha={{alpha}} (no position decay); "
                "step time noise sigma={noise}"
            ),
        ),
        "qwen3_8b_stale_engine.jsonl": (
            "engine",
            make_engine_trace(rng, n_steps=160, ks=(3,), rl_steps=range(0, 101, 10)),
            _meta(f"{HARDWARE} efficiency {{eff}}; acceptance alpha(v) = {{a0}} * exp(-{{rate}} * rl_step), k=3"),
        ),
        "lengths.csv": (
            "lengths",
            make_length_trace(rng),
            _meta("lognormal mu={mu}, sigma={sigma} (tokens), rounded, truncated at cap {cap}"),
        ),
        "stages.csv": (
            "stage",
            make_stage_trace(rng),
            _meta(
                "stage means generation 120 s (SD: x0.6), reward 2 s, logprob 12 s, train 30 s, "
                "weight sync 3 s; 2 % noise"
            ),
        ),
    }


def main(argv=None) -> int:
    from specsim.calibrate.traces.io import read_trace, write_trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE), help="folder to write into (default: this folder)")
    ap.add_argument("--check", action="store_true", help="compare the files in --out with a fresh generation")
    args = ap.parse_args(argv)
    out = Path(args.out)
    bad = 0
    for name, (kind, df, meta) in build_all().items():
        path = out / name
        if args.check:
            got = read_trace(path)
            same = got.shape[0] == df.shape[0] and np.allclose(
                got.select_dtypes("number").to_numpy(float),
                df[got.select_dtypes("number").columns].to_numpy(float),
                rtol=1e-12,
                equal_nan=True,
            )
            print(f"{'ok ' if same else 'DIFF'} {path}")
            bad += not same
        else:
            write_trace(df, path, kind, meta)
            print(f"wrote {path} ({len(df)} rows, {path.stat().st_size / 1024:.1f} KB)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
