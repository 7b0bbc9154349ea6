"""SD step costs as the serving engine pays them (cost/forward.step_cost, cost/sd_costs.py)."""

import numpy as np
import pytest

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.catalog.sd_costs import FITTABLE, SD_COST_KEYS, SDCosts, load_sd_costs, sd_costs_to_yaml_dict
from specsim.cost.forward import decode_cost, draft_cost, pass_cost, sampler_cost, verify_cost
from specsim.cost.layout import ParallelLayout
from specsim.cost.roofline import memory_time_s
from specsim.cost.sd_costs import piecewise_overhead_s
from specsim.cost.step import step_cost, step_cost_table
from specsim.errors import SpecError

Q8B = load_model("Qwen3-8B")
GB200 = load_hardware("gb200")
TP1 = ParallelLayout(tp=1)
EAGLE = drafter_arch("eagle3", Q8B)
NGRAM = drafter_arch("ngram", Q8B)
SELF = drafter_arch("self_quant", Q8B)


def _t(cost, ctx):
    return np.asarray(cost.time_s(ctx), dtype=float)


def test_sd_step_is_the_sum_of_its_terms():
    n, k, q1, ctx = 64.0, 3, 2.77, 64 * 3000.0
    sd, eff = GB200.sd_costs, GB200.efficiency
    expect = (_t(verify_cost(Q8B, GB200, TP1, n, k), ctx)
              + _t(draft_cost(EAGLE, GB200, TP1, n, q1), ctx)
              + (k - 1) * _t(draft_cost(EAGLE, GB200, TP1, n, 1.0, first=False), ctx)
              + memory_time_s(n * ((k + 1) * Q8B.vocab * 4 * sd.sampler_passes + k * 32000 * 4), GB200)
              + k * eff.draft_overhead_s + sd.sd_step_overhead_s + eff.step_overhead_s + eff.per_seq_overhead_s * n)
    assert n * (k + 1) <= sd.cuda_graph_max_tokens  # no eager term here
    assert _t(step_cost(Q8B, EAGLE, GB200, TP1, n, k, q1), ctx) == pytest.approx(expect, rel=1e-12)


def test_first_draft_pass_runs_over_accepted_tokens_and_fuses_features():
    first_1 = _t(draft_cost(EAGLE, GB200, TP1, 256.0, 1.0), 0.0)
    first_3 = _t(draft_cost(EAGLE, GB200, TP1, 256.0, 3.0), 0.0)
    later = _t(draft_cost(EAGLE, GB200, TP1, 256.0, 1.0, first=False), 0.0)
    assert first_3 > first_1 > later  # more tokens cost more; the fusion fc only in the first pass
    lo = _t(step_cost(Q8B, EAGLE, GB200, TP1, 256.0, 3, 1.0), 1e5)
    hi = _t(step_cost(Q8B, EAGLE, GB200, TP1, 256.0, 3, 3.5), 1e5)
    assert hi > lo
    with pytest.raises(ValueError):
        step_cost(Q8B, EAGLE, GB200, TP1, 8.0, 3, 4.5)


def test_rejection_sampling_scales_with_rows_and_full_vocab():
    a = _t(sampler_cost(Q8B, GB200, 128.0, 4.0), 0.0)
    b = _t(sampler_cost(Q8B, GB200, 128.0, 1.0), 0.0)
    assert a == pytest.approx(4 * b, rel=1e-12)
    assert b == pytest.approx(128 * Q8B.vocab * 4 * 3 / (GB200.hbm_bw_bytes_per_s * GB200.efficiency.memory), rel=1e-12)


def test_ngram_pays_a_cpu_proposer_per_context_token_and_no_gpu_draft():
    n, k = np.array([16.0, 256.0]), 3
    ng = step_cost(Q8B, NGRAM, GB200, TP1, n, k)
    ver = verify_cost(Q8B, GB200, TP1, n, k)
    np.testing.assert_allclose(ng.per_ctx_token_s - ver.per_ctx_token_s, 1.0 / GB200.sd_costs.ngram_cpu_tokens_per_s)
    assert np.all(_t(draft_cost(NGRAM, GB200, TP1, n), 1e4) == 0.0)


