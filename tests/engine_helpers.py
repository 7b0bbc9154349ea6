"""Small engine set-ups shared by the engine tests and benchmarks (no scenario file needed)."""

from __future__ import annotations

from functools import partial

import numpy as np

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.cost.forward import prefill_batches_s
from specsim.cost.layout import ParallelLayout
from specsim.cost.step import step_cost_table
from specsim.policy import PolicyContext, SDPolicy
from specsim.sim.common import EngineConfig, EngineWork


def make_config(policy: SDPolicy, *, model="Qwen3-8B", hardware="h100_sxm", drafter="eagle3", tp=1,
                max_batch=64, kv_capacity_tokens=10**7, block_tokens=16, mean_alpha=0.7, hw=None,
                name="test", context=None) -> EngineConfig:
    m = load_model(model)
    hw = hw or load_hardware(hardware)
    layout = ParallelLayout(tp=tp)
    arch = drafter_arch(drafter, m)
    table = step_cost_table(m, arch, hw, layout, max_batch, policy.ks)
    return EngineConfig(name, table, policy, PolicyContext(table, mean_alpha), max_batch, kv_capacity_tokens,
                        block_tokens, partial(prefill_batches_s, m, hw, layout), context=context)


def make_work(seed: int, groups: int, group_size: int, *, median=400.0, sigma=0.8, cap=3000, prompt=128,
              alpha=0.7, concentration=None) -> EngineWork:
    rng = np.random.default_rng(seed)
    n = groups * group_size
    lengths = np.clip(np.rint(median * np.exp(sigma * rng.standard_normal(n))), 1, cap).astype(np.int64)
    if concentration:
        alphas = rng.beta(alpha * concentration, (1 - alpha) * concentration, n)
    else:
        alphas = np.full(n, alpha)
    gid = np.repeat(np.arange(groups), group_size)
    return EngineWork(np.arange(n), gid, np.full(n, prompt, dtype=np.int64), lengths, alphas)
