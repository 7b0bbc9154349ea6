"""Model catalog: derived parameter counts against published totals, KV sizes, drafter architectures."""

import dataclasses

import numpy as np
import pytest

from specsim.catalog.hardware import DTYPE_BYTES, load_hardware
from specsim.catalog.models import DRAFTER_KINDS, drafter_arch, list_models, load_model
from specsim.cost.forward import decode_cost, draft_cost
from specsim.cost.layout import ParallelLayout
from specsim.errors import SpecError

PUBLISHED_TOTAL = [n for n in list_models() if load_model(n).published_total_params_b]
PUBLISHED_ACTIVE = [n for n in list_models() if load_model(n).published_active_params_b]


def test_catalog_has_published_totals_for_the_models_we_validate():
    assert {"Qwen3-8B", "Qwen3-30B-A3B", "Qwen3-235B-A22B"} <= set(PUBLISHED_TOTAL)
    assert {"Qwen3-30B-A3B", "Qwen3-235B-A22B"} <= set(PUBLISHED_ACTIVE)


@pytest.mark.parametrize("name", PUBLISHED_TOTAL)
def test_total_params_within_2pct_of_published(name):
    m = load_model(name)
    assert m.total_params / 1e9 == pytest.approx(m.published_total_params_b, rel=0.02)


@pytest.mark.parametrize("name", PUBLISHED_ACTIVE)
def test_active_params_within_2pct_of_published(name):
    m = load_model(name)
    assert m.active_params_as_published / 1e9 == pytest.approx(m.published_active_params_b, rel=0.02)


@pytest.mark.parametrize("name, total_b, active_b", [
    ("Qwen3-8B", 8.2, 8.2),
    ("Qwen3-30B-A3B", 30.5, 3.3),
    ("Qwen3-235B-A22B", 235.0, 22.0),
])
def test_qwen3_sizes(name, total_b, active_b):
    m = load_model(name)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.02)
    assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.02)


def test_dense_model_active_equals_total_and_moe_active_is_a_small_share():
    dense = load_model("Qwen3-8B")
    assert dense.active_params == dense.total_params
    moe = load_model("Qwen3-235B-A22B")
    assert 0.05 < moe.active_params / moe.total_params < 0.15


def test_tied_embeddings_drop_the_lm_head_from_the_total():
    m = load_model("Qwen2.5-3B")
    assert m.tied_embeddings
    untied = dataclasses.replace(m, tied_embeddings=False)
    assert untied.total_params - m.total_params == m.vocab * m.hidden


@pytest.mark.parametrize("name", list_models())
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_kv_bytes_per_token_formula(name, dtype):
    m = load_model(name)
    b = DTYPE_BYTES[dtype]
    if m.mla is not None:   # the latent c_KV + the RoPE key per layer
        assert m.kv_bytes_per_token(b) == m.layers * (m.mla.kv_lora_rank + m.mla.qk_rope_head_dim) * b
    else:                   # sliding-window layers hold a window, not every token
        assert m.kv_bytes_per_token(b) == (m.layers - m.sliding_layers) * 2 * m.kv_heads * m.head_dim * b


def test_kv_bytes_per_token_qwen3_8b_value():
    # 36 layers · 2 (K and V) · 8 KV heads · 128 dims · 2 bytes = 147,456 bytes
    assert load_model("Qwen3-8B").kv_bytes_per_token(2.0) == 147_456


def test_flops_per_token_grows_with_context():
    m = load_model("Qwen3-8B")
    assert m.flops_per_token(0) == 2 * m.matmul_params_per_token
    assert m.flops_per_token(1000) - m.flops_per_token(0) == 4 * m.layers * m.heads * m.head_dim * 1000


def test_lookup_is_case_insensitive():
    assert load_model("qwen3-8b").name == "Qwen3-8B"


def test_unknown_model_names_the_field_and_suggests():
    with pytest.raises(SpecError) as err:
        load_model("Qwen3-8C")
    e = err.value
    assert e.field == "model" and e.value == "Qwen3-8C"
    assert "did you mean 'Qwen3-8B'" in str(e)


@pytest.mark.parametrize("kind", DRAFTER_KINDS)
def test_every_drafter_kind_builds(kind):
    arch = drafter_arch(kind, load_model("Qwen3-8B"))
    assert arch.kind == kind
    assert (arch.model is None) == (kind == "ngram")


def test_ngram_has_no_model_and_costs_nothing():
    arch = drafter_arch("ngram", load_model("Qwen3-8B"))
    assert arch.model is None and arch.kv_layers == 0
    hw, lay = load_hardware("h100_sxm"), ParallelLayout()
    c = draft_cost(arch, hw, lay, np.array([1.0, 64.0]))
    assert np.all(c.time_s(1e5) == 0.0)


def test_eagle3_draft_vocab_reduces_lm_head_cost():
    target = load_model("Qwen3-8B")
    hw, lay = load_hardware("h100_sxm"), ParallelLayout()
    small = drafter_arch("eagle3", target)  # catalog draft vocabulary (32K)
    full = drafter_arch("eagle3", target, draft_vocab=target.vocab)
    assert small.model.vocab < full.model.vocab == target.vocab
    assert small.model.lm_head_params < full.model.lm_head_params
    t_small = float(draft_cost(small, hw, lay, 1).time_s(1024))
    t_full = float(draft_cost(full, hw, lay, 1).time_s(1024))
    assert t_small < t_full
    # the LM head is most of a full-vocabulary draft head's weights
    assert full.model.lm_head_params > 0.5 * full.model.total_params
    # and a draft pass is a small fraction of a decode pass of the target
    assert t_small < 0.1 * float(decode_cost(target, hw, lay, 1).time_s(1024))


def test_self_quant_is_the_policy_at_4_bit_and_mtp_is_one_layer():
    target = load_model("Qwen3-8B")
    sq = drafter_arch("self_quant", target)
    assert sq.weight_dtype == "int4" and sq.model.layers == target.layers
    mtp = drafter_arch("mtp", target)
    assert mtp.model.layers == 1 and mtp.model.vocab == target.vocab


def test_unknown_drafter_kind_suggests():
    with pytest.raises(SpecError, match="did you mean 'eagle3'"):
        drafter_arch("eagle", load_model("Qwen3-8B"))
