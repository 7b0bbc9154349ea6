"""Trace formats: the columns of each kind of trace (kernel, engine, lengths, stage), their types,
units and bounds, and the shared error helpers. Readers and writers are in calibrate/traces/io.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specsim.catalog.hardware import DTYPE_BYTES
from specsim.catalog.models import drafter_kind_names
from specsim.errors import SpecError

#: largest whole number a trace cell may hold (sequences, tokens, GPUs); far above any real
#: value and far below int64's range, so a typo such as batch=1e20 is an error, not an overflow
INT_MAX = 1e12


FILE_FIELD = "(file)"
KERNEL_OPS = ("decode", "verify", "prefill", "draft")
DRAFTER_KINDS = drafter_kind_names()  # the registry, catalog/drafters.yaml
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
KIND_ALIASES = {
    "kernel": "kernel",
    "engine": "engine",
    "lengths": "lengths",
    "length": "lengths",
    "stage": "stage",
    "stages": "stage",
}


@dataclass(frozen=True)
class Column:
    """One column of a trace format.

    kind: int | float | str | bool | choice. `minimum` with `exclusive` bounds numbers;
    `default` fills an optional column that is absent from the file (None: left out).
    `aliases`: other accepted header names, renamed to `name` on read.
    """

    name: str
    kind: str
    required: bool = True
    minimum: float | None = None
    exclusive: bool = False
    choices: tuple = ()
    default: Any = None
    aliases: tuple = ()
    unit: str = ""
    doc: str = ""

    def allowed(self) -> str:
        if self.kind == "choice":
            return f"one of {list(self.choices)}"
        if self.kind == "bool":
            return "a boolean (true/false/1/0)"
        if self.kind == "str":
            return "a non-empty text value"
        what = "a whole number" if self.kind == "int" else "a finite number"
        if self.minimum is not None:
            what += f" {'>' if self.exclusive else '>='} {self.minimum:g}"
        if self.kind == "int":
            what += f" and <= {INT_MAX:.0e}"
        if self.unit:
            what += f" ({self.unit})"
        return what


FORMATS: dict[str, tuple[Column, ...]] = {
    "kernel": (
        Column(
            "op",
            "choice",
            choices=KERNEL_OPS,
            doc="which pass: decode (q=1), verify (q=k+1), prefill (q=prompt), draft (one drafter pass, q=1)",
        ),
        Column("model", "str", doc="catalog name of the (target) model, e.g. Qwen3-8B"),
        Column("tp", "int", minimum=1, doc="tensor-parallel degree"),
        Column("ep", "int", required=False, minimum=1, default=1, doc="expert-parallel degree (default 1)"),
        Column("pp", "int", required=False, minimum=1, default=1, doc="pipeline stages (default 1)"),
        Column("batch", "int", minimum=1, unit="sequences", doc="sequences in the pass"),
        Column("q_per_seq", "int", minimum=1, unit="tokens", doc="new tokens per sequence"),
        Column("ctx_per_seq", "float", minimum=0, unit="tokens", doc="cached tokens per sequence before the pass"),
        Column("time_s", "float", minimum=0, exclusive=True, unit="s", doc="measured forward-pass time"),
        Column("weight_dtype", "choice", required=False, choices=tuple(DTYPE_BYTES), doc="weight dtype (default bf16)"),
        Column("kv_dtype", "choice", required=False, choices=tuple(DTYPE_BYTES), doc="KV-cache dtype (default bf16)"),
        Column(
            "drafter", "choice", required=False, choices=DRAFTER_KINDS, doc="op=draft: drafter kind (default eagle3)"
        ),
        Column("hardware", "str", required=False, doc="hardware profile name, e.g. h200_sxm"),
        Column("machine", "str", required=False, doc="free text: GPU name, driver, torch version"),
    ),
    "engine": (
        Column("time_s", "float", minimum=0, unit="s", doc="wall time at the end of the step"),
        Column("step_s", "float", minimum=0, exclusive=True, unit="s", doc="duration of the step"),
        Column("active_batch", "int", minimum=1, unit="sequences", doc="running sequences in the step"),
        Column("total_context_tokens", "float", minimum=0, unit="tokens", doc="sum of cached tokens over the batch"),
        Column("k", "int", minimum=0, doc="draft length used (0 = no speculation)"),
        Column("tokens_emitted", "int", minimum=0, unit="tokens", doc="tokens emitted over the batch this step"),
        Column(
            "accepted_tokens",
            "int",
            minimum=0,
            unit="tokens",
            doc="draft tokens accepted over the batch (excludes the bonus token)",
        ),
        Column("model", "str", required=False, doc="catalog model name"),
        Column("tp", "int", required=False, minimum=1, doc="tensor-parallel degree (default 1)"),
        Column("drafter", "choice", required=False, choices=DRAFTER_KINDS, doc="drafter kind for k>0 steps"),
        Column("rl_step", "int", required=False, minimum=0, doc="RL step (policy version) the rollout belongs to"),
    ),
    "lengths": (
        Column("length", "int", minimum=1, aliases=("response_tokens",), unit="tokens", doc="response length"),
        Column("prompt_id", "str", required=False, doc="prompt (GRPO group) identifier"),
        Column("rl_step", "int", required=False, minimum=0, doc="RL step"),
    ),
    "stage": (
        Column("rl_step", "int", minimum=0, doc="RL step"),
        Column("generation_s", "float", minimum=0, unit="s", doc="rollout generation time"),
        Column("reward_s", "float", minimum=0, unit="s", doc="reward computation time"),
        Column("logprob_s", "float", minimum=0, unit="s", doc="policy + reference logprob time"),
        Column("train_s", "float", minimum=0, unit="s", doc="training (fwd+bwd+optimizer) time"),
        Column("weight_sync_s", "float", minimum=0, unit="s", doc="weight sync to the rollout engines"),
        Column("step_s", "float", required=False, minimum=0, unit="s", doc="whole step time"),
        Column("sd", "bool", required=False, doc="speculative decoding on in this step"),
        Column("tau", "float", required=False, minimum=1, doc="mean acceptance length (tokens per verify)"),
    ),
}
KINDS = tuple(FORMATS)


def trace_error(field: str, value, allowed: str, where) -> SpecError:
    return SpecError(field, value, allowed, str(where) if where is not None else None)


def short_repr(v, n: int = 60):
    if isinstance(v, str) and len(v) > n:
        return v[:n] + "..."
    return v
