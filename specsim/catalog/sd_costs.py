"""The `sd_costs:` block of a hardware profile: the parameters of the SD costs a serving engine
pays besides the draft and verify passes (what each term is and how it is priced: cost/sd_costs.py).

Units are in the YAML key names (`sd_step_overhead_ms`, `eager_layer_overhead_us`), each value
may carry its `source:`; absent keys take the priors documented on :class:`SDCosts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from specsim.errors import SpecError

__all__ = ["FITTABLE", "SD_COST_KEYS", "SDCosts", "load_sd_costs", "sd_costs_to_yaml_dict"]


@dataclass(frozen=True)
class SDCosts:
    """SD terms of one hardware profile (seconds, tokens, passes). See the module docstring.

    sd_step_overhead_s: FITTABLE, per SD step. Prior 1 ms: vLLM's V1 SD step adds a proposer
      call and metadata preparation of the order of a decode step's own CPU time.
    sampler_passes: streaming passes over the fp32 probabilities of every sampled row (3:
      softmax read + write, accept/resample read).
    ngram_cpu_tokens_per_s: context tokens the CPU n-gram proposer searches per second (prior
      1e9: a numba-jitted KMP loop does about one compare per token per ns on one core).
    ngram_request_overhead_s: fixed CPU time per running request per step of the n-gram
      proposer (prior 10 µs: one Python loop iteration with a numpy slice, a numba dispatch and
      a ``tolist``, each ~1-3 µs in CPython; vLLM 0.10-0.11 gpu_model_runner loop).
    cuda_graph_max_tokens: largest captured batch (vLLM default capture sizes end at 512).
    eager_layer_overhead_s: launch time per layer of a pass that runs eagerly (prior 20 µs:
      ~5-10 kernels of a decoder layer at a few µs of CPU launch each, not hidden behind
      short kernels).
    piecewise_layer_overhead_s: time per layer a non-uniform batch pays for running piecewise
      graphs instead of one full graph (prior 20 µs: the attention op's Python dispatch and
      metadata plus one graph replay per piece, a few µs each; no per-layer figure published).
    """

    sd_step_overhead_s: float = 1.0e-3
    sampler_passes: float = 3.0
    ngram_cpu_tokens_per_s: float = 1.0e9
    ngram_request_overhead_s: float = 10 * 1e-6   # written so the µs round trip is exact
    cuda_graph_max_tokens: int = 512
    eager_layer_overhead_s: float = 20e-6
    piecewise_layer_overhead_s: float = 20 * 1e-6   # the µs round trip is exact
    sources: dict[str, str] = field(default_factory=dict, compare=False)


#: YAML key -> (attribute, scale to SI)
SD_COST_KEYS = {
    "sd_step_overhead_ms": ("sd_step_overhead_s", 1e-3),
    "sampler_passes": ("sampler_passes", 1.0),
    "ngram_cpu_tokens_per_s": ("ngram_cpu_tokens_per_s", 1.0),
    "ngram_request_overhead_us": ("ngram_request_overhead_s", 1e-6),
    "cuda_graph_max_tokens": ("cuda_graph_max_tokens", 1.0),
    "eager_layer_overhead_us": ("eager_layer_overhead_s", 1e-6),
    "piecewise_layer_overhead_us": ("piecewise_layer_overhead_s", 1e-6),
}

#: the two SD-overhead parameters a calibration may fit (profile keys)
FITTABLE = ("sd_costs.sd_step_overhead_ms", "efficiency.draft_overhead_ms")


def load_sd_costs(doc, where: str | None = None) -> SDCosts:
    """An `SDCosts` from a profile's optional `sd_costs:` block (None: all priors)."""
    if doc is None:
        return SDCosts()
    if not isinstance(doc, dict):
        raise SpecError("sd_costs", doc, f"a mapping with keys among {sorted(SD_COST_KEYS)}", where)
    unknown = sorted(set(doc) - set(SD_COST_KEYS))
    if unknown:
        raise SpecError(f"sd_costs.{unknown[0]}", doc[unknown[0]], f"one of {sorted(SD_COST_KEYS)}", where)
    values, sources = {}, {}
    for key, (attr, scale) in SD_COST_KEYS.items():
        if key not in doc:
            continue
        entry = doc[key]
        value, source = (entry.get("value"), str(entry.get("source", ""))) if isinstance(entry, dict) else (entry, "")
        try:
            finite = not isinstance(value, bool) and isinstance(value, (int, float)) and np.isfinite(float(value))
        except OverflowError:
            finite = False
        if not finite or value < 0 or value > 1e12:
            raise SpecError(f"sd_costs.{key}", value, "a finite number in [0, 1e12] (as `value:` with a `source:`)",
                            where)
        if key in ("ngram_cpu_tokens_per_s", "cuda_graph_max_tokens", "sampler_passes") and value <= 0:
            raise SpecError(f"sd_costs.{key}", value, "> 0", where)
        values[attr] = int(value) if attr == "cuda_graph_max_tokens" else float(value) * scale
        sources[f"sd_costs.{key}"] = source
    return SDCosts(**values, sources=sources)


def sd_costs_to_yaml_dict(sd: SDCosts, source: str) -> dict:
    """Inverse of :func:`load_sd_costs`, in the YAML's units, every value with `source`."""
    return {key: {"value": float(round(getattr(sd, attr) / scale, 9)), "source": source}
            for key, (attr, scale) in SD_COST_KEYS.items()}


