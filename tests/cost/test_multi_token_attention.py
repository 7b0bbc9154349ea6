"""Cache attention of passes with more than one query token per sequence on an engine that then runs
its attention unsplit (hardware.MultiTokenAttentionFit; A100 FlashAttention-2): closed forms, what
it leaves alone, the fit recovering known terms from verify rows, and bad profile input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsim.calibrate.kernels.forward_sweep import (
    CASCADE_MIN_REQUESTS,
    fit_multi_token_attention,
    price_rows,
    with_multi_token_attention,
    write_multi_token_attention,
)
from specsim.catalog.hardware import MultiTokenAttentionFit, load_hardware
from specsim.catalog.models import load_model
from specsim.cost.forward import pass_cost, ragged_pass_times_s, verify_cost
from specsim.cost.layout import ParallelLayout
from specsim.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
A100 = load_hardware("a100_sxm")
Q7B = load_model("Qwen2.5-7B")   # 28 layers, 28 query heads
LAY = ParallelLayout(tp=1)
TERM = MultiTokenAttentionFit(sms=108, tile_rows=64, s_per_kv_token=25e-9, coresident_speedup=1.4)
HW = with_multi_token_attention(A100, TERM)
PLAIN = with_multi_token_attention(A100, None)   # the decode law for every pass


def test_the_bundled_a100_profile_carries_the_fitted_term_and_the_others_do_not():
    mt = A100.kernel_fit.multi_token_attention
    assert mt is not None and mt.sms == 108 and mt.tile_rows == 64
    assert 5e-9 < mt.s_per_kv_token < 60e-9 and 1.0 <= mt.coresident_speedup <= 2.0
    assert A100.kernel_fit.provenance["multi_token_attention_fit"]["fit_rows"] == 60   # batch 1, 2, 4 x 5 prompts x 4 gammas
    for name in ("h100_sxm", "h200_sxm", "b200", "gb200"):   # their engines split the cache for any q
        assert load_hardware(name).kernel_fit.multi_token_attention is None, name


def test_one_wave_closed_form_a_verify_at_batch_one_pays_layers_x_cached_tokens_x_block_time():
    """Batch 1, q = 8: 28 blocks on 108 SMs, one wave; each block walks the whole cache."""
    got = pass_cost(Q7B, HW, LAY, 1.0, 8.0, 0.0).per_ctx_token_s
    assert got == pytest.approx(Q7B.layers * 25e-9, rel=1e-12)
    without = pass_cost(Q7B, PLAIN, LAY, 1.0, 8.0, 0.0)
    assert got > 10 * without.per_ctx_token_s   # the decode law reads that KV ~an order of magnitude faster
    # batch 2: 56 blocks, still one wave: the same time per sequence's cached token, half per C token
    assert pass_cost(Q7B, HW, LAY, 2.0, 8.0, 0.0).per_ctx_token_s == pytest.approx(Q7B.layers * 25e-9 / 2)


def test_waves_beyond_the_sms_cost_blocks_over_sms_over_the_coresident_speedup():
    for n in (4.0, 16.0, 64.0):
        blocks = n * Q7B.heads
        w = np.ceil(blocks / 108) / 1.4
        got = pass_cost(Q7B, HW, LAY, n, 6.0, 0.0).per_ctx_token_s
        assert got == pytest.approx(max(Q7B.layers * 25e-9 * w / n,
                                        pass_cost(Q7B, PLAIN, LAY, n, 6.0, 0.0).per_ctx_token_s), rel=1e-12), n
    # > 64 query rows per sequence: two tiles per (sequence, head)
    assert TERM.wave_factor(2 * 28) == 1.0 and TERM.wave_factor(109) == pytest.approx(2 / 1.4)


def test_decode_passes_and_profiles_without_the_term_are_untouched():
    for n in (1.0, 8.0, 256.0):
        for c in (100.0, 8000.0):
            a = pass_cost(Q7B, HW, LAY, n, 1.0, 1.0).time_s(n * c)
            b = pass_cost(Q7B, PLAIN, LAY, n, 1.0, 1.0).time_s(n * c)
            assert a == b
    h100 = load_hardware("h100_sxm")
    assert verify_cost(Q7B, h100, LAY, 1.0, 7).per_ctx_token_s < Q7B.layers * 1e-9   # KV streaming only


def test_ragged_passes_agree_with_uniform_ones_and_a_single_long_sequence_turns_the_batch_unsplit():
    n, q, c = 4.0, 6.0, 3000.0
    uniform = float(pass_cost(Q7B, HW, LAY, n, q, q).time_s(n * c))
    ragged = ragged_pass_times_s(Q7B, HW, LAY, n, n * q, n * q * q, n * q * c, n * c, n * q)
    assert float(ragged) == pytest.approx(uniform, rel=1e-9)
    decodes = ragged_pass_times_s(Q7B, HW, LAY, n, n, n, n * c, n * c, n)       # every q = 1: the split kernel
    mixed = ragged_pass_times_s(Q7B, HW, LAY, n, n + 1, n + 3, n * c, n * c, n)  # one sequence brings 2 tokens
    plain = ragged_pass_times_s(Q7B, PLAIN, LAY, n, n + 1, n + 3, n * c, n * c, n)
    assert float(mixed) - float(decodes) > 0.5 * Q7B.layers * c * 25e-9
    assert float(plain) - float(decodes) < 0.05 * Q7B.layers * c * 25e-9


def _verify_rows(term: MultiTokenAttentionFit, seed: int = 0) -> pd.DataFrame:
    b, s = (a.ravel() for a in np.meshgrid([1, 2, 4, 16, 64], [256, 1024, 4096]))
    df = pd.DataFrame({"model": "Qwen2.5-7B", "batch": b, "seq": s, "gamma": 7, "mode": "target_verify"})
    t = price_rows(df, with_multi_token_attention(A100, term)) * np.exp(np.random.default_rng(seed).normal(0, 0.002, len(df)))
    return df.assign(median_ms=t * 1e3, n_samples=100)


def test_fit_recovers_known_terms_from_verify_rows_below_the_cascade_batch_only():
    df = _verify_rows(TERM)
    big = df["batch"] >= CASCADE_MIN_REQUESTS
    df.loc[big, "median_ms"] *= 0.5     # a shared-prompt (cascade) timing: must never move the fit
    fit = fit_multi_token_attention(df, PLAIN, sms=108)
    assert fit.term.s_per_kv_token == pytest.approx(25e-9, rel=0.03)
    assert fit.term.coresident_speedup == pytest.approx(1.4, rel=0.03)
    assert fit.fit_rows == int((~big).sum())
    assert set(fit.rows.loc[big.to_numpy(), "role"]) == {"check (cascade)"}
    assert fit.rows.loc[~big.to_numpy(), "rel_error"].abs().max() < 0.01
    assert fit.rows.loc[~big.to_numpy(), "before_rel_error"].median() < -0.05   # the decode law: too fast


def test_fit_refuses_rows_that_cannot_tell_the_two_terms_apart():
    df = _verify_rows(TERM)
    with pytest.raises(SpecError, match="one with more"):
        fit_multi_token_attention(df[df["batch"] <= 2], A100, sms=108)   # every batch < 8 row in one wave


def test_written_term_loads_and_a_bad_one_is_named(tmp_path):
    df = _verify_rows(TERM)
    fit = fit_multi_token_attention(df, A100, sms=108)
    prof = tmp_path / "a100_sxm.yaml"
    prof.write_text((ROOT / "specsim" / "catalog" / "hardware_profiles" / "a100_sxm.yaml").read_text())
    write_multi_token_attention(prof, fit, "sweep.csv", "cmd")
    hw = load_hardware(str(prof))
    assert hw.kernel_fit.multi_token_attention.s_per_kv_token == pytest.approx(fit.term.s_per_kv_token, rel=1e-3)
    assert "cmd" in hw.kernel_fit.provenance["multi_token_attention_fit"]["how"]
    text = prof.read_text()
    for bad, field in (("coresident_speedup: 3.0", "coresident_speedup"), ("sms: 0", "sms"),
                       ("s_per_kv_token_ns: -1", "s_per_kv_token_ns")):
        key = bad.split(":")[0]
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(key + ":"))
        p = tmp_path / f"bad_{key}.yaml"
        p.write_text(text.replace(line, line.split(":")[0] + ": " + bad.split(": ")[1]))
        with pytest.raises(SpecError) as exc:
            load_hardware(str(p))
        assert field in exc.value.field and str(p) in str(exc.value)


def test_a_verify_on_the_a100_costs_more_than_a_decode_at_long_context_only():
    """What the term changes for SD on the A100: at batch 1 and short context a verify of 6 tokens
    is still ~a decode (weights dominate); at 8k tokens of context it is markedly dearer."""
    dec = pass_cost(Q7B, A100, LAY, 1.0, 1.0, 1.0)
    ver = verify_cost(Q7B, A100, LAY, 1.0, 5)
    short, long_ = (float(ver.time_s(c) / dec.time_s(c)) for c in (256.0, 8192.0))
    assert short < 1.1 and long_ > short + 0.2
    plain = verify_cost(Q7B, PLAIN, LAY, 1.0, 5)
    assert float(plain.time_s(8192.0) / dec.time_s(8192.0)) < short + 0.1   # without the term it would not be
