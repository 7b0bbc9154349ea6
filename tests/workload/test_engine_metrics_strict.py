"""Engine metrics read by a real parser of the Prometheus text format (prometheus_client): label
values holding `}`, escaped quotes or commas read right; one scrape per file (a repeated series,
two scrapes appended or a counter reset between them, refused); several models refused; +Inf, NaN
and negative counts refused; per engine accepted <= drafted; a malformed line of a scrape named;
the JSON form through the guarded JSON reader; SGLang's 'accept len' parsed strictly."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsim.errors import SpecError
from specsim.workload.acceptance.engine_metrics import read_acceptance_metrics

HEAD = ("# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.\n"
        "# TYPE vllm:spec_decode_num_drafts_total counter\n")


def scrape(engines: dict[str, tuple[float, float, float]], model: str = "m") -> str:
    """vLLM's three counters for each engine label: (drafts, draft tokens, accepted)."""
    lines = [HEAD]
    for name, i in (("num_drafts", 0), ("num_draft_tokens", 1), ("num_accepted_tokens", 2)):
        for eng, vals in engines.items():
            lines.append(f'vllm:spec_decode_{name}_total{{engine="{eng}",model_name="{model}"}} {vals[i]}\n')
            lines.append(f'vllm:spec_decode_{name}_created{{engine="{eng}",model_name="{model}"}} 1.7e9\n')
    return "".join(lines)


def _read(tmp_path, text: str):
    f = tmp_path / "metrics.prom"
    f.write_text(text, encoding="utf-8")
    return read_acceptance_metrics(f, "drafter.tau_from")


def _refused(tmp_path, text: str, *words: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        _read(tmp_path, text)
    msg = f"{info.value.value} {info.value.allowed}"
    assert info.value.field == "drafter.tau_from" and info.value.where == str(tmp_path / "metrics.prom")
    for w in words:
        assert w in msg, (w, msg)
    return info.value


def test_a_label_value_with_a_brace_reads_as_the_format_says(tmp_path):
    m = _read(tmp_path, scrape({"0": (100, 300, 127)}, model="qwen}{x=\\\"y\\\",z"))
    assert m.tau == pytest.approx(2.27) and m.k == 3


def test_several_engines_are_summed_and_checked_each(tmp_path):
    m = _read(tmp_path, scrape({"0": (100, 300, 120), "1": (50, 150, 80)}))
    assert m.tau == pytest.approx(1 + 200 / 150) and m.k == 3
    _refused(tmp_path, scrape({"0": (100, 300, 320), "1": (100, 300, 0)}), "accepted <= draft tokens")


@pytest.mark.parametrize("value", ["+Inf", "NaN", "-5"])
def test_non_finite_or_negative_counts_are_refused(tmp_path, value):
    text = scrape({"0": (100, 900, 127)}).replace(" 127", f" {value}")
    _refused(tmp_path, text, "finite values >= 0")


def test_two_scrapes_appended_or_a_reset_are_refused(tmp_path):
    one = scrape({"0": (100, 300, 127)})
    _refused(tmp_path, one + one, "appears twice")
    _refused(tmp_path, one + scrape({"0": (10, 30, 12)}).replace(HEAD, ""), "counter reset")


def test_several_models_are_refused(tmp_path):
    text = scrape({"0": (100, 300, 127)}, model="a") + scrape({"0": (100, 300, 127)}, model="b").replace(HEAD, "")
    _refused(tmp_path, text, "one model")


def test_a_malformed_line_of_a_scrape_is_named(tmp_path):
    text = scrape({"0": (100, 300, 127)}) + 'vllm:spec_decode_num_drafts_total{engine="9" 5\n'
    _refused(tmp_path, text, "line")


def test_an_engine_missing_a_counter_is_refused(tmp_path):
    text = scrape({"0": (100, 300, 127)}) + 'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5\n'
    _refused(tmp_path, text, "every engine")


@given(drafts=st.integers(1, 10**6), k=st.integers(1, 16), share=st.floats(0, 1))
def test_tau_is_one_plus_accepted_over_drafts(tmp_path_factory, drafts, k, share):
    accepted = int(share * drafts * k)
    m = _read(tmp_path_factory.mktemp("p"), scrape({"0": (drafts, drafts * k, accepted)}))
    assert m.tau == pytest.approx(1 + accepted / drafts) and m.k == k


def test_json_goes_through_the_guarded_reader(tmp_path):
    f = tmp_path / "metrics.prom"
    f.write_text("[" * 100000 + "]" * 100000, encoding="utf-8")
    with pytest.raises(SpecError):
        read_acceptance_metrics(f, "drafter.tau_from")
    f.write_text('{"vllm:spec_decode_num_drafts": 10, "vllm:spec_decode_num_drafts": 20}', encoding="utf-8")
    with pytest.raises(SpecError, match="repeated"):
        read_acceptance_metrics(f, "drafter.tau_from")
    f.write_text(json.dumps({"spec_decode_num_drafts": 10, "spec_decode_num_draft_tokens": 30,
                             "spec_decode_num_accepted_tokens": 12}), encoding="utf-8")
    assert read_acceptance_metrics(f, "drafter.tau_from").tau == pytest.approx(2.2)


def test_sglang_accept_len_is_parsed_strictly(tmp_path):
    f = tmp_path / "metrics.prom"
    f.write_text("[2025] Decode batch. #running-req: 1, accept len: 2.50, gen throughput: 9\n", encoding="utf-8")
    assert read_acceptance_metrics(f, "drafter.tau_from").tau == pytest.approx(2.5)
    f.write_text("[2025] Decode batch. #running-req: 1, accept len: 2.5.5, gen throughput: 9\n", encoding="utf-8")
    with pytest.raises(SpecError, match="line 1"):
        read_acceptance_metrics(f, "drafter.tau_from")
