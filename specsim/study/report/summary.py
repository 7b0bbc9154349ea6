"""summary.json and summary.md of a results folder: the best point, speedups with their 95 %
intervals, the capacity plan with its notes, the resolved scenario (see study/report/tables.py for the
analysis behind them)."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from pathlib import Path

from specsim.atomic import dump_yaml
from specsim.scenario import source_file
from specsim.study.report.tables import (
    NO_CI_NOTE,
    TIE_REL,
    TRAINER_BOUND_IDLE,
    bottleneck,
    capacity_answer,
    few_replicates_warning,
    fmt_ci,
    jsonable,
    md_code,
    md_fence,
    md_text,
)
from specsim.study.sweep import POINT_ALIASES, TRAINER_CAP_SHARE, baseline_of, is_sync_ar
from specsim.world.resolve import weight_dtypes_of

__all__ = ["EXPLAIN_FACTS", "counterfactual_note", "explain_block", "explain_command", "explain_lines",
           "explain_markdown", "summary_dict", "summary_markdown", "what_ifs_of"]


def _point_public(e: dict | None) -> dict | None:
    if e is None:
        return None
    return {k: v for k, v in e.items()}


def bottleneck_text(idle_share: float) -> str:
    """What an async point's trainer idle share means for sizing."""
    if bottleneck(idle_share) == "trainer":
        return (f"trainer-bound: the trainer waits < {100 * TRAINER_BOUND_IDLE:.0f} % of the step, so faster or "
                "more rollouts save less than that; trainer throughput sets the step")
    return ("generation-bound: the trainer waits for rollouts; faster decoding shortens the step, more rollout "
            "engines only while a step's groups queue for engines (not once its longest responses set the pace)")


#: significant digits the ranking compares: means equal to them are a tie (trainer-bound points
#: share one step time, which the order of floating-point sums moves in its 13th digit)
RANK_DIGITS = 9


def ranked_points(s: dict) -> list[dict]:
    """The summary's points, best first by the ranking metric's mean to RANK_DIGITS significant
    digits (unranked last, sweep order breaking ties)."""
    key = s.get("rank_by", "e2e_speedup_vs_sync_ar")

    def order(e: dict) -> tuple[float, int]:
        mean = (e.get(key) or {}).get("mean")
        return (-float(f"{mean:.{RANK_DIGITS}g}") if mean is not None else float("inf"), e["point"])

    return sorted(s["points"], key=order)


def values_of(s: dict, point: int) -> dict:
    """The swept values of point `point` in a summary dict ({} if absent)."""
    return next((e["values"] for e in s["points"] if e["point"] == point), {})


def runner_up_text(margin: dict, rank_by: str, runner_values: str) -> str:
    """The best point against the runner-up, paired over replicates, in words."""
    r = margin["ratio"]
    head = (f"Best vs runner-up #{margin['runner_up']} ({runner_values}): `{rank_by}` ratio "
            f"{fmt_ci(r, 3)}, paired over {margin['replicates']} replicate(s)")
    if r.get("ci95") is None:
        return head + " — one replicate: no interval, the ranking between them is not settled."
    if margin["separated"]:
        return head + " — the interval lies above 1: the best point is ahead in this run's draws."
    return (head + " — the interval contains 1: the two are within the replicates' spread; more "
            "replicates (`sweep.replicates`) or steady steps (`pipeline.steps`) would be needed to rank them.")


