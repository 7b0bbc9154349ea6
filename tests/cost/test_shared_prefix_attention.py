"""Attention over a prefix that a batch shares (cost/forward.shared_prefix_attention_s) and vLLM V1's
cascade-attention rule (cost/forward.uses_cascade_attention): closed forms, the batch-1 limit,
monotonicity, the piecewise-graph term, the prefix vLLM's cache shares (cost/forward.cached_prefix_tokens),
the per-(sequence, KV head) block time, and the profile fields' bad input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.calibrate.kernels.forward_sweep import with_multi_token_attention
from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import load_model
from specsim.cost.forward import (
    KV_BLOCK_TOKENS,
    cached_prefix_tokens,
    pass_cost,
    shared_prefix_attention_s,
    uses_cascade_attention,
)
from specsim.cost.layout import ParallelLayout
from specsim.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]
A100 = load_hardware("a100_sxm")
MT = A100.kernel_fit.multi_token_attention
Q7B = load_model("Qwen2.5-7B")       # 28 query heads, 4 KV heads, 28 layers
L8B = load_model("Llama-3.1-8B")     # 32 query heads, 8 KV heads, 32 layers
LAY = ParallelLayout(tp=1)


def test_cascade_rule_thresholds_as_vllm_writes_them():
    # below 8 requests or 256 prefix tokens: never
    assert not uses_cascade_attention(7, 8, 4096, 28, 4, 108)
    assert not uses_cascade_attention(64, 8, 255, 28, 4, 108)
    # a verify (q > 1) at >= 8 requests: always (FA2 would not run flash decoding)
    assert uses_cascade_attention(8, 2, 256, 28, 4, 108)
    # one query head per KV head (MHA): no flash decoding either, so a decode cascades too
    assert uses_cascade_attention(8, 1, 256, 32, 32, 108)
    # a GQA decode: the performance model. Qwen2.5-7B at 4096 tokens: cascade ceil(28/108)*32 = 32
    # against flash decoding ceil(n*4*32/108): 10 at n = 8 (no), 38 at n = 32 (yes)
    got = uses_cascade_attention(np.array([8, 16, 24, 27, 28, 32, 64]), 1, 4096, 28, 4, 108)
    assert got.tolist() == [False, False, False, False, True, True, True]
    # Llama-3.1-8B (8 KV heads) crosses at half the batch
    got = uses_cascade_attention(np.array([8, 13, 14, 16]), 1, 4096, 32, 8, 108)
    assert got.tolist() == [False, False, True, True]


def _whole(model, n, q, ctx_per_seq, hw=A100):
    pc = pass_cost(model, hw, LAY, n, q, 0.0)
    return pc.per_ctx_token_s * n * ctx_per_seq


@pytest.mark.parametrize("q", [1.0, 4.0, 16.0])
def test_batch_one_is_the_whole_context_pricing(q):
    """One request shares with nobody: exactly pass_cost's attention over its P + S tokens."""
    got = shared_prefix_attention_s(Q7B, A100, LAY, 1.0, q, 4096.0, 25.5)
    assert got == pytest.approx(float(_whole(Q7B, 1.0, q, 4096.0 + 25.5)), rel=1e-12)


def test_below_the_cascade_rule_is_the_whole_context_pricing():
    n = np.array([2.0, 4.0, 7.0])
    got = shared_prefix_attention_s(Q7B, A100, LAY, n, 8.0, 2048.0, 25.5)
    np.testing.assert_allclose(got, _whole(Q7B, n, 8.0, 2048.0 + 25.5), rtol=1e-12)


def test_cascade_closed_form_and_piecewise_term():
    """n = 8 requests, q = 4: the prefix is one sequence of 32 rows (28 blocks, one wave), the
    suffixes 8 sequences of 4 rows (224 blocks, three waves), plus the piecewise term per layer."""
    hw = with_multi_token_attention(A100, replace(MT, s_per_kv_token=20e-9, coresident_speedup=1.5,
                                                  piecewise_attention_s=50e-6))
    p, s, n, q = 4096.0, 32.0, 8.0, 4.0
    prefix = p * 20e-9 * 1.0
    suffix = s * 20e-9 * np.ceil(8 * 28 / 108) / 1.5
    got = shared_prefix_attention_s(Q7B, hw, LAY, n, q, p, s)
    want = Q7B.kv_layers * (prefix + suffix + 50e-6)
    assert got == pytest.approx(want, rel=1e-9)
    # a pass that runs piecewise graphs anyway (the self-drafter) changes no graph mode
    off = shared_prefix_attention_s(Q7B, hw, LAY, n, q, p, s, full_graph=False)
    assert got - off == pytest.approx(Q7B.kv_layers * 50e-6, rel=1e-9)


def test_cascade_prefix_cost_does_not_grow_with_requests_while_their_rows_fit_one_tile():
    hw = with_multi_token_attention(A100, replace(MT, piecewise_attention_s=0.0))
    a = shared_prefix_attention_s(Q7B, hw, LAY, 8.0, 4.0, 4096.0, 0.0)
    b = shared_prefix_attention_s(Q7B, hw, LAY, 16.0, 4.0, 4096.0, 0.0)    # 64 rows: still one tile
    c = shared_prefix_attention_s(Q7B, hw, LAY, 32.0, 4.0, 4096.0, 0.0)    # 128 rows: two tiles, 56 blocks, one wave
    assert a == pytest.approx(b, rel=1e-12) and b == pytest.approx(c, rel=1e-12)
    # and is far below pricing every request over the whole prompt
    assert c < 0.2 * float(_whole(Q7B, 32.0, 4.0, 4096.0))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 256), q=st.sampled_from([1.0, 2.0, 4.0, 8.0, 16.0]),
       p=st.floats(0.0, 16384.0), s=st.floats(0.0, 512.0), dp=st.floats(1.0, 4096.0))
