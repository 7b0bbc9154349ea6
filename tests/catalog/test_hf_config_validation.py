"""Model configs validated as a whole: every count bounded, the relations between fields held,
duplicate keys and huge integers refused -- each an `error:` paragraph naming the file, the key and
the value, exit 2; and no per-layer loop (10^12 layers is refused at once, any legal stack counted
in closed form)."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from specsim.catalog.hf_config import COUNT_MAX, load_config_model, model_from_config
from specsim.cli.app import app
from specsim.errors import SpecError

QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
             "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
             "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
             "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960}


def _write(tmp_path, text: str):
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(text, encoding="utf-8")
    return d


def _refused(tmp_path, text: str, *words: str) -> str:
    d = _write(tmp_path, text)
    t0 = time.perf_counter()
    res = CliRunner().invoke(app, ["show", "model", str(d), "--format", "json", "--max-batch-exp", "1"])
    assert time.perf_counter() - t0 < 20
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert res.exit_code == 2, out
    assert "Traceback" not in out and "internal error" not in out and "Warning" not in out, out
    for w in (str(d / "config.json"), *words):
        assert w in out, (w, out)
    return out


@pytest.mark.parametrize(("change", "words"), [
    ({"num_experts_per_tok": 200}, ["num_experts_per_tok", "200", "128"]),
    ({"mlp_only_layers": [1000000]}, ["mlp_only_layers", "1000000"]),
    ({"num_hidden_layers": 10**12}, ["num_hidden_layers", "1,024"]),
    ({"decoder_sparse_step": 49}, ["decoder_sparse_step", "49"]),
    ({"hidden_size": 10**7}, ["hidden_size"]),
    ({"num_key_value_heads": 64}, ["num_key_value_heads", "64"]),
    ({"vocab_size": 10**9}, ["vocab_size"]),
    ({"max_position_embeddings": 10**10}, ["max_position_embeddings"]),
])
def test_inconsistent_or_absurd_qwen_moe_configs_are_refused(tmp_path, change, words):
    _refused(tmp_path, json.dumps({**QWEN3_MOE, **change}), *words)


def test_duplicate_keys_and_huge_integers_are_refused(tmp_path):
    text = json.dumps(QWEN3_MOE)
    _refused(tmp_path, text[:-1] + ', "num_experts_per_tok": 2}', "num_experts_per_tok", "repeated")
    _refused(tmp_path, text[:-1] + ', "rope_theta": ' + "9" * 400 + "}", "64 bits")


def test_mixtral_and_deepseek_relations(tmp_path):
    mixtral = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "num_local_experts": 8,
               "num_experts_per_tok": 9, "vocab_size": 32000, "max_position_embeddings": 32768}
    with pytest.raises(SpecError, match="num_experts_per_tok"):
        model_from_config(mixtral, name="m", where="m.json")
    model_from_config({**mixtral, "num_experts_per_tok": 2}, name="m", where="m.json")


@given(layers=st.integers(1, COUNT_MAX["num_hidden_layers"]), step=st.integers(1, 64),
       only=st.lists(st.integers(0, 2000), max_size=8))
def test_dense_layers_in_closed_form_match_the_per_layer_rule(layers, step, only):
    doc = {**QWEN3_MOE, "num_hidden_layers": layers, "decoder_sparse_step": step,
           "mlp_only_layers": sorted(set(only))}
    if step > layers or any(i >= layers for i in only):
        with pytest.raises(SpecError):
            model_from_config(doc, name="m", where="m.json")
        return
    m = model_from_config(doc, name="m", where="m.json")
    want = sum(1 for i in range(layers) if i in set(only) or (i + 1) % step != 0)
    assert m.dense_layers == want


def test_every_bundled_and_fixture_config_still_loads():
    from pathlib import Path

    from specsim.catalog.models import bundled_models, load_model

    for name in bundled_models():
        load_model(name)
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    for d in ("deepseek_v3", "llama_3_3_70b"):
        load_config_model(fixtures / d)
