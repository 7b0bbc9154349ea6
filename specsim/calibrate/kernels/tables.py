"""Measured kernel tables: locate, read and normalise them to SI units.

Source: the `aiconfigurator-core` package (optional extra `kernels`, pinned to 0.12.0), which ships
kernel timings measured on real GPUs (CUDA graphs + CUDA events, warm-up, repeats) as parquet
tables under `aiconfigurator_core/systems/data/<system>/<family>/<backend>/<version>/`. Only the
data is read (pandas/pyarrow); none of the package's modelling code is imported, and no data is
copied into this repository.

Gotchas handled here (each named where it is handled):
* `latency` is in milliseconds; we return seconds (`time_s`).
* `nccl_perf.message_size` and `custom_allreduce_perf.message_size` count *elements*, not bytes.
* generation attention keeps the KV length in the `step` column (`isl` is 1).
* `moe_perf` rows come at several token `distribution`s; `balanced` spreads the T·topk routed
  tokens evenly over the experts (every expert busy once T·topk >= E: the h100/h200 tables are
  flat in T from T = E/topk on, where uniform random routing would still hit more experts), so
  the MoE fit counts the experts it touches as min(E, T·topk) (terms.fit_moe).
* a TPOT row measured on engine version v is priced with the kernel tables of the same backend
  at the version nearest v (`table_path(..., near=v)`), per family: MoE kernels differ by version.
* gb200 collective tables stop at 4 GPUs.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pandas as pd

from specsim import inputs
from specsim.catalog.hardware import list_hardware, load_hardware
from specsim.errors import SpecError

PACKAGE = "aiconfigurator-core"
PACKAGE_VERSION = "0.12.0"
_ELEM_BYTES = {"half": 2, "bfloat16": 2, "float16": 2, "fp16": 2, "int8": 1, "fp8": 1, "float32": 4}


def systems() -> dict[str, str]:
    """The package's system folder -> bundled profile name, for each bundled profile whose
    `kernel_tables.system` names one (catalog/hardware.KernelTables), in profile-name order."""
    out = {}
    for name in list_hardware():
        tables = load_hardware(name).kernel_tables
        if tables is not None:
            out[tables.system] = name
    return out


def check_system(system: str) -> str:
    """`system` if a bundled profile names it (`--system`), else a SpecError listing those that do."""
    if system not in systems():
        raise SpecError("--system", system, f"one of {list(systems())} or 'all'")
    return system


def system_of(profile: str | None) -> str | None:
    """The system folder of a bundled profile (None: none, or no `kernel_tables:` block)."""
    if profile is None:
        return None
    tables = load_hardware(profile).kernel_tables
    return None if tables is None else tables.system


def data_root(root: str | Path | None = None) -> Path:
    """`systems/data` of the installed package (or `root`, a folder in the same layout, for tests)."""
    if root is not None:
        p = Path(root)
        if not p.is_dir():
            raise SpecError("kernels root", str(root), "an existing folder laid out as <system>/<family>/<backend>/<version>/")
        return p
    try:
        import aiconfigurator_core
    except ImportError:
        raise SpecError("--source", "aiconfigurator",
                        f"installed: pip install 'specsim[kernels]' (pins {PACKAGE}=={PACKAGE_VERSION})") from None
    import aiconfigurator_core

    return Path(aiconfigurator_core.__file__).resolve().parent / "systems" / "data"


def package_version() -> str:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "not installed"


def _version_key(name: str) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in name.replace("rc", ".").replace("post", ".").split("."))


def _version_distance(a: str, b: str) -> tuple:
    """Distance of two engine versions, most significant component first (0.12.0 is nearer 0.19.0
    than 0.24.0; 1.0.0rc3 is nearer 1.3.0rc10 than 1.3.0rc20)."""
    ka, kb = _version_key(a), _version_key(b)
    n = max(len(ka), len(kb))
    ka, kb = ka + (0,) * (n - len(ka)), kb + (0,) * (n - len(kb))
    return tuple(abs(x - y) for x, y in zip(ka, kb))


def table_path(root: Path, system: str, family: str, backend: str, table: str, near: str | None = None) -> Path | None:
    """Version folder of `family/backend` holding `table`.parquet: the newest, or with `near` the
    version nearest that engine version (ties: the newer). None when absent."""
    base = root / system / family / backend
    if not base.is_dir():
        return None
    held = [d for d in base.iterdir() if (d / f"{table}.parquet").is_file()]
    if not held:
        return None
    if near:
        best = min(held, key=lambda d: (_version_distance(d.name, near), tuple(-x for x in _version_key(d.name))))
        return best / f"{table}.parquet"
    return max(held, key=lambda d: _version_key(d.name)) / f"{table}.parquet"


def read_table(root: Path, system: str, family: str, backend: str, table: str,
               near: str | None = None) -> tuple[pd.DataFrame, str]:
    """(frame with `time_s`, source path relative to root); an empty frame when the table is absent."""
    p = table_path(root, system, family, backend, table, near)
    if p is None:
        return pd.DataFrame(), ""
    df = inputs.read_parquet_frame(p, f"{p.name}", "kernel table (Parquet)")
    if "latency" not in df.columns:
        raise SpecError(f"{p.name} columns", list(df.columns), "a `latency` column (ms)", str(p))
    df = df[pd.to_numeric(df["latency"], errors="coerce") > 0].copy()
    df["time_s"] = df["latency"].astype(float) * 1e-3  # ms -> s
    return df, str(p.relative_to(root))


#: smallest GEMM dimension specsim prices (Qwen2.5-3B's hidden 2048 split 8 ways); smaller
#: table shapes (n or k of 32..128) are launch-bound toys that would only bend the fit
GEMM_MIN_DIM = 256


def gemm_rows(df: pd.DataFrame, dtype: str) -> pd.DataFrame:
    """GEMM rows of one math dtype (bf16 = 'bfloat16', int4 = the W4A16 weight-only 'int4_wo',
    fp8 = per-tensor 'fp8', else 'fp8_block') with n and k >= GEMM_MIN_DIM."""
    if df.empty:
        return df
    df = df[(df["n"] >= GEMM_MIN_DIM) & (df["k"] >= GEMM_MIN_DIM)]
    if dtype == "bf16":
        return df[df["gemm_dtype"] == "bfloat16"]
    if dtype == "int4":
        return df[df["gemm_dtype"] == "int4_wo"]
    if dtype == "fp8_block":  # a TPOT row whose `gemm_quant_mode` is fp8_block
        return df[df["gemm_dtype"] == "fp8_block"]
    sub = df[df["gemm_dtype"] == "fp8"]
    return sub if len(sub) else df[df["gemm_dtype"] == "fp8_block"]


def decode_attention_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Full-attention decode rows with a bf16 KV cache; `kv_tokens` from the `step` column."""
    if df.empty:
        return df
    m = (df["kv_cache_dtype"] == "bfloat16") & (df.get("window_size", 0) == 0)
    out = df[m].copy()
    if "kernel_source" in out.columns and out["kernel_source"].nunique() > 1:
        # the engine uses one backend; keep the one with most rows (flashinfer on Blackwell)
        out = out[out["kernel_source"] == out["kernel_source"].value_counts().idxmax()]
    out["kv_tokens"] = out["step"].astype(float)
    return out


