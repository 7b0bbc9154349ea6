"""The plan's candidates: every configuration the `plan:` section allows, and which of them can exist.

A candidate is one scenario: GPU type (one profile, or a TRAINING+ROLLOUT pair of profiles for
separate pools: `plan.hardware: [gb200+h200_sxm]`) × rollout:training split (async; sync is colocated) ×
rollout layout (tp, ep, pp) × SD policy and k (k = 0: AR) × policy lag. It is named by the dotted
overrides that turn the scenario into it (`Candidate.overrides`), so a plain `specsim run` with
those `--set`s reruns it exactly. Feasibility comes from `world/resolve.py` (the memory plan, the
layout rules, the trainer layout): a candidate that does not resolve is infeasible, with the reason.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from specsim.catalog.models import load_model
from specsim.scenario import Scenario, ScenarioError, apply_overrides, source_file
from specsim.scenario.plan_section import PAIR_SEP, hardware_pair
from specsim.scenario.schema import hardware_key
from specsim.world.resolve import resolve

__all__ = ["Candidate", "LayoutKey", "configurations", "default_layouts", "enumerate_candidates", "hardware_overrides",
           "plan_hardware", "splits"]

LayoutKey = tuple[int, int, int]   # (tp, ep, pp)


@dataclass(frozen=True)
class Candidate:
    """One configuration. `budget`: the GPU count of the plan it belongs to (the GPUs it uses,
    rollout + training, may be fewer: whole engines and trainer replicas)."""

    hardware: str
    budget: int
    rollout_gpus: int
    training_gpus: int | None      # None: sync (colocated)
    layout: LayoutKey
    policy: str                    # off | always | threshold
    k: int
    lag: int
    steps: int
    pool_fields: bool = False      # the scenario names `rollout.hardware` / `training.hardware`: set them too
    cid: str = field(default="", compare=False)

    @property
    def pools(self) -> tuple[str, str]:
        """(training profile, rollout profile): `hardware` is one name, or TRAINING+ROLLOUT for a
        mixed pair (plan_section.hardware_pair)."""
        return hardware_pair(self.hardware)

    @property
    def mixed(self) -> bool:
        return self.pools[0] != self.pools[1]

    def usd_per_hour(self, usd: dict[str, float]) -> float | None:
        """What its GPUs cost per hour: rollout GPUs × the rollout profile's price + training GPUs ×
        the trainer profile's (`output.gpu_hour_usd`); None when a profile it uses has no price."""
        train, roll = self.pools
        if roll not in usd or (self.training_gpus and train not in usd):
            return None
        return self.rollout_gpus * usd[roll] + (self.training_gpus or 0) * usd.get(train, 0.0)

    def usd_per_gpu_hour(self, usd: dict[str, float]) -> float | None:
        """usd_per_hour / total GPUs: the price of one of its GPU-hours (a pair's is the blend of
        its two pools' prices, weighted by their GPUs), so $ = GPU-hours × this exactly."""
        rate = self.usd_per_hour(usd)
        return None if rate is None else rate / self.total_gpus

    @property
    def arm(self) -> str:
        return "ar" if self.policy == "off" else "sd"

    @property
    def total_gpus(self) -> int:
        return self.rollout_gpus + (self.training_gpus or 0)

    @property
    def overrides(self) -> dict[str, Any]:
        """The dotted `--set` overrides that make the scenario this candidate."""
        tp, ep, pp = self.layout
        o: dict[str, Any] = {**hardware_overrides(self.hardware, self.pool_fields), "rollout.gpus": self.rollout_gpus,
                             "rollout.tp": tp, "rollout.ep": ep, "rollout.pp": pp, "pipeline.steps": self.steps}
        if self.training_gpus is not None:
            o["training.gpus"] = self.training_gpus
            o["pipeline.policy_lag"] = self.lag
        o["speculation.policy"] = self.policy
        if self.policy != "off":
            o["speculation.k"] = self.k
        return o

    def label(self) -> str:
        tp, ep, pp = self.layout
        split = f"{self.rollout_gpus}+{self.training_gpus}" if self.training_gpus is not None else \
            f"{self.rollout_gpus} colocated"
        sd = "AR" if self.policy == "off" else f"{self.policy} k={self.k}"
        lag = f", lag {self.lag}" if self.training_gpus is not None else ""
        return f"{self.hardware} {split}, TP{tp}·EP{ep}·PP{pp}, {sd}{lag}"

    def as_dict(self) -> dict[str, Any]:
        tp, ep, pp = self.layout
        return {"candidate": self.cid, "hardware": self.hardware, "budget_gpus": self.budget,
                "rollout_gpus": self.rollout_gpus, "training_gpus": self.training_gpus or 0,
                "total_gpus": self.total_gpus, "tp": tp, "ep": ep, "pp": pp, "arm": self.arm,
                "sd_policy": self.policy, "k": self.k, "policy_lag": self.lag}


