"""specsim command line: parses arguments, calls the library, prints. No modeling here.

Commands (``specsim --help``):

    specsim list hardware|models
    specsim show model NAME      --hardware H --tp N [--ep N] [--pp N] [--context C] ...
    specsim show drafter         --model M --kind K (--tau T --tau-k K | --alpha A) ...
    specsim show lengths SCENARIO [--set path=value ...] [--samples N]
    specsim check SCENARIO        [--set path=value ...] [--format table|json]

Every command runs inside :func:`user_errors`: bad input of any kind (ScenarioError, SpecError,
LayoutError, a missing file, bad YAML) prints one paragraph
``error: <file>: <field>: <allowed>, got <value>`` to stderr and exits 2 — never a traceback.
An unexpected exception (a bug) prints ``internal error: ...`` and exits 1; set SPECSIM_DEBUG=1
to see its traceback.

Adding a command: define it on ``app`` (or a sub-typer), decorate it with ``@handle_errors``
below the ``@app.command`` line, take ``--set`` via ``SetOpt`` and ``--format`` via ``FormatOpt``,
and print through ``_console()`` / ``_emit_json()``.
"""

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
import yaml
from rich.console import Console
from rich.table import Table

from specsim import __version__
from specsim.errors import LayoutError, SpecError
from specsim.report.tables import jsonable
from specsim.scenario import ScenarioError

COMMAND_LINE = "command line"
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1

app = typer.Typer(
    name="specsim",
    help="Simulate speculative decoding in RL post-training rollouts: how much faster does an RL step get "
         "with SD, on which model, cluster and workload?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
show_app = typer.Typer(help="Inspect a model's costs, a drafter's acceptance, or a scenario's response lengths.",
                       no_args_is_help=True, rich_markup_mode=None)
app.add_typer(show_app, name="show")


# ============================================================================ errors → exit 2
def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _short_repr(value: Any, limit: int = 120) -> str:
    v = repr(value)
    return v if len(v) <= limit else v[: limit - 3] + "..."


def error_message(exc: BaseException) -> str:
    """The one-paragraph message for a user error: ``<file>: <field>: <allowed>, got <value>``."""
    if isinstance(exc, ScenarioError):
        return exc.message()
    if isinstance(exc, SpecError):
        return f"{exc.where or COMMAND_LINE}: {exc.field}: must be {exc.allowed}, got {_short_repr(exc.value)}"
    if isinstance(exc, LayoutError):
        return str(exc)
    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None)
        name = getattr(mark, "name", None) or "(yaml)"
        return f"{name}: (file): valid YAML ({getattr(exc, 'problem', None) or exc.__class__.__name__}), got <unparseable>"
    if isinstance(exc, UnicodeDecodeError):
        return "(file): (file): a UTF-8 text file, got <binary>"
    if isinstance(exc, OSError):
        name = exc.filename if exc.filename is not None else "(file)"
        return f"{name}: (file): an existing, readable file ({exc.strerror or exc.__class__.__name__}), got {str(name)!r}"
    return f"{exc.__class__.__name__}: {exc}"


USER_ERRORS: tuple[type[BaseException], ...] = (ScenarioError, SpecError, LayoutError, yaml.YAMLError,
                                                UnicodeDecodeError, OSError)


