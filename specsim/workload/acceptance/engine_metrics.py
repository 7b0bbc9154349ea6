"""Acceptance as the serving engines report it: vLLM's and SGLang's spec-decode metrics → τ.

τ here is what `drafter.tau` means (docs/speculative-decoding.md, "What tau means"): the mean
tokens a request emits per verify step, the bonus token included, as a ratio of sums over the
run -- vLLM's "mean acceptance length", τ = 1 + accepted draft tokens / drafts. Read from:

* **vLLM, Prometheus text** (one scrape of ``/metrics``, parsed by prometheus_client's parser of
  the text exposition format): the counters ``vllm:spec_decode_num_drafts_total``,
  ``vllm:spec_decode_num_draft_tokens_total`` and ``vllm:spec_decode_num_accepted_tokens_total``
  (vLLM V1, vllm/v1/spec_decode/metrics.py), checked per engine (label set: accepted <= draft
  tokens, drafts <= draft tokens) and summed over engines; one model and one scrape per file
  (a series named twice -- scrapes appended, a counter reset -- is an error, as are +Inf, NaN
  and negative counts, and a malformed line); k = draft tokens / drafts;
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

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specsim import inputs
from specsim.errors import SpecError, short_repr

VLLM_DRAFTS = "spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "spec_decode_num_accepted_tokens"
VLLM_PER_POS = "spec_decode_num_accepted_tokens_per_pos"
SGLANG_ACCEPT = ("spec_accept_length", "avg_spec_accept_length")

_VLLM_LOG = re.compile(r"SpecDecoding metrics:.*?Accepted:\s*([0-9]+)\s*tokens.*?Drafted:\s*([0-9]+)\s*tokens"
                       r"(?:.*?Per-position acceptance rate:\s*([0-9.,\s]+))?")
_SGLANG_LOG = re.compile(r"accept len:\s*([^\s,]*)")


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


#: a line of Prometheus text that names one of the metrics read here (the file is then a scrape,
#: and a line the parser refuses is an error, not a sign of another format)
_PROM_OURS = re.compile(r"^\s*(?:#\s*(?:TYPE|HELP)\s+)?(?:vllm:|sglang:)?(?:spec_decode_|spec_accept_length)",
                        re.MULTILINE)
_COUNTERS = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED)


def _series_text(name: str, labels: dict) -> str:
    return name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")


def _bad_line(text: str) -> tuple[int, str]:
    """The first line the exposition parser refuses on its own (line number, line)."""
    from prometheus_client.parser import text_string_to_metric_families

    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except (ValueError, TypeError, IndexError, KeyError):
            return n, line
    return 0, ""


def _prometheus_samples(text: str, fld: str, where: str) -> list | None:
    """The samples of a Prometheus text scrape, parsed by prometheus_client's exposition parser
    (label values with `}` or escaped quotes, +Inf, NaN, timestamps as the format defines them);
    None when the text is not a scrape of the metrics read here (another format: a log)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [smp for fam in text_string_to_metric_families(text) for smp in fam.samples]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        if not _PROM_OURS.search(text):
            return None
        n, line = _bad_line(text)
        raise SpecError(fld, short_repr(line.strip()) if line else str(exc)[:80],
                        f"Prometheus text exposition format, every line a comment or a sample "
                        f"(line {n}: {exc})" if n else f"Prometheus text exposition format ({exc})", where) from None


