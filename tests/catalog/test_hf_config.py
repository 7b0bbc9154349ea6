"""Models from Hugging Face config.json files: the fixtures against their published totals, the
bundled catalog read through the same parser, MLA priced with its sourced formula, the user
catalog, and the errors naming file, field and value."""

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specsim.catalog.hardware import load_hardware
from specsim.catalog.hf_config import MODEL_TYPES, load_config_model, model_from_config
from specsim.catalog.models import CATALOG_ENV, architecture_key, bundled_models, drafter_arch, list_models, load_model
from specsim.cli.app import app
from specsim.cost.forward import decode_cost, pass_cost
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import drafter_weight_bytes_per_gpu, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from specsim.cost.roofline import compute_time_s, memory_time_s
from specsim.errors import SpecError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DSV3 = FIXTURES / "deepseek_v3"
LLAMA = FIXTURES / "llama_3_3_70b" / "config.json"
runner = CliRunner()


# ----------------------------------------------------------------------------- fixtures vs published
def _show_json(*args, env=None):
    res = runner.invoke(app, ["show", "model", *args, "--format", "json", "--max-batch-exp", "1"], env=env)
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_deepseek_v3_fixture_loads_and_matches_published_counts_within_1pct():
    m = load_config_model(DSV3)
    assert m.name == "deepseek_v3" and m.model_type == "deepseek_v3"
    assert m.mla is not None and m.dense_layers == 3 and m.mtp_layers == 1
    assert m.moe.experts == 256 and m.moe.top_k == 8 and m.moe.shared_experts == 1
    info = _show_json(str(DSV3), "--hardware", "h200_sxm", "--tp", "8", "--ep", "8", "--weight-dtype", "fp8")
    pub = info["published"]
    # 671B total without the 14B MTP module (README_WEIGHTS.md: 685B = 671B main + 14B MTP)
    assert info["total_params"] / 1e9 == pytest.approx(671.0, rel=0.01)
    assert abs(pub["total_error_pct"]) < 1.0
    # 36.7B activated (layers + LM head), 37B rounded in the technical report
    assert pub["active_params_as_published"] / 1e9 == pytest.approx(36.7, rel=0.01)
    assert pub["active_params_as_published"] / 1e9 == pytest.approx(37.0, rel=0.0105)
    assert abs(pub["active_error_pct"]) < 1.0
    # the MTP module: one MoE layer with MLA + eh_proj, not in the totals (~11.5B unique parameters)
    mtp = info["architecture"]["mtp"]
    assert mtp["counted_in_total"] is False and mtp["params"] / 1e9 == pytest.approx(11.5, rel=0.02)


def test_llama_3_3_70b_fixture_loads_and_matches_published_count_within_1pct():
    m = load_config_model(LLAMA)
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.head_dim, m.ffn) == (8192, 80, 64, 8, 128, 28672)
    info = _show_json(str(LLAMA.parent), "--hardware", "h100_sxm", "--tp", "4")
    assert info["total_params"] / 1e9 == pytest.approx(70.6, rel=0.01)
    assert abs(info["published"]["total_error_pct"]) < 1.0


@pytest.mark.parametrize("fixture, bundled", [(DSV3, "DeepSeek-V3"), (LLAMA, "Llama-3.3-70B")])
def test_each_bundled_fixture_entry_equals_what_its_config_gives(fixture, bundled):
    assert architecture_key(load_config_model(fixture)) == architecture_key(load_model(bundled))


