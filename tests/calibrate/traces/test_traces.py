"""Trace readers and writers: validated dtypes, kind sniffing, round trips, and malformed files
that must raise SpecError naming the file and the column (never a pandas traceback)."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specsim.calibrate.traces.io import (
    FORMATS,
    read_engine_trace,
    read_kernel_trace,
    read_length_trace,
    read_stage_trace,
    read_trace,
    sniff_kind,
    write_engine_trace,
    write_kernel_trace,
    write_length_trace,
    write_stage_trace,
    write_trace,
)
from specsim.errors import SpecError

KERNEL_CSV = """\
# kind: kernel
# machine: test rig
op,model,tp,ep,pp,batch,q_per_seq,ctx_per_seq,time_s,weight_dtype,machine
decode,Qwen3-8B,1,1,1,4,1,512,0.0051,bf16,"NVIDIA H200, driver 550"
verify,Qwen3-8B,2,1,1,8,4,1024,0.0062,bf16,
prefill,Qwen3-8B,1,1,1,1,2048,0,0.061,bf16,
"""

ENGINE_CSV = """\
time_s,step_s,active_batch,total_context_tokens,k,tokens_emitted,accepted_tokens
0.02,0.02,4,2048,0,4,0
0.05,0.03,4,2060,3,10,6
"""


def _write(tmp_path, name, text, mode="w"):
    p = tmp_path / name
    if mode == "wb":
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def kernel_frame():
    return pd.DataFrame(
        {
            "op": ["decode", "verify", "prefill", "draft"],
            "model": ["Qwen3-8B"] * 4,
            "tp": [1, 2, 4, 1],
            "ep": [1, 1, 1, 1],
            "pp": [1, 1, 1, 1],
            "batch": [1, 8, 2, 16],
            "q_per_seq": [1, 4, 512, 1],
            "ctx_per_seq": [512.0, 1000.5, 0.0, 2048.0],
            "time_s": [0.004123456789012345, 0.0061, 0.03, 0.0009],
            "weight_dtype": ["bf16", "fp8", "bf16", "bf16"],
            "kv_dtype": ["bf16"] * 4,
            "drafter": [None, None, None, "eagle3"],
            "hardware": ["h200_sxm"] * 4,
            "machine": ["NVIDIA H200, torch 2.x", 'a "quoted" name', None, "x"],
        }
    )


def engine_frame():
    return pd.DataFrame(
        {
            "time_s": [0.02, 0.05, 0.09],
            "step_s": [0.02, 0.03, 0.04],
            "active_batch": [4, 4, 3],
            "total_context_tokens": [2048.0, 2060.0, 1500.0],
            "k": [0, 3, 3],
            "tokens_emitted": [4, 10, 7],
            "accepted_tokens": [0, 6, 4],
            "model": ["Qwen3-8B"] * 3,
            "tp": [1, 1, 1],
            "drafter": [None, "eagle3", "eagle3"],
            "rl_step": [0, 0, 1],
        }
    )


def length_frame():
    return pd.DataFrame({"length": [120, 4000, 16384], "prompt_id": ["a", "a", "b"], "rl_step": [3, 3, 3]})


def stage_frame():
    return pd.DataFrame(
        {
            "rl_step": [0, 1],
            "generation_s": [100.5, 60.25],
            "reward_s": [2.0, 2.0],
            "logprob_s": [10.0, 10.0],
            "train_s": [30.0, 30.0],
            "weight_sync_s": [3.0, 3.0],
            "step_s": [145.5, 105.25],
            "sd": [False, True],
            "tau": [np.nan, 2.4],
        }
    )


# --------------------------------------------------------------------------- reading


def test_read_kernel_dtypes_and_meta(tmp_path):
    p = _write(tmp_path, "k.csv", KERNEL_CSV)
    df = read_kernel_trace(p)
    assert list(df["op"]) == ["decode", "verify", "prefill"]
    assert df["tp"].dtype == np.int64 and df["batch"].dtype == np.int64 and df["q_per_seq"].dtype == np.int64
    assert df["time_s"].dtype == np.float64 and df["ctx_per_seq"].dtype == np.float64
    assert df.loc[0, "machine"] == "NVIDIA H200, driver 550" and df.loc[1, "machine"] is None
    assert df.attrs["kind"] == "kernel" and df.attrs["meta"]["machine"] == "test rig"
    assert df.attrs["path"] == str(p)


def test_optional_columns_default(tmp_path):
    p = _write(tmp_path, "k.csv", "op,model,tp,batch,q_per_seq,ctx_per_seq,time_s\ndecode,Qwen3-8B,1,2,1,10,0.01\n")
    df = read_kernel_trace(p)
    assert df.loc[0, "ep"] == 1 and df.loc[0, "pp"] == 1 and df["ep"].dtype == np.int64


@pytest.mark.parametrize(
    "text,kind",
    [
        (KERNEL_CSV, "kernel"),
        (ENGINE_CSV, "engine"),
        ("length\n10\n20\n", "lengths"),
        ("response_tokens,prompt_id\n10,a\n", "lengths"),
        ("12\n30\n44\n", "lengths"),  # header-less single column of numbers
        ("rl_step,generation_s,reward_s,logprob_s,train_s,weight_sync_s\n0,1,1,1,1,1\n", "stage"),
        ("# kind: engine\n" + ENGINE_CSV, "engine"),
    ],
)
def test_sniff(tmp_path, text, kind):
    p = _write(tmp_path, "t.csv", text)
    assert sniff_kind(p) == kind
    df = read_trace(p)
    assert df.attrs["kind"] == kind
    if kind == "lengths":
        assert "length" in df.columns and df["length"].dtype == np.int64


def test_jsonl_reader(tmp_path):
    lines = [
        json.dumps(
            {
                "time_s": 0.1,
                "step_s": 0.1,
                "active_batch": 2,
                "total_context_tokens": 100,
                "k": 3,
                "tokens_emitted": 5,
                "accepted_tokens": 3,
                "rl_step": 4,
            }
        ),
        json.dumps(
            {
                "time_s": 0.2,
                "step_s": 0.1,
                "active_batch": 2,
                "total_context_tokens": 102,
                "k": 0,
                "tokens_emitted": 2,
                "accepted_tokens": 0,
            }
        ),
    ]
    p = _write(tmp_path, "e.jsonl", "# kind: engine\n" + "\n".join(lines) + "\n")
    df = read_engine_trace(p)
    assert df.attrs["format"] == "jsonl"
    assert str(df["rl_step"].dtype) == "Int64" and pd.isna(df.loc[1, "rl_step"])  # optional column with a gap


# --------------------------------------------------------------------------- round trips


def _objects(df):
    """Text columns as object with None for missing (pandas 3 infers a str dtype for literals)."""
    out = df.copy()
    for col in out.columns:
        if not pd.api.types.is_numeric_dtype(out[col]) and not pd.api.types.is_bool_dtype(out[col]):
            out[col] = pd.Series([None if pd.isna(v) else v for v in out[col]], dtype=object, index=out.index)
    return out


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize(
    "kind,frame,writer,reader",
    [
        ("kernel", kernel_frame, write_kernel_trace, read_kernel_trace),
        ("engine", engine_frame, write_engine_trace, read_engine_trace),
        ("lengths", length_frame, write_length_trace, read_length_trace),
        ("stage", stage_frame, write_stage_trace, read_stage_trace),
    ],
)
def test_round_trip(tmp_path, suffix, kind, frame, writer, reader):
    df = frame()
    p = tmp_path / "sub" / f"trace{suffix}"  # folder is created
    writer(df, p, meta={"machine": "unit test", "comment": "hello: world"})
    back = reader(p)
    assert back.attrs["meta"]["machine"] == "unit test"
    assert "hello: world" in back.attrs["meta"]["comment"]
    pd.testing.assert_frame_equal(_objects(back[list(df.columns)]), _objects(df), check_dtype=False)
    for col in df.columns:  # dtypes as the format says
        spec = next(c for c in FORMATS[kind] if c.name == col)
        if spec.kind == "int":
            assert back[col].dtype == np.int64
        if spec.kind == "float":
            assert back[col].dtype == np.float64
    # reading what was written and writing it again is byte-identical
    p2 = tmp_path / f"again{suffix}"
    writer(back, p2)
    assert p2.read_text() == p.read_text()
    assert read_trace(p).attrs["kind"] == kind


def test_writer_rejects_invalid_and_keeps_old_file(tmp_path):
    p = tmp_path / "k.csv"
    write_kernel_trace(kernel_frame(), p)
    before = p.read_text()
    bad = kernel_frame()
    bad.loc[1, "time_s"] = -1.0
    with pytest.raises(SpecError) as ei:
        write_kernel_trace(bad, p)
    assert ei.value.field == "time_s" and ei.value.where == str(p)
    assert p.read_text() == before
    assert [f.name for f in tmp_path.iterdir()] == ["k.csv"]  # no temp file left behind


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["decode", "prefill"]),
            st.integers(1, 4096),
            st.integers(0, 10**6),
            st.floats(1e-7, 100, allow_nan=False),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_round_trip_property(tmp_path_factory, rows):
    df = pd.DataFrame(
        {
            "op": [r[0] for r in rows],
            "model": "Qwen3-8B",
            "tp": 1,
            "batch": [r[1] for r in rows],
            "q_per_seq": [1 if r[0] == "decode" else r[1] for r in rows],
            "ctx_per_seq": [float(r[2]) for r in rows],
            "time_s": [r[3] for r in rows],
        }
    )
    p = tmp_path_factory.mktemp("rt") / "k.csv"
    write_kernel_trace(df, p)
    back = read_kernel_trace(p)
    pd.testing.assert_frame_equal(back[list(df.columns)], df, check_dtype=False)
    assert (back["time_s"].to_numpy() == df["time_s"].to_numpy()).all()  # exact floats


# --------------------------------------------------------------------------- malformed files


HEADER = "op,model,tp,batch,q_per_seq,ctx_per_seq,time_s\n"
MALFORMED = [
    # (file name, content, reader, expected field, text expected in message)
    (
        "missing_col.csv",
        "op,model,tp,batch,q_per_seq,ctx_per_seq\ndecode,Qwen3-8B,1,1,1,0\n",
        read_kernel_trace,
        "time_s",
        "missing column",
    ),
    ("non_numeric.csv", HEADER + "decode,Qwen3-8B,1,abc,1,0,0.01\n", read_kernel_trace, "batch", "line 2"),
    ("fractional.csv", HEADER + "decode,Qwen3-8B,1,2.5,1,0,0.01\n", read_kernel_trace, "batch", "whole number"),
    ("negative_time.csv", HEADER + "decode,Qwen3-8B,1,1,1,0,-0.01\n", read_kernel_trace, "time_s", "> 0"),
    ("nan_time.csv", HEADER + "decode,Qwen3-8B,1,1,1,0,nan\n", read_kernel_trace, "time_s", "value missing"),
    ("inf_time.csv", HEADER + "decode,Qwen3-8B,1,1,1,0,inf\n", read_kernel_trace, "time_s", "finite"),
    ("unknown_op.csv", HEADER + "encode,Qwen3-8B,1,1,1,0,0.01\n", read_kernel_trace, "op", "decode"),
    ("zero_tp.csv", HEADER + "decode,Qwen3-8B,0,1,1,0,0.01\n", read_kernel_trace, "tp", ">= 1"),
    ("decode_q.csv", HEADER + "decode,Qwen3-8B,1,1,4,0,0.01\n", read_kernel_trace, "q_per_seq", "op=decode"),
    ("verify_q.csv", HEADER + "verify,Qwen3-8B,1,1,1,0,0.01\n", read_kernel_trace, "q_per_seq", "op=verify"),
    (
        "bad_dtype.csv",
        "op,model,tp,batch,q_per_seq,ctx_per_seq,time_s,weight_dtype\ndecode,Qwen3-8B,1,1,1,0,0.01,fp64\n",
        read_kernel_trace,
        "weight_dtype",
        "bf16",
    ),
    ("empty.csv", "", read_kernel_trace, "(file)", "empty"),
    ("blank.csv", "\n\n   \n", read_kernel_trace, "(file)", "empty"),
    ("comments_only.csv", "# kind: kernel\n# nothing here\n", read_kernel_trace, "(file)", "no records"),
    ("header_only.csv", HEADER, read_kernel_trace, "(file)", "at least one record"),
    ("ragged.csv", HEADER + "decode,Qwen3-8B,1,1\n", read_kernel_trace, "(file)", "7 comma-separated fields"),
    ("binary.csv", b"\xff\xfe\x00\x01op,model\n\x80\x81", read_kernel_trace, "(file)", "UTF-8"),
    ("nul.csv", "op,model\x00\n", read_kernel_trace, "(file)", "binary"),
    ("bad_json.jsonl", '{"length": 10}\n{"length": \n', read_length_trace, "(file)", "JSON object"),
    ("json_list.jsonl", "[1, 2]\n", read_length_trace, "(file)", "JSON object"),
    ("json_bool.jsonl", '{"length": true}\n', read_length_trace, "length", "whole number"),
    (
        "wrong_kind.csv",
        "# kind: engine\n" + HEADER + "decode,Qwen3-8B,1,1,1,0,0.01\n",
        read_kernel_trace,
        "kind",
        "declares",
    ),
    ("unknown_kind.csv", "# kind: banana\nlength\n1\n", read_trace, "kind", "one of"),
    ("unsniffable.csv", "a,b\n1,2\n", read_trace, "(file)", "kind"),
    ("dup_col.csv", "length,length\n1,2\n", read_length_trace, "length", "duplicate"),
    ("neg_accept.csv", ENGINE_CSV.replace("3,10,6", "3,10,-1"), read_engine_trace, "accepted_tokens", ">= 0"),
    (
        "too_many_accepted.csv",
        ENGINE_CSV.replace("3,10,6", "3,10,13"),
        read_engine_trace,
        "accepted_tokens",
        "k * active_batch",
    ),
    (
        "too_many_emitted.csv",
        ENGINE_CSV.replace("3,10,6", "3,17,6"),
        read_engine_trace,
        "tokens_emitted",
        "(k+1) * active_batch",
    ),
    ("zero_batch.csv", ENGINE_CSV.replace("0.03,4,2060", "0.03,0,2060"), read_engine_trace, "active_batch", ">= 1"),
    ("zero_length.csv", "length\n10\n0\n", read_length_trace, "length", "line 3"),
    (
        "neg_stage.csv",
        "rl_step,generation_s,reward_s,logprob_s,train_s,weight_sync_s\n0,1,1,-1,1,1\n",
        read_stage_trace,
        "logprob_s",
        ">= 0",
    ),
    (
        "bad_bool.csv",
        "rl_step,generation_s,reward_s,logprob_s,train_s,weight_sync_s,sd\n0,1,1,1,1,1,maybe\n",
        read_stage_trace,
        "sd",
        "boolean",
    ),
    ("missing_value.csv", HEADER + "decode,,1,1,1,0,0.01\n", read_kernel_trace, "model", "value missing"),
]


@pytest.mark.parametrize("name,content,reader,field,text", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_raises_spec_error(tmp_path, name, content, reader, field, text):
    p = _write(tmp_path, name, content, "wb" if isinstance(content, bytes) else "w")
    with pytest.raises(SpecError) as ei:
        reader(p)
    err = ei.value
    assert err.field == field
    assert err.where == str(p)
    msg = str(err)
    assert str(p) in msg and field in msg
    assert text in msg, msg


def test_missing_file(tmp_path):
    p = tmp_path / "nope.csv"
    with pytest.raises(SpecError) as ei:
        read_trace(p)
    assert ei.value.field == "(file)" and ei.value.where == str(p)


def test_directory_is_not_a_trace(tmp_path):
    with pytest.raises(SpecError) as ei:
        read_trace(tmp_path)
    assert ei.value.field == "(file)"


def test_unreadable_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can read a chmod-000 file")
    p = _write(tmp_path, "k.csv", KERNEL_CSV)
    p.chmod(0)
    try:
        with pytest.raises(SpecError):
            read_trace(p)
    finally:
        p.chmod(0o644)


def test_write_trace_unknown_kind(tmp_path):
    with pytest.raises(SpecError) as ei:
        write_trace(length_frame(), tmp_path / "x.csv", "banana")
    assert ei.value.field == "kind"


def test_readme_documents_every_column_and_its_examples_parse(tmp_path):
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "calibration" / "README.md").read_text()
    for kind, cols in FORMATS.items():
        assert f"`kind: {kind}`" in readme
        for c in cols:
            assert f"`{c.name}`" in readme, (kind, c.name)
    blocks = re.findall(r"```csv\n(.*?)```", readme, flags=re.DOTALL)
    assert len(blocks) == 4
    kinds = set()
    for i, block in enumerate(blocks):
        p = tmp_path / f"example{i}.csv"
        p.write_text(block)
        kinds.add(read_trace(p).attrs["kind"])
    assert kinds == set(FORMATS)