def _fail(msg: str, code: int = EXIT_USER_ERROR) -> None:
    """Print ``error: msg`` (one paragraph) to stderr and exit with `code` (2: bad input)."""
    typer.echo(f"error: {_one_line(msg)}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Map user errors to one stderr paragraph + exit 2, and bugs to ``internal error`` + exit 1."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        typer.echo("interrupted: every finished point is already saved; rerun the same command to resume", err=True)
        raise typer.Exit(130) from None
    except USER_ERRORS as exc:
        _fail(error_message(exc))
    except Exception as exc:  # a bug, not bad input
        if os.environ.get("SPECSIM_DEBUG"):
            raise
        typer.echo(f"internal error: {_one_line(f'{exc.__class__.__name__}: {exc}')} "
                   "(this is a bug in specsim; rerun with SPECSIM_DEBUG=1 for the traceback)", err=True)
        raise typer.Exit(EXIT_INTERNAL_ERROR) from None


def handle_errors(fn: Callable) -> Callable:
    """Decorator: run a command inside :func:`user_errors`. Put it below ``@app.command``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with user_errors():
            return fn(*args, **kwargs)

    return wrapper


def _bad_option(option: str, value: Any, allowed: str) -> SpecError:
    return SpecError(option, value, allowed, where=COMMAND_LINE)


# ============================================================================ shared options / output
class Format(str, Enum):
    table = "table"
    json = "json"


SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", "-s", metavar="PATH=VALUE", help="Override a scenario field, e.g. --set speculation.k=5 (repeatable).")]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", help="Hardware profile name (specsim list hardware) or YAML path.")]


def _console() -> Console:
    """A console on the current stdout (so test runners capture it); wide when not a terminal."""
    out = sys.stdout
    width = None if out.isatty() else 160
    return Console(file=out, width=width, soft_wrap=False, highlight=False)


def _emit_json(obj: Any) -> None:
    typer.echo(json.dumps(jsonable(obj), indent=2))


def _table(title: str, *columns: str, right_from: int = 1) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold", min_width=len(title) + 2)
    for i, c in enumerate(columns):
        t.add_column(c, justify="right" if i >= right_from else "left")
    return t


def _gb(nbytes: float) -> float:
    return float(nbytes) / 1e9


def _b(params: float) -> str:
    return f"{params / 1e9:.2f} B"


def _layout(model, **kw):
    """A ParallelLayout from command-line options; errors name the option (--tp, --weight-dtype, ...)."""
    from specsim.cost.layout import ParallelLayout

    try:
        layout = ParallelLayout(**kw)
    except SpecError as exc:
        raise _bad_option(f"--{exc.field.replace('_', '-')}", exc.value, exc.allowed) from None
    if model.heads % layout.tp:
        raise _bad_option("--tp", layout.tp, f"a divisor of the {model.heads} attention heads of {model.name}")
    if model.moe is None and layout.ep > 1:
        raise _bad_option("--ep", layout.ep, f"1 for the dense model {model.name}")
    if layout.pp > model.layers:
        raise _bad_option("--pp", layout.pp, f"<= the {model.layers} layers of {model.name}")
    return layout


def _load_scenario(path: str, sets: list[str] | None):
    from specsim.scenario import load_scenario

    return load_scenario(path, list(sets or ()))


# ============================================================================ root
def _version(value: bool) -> None:
    if value:
        typer.echo(f"specsim {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """specsim: calibrated simulation of speculative decoding in RL rollouts."""


# ============================================================================ list
class ListWhat(str, Enum):
    hardware = "hardware"
    models = "models"


@app.command("list")
@handle_errors
def list_cmd(what: Annotated[ListWhat, typer.Argument(help="What to list.")]) -> None:
    """List the bundled hardware profiles or the model catalog."""
    con = _console()
    if what is ListWhat.hardware:
        from specsim.hardware import list_hardware, load_hardware

        t = _table("hardware profiles (per GPU, dense peaks)", "name", "description", "BF16 TF/s", "HBM GB",
                   "HBM TB/s", "NVLink GB/s/dir", "NVLink domain", right_from=2)
        for name in list_hardware():
            hw = load_hardware(name)
            t.add_row(name, hw.description, f"{hw.flops_per_s('bf16') / 1e12:.0f}", f"{_gb(hw.hbm_bytes):.0f}",
                      f"{hw.hbm_bw_bytes_per_s / 1e12:.2f}", f"{hw.nvlink_bw_bytes_per_s / 1e9:.0f}",
                      str(hw.nvlink_domain_gpus))
        con.print(t)
        return
    from specsim.model import list_models, load_model

    t = _table("model catalog", "name", "params", "active params", "layers", "MoE experts/top-k", "source",
               right_from=1)
    for name in list_models():
        m = load_model(name)
        moe = f"{m.moe.experts}/{m.moe.top_k}" if m.moe else "dense"
        t.add_row(name, _b(m.total_params), _b(m.active_params), str(m.layers), moe, m.source)
    t.columns[-1].justify = "left"
    con.print(t)


# ============================================================================ show model
@show_app.command("model")
@handle_errors
def show_model(
    name: Annotated[str, typer.Argument(help="Catalog model name (specsim list models).")],
    hardware: HardwareOpt = "h100_sxm",
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel degree (MoE only).")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline stages.")] = 1,
    context: Annotated[int, typer.Option(help="Cached context per sequence (tokens) for the step table.")] = 1024,
    weight_dtype: Annotated[str, typer.Option(help="Weight dtype: bf16, fp8, int4, ...")] = "bf16",
    kv_dtype: Annotated[str, typer.Option(help="KV-cache dtype.")] = "bf16",
    gpu_memory_utilization: Annotated[float, typer.Option(help="Share of HBM the engine may use.")] = 0.9,
    max_batched_tokens: Annotated[int, typer.Option(help="Activation workspace sizing (vLLM max_num_batched_tokens).")] = 8192,
    max_batch_exp: Annotated[int, typer.Option(help="Table batches 1, 2, 4, ..., 2^this.")] = 10,
    k: Annotated[int, typer.Option("--k", help="Draft length for the verify/decode column.")] = 3,
    fmt: FormatOpt = Format.table,
) -> None:
    """Sizes, memory plan and decode-step latency of a model on a layout."""
    from specsim.cost.forward import decode_cost, math_dtype, step_cost, verify_cost
    from specsim.cost.memory import memory_plan
    from specsim.cost.roofline import ridge_point
    from specsim.hardware import DTYPE_BYTES, load_hardware
    from specsim.model import load_model

    if context < 0:
        raise _bad_option("--context", context, ">= 0 tokens")
    if not 0 <= max_batch_exp <= 16:
        raise _bad_option("--max-batch-exp", max_batch_exp, "in 0..16")
    if k < 1:
        raise _bad_option("--k", k, ">= 1")
    if not 0 < gpu_memory_utilization <= 1:
        raise _bad_option("--gpu-memory-utilization", gpu_memory_utilization, "in (0, 1]")
    hw = load_hardware(hardware)
    model = load_model(name)
    layout = _layout(model, tp=tp, pp=pp, ep=ep, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    plan = memory_plan(model, hw, layout, gpu_memory_utilization=gpu_memory_utilization,
                       max_batched_tokens=max_batched_tokens)

    batches = 2.0 ** np.arange(max_batch_exp + 1)
    total_ctx = batches * context
    step_s = step_cost(model, None, hw, layout, batches, 0).time_s(total_ctx)
    dec = decode_cost(model, hw, layout, batches)
    ver = verify_cost(model, hw, layout, batches, k)
    ratio = ver.time_s(total_ctx) / dec.time_s(total_ctx)
    bound = dec.bound(total_ctx)
    fits = batches * (context + 1) <= plan.kv_capacity_tokens
    kv_tok = model.kv_bytes_per_token(DTYPE_BYTES[kv_dtype])
    ridge = ridge_point(hw, math_dtype(weight_dtype))

    info = {
        "model": model.name, "source": model.source, "hardware": hw.name, "layout": layout.describe(),
        "gpus_per_replica": layout.gpus, "total_params": model.total_params, "active_params": model.active_params,
        "weight_gb_per_gpu": _gb(plan.weight_bytes), "kv_bytes_per_token": kv_tok,
        "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token, "kv_capacity_tokens": plan.kv_capacity_tokens,
        "memory_gb_per_gpu": {label: v for label, v in plan.table()},
        "ridge_point_flops_per_byte": ridge, "context_tokens_per_seq": context, "k": k,
        "step_overhead_ms": hw.efficiency.step_overhead_s * 1e3,
        "rows": [{"batch": int(b), "step_ms": float(s * 1e3), "tokens_per_s": float(b / s), "bound": str(bd),
                  f"verify_k{k}_over_decode": float(r), "kv_fits": bool(f)}
                 for b, s, bd, r, f in zip(batches, step_s, bound, ratio, fits)],
    }
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    con.print(f"[bold]{model.name}[/bold] on {hw.name}, {layout.describe()}   ({model.source})")
    s = _table("sizes", "quantity", "value")
    s.add_row("total params", _b(model.total_params))
    s.add_row("active params / token", _b(model.active_params))
    s.add_row("weights per GPU", f"{_gb(plan.weight_bytes):.2f} GB")
    s.add_row(f"KV bytes / token ({kv_dtype}, all layers)", f"{kv_tok:,.0f}")
    s.add_row("KV bytes / token per GPU", f"{plan.kv_bytes_per_token:,.0f}")
    s.add_row(f"KV capacity per replica (util {gpu_memory_utilization:g})", f"{plan.kv_capacity_tokens:,} tokens")
    s.add_row("ridge point (FLOP/byte, achieved)", f"{ridge:.0f}")
    con.print(s)
    m = _table("memory per GPU", "item", "GB")
    for label, v in plan.table():
        m.add_row(label.replace(" (GB)", ""), f"{v:.2f}")
    con.print(m)
    t = _table(f"decode step at {context} tokens of context per sequence (incl. "
               f"{hw.efficiency.step_overhead_s * 1e3:g} ms step overhead)",
               "batch", "step ms", "tokens/s", "bound", f"verify(k={k})/decode pass", "KV fits", right_from=0)
    for row in info["rows"]:
        t.add_row(str(row["batch"]), f"{row['step_ms']:.2f}", f"{row['tokens_per_s']:,.0f}", row["bound"],
                  f"{row[f'verify_k{k}_over_decode']:.2f}", "yes" if row["kv_fits"] else "no")
    con.print(t)


# ============================================================================ show drafter
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
    model: Annotated[str, typer.Option("--model", help="Target (policy) model.")] = "Qwen3-8B",
    kind: Annotated[str, typer.Option(help="eagle3 | mtp | self_quant | ngram")] = "eagle3",
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
    fmt: FormatOpt = Format.table,
) -> None:
    """A drafter's acceptance (τ by draft length and over RL steps) and its cost at batch 1."""
    from specsim.cost.forward import decode_cost, draft_cost, step_cost
    from specsim.cost.memory import drafter_weight_bytes_per_gpu
    from specsim.hardware import load_hardware
    from specsim.model import drafter_arch, load_model
    from specsim.workload.acceptance import DrafterAcceptance, Staleness, staleness_from_taus

    if (tau is None) == (alpha is None):
        raise _bad_option("--tau/--alpha", {"tau": tau, "alpha": alpha}, "exactly one of --tau (with --tau-k) or --alpha")
    if k < 1:
        raise _bad_option("--k", k, ">= 1")
    if context < 0:
        raise _bad_option("--context", context, ">= 0 tokens")
    step_list = _parse_steps(steps)
    target = load_model(model)
    arch = drafter_arch(kind, target, draft_vocab)
    hw = load_hardware(hardware)
    layout = _layout(target, tp=tp, weight_dtype=weight_dtype)

    if kind in ("self_quant", "ngram"):
        for opt, val, default in (("--tau-after", tau_after, None), ("--rate-per-version", rate_per_version, None),
                                  ("--update-every", update_every, 0)):
            if val != default:
                raise _bad_option(opt, val, f"omitted for a {kind} drafter (it never goes stale and is never retrained)")
    stale = Staleness.never()
    if tau_after is not None:
        if rate_per_version is not None:
            raise _bad_option("--tau-after", tau_after, "given without --rate-per-version (one or the other)")
        if after_versions is None:
            raise _bad_option("--after-versions", after_versions, "given together with --tau-after")
        fresh = tau if tau is not None else DrafterAcceptance(kind, alpha, decay, heterogeneity).tau(tau_k)
        stale = staleness_from_taus(fresh, tau_after, after_versions, tau_k, floor_alpha, decay, heterogeneity)
    elif rate_per_version is not None:
        stale = Staleness(floor_alpha, rate_per_version)
    if alpha is not None:
        acc = DrafterAcceptance(kind, alpha, decay, heterogeneity, stale, update_every)
    else:
        acc = DrafterAcceptance.from_tau(kind, tau, tau_k, decay=decay, concentration=heterogeneity,
                                         staleness=stale, update_every_steps=update_every)

    by_k = [{"k": kk, "tau": acc.tau(kk, 0)} for kk in range(1, 9)]
    over_steps = [{"step": s, "versions_since_update": int(acc.versions_since_update(s)),
                   "alpha": float(acc.alpha_at_step(s)), "tau": acc.tau(k, s)} for s in step_list]
    draft_s = float(draft_cost(arch, hw, layout, 1).time_s(context))
    decode_s = float(decode_cost(target, hw, layout, 1).time_s(context))
    sd_step_s = float(step_cost(target, arch, hw, layout, 1, k).time_s(context))
    ar_step_s = float(step_cost(target, None, hw, layout, 1, 0).time_s(context))
    cost = {
        "hardware": hw.name, "layout": layout.describe(), "context_tokens": context,
        "drafter_params": arch.model.total_params if arch.model else 0,
        "drafter_weight_gb_per_gpu": _gb(drafter_weight_bytes_per_gpu(arch, layout)),
        "draft_pass_ms": draft_s * 1e3, "decode_pass_ms": decode_s * 1e3,
        "draft_over_decode": draft_s / decode_s,
        "draft_overhead_ms": (hw.efficiency.draft_overhead_s * 1e3) if arch.model else 0.0,
        f"sd_step_k{k}_ms": sd_step_s * 1e3, "decode_step_ms": ar_step_s * 1e3,
    }
    info = {"kind": arch.kind, "model": target.name, "source": arch.source, "alpha0": acc.alpha0, "decay": acc.decay,
            "heterogeneity": acc.concentration, "staleness_rate_per_version": acc.staleness.decay_per_version,
            "floor_alpha": acc.staleness.floor_alpha, "update_every_steps": acc.update_every_steps,
            "tau_by_k": by_k, "k": k, "over_steps": over_steps, "cost_batch1": cost}
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    updates = f"updated every {acc.update_every_steps} steps" if acc.update_every_steps else "never updated"
    con.print(f"[bold]{arch.kind}[/bold] drafter for {target.name}: alpha0 = {acc.alpha0:.4f}, decay {acc.decay:g}, "
              f"heterogeneity {acc.concentration if acc.concentration is not None else 'none'}, "
              f"staleness rate {acc.staleness.decay_per_version:.4g}/version (floor {acc.staleness.floor_alpha:g}), "
              f"{updates}")
    con.print(f"  ({arch.source})")
    t = _table("fresh drafter: mean tokens per verify τ by draft length", "k", "τ", "(τ-1)/k accepted per draft")
    for row in by_k:
        t.add_row(str(row["k"]), f"{row['tau']:.3f}", f"{(row['tau'] - 1) / row['k']:.3f}")
    con.print(t)
    t = _table(f"over RL steps at k={k}", "step", "versions since update", "α", "τ")
    for row in over_steps:
        t.add_row(str(row["step"]), str(row["versions_since_update"]), f"{row['alpha']:.4f}", f"{row['tau']:.3f}")
    con.print(t)
    t = _table(f"cost at batch 1, {context} tokens of context, {hw.name} {layout.describe()}", "quantity", "value")
    if arch.model is None:
        t.add_row("draft pass", "none (CPU lookup, no GPU pass)")
    else:
        t.add_row("drafter params", _b(arch.model.total_params))
        t.add_row("drafter weights per GPU", f"{cost['drafter_weight_gb_per_gpu']:.2f} GB")
        t.add_row("draft pass", f"{cost['draft_pass_ms']:.3f} ms (+{cost['draft_overhead_ms']:g} ms overhead)")
    t.add_row("decode pass (policy)", f"{cost['decode_pass_ms']:.3f} ms")
    t.add_row("draft / decode pass (c)", f"{cost['draft_over_decode']:.3f}")
    t.add_row(f"SD step (k={k} drafts + verify, with overheads)", f"{cost[f'sd_step_k{k}_ms']:.3f} ms")
    t.add_row("decode step (with overheads)", f"{cost['decode_step_ms']:.3f} ms")
    con.print(t)


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
    from specsim.resolve import resolve
    from specsim.scenario import apply_overrides, source_file
    from specsim.sim.cluster import draw_step
    from specsim.workload.lengths import growth_factor, length_summary

    if samples is not None and samples < 1:
        raise _bad_option("--samples", samples, ">= 1")
    if step < 0:
        raise _bad_option("--step", step, ">= 0")
    sc = _load_scenario(scenario, sets)
    file = source_file(sc)
    n = samples if samples is not None else sc.workload.prompts * sc.workload.group_size
    if samples is not None:
        sc = apply_overrides(sc, {"workload.prompts": -(-n // sc.workload.group_size)})
    w = sc.workload
    draw = draw_step(resolve(sc), step)  # the very draw the simulator makes for this RL step
    lengths = draw.response_tokens.ravel()[:n]
    growth = float(growth_factor(step, w.length_growth_per_step))
    summary = length_summary(lengths, w.max_response_tokens)
    spec = w.response_tokens.model_dump(exclude_none=True)
    info = {"scenario": sc.name, "file": file, "distribution": spec, "max_response_tokens": w.max_response_tokens,
            "group_size": w.group_size, "group_correlation": w.group_correlation, "step": step, "growth": growth,
            "seed": sc.seed, "summary": summary}
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    con.print(f"[bold]{sc.name}[/bold]: response_tokens {spec}, cap {w.max_response_tokens}, groups of "
              f"{w.group_size} (correlation {w.group_correlation:g}), step {step} (growth ×{growth:.3f}), seed {sc.seed}")
    t = _table(f"{summary['n']:,} response lengths (tokens)", "statistic", "value")
    for key, label in [("mean_tokens", "mean"), ("p50_tokens", "p50"), ("p90_tokens", "p90"),
                       ("p99_tokens", "p99"), ("p999_tokens", "p99.9"), ("max_tokens", "max")]:
        t.add_row(label, f"{summary[key]:,.0f}")
    t.add_row("share of tokens in the longest 5 %", f"{summary['top5pct_token_share']:.1%}")
    t.add_row(f"share truncated at {w.max_response_tokens}", f"{summary['truncated_share']:.1%}")
    con.print(t)


# ============================================================================ check + doctor
#: Documented heuristics (not physics, not fitted): warn — never fail — when a scenario leaves the
#: range where the models were built and checked.
#: Draft lengths beyond 8 are rarely useful: acceptance compounds, so τ saturates while the verify
#: pass grows with k+1 (NeMo-RL found k=5 and k=7 already worse than k=3 for RL-Think).
DOCTOR_MAX_DRAFT_LENGTH = 8
#: Async pipelines run 1 (NeMo-RL) to 2–8 (AReaL) versions off-policy; beyond 8 is unusual.
DOCTOR_MAX_POLICY_LAG = 8
#: A KV budget that holds fewer than 8 longest (prompt + response) sequences preempts constantly.
DOCTOR_MIN_MAX_LENGTH_SEQUENCES_IN_KV = 8
#: The largest fresh τ (tokens per verify at the scenario's tau_at_k) a drafter of each kind is
#: plausibly seen to reach: EAGLE-3 heads reach ~4–6 on easy chat at low temperature; native MTP
#: (one or two heads) ~2–4; a 4-bit self-drafter accepts most tokens but pays a big draft pass;
#: n-gram / suffix lookup rarely passes ~2–3 outside copy-heavy text.
DOCTOR_MAX_TAU = {"eagle3": 6.0, "mtp": 4.0, "self_quant": 5.0, "ngram": 3.0}


def doctor_warnings(world) -> list[str]:
    """Plausibility warnings for a resolved scenario (a `specsim.resolve.World`); empty when all is usual.

    Heuristic thresholds are the DOCTOR_* constants above. Never raises for a valid world.
    """
    sc = world.scenario
    out: list[str] = []
    if world.policy.kind != "off":
        k_top = max(world.policy.ks)
        if k_top > DOCTOR_MAX_DRAFT_LENGTH:
            field = "speculation.k_max" if world.policy.kind == "adaptive" else "speculation.k"
            out.append(f"{field} = {k_top} is above {DOCTOR_MAX_DRAFT_LENGTH}: acceptance compounds, so longer "
                       "drafts rarely pay for the larger verify pass")
    if sc.pipeline.mode == "async" and sc.pipeline.policy_lag > DOCTOR_MAX_POLICY_LAG:
        out.append(f"pipeline.policy_lag = {sc.pipeline.policy_lag} is above {DOCTOR_MAX_POLICY_LAG}: "
                   "far more off-policy than NeMo-RL (1) or AReaL (2-8) run")
    w = sc.workload
    longest = w.max_prompt_tokens + w.max_response_tokens
    fit = world.kv_capacity_tokens // longest
    if fit < DOCTOR_MIN_MAX_LENGTH_SEQUENCES_IN_KV:
        out.append(f"the KV budget of {world.kv_capacity_tokens:,} tokens per engine holds only {fit} max-length "
                   f"sequences ({w.max_prompt_tokens} prompt + {w.max_response_tokens} response tokens), fewer than "
                   f"{DOCTOR_MIN_MAX_LENGTH_SEQUENCES_IN_KV}: expect heavy preemption (raise tp or gpu_memory_utilization)")
    d = sc.drafter
    limit = DOCTOR_MAX_TAU.get(d.kind)
    if limit is not None:
        taus = [("drafter.tau", d.tau), ("drafter.general_tau", d.general_tau)]
        if d.alpha is not None:
            taus.append(("drafter.alpha (as τ)", float(world.acceptance.tau(d.tau_at_k, 0))))
        for field, value in taus:
            if value is not None and value > limit:
                out.append(f"{field} = {value:g} at k = {d.tau_at_k} is above what {d.kind} drafters are seen to "
                           f"reach (<= {limit:g}, a documented heuristic)")
    return out


@app.command("check")
@handle_errors
def check(
    scenario: Annotated[str, typer.Argument(help="Scenario YAML.")],
    sets: SetOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Load and resolve a scenario (schema, catalog names, layout fit); print a summary and warnings."""
    from specsim.resolve import resolve

    sc = _load_scenario(scenario, sets)
    world = resolve(sc)
    warnings = doctor_warnings(world)
    w, d = sc.workload, sc.drafter
    longest = w.max_prompt_tokens + w.max_response_tokens
    tau_k = float(world.acceptance.tau(d.tau_at_k, 0))
    info = {
        "ok": True, "scenario": sc.name, "file": scenario, "model": world.model.name, "hardware": world.hw.name,
        "engines": world.engines, "layout": world.layout.describe(), "gpus_per_engine": world.layout.gpus,
        "rollout_gpus": sc.rollout.gpus, "training_gpus": sc.training_gpus, "pipeline": sc.pipeline.mode,
        "kv_capacity_tokens_per_engine": world.kv_capacity_tokens,
        "max_length_sequences_in_kv": world.kv_capacity_tokens // longest,
        "memory_gb_per_gpu": {label: v for label, v in world.memory.table()},
        "responses_per_step": w.prompts * w.group_size, "max_response_tokens": w.max_response_tokens,
        "drafter": d.kind, "alpha0": world.acceptance.alpha0, "tau_at_k": {"k": d.tau_at_k, "tau": tau_k},
        "policy": world.policy.label, "warnings": warnings,
    }
    if fmt is Format.json:
        _emit_json(info)
        return
    con = _console()
    con.print(f"[bold green]OK[/bold green] {sc.name} ({scenario})")
    t = _table("summary", "item", "value", right_from=2)
    t.add_row("model / hardware", f"{world.model.name} on {world.hw.name}")
    t.add_row("rollout", f"{world.engines} engines × {world.layout.describe()} = {sc.rollout.gpus} GPUs")
    t.add_row("training", f"{sc.pipeline.mode}, {sc.training_gpus} GPUs")
    t.add_row("KV capacity per engine", f"{world.kv_capacity_tokens:,} tokens "
                                        f"({info['max_length_sequences_in_kv']} max-length sequences)")
    mem = ", ".join(f"{label.replace(' (GB)', '')} {v:.1f}" for label, v in world.memory.table())
    t.add_row("memory per GPU (GB)", mem)
    t.add_row("workload", f"{w.prompts} prompts × {w.group_size} = {info['responses_per_step']:,} responses/step, "
                          f"max {w.max_response_tokens} tokens")
    t.add_row("drafter", f"{d.kind}, α0 = {world.acceptance.alpha0:.3f}, τ = {tau_k:.2f} at k = {d.tau_at_k}")
    t.add_row("SD policy", world.policy.label)
    con.print(t)
    for msg in warnings:
        con.print(f"[yellow]warning:[/yellow] {msg}")


@app.command("validate")
@handle_errors
def validate_cmd(
    targets: Annotated[list[str] | None, typer.Argument(help="Target YAML files (default: calibration/targets/*.yaml).")] = None,
    tolerance: Annotated[float | None, typer.Option("--tolerance", help="Override every row's relative tolerance.")] = None,
    out: Annotated[str, typer.Option("--out", help="Folder for validation.csv and validation.md.")] = "results/validation",
    fmt: FormatOpt = Format.table,
) -> None:
    """Run each published target's scenario and print measured vs simulated; exit 1 if any row fails."""
    import pandas as pd

    from specsim.report.atomic import write_csv, write_text
    from specsim.validate import validate

    if tolerance is not None and not tolerance > 0:
        raise _bad_option("--tolerance", tolerance, "a relative tolerance > 0")
    rows = validate(targets, tolerance)
    frame = pd.DataFrame([r.as_dict() for r in rows])
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "validation.csv", frame)
    cols = ["target", "metric", "params", "role", "measured", "simulated", "error_pct", "tolerance_pct", "result"]
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    shown = [r.display() for r in rows]   # rounded for reading; CSV/JSON keep full precision
    md += ["| " + " | ".join(r[c] for c in cols) + " |" for r in shown]
    write_text(folder / "validation.md", "# specsim validate\n\n" + "\n".join(md) + "\n")
    failed = int((frame["result"] != "pass").sum())
    if fmt is Format.json:
        _emit_json({"rows": [r.as_dict() for r in rows], "failed": failed, "out": str(folder)})
    else:
        t = _table("measured vs simulated", *cols, right_from=4)
        for r in shown:
            t.add_row(*(r[c] for c in cols))
        con = _console()
        con.print(t)
        con.print(f"{len(frame) - failed} of {len(frame)} rows within tolerance; written to {folder}/validation.csv, .md")
    if failed:
        raise typer.Exit(1)


@app.command("calibrate")
@handle_errors
def calibrate_cmd(
    traces: Annotated[list[str], typer.Argument(help="Trace files (kernel, engine, lengths, stages; CSV or JSONL).")],
    hardware: Annotated[str, typer.Option("--hardware", help="Profile whose efficiency factors are fitted.")],
    model: Annotated[str | None, typer.Option("--model", help="Model of the traces (default: the traces' column).")] = None,
    drafter: Annotated[str | None, typer.Option("--drafter", help="Drafter kind of the SD rows (eagle3, mtp, ...).")] = None,
    out: Annotated[str | None, typer.Option("--out", help="Write the calibrated profile YAML here.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Fit a hardware profile's efficiency factors (and acceptance, lengths) to traces."""
    from specsim.calibrate import calibrate

    report = calibrate(traces, hardware, model=model, out=out, drafter_kind=drafter)
    rows = report.to_rows()
    if fmt is Format.json:
        _emit_json({"rows": rows, "residuals": report.residual_stats(), "out": out})
        return
    t = _table(f"calibration of {hardware}", "parameter", "unit", "prior", "fitted", "status", right_from=2)
    for r in rows:
        t.add_row(*(str(r.get(c, "")) if r.get(c) is not None else "-" for c in ("parameter", "unit", "prior", "fitted", "status")))
    con = _console()
    con.print(report.summary())
    con.print(t)
    if out:
        con.print(f"calibrated profile written to {out}")


# `specsim run` and `specsim show scenario` live in cli_run.py (parsing and printing only)
def _register_run_commands() -> None:
    from specsim import cli_run

    app.command("run")(cli_run.run)
    show_app.command("scenario")(cli_run.show_scenario)


_register_run_commands()


# ============================================================================ entry point
def main() -> None:
    """Console-script entry point (`specsim`, `python -m specsim`)."""
    app()


if __name__ == "__main__":
    main()
