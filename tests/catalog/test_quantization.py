"""config.json's quantization_config (specsim/catalog/hf_config.quantization_from_config) and which
weight dtype the rollout runs (specsim/world/resolve.rollout_weight_dtypes): the checkpoint's
dtype unless rollout.weight_dtype / --weight-dtype overrides it, mxfp4's bf16 modules honoured."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specsim.catalog.hf_config import load_config_model, quantization_from_config
from specsim.catalog.models import load_model
from specsim.cli.app import app
from specsim.cost.layout import ParallelLayout
from specsim.cost.memory import weight_bytes_per_gpu
from specsim.errors import SpecError
from specsim.world.resolve import rollout_weight_dtypes

ROOT = Path(__file__).resolve().parents[2]
MXFP4 = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                    "lm_head"], "quant_method": "mxfp4"}


def _gpt_oss(tmp_path, quant=MXFP4) -> Path:
    doc = dict(yaml.safe_load((ROOT / "specsim/catalog/models.yaml").read_text())["models"]["gpt-oss-120b"]["config"])
    if quant is not None:
        doc["quantization_config"] = quant
    d = tmp_path / "gpt-oss-120b-mx"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(doc))
    return d


@pytest.mark.parametrize("q, dtype", [
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),     # DeepSeek-V3, Kimi-K2
    (MXFP4, "fp4"),
    ({"quant_method": "awq", "bits": 4}, "int4"), ({"quant_method": "gptq", "bits": 8}, "int8"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "int4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}},
     "fp8"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}},
      "ignore": ["lm_head"]}, "int4")])
def test_each_method_names_its_weight_dtype(q, dtype):
    spec = quantization_from_config({"quantization_config": q}, "cfg.json", moe=True)
    assert spec.weight_dtype == dtype and spec.method == q["quant_method"]
    assert spec.scope == ("experts" if q is MXFP4 else "all")          # attention excluded: the experts only
    assert quantization_from_config({}, "cfg.json") is None


@pytest.mark.parametrize("q, field", [({"quant_method": "hqq"}, "quantization_config.quant_method"),
                                      ({"quant_method": "awq", "bits": 3}, "quantization_config.bits"),
                                      ({"quant_method": "fp8", "ignore": "lm_head"}, "quantization_config.ignore"),
                                      ("fp8", "quantization_config")])
def test_a_quantization_config_specsim_cannot_price_is_an_error_naming_the_field(q, field):
    with pytest.raises(SpecError) as e:
        quantization_from_config({"quantization_config": q}, "cfg.json")
    assert e.value.field == field and e.value.where == "cfg.json"


def test_mxfp4_prices_fp4_experts_and_bf16_attention_router_embeddings_and_head(tmp_path):
    model = load_config_model(_gpt_oss(tmp_path))
    d = rollout_weight_dtypes(None, model)
    assert (d.weight_dtype, d.expert_weight_dtype) == ("bf16", "fp4")
    assert "fp4 routed experts, bf16 elsewhere" in d.source and "model.embed_tokens" in d.source
    mixed = weight_bytes_per_gpu(model, ParallelLayout(tp=1, weight_dtype="bf16", expert_weight_dtype="fp4"))
    all_fp4 = weight_bytes_per_gpu(model, ParallelLayout(tp=1, weight_dtype="fp4"))
    bf16 = weight_bytes_per_gpu(model, ParallelLayout(tp=1, weight_dtype="bf16"))
    routed = model.layers * model.moe.experts * model.expert_params
    assert mixed == pytest.approx(all_fp4 + 1.5 * (model.total_params - routed))   # the rest at 2 bytes, not 0.5
    assert all_fp4 < mixed < bf16


def test_rollout_weight_dtype_overrides_the_checkpoint_and_says_so(tmp_path):
    model = load_config_model(_gpt_oss(tmp_path))
    d = rollout_weight_dtypes("fp8", model)
    assert (d.weight_dtype, d.expert_weight_dtype) == ("fp8", None)
    assert d.source == "fp8 from rollout.weight_dtype, overriding the config's mxfp4 (fp4)"
    plain = rollout_weight_dtypes(None, load_model("Qwen3-8B"))
    assert plain.weight_dtype == "bf16" and "no quantization_config" in plain.source
    dsv3 = rollout_weight_dtypes(None, load_config_model(ROOT / "tests/fixtures/deepseek_v3"))
    assert (dsv3.weight_dtype, dsv3.expert_weight_dtype) == ("fp8", None)


def test_show_model_reads_the_checkpoint_dtype_and_the_option_wins(tmp_path):
    d = _gpt_oss(tmp_path)
    auto = CliRunner().invoke(app, ["show", "model", str(d), "--hardware", "h200_sxm", "--max-batch-exp", "2",
                                    "--format", "json"])
    assert auto.exit_code == 0, auto.output
    info = json.loads(auto.stdout)
    assert info["weight_dtype_source"].startswith("fp4 routed experts, bf16 elsewhere")
    forced = CliRunner().invoke(app, ["show", "model", str(d), "--hardware", "h200_sxm", "--max-batch-exp", "2",
                                      "--weight-dtype", "fp4", "--format", "json"])
    assert json.loads(forced.stdout)["weight_dtype_source"] == "fp4 from --weight-dtype"   # the same dtype: no override
    assert json.loads(forced.stdout)["weight_gb_per_gpu"] < info["weight_gb_per_gpu"]
    (tmp_path / "b").mkdir()
    bad = _gpt_oss(tmp_path / "b", {"quant_method": "hqq"})
    r = CliRunner().invoke(app, ["show", "model", str(bad), "--hardware", "h200_sxm"])
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and "quantization_config.quant_method" in r.stderr
    assert "Traceback" not in r.output
