"""Collectives over the NVLink domain or the scale-out network.

Bandwidth-optimal (ring) formulas with a per-call latency term, as NCCL's performance notes
describe (bus bandwidth = algorithm bandwidth · 2(n−1)/n for all-reduce):

    all_reduce  t = hop_lat(n) + 2(n−1)/n · bytes / (bw · eff_comm)               (ring / tree)
                within one NVLink domain of n ≤ 8 GPUs, where the profile has a one-shot latency,
                the faster of that and t₁ = lat₁ + (n−1) · bytes / (bw · eff_comm)   (one-shot)
    all_gather / reduce_scatter  t = hop_lat(n) + (n−1)/n · bytes / (bw · eff_comm)
    hop_lat(n) = lat · ⌈log2 n⌉ inside one NVLink domain; across domains (NCCL's hierarchical
                 tree) lat_nvlink · ⌈log2 d⌉ + lat_scaleout · ⌈log2 ⌈n/d⌉⌉, d = the domain's GPUs
    all_to_all  t = lat_step + (n−1)/n · bytes_per_gpu / (bw · eff_comm)        (inside one domain)
                across domains, each GPU sends every peer its share directly: the d − 1 peers of its
                own domain over NVLink and the n − d others over its NIC, at once (NCCL's all-to-all
                is n send/recv pairs; the group's ranks fill whole domains, d = min(n, domain GPUs)):
                t = lat_step + max((n−d)/n · bytes / bw_scaleout, (d−1)/n · bytes / bw_nvlink)
    broadcast (pipelined)  t = lat · ⌈log2 n⌉ + bytes / (bw · eff_comm)

A group of n GPUs communicates over NVLink when it fits in one NVLink domain; otherwise the
slowest link it crosses is the per-GPU scale-out NIC (hierarchical algorithms still push the
cross-domain share of the data through it). `bytes` is the buffer size on each GPU.

Why the one-shot branch (#11): serving engines all-reduce small activations with a custom kernel
in which every GPU reads its n−1 peers' buffers over NVSwitch in one step (vLLM
`custom_all_reduce`, TensorRT-LLM's one-shot all-reduce, SGLang's copy of vLLM's), so its latency
does not grow with ⌈log2 n⌉ but its traffic grows with n−1; NCCL's ring/tree wins for large
messages, and the engine uses whichever is faster. The measured tables show it: on H100,
an 8 KB all-reduce takes 3.5 / 3.6 / 3.9 µs on 2 / 4 / 8 GPUs, which the log2-hop law alone fits
as 2.6 / 5.1 / 7.6 µs. The custom kernels exist for 2, 4, 6 and 8 GPUs only (vLLM's
`_SUPPORTED_WORLD_SIZES`), so larger groups use the ring/tree law; and only inside one host (vLLM's
`CustomAllreduce` disables itself for a group that spans nodes, as TP 8 does on GB200 NVL72, whose
compute trays hold 4 GPUs: the profile's `gpus_per_node`). An all-to-all and a
point-to-point send are one step over the switch, like the one-shot kernel: within an NVLink
domain their per-call latency `lat_step` is the one-shot latency where the profile has one (the
only measured one-step NVLink latency), else the hop latency.
"""

from __future__ import annotations

import numpy as np

from specsim.catalog.hardware import HardwareSpec


def link(hw: HardwareSpec, group_gpus: int) -> tuple[float, float]:
    """(bytes/s achieved, latency s) of the slowest link a group of `group_gpus` uses."""
    if group_gpus <= hw.nvlink_domain_gpus:
        return hw.nvlink_bw_bytes_per_s * hw.efficiency.comm, hw.nvlink_latency_s
    return hw.scaleout_bw_bytes_per_s * hw.efficiency.comm, hw.scaleout_latency_s


def pool_link(a: HardwareSpec, b: HardwareSpec, group_gpus: int) -> tuple[float, float]:
    """(bytes/s achieved, latency s) of a group spanning a pool of profile `a` and one of profile
    `b`. Same profile: :func:`link`. Two profiles are two kinds of machine, never one NVLink
    domain, so the group crosses both scale-out networks and moves at the slower one:
        bw = min(bw_scaleout(a) · eff_comm(a), bw_scaleout(b) · eff_comm(b)),
        lat = max(lat_scaleout(a), lat_scaleout(b))."""
    if a.name == b.name:
        return link(a, group_gpus)
    return (min(a.scaleout_bw_bytes_per_s * a.efficiency.comm, b.scaleout_bw_bytes_per_s * b.efficiency.comm),
            max(a.scaleout_latency_s, b.scaleout_latency_s))


def node_gpus(hw: HardwareSpec) -> int:
    """GPUs of one host, each with its own scale-out NIC: `gpus_per_node`, else the NVLink domain
    (HGX: the 8 GPUs of a baseboard share one host and its 8 NICs)."""
    return int(hw.gpus_per_node or hw.nvlink_domain_gpus)