def test_monotone_in_prefix_and_suffix_tokens(n, q, p, s, dp):
    """More cached tokens never cost less while the engine's choice stays (crossing into cascade
    may: that is why vLLM picks it)."""
    f = shared_prefix_attention_s
    base = f(L8B, A100, LAY, float(n), q, p, s)
    assert base >= 0.0
    assert f(L8B, A100, LAY, float(n), q, p, s + dp) >= base * (1 - 1e-12)
    same = uses_cascade_attention(n, q, p, 32, 8, MT.sms) == uses_cascade_attention(n, q, p + dp, 32, 8, MT.sms)
    if same:
        assert f(L8B, A100, LAY, float(n), q, p + dp, s) >= base * (1 - 1e-12)


def test_never_above_distinct_sequences_without_the_piecewise_term():
    """Sharing a prefix never makes the attention dearer than distinct sequences of the same length
    (the piecewise term aside: it is the step leaving its CUDA graph, not attention work)."""
    hw = with_multi_token_attention(A100, replace(MT, piecewise_attention_s=0.0))
    n = np.array([1.0, 8.0, 16.0, 32.0, 64.0])
    for q in (1.0, 4.0, 8.0, 16.0):
        shared = shared_prefix_attention_s(Q7B, hw, LAY, n, q, 4096.0, 25.5)
        assert np.all(shared <= _whole(Q7B, n, q, 4096.0 + 25.5, hw) * (1 + 1e-12))


def test_profile_without_the_multi_token_term_never_cascades():
    h100 = load_hardware("h100_sxm")
    assert h100.kernel_fit is None or h100.kernel_fit.multi_token_attention is None
    n = np.array([1.0, 8.0, 64.0])
    got = shared_prefix_attention_s(Q7B, h100, LAY, n, 4.0, 4096.0, 25.5)
    np.testing.assert_allclose(got, _whole(Q7B, n, 4.0, 4096.0 + 25.5, h100), rtol=1e-12)


def test_piecewise_field_is_optional_and_bad_values_are_named(tmp_path):
    assert MT.piecewise_attention_s > 0.0     # a100_sxm carries the fitted value
    text = (ROOT / "specsim" / "catalog" / "hardware_profiles" / "a100_sxm.yaml").read_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("piecewise_attention_us:"))
    ok = tmp_path / "no_piecewise.yaml"
    ok.write_text(text.replace(line + "\n", ""))
    assert load_hardware(str(ok)).kernel_fit.multi_token_attention.piecewise_attention_s == 0.0
    bad = tmp_path / "bad_piecewise.yaml"
    bad.write_text(text.replace(line, line.split(":")[0] + ": -3"))
    with pytest.raises(SpecError) as exc:
        load_hardware(str(bad))
    assert "piecewise_attention_us" in exc.value.field and str(bad) in str(exc.value)


@given(st.integers(1, 200_000))
def test_cached_prefix_is_whole_blocks_of_the_prompt_less_its_last_token(p):
    got = cached_prefix_tokens(float(p))
    assert got % KV_BLOCK_TOKENS == 0 and 0.0 <= got <= p - 1
    assert got > p - 1 - KV_BLOCK_TOKENS


def test_a_256_token_prompt_shares_240_tokens_and_never_cascades():
    assert cached_prefix_tokens(256.0) == 240.0 and cached_prefix_tokens(257.0) == 256.0
    np.testing.assert_array_equal(cached_prefix_tokens(np.array([1.0, 16.0, 17.0, 512.0])), [0.0, 0.0, 16.0, 496.0])
    n = np.array([8.0, 16.0, 64.0, 256.0])
    for model in (Q7B, L8B):
        assert not uses_cascade_attention(n, 4.0, cached_prefix_tokens(256.0), model.heads, model.kv_heads, MT.sms).any()
        assert uses_cascade_attention(n, 4.0, cached_prefix_tokens(512.0), model.heads, model.kv_heads, MT.sms).all()


@given(st.floats(1.0, 512.0), st.sampled_from([1, 2, 4, 8]))
@settings(max_examples=25, deadline=None)
def test_block_time_adds_layers_x_sequences_x_kv_heads_per_gpu(n, tp):
    lay = ParallelLayout(tp=tp)
    on = pass_cost(L8B, A100, lay, n, 1.0, 1.0)
    off = pass_cost(L8B, with_multi_token_attention(A100, replace(MT, block_s=0.0)), lay, n, 1.0, 1.0)
    want = L8B.layers * MT.block_s * n * max(L8B.kv_heads / tp, 1.0)
    assert on.fixed_s - off.fixed_s == pytest.approx(want, rel=1e-9)
    assert on.per_ctx_token_s == off.per_ctx_token_s


def test_block_field_is_optional_and_bad_values_are_named(tmp_path):
    assert MT.block_s > 0.0     # a100_sxm carries the fitted value
    text = (ROOT / "specsim" / "catalog" / "hardware_profiles" / "a100_sxm.yaml").read_text()
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("block_ns:"))
    ok = tmp_path / "no_block.yaml"
    ok.write_text(text.replace(line + "\n", ""))
    assert load_hardware(str(ok)).kernel_fit.multi_token_attention.block_s == 0.0
    bad = tmp_path / "bad_block.yaml"
    bad.write_text(text.replace(line, line.split(":")[0] + ": -1"))
    with pytest.raises(SpecError) as exc:
        load_hardware(str(bad))
    assert "block_ns" in exc.value.field and str(bad) in str(exc.value)