def summary_dict(sc, plan, analysis: dict, capacity: dict, *, resolved_text: str, version: str,
                 plots: dict[str, str], overrides: Sequence[str] = ()) -> dict:
    base = baseline_of(sc)
    reps = analysis["replicates"]
    best = analysis["best"]
    summary = {
        "scenario": sc.name, "description": sc.description, "model": sc.model, "hardware": sc.hardware_label,
        "seed": sc.seed, "specsim_version": version, "file": _source(sc),
        "combinations": len(analysis["points"]), "replicates": reps, "rows": len(analysis["frame"]),
        "swept": {p: sc.sweep[p] for p in analysis["swept"]}, "zip": sc.sweep.get("zip", []),
        "baseline": {"overrides": dict(sc.pipeline.baseline), "mode": base.pipeline.mode,
                     "is_sync_ar": is_sync_ar(base)},
        "sync_ar": {"definition": "pipeline.mode=sync, speculation.policy=off on the point's total GPUs "
                                  "(an async point's training GPUs join the colocated pool)"
                                  + (f", all on the rollout profile ({sc.rollout_hardware})"
                                     if sc.mixed_hardware else ""),
                    "is_baseline": plan.sync_ar_is_baseline},
        "what_if": what_ifs_of(sc, plan),
        "rank_by": analysis["rank_by"],
        "ci": ("95 % t-interval over paired replicates" if reps >= 2 else NO_CI_NOTE),
        "best": _point_public(best), "best_sd": _point_public(analysis["best_sd"]),
        "best_ar": _point_public(analysis["best_ar"]),
        "sd_gain_over_best_ar": analysis.get("sd_gain_over_best_ar"),
        "best_vs_runner_up": analysis.get("best_vs_runner_up"),
        "points": analysis["points"],
        "capacity": capacity,
        "plots": {k: Path(v).name for k, v in plots.items()},
        "resolved_scenario": sc.model_dump(mode="json"),
    }

    summary["rollout_weight_dtype"] = dataclasses.asdict(weight_dtypes_of(sc))
    summary["warnings"] = review_warnings(sc, best)
    few = few_replicates_warning(reps)
    if few:
        summary["warnings"].insert(0, few)
    if best is not None:
        point_sc = plan.point_scenarios[best["point"]]
        summary["best"]["k"] = best["k"]
        summary["best"]["policy_lag"] = point_sc.pipeline.policy_lag if point_sc.pipeline.mode == "async" else 0
        summary["best"]["speculation"] = point_sc.speculation.model_dump(mode="json")
    summary["explain"] = explain_block(sc, best, analysis["best_sd"], overrides=overrides, replicates=reps,
                                       what_if=summary["what_if"])
    return jsonable(summary)


# ============================================================================ the explain block
#: what the run measured at a point that says where its gain goes (points.csv columns; no extra simulation)
EXPLAIN_FACTS = ("token_weighted_batch", "mean_active_batch", "per_token_sd_gain", "e2e_speedup",
                 "generation_speedup", "e2e_speedup_vs_sync_ar", "tau", "step_setter_tau",
                 "sync_ar_generation_share", "trainer_cap", "trainer_idle_share")


def explain_command(call: dict) -> str:
    """The `specsim explain` command line of an explain block's `call` (shell-quoted)."""
    parts = ["specsim", "explain", call["scenario"]]
    if call.get("point"):
        parts += ["--point", call["point"]]
    for text in call.get("sets") or []:
        parts += ["--set", text]
    parts += ["--replicates", str(call["replicates"])]
    return " ".join(shlex.quote(str(x)) for x in parts)


def _explain_call(scenario_file: str, values: dict, overrides: Sequence[str], replicates: int) -> dict:
    """How `specsim explain` reaches a point of this run: the scenario file, the run's --set
    overrides (except the sweep's, which explain drops), the point's swept values as `--point`
    (short names where there are: k, lag, ...; a value with a comma or an `=` as a --set, which
    --point cannot carry), and the sweep's replicates."""
    short = {path: name for name, path in POINT_ALIASES.items()}
    point, sets = [], [o for o in overrides if not o.split("=", 1)[0].strip().startswith("sweep")]
    for path, v in values.items():
        text = yaml_value(v)
        if "," in text or "=" in text:
            sets.append(f"{path}={text}")
        else:
            point.append(f"{short.get(path, path)}={text}")
    return {"scenario": scenario_file, "point": ",".join(point), "sets": sets, "replicates": int(replicates)}