def moe_rows(df: pd.DataFrame, dtype: str) -> pd.DataFrame:
    """Balanced-routing MoE rows of one dtype. bf16: 'bfloat16'. fp8: block-scaled 'fp8_block'
    (how FP8 MoE checkpoints such as Qwen3-235B-A22B-FP8 are quantised), else per-tensor 'fp8'.
    fp8_tensor: per-tensor 'fp8' only (a TPOT row whose `moe_quant_mode` is 'fp8').
    Every kernel the engine picks for that dtype is kept (it chooses by layout: TP vs EP)."""
    if df.empty:
        return df
    df = df[df["distribution"] == "balanced"]
    if dtype == "bf16":
        return df[df["moe_dtype"] == "bfloat16"]
    if dtype == "fp8_tensor":
        return df[df["moe_dtype"] == "fp8"]
    sub = df[df["moe_dtype"] == "fp8_block"]
    return sub if len(sub) else df[df["moe_dtype"] == "fp8"]


def allreduce_rows(custom: pd.DataFrame, nccl: pd.DataFrame) -> pd.DataFrame:
    """All-reduce as the engine runs it: per (GPUs, bytes) the faster of the CUDA-graph custom
    all-reduce and NCCL. `message_size` counts elements: bytes = elements x element size."""
    parts = []
    if not custom.empty:
        c = custom[custom.get("backend", "") .astype(str).str.contains("graph")] if "backend" in custom else custom
        parts.append(c.assign(nbytes=c["message_size"].astype(float) * c["allreduce_dtype"].map(_ELEM_BYTES).fillna(2)))
    if not nccl.empty:
        n = nccl[(nccl["op_name"] == "all_reduce") & (nccl["nccl_dtype"].isin(["half", "bfloat16", "float16"]))]
        parts.append(n.assign(nbytes=n["message_size"].astype(float) * 2))
    if not parts:
        return pd.DataFrame(columns=["num_gpus", "nbytes", "time_s"])
    df = pd.concat([p[["num_gpus", "nbytes", "time_s"]] for p in parts], ignore_index=True)
    return df.groupby(["num_gpus", "nbytes"], as_index=False)["time_s"].min()
