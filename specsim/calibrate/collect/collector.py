"""GPU kernel-trace collector: time decode / verify / prefill / draft forward passes of a catalog model.

    specsim calibrate collect --model Qwen3-8B --out calibration/traces/h200_qwen3_8b_kernel.csv
        [--device cuda] [--batches 1,2,4,...] [--contexts 512,2048,8192] [--k 1,3,5,7]
        [--prompts 512,2048] [--prompt-batches 1,4] [--layers N] [--budget-s 600] [--tiny]

The command line (cli/calibrate.py) builds a :class:`CollectSpec` with :func:`collect_spec`, which
checks every option; :func:`collect_trace` runs the measurements and writes the trace.

What it builds: the decoder stack of the catalog config (`specsim.catalog.models.load_model`) in torch with
RANDOM weights -- nothing is downloaded; a forward pass's time does not depend on the weight
values. Per layer: RMSNorm, fused QKV projection (+ biases where the config has them, + Qwen3's
per-head q/k RMSNorm), the new tokens' K/V written into a preallocated KV cache, attention with
torch's scaled_dot_product_attention over [batch, heads, q, ctx+q] (GQA by `enable_gqa`, or by
expanding K/V on older torch), output projection, RMSNorm, SwiGLU FFN; then the final norm and the
LM head (logits for every new token in decode/verify, for the last token in prefill). Rotary
embeddings are left out (an elementwise op, negligible next to the GEMMs). Dense models only:
MoE configs are refused (routing kernels differ too much between engines to time meaningfully
here). A draft pass is an EAGLE-3-like head (`specsim.catalog.models.drafter_arch("eagle3", ...)`): a
fusion fc (3h -> h), one decoder layer with its own KV cache, and an LM head over the reduced
draft vocabulary.

How it times: CUDA events around each pass (perf_counter on the CPU), `--warmup` untimed passes,
then the median of `--repeats`. On CUDA each shape is captured into a CUDA graph and replayed
(as vLLM does for decode), so CPU launch gaps are not in the time; `--no-cuda-graphs` times eager
passes. `--layers N` builds only N of the model's L layers: the stack of N layers and the rest
(embedding + final norm + LM head) are timed separately and the trace gets
time = t(N layers) * L / N + t(rest); the file header says so. Shapes whose KV cache and
activations do not fit in free GPU memory are skipped (printed). `--budget-s` bounds the run: it
stops before the next shape would exceed the budget and still writes what it has (atomically).

Output: a kernel trace (see calibration/README.md) with tp = ep = pp = 1, `machine` = device name,
torch and CUDA versions. `--tiny` (for tests, `--device cpu`) runs a 2-layer, hidden-64 model in
seconds; its rows say model `tiny`, which calibration will refuse (not a catalog model).
"""

from __future__ import annotations

import datetime as _dt
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim.atomic import output_path
from specsim.calibrate.collect.timing import Runner, Shape, time_fn
from specsim.calibrate.traces.io import write_kernel_trace
from specsim.catalog.hardware import list_hardware, load_hardware
from specsim.catalog.models import ModelSpec, drafter_arch, load_model
from specsim.errors import SpecError