def explain_block(sc, best: dict | None, best_sd: dict | None, *, overrides: Sequence[str] = (),
                  replicates: int = 1, what_if: Sequence[str] = ()) -> dict | None:
    """The summary's `explain` block: for the best point (the best SD point when the best runs no
    SD: there is no SD gain to explain at an AR point) the measured facts of EXPLAIN_FACTS with
    their intervals, whether it is trainer-bound, and the `specsim explain` call and command
    line that give its ladder. `ladder` stays None here; with `output.explain: ladder` the
    explain layer fills it in after the sweep (specsim/explain/in_run.py). A counterfactual run
    (`what_if`) has no command: explain sets the what-ifs itself and refuses one already on.
    None without an SD point."""
    target = best if best is not None and best.get("k", 0) > 0 else best_sd
    if target is None:
        return None
    measured = {m: target.get(m) for m in EXPLAIN_FACTS}
    e2e, cap = (measured["e2e_speedup"] or {}).get("mean"), (measured["trainer_cap"] or {}).get("mean")
    call = _explain_call(_source(sc) or f"{sc.name}.yaml", target["values"], overrides, replicates)
    return {
        "point": target["point"], "values": target["values"], "k": target["k"], "policy_lag": target["policy_lag"],
        "mode": target["mode"], "is_best": best is not None and target["point"] == best["point"],
        "measured": measured,
        "trainer_bound": None if e2e is None or cap is None else bool(e2e >= TRAINER_CAP_SHARE * cap),
        "call": None if what_if else call, "command": None if what_if else explain_command(call),
        "ladder_requested": sc.output.explain == "ladder" and not what_if,
        "ladder": None,
    }


def _ladder_pointer(block: dict, code: str = "`") -> str:
    """Where the ladder is (or why there is none), one sentence."""
    if block.get("ladder_error"):
        return f"The ladder was asked for (output.explain: ladder) but not computed: {block['ladder_error']}"
    if block.get("command") is None:
        return ("No ladder: this run is a counterfactual (what_if on), and `specsim explain` explains predictions "
                "only (it turns the what-ifs on itself).")
    return (f"Where the gain goes, mechanism by mechanism (each switched off and on, on the same draws): "
            f"{md_code(block['command']) if code == '`' else code + block['command'] + code} (docs/explain.md). Not run here: it costs tens of times this point's runs; "
            "`output.explain: ladder` adds it to this summary.")


def _ci_or_dash(m: dict | None, digits: int) -> str:
    return fmt_ci(m, digits) if (m or {}).get("mean") is not None else "—"


def _facts(block: dict, bold: bool = False) -> list[tuple[str, str]]:
    """The explain block's measured facts as (what, value) pairs, for the console and summary.md."""
    m = block["measured"]
    v = lambda key, digits: _ci_or_dash(m[key], digits)
    bound = {None: "", True: " — trainer-bound", False: " — not trainer-bound"}[block["trainer_bound"]]
    if bold and block["trainer_bound"]:
        bound = " — **trainer-bound**"
    return [
        ("active batch per engine: token-weighted (the batch a generated token saw) / time-weighted",
         f"{v('token_weighted_batch', 2)} / {v('mean_active_batch', 2)}"),
        ("per-token SD gain at the token-weighted batch (τ × decode ÷ SD step, cost table)",
         f"{v('per_token_sd_gain', 2)}×"),
        ("realised gain vs baseline: E2E / generation", f"{v('e2e_speedup', 2)}× / {v('generation_speedup', 2)}×"),
        ("τ over every trajectory / of the response that finished last in each step (set its generation end)",
         f"{v('tau', 2)} / {v('step_setter_tau', 2)}"),
        ("sync AR's generation share of its step", v("sync_ar_generation_share", 3)),
        ("trainer cap (baseline step ÷ trainer time)", f"{v('trainer_cap', 2)}×{bound}"),
    ]


def _who(block: dict) -> str:
    return (f"best point #{block['point']}" if block["is_best"]
            else f"best SD point #{block['point']} (the best point runs no SD)")