def hardware_overrides(entry: str, pool_fields: bool) -> dict[str, Any]:
    """The dotted overrides that put a scenario on a `plan.hardware` entry: `hardware` alone for one
    profile (and, when the scenario names per-pool profiles, both pools on it); for a pair
    TRAINING+ROLLOUT, `training.hardware` and `rollout.hardware` (`hardware` the rollout's)."""
    train, roll = hardware_pair(entry)
    if train == roll and not pool_fields:
        return {"hardware": roll}
    return {"hardware": roll, "rollout.hardware": roll, "training.hardware": train}


def uses_pool_fields(sc: Scenario) -> bool:
    """The scenario names a pool's own profile (`rollout.hardware` / `training.hardware`)."""
    return sc.rollout.hardware is not None or sc.training.hardware is not None


def plan_hardware(sc: Scenario, plan) -> list[str]:
    """The plan's GPU-type entries: `plan.hardware`, else the scenario's own profiles (one name, or
    its TRAINING+ROLLOUT pair when they differ). Names lower-cased, as the scenario keeps them."""
    if plan.hardware:
        return [PAIR_SEP.join(dict.fromkeys(_key(h) for h in hardware_pair(e))) if PAIR_SEP in e else _key(e)
                for e in plan.hardware]
    if sc.mixed_hardware:
        return [f"{sc.training_hardware}{PAIR_SEP}{sc.rollout_hardware}"]
    return [sc.hardware]


def _key(name: str) -> str:

    return hardware_key(name.strip())


def _with_id(c: Candidate) -> Candidate:
    text = json.dumps(c.overrides, sort_keys=True)
    return Candidate(**{**c.__dict__, "cid": hashlib.sha256(text.encode()).hexdigest()[:12]})


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def default_layouts(model, max_engine_gpus: int) -> list[LayoutKey]:
    """tp, ep powers of two (ep 1 or a multiple of tp, MoE only), pp ∈ {1, 2}, at most
    `max_engine_gpus` GPUs per engine; tp divides the attention and KV heads."""
    out = []
    for pp in (1, 2):
        for tp in _pow2_upto(max_engine_gpus):
            if model.heads % tp or (model.kv_heads % tp and tp % model.kv_heads):
                continue
            eps = [1] + ([e for e in _pow2_upto(max_engine_gpus) if e >= tp and e % tp == 0 and e > 1]
                         if model.moe is not None else [])
            for ep in sorted(set(eps)):
                if max(tp, ep) * pp <= max_engine_gpus:
                    out.append((tp, ep, pp))
    return out


