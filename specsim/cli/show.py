"""`specsim show model|drafter|lengths`: typer commands that parse options, call :mod:`specsim.explain.show`
(which computes the reports as data) and print them as rich tables or ``--format json``.

:mod:`specsim.cli.app` adds :data:`show_app` to its app as ``specsim show`` (and registers
``show scenario`` from :mod:`specsim.cli.run` on it). Errors and shared options come from
:mod:`specsim.cli.common`.
"""

from typing import Annotated

import typer
import yaml

from specsim.calibrate.kernels.describe import hardware_info
from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, drafter_kind, drafter_kind_names, load_model
from specsim.cli import common
from specsim.cli.common import (
    CatalogOpt,
    Format,
    FormatOpt,
    HardwareOpt,
    SetOpt,
    handle_errors,
    option_errors,
    use_catalog,
)
from specsim.errors import SpecError, load_yaml_text
from specsim.explain.show import (
    drafter_acceptance,
    drafter_report,
    lengths_report,
    model_layout,
    model_report,
    schedule_report,
    tree_report,
)
from specsim.policy import Schedule
from specsim.policy.schedule import ALLOWED, parse_batch_schedule
from specsim.world.resolve import rollout_weight_dtypes

# the command bodies' short names for the shared helpers
_bad_option, _b, _console, _emit_json = common.bad_option, common.billions, common.console, common.emit_json
_load_scenario, _table = common.load_scenario_opts, common.table

show_app = typer.Typer(help="Inspect a model's costs, a drafter's acceptance, or a scenario's response lengths.",
                       no_args_is_help=True, rich_markup_mode=None)