def explain_lines(block: dict | None) -> list[str]:
    """The explain block in plain lines (the console summary): the facts, then the ladder (when
    computed) and its command."""
    if not block:
        return []
    out = [f"explain ({_who(block)}, measured in this run):"]
    out += [f"  {what}: {value}" for what, value in _facts(block)]
    lad = block.get("ladder")
    if lad:
        out.append(f"  ladder ({lad['replicates']} paired replicate(s) × {lad['steps']} steps; explain/explain.md):")
        for r in lad["rungs"]:
            f = f" ×{fmt_ci(r['factor'], 3)}" if r.get("factor") else ""
            out.append(f"    {r['label']}:{f} → {fmt_ci(r['gain'], 2)}")
        out.append("  Shapley shares: " + ", ".join(f"{x['factor']} {fmt_ci(x['factor_ratio'], 3)}"
                                                    for x in lad["shapley"]))
        out.append(f"  rerun the ladder alone: {block['command']}")
    else:
        out.append("  " + _ladder_pointer(block, code=""))
    return out


def explain_markdown(block: dict | None) -> list[str]:
    """summary.md's "Where the gain comes from" section."""
    if not block:
        return []
    where = f" ({_values_text(block['values'])})" if block["values"] else ""
    L = ["## Where the gain comes from", "",
         f"Measured in this run at the {_who(block)}{where}, no extra simulation:", "",
         "| fact | value |", "|---|---|"]
    L += [f"| {what} | {value} |" for what, value in _facts(block, bold=True)]
    L.append("")
    lad = block.get("ladder")
    if lad:
        head = (f"The ladder ({lad['replicates']} paired replicate(s) × {lad['steps']} steps; every rung but the "
                "last is a counterfactual; its files are in `explain/`):")
        L += [head, "", "| rung | SD gain (×) | rung factor (×) |", "|---|---|---|"]
        L += [f"| {r['label']} | {fmt_ci(r['gain'], 2)} | {fmt_ci(r['factor'], 3) if r.get('factor') else '—'} |"
              for r in lad["rungs"]]
        shares = ", ".join(f"{x['label']} {fmt_ci(x['factor_ratio'], 3)}" for x in lad["shapley"])
        L += ["", f"Shapley shares (×): {shares}.", "", f"Rerun it alone: {md_code(block['command'])}.", ""]
    else:
        L += [_ladder_pointer(block), ""]
    return L


#: engines running fewer sequences than this on average are flagged (an over-provisioned rollout pool)
LOW_BATCH = 4.0
#: swept fields whose best value on the grid's edge is flagged (the optimum may lie beyond it)
EDGE_FIELDS = ("speculation.k", "pipeline.policy_lag")


def review_warnings(sc, best: dict | None) -> list[str]:
    """What a reviewer should know before reading the best point: its k or policy lag sits on the
    edge of the swept grid (the optimum may lie beyond), its engines run under LOW_BATCH sequences
    on average, or it is trainer-bound."""
    out: list[str] = []
    if not best:
        return out
    for path in EDGE_FIELDS:
        values = sc.sweep.get(path)
        if not values or path not in best["values"] or len(values) < 2:
            continue
        v = best["values"][path]
        grid = sorted(x for x in values if not (path == "speculation.k" and x == 0))
        if grid and v in (grid[0], grid[-1]) and len(grid) >= 1 and not (path == "speculation.k" and v == 0):
            side = "largest" if v == grid[-1] else "smallest"
            what = "draft length" if path == "speculation.k" else "value"
            out.append(f"the best {path} = {v} is the {side} {what} swept ({grid}"
                       f"{' and 0 = AR' if len(grid) < len(values) else ''}): the optimum may lie beyond the grid; "
                       f"extend sweep.{path}")
    batch = (best.get("mean_active_batch") or {}).get("mean")
    if batch is not None and batch < LOW_BATCH:
        out.append(f"the best point's rollout engines run {batch:.1f} sequences on average (< {LOW_BATCH:g}): the pool "
                   "is over-provisioned for this batch, where SD gains most; see the capacity plan")
    cap = (best.get("trainer_cap") or {}).get("mean")
    if cap is not None and best.get("e2e_speedup", {}).get("mean") is not None \
            and best["e2e_speedup"]["mean"] >= 0.9 * cap:
        out.append(f"trainer-bound: the E2E speedup {best['e2e_speedup']['mean']:.2f}× is within 10 % of the trainer "
                   f"cap {cap:.2f}× (baseline step ÷ the point's trainer time); a faster rollout cannot add much")
    return out


