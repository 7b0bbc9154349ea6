"""Roofline op cost: an op takes the longer of its math and its memory traffic.

    t = max(flops / (peak_flops · eff_compute), bytes / (hbm_bw · eff_memory))

Vectorized: any argument may be a numpy array (the result broadcasts) or a plain float (the
result is a float — the engines price single prefill passes this way, cheaply).
"""

from __future__ import annotations

import numpy as np

from specsim.hardware import HardwareSpec


def compute_time_s(flops, hw: HardwareSpec, math_dtype: str = "bf16"):
    return flops / (hw.flops_per_s(math_dtype) * hw.efficiency.compute)


def memory_time_s(nbytes, hw: HardwareSpec):
    return nbytes / (hw.hbm_bw_bytes_per_s * hw.efficiency.memory)


def op_time_s(flops, nbytes, hw: HardwareSpec, math_dtype: str = "bf16"):
    """Roofline time of one op (seconds)."""
    return np.maximum(compute_time_s(flops, hw, math_dtype), memory_time_s(nbytes, hw))


def arithmetic_intensity(flops, nbytes):
    """FLOPs per byte; compare with the ridge point peak_flops / hbm_bw."""
    return np.asarray(flops, dtype=float) / np.maximum(np.asarray(nbytes, dtype=float), 1e-30)


def ridge_point(hw: HardwareSpec, math_dtype: str = "bf16") -> float:
    """Achieved FLOP/s over achieved bytes/s: ops above this intensity are compute-bound."""
    return (hw.flops_per_s(math_dtype) * hw.efficiency.compute) / (hw.hbm_bw_bytes_per_s * hw.efficiency.memory)