def node_scaleout_s(nbytes, a: HardwareSpec, b: HardwareSpec | None = None):
    """Time for `nbytes` to cross between hosts when NCCL spreads them over every NIC of a host:
    NCCL builds one ring (channel) per NIC, so a ring collective or broadcast across hosts moves a
    host's share through all its NICs at once (nccl-tests' bus bandwidth across nodes is the host's
    NIC total, not one NIC's):  t = nbytes / (node_gpus · bw_scaleout · eff_comm), at the slower of
    the two profiles' hosts when a pool of profile `b` takes part (as :func:`pool_link`)."""
    bw = min(node_gpus(h) * h.scaleout_bw_bytes_per_s * h.efficiency.comm for h in (a, b or a))
    return nbytes / bw


def _zero(x):
    return 0.0 if np.ndim(x) == 0 else np.zeros_like(np.asarray(x, dtype=float))


def _log2_steps(n: int) -> float:
    return float(np.ceil(np.log2(max(n, 2))))


#: largest group the engines' one-shot custom all-reduce runs on (vLLM custom_all_reduce.py)
ONESHOT_MAX_GPUS = 8


def hop_latency_s(hw: HardwareSpec, group_gpus: int) -> float:
    """The latency part of a ring/tree collective over `group_gpus` GPUs: lat · ⌈log2 n⌉ inside one
    NVLink domain; across domains NCCL's hierarchical tree (and its ring's few inter-node hops) pays
    the NVLink latency for the steps inside a domain and the scale-out latency only for the steps
    between domains: lat_nvlink · ⌈log2 d⌉ + lat_scaleout · ⌈log2 ⌈n / d⌉⌉, d = the domain's GPUs."""
    n = int(group_gpus)
    d = int(hw.nvlink_domain_gpus)
    if n <= d:
        return hw.nvlink_latency_s * _log2_steps(n)
    return hw.nvlink_latency_s * _log2_steps(d) + hw.scaleout_latency_s * _log2_steps(-(-n // d))


def all_reduce_s(nbytes, group_gpus: int, hw: HardwareSpec):
    """All-reduce of a `nbytes` buffer: ring/tree, or within NVLink the faster of that and the
    one-shot kernel (module docstring)."""
    if group_gpus <= 1:
        return _zero(nbytes)
    bw, _ = link(hw, group_gpus)
    n = group_gpus
    ring = hop_latency_s(hw, n) + 2.0 * (n - 1) / n * nbytes / bw
    one = hw.nvlink_oneshot_latency_s
    if one is None or n > min(ONESHOT_MAX_GPUS, hw.nvlink_domain_gpus, hw.gpus_per_node or hw.nvlink_domain_gpus):
        return ring
    oneshot = one + (n - 1) * nbytes / bw
    return min(ring, oneshot) if np.ndim(ring) == 0 else np.minimum(ring, oneshot)


def all_gather_s(nbytes, group_gpus: int, hw: HardwareSpec):
    """All-gather (or reduce-scatter) of a `nbytes` full buffer."""
    if group_gpus <= 1:
        return _zero(nbytes)
    bw, _ = link(hw, group_gpus)
    n = group_gpus
    return hop_latency_s(hw, n) + (n - 1) / n * nbytes / bw


def _step_latency_s(hw: HardwareSpec, group_gpus: int) -> float:
    """Latency of one step over the link a group uses (module docstring: `lat_step`)."""
    _, lat = link(hw, group_gpus)
    if group_gpus <= hw.nvlink_domain_gpus and hw.nvlink_oneshot_latency_s is not None:
        return hw.nvlink_oneshot_latency_s
    return lat


def all_to_all_s(nbytes_per_gpu, group_gpus: int, hw: HardwareSpec):
    """All-to-all of `nbytes_per_gpu` per GPU (module docstring): across domains only the share for
    peers in other domains crosses the NIC, while the share for the own domain's peers moves over
    NVLink at the same time."""
    if group_gpus <= 1:
        return _zero(nbytes_per_gpu)
    n = group_gpus
    lat = _step_latency_s(hw, n)
    bw, _ = link(hw, n)
    if n <= hw.nvlink_domain_gpus:
        return lat + (n - 1) / n * nbytes_per_gpu / bw
    d = hw.nvlink_domain_gpus
    bw_nvlink, _ = link(hw, d)
    across = (n - d) / n * nbytes_per_gpu / bw
    inside = (d - 1) / n * nbytes_per_gpu / bw_nvlink
    return lat + (np.maximum(across, inside) if np.ndim(across) else max(across, inside))


def broadcast_s(nbytes, group_gpus: int, hw: HardwareSpec):
    if group_gpus <= 1:
        return _zero(nbytes)
    bw, lat = link(hw, group_gpus)
    return lat * _log2_steps(group_gpus) + nbytes / bw


def p2p_s(nbytes, hw: HardwareSpec, across_domain: bool = False):
    """Point-to-point send (pipeline-stage boundary)."""
    group = hw.nvlink_domain_gpus + 1 if across_domain else 2
    bw, _ = link(hw, group)
    return _step_latency_s(hw, group) + nbytes / bw