def test_steps_past_the_captured_cuda_graphs_pay_eager_launches():
    sd = GB200.sd_costs
    k = 3
    n_at = sd.cuda_graph_max_tokens // (k + 1)  # verify of exactly max tokens: still captured
    smooth = lambda n: _t(verify_cost(Q8B, GB200, TP1, n, k), 0.0)
    f = lambda n: _t(step_cost(Q8B, NGRAM, GB200, TP1, float(n), k), 0.0)
    jump = (f(n_at + 1) - f(n_at)) - (smooth(n_at + 1.0) - smooth(float(n_at)))
    assert jump == pytest.approx(Q8B.layers * sd.eager_layer_overhead_s, rel=0.05)
    # a decode step of max_batch 256 sequences stays inside the captured sizes
    ar = lambda n: _t(step_cost(Q8B, None, GB200, TP1, float(n), 0), 0.0) - _t(decode_cost(Q8B, GB200, TP1, float(n)), 0.0)
    assert ar(256) - ar(255) < 0.5 * Q8B.layers * sd.eager_layer_overhead_s
    assert ar(513) - ar(512) > Q8B.layers * sd.eager_layer_overhead_s  # past 512 a decode runs eagerly too


def test_non_uniform_verify_batches_pay_piecewise_graphs():
    """A batch mixing drafting and non-drafting requests (n-gram, p < 1) is not a uniform decode
    batch: P = 1 − pⁿ − (1 − p)ⁿ of paying layers·piecewise_layer_overhead_s; never for p = 1,
    one request, or a pass already running eagerly."""
    sd, layers = GB200.sd_costs, Q8B.layers
    full = layers * sd.piecewise_layer_overhead_s
    n = np.array([1.0, 2.0, 8.0, 64.0])
    got = piecewise_overhead_s(n, 0.1, n * 1.3, layers, sd)
    np.testing.assert_allclose(got, (1 - 0.1 ** n - 0.9 ** n) * full)
    assert got[0] == 0.0 and got[-1] == pytest.approx(full, rel=1e-2)
    assert np.all(piecewise_overhead_s(n, 1.0, n * 4, layers, sd) == 0.0)
    assert piecewise_overhead_s(np.array([256.0]), 0.1, np.array([600.0]), layers, sd)[0] == 0.0
    # in the step: an n-gram step at p = 0.1 pays it on top of the p-scaled verify; at p = 1 not
    k, b = 3, 64.0
    extra = lambda p: _t(step_cost(Q8B, NGRAM, GB200, TP1, b, k, proposal_rate=p), 0.0)
    no_pw = SDCosts(**{**{f: getattr(sd, f) for f in sd.__dataclass_fields__ if f != "sources"},
                       "piecewise_layer_overhead_s": 0.0})
    gb_no_pw = GB200.__class__(**{**GB200.__dict__, "sd_costs": no_pw})
    base = lambda p: _t(step_cost(Q8B, NGRAM, gb_no_pw, TP1, b, k, proposal_rate=p), 0.0)
    assert extra(0.1) - base(0.1) == pytest.approx((1 - 0.1 ** b - 0.9 ** b) * full)
    assert extra(1.0) == pytest.approx(base(1.0))


def test_self_drafter_pays_full_depth_quantized_passes():
    d = _t(draft_cost(SELF, GB200, TP1, 1.0), 0.0)
    dec = _t(decode_cost(Q8B, GB200, TP1, 1.0), 0.0)
    # 4-bit layers: a quarter of the bf16 weight stream, plus KV, the shared bf16 LM head and the per-kernel
    # launch floors of the measured-kernel fit, which do not shrink with the weights: under a decode, over a quarter
    assert 0.25 * dec < d < 0.9 * dec
    # the LM head is the target's (EfficientRollout shares it, FP16): the same bytes as the decode's head
    head_d = d - _t(draft_cost(SELF, GB200, TP1, 1.0, logits_per_seq=0.0), 0.0)
    head_dec = dec - _t(pass_cost(Q8B, GB200, TP1, 1.0, 1.0, 0.0), 0.0)
    assert head_d == pytest.approx(head_dec, rel=1e-9) and head_d > 0


def test_self_drafter_shares_the_targets_kv_and_embeddings():
    from specsim.cost.memory import drafter_weight_bytes_per_gpu, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu

    assert kv_bytes_per_token_per_gpu(Q8B, TP1, SELF) == kv_bytes_per_token_per_gpu(Q8B, TP1)
    assert kv_bytes_per_token_per_gpu(Q8B, TP1, EAGLE) > kv_bytes_per_token_per_gpu(Q8B, TP1)
    layers_bf16 = weight_bytes_per_gpu(Q8B, TP1, embeddings=False)
    assert drafter_weight_bytes_per_gpu(SELF, TP1) == pytest.approx(layers_bf16 / 4)