def splits(total: int, engine_gpus: int, replica_gpus: int, shares: list[float]) -> list[tuple[int, int]]:
    """(rollout, training) GPU pairs for an async budget: each share of `total` rounded down to
    whole engines, the rest to whole trainer replicas; pairs with an empty pool are left out."""
    out = []
    for s in shares:
        r = math.floor(s * total / engine_gpus) * engine_gpus
        t = int((total - r) // replica_gpus) * replica_gpus
        if r >= engine_gpus and t >= replica_gpus and (r, t) not in out:
            out.append((r, t))
    return out


def default_shares(n: int) -> list[float]:
    return [i / (n + 1) for i in range(1, n + 1)]


def enumerate_candidates(sc: Scenario, plan) -> tuple[list[Candidate], list[dict]]:
    """Every candidate of the plan (before any bound), and the rejected (hardware, layout)
    pairs with the reason. Raises ScenarioError naming the constraint when nothing is left."""

    file = source_file(sc)
    model = load_model(sc.model)
    async_ = sc.pipeline.mode == "async"
    hws = plan_hardware(sc, plan)
    for hw in hws:
        if PAIR_SEP in hw and not async_:
            raise ScenarioError(file, "plan.hardware", hw, "one profile per entry for a sync (colocated) scenario: "
                                                           "a TRAINING+ROLLOUT pair needs separate pools "
                                                           "(pipeline.mode: async)")
    if plan.layouts is not None:
        layouts = [(c.tp, c.ep, c.pp) for c in plan.layouts]
    else:
        layouts = default_layouts(model, plan.max_engine_gpus)
    if not layouts:
        raise ScenarioError(file, "plan.max_engine_gpus", plan.max_engine_gpus,
                            f"room for at least one rollout layout of {sc.model} (tp must divide its heads)")
    t = sc.training
    replica = max(t.tp, t.ep) * t.pp
    shares = plan.rollout_shares or default_shares(plan.split_grid)
    lags = list(range(plan.max_policy_lag + 1)) if async_ else [0]
    steps = plan.search.steps or sc.pipeline.steps
    if sc.pipeline.warmup_steps >= steps:
        raise ScenarioError(file, "plan.search.steps", steps, f"above pipeline.warmup_steps ({sc.pipeline.warmup_steps})")
    arms = [("off", 0)] + [(p, k) for p in plan.sd_policies for k in plan.k if k > 0]
    if "schedule" in plan.sd_policies and sc.speculation.k_per_batch_size is None:
        raise ScenarioError(file, "plan.sd_policies", plan.sd_policies,
                            "`schedule` only with a table in speculation.k_per_batch_size (the schedule it searches)")
    budgets = plan.gpu_counts(sc.total_gpus)
    out: list[Candidate] = []
    rejected: list[dict] = []
    for hw in hws:
        for lay in layouts:
            why = layout_problem(sc, hw, lay, max(k for _, k in arms))
            if why:
                rejected.append({"hardware": hw, "layout": lay, "reason": why})
                continue
            for n in budgets:
                out += configurations(sc, plan, hw, [lay], n, arms, lags)
    if not out:
        detail = "; ".join(f"{r['hardware']} TP{r['layout'][0]}·EP{r['layout'][1]}·PP{r['layout'][2]}: {r['reason']}"
                           for r in rejected[:4])
        if len(rejected) == len(hws) * len(layouts):
            raise ScenarioError(file, "plan.layouts", [list(lay) for lay in layouts],
                                f"at least one rollout layout that fits {sc.model} ({detail})")
        raise ScenarioError(file, "plan.total_gpus", budgets,
                            f"a budget that holds at least one rollout engine and, async, one trainer replica of "
                            f"{replica} GPUs (plan.rollout_shares {shares})")
    return out, rejected


def configurations(sc: Scenario, plan, hw: str, layouts: list[LayoutKey], budget: int,
                   arms: list[tuple[str, int]], lags: list[int]) -> list[Candidate]:
    """The candidates of one GPU type at one budget: every layout × the plan's splits (async;
    sync: the whole budget in whole engines, a multiple of the trainer replica) × arm (SD policy,
    k) × lag. Layouts are taken as feasible (`layout_problem` is the caller's check)."""
    t = sc.training
    replica = max(t.tp, t.ep) * t.pp
    shares = plan.rollout_shares or default_shares(plan.split_grid)
    steps = plan.search.steps or sc.pipeline.steps
    pooled = uses_pool_fields(sc)
    out = []
    for lay in layouts:
        g = max(lay[0], lay[1]) * lay[2]
        if sc.pipeline.mode == "async":
            pairs = splits(budget, g, replica, shares)
        else:
            r = (budget // g) * g
            pairs = [(r, None)] if r >= g and r % replica == 0 else []
        for r, tr in pairs:
            for pol, k in arms:
                for lag in lags:
                    out.append(_with_id(Candidate(hw, budget, r, tr, lay, pol, k, lag, steps, pooled)))
    return out


def layout_problem(sc: Scenario, hw: str, lay: LayoutKey, k_max: int) -> str | None:
    """Why a rollout layout cannot run on `hw` (one engine; the memory plan with the drafter at
    the largest k), or None."""

    g = max(lay[0], lay[1]) * lay[2]
    ov: dict[str, Any] = {**hardware_overrides(hw, uses_pool_fields(sc)), "rollout.gpus": g, "rollout.tp": lay[0],
                          "rollout.ep": lay[1],
                          "rollout.pp": lay[2], "speculation.policy": "always" if k_max else "off",
                          "speculation.k": max(k_max, 1)}
    if sc.pipeline.mode == "async":
        t = sc.training
        ov["training.gpus"] = max(t.tp, t.ep) * t.pp
    try:
        resolve(apply_overrides(sc, ov))
    except ScenarioError as exc:
        if exc.field.startswith("training"):
            return None   # the trainer is checked per split (a layout problem only names the rollout)
        return f"{exc.field}: {exc.allowed}"
    return None


def candidate_scenario(sc: Scenario, c: Candidate) -> Scenario:
    return apply_overrides(sc, c.overrides)
