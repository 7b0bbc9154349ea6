"""Cost layer: roofline decode/verify physics, TP/EP/comm, MoE expert reads, memory plan."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.cost import comm
from specsim.cost.forward import (
    decode_cost,
    expected_experts_hit,
    forward_time_s,
    pass_cost,
    verify_cost,
)
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import memory_plan, weight_bytes_per_gpu
from specsim.cost.roofline import ridge_point
from specsim.cost.step import step_cost
from specsim.errors import LayoutError

H100 = load_hardware("h100_sxm")
#: the scalar roofline (profile without its measured-kernel terms): tests of the roofline's own algebra
H100S = replace(H100, kernel_fit=None)
GB200 = load_hardware("gb200")
Q8B = load_model("Qwen3-8B")
Q30B = load_model("Qwen3-30B-A3B")
Q235B = load_model("Qwen3-235B-A22B")
TP1 = ParallelLayout()
TP2 = ParallelLayout(tp=2)


# ----------------------------------------------------------------------------- decode at batch 1
def test_decode_batch1_8b_h100_is_weight_streaming_plus_overhead():
    """Batch-1 decode = weights streamed at the fitted weight bandwidth, in situ (KernelFit.stream_eff)
    + the fitted kernel launch floors (4 GEMMs and one attention per layer, the LM head) + the engine
    overheads."""
    eff, kf = H100.efficiency, H100.kernel_fit
    g = kf.gemm_for("bf16")
    weights_s = Q8B.matmul_params_per_token * 2 / (H100.hbm_bw_bytes_per_s * kf.stream_eff(g.weight_bw_eff))
    floors_s = Q8B.layers * (4 * g.latency_s + kf.attn_latency_s + kf.attn_per_seq_s) + g.latency_s
    expected_s = weights_s + floors_s + eff.step_overhead_s + eff.per_seq_overhead_s
    step_s = float(step_cost(Q8B, None, H100, TP1, 1, 0).time_s(256))
    print(f"\nQwen3-8B bf16 decode step, batch 1, 256 ctx, h100_sxm: {step_s * 1e3:.3f} ms "
          f"(weights {weights_s * 1e3:.3f} ms + launch floors {floors_s * 1e3:.3f} ms + overhead "
          f"{(eff.step_overhead_s + eff.per_seq_overhead_s) * 1e3:.3f} ms)")
    assert step_s == pytest.approx(expected_s, rel=0.03)
    assert step_s >= expected_s  # KV reads and norms only add


def test_decode_batch1_is_memory_bound():
    assert decode_cost(Q8B, H100, TP1, 1).bound(256) == "memory"


# ----------------------------------------------------------------------------- memory → compute flip
def _flip_batch(context_per_seq: int) -> int:
    n = np.arange(1, 4097, dtype=float)
    bound = decode_cost(Q8B, H100S, TP1, n).bound(n * context_per_seq)
    assert bound[0] == "memory"
    compute = np.flatnonzero(bound == "compute")
    assert compute.size, "never turns compute-bound"
    first = int(compute[0])
    assert np.all(bound[first:] == "compute"), "the flip is not monotone in batch"
    return int(n[first])


def test_bound_flips_memory_to_compute_near_the_ridge_point():
    ridge = ridge_point(H100S, "bf16")  # FLOP/byte; a bf16 GEMM over T tokens does T FLOP/byte of weights
    flip0 = _flip_batch(0)
    flip64 = _flip_batch(64)
    print(f"\nridge point {ridge:.0f} FLOP/byte; flip batch at context 0: {flip0}, at context 64: {flip64}")
    assert 0.9 * ridge <= flip0 <= 1.1 * ridge
    # KV reads (memory-bound at any batch) push the flip to larger batches
    assert flip0 <= flip64 <= 2 * ridge


def test_long_context_decode_never_turns_compute_bound():
    n = np.array([1.0, 64.0, 1024.0])
    assert np.all(decode_cost(Q8B, H100, TP1, n).bound(n * 8192) == "memory")


# ----------------------------------------------------------------------------- verify vs decode
@pytest.mark.parametrize("batch", [1, 2, 3, 4])
def test_verify_k3_costs_about_one_decode_at_small_batch(batch):
    ctx = batch * 256
    ratio = float(verify_cost(Q8B, H100, TP1, batch, 3).time_s(ctx) / decode_cost(Q8B, H100, TP1, batch).time_s(ctx))
    assert 1.0 <= ratio <= 1.15


def test_verify_k3_approaches_k_plus_1_decodes_at_large_batch():
    n = np.array([1.0, 16.0, 128.0, 512.0, 1024.0])
    ctx = n * 64
    ratio = verify_cost(Q8B, H100, TP1, n, 3).time_s(ctx) / decode_cost(Q8B, H100, TP1, n).time_s(ctx)
    print(f"\nverify(k=3)/decode at context 64, batch {n.astype(int).tolist()}: {np.round(ratio, 2).tolist()}")
    assert np.all(np.diff(ratio) >= -1e-12)
    assert 3.0 < ratio[-1] <= 4.0 + 1e-9


# ----------------------------------------------------------------------------- tensor parallel
def test_tp2_halves_weight_time_and_adds_all_reduces():
    d1 = decode_cost(Q8B, H100S, TP1, 1)
    d2 = decode_cost(Q8B, H100S, TP2, 1)
    assert float(d2.memory_s) == pytest.approx(float(d1.memory_s) / 2, rel=1e-9)
    assert float(d1.comm_s) == 0.0
    act = Q8B.hidden * TP2.act_bytes  # one token's hidden state
    two_all_reduces = Q8B.layers * 2 * float(comm.all_reduce_s(act, 2, H100S))
    assert float(d2.comm_s) == pytest.approx(two_all_reduces, rel=1e-9)
    assert float(d2.fixed_s) == pytest.approx(float(d1.fixed_s) / 2 + two_all_reduces, rel=1e-6)
    # per-GPU weights halve too (embedding and LM head are TP-sharded)
    assert weight_bytes_per_gpu(Q8B, TP2) == pytest.approx(weight_bytes_per_gpu(Q8B, TP1) / 2)


# ----------------------------------------------------------------------------- MoE
def test_expected_experts_hit():
    assert float(expected_experts_hit(128, 8, 1)) == pytest.approx(8.0)
    assert float(expected_experts_hit(128, 8, 0)) == 0.0
    assert float(expected_experts_hit(128, 8, 10_000)) == pytest.approx(128.0)
    hits = expected_experts_hit(128, 8, np.arange(0, 200))
    assert np.all(np.diff(hits) > 0) and np.all(hits <= 128)


def test_moe_decode_reads_top_k_experts_at_one_token_and_all_at_many():
    lay = ParallelLayout(tp=1)
    one = decode_cost(Q30B, H100S, lay, 1)
    many = decode_cost(Q30B, H100S, lay, 4096)
    bw = H100S.hbm_bw_bytes_per_s * H100S.efficiency.memory
    expert_bytes_all = Q30B.layers * Q30B.moe.experts * Q30B.expert_params * 2
    expert_bytes_topk = Q30B.layers * Q30B.moe.top_k * Q30B.expert_params * 2
    # memory side difference ≈ the extra experts streamed (non-expert weights are read once either way)
    extra = float(many.memory_s - one.memory_s) * bw
    assert extra == pytest.approx(expert_bytes_all - expert_bytes_topk, rel=0.05)


# ----------------------------------------------------------------------------- collectives
def test_nvlink_inside_domain_scaleout_outside():
    assert comm.link(H100, 8) == (H100.nvlink_bw_bytes_per_s * H100.efficiency.comm, H100.nvlink_latency_s)
    assert comm.link(H100, 16) == (H100.scaleout_bw_bytes_per_s * H100.efficiency.comm, H100.scaleout_latency_s)
    assert comm.link(GB200, 72)[0] == GB200.nvlink_bw_bytes_per_s * GB200.efficiency.comm
    big = 256e6
    assert float(comm.all_reduce_s(big, 16, H100)) > 5 * float(comm.all_reduce_s(big, 8, H100))
    assert float(comm.all_reduce_s(big, 1, H100)) == 0.0


def test_cross_domain_collectives_pay_scaleout_latency_only_between_domains():
    """NCCL's hierarchical tree across NVLink domains: ⌈log2 d⌉ steps at the NVLink latency, ⌈log2 ⌈n/d⌉⌉
    at the scale-out latency; the bandwidth term stays the NIC's. A TP-16 all-reduce of a decode's
    activations over two HGX nodes then costs 3 NVLink + 1 scale-out hops, not 4 scale-out hops."""
    small = 16 * 4096 * 2.0
    bw, _ = comm.link(H100, 16)
    lat = 3 * H100.nvlink_latency_s + 1 * H100.scaleout_latency_s
    assert float(comm.all_reduce_s(small, 16, H100)) == pytest.approx(lat + 2 * 15 / 16 * small / bw)
    assert float(comm.all_gather_s(small, 64, H100)) == pytest.approx(3 * H100.nvlink_latency_s + 3 * H100.scaleout_latency_s
                                                                      + 63 / 64 * small / bw)
    assert comm.hop_latency_s(H100, 8) == pytest.approx(3 * H100.nvlink_latency_s)
    assert comm.hop_latency_s(H100, 9) == pytest.approx(3 * H100.nvlink_latency_s + H100.scaleout_latency_s)


def test_all_reduce_ring_formula():
    n, nbytes = 8, 1e9
    bw, lat = comm.link(H100, n)
    assert float(comm.all_reduce_s(nbytes, n, H100)) == pytest.approx(3 * lat + 2 * (n - 1) / n * nbytes / bw)


def test_all_reduce_takes_the_faster_of_one_shot_and_ring_within_eight_gpus():
    """#11: a small all-reduce inside NVLink runs the one-shot kernel (flat latency, (n-1)x the
    traffic); groups above 8 GPUs and profiles without a one-shot latency use the ring law."""
    from dataclasses import replace

    hw = replace(H100, nvlink_oneshot_latency_s=3e-6, nvlink_latency_s=6e-6)
    bw, lat = comm.link(hw, 8)
    small = 64e3
    assert float(comm.all_reduce_s(small, 8, hw)) == pytest.approx(3e-6 + 7 * small / bw)
    assert float(comm.all_reduce_s(1e9, 8, hw)) == pytest.approx(3 * lat + 2 * 7 / 8 * 1e9 / bw)
    sizes = np.geomspace(1e3, 1e9, 25)
    both = comm.all_reduce_s(sizes, 4, hw)  # vectorised: elementwise min, never above either law
    assert np.all(both <= 2 * lat + 1.5 * sizes / bw + 1e-15) and np.all(both <= 3e-6 + 3 * sizes / bw + 1e-15)
    assert float(comm.all_reduce_s(small, 8, replace(hw, nvlink_oneshot_latency_s=None))) == pytest.approx(
        3 * lat + 2 * 7 / 8 * small / bw)
    gb = replace(GB200, nvlink_oneshot_latency_s=3e-6)
    bw16, lat16 = comm.link(gb, 16)
    assert float(comm.all_reduce_s(small, 16, gb)) == pytest.approx(4 * lat16 + 2 * 15 / 16 * small / bw16)
    # an all-to-all is one step over the switch: the one-shot latency where the profile has one
    assert float(comm.all_to_all_s(small, 8, hw)) == pytest.approx(3e-6 + 7 / 8 * small / bw)
    # across two 8-GPU hosts, 8 of a GPU's 16 shares cross its NIC while 7 go over NVLink at once
    nic = comm.link(hw, 16)[0]
    assert float(comm.all_to_all_s(small, 16, hw)) == pytest.approx(H100.scaleout_latency_s + 8 / 16 * small / nic)
    big = np.array([1e6, 1e9])
    assert np.allclose(comm.all_to_all_s(big, 64, hw), H100.scaleout_latency_s + 56 / 64 * big / nic)
    # NVLink-bound only if the NIC were faster than NVLink's share: the max of the two
    fast_nic = replace(hw, scaleout_bw_bytes_per_s=1e15)
    assert float(comm.all_to_all_s(1e9, 16, fast_nic)) == pytest.approx(
        fast_nic.scaleout_latency_s + 7 / 16 * 1e9 / comm.link(fast_nic, 8)[0])


# ----------------------------------------------------------------------------- memory
def test_235b_bf16_tp4_on_h100_does_not_fit():
    with pytest.raises(LayoutError, match="needs 470 GB"):
        memory_plan(Q235B, H100, ParallelLayout(tp=4))


def test_8b_on_gb200_has_kv_capacity():
    plan = memory_plan(Q8B, GB200, TP1)
    assert plan.kv_capacity_tokens > 0
    assert plan.kv_bytes_per_token == Q8B.kv_bytes_per_token(2.0)
    assert plan.weight_bytes + plan.activation_bytes + plan.kv_bytes == pytest.approx(plan.usable_bytes)


def test_kv_does_not_fit_is_a_layout_error():
    with pytest.raises(LayoutError, match="left for KV"):
        memory_plan(Q8B, H100, TP1, min_kv_tokens=10**9)


# ----------------------------------------------------------------------------- consistency
@pytest.mark.parametrize("q", [1, 4])
def test_forward_time_uniform_q_equals_pass_cost(q):
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 8000, size=37).astype(float)
    qs = np.full(ctx.shape, float(q))
    t = forward_time_s(Q8B, H100, TP1, qs, ctx, logits_per_seq=q)
    p = float(pass_cost(Q8B, H100, TP1, ctx.size, q, q).time_s(ctx.sum()))
    assert t == pytest.approx(p, rel=1e-12)


MODELS = st.sampled_from([(Q8B, TP1), (Q8B, TP2), (Q30B, TP1), (Q30B, ParallelLayout(tp=2, ep=4))])


@settings(max_examples=60, deadline=None)
@given(MODELS, st.sampled_from([0, 3]), st.integers(1, 2048), st.integers(1, 2048),
       st.integers(0, 32768), st.integers(0, 32768))
def test_step_time_monotone_in_batch_and_context(model_layout, k, n1, n2, c1, c2):
    model, lay = model_layout
    drafter = drafter_arch("eagle3", model) if k else None
    (n1, n2), (c1, c2) = sorted((n1, n2)), sorted((c1, c2))
    cost = step_cost(model, drafter, H100, lay, np.array([n1, n2], dtype=float), k)
    fixed, per_ctx = cost.fixed_s, cost.per_ctx_token_s
    t = lambda i, c: fixed[i] + per_ctx[i] * [n1, n2][i] * c
    assert t(0, c1) <= t(1, c1) * (1 + 1e-12)  # batch
    assert t(0, c1) <= t(0, c2) * (1 + 1e-12)  # context
    assert t(1, c1) <= t(1, c2) * (1 + 1e-12)


def test_profile_one_shot_latency_loads_and_bad_values_name_the_field(tmp_path):
    """`collective_latency_us.nvlink_oneshot` is optional (absent: ring law only); when present it
    must be a positive number, and a bad one is a SpecError naming the field and the file."""
    import yaml

    from specsim.catalog.hardware import load_hardware
    from specsim.errors import SpecError

    doc = yaml.safe_load(Path(H100.path).read_text())
    assert load_hardware(H100.path).nvlink_oneshot_latency_s == pytest.approx(
        doc["collective_latency_us"]["nvlink_oneshot"]["value"] * 1e-6)
    del doc["collective_latency_us"]["nvlink_oneshot"]
    p = tmp_path / "no_oneshot.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert load_hardware(str(p)).nvlink_oneshot_latency_s is None
    for bad in (-1.0, 0.0, "fast"):
        doc["collective_latency_us"]["nvlink_oneshot"] = {"value": bad, "source": "test"}
        p.write_text(yaml.safe_dump(doc))
        with pytest.raises(SpecError) as err:
            load_hardware(str(p))
        assert "nvlink_oneshot" in str(err.value) and str(p) in str(err.value)


def test_a_profile_edited_on_disk_is_read_again(tmp_path):
    """load_hardware memoises parsed profiles by path and content: the same file gives the same
    frozen spec, and an edit (even one that keeps the size) gives the new values."""
    import yaml

    from specsim.catalog.hardware import load_hardware

    doc = yaml.safe_load(Path(H100.path).read_text())
    p = tmp_path / "edited.yaml"
    doc["hbm_tbps"]["value"] = 3.25
    p.write_text(yaml.safe_dump(doc))
    first = load_hardware(str(p))
    assert load_hardware(str(p)) is first
    doc["hbm_tbps"]["value"] = 3.75   # same length on disk
    p.write_text(yaml.safe_dump(doc))
    assert load_hardware(str(p)).hbm_bw_bytes_per_s == pytest.approx(3.75e12)
    assert first.hbm_bw_bytes_per_s == pytest.approx(3.25e12)


def test_insitu_stream_factor_scales_every_fitted_stream_capped_at_peak(tmp_path):
    """kernel_fit.insitu_stream_factor multiplies the fitted weight, expert and KV streaming
    efficiencies (capped at 1): a memory-bound decode pass gets faster by about that factor, a
    factor of 1 changes nothing, absent means 1, and a bad value names the field and the file."""
    import yaml

    from specsim.catalog.hardware import load_hardware
    from specsim.catalog.models import load_model
    from specsim.cost.forward import decode_cost
    from specsim.cost.layout import ParallelLayout
    from specsim.errors import SpecError

    m, lay = load_model("Llama-3.1-70B"), ParallelLayout(tp=1, weight_dtype="fp8")
    base = H100.with_insitu_stream_factor(1.0)

    def t(hw, n=4.0, ctx=4.0 * 2000):
        return float(decode_cost(m, hw, lay, n).time_s(ctx))

    assert t(base) == pytest.approx(t(replace(H100, kernel_fit=replace(H100.kernel_fit, insitu_stream_factor=1.0))))
    kf = base.kernel_fit
    f = 1.1
    assert all(kf.stream_eff(e) * f <= 1.0 for e in (kf.gemm_for("fp8").weight_bw_eff, kf.attn_kv_bw_eff))
    faster = t(base.with_insitu_stream_factor(f))
    assert t(base) / f < faster < t(base)   # the streaming share speeds up by f; floors and overheads do not
    capped = base.with_insitu_stream_factor(kf.max_useful_stream_factor())
    assert t(capped.with_insitu_stream_factor(kf.max_useful_stream_factor() * 3)) == pytest.approx(t(capped))
    doc = yaml.safe_load(Path(H100.path).read_text())
    doc["kernel_fit"].pop("insitu_stream_factor", None)
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(doc))
    assert load_hardware(str(p)).kernel_fit.insitu_stream_factor == 1.0
    for bad in (0.0, -1.0, "fast", True, 11.0):
        doc["kernel_fit"]["insitu_stream_factor"] = bad
        p.write_text(yaml.safe_dump(doc))
        with pytest.raises(SpecError) as err:
            load_hardware(str(p))
        assert "insitu_stream_factor" in str(err.value) and str(p) in str(err.value)
