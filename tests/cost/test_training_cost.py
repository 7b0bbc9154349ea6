"""Trainer-side costs (specsim/cost/training.py): train, logprob, memory fit, weight sync, drafter update."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import drafter_arch, load_model
from specsim.cost import training as tc
from specsim.cost.forward import forward_time_s
from specsim.cost.layout import ParallelLayout
from specsim.errors import LayoutError, SpecError
from specsim.scenario import apply_overrides, load_scenario
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


def test_train_is_six_n_t_plus_attention_and_small_comm(sc, model, hw, seqs):
    tl = _tl(sc, model, hw)
    cost = tc.train_cost(model, hw, tl, seqs)
    rate = tl.mfu * hw.flops_per_s("bf16") * tl.gpus
    six_nt = 6 * model.matmul_params_per_token * seqs.sum() / rate
    attn = 12 * model.layers * model.heads * model.head_dim * np.sum(seqs**2) / 2 / rate
    assert cost.compute_s == pytest.approx(six_nt + attn, rel=1e-12)
    assert 0.05 < attn / six_nt < 0.4            # thinking-length sequences: attention is a real term
    assert cost.bubble_s == 0 and cost.tp_comm_s == 0 and cost.ep_comm_s == 0
    extra = cost.dp_comm_s + cost.optimizer_s
    assert 0 < extra < 0.01 * cost.compute_s     # 8B, dp over one NVLink domain: comm is small
    assert tc.train_s(model, hw, tl, seqs) == pytest.approx(cost.total_s)
    # the MFU override scales compute inversely
    tl2 = _tl(sc, model, hw, **{"training.mfu": tl.mfu / 2})
    assert tc.train_cost(model, hw, tl2, seqs).compute_s == pytest.approx(2 * cost.compute_s, rel=1e-12)


def test_pipeline_bubble_and_tp_comm(sc, model, hw, seqs):
    base = tc.train_cost(model, hw, _tl(sc, model, hw), seqs)
    pp = tc.train_cost(model, hw, _tl(sc, model, hw, **{"training.pp": 4}), seqs)
    assert pp.compute_s == pytest.approx(base.compute_s, rel=1e-12)   # same FLOPs, same GPUs
    assert pp.bubble_s == pytest.approx(pp.compute_s * 3 / pp.micro_batches, rel=1e-12)
    tp = tc.train_cost(model, hw, _tl(sc, model, hw, **{"training.tp": 4}), seqs)
    assert tp.tp_comm_s > 0 and tp.total_s > base.total_s


def test_moe_expert_parallel_comm():
    m = load_model("Qwen3-30B-A3B")
    hw = load_hardware("h100_sxm")
    par = ParallelLayout(tp=1, ep=8, weight_dtype="bf16")
    tl = tc.TrainingLayout(gpus=64, parallel=par, dp=8, micro_batch_tokens=16384, mfu=0.3)
    L = np.full(2048, 6000.0)
    c = tc.train_cost(m, hw, tl, L)
    assert c.ep_comm_s > 0 and c.tp_comm_s == 0
    # active params only: a 30B-A3B step costs ~ an A3B dense model's FLOPs, far below 30B's
    assert c.flops < 6 * 0.2 * m.total_params * L.sum()


def test_logprob_matches_packed_forward_passes(sc, model, hw, seqs):
    """The vectorized pricing equals Σ forward_time_s over greedily packed micro-batches (≤ 1 %)."""
    tl = replace(_tl(sc, model, hw), gpus=1, dp=1, reference_logprob=False)
    mbs, cur = [], []
    for x in seqs:
        if sum(cur) + x > tl.micro_batch_tokens:
            mbs.append(cur)
            cur = []
        cur.append(x)
    mbs.append(cur)
    exact = sum(forward_time_s(model, hw, tl.parallel, np.array(b), np.zeros(len(b)), logits_per_seq=np.array(b))
                for b in mbs)
    assert tc.logprob_s(model, hw, tl, seqs) == pytest.approx(exact, rel=0.01)


def test_logprob_reference_and_data_parallel(sc, model, hw, seqs):
    with_ref = tc.logprob_s(model, hw, _tl(sc, model, hw), seqs)
    no_ref = tc.logprob_s(model, hw, _tl(sc, model, hw, **{"training.reference_logprob": False}), seqs)
    assert with_ref == pytest.approx(2 * no_ref, rel=1e-12)
    tl = _tl(sc, model, hw)
    half = replace(tl, gpus=16, dp=16)
    assert tc.logprob_s(model, hw, half, seqs) == pytest.approx(2 * with_ref, rel=0.02)
    # a forward is about a third of fwd+bwd at comparable efficiency
    ratio = no_ref / tc.train_cost(model, hw, tl, seqs).compute_s
    assert 0.1 < ratio < 0.34


def test_memory_fit_error_for_impossible_trainer():
    m = load_model("Qwen3-235B-A22B")
    hw = load_hardware("h100_sxm")
    par = ParallelLayout(tp=8, ep=8, weight_dtype="bf16")
    tl = tc.TrainingLayout(gpus=8, parallel=par, dp=1, micro_batch_tokens=18432, mfu=0.3)
    msg = r"Qwen3-235B-A22B training needs \d+ GB per GPU .*training.gpus=8 gives 80 GB"
    with pytest.raises(LayoutError, match=msg):
        tc.check_training_fits(m, hw, tl)
    big = replace(tl, gpus=512, dp=64)
    mem = tc.check_training_fits(m, hw, big)
    assert mem.fits
    # ZeRO-3: state per GPU = 16 B/param · params / GPUs (within the replicated norms/router)
    assert mem.state_bytes == pytest.approx(16 * m.total_params / 512, rel=0.02)


def test_distributed_optimizer_exchanges_once_per_step_and_keeps_weights_and_grads_whole():
    """Megatron's distributed optimizer (ZeRO-1) against ZeRO-3 on the 235B trainer of the main job
    (32-GPU replicas, dp 16 across nodes): the same math, bubble, TP and EP terms; its data-parallel
    exchange is exactly the per-step reduce-scatter + all-gather (the fsdp cost without its per
    micro-batch gathers, which there dominate the step); its state is 4 B/param whole plus 12 B/param
    sharded over dp."""
    m = load_model("Qwen3-235B-A22B")
    hw = load_hardware("gb200")
    par = ParallelLayout(tp=4, pp=4, ep=8, weight_dtype="bf16")
    fsdp = tc.TrainingLayout(gpus=512, parallel=par, dp=16, micro_batch_tokens=34816, mfu=0.291)
    dist = replace(fsdp, sharding="distributed_optimizer")
    L = np.full(4096, 6400.0)
    a, b = tc.train_cost(m, hw, fsdp, L), tc.train_cost(m, hw, dist, L)
    for f in ("compute_s", "bubble_s", "tp_comm_s", "ep_comm_s", "optimizer_s", "micro_batches", "flops"):
        assert getattr(a, f) == getattr(b, f), f
    shard = tc.weight_bytes_per_gpu(m, par, "bf16")
    ag = tc._collective_s(shard, 16, 512, hw, 15 / 16)
    assert b.dp_comm_s == pytest.approx(2 * ag, rel=1e-12)
    assert a.dp_comm_s > 5 * b.dp_comm_s and a.dp_comm_s > a.compute_s   # per-micro-batch gathers dominate fsdp
    params_gpu = shard / 2
    ma, mb = tc.training_memory(m, hw, fsdp), tc.training_memory(m, hw, dist)
    assert ma.state_bytes == pytest.approx(16 * params_gpu / 16, rel=1e-12)
    assert mb.state_bytes == pytest.approx((4 + 12 / 16) * params_gpu, rel=1e-12)
    assert mb.fits and mb.activation_bytes == ma.activation_bytes
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
    assert tr["train_s"] == pytest.approx(tr["compute_s"] + tr["dp_comm_s"] + tr["bubble_tp_ep_s"] + tr["optimizer_s"])
    assert tr["dp_comm_s"] < 0.2 * tr["compute_s"] and tr["logprob_s"] > 0
    assert not any("training.sharding" in w for w in check_report(world, str(scen))["warnings"])
    fsdp = resolve(load_scenario(scen, ["training.sharding=fsdp"]))
    info = check_report(fsdp, str(scen))
    assert info["trainer"]["dp_comm_s"] > info["trainer"]["compute_s"]
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