def test_only_drafters_with_their_own_cache_catch_up_on_the_accepted_tokens():
    """EAGLE-3 and MTP extend their own KV and hidden states over the accepted tokens in the
    first draft pass (q = τ); the self-drafter reads the target's cache and drafts every pass from
    one token (EfficientRollout's propose: max_query_len = 1); the resolved scenario's table says so."""
    from specsim.scenario import load_scenario
    from specsim.world.resolve import resolve

    assert EAGLE.catches_up_on_accepted and drafter_arch("mtp", Q8B).catches_up_on_accepted
    assert not SELF.catches_up_on_accepted and not NGRAM.catches_up_on_accepted
    from pathlib import Path

    world = resolve(load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "efficient_rollout_a100.yaml"))
    a100, q7b = load_hardware("a100_sxm"), load_model("Qwen2.5-7B")
    one = step_cost(q7b, drafter_arch("self_quant", q7b), a100, TP1, 16.0, 5, first_pass_q=1.0)
    row = world.table.ks.index(5)
    assert world.table.fixed_s[row, 16] == pytest.approx(float(one.fixed_s), rel=1e-12)
    assert world.table.per_ctx_s[row, 16] == pytest.approx(float(one.per_ctx_token_s), rel=1e-12)


def test_w4a16_gemm_law_prices_int4_weights_where_fitted():
    """A100 carries a W4A16 law fitted on measured int4 weight-only kernels; a 4-bit GEMM at small m
    then streams its 4-bit bytes instead of binding on the bf16 law's small-m compute branch."""
    a100 = load_hardware("a100_sxm")
    assert "int4" in a100.kernel_fit.gemm and "int4" not in GB200.kernel_fit.gemm
    from specsim.cost.roofline import gemm_op_s
    n = k = 8192
    w4 = gemm_op_s(2 * n * k, n * k * 0.5, a100, "int4", 1.0)[0]
    bf = gemm_op_s(2 * n * k, n * k * 2.0, a100, "bf16", 1.0)[0]
    assert w4 < 0.6 * bf
    # no int4 law: the bf16 law prices it (compute branch and floor of bf16)
    assert GB200.kernel_fit.gemm_for("int4") is GB200.kernel_fit.gemm["bf16"]


def test_table_takes_first_pass_tokens_per_k():
    t1 = step_cost_table(Q8B, EAGLE, GB200, TP1, 64, (3,), first_pass_q={3: 1.0})
    t3 = step_cost_table(Q8B, EAGLE, GB200, TP1, 64, (3,), first_pass_q={3: 3.0})
    assert np.all(t3.fixed_s[1, 1:] > t1.fixed_s[1, 1:])
    np.testing.assert_array_equal(t3.fixed_s[0], t1.fixed_s[0])


def test_sd_costs_block_loads_with_units_and_sources():
    doc = {"sd_step_overhead_ms": {"value": 2.5, "source": "fit"}, "cuda_graph_max_tokens": 1024,
           "eager_layer_overhead_us": 10}
    sd = load_sd_costs(doc, "x.yaml")
    assert sd.sd_step_overhead_s == pytest.approx(2.5e-3)
    assert sd.cuda_graph_max_tokens == 1024 and isinstance(sd.cuda_graph_max_tokens, int)
    assert sd.eager_layer_overhead_s == pytest.approx(1e-5)
    assert sd.ngram_cpu_tokens_per_s == SDCosts().ngram_cpu_tokens_per_s  # prior kept
    assert sd.sources["sd_costs.sd_step_overhead_ms"] == "fit"
    back = load_sd_costs(sd_costs_to_yaml_dict(sd, "round trip"))
    assert back == sd
    assert load_sd_costs(None) == SDCosts()
    assert set(FITTABLE) == {"sd_costs.sd_step_overhead_ms", "efficiency.draft_overhead_ms"}
    assert "sd_step_overhead_ms" in SD_COST_KEYS


@pytest.mark.parametrize("doc,field", [
    ({"sd_step_overhead_ms": -1}, "sd_costs.sd_step_overhead_ms"),
    ({"ngram_cpu_tokens_per_s": 0}, "sd_costs.ngram_cpu_tokens_per_s"),
    ({"cuda_graph_max_token": 512}, "sd_costs.cuda_graph_max_token"),
    ({"sampler_passes": "three"}, "sd_costs.sampler_passes"),
    ([1, 2], "sd_costs"),
])
def test_bad_sd_costs_name_the_field(doc, field):
    with pytest.raises(SpecError) as e:
        load_sd_costs(doc, "prof.yaml")
    assert e.value.field == field
    assert "prof.yaml" in str(e.value)