# ----------------------------------------------------------------------------- the bundled catalog
#: the catalog's numbers before it became config-shaped (catalog/models.yaml at 7f30399)
LEGACY = {
    "Qwen3-8B": (4096, 36, 32, 8, 128, 12288, None, 151936, False, False, 40960),
    "Qwen3-30B-A3B": (2048, 48, 32, 4, 128, 0, (128, 8, 768), 151936, False, False, 40960),
    "Qwen3-235B-A22B": (4096, 94, 64, 4, 128, 0, (128, 8, 1536), 151936, False, False, 40960),
    "Qwen2.5-3B": (2048, 36, 16, 2, 128, 11008, None, 151936, True, True, 32768),
    "Qwen2.5-7B": (3584, 28, 28, 4, 128, 18944, None, 152064, False, True, 32768),
    "Qwen2.5-14B": (5120, 48, 40, 8, 128, 13824, None, 152064, False, True, 32768),
    "Llama-3.1-8B": (4096, 32, 32, 8, 128, 14336, None, 128256, False, False, 131072),
    "Llama-3.1-70B": (8192, 80, 64, 8, 128, 28672, None, 128256, False, False, 131072),
    "Qwen3-32B": (5120, 64, 64, 8, 128, 25600, None, 151936, False, False, 40960),
}


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_config_shaped_entries_keep_the_legacy_numbers(name):
    m = load_model(name)
    h, layers, heads, kv, d, ffn, moe, vocab, tied, bias, pos = LEGACY[name]
    assert (m.hidden, m.layers, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab, m.tied_embeddings, m.qkv_bias,
            m.max_positions) == (h, layers, heads, kv, d, ffn or 0, vocab, tied, bias, pos)
    assert (None if m.moe is None else (m.moe.experts, m.moe.top_k, m.moe.expert_ffn)) == moe
    assert m.mla is None and m.dense_layers == 0 and m.extra_params_per_layer == 0 and m.sliding_layers == 0


def test_every_bundled_entry_has_a_config_and_a_published_total():
    for name in bundled_models():
        m = load_model(name)
        assert m.model_type in MODEL_TYPES and m.published_total_params_b, name


# ----------------------------------------------------------------------------- MLA pricing
def test_mla_kv_bytes_per_token_is_the_latent_plus_rope_key():
    m = load_model("DeepSeek-V3")
    # (kv_lora_rank + qk_rope_head_dim) · 2 bytes = 576 · 2 per token per layer, whatever the TP
    for tp in (1, 8):
        assert m.kv_bytes_per_token_layer(tp, 2.0) == 576 * 2
        assert kv_bytes_per_token_per_gpu(m, ParallelLayout(tp=tp)) == 61 * 1152
    assert m.kv_bytes_per_token(2.0) == 61 * 576 * 2 == 70_272
    # per-head K (qk_nope + qk_rope = 192) and V (128) of 128 heads would be 71x more
    assert 128 * (192 + 128) / 576 == pytest.approx(71.1, rel=1e-3)


def test_mla_decode_step_priced_with_the_absorbed_formula():
    """Decode attention over one cached token, per query token per head: QKᵀ over the 512 + 64
    latent, PV over the 512 latent: 2·576 + 2·512 = 2176 FLOPs (DeepSeek-V2 §2.1; vLLM MLA /
    FlashMLA absorb W_UK into q and W_UV into the output); the latent is read once per layer."""
    m = load_model("DeepSeek-V3")
    assert 4 * m.attn_head_dim == 2 * (512 + 64) + 2 * 512 == 2176
    assert 4 * m.prefill_attn_head_dim == 2 * (128 + 64) + 2 * 128 == 640   # non-absorbed prefill
    hw = load_hardware("h200_sxm")
    lay = ParallelLayout(tp=8, ep=8, weight_dtype="fp8")
    c = decode_cost(m, hw, lay, 64.0)
    # per cached token of the batch: 61 layers · 16 local heads · 2176 FLOPs, and 1152 bytes per layer
    assert float(c._ctx_compute) == pytest.approx(61 * float(compute_time_s(128 / 8 * 2176, hw, "bf16")), rel=1e-12)
    assert float(c._ctx_memory) == pytest.approx(61 * float(memory_time_s(1152.0, hw, stream="kv")), rel=1e-12)
    # the decode step at 64 × 4096 tokens of context: reading the latent cache is the per-context term
    assert float(c.per_ctx_token_s) == pytest.approx(max(float(c._ctx_compute), float(c._ctx_memory)))
    # linear ops read the weights once: q_a, q_b, kv_a (+ norms), kv_b (W_UK, W_UV), o per layer
    assert m.attn_params_per_layer == (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512
                                       + 512 * 128 * 256 + 128 * 128 * 7168)


