"""Hardware profiles: frozen per-GPU specs loaded from `hardware_profiles/*.yaml`.

A profile is the published peak numbers (each with its source) plus the *fitted* efficiency
factors that turn peaks into achieved rates. Units are SI internally (FLOP/s, bytes, bytes/s, s);
the YAML uses the units vendors quote (TFLOP/s, GB, TB/s, GB/s, Gb/s, µs, ms) and says so in
the key name.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml

from specsim import inputs
from specsim.catalog.sd_costs import SDCosts, load_sd_costs
from specsim.errors import SpecError, YamlTooLarge, load_yaml_text, short_repr

PROFILE_DIR = Path(__file__).resolve().parent / "hardware_profiles"

DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "fp4": 0.5, "int4": 0.5}

#: bytes of one datasheet "GB" of GPU memory: HBM is built of binary-sized stacks (H100: five 16 GiB
#: HBM3 stacks), so the "80 GB" of an H100 is 80 GiB; nvidia-smi reports the devices' totals within
#: 0.6 % of hbm_gb GiB (calibration/published/gpu_memory_totals.csv: A100-SXM4-80GB 81,920 MiB, H100
#: 81,559, H200 143,771, H20 97,871, B200 183,359, GB200 189,471)
HBM_GB_BYTES = 2.0**30
#: the share of that capacity CUDA hands to a process (torch.cuda.mem_get_info's total, which vLLM's
#: `gpu_memory_utilization` multiplies and a trainer allocates from): the rest is nvidia-smi's
#: "reserved" memory and the rows the driver keeps back. Measured on an H200 (driver 580.159.04):
#: 150,109,880,320 bytes = 139.80 GiB of 141 (0.9915; nvidia-smi 143,771 MiB total, 616 MiB
#: reserved); H100 80 GB in torch's out-of-memory messages: 79.18-79.33 GiB of 80 (0.990-0.992)
CUDA_VISIBLE_FRACTION = 0.991


@dataclass(frozen=True)
class Efficiency:
    """Achieved fraction of peak, and fixed costs, that calibration fits per hardware profile.

    compute: achieved / peak dense FLOP/s for GEMMs and attention math.
    memory: achieved / peak HBM bandwidth for weight and KV streaming.
    comm: achieved / link bandwidth for NCCL collectives.
    step_overhead_s: fixed time of one engine step (scheduler, sampler, launches).
    per_seq_overhead_s: extra step time per running sequence (CPU bookkeeping).
    inprocess_seq_overhead_s: host time per running sequence per step that an engine whose core
        runs in its caller's process pays on top (`rollout.inprocess_engine`): vLLM's frontend
        output processing (the sampled token's logprob made into Python objects, the request's
        state updated) then runs serially with every engine step instead of in a process of its
        own. Optional in a profile (0 when absent).
    draft_overhead_s: fixed time of one draft pass (launch, proposal bookkeeping).
    train_mfu: model-FLOPs utilisation of training forward+backward.
    """

    compute: float
    memory: float
    comm: float
    step_overhead_s: float
    per_seq_overhead_s: float
    draft_overhead_s: float
    train_mfu: float
    inprocess_seq_overhead_s: float = 0.0


@dataclass(frozen=True)
class GemmFit:
    """Achieved GEMM rates fitted to measured kernels of one math dtype (see KernelFit).

    t(m, n, k) = latency_s + m · token_s + max(2mnk / (peak · flops_eff(m)), bytes / (hbm_bw · weight_bw_eff)),
    flops_eff(m) = flops_eff_max · m / (m + m_half_tokens): small-m GEMMs stream weights and
    leave the tensor cores idle; large-m GEMMs approach the plateau flops_eff_max.
    token_s: a per-token (per row of the activation) cost independent of n and k: the fp8 kernels
    time the dynamic quantisation of their bf16 input, ~7.5 ns/token on H100..GB200 (vLLM 0.24
    gemm_perf, fp8 rows with n = k = 256: 245 µs at m = 32768 where bf16 takes 11 µs); ~0 for bf16.
    """

    latency_s: float
    flops_eff_max: float
    m_half_tokens: float
    weight_bw_eff: float
    token_s: float = 0.0

    def flops_eff(self, m):
        m = np.maximum(np.asarray(m, dtype=float) if np.ndim(m) else float(m), 1.0)
        return self.flops_eff_max * m / (m + self.m_half_tokens)


def moe_shape_key(hidden: int, expert_ffn: int, experts: int, top_k: int) -> str:
    """Key of one MoE shape in `kernel_fit.moe_shapes`, e.g. 'h4096_i1536_e128_k8'."""
    return f"h{int(hidden)}_i{int(expert_ffn)}_e{int(experts)}_k{int(top_k)}"


@dataclass(frozen=True)
class MultiTokenAttentionFit:
    """Attention over the KV cache in a pass where some sequence brings more than one query token
    (an SD verify, an EAGLE-3 or MTP first draft pass over the accepted tokens, a step that mixes
    prompts with decodes), on an
    engine whose attention kernel then runs one thread block (CTA) per (sequence, query head,
    `tile_rows` query rows) over the sequence's whole cache: FlashAttention-2 as vLLM runs it on
    Ampere. FA2 packs the query heads of a KV head into one tile and splits the cache across
    blocks only when every sequence brings exactly one token (`mha_varlen_fwd`: the
    seqlen_q = 1 "ngroups swap" and `set_params_splitkv`; vLLM V1's FlashAttention backend calls
    it flash decoding, `np.all(query_lens == 1)`); otherwise paged KV forces its split-KV kernel
    with one split, kBlockM = 64 query rows per block (`run_mha_fwd_splitkv_dispatch`), which
    computes a 64-row tile for 1 + k real rows and re-reads each KV head once per query head.

    Per layer, with n_cta = sequences · query heads per GPU · ceil(q / tile_rows) blocks spread
    over `sms` multiprocessors, each block walking its sequence's c cached tokens:

        t = c · s_per_kv_token · w,   w = 1 if n_cta <= sms else ceil(n_cta / sms) / coresident_speedup

    s_per_kv_token: a block's time per cached token when it has its SM to itself (fitted);
    coresident_speedup: an SM's throughput with two blocks resident over one (fitted; the kernel's
    80 KB of shared memory per block fits two on an A100 SM). The pass takes the larger of this and
    the KV-streaming time of the decode law. Fitted on measured verify timings
    (calibrate/kernels/forward_sweep.fit_multi_token_attention); None: the decode law prices every pass
    (the other profiles' engines pack a KV head's query heads into one tile for any q: an
    assumption, with no q > 1 timings of those GPUs to test it).

    piecewise_attention_s: per layer, the time the attention op adds when a step cannot replay a
    full CUDA graph and runs piecewise graphs with attention launched eagerly between them: vLLM's
    CUDA-graph dispatcher bypasses the full graphs for a batch that uses cascade attention
    (vllm/v1/cudagraph_dispatcher.py, `dispatch(..., use_cascade_attn)`: "if a batch use cascade
    attention, bypass checking full cudagraphs"), and cascade attention runs three kernels per
    layer (prefix, suffix, merge_attn_states; vllm/v1/attention/backends/flash_attn.py
    `cascade_attention`). Fitted on decode timings that run cascade attention
    (calibrate/kernels/forward_sweep.fit_piecewise_attention); 0 where not fitted. Priced by
    cost/forward.shared_prefix_attention_s only: the simulator's RL batches hold many prompts, so
    their common prefix is below vLLM's 256-token cascade threshold.
    """

    sms: int
    tile_rows: int
    s_per_kv_token: float
    coresident_speedup: float
    piecewise_attention_s: float = 0.0
    block_s: float = 0.0

    def wave_factor(self, n_cta):
        """w above, elementwise."""
        n = np.asarray(n_cta, dtype=float)
        w = np.where(n <= self.sms, 1.0, np.ceil(n / self.sms) / self.coresident_speedup)
        return float(w) if np.ndim(w) == 0 else w


@dataclass(frozen=True)
class KernelFit:
    """Shape-dependent achieved rates fitted to measured kernel tables (`specsim calibrate
    --kernels`), each term physically named; None in a profile means the scalar efficiencies rule.

    gemm: math dtype (bf16, fp8) -> GemmFit.
    attn_latency_s, attn_per_seq_s, attn_kv_bw_eff: decode attention over a KV cache of B
      sequences, t = attn_latency_s + attn_per_seq_s · B + kv_bytes / (hbm_bw · attn_kv_bw_eff).
    moe: math dtype -> GemmFit of the grouped expert GEMMs, with m = routed tokens per expert
      (the cross-shape law: one fit over every MoE shape of the table).
    moe_shapes: shape key (`moe_shape_key`) -> math dtype -> GemmFit fitted on the table rows of
      exactly that MoE shape (the catalog's MoE models); a shape or dtype not listed falls back
      to the cross-shape `moe` law.
    provenance: free-form mapping (package, version, tables, rows, residuals) shown by `show hardware`.
    insitu_stream_factor: HBM streaming inside the engine relative to the same kernel timed alone.
      Every fitted streaming efficiency (GEMM weights, MoE expert weights, decode-attention KV) is
      multiplied by it and capped at 1 (peak): `stream_eff`. Why: the tables time each kernel
      alone, with its own ramp-up and tail; in a serving step the kernels run back to back in one
      CUDA graph, and the measured TPOT rows of every engine and GPU scale with 1/TP (the share
      of the step that streams per-GPU bytes) 6-34 % less steeply than the kernel sums priced
      with the isolated rates (docs/calibration.md, "in-situ streaming"). Fitted together with the engine
      overheads on the TPOT fit split (calibrate/engine_overhead.fit_overheads); 1 where a
      profile has no TPOT fit.
    multi_token_attention: MultiTokenAttentionFit where the engine's attention kernel loses its
      cache split for passes with more than one query token per sequence; None elsewhere.
    """

    gemm: dict[str, GemmFit]
    attn_latency_s: float
    attn_per_seq_s: float
    attn_kv_bw_eff: float
    moe: dict[str, GemmFit] = field(default_factory=dict)
    provenance: dict = field(default_factory=dict, compare=False)
    moe_shapes: dict[str, dict[str, GemmFit]] = field(default_factory=dict)
    insitu_stream_factor: float = 1.0
    multi_token_attention: MultiTokenAttentionFit | None = None

    def stream_eff(self, isolated_eff: float) -> float:
        """The in-situ streaming efficiency of a kernel whose isolated fit is `isolated_eff`:
        min(1, isolated_eff · insitu_stream_factor)."""
        return min(1.0, float(isolated_eff) * self.insitu_stream_factor)

    def max_useful_stream_factor(self) -> float:
        """The factor beyond which every fitted stream sits at peak (1 / the smallest isolated
        streaming efficiency): larger values change nothing."""
        effs = [self.attn_kv_bw_eff, *(g.weight_bw_eff for g in self.gemm.values()),
                *(g.weight_bw_eff for g in self.moe.values()),
                *(g.weight_bw_eff for v in self.moe_shapes.values() for g in v.values())]
        return 1.0 / min(effs)

    def gemm_for(self, math_dtype: str) -> GemmFit:
        """The GemmFit of a math dtype (fp8 falls back to bf16 when only bf16 was fitted)."""
        return self.gemm.get(math_dtype) or self.gemm.get("bf16") or next(iter(self.gemm.values()))

    def moe_for(self, math_dtype: str, shape: str | None = None) -> GemmFit:
        """The grouped-GEMM fit of `shape` (moe_shape_key) in that math dtype where one was
        fitted on that exact shape; else the cross-shape law (bf16 fallback, then dense GEMM)."""
        own = self.moe_shapes.get(shape, {}).get(math_dtype) if shape else None
        if own is not None:
            return own
        if self.moe:
            return self.moe.get(math_dtype) or self.moe.get("bf16") or next(iter(self.moe.values()))
        return self.gemm_for(math_dtype)


@dataclass(frozen=True)
class KernelTables:
    """Where a GPU's measured kernel tables are and whose engine fit it borrows: a profile's
    `kernel_tables:` block, read by `specsim calibrate kernels` (calibrate/kernels/report.py).

    system: aiconfigurator-core's folder of this GPU's tables (`systems/data/<system>/`).
    sibling: the profile of the same chip in another package (b200 <-> gb200, h100 <-> h200): its
      same-backend overheads predict this GPU's held-out TPOT rows when it has no fit rows.
    overhead_donors: profiles whose vLLM overhead fit this GPU's profile takes, first that
      determines the step overhead, when it has no vLLM TPOT fit of its own.
    """

    system: str
    sibling: str | None = None
    overhead_donors: tuple[str, ...] = ()


@dataclass(frozen=True)
class HardwareSpec:
    """One GPU type and its interconnect. Bandwidths are per GPU; NVLink per direction.
    `hbm_bytes` is the memory a process can allocate: the datasheet's `hbm_gb` binary gigabytes
    times CUDA_VISIBLE_FRACTION (what vLLM's gpu_memory_utilization and the trainer's memory check
    take their share of)."""

    name: str
    description: str
    peak_flops: dict[str, float]
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    nvlink_bw_bytes_per_s: float
    nvlink_domain_gpus: int
    scaleout_bw_bytes_per_s: float
    nvlink_latency_s: float
    scaleout_latency_s: float
    efficiency: Efficiency
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    path: str | None = field(default=None, compare=False)
    kernel_fit: KernelFit | None = None
    sd_costs: SDCosts = field(default_factory=SDCosts)  # optional `sd_costs:` block (cost/sd_costs.py)
    # per-call latency of the engines' one-shot NVLink all-reduce (cost/comm.all_reduce_s); None:
    # the profile knows only the ring/tree algorithm (`collective_latency_us.nvlink_oneshot` absent)
    nvlink_oneshot_latency_s: float | None = None
    # GPUs of one host (`gpus_per_node`; None: the NVLink domain): the engines' one-shot all-reduce
    # runs only inside one host (cost/comm.all_reduce_s)
    gpus_per_node: int | None = None

    @property
    def datasheet_hbm_gb(self) -> float:
        """The profile's `hbm_gb` as the datasheet states it (80 for an H100): hbm_bytes undone."""
        return self.hbm_bytes / (HBM_GB_BYTES * CUDA_VISIBLE_FRACTION)
    # GPU <-> host memory, bytes/s per direction (`host_link_gbps_per_direction`; None: not given)
    host_bw_bytes_per_s: float | None = None
    # the trainer's host time of one layer pass, and the extra of an MoE layer's (`trainer:` block)
    train_layer_overhead_s: float = 0.0
    train_moe_layer_overhead_s: float = 0.0
    # how a CUDA device name names this GPU (`device_names`: substrings, e.g. "H100"; `specsim
    # calibrate collect` picks the profile whose longest name the device's contains), and where its
    # measured kernel tables are (`kernel_tables:`, KernelTables); neither enters any cost
    device_names: tuple[str, ...] = field(default=(), compare=False)
    kernel_tables: KernelTables | None = field(default=None, compare=False)

    def flops_per_s(self, dtype: str) -> float:
        """Peak dense FLOP/s for a math dtype; 4-bit weights run W4A16 at the bf16 rate."""
        if dtype in ("int4", "fp4") and dtype not in self.peak_flops:
            dtype = "bf16"
        if dtype == "int8" and "int8" not in self.peak_flops:
            dtype = "fp8"
        if dtype == "fp16":
            dtype = "bf16"
        if dtype not in self.peak_flops:
            raise SpecError("dtype", dtype, f"one of {sorted(self.peak_flops)} on {self.name}")
        return self.peak_flops[dtype]

    def with_efficiency(self, **changes: float) -> HardwareSpec:
        """A copy with some efficiency factors replaced (used by calibration)."""
        return replace(self, efficiency=replace(self.efficiency, **changes))

    def with_insitu_stream_factor(self, factor: float) -> HardwareSpec:
        """A copy whose kernel fit streams at `factor` times its isolated rates (KernelFit;
        the profile itself when it has no kernel fit)."""
        if self.kernel_fit is None:
            return self
        return replace(self, kernel_fit=replace(self.kernel_fit, insitu_stream_factor=float(factor)))


_EFF_KEYS = {
    "compute": ("compute", 1.0),
    "memory": ("memory", 1.0),
    "comm": ("comm", 1.0),
    "step_overhead_ms": ("step_overhead_s", 1e-3),
    "per_seq_overhead_us": ("per_seq_overhead_s", 1e-6),
    "draft_overhead_ms": ("draft_overhead_s", 1e-3),
    "train_mfu": ("train_mfu", 1.0),
}
#: efficiency keys a profile may leave out (0 when absent)
_EFF_OPTIONAL = {"inprocess_seq_overhead_us": ("inprocess_seq_overhead_s", 1e-6)}


def list_hardware() -> list[str]:
    """Names of the bundled hardware profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def resolve_profile_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not p.is_file():
            raise SpecError("hardware", name_or_path, "a bundled profile name or an existing profile YAML file")
        return p
    candidate = PROFILE_DIR / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    lowered = {n.lower(): n for n in list_hardware()}   # rel (#15 row 16): names are case-insensitive
    if name_or_path.lower() in lowered:
        return PROFILE_DIR / f"{lowered[name_or_path.lower()]}.yaml"
    names = list_hardware()
    close = difflib.get_close_matches(name_or_path, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise SpecError("hardware", name_or_path, f"one of {names} or a path to a profile YAML{hint}")


#: what a profile may hold at the top level, and the bounds of its numbers (YAML units): each
#: number is finite and inside (lo, hi] ([lo, hi] where the third element says so). The bounds
#: are plausible physical ranges from datasheets, with room on both sides for GPUs to come and
#: for old or small ones -- a value outside is a typo (a unit off by 10^3) or a corruption, and
#: would price steps of 10^300 s or of nothing:
#:
#: * peak_dense_tflops [1, 50,000]: a T4 gives 65 (fp16), an H100 SXM 989 (bf16), a B200 9,000
#:   (dense fp4), GB300 15,000 (dense fp4);
#: * hbm_gb [4, 4,096]: V100 16 GB to B300 288 GB (HBM4 stacks on announced parts: 1 TB);
#: * hbm_tbps [0.1, 100]: a T4's GDDR6 0.32 TB/s, V100 0.9, H100 3.35, B200 8 (Rubin Ultra's
#:   announced 32);
#: * nvlink_gbps_per_direction [10, 10,000] GB/s: PCIe 3.0 x16 16 GB/s to NVLink 5's 900 GB/s per
#:   direction (NVLink 6: 1,800);
#: * nvlink_domain_gpus [1, 4,096]: one GPU to NVL72 (NVL576 announced);
#: * scaleout_gbit_per_s [1, 100,000] Gbit/s per GPU: 1 GbE up to 1.6 Tb/s NICs (ConnectX-8:
#:   800 Gb/s), several per GPU;
#: * collective_latency_us [0.01, 10,000] µs: NVLink all-reduce latencies of 2-8 µs, InfiniBand
#:   and Ethernet 2-30 µs (measured profiles here: 4-25);
#: * host_link_gbps_per_direction [1, 5,000] GB/s: PCIe Gen3 x16 16 GB/s to NVLink-C2C's 450 per
#:   direction per superchip;
#: * gpus_per_node [1, 4,096]: at most the NVLink domain (GB200 trays: 4, HGX: 8);
#: * trainer.*_overhead_ms [0, 1,000] ms per layer pass (fitted values: ~5 ms).
PROFILE_KEYS = ("name", "description", "peak_dense_tflops", "hbm_gb", "hbm_tbps", "nvlink_gbps_per_direction",
                "nvlink_domain_gpus", "scaleout_gbit_per_s", "collective_latency_us", "efficiency", "kernel_fit",
                "sd_costs", "calibration", "host_link_gbps_per_direction", "trainer", "gpus_per_node",
                "device_names", "kernel_tables")   # calibration: provenance a calibrated copy records (not read)
_BOUNDS = {
    "peak_dense_tflops": (1.0, 5e4, True, "TFLOP/s"), "hbm_gb": (4.0, 4096.0, True, "GB"),
    "hbm_tbps": (0.1, 100.0, True, "TB/s"), "nvlink_gbps_per_direction": (10.0, 1e4, True, "GB/s"),
    "nvlink_domain_gpus": (1.0, 4096.0, True, "GPUs"), "scaleout_gbit_per_s": (1.0, 1e5, True, "Gbit/s"),
    "collective_latency_us": (0.01, 1e4, True, "µs"),
    "efficiency.compute": (1e-3, 1.0, True, ""), "efficiency.memory": (1e-3, 1.0, True, ""),
    "efficiency.comm": (1e-3, 1.0, True, ""), "efficiency.train_mfu": (1e-3, 1.0, True, ""),
    "efficiency.step_overhead_ms": (0.0, 1e4, True, "ms"), "efficiency.per_seq_overhead_us": (0.0, 1e5, True, "µs"),
    "efficiency.draft_overhead_ms": (0.0, 1e4, True, "ms"),
    # host time per sequence per step: Python object work of µs to a few hundred µs
    "efficiency.inprocess_seq_overhead_us": (0.0, 1e4, True, "µs"),
    # GPU <-> host: PCIe Gen3 x16 (16 GB/s) is the least a datacenter GPU has, 5 TB/s is above
    # any chip-to-chip link shipped (NVLink-C2C 900 GB/s)
    "host_link_gbps_per_direction": (1.0, 5000.0, True, "GB/s"),
    "gpus_per_node": (1.0, 4096.0, True, "GPUs"),
    "trainer.layer_overhead_ms": (0.0, 1e3, True, "ms"), "trainer.moe_layer_overhead_ms": (0.0, 1e3, True, "ms"),
}
#: the optional `trainer:` block: host-side time of one layer pass of the training framework
TRAINER_KEYS = ("layer_overhead_ms", "moe_layer_overhead_ms")
_LATENCY_KEYS = ("nvlink", "scaleout", "nvlink_oneshot")
#: the optional `kernel_tables:` block (KernelTables)
KERNEL_TABLES_KEYS = ("system", "sibling", "overhead_donors")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_ENTRY_KEYS = ("value", "source")


def _finite(v) -> bool:
    """A finite number (an int too large for a float is not)."""
    try:
        return math.isfinite(float(v))
    except (OverflowError, TypeError, ValueError):
        return False


def _unknown(block: dict, allowed, prefix: str, where: str) -> None:
    """Refuse a key outside `allowed`, with a did-you-mean."""
    for key, value in block.items():
        if key not in allowed:
            close = difflib.get_close_matches(str(key), [str(a) for a in allowed], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"{prefix}{key}", value, f"a known profile field: unknown field {key!r}; allowed "
                            f"here: {list(allowed)}{hint}", where)


def _bounds_text(lo: float, hi: float, closed: bool, unit: str) -> str:
    return f"a finite number in {'[' if closed else '('}{lo:g}, {hi:g}]" + (f" {unit}" if unit else "")


def _num(doc: dict, key: str, where: str, bounds_key: str | None = None, prefix: str = "") -> tuple[float, str]:
    """A profile number (plain, or `{value, source}`) inside its bounds (see _BOUNDS)."""
    name = prefix + key
    entry = doc.get(key)
    if isinstance(entry, dict):
        _unknown(entry, _ENTRY_KEYS, f"{name}.", where)
        value, source = entry.get("value"), entry.get("source", "")
        if isinstance(source, (dict, list)):
            raise SpecError(f"{name}.source", source, "a text naming where the value comes from", where)
        source = str(source)
    else:
        value, source = entry, ""
    lo, hi, closed, unit = _BOUNDS[bounds_key or name]
    allowed = _bounds_text(lo, hi, closed, unit) + " (as `value:` with a `source:`)"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(name, value, allowed, where)
    if not _finite(value) or value > hi or value < lo or (value == lo and not closed):
        raise SpecError(name, value, allowed, where)
    return float(value), source


def load_hardware(name_or_path: str) -> HardwareSpec:
    """Load a bundled profile by name (`gb200`) or a user profile by path.

    Parsed profiles are memoised by path and content (:func:`_parse_profile`): a sweep or a
    capacity plan resolves many worlds on one profile, and parsing its YAML was a fifth of a
    small run's time. The file is read every time, so one edited on disk is parsed again; the
    returned spec is frozen, so callers cannot see each other's changes."""
    path = resolve_profile_path(name_or_path)
    return _parse_profile(str(path), inputs.read_bytes(path, "hardware", "hardware profile YAML",
                                                       inputs.MAX_YAML_BYTES))


@lru_cache(maxsize=32)
def _parse_profile(where: str, data: bytes) -> HardwareSpec:
    """The profile whose file at `where` holds `data` (both are the cache key)."""
    path = Path(where)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError("hardware", data[exc.start: exc.start + 8],
                        f"a UTF-8 YAML profile; the byte at offset {exc.start} is not UTF-8", where) from None
    try:
        doc = load_yaml_text(text)
    except yaml.YAMLError as exc:
        raise SpecError("hardware", "<unparseable>", f"a valid YAML profile ({inputs.yaml_problem(exc)})",
                        where) from None
    except (YamlTooLarge, RecursionError) as exc:
        raise SpecError("hardware", "<aliases>", f"a YAML profile of plain values ({exc.__class__.__name__})",
                        where) from None
    if not isinstance(doc, dict):
        raise SpecError("hardware", short_repr(doc), "a YAML mapping with the profile fields", where)
    _unknown(doc, PROFILE_KEYS, "", where)
    for key in ("name", "description"):
        if key in doc and not isinstance(doc[key], str):
            raise SpecError(key, doc[key], "a text", where)
    sources: dict[str, str] = {}

    def num(key: str, sub: dict | None = None, prefix: str = "", bounds_key: str | None = None) -> float:
        v, s = _num(sub if sub is not None else doc, key, where, bounds_key, prefix)
        sources[prefix + key] = s
        return v

    flops_doc = doc.get("peak_dense_tflops")
    if not isinstance(flops_doc, dict) or "bf16" not in flops_doc:
        raise SpecError("peak_dense_tflops", flops_doc, "a mapping of dtype -> {value, source} including bf16", where)
    _unknown(flops_doc, sorted(DTYPE_BYTES), "peak_dense_tflops.", where)
    peak = {dt: num(dt, flops_doc, "peak_dense_tflops.", "peak_dense_tflops") * 1e12 for dt in flops_doc}
    lat = doc.get("collective_latency_us")
    if not isinstance(lat, dict) or not {"nvlink", "scaleout"} <= set(lat):
        raise SpecError("collective_latency_us", lat, "a mapping with nvlink and scaleout (and optionally "
                        "nvlink_oneshot), each {value, source} in µs", where)
    _unknown(lat, _LATENCY_KEYS, "collective_latency_us.", where)
    eff_doc = doc.get("efficiency")
    if not isinstance(eff_doc, dict):
        raise SpecError("efficiency", eff_doc, f"a mapping with {sorted(_EFF_KEYS)}", where)
    _unknown(eff_doc, [*_EFF_KEYS, *_EFF_OPTIONAL], "efficiency.", where)
    eff = {}
    for key, (attr, scale) in _EFF_KEYS.items():
        eff[attr] = num(key, eff_doc, "efficiency.") * scale
    for key, (attr, scale) in _EFF_OPTIONAL.items():
        if key in eff_doc:
            eff[attr] = num(key, eff_doc, "efficiency.") * scale
    trainer_doc = doc.get("trainer") or {}
    if not isinstance(trainer_doc, dict):
        raise SpecError("trainer", trainer_doc, f"a mapping with {list(TRAINER_KEYS)}", where)
    _unknown(trainer_doc, TRAINER_KEYS, "trainer.", where)
    trainer = {k: num(k, trainer_doc, "trainer.") * 1e-3 if k in trainer_doc else 0.0 for k in TRAINER_KEYS}
    domain = num("nvlink_domain_gpus")
    if domain != int(domain):
        raise SpecError("nvlink_domain_gpus", domain, "a whole number of GPUs", where)
    return HardwareSpec(
        name=str(doc.get("name", path.stem)),
        description=str(doc.get("description", "")),
        peak_flops=peak,
        hbm_bytes=num("hbm_gb") * HBM_GB_BYTES * CUDA_VISIBLE_FRACTION,
        hbm_bw_bytes_per_s=num("hbm_tbps") * 1e12,
        nvlink_bw_bytes_per_s=num("nvlink_gbps_per_direction") * 1e9,
        nvlink_domain_gpus=int(domain),
        scaleout_bw_bytes_per_s=num("scaleout_gbit_per_s") * 1e9 / 8,
        nvlink_latency_s=num("nvlink", lat, "collective_latency_us.", "collective_latency_us") * 1e-6,
        scaleout_latency_s=num("scaleout", lat, "collective_latency_us.", "collective_latency_us") * 1e-6,
        efficiency=Efficiency(**eff),
        sources=sources,
        path=where,
        kernel_fit=_kernel_fit(doc.get("kernel_fit"), where),
        sd_costs=load_sd_costs(doc.get("sd_costs"), where),
        nvlink_oneshot_latency_s=(num("nvlink_oneshot", lat, "collective_latency_us.", "collective_latency_us") * 1e-6
                                  if "nvlink_oneshot" in lat else None),
        host_bw_bytes_per_s=(num("host_link_gbps_per_direction") * 1e9 if "host_link_gbps_per_direction" in doc
                             else None),
        gpus_per_node=_gpus_per_node(doc, where, num) if "gpus_per_node" in doc else None,
        train_layer_overhead_s=trainer["layer_overhead_ms"],
        train_moe_layer_overhead_s=trainer["moe_layer_overhead_ms"],
        device_names=_names(doc.get("device_names", []), "device_names", where),
        kernel_tables=_kernel_tables(doc["kernel_tables"], where) if "kernel_tables" in doc else None,
    )


def _name(value, field_name: str, where: str) -> str:
    """A short name: letters, digits, `_ . -` (a profile, a GPU, a table folder)."""
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise SpecError(field_name, value, "a name of letters, digits, '_', '.' or '-' (1-64 characters)", where)
    return value


def _names(value, field_name: str, where: str) -> tuple[str, ...]:
    """A list of short names, e.g. `device_names: [H100]`."""
    if not isinstance(value, list):
        raise SpecError(field_name, value, "a list of names of letters, digits, '_', '.' or '-'", where)
    return tuple(_name(v, f"{field_name}[{i}]", where) for i, v in enumerate(value))


def _kernel_tables(block, where: str) -> KernelTables:
    """`kernel_tables: {system, sibling?, overhead_donors?}` (KernelTables)."""
    block = _block(block, "kernel_tables", KERNEL_TABLES_KEYS, "system, sibling, overhead_donors", where)
    sibling = block.get("sibling")
    return KernelTables(_name(block.get("system"), "kernel_tables.system", where),
                        None if sibling is None else _name(sibling, "kernel_tables.sibling", where),
                        _names(block.get("overhead_donors", []), "kernel_tables.overhead_donors", where))


def _gpus_per_node(doc: dict, where: str, num) -> int:
    """`gpus_per_node`: a whole number of GPUs, at most the NVLink domain's."""
    n = num("gpus_per_node")
    if n != int(n) or n > num("nvlink_domain_gpus"):
        raise SpecError("gpus_per_node", n, "a whole number of GPUs, at most nvlink_domain_gpus", where)
    return int(n)


#: `kernel_fit:` (written by `specsim calibrate kernels`, YAML units): what each block may hold
#: and the bounds of its numbers, as _BOUNDS (lo, hi, lower end closed, unit). Generous physical
#: ranges around what the calibration fits (calibrate/kernels/terms.py: latencies within 1 ms, m_half
#: within 10^5 tokens): a 10-second GEMM launch or a 200 % efficiency is a typo, not a GPU.
KERNEL_FIT_KEYS = ("gemm", "decode_attention", "moe", "moe_shapes", "insitu_stream_factor", "multi_token_attention",
                   "provenance")
_GEMM_BOUNDS = {
    "latency_us": (0.0, 1e4, True, "µs"), "flops_eff_max": (0.0, 1.0, False, ""),
    "m_half_tokens": (0.0, 1e7, True, "tokens"), "weight_bw_eff": (0.0, 1.0, False, ""),
    "per_token_ns": (0.0, 1e4, True, "ns"),
}
_GEMM_REQUIRED = ("latency_us", "flops_eff_max", "m_half_tokens", "weight_bw_eff")
_ATTN_BOUNDS = {"latency_us": (0.0, 1e4, True, "µs"), "per_seq_us": (0.0, 1e3, True, "µs"),
                "kv_bw_eff": (0.0, 1.0, False, "")}
_INSITU_BOUNDS = (0.0, 10.0, False, "(in-situ over isolated HBM streaming rate; 1: as timed alone)")
_MTA_BOUNDS = {"sms": (1.0, 1e5, True, "multiprocessors"), "tile_rows": (1.0, 4096.0, True, "query rows"),
               "s_per_kv_token_ns": (0.0, 1e6, False, "ns per cached token per block"),
               "coresident_speedup": (1.0, 2.0, True, "(an SM's throughput with two resident blocks over one)"),
               "piecewise_attention_us": (0.0, 1e4, True, "us per layer (optional, default 0)"),
               "block_ns": (0.0, 1e6, True, "ns per (sequence, KV head) block per layer (optional, default 0)")}
_MTA_OPTIONAL = {"piecewise_attention_us": 0.0, "block_ns": 0.0}
_SHAPE_KEY = re.compile(r"h\d+_i\d+_e\d+_k\d+")


def _fit_num(block: dict, key: str, bounds: tuple, name: str, where: str, *, whole: bool = False,
             default: float | None = None) -> float:
    """A `kernel_fit` number: plain, finite, inside its bounds (and whole where `whole`)."""
    v = block.get(key, default)
    lo, hi, closed, unit = bounds
    allowed = ("a whole number" + _bounds_text(lo, hi, closed, unit).removeprefix("a finite number")) if whole \
        else _bounds_text(lo, hi, closed, unit)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v) or v > hi or v < lo \
            or (v == lo and not closed) or (whole and v != int(v)):
        raise SpecError(name, v, allowed, where)
    return float(v)


def _block(doc, name: str, allowed_keys, what: str, where: str) -> dict:
    """A mapping inside `kernel_fit` holding only `allowed_keys`."""
    if not isinstance(doc, dict):
        raise SpecError(name, short_repr(doc), f"a mapping with {what}", where)
    _unknown(doc, allowed_keys, f"{name}.", where)
    return doc


def _gemm_fits(block, where: str, prefix: str) -> dict[str, GemmFit]:
    if block is None:
        return {}
    if not isinstance(block, dict):
        raise SpecError(prefix, short_repr(block), "a mapping of math dtype -> fitted GEMM terms", where)
    out = {}
    for dt, b in block.items():
        p = f"{prefix}.{dt}"
        if dt not in DTYPE_BYTES:
            raise SpecError(prefix, dt, f"math dtypes among {sorted(DTYPE_BYTES)}", where)
        b = _block(b, p, list(_GEMM_BOUNDS), f"{', '.join(_GEMM_REQUIRED)} (and per_token_ns)", where)
        v = {key: _fit_num(b, key, _GEMM_BOUNDS[key], f"{p}.{key}", where,
                           default=0.0 if key == "per_token_ns" else None) for key in _GEMM_BOUNDS}
        out[str(dt)] = GemmFit(latency_s=v["latency_us"] * 1e-6, flops_eff_max=v["flops_eff_max"],
                               m_half_tokens=v["m_half_tokens"], weight_bw_eff=v["weight_bw_eff"],
                               token_s=v["per_token_ns"] * 1e-9)
    return out


def _kernel_fit(doc, where: str) -> KernelFit | None:
    """Parse the optional `kernel_fit:` block (written by `specsim calibrate --kernels`): every
    block holds only its own keys, every number is finite and inside its bounds (KERNEL_FIT_KEYS,
    _GEMM_BOUNDS, _ATTN_BOUNDS, _MTA_BOUNDS); errors name the file, the field path, the value and
    what is allowed."""
    if doc is None:
        return None
    doc = _block(doc, "kernel_fit", KERNEL_FIT_KEYS, "gemm, decode_attention and optionally moe, moe_shapes, "
                 "insitu_stream_factor, multi_token_attention, provenance", where)
    gemm = _gemm_fits(doc.get("gemm"), where, "kernel_fit.gemm")
    if not gemm:
        raise SpecError("kernel_fit.gemm", doc.get("gemm"), "at least one fitted math dtype (bf16)", where)
    p = "kernel_fit.decode_attention"
    att = _block(doc.get("decode_attention"), p, list(_ATTN_BOUNDS), "latency_us, per_seq_us, kv_bw_eff", where)
    a = {key: _fit_num(att, key, b, f"{p}.{key}", where) for key, b in _ATTN_BOUNDS.items()}
    prov = doc.get("provenance") or {}
    insitu = _fit_num(doc, "insitu_stream_factor", _INSITU_BOUNDS, "kernel_fit.insitu_stream_factor", where,
                      default=1.0)
    return KernelFit(gemm=gemm, attn_latency_s=a["latency_us"] * 1e-6, insitu_stream_factor=insitu,
                     attn_per_seq_s=a["per_seq_us"] * 1e-6, attn_kv_bw_eff=a["kv_bw_eff"],
                     moe=_gemm_fits(doc.get("moe"), where, "kernel_fit.moe"),
                     provenance=prov if isinstance(prov, dict) else {"note": str(prov)},
                     moe_shapes=_moe_shapes(doc.get("moe_shapes"), where),
                     multi_token_attention=_multi_token_attention(doc.get("multi_token_attention"), where))


def _multi_token_attention(block, where: str) -> MultiTokenAttentionFit | None:
    """`kernel_fit.multi_token_attention` (MultiTokenAttentionFit; written by
    specsim calibrate a100-sweep): sms, tile_rows, s_per_kv_token_ns, coresident_speedup."""
    if block is None:
        return None
    p = "kernel_fit.multi_token_attention"
    block = _block(block, p, list(_MTA_BOUNDS), "sms, tile_rows, s_per_kv_token_ns, coresident_speedup and "
                   "optionally piecewise_attention_us and block_ns", where)
    v = {key: _fit_num(block, key, b, f"{p}.{key}", where, whole=key in ("sms", "tile_rows"),
                       default=_MTA_OPTIONAL.get(key))
         for key, b in _MTA_BOUNDS.items()}
    return MultiTokenAttentionFit(sms=int(v["sms"]), tile_rows=int(v["tile_rows"]),
                                  s_per_kv_token=v["s_per_kv_token_ns"] * 1e-9,
                                  coresident_speedup=v["coresident_speedup"],
                                  piecewise_attention_s=v["piecewise_attention_us"] * 1e-6,
                                  block_s=v["block_ns"] * 1e-9)


def _moe_shapes(block, where: str) -> dict[str, dict[str, GemmFit]]:
    """`kernel_fit.moe_shapes`: shape key (moe_shape_key) -> math dtype -> fitted grouped-GEMM terms."""
    if block is None:
        return {}
    what = "a mapping of MoE shape key (h<hidden>_i<ffn>_e<experts>_k<top_k>) -> math dtype -> fitted terms"
    if not isinstance(block, dict):
        raise SpecError("kernel_fit.moe_shapes", short_repr(block), what, where)
    for k in block:
        if not isinstance(k, str) or not _SHAPE_KEY.fullmatch(k):
            raise SpecError("kernel_fit.moe_shapes", k, f"{what}; {k!r} is not such a key", where)
    return {str(k): _gemm_fits(v, where, f"kernel_fit.moe_shapes.{k}") for k, v in block.items()}


def efficiency_to_yaml_dict(eff: Efficiency, source: str) -> dict:
    """Inverse of the loader's efficiency block, in the YAML's units, every value with `source`."""
    out = {}
    for key, (attr, scale) in _EFF_KEYS.items():
        out[key] = {"value": float(round(getattr(eff, attr) / scale, 6)), "source": source}
    return out
