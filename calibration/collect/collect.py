"""GPU kernel-trace collector: time decode / verify / prefill / draft forward passes of a catalog model.

    python -m calibration.collect.collect --model Qwen3-8B --out calibration/traces/h200_qwen3_8b_kernel.csv
        [--device cuda] [--batches 1,2,4,...] [--contexts 512,2048,8192] [--k 1,3,5,7]
        [--prompts 512,2048] [--prompt-batches 1,4] [--layers N] [--budget-s 600] [--tiny]

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

import argparse
import datetime as _dt
import sys
import time

from calibration.collect.runner import Runner, Shape, time_fn

TINY = dict(name="tiny", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=512, ffn=128)
FULL_DEFAULTS = dict(
    batches="1,2,4,8,16,32,64,128,256",
    contexts="512,2048,8192",
    k="1,3,5,7",
    prompts="512,2048,8192",
    prompt_batches="1,4",
    repeats=10,
    warmup=3,
)
TINY_DEFAULTS = dict(batches="1,2,4", contexts="16,64", k="1,3", prompts="32", prompt_batches="1", repeats=3, warmup=1)
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
HARDWARE_GUESS = (("GB200", "gb200"), ("B200", "b200"), ("H200", "h200_sxm"), ("H100", "h100_sxm"))


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(x) for x in str(text).replace(" ", "").split(",") if x]
    except ValueError:
        raise SystemExit(f"--{name} must be a comma-separated list of whole numbers, got {text!r}") from None
    if not values or min(values) < (0 if name == "contexts" else 1):
        raise SystemExit(f"--{name} must list whole numbers >= {0 if name == 'contexts' else 1}, got {text!r}")
    return values


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m calibration.collect.collect",
        description="Time forward passes of a catalog model (random weights) into a kernel trace.",
    )
    ap.add_argument("--model", default="Qwen3-8B", help="catalog model name (dense models only)")
    ap.add_argument("--out", required=True, help="kernel trace to write (.csv or .jsonl)")
    ap.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    ap.add_argument("--batches", default=None, help="decode/verify/draft batch sizes")
    ap.add_argument("--contexts", default=None, help="cached tokens per sequence")
    ap.add_argument("--k", default=None, help="draft lengths k (verify q = k+1); empty string: no verify/draft")
    ap.add_argument("--prompts", default=None, help="prefill prompt lengths")
    ap.add_argument("--prompt-batches", default=None, help="prefill batch sizes")
    ap.add_argument("--layers", type=int, default=None, help="time only N layers and scale to the model's L")
    ap.add_argument("--repeats", type=int, default=None, help="timed passes per shape (median)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed passes per shape")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES), help="weight/activation/KV dtype")
    ap.add_argument("--no-draft", action="store_true", help="skip the EAGLE-3-like draft passes")
    ap.add_argument("--no-cuda-graphs", action="store_true", help="time eager passes on CUDA")
    ap.add_argument(
        "--budget-s", type=float, default=600.0, help="stop after about this many seconds (writes what it has)"
    )
    ap.add_argument(
        "--hardware", default=None, help="hardware profile name for the trace (default: guessed from the GPU name)"
    )
    ap.add_argument("--tiny", action="store_true", help="a 2-layer hidden-64 model with small shapes (tests, CPU)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    d = TINY_DEFAULTS if args.tiny else FULL_DEFAULTS
    args.batches = _ints(args.batches or d["batches"], "batches")
    args.contexts = _ints(args.contexts or d["contexts"], "contexts")
    k_text = d["k"] if args.k is None else args.k
    args.k = _ints(k_text, "k") if k_text.strip() else []
    args.prompts = _ints(args.prompts or d["prompts"], "prompts")
    args.prompt_batches = _ints(args.prompt_batches or d["prompt_batches"], "prompt-batches")
    args.repeats = args.repeats or d["repeats"]
    args.warmup = d["warmup"] if args.warmup is None else args.warmup
    if args.repeats < 1 or args.warmup < 0:
        raise SystemExit("--repeats must be >= 1 and --warmup >= 0")
    if args.budget_s <= 0:
        raise SystemExit("--budget-s must be > 0")
    return args


def model_config(args):
    """(ModelSpec of the timed model, EAGLE-3-like drafter ModelSpec or None)."""
    from specsim.catalog.models import ModelSpec, drafter_arch, load_model
    from specsim.errors import SpecError

    if args.tiny:
        spec = ModelSpec(**TINY)
    else:
        try:
            spec = load_model(args.model)
        except SpecError as exc:
            raise SystemExit(f"collect: {exc}") from None
    if spec.moe is not None:
        raise SystemExit(
            f"collect: {spec.name} is a MoE model; this collector times dense models only "
            "(MoE routing kernels differ too much between engines)"
        )
    if args.layers is not None and not 1 <= args.layers <= spec.layers:
        raise SystemExit(f"--layers must be in 1..{spec.layers} for {spec.name}, got {args.layers}")
    draft = None
    if not args.no_draft and args.k:
        draft = drafter_arch("eagle3", spec, draft_vocab=min(spec.vocab, 32000) if args.tiny else None).model
    return spec, draft


def plan(args) -> list[Shape]:
    """Shapes in priority order: decode, prefill, verify, draft (a budget cut drops the tail)."""
    shapes = [Shape("decode", b, 1, c) for c in args.contexts for b in args.batches]
    shapes += [Shape("prefill", b, p, 0) for p in args.prompts for b in args.prompt_batches]
    shapes += [Shape("verify", b, k + 1, c) for k in args.k for c in args.contexts for b in args.batches]
    if not args.no_draft and args.k:
        shapes += [Shape("draft", b, 1, c) for c in args.contexts for b in args.batches]
    return shapes


def guess_hardware(device_name: str) -> str:
    name = device_name.upper()
    for key, profile in HARDWARE_GUESS:
        if key in name:
            return profile
    return ""


def collect(args) -> tuple[list[dict], dict]:
    """Run the measurements; returns (rows, header metadata). Stops early at the budget."""
    try:
        import torch
    except ImportError:
        raise SystemExit(
            "collect: torch is not installed (pip install 'specsim[collect]' or pip install torch)"
        ) from None
    t_start = time.perf_counter()
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("collect: --device cuda but torch sees no CUDA device")
    if device == "cpu" and not args.tiny:
        print("collect: warning: timing a full-size model on the CPU is slow and says nothing about a GPU", flush=True)
    if device == "cpu" and args.tiny:
        torch.set_num_threads(1)
    dtype = getattr(torch, DTYPES[args.dtype])
    spec, draft_spec = model_config(args)
    n_layers = args.layers or spec.layers
    split = n_layers < spec.layers
    if device.startswith("cuda"):
        dev_name = torch.cuda.get_device_name(torch.device(device))
        machine = f"{dev_name}; torch {torch.__version__}; CUDA {torch.version.cuda}"
    else:
        import platform

        dev_name = f"CPU {platform.processor() or platform.machine()}"
        machine = f"{dev_name}; torch {torch.__version__}"
    hardware = args.hardware if args.hardware is not None else guess_hardware(dev_name)
    graphs = device.startswith("cuda") and not args.no_cuda_graphs
    print(
        f"collect: {spec.name} ({n_layers} of {spec.layers} layers{', scaled' if split else ''}) on {machine}; "
        f"{args.dtype}; CUDA graphs {'on' if graphs else 'off'}; budget {args.budget_s:g} s",
        flush=True,
    )
    runner = Runner(torch, spec, n_layers, device, dtype, draft_spec, seed=args.seed)
    shapes = plan(args)
    rows: list[dict] = []
    any_graph = False
    last = 0.0
    stopped = ""
    for i, shape in enumerate(shapes, start=1):
        elapsed = time.perf_counter() - t_start
        if elapsed + last > args.budget_s:
            stopped = f"budget of {args.budget_s:g} s reached after {i - 1} of {len(shapes)} shapes"
            print(f"collect: {stopped}; writing what was measured", flush=True)
            break
        t0 = time.perf_counter()
        label = f"[{i}/{len(shapes)}] {shape.op:7s} batch={shape.batch:<4d} q={shape.q:<5d} ctx={shape.ctx:<6d}"
        if device.startswith("cuda"):
            need = runner.kv_bytes(shape, 1 if shape.op == "draft" else None) + runner.act_bytes(shape)
            free, _ = torch.cuda.mem_get_info(torch.device(device))
            if need > 0.85 * free:
                print(f"{label} skipped: needs {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free", flush=True)
                continue
        try:
            parts, _ = runner.callables(shape, split and shape.op != "draft")
            times = {}
            for part, fn in parts.items():
                times[part], used = time_fn(torch, fn, device, args.warmup, args.repeats, graphs)
                any_graph |= used
            del parts
        except RuntimeError as exc:  # out of memory or an unsupported kernel: skip the shape
            if "out of memory" not in str(exc).lower():
                raise
            print(f"{label} skipped: out of memory", flush=True)
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            continue
        if "full" in times:
            t = times["full"]
        else:
            t = times["layers"] * spec.layers / n_layers + times["rest"]
        rows.append(
            {
                "op": shape.op,
                "model": spec.name,
                "tp": 1,
                "ep": 1,
                "pp": 1,
                "batch": shape.batch,
                "q_per_seq": shape.q,
                "ctx_per_seq": float(shape.ctx),
                "time_s": float(t),
                "weight_dtype": args.dtype,
                "kv_dtype": args.dtype,
                "drafter": "eagle3" if shape.op == "draft" else None,
                "hardware": hardware or None,
                "machine": machine,
            }
        )
        print(f"{label} {t * 1e3:9.3f} ms", flush=True)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        last = time.perf_counter() - t0
    meta = {
        "comment": (
            "measured by calibration/collect/collect.py: forward passes of a random-weight "
            f"{spec.name} decoder stack (torch SDPA attention, {'native' if runner.gqa_native else 'expanded'} GQA, "
            "no RoPE); median of repeats"
        ),
        "collected": _dt.datetime.now().isoformat(timespec="seconds"),
        "machine": machine,
        "device": device,
        "dtype": args.dtype,
        "layers_timed": (
            f"{n_layers} of {spec.layers}; time = t({n_layers} layers) * {spec.layers}/{n_layers} "
            "+ t(embedding + final norm + LM head)"
        )
        if split
        else f"{spec.layers} of {spec.layers}",
        "cuda_graphs": "yes" if any_graph else "no",
        "repeats": f"{args.repeats} timed after {args.warmup} warm-up passes (median)",
        "draft": "EAGLE-3-like head: fc 3h->h + 1 decoder layer + LM head over the draft vocabulary"
        if draft_spec
        else "none",
        "stopped_early": stopped or "no",
        "wall_s": f"{time.perf_counter() - t_start:.1f}",
    }
    if args.tiny:
        meta["tiny"] = "2-layer hidden-64 test model; not a catalog model, not for calibration"
    return rows, meta


def main(argv=None) -> int:
    args = parse_args(argv)
    rows, meta = collect(args)
    if not rows:
        print(
            "collect: nothing was measured (all shapes skipped or budget too small); no trace written", file=sys.stderr
        )
        return 1
    import pandas as pd

    from specsim.calibrate.traces.io import write_kernel_trace

    path = write_kernel_trace(pd.DataFrame(rows), args.out, meta=meta)
    print(f"collect: wrote {len(rows)} rows to {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
