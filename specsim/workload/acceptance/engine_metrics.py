"""Acceptance as the serving engines report it: vLLM's and SGLang's spec-decode metrics → τ.

τ here is what `drafter.tau` means (docs/speculative-decoding.md, "What tau means"): the mean
tokens a request emits per verify step, the bonus token included, as a ratio of sums over the
run -- vLLM's "mean acceptance length", τ = 1 + accepted draft tokens / drafts. Read from:

* **vLLM, Prometheus text** (a scrape of ``/metrics``): the counters
  ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total`` and
  ``vllm:spec_decode_num_accepted_tokens_total`` (vLLM V1, vllm/v1/spec_decode/metrics.py),
  summed over their label sets (engines, models); k = draft tokens / drafts;
  ``..._num_accepted_tokens_per_pos_total{position="i"}`` gives the per-position rates.
* **vLLM, JSON**: the same counters by name (with or without the ``vllm:`` prefix and the
  ``_total`` suffix), as an object ``{name: value}`` or as a list of ``{"name", "value"}`` (what
  ``LLM.get_metrics()`` returns, dumped).
* **vLLM, log text**: the ``SpecDecoding metrics: ... Accepted: A tokens, Drafted: D tokens,
  Per-position acceptance rate: r1, ..., rk`` lines its stat logger prints each interval; the
  intervals' A and D are summed, k is the number of per-position rates and drafts = D / k.
* **SGLang**: the ``sglang:spec_accept_length`` gauge (Prometheus text), ``avg_spec_accept_length``
  (``/get_server_info`` JSON) or the ``accept len: x`` of its decode-batch log lines. SGLang's
  accept length counts the bonus token too (accepted drafts + 1 per verify), so it is τ as
  defined here; it is an average per interval, so several values (series, log lines) are
  averaged unweighted -- a mean of ratios, not the ratio of sums (state the draft length
  `tau_at_k` yourself: SGLang reports none).

Every problem is a SpecError naming the file, the field and what is allowed.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim import inputs
from specsim.errors import SpecError

VLLM_DRAFTS = "spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "spec_decode_num_accepted_tokens"
VLLM_PER_POS = "spec_decode_num_accepted_tokens_per_pos"
SGLANG_ACCEPT = ("spec_accept_length", "avg_spec_accept_length")

_PROM_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)(\s+\d+)?\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_VLLM_LOG = re.compile(r"SpecDecoding metrics:.*?Accepted:\s*([0-9]+)\s*tokens.*?Drafted:\s*([0-9]+)\s*tokens"
                       r"(?:.*?Per-position acceptance rate:\s*([0-9.,\s]+))?")
_SGLANG_LOG = re.compile(r"accept len:\s*([0-9.]+)")


@dataclass(frozen=True)
class MeasuredAcceptance:
    """τ as the engine reports it, and what it was computed from. `k`: draft tokens per draft
    (None when the metrics do not say: SGLang). Counts are None where the format has none."""

    tau: float
    k: int | None
    engine: str
    form: str
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    per_position: tuple[float, ...] | None = None

    def as_dict(self) -> dict:
        return {"tau": self.tau, "k": self.k, "engine": self.engine, "form": self.form, "drafts": self.drafts,
                "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens,
                "per_position_acceptance": list(self.per_position) if self.per_position else None}


def _base(name: str) -> str:
    """'vllm:spec_decode_num_drafts_total' → 'spec_decode_num_drafts'."""
    name = name.split(":", 1)[1] if ":" in name else name
    return name.removesuffix("_total")


def _from_vllm(counts: dict[str, float], per_pos: dict[int, float], form: str, fld: str, where: str) -> MeasuredAcceptance:
    missing = [n for n in (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED) if n not in counts]
    if missing:
        raise SpecError(fld, f"missing {['vllm:' + m + '_total' for m in missing]}",
                        "vLLM spec-decode counters vllm:spec_decode_num_drafts_total, "
                        "vllm:spec_decode_num_draft_tokens_total and vllm:spec_decode_num_accepted_tokens_total "
                        "(vLLM V1), or SGLang's sglang:spec_accept_length", where)
    drafts, drafted, accepted = counts[VLLM_DRAFTS], counts[VLLM_DRAFT_TOKENS], counts[VLLM_ACCEPTED]
    if not drafts > 0:
        raise SpecError(fld, drafts, "a run with drafts (vllm:spec_decode_num_drafts_total > 0)", where)
    if not 0 <= accepted <= drafted:
        raise SpecError(fld, {"accepted": accepted, "drafted": drafted}, "0 <= accepted <= draft tokens", where)
    k_float = drafted / drafts
    k = round(k_float) if abs(k_float - round(k_float)) < 1e-6 else None
    rates = tuple(per_pos[i] / drafts for i in sorted(per_pos)) if per_pos else None
    return MeasuredAcceptance(1.0 + accepted / drafts, k, "vllm", form, drafts, drafted, accepted, rates)


def _sglang(values: list[float], form: str, fld: str, where: str) -> MeasuredAcceptance:
    vals = [v for v in values if math.isfinite(v)]
    if not vals or min(vals) < 1:
        raise SpecError(fld, values[:5], "SGLang accept lengths >= 1 (tokens per verify, the bonus token included)",
                        where)
    return MeasuredAcceptance(sum(vals) / len(vals), None, "sglang", form)


def _prometheus(text: str, fld: str, where: str) -> MeasuredAcceptance | None:
    counts: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    sglang: list[float] = []
    seen = False
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if not m:
            continue
        name, labels, raw = m.group(1), m.group(2) or "", m.group(3)
        base = _base(name)
        try:
            value = float(raw)
        except ValueError:
            continue
        if name.endswith(("_created", "_bucket", "_count", "_sum")):
            continue
        if base == VLLM_PER_POS:
            pos = dict(_LABEL.findall(labels)).get("position")
            if pos is not None and pos.isdigit():
                per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + value
            seen = True
        elif base in (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED):
            counts[base] = counts.get(base, 0.0) + value
            seen = True
        elif base in SGLANG_ACCEPT:
            sglang.append(value)
            seen = True
    if not seen:
        return None
    if counts:
        return _from_vllm(counts, per_pos, "prometheus", fld, where)
    return _sglang(sglang, "prometheus", fld, where)


def _walk_json(obj: Any, counts: dict, per_pos: dict, sglang: list) -> None:
    if isinstance(obj, dict):
        name = obj.get("name")
        if isinstance(name, str) and ("value" in obj or "values" in obj):
            base = _base(name)
            if base in (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED) and _num(obj.get("value")):
                counts[base] = counts.get(base, 0.0) + float(obj["value"])
            elif base == VLLM_PER_POS and isinstance(obj.get("values"), list):
                for i, v in enumerate(obj["values"]):
                    if _num(v):
                        per_pos[i] = per_pos.get(i, 0.0) + float(v)
            elif base in SGLANG_ACCEPT and _num(obj.get("value")):
                sglang.append(float(obj["value"]))
            return
        for key, v in obj.items():
            base = _base(str(key))
            if base in (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED) and _num(v):
                counts[base] = counts.get(base, 0.0) + float(v)
            elif base in SGLANG_ACCEPT and _num(v):
                sglang.append(float(v))
            else:
                _walk_json(v, counts, per_pos, sglang)
    elif isinstance(obj, list):
        for v in obj:
            _walk_json(v, counts, per_pos, sglang)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _json(doc: Any, fld: str, where: str) -> MeasuredAcceptance | None:
    counts: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    sglang: list[float] = []
    _walk_json(doc, counts, per_pos, sglang)
    if counts:
        return _from_vllm(counts, per_pos, "json", fld, where)
    if sglang:
        return _sglang(sglang, "json", fld, where)
    return None


def _logs(text: str, fld: str, where: str) -> MeasuredAcceptance | None:
    accepted = drafted = drafts = 0.0
    ks: set[int] = set()
    lines = 0
    for m in _VLLM_LOG.finditer(text):
        a, d = float(m.group(1)), float(m.group(2))
        rates = [r for r in re.split(r"[,\s]+", (m.group(3) or "").strip()) if r]
        if not rates:
            raise SpecError(fld, m.group(0)[:80], "vLLM SpecDecoding log lines with their 'Per-position acceptance "
                                                  "rate' list (it gives k, hence the drafts = drafted / k)", where)
        ks.add(len(rates))
        accepted, drafted, drafts, lines = accepted + a, drafted + d, drafts + d / len(rates), lines + 1
    if lines:
        if len(ks) > 1:
            raise SpecError(fld, sorted(ks), "one draft length k over the log (per-position rates of one length)", where)
        return _from_vllm({VLLM_DRAFTS: drafts, VLLM_DRAFT_TOKENS: drafted, VLLM_ACCEPTED: accepted}, {}, "log", fld,
                          where)
    vals = [float(v) for v in _SGLANG_LOG.findall(text)]
    return _sglang(vals, "log", fld, where) if vals else None


def read_acceptance_metrics(path: Path, fld: str = "drafter.tau_from") -> MeasuredAcceptance:
    """τ (and k) from a vLLM / SGLang metrics dump or log file (see the module docstring); the
    format is recognised from the content."""
    where = str(path)
    text = inputs.read_text(path, fld, "metrics file (Prometheus text, JSON, or an engine log)")
    stripped = text.lstrip()
    out = None
    if stripped.startswith(("{", "[")):
        try:
            out = _json(json.loads(text), fld, where)
        except json.JSONDecodeError:
            out = None
    if out is None:
        out = _prometheus(text, fld, where) or _logs(text, fld, where)
    if out is None:
        raise SpecError(fld, where, "vLLM spec-decode metrics (vllm:spec_decode_num_drafts_total, "
                                    "..._num_draft_tokens_total, ..._num_accepted_tokens_total; or its 'SpecDecoding "
                                    "metrics' log lines) or SGLang's accept length (sglang:spec_accept_length, "
                                    "avg_spec_accept_length, 'accept len:' log lines)", where)
    return out
