"""Weight sync between pools of two profiles (cost/comm.pool_link, cost/training.weight_sync_s with
`rollout_hw`): the transfer between the pools moves over the slower of the two scale-out networks;
one profile is exactly the single-profile price."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.catalog.hardware import load_hardware
from specsim.catalog.models import load_model
from specsim.cost import comm
from specsim.cost import training as tc
from specsim.cost.layout import ParallelLayout
from specsim.errors import SpecError

H100 = load_hardware("h100_sxm")
H20 = load_hardware("h20")
MODEL = load_model("Qwen3-8B")
LAYOUT = ParallelLayout(tp=1)


def _nic(hw, gbit: float, name: str, lat_us: float = 25.0):
    return replace(hw, name=name, scaleout_bw_bytes_per_s=gbit * 1e9 / 8, scaleout_latency_s=lat_us * 1e-6)


def test_one_profile_is_the_plain_link():
    for n in (2, 8, 9, 64):
        assert comm.pool_link(H100, H100, n) == comm.link(H100, n)


@settings(max_examples=40, deadline=None)
@given(a=st.floats(10, 1600), b=st.floats(10, 1600), la=st.floats(1, 100), lb=st.floats(1, 100),
       n=st.integers(2, 512))
def test_two_profiles_move_at_the_slower_scaleout_network(a, b, la, lb, n):
    x, y = _nic(H100, a, "x", la), _nic(H20, b, "y", lb)
    bw, lat = comm.pool_link(x, y, n)
    assert bw == min(x.scaleout_bw_bytes_per_s * x.efficiency.comm, y.scaleout_bw_bytes_per_s * y.efficiency.comm)
    assert lat == max(x.scaleout_latency_s, y.scaleout_latency_s)
    assert comm.pool_link(y, x, n) == (bw, lat)          # symmetric
    # never NVLink, even for a group that one NVLink domain would hold
    assert bw <= min(x.scaleout_bw_bytes_per_s, y.scaleout_bw_bytes_per_s)


@pytest.mark.parametrize("method", ["nccl_broadcast", "broadcast", "reshard"])
def test_same_profile_passed_as_the_rollout_one_changes_nothing(method):
    plain = tc.weight_sync_s(MODEL, H100, LAYOUT, 24, 8, method=method, colocated=False)
    assert tc.weight_sync_s(MODEL, H100, LAYOUT, 24, 8, method=method, colocated=False, rollout_hw=H100) == plain


def test_nccl_broadcast_between_two_profiles_overlaps_the_trainer_gather_with_a_broadcast_on_the_slower_nics():
    trainer = _nic(H100, 400, "t")
    engines = _nic(H20, 100, "r", 40.0)          # the slower NIC and the longer latency
    w = tc.rollout_weight_bytes(MODEL, LAYOUT)
    gather = float(comm.all_gather_s(w, 8, trainer))
    span = 24 + 8
    host_bw = comm.node_gpus(engines) * engines.scaleout_bw_bytes_per_s * engines.efficiency.comm
    buckets = int(np.ceil(w / (tc.REFIT_BUCKET_MEMORY_RATIO * trainer.hbm_bytes)))
    wire = buckets * comm.hop_latency_s(engines, span) + w / host_bw
    want = max(gather, wire) + min(gather, wire) / buckets
    got = tc.weight_sync_s(MODEL, trainer, LAYOUT, 24, 8, method="nccl_broadcast", colocated=False,
                           rollout_hw=engines)
    assert got == pytest.approx(want, rel=1e-12)
    # a faster rollout NIC than the trainer's: the trainer's sets the pace
    fast = _nic(H20, 1600, "f")
    got2 = tc.weight_sync_s(MODEL, trainer, LAYOUT, 24, 8, method="nccl_broadcast", colocated=False, rollout_hw=fast)
    same = tc.weight_sync_s(MODEL, trainer, LAYOUT, 24, 8, method="nccl_broadcast", colocated=False,
                            rollout_hw=_nic(H20, 400, "same-nic"))
    assert got2 == pytest.approx(same, rel=1e-12) and got > same


def test_a_small_mixed_group_still_crosses_the_network():
    """Two pools of 4 GPUs on one profile fit one 8-GPU NVLink domain; on two profiles they do not."""
    one = tc.weight_sync_s(MODEL, H100, LAYOUT, 4, 4, method="broadcast", colocated=False)
    two = tc.weight_sync_s(MODEL, H100, LAYOUT, 4, 4, method="broadcast", colocated=False, rollout_hw=H20)
    assert two > one


def test_colocated_pools_of_two_profiles_are_refused():
    with pytest.raises(SpecError) as info:
        tc.weight_sync_s(MODEL, H100, LAYOUT, 8, 8, method="ipc", colocated=True, rollout_hw=H20)
    assert info.value.field == "weight_sync"