def _prometheus(text: str, fld: str, where: str) -> MeasuredAcceptance | None:
    """τ from one scrape of vLLM's or SGLang's /metrics. One scrape per file: a series named twice
    (two scrapes appended, or a counter that reset between them) is an error, and so is a scrape
    of several models (their counters summed would be no model's τ); counters are finite and
    >= 0; per engine (label set), accepted <= drafted tokens and drafts <= drafted tokens."""
    samples = _prometheus_samples(text, fld, where)
    if samples is None:
        return None
    per_series: dict[str, dict[tuple, float]] = {c: {} for c in _COUNTERS}
    per_pos: dict[int, float] = {}
    sglang: list[float] = []
    seen: set[tuple] = set()
    models: set[str] = set()
    for smp in samples:
        name, labels = smp.name, dict(smp.labels)
        try:
            value = float(smp.value)
        except OverflowError:   # the parser keeps a 400-digit count an int: no float holds it
            value = math.inf
        if name.endswith(("_created", "_bucket", "_count", "_sum")):
            continue
        base = _base(name)
        if base not in (*_COUNTERS, VLLM_PER_POS, *SGLANG_ACCEPT):
            continue
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise SpecError(fld, _series_text(name, labels), "one scrape per file: this series appears twice (two "
                            "scrapes appended, or a counter reset between them); keep one scrape", where)
        seen.add(key)
        if "model_name" in labels:
            models.add(labels["model_name"])
        if not (math.isfinite(value) and value >= 0):
            raise SpecError(fld, f"{_series_text(name, labels)} {smp.value}", "finite values >= 0 (a counter "
                            "counts; +Inf, NaN or a negative count is no measurement)", where)
        if base == VLLM_PER_POS:
            pos = labels.get("position")
            if pos is None or not pos.isdigit():
                raise SpecError(fld, _series_text(name, labels), 'a position="i" label (i = 0, 1, ...)', where)
            per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + value
        elif base in _COUNTERS:
            rest = tuple(sorted(labels.items()))
            per_series[base][rest] = value
        else:
            sglang.append(value)
    if len(models) > 1:
        raise SpecError(fld, sorted(models)[:5], "a scrape of one model (model_name): counters of several models "
                        "summed are no model's acceptance", where)
    if not seen:
        return None
    if any(per_series.values()):
        _per_engine_checks(per_series, fld, where)
        counts = {c: sum(v.values()) for c, v in per_series.items() if v}
        return _from_vllm(counts, per_pos, "prometheus", fld, where)
    return _sglang(sglang, "prometheus", fld, where)


def _per_engine_checks(per_series: dict[str, dict[tuple, float]], fld: str, where: str) -> None:
    """Each engine's (label set's) three counters present and consistent: accepted <= drafted
    tokens, drafts <= drafted tokens (a draft proposes one token or more)."""
    engines = set().union(*(v.keys() for v in per_series.values()))
    for labels in sorted(engines):
        where_l = "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"
        missing = [c for c in _COUNTERS if labels not in per_series[c]]
        if missing:
            raise SpecError(fld, f"{where_l}: no {['vllm:' + m + '_total' for m in missing]}",
                            "the three spec-decode counters for every engine (label set) in the scrape", where)
        drafts, drafted, accepted = (per_series[c][labels] for c in _COUNTERS)
        if accepted > drafted or drafts > drafted:
            raise SpecError(fld, {"labels": where_l, "drafts": drafts, "drafted": drafted, "accepted": accepted},
                            "per engine, accepted <= draft tokens and drafts <= draft tokens", where)


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
    vals = []
    for m in _SGLANG_LOG.finditer(text):
        try:
            vals.append(float(m.group(1)))
        except ValueError:
            line = text.count("\n", 0, m.start()) + 1
            raise SpecError(fld, m.group(0), f"SGLang 'accept len: x' log lines with x a number (line {line})",
                            where) from None
    return _sglang(vals, "log", fld, where) if vals else None


def read_acceptance_metrics(path: Path, fld: str = "drafter.tau_from") -> MeasuredAcceptance:
    """τ (and k) from a vLLM / SGLang metrics dump or log file (see the module docstring); the
    format is recognised from the content."""
    where = str(path)
    text = inputs.read_text(path, fld, "metrics file (Prometheus text, JSON, or an engine log)")
    stripped = text.lstrip()
    out = None
    if stripped.startswith(("{", "[")):   # JSON, or a log whose lines start with "[timestamp]"
        try:
            doc = inputs.parse_json(text, fld, where)
        except inputs.JsonSyntaxError:
            doc = None
        out = _json(doc, fld, where) if doc is not None else None
    if out is None:
        out = _prometheus(text, fld, where) or _logs(text, fld, where)
    if out is None:
        raise SpecError(fld, where, "vLLM spec-decode metrics (vllm:spec_decode_num_drafts_total, "
                                    "..._num_draft_tokens_total, ..._num_accepted_tokens_total; or its 'SpecDecoding "
                                    "metrics' log lines) or SGLang's accept length (sglang:spec_accept_length, "
                                    "avg_spec_accept_length, 'accept len:' log lines)", where)
    return out