# ============================================================================ show model
@show_app.command("model")
@handle_errors
def show_model(
    name: Annotated[str, typer.Argument(help="Catalog model name (specsim list models), or a path to a Hugging Face "
                                             "config.json or a directory holding one.")],
    hardware: HardwareOpt = "h100_sxm",
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel degree (MoE only).")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline stages.")] = 1,
    context: Annotated[int, typer.Option(help="Cached context per sequence (tokens) for the step table.")] = 1024,
    weight_dtype: Annotated[str | None, typer.Option(help="Weight dtype: bf16, fp8, int4, ... (default: what the "
                                                         "config's quantization_config names, else bf16).")] = None,
    kv_dtype: Annotated[str, typer.Option(help="KV-cache dtype.")] = "bf16",
    gpu_memory_utilization: Annotated[float, typer.Option(help="Share of HBM the engine may use.")] = 0.9,
    max_batched_tokens: Annotated[int, typer.Option(help="Activation workspace sizing (vLLM max_num_batched_tokens).")] = 8192,
    max_batch_exp: Annotated[int, typer.Option(help="Table batches 1, 2, 4, ..., 2^this.")] = 10,
    k: Annotated[int, typer.Option("--k", help="Draft length for the verify/decode column.")] = 3,
    catalog: CatalogOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Sizes (against the published totals), memory plan and decode-step latency of a model on a layout."""

    if context < 0:
        raise _bad_option("--context", context, ">= 0 tokens")
    if not 0 <= max_batch_exp <= 16:
        raise _bad_option("--max-batch-exp", max_batch_exp, "in 0..16")
    if k < 1:
        raise _bad_option("--k", k, ">= 1")
    if not 0 < gpu_memory_utilization <= 1:
        raise _bad_option("--gpu-memory-utilization", gpu_memory_utilization, "in (0, 1]")
    hw = load_hardware(hardware)
    with use_catalog(catalog):
        model = load_model(name)

    dtypes = rollout_weight_dtypes(weight_dtype, model)
    with option_errors():
        layout = model_layout(model, tp=tp, pp=pp, ep=ep, weight_dtype=dtypes.weight_dtype,
                              expert_weight_dtype=dtypes.expert_weight_dtype, kv_dtype=kv_dtype)
    info = model_report(model, hw, layout, context=context, gpu_memory_utilization=gpu_memory_utilization,
                        max_batched_tokens=max_batched_tokens, max_batch_exp=max_batch_exp, k=k)
    info["weight_dtype_source"] = dtypes.source.replace("rollout.weight_dtype", "--weight-dtype")
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    con.print(f"[bold]{info['model']}[/bold] on {info['hardware']}, {info['layout']}   ({info['source']})")
    s = _table("sizes", "quantity", "value")
    pub = info["published"]
    s.add_row("total params", _b(info["total_params"]) + _vs(pub.get("total_params_b"), pub.get("total_error_pct")))
    s.add_row("active params / token", _b(info["active_params"]))
    if pub.get("active_params_b") is not None:
        s.add_row(f"active params, {pub['active_convention_text']}",
                  _b(pub["active_params_as_published"]) + _vs(pub["active_params_b"], pub["active_error_pct"]))
    arch = info["architecture"]
    s.add_row("architecture", arch["summary"])
    s.add_row("weights per GPU", f"{info['weight_gb_per_gpu']:.2f} GB")
    s.add_row("weight dtype", info["weight_dtype_source"])
    s.add_row(f"KV bytes / token ({kv_dtype}, all layers)", f"{info['kv_bytes_per_token']:,.0f}")
    s.add_row("KV bytes / token per GPU", f"{info['kv_bytes_per_token_per_gpu']:,.0f}")
    s.add_row(f"KV capacity per replica (util {gpu_memory_utilization:g})", f"{info['kv_capacity_tokens']:,} tokens")
    s.add_row("ridge point (FLOP/byte, achieved)", f"{info['ridge_point_flops_per_byte']:.0f}")
    con.print(s)
    if pub.get("source"):
        con.print(f"published: {pub['source']}", markup=False)
    m = _table("memory per GPU", "item", "GB")
    for label, v in info["memory_gb_per_gpu"].items():
        m.add_row(common.gb_label(label), f"{v:.2f}")
    con.print(m)
    t = _table(f"decode step at {context} tokens of context per sequence (incl. "
              f"{info['step_overhead_ms']:g} ms step overhead)",
              "batch", "step ms", "tokens/s", "bound", f"verify(k={k})/decode pass", "KV fits", right_from=0)
    for row in info["rows"]:
        t.add_row(str(row["batch"]), f"{row['step_ms']:.2f}", f"{row['tokens_per_s']:,.0f}", row["bound"],
                  f"{row[f'verify_k{k}_over_decode']:.2f}", "yes" if row["kv_fits"] else "no")
    con.print(t)


def _vs(published_b, error_pct) -> str:
    """'   (published 671 B, +0.00 %)' or ''."""
    if published_b is None:
        return ""
    return f"   (published {published_b:g} B, {error_pct:+.2f} %)"


@show_app.command("hardware")
@handle_errors
def show_hardware(
    name: Annotated[str, typer.Argument(help="Profile name (specsim list hardware) or YAML path.")],
    fmt: FormatOpt = Format.table,
) -> None:
    """Peaks, fitted terms with their fit quality, and what is still a prior."""

    info = hardware_info(name)
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    con.print(f"[bold]{info['name']}[/bold]: {info['description']}   ({info['path']})")
    for title, key, cols in (("peaks", "peaks", ("quantity", "value", "unit", "source")),
                             ("efficiency", "efficiency", ("parameter", "value", "unit", "source")),
                             ("speculative-decoding costs", "sd_costs", ("parameter", "value", "unit", "source")),
                             ("measured-kernel terms", "kernel_fit", ("term", "parameter", "value", "unit")),
                             ("fit quality", "fit_quality", ("term", "rows", "median_abs_rel_error", "p90_abs_rel_error",
                                                             "at_bound", "table"))):
        if info[key]:
            t = _table(title, *cols)
            for r in info[key]:
                t.add_row(*(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols))
            con.print(t)
    prov = info["provenance"]
    if prov:
        con.print(f"fitted from {prov.get('package')} ({prov.get('system')}/{prov.get('backend')}, {prov.get('date')}); "
                  f"reproduce: {prov.get('command')}")
        beta = prov.get("insitu_stream_fit") or {}
        if beta.get("how"):
            con.print(f"in-situ streaming factor: {beta['how']}")
        multi = prov.get("multi_token_attention_fit") or {}
        if multi.get("how"):
            con.print(f"multi-token attention (passes with > 1 query token per sequence): {multi['how']}")
    con.print("still priors: " + (", ".join(info["priors"]) or "none"))


# ============================================================================ show drafter
#: the acceptance laws' parameters whose option is not their name (`option_errors`)
_DRAFTER_OPTIONS = {"position_decay": "--decay", "update_every_steps": "--update-every", "staleness": "--tau-after",
                    "drafter_kind": "--kind", "k": "--tau-k",
                    **{f"tree.{p}": "--tree" for p in ("branching", "sibling_factor", "depth", "topk", "verify_tokens")}}

def _schedule_table(rows: list[dict], context: int):
    """`show drafter --schedule`'s table: the schedule's k and expected speedup by batch, and the best fixed k."""
    t = _table(f"schedule: expected speedup by batch ({context} tokens of context per sequence)", "batch", "k",
               "τ", "SD step ms", "decode step ms", "speedup", "best k", "best speedup")
    for r in rows:
        t.add_row(str(r["batch"]), str(r["k"]), f"{r['tau']:.3f}", f"{r['sd_step_ms']:.3f}",
                  f"{r['decode_step_ms']:.3f}", f"{r['expected_speedup']:.3f}", str(r["best_k"]),
                  f"{r['best_speedup']:.3f}")
    return t


def _schedule_option(text: str):
    """`--schedule`: a YAML/JSON mapping (or list) in vLLM's format, checked by the policy's own rules."""

    try:
        raw = load_yaml_text(text)
    except yaml.YAMLError:
        raise _bad_option("--schedule", text, ALLOWED) from None
    try:
        table = parse_batch_schedule(raw)
    except SpecError as exc:
        raise _bad_option("--schedule", text, exc.allowed) from None
    return Schedule(k=max(k for _, _, k in table), table=table)


def _parse_steps(text: str) -> list[int]:
    try:
        steps = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise _bad_option("--steps", text, "comma-separated whole numbers >= 0, e.g. 0,10,50,100") from None
    if not steps or min(steps) < 0:
        raise _bad_option("--steps", text, "comma-separated whole numbers >= 0, e.g. 0,10,50,100")
    return steps


@show_app.command("drafter")
@handle_errors
def show_drafter(
    model: Annotated[str, typer.Option("--model", help="Target (policy) model: a catalog name or a config.json path.")] = "Qwen3-8B",
    kind: Annotated[str, typer.Option(help=" | ".join(drafter_kind_names()))] = "eagle3",
    tau: Annotated[float | None, typer.Option(help="Fresh mean acceptance length (tokens per verify) at --tau-k.")] = None,
    tau_k: Annotated[int, typer.Option("--tau-k", help="Draft length --tau was measured at.")] = 3,
    alpha: Annotated[float | None, typer.Option(help="Per-token acceptance instead of --tau.")] = None,
    decay: Annotated[float, typer.Option(help="Position decay d in (0, 1] (alpha_j = alpha d^(j-1)).")] = 1.0,
    heterogeneity: Annotated[float | None, typer.Option(help="Beta concentration of per-sequence alpha.")] = None,
    tau_after: Annotated[float | None, typer.Option(help="Staleness: tau measured --after-versions later.")] = None,
    after_versions: Annotated[int | None, typer.Option(help="Policy versions between --tau and --tau-after.")] = None,
    rate_per_version: Annotated[float | None, typer.Option(help="Staleness: e-folding rate of alpha per version.")] = None,
    floor_alpha: Annotated[float, typer.Option(help="Staleness floor of alpha.")] = 0.0,
    update_every: Annotated[int, typer.Option(help="Online drafter update every I RL steps (0 = never).")] = 0,
    steps: Annotated[str, typer.Option(help="RL steps to show, comma-separated.")] = "0,10,20,50,100",
    k: Annotated[int, typer.Option("--k", help="Draft length for the over-steps table and the cost.")] = 3,
    hardware: HardwareOpt = "h100_sxm",
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree of the engine.")] = 1,
    context: Annotated[int, typer.Option(help="Context (tokens) for the batch-1 cost.")] = 1024,
    weight_dtype: Annotated[str, typer.Option(help="Policy weight dtype.")] = "bf16",
    draft_vocab: Annotated[int | None, typer.Option(help="EAGLE-3 draft vocabulary (default: catalog).")] = None,
    schedule: Annotated[str | None, typer.Option(help="A `schedule` policy's table in vLLM's format, e.g. "
                                                      "'{\"1-16\": 3, \"17-128\": 2, \"129-4096\": 0}': its expected "
                                                      "speedup by batch size.")] = None,
    tree: Annotated[str | None, typer.Option(help="Draft tree: children per node at depths 1..D, e.g. 4,2,1; or SGLang's EAGLE tree "
                                                       "topk:STEPS,TOPK,NUM_DRAFT_TOKENS, e.g. topk:5,8,32.")] = None,
    catalog: CatalogOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """A drafter's acceptance (τ by draft length and over RL steps) and its cost at batch 1."""

    if (tau is None) == (alpha is None):
        raise _bad_option("--tau/--alpha", {"tau": tau, "alpha": alpha}, "exactly one of --tau (with --tau-k) or --alpha")
    if k < 1:
        raise _bad_option("--k", k, ">= 1")
    if context < 0:
        raise _bad_option("--context", context, ">= 0 tokens")
    step_list = _parse_steps(steps)
    with use_catalog(catalog):
        target = load_model(model)
    arch = drafter_arch(kind, target, draft_vocab)
    hw = load_hardware(hardware)
    with option_errors():
        layout = model_layout(target, tp=tp, weight_dtype=weight_dtype)
    _check_staleness_options(kind, tau_after, after_versions, rate_per_version, update_every)
    with option_errors(_DRAFTER_OPTIONS):
        acc = drafter_acceptance(kind, tau=tau, tau_k=tau_k, alpha=alpha, decay=decay, heterogeneity=heterogeneity,
                                 tau_after=tau_after, after_versions=after_versions, rate_per_version=rate_per_version,
                                 floor_alpha=floor_alpha, update_every=update_every)
    info = drafter_report(acc, arch, target, hw, layout, k=k, steps=step_list, context=context)
    if schedule is not None:
        info["schedule"] = schedule_report(_schedule_option(schedule), acc, arch, target, hw, layout, context=context)
    if tree is not None:
        with option_errors(_DRAFTER_OPTIONS):
            info["tree"] = tree_report(acc, tree)
    if fmt is Format.json:
        _emit_json(info)
        return
    _print_drafter(info, acc, arch, target, k=k, context=context)