def test_dense_first_layers_price_as_their_own_group():
    m = load_model("DeepSeek-V3")
    (n_moe, moe), (n_dense, dense) = m.layer_groups
    assert (n_moe, n_dense) == (58, 3) and dense.moe is None and dense.ffn == 18432 and moe.ffn == 0
    assert m.stack_params == 58 * moe.layer_params + 3 * dense.layer_params
    lay = ParallelLayout(tp=1)
    assert weight_bytes_per_gpu(m, lay) == pytest.approx((m.total_params - m.hidden) * 2.0, rel=1e-12)
    hw = load_hardware("h200_sxm")
    # an all-MoE stack of 61 layers costs more to decode than 58 MoE + 3 dense
    all_moe = dataclasses.replace(m, dense_layers=0, dense_layer_ffn=0)
    big = ParallelLayout(tp=8, ep=8, weight_dtype="fp8")
    assert float(decode_cost(all_moe, hw, big, 32.0).fixed_s) > float(decode_cost(m, hw, big, 32.0).fixed_s)


def test_mtp_drafter_is_one_mla_moe_layer_sharing_the_targets_head():
    m = load_model("DeepSeek-V3")
    mtp = drafter_arch("mtp", m)
    d = mtp.model
    assert d.layers == 1 and d.mla == m.mla and d.moe == m.moe and d.dense_layers == 0
    assert d.extra_params_per_layer == 2 * 7168 * 7168   # eh_proj: [embedding; hidden] (2h) → h
    assert mtp.spec.shares_target_head and mtp.kv_layers == 1
    lay = ParallelLayout(tp=8, ep=8, weight_dtype="fp8")
    # its own weights: the layer and eh_proj, not the shared embedding and LM head
    own = drafter_weight_bytes_per_gpu(mtp, lay)
    assert own < (d.layer_params / 8) * 1.0 * 1.01 and own > (d.layer_params / 8) * 0.99
    assert kv_bytes_per_token_per_gpu(m, lay, mtp) == 62 * 1152
    assert pass_cost(d, load_hardware("h200_sxm"), lay, 8.0, 1.0).fixed_s > 0


# ----------------------------------------------------------------------------- every model_type
CONFIGS = {
    "kimi_k2": ({"model_type": "kimi_k2", "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
                     "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
                     "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64, "kv_lora_rank": 512,
                     "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 163840,
                     "max_position_embeddings": 131072}, 1026.4, None),   # "1T" total, 32B active (moonshotai/Kimi-K2)
    "qwen2_moe": ({"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408,
                       "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
                       "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24, "vocab_size": 151936,
                       "max_position_embeddings": 8192}, 14.3, 2.7),   # Qwen/Qwen1.5-MoE-A2.7B: 14.3B, 2.7B active
    "deepseek_v2_lite": ({"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
                              "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2,
                              "num_experts_per_tok": 6, "first_k_dense_replace": 1, "num_hidden_layers": 27,
                              "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512, "q_lora_rank": None,
                              "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400,
                              "max_position_embeddings": 163840}, 15.7, None),   # DeepSeek-V2-Lite: 15.7B total
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_other_model_types_parse_to_their_published_sizes(name):
    doc, total_b, active_b = CONFIGS[name]
    m = model_from_config(doc, name=name, where="test")
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.02)
    if active_b:
        assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.05)