TINY = {"name": "tiny", "hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 16, "vocab": 512, "ffn": 128}
FULL_DEFAULTS = {"batches": "1,2,4,8,16,32,64,128,256", "contexts": "512,2048,8192", "k": "1,3,5,7",
                 "prompts": "512,2048,8192", "prompt_batches": "1,4", "repeats": 10, "warmup": 3}
TINY_DEFAULTS = {"batches": "1,2,4", "contexts": "16,64", "k": "1,3", "prompts": "32", "prompt_batches": "1",
                 "repeats": 3, "warmup": 1}
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def _ints(text: str, name: str) -> tuple[int, ...]:
    least = 0 if name == "contexts" else 1
    allowed = f"a comma-separated list of whole numbers >= {least}"
    try:
        values = tuple(int(x) for x in str(text).replace(" ", "").split(",") if x)
    except ValueError:
        raise SpecError(f"--{name}", text, allowed) from None
    if not values or min(values) < least:
        raise SpecError(f"--{name}", text, allowed)
    return values


@dataclass(frozen=True)
class CollectSpec:
    """What one collection measures: the model (or the tiny test model), the shapes, how each is
    timed, and where the trace goes. Built and checked by :func:`collect_spec`."""

    out: Path
    model: str = "Qwen3-8B"
    tiny: bool = False
    device: str | None = None
    batches: tuple[int, ...] = ()
    contexts: tuple[int, ...] = ()
    k: tuple[int, ...] = ()
    prompts: tuple[int, ...] = ()
    prompt_batches: tuple[int, ...] = ()
    layers: int | None = None
    repeats: int = 10
    warmup: int = 3
    dtype: str = "bf16"
    no_draft: bool = False
    no_cuda_graphs: bool = False
    budget_s: float = 600.0
    hardware: str | None = None
    seed: int = 0


def collect_spec(*, out: str | Path, model: str = "Qwen3-8B", tiny: bool = False, device: str | None = None,
                 batches: str | None = None, contexts: str | None = None, k: str | None = None,
                 prompts: str | None = None, prompt_batches: str | None = None, layers: int | None = None,
                 repeats: int | None = None, warmup: int | None = None, dtype: str = "bf16", no_draft: bool = False,
                 no_cuda_graphs: bool = False, budget_s: float = 600.0, hardware: str | None = None,
                 seed: int = 0, force: bool = False) -> CollectSpec:
    """A CollectSpec from the command's options (lists as comma-separated text; None: the
    defaults, the tiny ones with `tiny`); a SpecError naming the option for a bad one. `k=""`
    measures no verify or draft passes. `out` follows the one output-path rule (atomic.output_path:
    resolved, an existing file replaced only with `force`)."""

    d = TINY_DEFAULTS if tiny else FULL_DEFAULTS
    out = output_path(out, "--out", folder=False, force=force)
    if dtype not in DTYPES:
        raise SpecError("--dtype", dtype, f"one of {sorted(DTYPES)}")
    k_text = d["k"] if k is None else k
    reps = d["repeats"] if repeats is None else repeats
    warm = d["warmup"] if warmup is None else warmup
    if reps < 1:
        raise SpecError("--repeats", reps, ">= 1 timed passes per shape")
    if warm < 0:
        raise SpecError("--warmup", warm, ">= 0 untimed passes per shape")
    if not budget_s > 0:
        raise SpecError("--budget-s", budget_s, "> 0 seconds")
    return CollectSpec(out=Path(out), model=model, tiny=tiny, device=device,
                       batches=_ints(batches or d["batches"], "batches"),
                       contexts=_ints(contexts or d["contexts"], "contexts"),
                       k=_ints(k_text, "k") if k_text.strip() else (),
                       prompts=_ints(prompts or d["prompts"], "prompts"),
                       prompt_batches=_ints(prompt_batches or d["prompt_batches"], "prompt-batches"),
                       layers=layers, repeats=reps, warmup=warm, dtype=dtype, no_draft=no_draft,
                       no_cuda_graphs=no_cuda_graphs, budget_s=float(budget_s), hardware=hardware, seed=seed)


def model_config(args: CollectSpec):
    """(ModelSpec of the timed model, EAGLE-3-like drafter ModelSpec or None)."""

    if args.tiny:
        spec = ModelSpec(**TINY)
    else:
        try:
            spec = load_model(args.model)
        except SpecError as exc:
            raise SpecError("--model", args.model, exc.allowed) from None
    if spec.moe is not None:
        raise SpecError("--model", spec.name, "a dense model: this collector times dense models only (MoE routing "
                                              "kernels differ too much between engines)")
    if args.layers is not None and not 1 <= args.layers <= spec.layers:
        raise SpecError("--layers", args.layers, f"in 1..{spec.layers} for {spec.name}")
    draft = None
    if not args.no_draft and args.k:
        draft = drafter_arch("eagle3", spec, draft_vocab=min(spec.vocab, 32000) if args.tiny else None).model
    return spec, draft


def plan(args: CollectSpec) -> list[Shape]:
    """Shapes in priority order: decode, prefill, verify, draft (a budget cut drops the tail)."""
    shapes = [Shape("decode", b, 1, c) for c in args.contexts for b in args.batches]
    shapes += [Shape("prefill", b, p, 0) for p in args.prompts for b in args.prompt_batches]
    shapes += [Shape("verify", b, k + 1, c) for k in args.k for c in args.contexts for b in args.batches]
    if not args.no_draft and args.k:
        shapes += [Shape("draft", b, 1, c) for c in args.contexts for b in args.batches]
    return shapes


def guess_hardware(device_name: str) -> str:
    """The bundled profile whose `device_names` entry the CUDA device name contains, the longest
    entry winning ("GB200" over "B200"); "" when none does (the trace then names no profile)."""
    name = device_name.upper()
    hits = [(len(key), profile) for profile in list_hardware() for key in load_hardware(profile).device_names
            if key.upper() in name]
    return max(hits)[1] if hits else ""


@dataclass(frozen=True)
class _Session:
    """What the measurements run on: torch, the device and its description (`machine`), the
    hardware profile the trace names, whether CUDA graphs are used, and the model timed — its
    spec, its draft head's (None: no draft) and how many of its layers are built (`n_layers` <
    spec.layers: the stack is timed scaled, see CollectSpec)."""

    torch: Any
    device: str
    machine: str
    hardware: str | None
    graphs: bool
    spec: ModelSpec
    draft_spec: ModelSpec | None
    n_layers: int

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def split(self) -> bool:
        return self.n_layers < self.spec.layers


def collect(args: CollectSpec, log: Callable[[str], None] = print) -> tuple[list[dict], dict]:
    """Run the measurements; returns (rows, header metadata). Stops early at the budget. Each
    shape's time (or why it was skipped) goes to `log` as it is measured."""
    torch = _import_torch(args)
    t_start = time.perf_counter()
    s = _session(torch, args, log)
    runner = Runner(s.torch, s.spec, s.n_layers, s.device, getattr(s.torch, DTYPES[args.dtype]), s.draft_spec,
                    seed=args.seed)
    shapes = plan(args)
    rows: list[dict] = []
    any_graph = False
    last = 0.0
    stopped = ""
    for i, shape in enumerate(shapes, start=1):
        elapsed = time.perf_counter() - t_start
        if elapsed + last > args.budget_s:
            stopped = f"budget of {args.budget_s:g} s reached after {i - 1} of {len(shapes)} shapes"
            log(f"collect: {stopped}; writing what was measured")
            break
        t0 = time.perf_counter()
        label = f"[{i}/{len(shapes)}] {shape.op:7s} batch={shape.batch:<4d} q={shape.q:<5d} ctx={shape.ctx:<6d}"
        t, used_graph = _measure(s, runner, shape, args, label, log)
        any_graph |= used_graph
        if t is None:
            continue
        rows.append(_row(s, shape, t, args.dtype))
        log(f"{label} {t * 1e3:9.3f} ms")
        if s.cuda:
            s.torch.cuda.empty_cache()
        last = time.perf_counter() - t0
    return rows, _collect_meta(s, runner, args, any_graph=any_graph, stopped=stopped, t_start=t_start)


def _import_torch(args: CollectSpec):
    """torch (optional: `specsim[collect]`); SpecError naming --device without it."""
    try:
        import torch
    except ImportError:
        raise SpecError("--device", args.device or "default", "a machine with torch installed "
                                                              "(pip install 'specsim[collect]' or pip install torch)") from None
    return torch


def _session(torch, args: CollectSpec, log: Callable[[str], None]) -> _Session:
    """Pick and check the device, build the model config and log what will be timed."""
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SpecError("--device", device, "cpu, or cuda on a machine where torch sees a CUDA device")
    if device == "cpu" and not args.tiny:
        log("collect: warning: timing a full-size model on the CPU is slow and says nothing about a GPU")
    if device == "cpu" and args.tiny:
        torch.set_num_threads(1)
    spec, draft_spec = model_config(args)
    n_layers = args.layers or spec.layers
    if device.startswith("cuda"):
        dev_name = torch.cuda.get_device_name(torch.device(device))
        machine = f"{dev_name}; torch {torch.__version__}; CUDA {torch.version.cuda}"
    else:
        dev_name = f"CPU {platform.processor() or platform.machine()}"
        machine = f"{dev_name}; torch {torch.__version__}"
    s = _Session(torch, device, machine, args.hardware if args.hardware is not None else guess_hardware(dev_name),
                 device.startswith("cuda") and not args.no_cuda_graphs, spec, draft_spec, n_layers)
    log(
        f"collect: {spec.name} ({n_layers} of {spec.layers} layers{', scaled' if s.split else ''}) on {machine}; "
        f"{args.dtype}; CUDA graphs {'on' if s.graphs else 'off'}; budget {args.budget_s:g} s"
    )
    return s


def _measure(s: _Session, runner: Runner, shape: Shape, args: CollectSpec, label: str,
             log: Callable[[str], None]) -> tuple[float | None, bool]:
    """(seconds of one forward pass of `shape` on the whole model, whether a CUDA graph was used);
    None when the shape does not fit the free memory or runs out of it (logged as skipped). A
    scaled stack's time is t(layers) · spec.layers / n_layers + t(embedding, norm, head)."""
    torch = s.torch
    any_graph = False
    if s.cuda:
        need = runner.kv_bytes(shape, 1 if shape.op == "draft" else None) + runner.act_bytes(shape)
        free, _ = torch.cuda.mem_get_info(torch.device(s.device))
        if need > 0.85 * free:
            log(f"{label} skipped: needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free")
            return None, any_graph
    try:
        parts, _ = runner.callables(shape, s.split and shape.op != "draft")
        times = {}
        for part, fn in parts.items():
            times[part], used = time_fn(torch, fn, s.device, args.warmup, args.repeats, s.graphs)
            any_graph |= used
        del parts
    except RuntimeError as exc:  # out of memory or an unsupported kernel: skip the shape
        if "out of memory" not in str(exc).lower():
            raise
        log(f"{label} skipped: out of memory")
        if s.cuda:
            torch.cuda.empty_cache()
        return None, any_graph
    if "full" in times:
        return times["full"], any_graph
    return times["layers"] * s.spec.layers / s.n_layers + times["rest"], any_graph


def _row(s: _Session, shape: Shape, t: float, dtype: str) -> dict:
    """One kernel-trace row (traces/io.py's kernel columns) of a measured shape."""
    return {
        "op": shape.op,
        "model": s.spec.name,
        "tp": 1,
        "ep": 1,
        "pp": 1,
        "batch": shape.batch,
        "q_per_seq": shape.q,
        "ctx_per_seq": float(shape.ctx),
        "time_s": float(t),
        "weight_dtype": dtype,
        "kv_dtype": dtype,
        "drafter": "eagle3" if shape.op == "draft" else None,
        "hardware": s.hardware or None,
        "machine": s.machine,
    }


def _collect_meta(s: _Session, runner: Runner, args: CollectSpec, *, any_graph: bool, stopped: str,
                  t_start: float) -> dict:
    """The trace's header: how it was measured (model, attention, layers timed, graphs, repeats,
    draft head), on what, when, and whether the budget stopped it early."""
    spec, n_layers = s.spec, s.n_layers
    meta = {
        "comment": (
            "measured by specsim calibrate collect: forward passes of a random-weight "
            f"{spec.name} decoder stack (torch SDPA attention, {'native' if runner.gqa_native else 'expanded'} GQA, "
            "no RoPE); median of repeats"
        ),
        "collected": _dt.datetime.now().isoformat(timespec="seconds"),
        "machine": s.machine,
        "device": s.device,
        "dtype": args.dtype,
        "layers_timed": (
            f"{n_layers} of {spec.layers}; time = t({n_layers} layers) * {spec.layers}/{n_layers} "
            "+ t(embedding + final norm + LM head)"
        )
        if s.split
        else f"{spec.layers} of {spec.layers}",
        "cuda_graphs": "yes" if any_graph else "no",
        "repeats": f"{args.repeats} timed after {args.warmup} warm-up passes (median)",
        "draft": "EAGLE-3-like head: fc 3h->h + 1 decoder layer + LM head over the draft vocabulary"
        if s.draft_spec
        else "none",
        "stopped_early": stopped or "no",
        "wall_s": f"{time.perf_counter() - t_start:.1f}",
    }
    if args.tiny:
        meta["tiny"] = "2-layer hidden-64 test model; not a catalog model, not for calibration"
    return meta


@dataclass(frozen=True)
class CollectResult:
    """What a collection wrote: the trace and its row count (0: nothing measured, nothing written)."""

    path: Path | None
    rows: int
    meta: dict


def collect_trace(args: CollectSpec, log: Callable[[str], None] = print) -> CollectResult:
    """Measure and write the kernel trace (atomically); nothing is written when no shape was measured."""
    rows, meta = collect(args, log)
    if not rows:
        return CollectResult(None, 0, meta)
    import pandas as pd


    return CollectResult(write_kernel_trace(pd.DataFrame(rows), args.out, meta=meta), len(rows), meta)