def _check_staleness_options(kind: str, tau_after: float | None, after_versions: int | None,
                             rate_per_version: float | None, update_every: int) -> None:
    """The staleness options of `show drafter`: none for a drafter that never goes stale or is
    never retrained; --tau-after or --rate-per-version, not both; --tau-after with --after-versions."""
    spec = drafter_kind(kind)
    if not (spec.goes_stale and spec.retrainable):
        for opt, val, default in (("--tau-after", tau_after, None), ("--rate-per-version", rate_per_version, None),
                                  ("--update-every", update_every, 0)):
            if val != default:
                raise _bad_option(opt, val, f"omitted for a {kind} drafter (it never goes stale and is never retrained)")
    if tau_after is not None and rate_per_version is not None:
        raise _bad_option("--tau-after", tau_after, "given without --rate-per-version (one or the other)")
    if tau_after is not None and after_versions is None:
        raise _bad_option("--after-versions", after_versions, "given together with --tau-after")


def _print_drafter(info: dict, acc, arch, target, *, k: int, context: int) -> None:
    """`show drafter`'s tables: τ by draft length, over RL steps, the batch-1 cost, and the
    schedule's and the tree's answers when asked."""
    cost = info["cost_batch1"]
    con = _console()
    updates = f"updated every {acc.update_every_steps} steps" if acc.update_every_steps else "never updated"
    con.print(f"[bold]{arch.kind}[/bold] drafter for {target.name}: alpha0 = {acc.alpha0:.4f}, decay {acc.decay:g}, "
              f"heterogeneity {acc.concentration if acc.concentration is not None else 'none'}, "
              f"staleness rate {acc.staleness.decay_per_version:.4g}/version (floor {acc.staleness.floor_alpha:g}), "
              f"{updates}")
    con.print(f"  ({arch.source})")
    t = _table("fresh drafter: mean tokens per verify τ by draft length", "k", "τ", "(τ-1)/k accepted per draft")
    for row in info["tau_by_k"]:
        t.add_row(str(row["k"]), f"{row['tau']:.3f}", f"{(row['tau'] - 1) / row['k']:.3f}")
    con.print(t)
    t = _table(f"over RL steps at k={k}", "step", "versions since update", "α", "τ")
    for row in info["over_steps"]:
        t.add_row(str(row["step"]), str(row["versions_since_update"]), f"{row['alpha']:.4f}", f"{row['tau']:.3f}")
    con.print(t)
    t = _table(f"cost at batch 1, {context} tokens of context, {cost['hardware']} {cost['layout']}", "quantity", "value")
    if arch.model is None:
        t.add_row("draft pass", "none (CPU lookup, no GPU pass)")
    else:
        t.add_row("drafter params", _b(cost["drafter_params"]))
        t.add_row("drafter weights per GPU", f"{cost['drafter_weight_gb_per_gpu']:.2f} GB")
        t.add_row("draft pass", f"{cost['draft_pass_ms']:.3f} ms (+{cost['draft_overhead_ms']:g} ms overhead)")
    t.add_row("decode pass (policy)", f"{cost['decode_pass_ms']:.3f} ms")
    t.add_row("draft / decode pass (c)", f"{cost['draft_over_decode']:.3f}")
    t.add_row(f"SD step (k={k} drafts + verify, with overheads)", f"{cost[f'sd_step_k{k}_ms']:.3f} ms")
    t.add_row("decode step (with overheads)", f"{cost['decode_step_ms']:.3f} ms")
    con.print(t)
    if "schedule" in info:
        con.print(_schedule_table(info["schedule"], context))
    if "tree" in info:
        tr = info["tree"]
        con.print(f"tree {tr.get('branching', tr.get('tree'))} ({tr['tree_tokens']} draft tokens, depth {tr['depth']}): expected accepted "
                  f"length τ = {tr['tau']:.3f} ({tr['expected_accepted_tokens']:.3f} drafts accepted; chain of the "
                  f"same depth {tr['chain_tau_same_depth']:.3f}; sibling factor {tr['sibling_factor']:g})")