def test_gpt_oss_sliding_layers_hold_no_kv_per_token():
    m = load_model("gpt-oss-120b")
    assert m.sliding_layers == 18 and m.sliding_window == 128 and m.kv_layers == 18
    assert m.kv_bytes_per_token(2.0) == 18 * 2 * 8 * 64 * 2
    assert m.moe.expert_bias and m.moe.router_bias


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("change, field, fragment", [
    ({"model_type": "falcon"}, "model_type", "one of"),
    ({"hidden_size": None}, "hidden_size", "required"),
    ({"num_hidden_layers": 0}, "num_hidden_layers", ">= 1"),
    ({"num_key_value_heads": 7}, "num_key_value_heads", "divisor"),
    ({"moe_layer_freq": 2}, "moe_layer_freq", "every layer"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings", "true or false"),
])
def test_bad_config_names_file_field_and_value(tmp_path, change, field, fragment):
    doc = {**json.loads((DSV3 / "config.json").read_text()), **change}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SpecError) as e:
        load_config_model(path)
    assert e.value.field == field and e.value.where == str(path) and fragment in e.value.allowed
    res = runner.invoke(app, ["show", "model", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"{path}: {field}: must be" in res.output and len(res.output.strip().splitlines()) == 1


def test_unparseable_and_missing_configs_exit_2(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    for arg in (str(tmp_path / "broken.json"), str(tmp_path / "absent" / "config.json"), str(tmp_path) + "/"):
        res = runner.invoke(app, ["show", "model", arg])
        assert res.exit_code == 2 and res.output.startswith("error:"), res.output


# ----------------------------------------------------------------------------- the user catalog
def _user_catalog(tmp_path: Path) -> Path:
    cat = tmp_path / "catalog"
    (cat / "My-DSV3").mkdir(parents=True)
    (cat / "My-DSV3" / "config.json").write_text((DSV3 / "config.json").read_text())
    (cat / "my-llama.json").write_text(LLAMA.read_text())
    return cat


def test_user_catalog_from_env_and_option(tmp_path, monkeypatch):
    cat = _user_catalog(tmp_path)
    assert "My-DSV3" not in list_models()
    monkeypatch.setenv(CATALOG_ENV, str(cat))
    assert {"My-DSV3", "my-llama"} <= set(list_models())
    assert load_model("my-dsv3").mla is not None and load_model("My-Llama").layers == 80
    monkeypatch.delenv(CATALOG_ENV)
    res = runner.invoke(app, ["list", "models", "--catalog", str(cat)])
    assert res.exit_code == 0 and "My-DSV3" in res.output and "my-llama" in res.output
    info = _show_json("My-DSV3", "--catalog", str(cat), "--hardware", "h200_sxm", "--tp", "8", "--ep", "8",
                      "--weight-dtype", "fp8")
    assert info["model"] == "My-DSV3" and abs(info["published"]["total_error_pct"]) < 1.0
    import os
    assert CATALOG_ENV not in os.environ   # --catalog restores the environment
    res = runner.invoke(app, ["list", "models", "--catalog", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "--catalog" in res.output


def test_scenario_model_path_is_relative_to_the_scenario(tmp_path):
    import yaml

    from specsim.scenario import load_scenario
    from specsim.world.resolve import resolve

    src = Path(__file__).resolve().parents[2] / "scenarios" / "8b_rl_zero_sync.yaml"
    doc = yaml.safe_load(src.read_text())
    assert doc["model"] == "Qwen3-8B"
    (tmp_path / "models" / "my-qwen").mkdir(parents=True)
    (tmp_path / "models" / "my-qwen" / "config.json").write_text(json.dumps(QWEN3_8B_CONFIG))
    doc.update(model="models/my-qwen", sweep={})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    res = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert res.exit_code == 0, res.output
    model = resolve(load_scenario(path)).model
    assert model.name == "my-qwen"
    assert architecture_key(model) == architecture_key(load_model("Qwen3-8B"))


#: huggingface.co/Qwen/Qwen3-8B config.json (the fields specsim reads)
QWEN3_8B_CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
                   "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                   "intermediate_size": 12288, "vocab_size": 151936, "tie_word_embeddings": False,
                   "max_position_embeddings": 40960, "attention_bias": False, "torch_dtype": "bfloat16"}