def what_ifs_of(sc, plan) -> list[str]:
    """Every `what_if.<field>` on at the scenario or any of its points ([] : predictions only)."""
    found = set(sc.what_ifs)
    for point_sc in plan.point_scenarios.values():
        found |= set(point_sc.what_ifs)
    return sorted(found)


def counterfactual_note(what_if: list[str]) -> str:
    """The one line every output of a counterfactual run carries."""
    return (f"COUNTERFACTUAL — not a prediction: {', '.join(what_if)} on (scenario `what_if:`; see docs/explain.md). "
            "No number here may be read as what this configuration would do.")


def _source(sc) -> str | None:
    return source_file(sc)



def yaml_value(v) -> str:
    """A value as YAML writes it (`null`, `true`, `[0, 3]`), not as Python prints it (`None`, `True`)."""
    return dump_yaml(v, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


def _values_text(values: dict) -> str:
    return ", ".join(f"{k}={yaml_value(v)}" for k, v in values.items()) or "(no sweep)"


def summary_markdown(s: dict) -> str:
    """summary.md: what a design review reads first — the set-up, the best configuration, the
    ladder's explanation, AR vs SD at their best, every point ranked, the capacity plan, the plots
    and the resolved scenario, one section each (`s` is summary.json's dict)."""
    L: list[str] = []
    for section in (_setup_section, _best_section, _explain_section, _best_ar_sd_section, _points_section,
                    _capacity_section, _plots_section, _resolved_section):
        L += section(s)
    return "\n".join(L)


def _setup_section(s: dict) -> list[str]:
    """Title (marked COUNTERFACTUAL under a what-if), description, model, sweep and baseline."""
    L: list[str] = []
    wi = s.get("what_if") or []
    L.append(f"# {md_text(s['scenario'])}: speculative decoding in RL rollouts" + (" — COUNTERFACTUAL" if wi else ""))
    L.append("")
    if wi:
        L.append(f"**{counterfactual_note(wi)}**")
        L.append("")
    L.append(md_text(s['description']))
    L.append("")
    L.append(f"- model **{md_text(s['model'])}** on **{md_text(s['hardware'])}**; seed {s['seed']}; specsim {s['specsim_version']}")
    if s.get("rollout_weight_dtype"):
        L.append(f"- rollout weights: {md_text(s['rollout_weight_dtype']['source'])}")
    L.append(f"- {s['combinations']} sweep point(s) × {s['replicates']} replicate(s) = {s['rows']} rows")
    swept = ", ".join(f"`{k}` ∈ {yaml_value(v)}" for k, v in s["swept"].items()) or "nothing swept"
    L.append(f"- swept: {swept}")
    b = s["baseline"]
    L.append(f"- baseline: the point with {_values_text(b['overrides'])} ({b['mode']}"
             f"{', = sync AR' if b['is_sync_ar'] else ''}); sync AR: {s['sync_ar']['definition']}"
             f"{' — the baseline itself' if s['sync_ar']['is_baseline'] else ''}")
    L.append(f"- speedups are steady-state (warm-up steps excluded) step-time ratios; intervals: {s['ci']}")
    L.append("")
    return L


def _best_section(s: dict) -> list[str]:
    """The best point's table, the warnings and its margin over the runner-up (nothing without a best point)."""
    best = s.get("best")
    if not best:
        return []
    L: list[str] = []
    L.append("## Best configuration")
    L.append("")
    L.append(f"Ranked by mean `{s['rank_by']}` (within {100 * TIE_REL:.1f} % the "
             f"simpler configuration wins: smaller k, no SD first). Best point #{best['point']}: {_values_text(best['values'])} "
             f"— {best['sd_policy']}, k = {best['k']}, policy lag = {best['policy_lag']} ({best['mode']}).")
    L.append("")
    L.append("| quantity | value |")
    L.append("|---|---|")
    L.append(f"| E2E speedup vs sync AR | {fmt_ci(best['e2e_speedup_vs_sync_ar'])}× |")
    L.append(f"| E2E speedup vs baseline | {fmt_ci(best['e2e_speedup'])}× |")
    L.append(f"| generation speedup vs baseline | {fmt_ci(best['generation_speedup'])}× |")
    L.append(f"| step time | {fmt_ci(best['step_s'], 1)} s |")
    gen_label = ("generation latency (a step's prompts released → its last response; overlaps "
                 "the steps in flight)" if best["mode"] == "async" else "generation time")
    L.append(f"| {gen_label} | {fmt_ci(best['generation_s'], 1)} s |")
    L.append(f"| exposed generation | {fmt_ci(best['exposed_generation_s'], 1)} s |")
    idle = best.get("trainer_idle_share") or {}
    if idle.get("mean") is not None:
        L.append(f"| trainer idle (exposed generation ÷ step) | {fmt_ci(idle, 3)} — "
                 f"{bottleneck_text(idle['mean'])} |")
    L.append(f"| τ (tokens per verify) | {fmt_ci(best['tau'], 2)} |")
    if (best.get("mean_active_batch") or {}).get("mean") is not None:
        L.append(f"| active batch per engine (time-weighted) | {fmt_ci(best['mean_active_batch'], 2)} |")
    L.append(f"| GPU-hours per step | {fmt_ci(best['gpu_hours_per_step'], 2)} |")
    L.append("")
    for w in s.get("warnings") or []:
        L.append(f"- **warning**: {w}")
    if s.get("warnings"):
        L.append("")
    margin = s.get("best_vs_runner_up")
    if margin:
        L.append(runner_up_text(margin, s["rank_by"], _values_text(values_of(s, margin["runner_up"]))))
        L.append("")
    return L


def _explain_section(s: dict) -> list[str]:
    """The ladder's explanation of the best point (explain_markdown; nothing without one)."""
    return explain_markdown(s.get("explain"))


def _best_ar_sd_section(s: dict) -> list[str]:
    """The best AR and the best SD point and SD's gain over the best AR configuration (when both exist)."""
    if not (s.get("best_ar") and s.get("best_sd")):
        return []
    ar, sd = s["best_ar"], s["best_sd"]
    return [(f"Best AR point #{ar['point']} ({_values_text(ar['values'])}): step "
             f"{fmt_ci(ar['step_s'], 1)} s. Best SD point #{sd['point']} ({_values_text(sd['values'])}): step "
             f"{fmt_ci(sd['step_s'], 1)} s. **SD gain over the best AR configuration: "
             f"{fmt_ci(s.get('sd_gain_over_best_ar'))}×**."), ""]


def _points_section(s: dict) -> list[str]:
    """Every point, ranked, with a trainer-idle column when any point has one."""
    L: list[str] = []
    L.append(f"## All points, ranked by `{s.get('rank_by', 'e2e_speedup_vs_sync_ar')}` (means over replicates; 95 % CI where n ≥ 2)")
    L.append("")
    idle_col = any((e.get("trainer_idle_share") or {}).get("mean") is not None for e in s["points"])
    L.append("| rank | # | point | policy | E2E vs sync AR | E2E vs baseline | generation vs baseline | step s | τ |"
             + (" trainer idle |" if idle_col else ""))
    L.append("|---|---|---|---|---|---|---|---|---|" + ("---|" if idle_col else ""))
    for rank, e in enumerate(ranked_points(s), 1):
        idle = e.get("trainer_idle_share") or {}
        extra = ((f" {fmt_ci(idle, 3)} ({bottleneck(idle['mean'])}) |" if idle.get("mean") is not None else " — |")
                 if idle_col else "")
        L.append(f"| {rank} | {e['point']} | {_values_text(e['values'])} | {e['sd_policy']} | "
                 f"{fmt_ci(e['e2e_speedup_vs_sync_ar'])} | {fmt_ci(e['e2e_speedup'])} | "
                 f"{fmt_ci(e['generation_speedup'])} | {fmt_ci(e['step_s'], 1)} | {fmt_ci(e['tau'], 2)} |{extra}")
    L.append("")
    return L


def _capacity_section(s: dict) -> list[str]:
    """The capacity plan: the minimum rollout GPUs reaching the target with and without SD, its
    notes and one row per simulated size (nothing without a capacity plan)."""
    cap = s.get("capacity") or {}
    if not cap.get("rows"):
        return []
    L: list[str] = []
    L.append("## Capacity plan")
    L.append("")
    sd_label = f"SD (k = {cap['k']}, best SD point #{cap['reference_point']})" if cap["has_sd"] else "SD: none"
    n_rep = cap.get("replicates", 1)
    reps = f"means over {n_rep} replicates (95 % CI)" if n_rep > 1 else "one replicate"
    L.append(f"Rollout cluster sizes {cap['sizes']} (whole engines of {cap['gpus_per_engine']} GPUs), {reps}, "
             f"AR vs {sd_label}. Target step time: "
             + (f"{cap['target_step_s']:.1f} s ({cap['target_source']})." if cap.get("target_step_s") else "n/a."))
    L.append("")
    for v, label in (("ar", "without SD"), ("sd", "with SD")):
        m = cap["minimum"].get(v)
        if m is None:
            continue
        if m.get("simulated") is None:
            L.append(f"- {label}: {m.get('note', 'target not reached')}")
        else:
            L.append(f"- minimum rollout GPUs reaching the target {label}: **{capacity_answer(m, cap['sizes'])}** "
                     "(interpolation: log-log between simulated sizes)"
                     + (f"; {m['note']}" if m.get("note") else ""))
    L.append("")
    for note in cap.get("notes", []):
        L.append(f"- **note**: {note}")
    if cap.get("notes"):
        L.append("")
    idle_col = any(r.get("trainer_idle_share") is not None for r in cap["rows"])
    L.append("| variant | rollout GPUs | total GPUs | step s | GPU-hours / 1,000 steps |"
             + (" trainer idle | bottleneck |" if idle_col else "") + " note |")
    L.append("|---|---|---|---|---|" + ("---|---|" if idle_col else "") + "---|")
    for r in cap["rows"]:
        step = fmt_ci({"mean": r["step_s"], "ci95": r.get("step_s_ci95")}, 1) if r["step_s"] is not None else "—"
        gh = f"{r['gpu_hours_per_1000_steps']:,.0f}" if r["gpu_hours_per_1000_steps"] is not None else "—"
        idle = r.get("trainer_idle_share")
        extra = (f" {100 * idle:.1f} % | {bottleneck(idle)} |" if idle is not None else " — | — |") if idle_col else ""
        L.append(f"| {r['variant'].upper()} | {r['rollout_gpus']} | {r['total_gpus'] or '—'} | {step} | {gh} |"
                 f"{extra} {(r['error'] or '')[:120]} |")
    L.append("")
    return L


def _plots_section(s: dict) -> list[str]:
    """Each plot's file and its data file (nothing without plots)."""
    if not s.get("plots"):
        return []
    L = ["## Plots", ""]
    for name, f in s["plots"].items():
        L.append(f"- {name}: `plots/{f}` (data: `plots/{Path(f).with_suffix('.csv').name}`)")
    L.append("")
    return L


def _resolved_section(s: dict) -> list[str]:
    """The resolved scenario as YAML, in a fence longer than any backtick run inside it."""
    text = dump_yaml(s["resolved_scenario"], sort_keys=False).rstrip()
    fence = "`" * max(3, len(md_fence(text)))
    return ["## Resolved scenario", "", f"{fence}yaml", text, fence, ""]
