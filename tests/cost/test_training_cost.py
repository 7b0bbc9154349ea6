"""Trainer-side costs (specsim/cost/training.py): train, logprob, memory fit, weight sync, drafter update."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.cost import training as tc
from specsim.cost.layout import ParallelLayout
from specsim.errors import LayoutError, SpecError
from specsim.scenario import ScenarioError, apply_overrides, load_scenario
from specsim.world.trainer import training_layout

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "scenarios" / "8b_rl_think_sync.yaml"


@pytest.fixture(scope="module")
def sc():
    # the profile's efficiencies, not the 8B scenario's fitted trainer ones (specsim calibrate workload)
    return load_scenario(SCEN, ["training.mfu=null", "training.logprob_efficiency=null"])


@pytest.fixture(scope="module")
def model():
    return load_model("Qwen3-8B")


@pytest.fixture(scope="module")
def hw():
    # scalar roofline: training.py prices logprob passes with efficiency.compute, not the measured-kernel terms
    return replace(load_hardware("gb200"), kernel_fit=None)


@pytest.fixture(scope="module")
def seqs():
    rng = np.random.default_rng(0)
    resp = np.minimum(rng.lognormal(np.log(4500), 0.6, size=(64, 16)), 16384).round()
    prompt = rng.integers(100, 700, size=64).astype(float)
    return tc.sequence_tokens(prompt, resp)


def _tl(sc, model, hw, **over):
    s = apply_overrides(sc, over) if over else sc
    return training_layout(s, model, hw)


def test_layout_definition(sc, model, hw):
    tl = _tl(sc, model, hw)
    assert (tl.gpus, tl.tp, tl.pp, tl.dp, tl.replica_gpus) == (32, 1, 1, 32, 1)
    assert tl.mfu == hw.efficiency.train_mfu
    assert tl.micro_batch_tokens == sc.workload.max_prompt_tokens + sc.workload.max_response_tokens
    tl = _tl(sc, model, hw, **{"training.tp": 4, "training.pp": 2, "training.mfu": 0.5})
    assert (tl.replica_gpus, tl.dp, tl.mfu) == (8, 4, 0.5)
    # async: the training pool's own GPUs
    a = apply_overrides(sc, {"pipeline.mode": "async", "training.gpus": 16})
    assert training_layout(a, model, hw).gpus == 16
    with pytest.raises(SpecError, match="training.gpus"):
        training_layout(apply_overrides(a, {"training.tp": 32, "training.gpus": 48}), model, hw)
    with pytest.raises(SpecError, match="training.ep"):
        _tl(sc, model, hw, **{"training.ep": 2})
    with pytest.raises(SpecError, match="training.tp"):
        _tl(sc, model, hw, **{"training.tp": 3})


def test_sequence_tokens_adds_group_prompt():
    out = tc.sequence_tokens([10, 20], [[1, 2, 3], [4, 5, 6]])
    assert out.tolist() == [11, 12, 13, 24, 25, 26]


def _flat(model, hw, **kw):
    """A bare TrainingLayout on the given hardware: no host overheads, one optimizer step."""
    par = ParallelLayout(tp=kw.pop("tp", 1), pp=kw.pop("pp", 1), ep=kw.pop("ep", 1), weight_dtype="bf16")
    gpus = kw.pop("gpus", par.gpus)
    return tc.TrainingLayout(gpus=gpus, parallel=par, dp=gpus // par.gpus, micro_batch_tokens=kw.pop("mb", 20480),
                             mfu=kw.pop("mfu", 0.4), **kw)


def _ffd(lengths, budget):
    """Exact first-fit-decreasing bin count (the oracle of tc.packed_bins)."""
    free: list[float] = []
    for x in sorted(np.minimum(lengths, budget), reverse=True):
        for i, f in enumerate(free):
            if x <= f:
                free[i] -= x
                break
        else:
            free.append(budget - x)
    return len(free)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 9000), min_size=1, max_size=200), st.integers(1024, 16384))
def test_packed_bins_is_ffds_lower_bound(lengths, budget):
    """The closed form never exceeds exact FFD, never falls below the volume bound or the count of
    sequences longer than half the budget, and never exceeds one bin per sequence."""
    L = np.array(lengths, float)
    m = tc.packed_bins(L, budget)
    assert m <= _ffd(L, budget)
    assert m >= np.ceil(np.minimum(L, budget).sum() / budget) and m >= int((np.minimum(L, budget) > budget / 2).sum())
    assert m <= len(L)


def test_packed_bins_matches_ffd_on_rl_batches():
    """On long-tailed RL batches (lognormal lengths, the NeMo-RL rows' shapes) the closed form is
    FFD's count to 0.3 %, and to 6 % where most sequences lie between a third and a half of the
    budget (the 30B rows' logprob packing)."""
    rng = np.random.default_rng(1)
    for median, cap, budget, rel in ((700, 3584, 4096, 0.003), (6700, 7680, 8192, 0.003), (5000, 32768, 34816, 0.003),
                                     (2800, 3584, 8192, 0.06)):
        L = np.minimum(rng.lognormal(np.log(median), 0.8, 2048), cap).round()
        L = np.ceil(L / 64) * 64
        exact = _ffd(L, budget)
        assert exact * (1 - rel) <= tc.packed_bins(L, budget) <= exact


def test_train_compute_is_model_flops_at_mfu(model, hw, seqs):
    """One optimizer step, no pipeline, no host time: the math is 6·N·ΣL + attention at mfu over
    all GPUs (sequences padded to 64 tokens, as NeMo-RL packs them)."""
    tl = _flat(model, hw, gpus=32)
    cost = tc.train_cost(model, hw, tl, seqs)
    padded = tc.padded_tokens(tl, seqs)
    rate = tl.mfu * hw.flops_per_s("bf16") * tl.gpus
    assert cost.compute_s == pytest.approx(tc.train_flops(model, padded) / rate, rel=1e-12)
    assert cost.bubble_s == 0 and cost.tp_comm_s == 0 and cost.ep_comm_s == 0 and cost.overhead_s == 0
    assert cost.optimizer_steps == 1
    assert 0 < cost.dp_comm_s + cost.optimizer_s < 0.02 * cost.compute_s   # 8B, dp over NVLink: small
    assert tc.train_s(model, hw, tl, seqs) == pytest.approx(cost.total_s)
    half = replace(tl, mfu=tl.mfu / 2)
    assert tc.train_cost(model, hw, half, seqs).compute_s == pytest.approx(2 * cost.compute_s, rel=1e-12)
    fp8 = replace(tl, math_dtype="fp8")   # fp8 GEMMs at the fp8 peak (twice bf16's on gb200)
    assert tc.train_cost(model, hw, fp8, seqs).compute_s == pytest.approx(cost.compute_s / 2, rel=1e-12)


def test_optimizer_steps_and_pipeline_bubble(model, hw, seqs):
    """S = ⌈samples / global batch⌉ optimizer steps: the same math, S pipeline fills and drains and
    S data-parallel exchanges; the bubble is (pp − 1) micro-batch slots per optimizer step."""
    one = _flat(model, hw, gpus=32, pp=4)
    four = replace(one, global_batch_samples=len(seqs) // 4)
    a, b = tc.train_cost(model, hw, one, seqs), tc.train_cost(model, hw, four, seqs)
    assert (a.optimizer_steps, b.optimizer_steps) == (1, 4)
    assert tc.optimizer_steps(four, len(seqs) + 1) == 5
    assert b.compute_s == pytest.approx(a.compute_s, rel=1e-12)
    per_mb_a = a.compute_s / a.micro_batches
    assert a.bubble_s == pytest.approx(3 * per_mb_a, rel=1e-12)
    assert b.bubble_s == pytest.approx(4 * 3 * b.compute_s / b.micro_batches, rel=1e-12)
    assert b.dp_comm_s == pytest.approx(4 * a.dp_comm_s, rel=1e-12) and b.optimizer_s == pytest.approx(4 * a.optimizer_s)
    assert b.total_s > a.total_s


def test_host_overhead_per_layer_pass():
    """overhead = micro-batches · (layers/pp) · (3 + checkpointing) · (layer + MoE layer host time)."""
    m = load_model("Qwen3-30B-A3B")
    hw = load_hardware("gb200")
    L = np.full(2048, 3200.0)
    tl = _flat(m, hw, gpus=16, ep=16, mb=4096, global_batch_samples=512, moe_layer_overhead_s=0.005,
               activation_checkpointing=False)
    c = tc.train_cost(m, hw, tl, L)
    assert c.overhead_s == pytest.approx(c.micro_batches * m.layers * 3 * 0.005, rel=1e-12)
    ck = tc.train_cost(m, hw, replace(tl, activation_checkpointing=True), L)
    assert ck.overhead_s == pytest.approx(c.overhead_s * 4 / 3, rel=1e-12)
    assert ck.ep_comm_s == pytest.approx(c.ep_comm_s * 3 / 2, rel=1e-12)   # the recomputed forward's all-to-alls
    dense = load_model("Qwen3-8B")   # a dense model pays no MoE-layer time
    assert tc.train_cost(dense, hw, _flat(dense, hw, gpus=16, moe_layer_overhead_s=0.005), L).overhead_s == 0


def test_context_parallel_splits_sequences_and_pays_its_ring():
    """cp = 2 on twice the GPUs: Megatron's data parallel is the same, every sequence's attention
    and tokens split over 2 GPUs (the math per GPU halves), the K/V ring costs what attention
    does not hide; a layout whose tp·cp·pp does not divide the GPUs is refused."""
    m = load_model("Qwen3-235B-A22B")
    hw = load_hardware("gb200")
    L = np.full(512, 8000.0)
    base = _flat(m, hw, gpus=64, tp=2, ep=16, pp=4, mb=8192)
    cp2 = _flat(m, hw, gpus=128, tp=2, ep=16, pp=4, mb=8192, cp=2)
    assert (base.data_parallel, cp2.data_parallel) == (8, 8)
    a, b = tc.train_cost(m, hw, base, L), tc.train_cost(m, hw, cp2, L)
    assert b.compute_s == pytest.approx(a.compute_s / 2, rel=1e-9) and b.cp_comm_s >= 0
    assert cp2.sequence_pad_tokens == 64 and _flat(m, hw, gpus=128, tp=8, ep=16, cp=8, mb=8192).sequence_pad_tokens == 128
    with pytest.raises(SpecError, match="cp"):
        _flat(m, hw, gpus=192, tp=2, ep=16, pp=4, mb=8192, cp=5)


def test_logprob_is_forwards_at_its_efficiency_plus_the_reference_swap(model, hw, seqs):
    """A logprob pass is a third of training's math at the same efficiency; the reference adds a
    second pass and the swap of its weights over the host link (3 × the GPU's weight bytes)."""
    tl = _flat(model, hw, gpus=32, reference_logprob=False, host_bw_bytes_per_s=225e9)
    one = tc.logprob_s(model, hw, tl, seqs)
    assert one == pytest.approx(tc.train_cost(model, hw, tl, seqs).compute_s / 3, rel=0.02)
    both = tc.logprob_s(model, hw, replace(tl, reference_logprob=True), seqs)
    swap = 3 * tc.params_bytes_per_gpu(model, tl) / 225e9
    assert both == pytest.approx(2 * one + swap, rel=1e-12)
    fast = replace(tl, logprob_efficiency=2 * tl.mfu)
    assert tc.logprob_s(model, hw, fast, seqs) == pytest.approx(one / 2, rel=1e-9)
    assert tc.logprob_s(model, hw, replace(tl, free=True), seqs) == 0.0


def test_memory_fit_error_for_impossible_trainer():
    m = load_model("Qwen3-235B-A22B")
    hw = load_hardware("h100_sxm")
    par = ParallelLayout(tp=8, ep=8, weight_dtype="bf16")
    tl = tc.TrainingLayout(gpus=8, parallel=par, dp=1, micro_batch_tokens=18432, mfu=0.3)
    msg = r"Qwen3-235B-A22B training needs \d+ GB per GPU .*training.gpus=8 gives 85 GB per GPU \(what CUDA gives a process on h100_sxm\)"
    with pytest.raises(LayoutError, match=msg):
        tc.check_training_fits(m, hw, tl)
    big = replace(tl, gpus=512, dp=64)
    mem = tc.check_training_fits(m, hw, big)
    assert mem.fits
    # ZeRO-3: state per GPU = 16 B/param · params / GPUs (within the replicated norms/router)
    assert mem.state_bytes == pytest.approx(16 * m.total_params / 512, rel=0.02)


def test_memory_places_embedding_and_head_on_their_stages_and_shards_experts_over_their_dp():
    """The fullest pipeline stage holds the embedding or the LM head, not both; the distributed
    optimizer shards the dense state over Megatron's dp and the experts' over their expert-data-
    parallel ranks (tp·cp·dp / ep): NeMo-RL's 235B sync recipe (TP2 CP2 EP16 PP4 on 64 GB200)
    fits in 186 GB."""
    m = load_model("Qwen3-235B-A22B")
    hw = load_hardware("gb200")
    tl = _flat(m, hw, gpus=64, tp=2, ep=16, pp=4, mb=8192, cp=2, sharding="distributed_optimizer")
    assert (tl.data_parallel, tl.expert_data_parallel) == (4, 1)
    dense, expert = tc._params_per_gpu(m, tl)
    par = tl.parallel
    both = tc.weight_bytes_per_gpu(m, par, "bf16") / 2
    assert dense + expert == pytest.approx(both - min(m.embedding_params, m.lm_head_params) / 2, rel=1e-9)
    assert tc.model_state_bytes(m, tl) == pytest.approx(4 * (dense + expert) + 12 * (dense / 4 + expert / 1), rel=1e-12)
    assert tc.check_training_fits(m, hw, tl).fits


def test_distributed_optimizer_exchanges_once_per_step():
    """Megatron's distributed optimizer (ZeRO-1) against ZeRO-3: the same math, bubble, TP and EP
    terms; its data-parallel exchange is the per-step reduce-scatter + all-gather, exposed beyond the
    backward / forward micro-batch it overlaps (the fsdp cost gathers for every micro-batch)."""
    m = load_model("Qwen3-235B-A22B")
    hw = load_hardware("gb200")
    fsdp = _flat(m, hw, gpus=512, tp=4, pp=4, ep=8, mb=34816, mfu=0.291)
    dist = replace(fsdp, sharding="distributed_optimizer")
    L = np.full(4096, 6400.0)
    a, b = tc.train_cost(m, hw, fsdp, L), tc.train_cost(m, hw, dist, L)
    for f in ("compute_s", "bubble_s", "tp_comm_s", "ep_comm_s", "micro_batches", "flops"):
        assert getattr(a, f) == getattr(b, f), f
    shard = tc.weight_bytes_per_gpu(m, fsdp.parallel, "bf16")
    dp = fsdp.data_parallel
    ag = tc._collective_s(shard, dp, 512, hw, (dp - 1) / dp)
    mb = b.compute_s / b.micro_batches   # overlapped with the last backward and the first forward
    assert b.dp_comm_s == pytest.approx(max(0, ag - 2 * mb / 3) + max(0, ag - mb / 3), rel=1e-12)
    assert a.dp_comm_s > 5 * b.dp_comm_s
    with pytest.raises(SpecError, match="sharding"):
        replace(fsdp, sharding="zero2")
    with pytest.raises(SpecError, match="optimizer_bytes_per_param"):
        replace(dist, optimizer_bytes_per_param=3.0)


def test_nemo_rl_scenarios_shard_as_its_megatron_backend():
    """The NeMo-RL study trained with Megatron-LM: its scenarios use the distributed optimizer;
    EfficientRollout's (veRL's FSDP actor) and the ReSpec scenario keep the default, FSDP."""
    for name in ("8b_rl_think_sync", "8b_rl_zero_sync", "8b_rl_think_async", "235b_async", "235b_sync",
                 "235b_scale", "235b_acceptance", "235b_run"):
        assert load_scenario(ROOT / "scenarios" / f"{name}.yaml").training.sharding == "distributed_optimizer", name
    for name in ("efficient_rollout_a100", "7b_h100_sync"):
        assert load_scenario(ROOT / "scenarios" / f"{name}.yaml").training.sharding == "fsdp", name


def test_check_reports_the_trainer_and_warns_when_zero3_gathers_dominate():
    """`specsim check`'s trainer row: step 0's draw priced by train_cost (its parts add up to the
    step), and a warning when ZeRO-3's per-micro-batch gathers outweigh the math (the 235B main job
    under fsdp), none under the distributed optimizer."""
    from specsim.explain.check import check_report, trainer_report
    from specsim.world.resolve import resolve

    scen = ROOT / "scenarios" / "235b_async.yaml"
    world = resolve(load_scenario(scen))
    tr = trainer_report(world)
    assert tr["sharding"] == "distributed_optimizer" and tr["mfu"] == pytest.approx(0.291)
    assert tr["train_s"] == pytest.approx(tr["compute_s"] + tr["dp_comm_s"] + tr["bubble_tp_ep_s"] + tr["optimizer_s"]
                                          + tr["overhead_s"])
    assert tr["logprob_s"] > 0 and tr["optimizer_steps"] == 128   # 65,536 samples, 512 per optimizer step
    assert not any("training.sharding" in w for w in check_report(world, str(scen))["warnings"])
    fsdp = resolve(load_scenario(scen, ["training.sharding=fsdp"]))
    info = check_report(fsdp, str(scen))
    assert info["trainer"]["dp_comm_s"] > info["trainer"]["compute_s"] and info["trainer"]["dp_comm_s"] > 3 * tr["dp_comm_s"]
    assert any(w.startswith("training.sharding = fsdp") for w in info["warnings"])


def test_weight_sync_scales_with_weight_bytes(model, hw):
    bf16 = ParallelLayout(tp=1, weight_dtype="bf16")
    fp8 = ParallelLayout(tp=1, weight_dtype="fp8")
    lat = hw.nvlink_latency_s * np.ceil(np.log2(33))
    t16 = tc.weight_sync_s(model, hw, bf16, 32, 32)
    t8 = tc.weight_sync_s(model, hw, fp8, 32, 32)
    assert (t16 - lat) == pytest.approx(2 * (t8 - lat), rel=1e-9)
    bw = hw.nvlink_bw_bytes_per_s * hw.efficiency.comm
    assert t16 == pytest.approx(lat + model.weight_bytes(2.0) / bw, rel=1e-6)  # (final norm not sharded)
    big = load_model("Qwen2.5-14B")
    t14 = tc.weight_sync_s(big, hw, bf16, 32, 32)
    assert (t14 - lat) / (t16 - lat) == pytest.approx(big.weight_bytes(2) / model.weight_bytes(2), rel=1e-6)
    # reshard: (n−1)/n of the shard gathered over NVLink
    rs = tc.weight_sync_s(model, hw, bf16, 32, 32, method="reshard")
    assert rs == pytest.approx(hw.nvlink_latency_s * 5 + 31 / 32 * model.weight_bytes(2.0) / bw, rel=1e-6)
    # separate pools beyond one NVLink domain: over the scale-out NIC, much slower
    far = tc.weight_sync_s(model, hw, bf16, 64, 64, colocated=False)
    assert far > 10 * t16
    with pytest.raises(SpecError):
        tc.weight_sync_s(model, hw, bf16, 32, 32, method="carrier-pigeon")


def test_drafter_update_cost(sc, model, hw, seqs):
    tl = _tl(sc, model, hw)
    eagle = drafter_arch("eagle3", model)
    full = tc.drafter_update_s(eagle, hw, tl, seqs)
    rate = tl.mfu * hw.flops_per_s("bf16") * tl.gpus
    assert full == pytest.approx(tc.train_flops(eagle.model, seqs) / rate, rel=1e-12)
    assert tc.drafter_update_s(eagle, hw, tl, seqs, token_fraction=0.25) == pytest.approx(full / 4, rel=1e-12)
    assert full < 0.1 * tc.train_s(model, hw, tl, seqs)      # a one-layer head is cheap to train
    uncached = tc.drafter_update_s(eagle, hw, tl, seqs, policy=model, hidden_states_cached=False)
    assert uncached - full == pytest.approx(tc.train_flops(model, seqs) / 3 / rate, rel=1e-9)
    mtp = tc.drafter_update_s(drafter_arch("mtp", model), hw, tl, seqs)
    assert mtp > full                                        # the full-vocabulary LM head
    assert tc.drafter_update_s(drafter_arch("ngram", model), hw, tl, seqs) == 0.0


def test_requantize_is_a_memory_bound_pass(model, hw):
    layout = ParallelLayout(tp=1, weight_dtype="bf16")
    sq = drafter_arch("self_quant", model)
    t = tc.requantize_s(model, hw, layout, sq)
    # read the bf16 transformer layers, write them at 4 bits (2.5 bytes per weight); the embedding and
    # LM head are the target's own modules (shared, never re-quantized)
    emb = model.embedding_params + (0 if model.tied_embeddings else model.lm_head_params)
    layers_bytes = model.weight_bytes(2.5) - 2.5 * emb
    assert t == pytest.approx(layers_bytes / (hw.hbm_bw_bytes_per_s * hw.efficiency.memory), rel=1e-6)
    assert tc.requantize_s(model, hw, layout, drafter_arch("eagle3", model)) == 0.0


def test_training_layout_is_consistent_by_construction():
    """A TrainingLayout's GPUs are dp replicas of max(tp, ep)·pp GPUs; anything else is refused."""
    par = ParallelLayout(tp=2, pp=2, weight_dtype="bf16")
    assert tc.TrainingLayout(gpus=16, parallel=par, dp=4, micro_batch_tokens=8192, mfu=0.4).replica_gpus == 4
    for bad in ({"gpus": 16, "dp": 3}, {"gpus": 0, "dp": 0}):
        with pytest.raises(SpecError, match="gpus"):
            tc.TrainingLayout(parallel=par, micro_batch_tokens=8192, mfu=0.4, **bad)
    with pytest.raises(SpecError, match="mfu"):
        tc.TrainingLayout(gpus=4, parallel=par, dp=1, micro_batch_tokens=8192, mfu=1.5)
    with pytest.raises(SpecError, match="micro_batch_tokens"):
        tc.TrainingLayout(gpus=4, parallel=par, dp=1, micro_batch_tokens=0, mfu=0.4)


def test_cost_training_reads_no_scenario():
    """cost/training.py takes plain specs: it imports only the cost layer and its specs, never a scenario."""
    import ast

    tree = ast.parse((ROOT / "specsim" / "cost" / "training.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    allowed = {"__future__", "dataclasses", "numpy", "specsim.cost", "specsim.errors", "specsim.catalog.hardware",
               "specsim.catalog.models"}
    assert {m for m in imported if not any(m == a or m.startswith(a + ".") for a in allowed)} == set()
    assert not any(isinstance(n, ast.arg) and n.arg in ("sc", "scenario") for n in ast.walk(tree))


def test_nemo_rl_refit_ipc_colocated_and_nccl_broadcast_separate():
    """NeMo-RL's refit: colocated, every trainer GPU gathers the whole model W within its model copy
    (IPC hands the engine its shard) and the trainer state goes to the host and back; separate
    pools, W gathered and then broadcast to every rollout GPU (each receives all of W)."""
    from specsim.cost import comm

    m = load_model("Qwen3-235B-A22B")
    hw = load_hardware("h100_sxm")
    roll = ParallelLayout(tp=8, weight_dtype="bf16")
    tl = _flat(m, hw, gpus=128, tp=4, ep=16, pp=8, mb=8192, weight_sync="ipc", host_bw_bytes_per_s=64e9,
               sharding="distributed_optimizer")
    w = tc.rollout_weight_bytes(m, roll)
    ipc = tc.weight_sync_s(m, hw, roll, 128, 128, method="ipc", trainer=tl)
    assert ipc == pytest.approx(float(comm.all_gather_s(w, 128, hw)), rel=1e-12)
    nccl = tc.weight_sync_s(m, hw, roll, 128, 128, method="nccl_broadcast", colocated=False, trainer=tl)
    assert nccl == pytest.approx(tc.packed_broadcast_s(w, hw, 128, 256).total_s, rel=1e-12)
    assert nccl > tc.weight_sync_s(m, hw, roll, 128, 128, method="broadcast", colocated=False)
    swap = tc.offload_onload_s(m, tl)
    assert swap == pytest.approx(2 * tc.model_state_bytes(m, tl) / 64e9, rel=1e-12)
    assert tc.refit_s(m, hw, roll, 128, tl, colocated=True) == pytest.approx(ipc + swap, rel=1e-12)
    assert tc.refit_s(m, hw, roll, 128, replace(tl, free=True), colocated=True) == 0.0
    assert tc.offload_onload_s(m, replace(tl, host_bw_bytes_per_s=None)) == 0.0


@pytest.mark.parametrize("override, field, allowed", [
    ({"training.cp": 2, "workload.max_response_tokens": 16385}, "training.cp", "2·cp chunks"),
    ({"training.cp": 3}, "training.cp", "dividing"),
    ({"training.micro_batch_tokens": 4096}, "training.micro_batch_tokens", ">= the longest sequence"),
    ({"training.logprob_micro_batch_tokens": 100}, "training.logprob_micro_batch_tokens", ">= the longest"),
])
def test_trainer_layout_errors_name_the_field(sc, model, hw, override, field, allowed):
    with pytest.raises(SpecError) as exc:
        _tl(sc, model, hw, **override)
    assert exc.value.field == field and allowed in exc.value.allowed


def test_fp8_trainer_needs_fp8_tensor_cores(sc, model):
    a100 = load_hardware("a100_sxm")
    with pytest.raises(SpecError) as exc:
        training_layout(apply_overrides(sc, {"training.dtype": "fp8"}), model, a100)
    assert exc.value.field == "training.dtype" and "no fp8" in exc.value.allowed
    assert training_layout(apply_overrides(sc, {"training.dtype": "fp8"}), model, load_hardware("h100_sxm")).math_dtype == "fp8"


def test_nemo_rl_defaults(sc, model, hw):
    """The scenario defaults follow NeMo-RL's: 512 samples per optimizer step, micro-batches of one
    max-length sequence, the logprob budget the same, no activation checkpointing, bf16, and its
    refit (ipc when colocated, nccl_broadcast with separate pools)."""
    bare = apply_overrides(sc, {"training.global_batch_samples": 512, "training.micro_batch_tokens": None,
                                "training.activation_checkpointing": False, "training.weight_sync": "nemo_rl"})
    tl = training_layout(bare, model, hw)
    assert tl.global_batch_samples == 512 and tl.micro_batch_tokens == tl.logprob_tokens
    assert tl.micro_batch_tokens == sc.workload.max_prompt_tokens + sc.workload.max_response_tokens
    assert (tl.activation_checkpointing, tl.math_dtype, tl.weight_sync) == (False, "bf16", "ipc")
    asy = apply_overrides(bare, {"pipeline.mode": "async", "training.gpus": 16})
    assert training_layout(asy, model, hw).weight_sync == "nccl_broadcast"
    assert tl.host_bw_bytes_per_s == hw.host_bw_bytes_per_s and tl.moe_layer_overhead_s == hw.train_moe_layer_overhead_s


def test_layer_overhead_override(sc, model, hw, seqs):
    """`training.layer_overhead_ms` replaces the profile's dense host time per layer pass (null: the
    profile's), leaves the MoE part alone, and adds micro-batches · layers · (3 + ckpt) · t to training;
    a negative value is refused naming the field."""
    profile = training_layout(apply_overrides(sc, {"training.layer_overhead_ms": None}), model, hw)
    assert profile.layer_overhead_s == hw.train_layer_overhead_s
    zero = training_layout(apply_overrides(sc, {"training.layer_overhead_ms": 0.0}), model, hw)
    own = training_layout(apply_overrides(sc, {"training.layer_overhead_ms": 1.5}), model, hw)
    assert own.layer_overhead_s == pytest.approx(1.5e-3, rel=1e-12)
    assert own.moe_layer_overhead_s == zero.moe_layer_overhead_s == hw.train_moe_layer_overhead_s
    c0, c1 = tc.train_cost(model, hw, zero, seqs), tc.train_cost(model, hw, own, seqs)
    passes = 3 + (1 if own.activation_checkpointing else 0)
    assert c1.total_s - c0.total_s == pytest.approx(c1.micro_batches * model.layers / own.pp * passes * 1.5e-3,
                                                    rel=1e-9)
    with pytest.raises(ScenarioError) as err:
        apply_overrides(sc, {"training.layer_overhead_ms": -1.0})
    assert "training.layer_overhead_ms" in str(err.value) and "-1" in str(err.value)


def test_packed_broadcast_closed_form_and_overlap():
    """NeMo-RL's separate-pool refit (PR #1264 / #1379): across hosts the export brings each host the
    W·(1 − g/c) of the model copy it lacks and the broadcast carries W across each host boundary, both
    over the host's g NICs at once; buckets of 0.02 · HBM; two buffers overlap export and broadcast."""
    from specsim.cost import comm

    hw = load_hardware("h100_sxm")
    w = 470e9
    host_bw = 8 * hw.scaleout_bw_bytes_per_s * hw.efficiency.comm
    r = tc.packed_broadcast_s(w, hw, 128, 256)
    assert r.buckets == int(np.ceil(w / (0.02 * hw.hbm_bytes)))
    assert r.export_s == pytest.approx(comm.hop_latency_s(hw, 128) + w * (1 - 8 / 128) / host_bw, rel=1e-12)
    assert r.broadcast_s == pytest.approx(r.buckets * comm.hop_latency_s(hw, 256) + w / host_bw, rel=1e-12)
    assert r.total_s == pytest.approx(max(r.export_s, r.broadcast_s) + min(r.export_s, r.broadcast_s) / r.buckets)
    # overlapped: never above the serial sum, never below the slower side
    assert max(r.export_s, r.broadcast_s) <= r.total_s < r.export_s + r.broadcast_s
    # a model copy inside one NVLink domain gathers over NVLink
    assert tc.packed_broadcast_s(w, hw, 8, 256).export_s == pytest.approx(float(comm.all_gather_s(w, 8, hw)))
    # one pool of one GPU: nothing to broadcast
    assert tc.packed_broadcast_s(w, hw, 1, 1).total_s == 0.0
    # a second, slower profile on the rollout side bounds the wire
    slow = replace(hw, name="slow", scaleout_bw_bytes_per_s=hw.scaleout_bw_bytes_per_s / 4)
    assert tc.packed_broadcast_s(w, hw, 128, 256, rollout_hw=slow).broadcast_s > 3 * r.broadcast_s


@settings(max_examples=40, deadline=None)
@given(w=st.floats(1e9, 2e12), copy=st.sampled_from([8, 16, 64, 128, 256]), extra=st.integers(1, 512))
def test_packed_broadcast_monotone(w, copy, extra):
    """More bytes never refit faster; the refit is at least the wire time of W over one host's NICs."""
    hw = load_hardware("h100_sxm")
    a = tc.packed_broadcast_s(w, hw, copy, copy + extra)
    b = tc.packed_broadcast_s(2 * w, hw, copy, copy + extra)
    assert b.total_s >= a.total_s
    if copy + extra > hw.nvlink_domain_gpus:
        assert a.total_s >= w / (8 * hw.scaleout_bw_bytes_per_s * hw.efficiency.comm)
