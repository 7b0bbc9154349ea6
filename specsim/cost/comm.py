"""Collectives over the NVLink domain or the scale-out network.

Bandwidth-optimal (ring) formulas with a per-call latency term, as NCCL's performance notes
describe (bus bandwidth = algorithm bandwidth · 2(n−1)/n for all-reduce):

    all_reduce  t = lat · ⌈log2 n⌉ + 2(n−1)/n · bytes / (bw · eff_comm)
    all_gather / reduce_scatter  t = lat · ⌈log2 n⌉ + (n−1)/n · bytes / (bw · eff_comm)
    all_to_all  t = lat + (n−1)/n · bytes_per_gpu / (bw · eff_comm)
    broadcast (pipelined)  t = lat · ⌈log2 n⌉ + bytes / (bw · eff_comm)

A group of n GPUs communicates over NVLink when it fits in one NVLink domain; otherwise the
slowest link it crosses is the per-GPU scale-out NIC (hierarchical algorithms still push the
cross-domain share of the data through it). `bytes` is the buffer size on each GPU.
"""

from __future__ import annotations

import numpy as np

from specsim.hardware import HardwareSpec


def link(hw: HardwareSpec, group_gpus: int) -> tuple[float, float]:
    """(bytes/s achieved, latency s) of the slowest link a group of `group_gpus` uses."""
    if group_gpus <= hw.nvlink_domain_gpus:
        return hw.nvlink_bw_bytes_per_s * hw.efficiency.comm, hw.nvlink_latency_s
    return hw.scaleout_bw_bytes_per_s * hw.efficiency.comm, hw.scaleout_latency_s


def _zero(x):
    return 0.0 if np.ndim(x) == 0 else np.zeros_like(np.asarray(x, dtype=float))


def _log2_steps(n: int) -> float:
    return float(np.ceil(np.log2(max(n, 2))))


def all_reduce_s(nbytes, group_gpus: int, hw: HardwareSpec):
    if group_gpus <= 1:
        return _zero(nbytes)
    bw, lat = link(hw, group_gpus)
    n = group_gpus
    return lat * _log2_steps(n) + 2.0 * (n - 1) / n * nbytes / bw


def all_gather_s(nbytes, group_gpus: int, hw: HardwareSpec):
    """All-gather (or reduce-scatter) of a `nbytes` full buffer."""
    if group_gpus <= 1:
        return _zero(nbytes)
    bw, lat = link(hw, group_gpus)
    n = group_gpus
    return lat * _log2_steps(n) + (n - 1) / n * nbytes / bw


def all_to_all_s(nbytes_per_gpu, group_gpus: int, hw: HardwareSpec):
    if group_gpus <= 1:
        return _zero(nbytes_per_gpu)
    bw, lat = link(hw, group_gpus)
    n = group_gpus
    return lat + (n - 1) / n * nbytes_per_gpu / bw


def broadcast_s(nbytes, group_gpus: int, hw: HardwareSpec):
    if group_gpus <= 1:
        return _zero(nbytes)
    bw, lat = link(hw, group_gpus)
    return lat * _log2_steps(group_gpus) + nbytes / bw


def p2p_s(nbytes, hw: HardwareSpec, across_domain: bool = False):
    """Point-to-point send (pipeline-stage boundary)."""
    bw, lat = link(hw, hw.nvlink_domain_gpus + 1 if across_domain else 2)
    return lat + nbytes / bw