# ============================================================================ show lengths
@show_app.command("lengths")
@handle_errors
def show_lengths(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML.")],
    sets: SetOpt = None,
    samples: Annotated[int | None, typer.Option(help="Responses to draw (default: one RL step, prompts × group_size).")] = None,
    step: Annotated[int, typer.Option(help="RL step (applies workload.length_growth_per_step).")] = 0,
    fmt: FormatOpt = Format.table,
) -> None:
    """Draw one step's response lengths as the simulator does and summarise the tail."""

    if samples is not None and samples < 1:
        raise _bad_option("--samples", samples, ">= 1")
    if step < 0:
        raise _bad_option("--step", step, ">= 0")
    info = lengths_report(_load_scenario(scenario, sets), samples=samples, step=step)
    summary, cap = info["summary"], info["max_response_tokens"]
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    con.print(f"[bold]{info['scenario']}[/bold]: response_tokens {info['distribution']}, cap {cap}, groups of "
              f"{info['group_size']} (correlation {info['group_correlation']:g}), step {step} "
              f"(growth ×{info['growth']:.3f}), seed {info['seed']}")
    t = _table(f"{summary['n']:,} response lengths (tokens)", "statistic", "value")
    for key, label in [("mean_tokens", "mean"), ("p50_tokens", "p50"), ("p90_tokens", "p90"),
                       ("p99_tokens", "p99"), ("p999_tokens", "p99.9"), ("max_tokens", "max")]:
        t.add_row(label, f"{summary[key]:,.0f}")
    t.add_row("share of tokens in the longest 5 %", f"{summary['top5pct_token_share']:.1%}")
    t.add_row(f"share truncated at {cap}", f"{summary['truncated_share']:.1%}")
    con.print(t)
