"""Turn a validated Scenario into the frozen specs the simulator runs on (a `World`).

Everything a simulation needs is derived here once: hardware and model specs, the drafter's
architecture and acceptance model, the rollout layout and its memory plan (KV capacity), the
step-cost table and the SD policy. Spec-level errors are re-raised as ScenarioError naming the
scenario file, so the CLI can print them and exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

from specsim.cost.forward import StepCostTable, prefill_batches_s, step_cost_table
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import MemoryPlan, memory_plan
from specsim.cost.training import check_training_fits
from specsim.errors import LayoutError, SpecError
from specsim.hardware import HardwareSpec, load_hardware
from specsim.model import DrafterArch, ModelSpec, drafter_arch, load_model
from specsim.scenario import Scenario, ScenarioError, source_file
from specsim.speculation import SDPolicy, from_section
from specsim.trainer import training_layout
from specsim.workload.acceptance import DrafterAcceptance, Staleness, staleness_from_taus, temperature_alpha
from specsim.workload.lengths import LengthDistribution


@dataclass(frozen=True)
class World:
    """A scenario resolved into specs. `engines` data-parallel rollout engines of `layout`."""

    scenario: Scenario
    hw: HardwareSpec
    model: ModelSpec
    drafter: DrafterArch
    layout: ParallelLayout
    memory: MemoryPlan
    kv_capacity_tokens: int
    engines: int
    policy: SDPolicy
    acceptance: DrafterAcceptance
    response_dist: LengthDistribution
    prompt_dist: LengthDistribution
    table: StepCostTable

    def prefill_fn(self):
        """Prices prefill passes given as sums (see cost/forward.prefill_batches_s)."""
        return partial(prefill_batches_s, self.model, self.hw, self.layout)


def length_distribution(spec, field_path: str, base_dir: Path | None) -> LengthDistribution:
    if spec.kind == "fixed":
        return LengthDistribution.fixed(spec.tokens, field_path=field_path)
    if spec.kind == "lognormal":
        if spec.median is not None:
            return LengthDistribution.lognormal_from_median_p99(spec.median, spec.p99, field_path=field_path)
        return LengthDistribution.lognormal(spec.mu, spec.sigma, field_path=field_path)
    if spec.kind == "mixture":
        comps = spec.components
        return LengthDistribution.mixture(tuple(c["weight"] for c in comps), tuple(c["median"] for c in comps),
                                          tuple(c["p99"] for c in comps), field_path=field_path)
    path = Path(spec.path)
    if not path.is_absolute() and base_dir is not None and not path.exists():
        path = base_dir / path
    return LengthDistribution.empirical_file(path, field_path=field_path)


def acceptance_model(sc: Scenario) -> DrafterAcceptance:
    d = sc.drafter
    conc = d.heterogeneity
    if d.kind in ("self_quant", "ngram"):
        stale = Staleness.never()
    elif d.staleness.tau_after is not None:
        tau_fresh = d.general_tau if (d.init == "general" and d.general_tau) else d.tau
        if tau_fresh is None:
            raise SpecError("drafter.staleness.tau_after", d.staleness.tau_after, "used together with drafter.tau")
        stale = staleness_from_taus(tau_fresh, d.staleness.tau_after, d.staleness.after_versions, d.tau_at_k,
                                    d.staleness.floor_alpha, d.position_decay, conc)
    else:
        stale = Staleness(d.staleness.floor_alpha, d.staleness.rate_per_version or 0.0)
    update = d.update_every_steps if d.kind not in ("self_quant", "ngram") else 0
    if d.alpha is not None:
        acc = DrafterAcceptance(d.kind, d.alpha, d.position_decay, conc, stale, update)
    else:
        tau = d.general_tau if (d.init == "general" and d.general_tau) else d.tau
        acc = DrafterAcceptance.from_tau(d.kind, tau, d.tau_at_k, decay=d.position_decay, concentration=conc,
                                         staleness=stale, update_every_steps=update)
    t_meas = d.tau_temperature if d.tau_temperature is not None else sc.workload.temperature
    if t_meas != sc.workload.temperature:
        a0 = float(temperature_alpha(acc.alpha0, sc.workload.temperature, t_meas))
        acc = DrafterAcceptance(acc.kind, a0, acc.decay, acc.concentration, acc.staleness, acc.update_every_steps)
    return acc


def resolve(sc: Scenario) -> World:
    """Resolve a scenario; raises ScenarioError (with the file) for anything that cannot run."""
    file = source_file(sc)
    base_dir = Path(file).parent if file else None
    try:
        hw = load_hardware(sc.hardware)
        model = load_model(sc.model)
        r = sc.rollout
        layout = ParallelLayout(tp=r.tp, pp=r.pp, ep=r.ep, weight_dtype=r.weight_dtype, kv_dtype=r.kv_dtype)
        layout.check_fits_model(model, "rollout")
        if r.gpus % layout.gpus:
            raise SpecError("rollout.gpus", r.gpus, f"a multiple of the {layout.gpus} GPUs of one engine ({layout.describe()})")
        arch = drafter_arch(sc.drafter.kind, model, sc.drafter.draft_vocab, sc.drafter.draft_ffn)
        policy = from_section(sc.speculation)
        uses_drafter = policy.kind != "off"
        w = sc.workload
        need_tokens = w.max_prompt_tokens + w.max_response_tokens + max(policy.ks) + 1
        if need_tokens > model.max_positions:
            raise SpecError("workload.max_response_tokens", w.max_response_tokens,
                            f"<= {model.max_positions - w.max_prompt_tokens - max(policy.ks) - 1} "
                            f"({model.name} has {model.max_positions} positions, prompts up to {w.max_prompt_tokens})")
        mem = memory_plan(model, hw, layout, gpu_memory_utilization=r.gpu_memory_utilization,
                          max_batched_tokens=r.max_batched_tokens, drafter=arch if uses_drafter else None,
                          min_kv_tokens=need_tokens)
        kv_cap = r.kv_capacity_tokens or mem.kv_capacity_tokens
        if kv_cap < need_tokens:
            raise SpecError("rollout.kv_capacity_tokens", kv_cap,
                            f">= {need_tokens} (the longest prompt + response + draft slots must fit one engine)")
        acc = acceptance_model(sc)
        resp = length_distribution(w.response_tokens, "workload.response_tokens", base_dir)
        prompt = length_distribution(w.prompt_tokens, "workload.prompt_tokens", base_dir)
        table = step_cost_table(model, arch if uses_drafter else None, hw, layout, r.max_batch, policy.ks)
        trainer = training_layout(sc, model, hw)
    except SpecError as exc:
        raise ScenarioError(exc.where or file, exc.field, exc.value, f"must be {exc.allowed}") from None
    except LayoutError as exc:
        raise ScenarioError(file, "rollout", f"{layout.describe()}", str(exc)) from None
    try:
        colocated = sc.pipeline.mode == "sync"
        check_training_fits(model, hw, trainer,
                            gpu_memory_utilization=sc.rollout.gpu_memory_utilization if colocated else None)
    except LayoutError as exc:
        raise ScenarioError(file, "training", trainer.describe(), str(exc)) from None
    return World(sc, hw, model, arch, layout, mem, int(kv_cap), r.gpus // layout.gpus, policy, acc, resp, prompt, table)
