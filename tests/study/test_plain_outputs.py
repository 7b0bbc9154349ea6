"""Outputs are written from plain Python types (a value that came through numpy or pandas is the
YAML/JSON it stands for), and a failure on the output side is a bug naming the file, never a
"valid YAML" complaint about the user's input; an OS error while writing names the file asked for."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
import typer.testing
import yaml
from hypothesis import given
from hypothesis import strategies as st
from small_sweep import TINY_SYNC

from specsim import atomic
from specsim.cli.app import app
from specsim.cli.common import user_errors

NUMPY = st.one_of(st.booleans().map(np.bool_), st.integers(-2**63, 2**63 - 1).map(np.int64),
                  st.floats(allow_nan=False).map(np.float64), st.integers(0, 255).map(np.uint8),
                  st.text(st.characters(blacklist_characters="\x00"), max_size=5).map(np.str_))
TREES = st.recursive(st.one_of(NUMPY, st.none(), st.booleans(), st.integers(), st.text(max_size=5)),
                     lambda kids: st.one_of(st.lists(kids, max_size=3), st.tuples(kids, kids),
                                            st.dictionaries(st.text(max_size=3), kids, max_size=3)), max_leaves=12)


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and len(a) == len(b) and all(_same(v, b[str(k)]) for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return type(b) in (bool, int, float, str, type(None)) and b == a


@given(TREES)
def test_plain_makes_every_numpy_value_its_python_twin(tree):
    out = atomic.plain(tree)
    assert _same(tree, out)
    assert _same(tree, yaml.safe_load(atomic.dump_yaml(tree)))
    assert _same(tree, json.loads(json.dumps(out)))


def test_a_sweep_over_a_true_false_field_writes_every_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = {**TINY_SYNC, "pipeline": {"mode": "async", "steps": 3, "warmup_steps": 1}, "training": {"gpus": 1}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    res = typer.testing.CliRunner().invoke(app, ["run", "s.yaml", "--no-progress", "--jobs", "1", "--out", "r",
                                                 "--set", "sweep={pipeline.partial_rollouts: [false, true]}"])
    assert res.exit_code == 0, res.output
    for f in ("summary.md", "summary.json", "report.html", "points.csv"):
        assert (tmp_path / "r" / f).is_file(), f
    summary = json.loads((tmp_path / "r" / "summary.json").read_text(encoding="utf-8"))
    assert summary["swept"]["pipeline.partial_rollouts"] == [False, True]
    assert "partial_rollouts=true" in (tmp_path / "r" / "summary.md").read_text(encoding="utf-8")


def test_an_output_yaml_error_is_a_bug_naming_the_file(tmp_path, capsys):
    with pytest.raises(atomic.OutputError, match=str(tmp_path / "x.yaml")):
        atomic.write_yaml(tmp_path / "x.yaml", {"a": object()})
    assert not (tmp_path / "x.yaml").exists()
    import typer

    for exc in (yaml.representer.RepresenterError("cannot represent an object", 1),
                atomic.OutputError(f"{tmp_path}/x.yaml: YAML output")):
        with pytest.raises(typer.Exit) as info, user_errors():
            raise exc
        assert info.value.exit_code == 1
        err = capsys.readouterr().err
        assert "internal error" in err and "valid YAML" not in err


def test_an_os_error_while_writing_names_the_file_not_its_temporary(tmp_path, monkeypatch):
    def full(_fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OSError) as info:
        atomic.write_text(tmp_path / "summary.md", "x")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "summary.md")
    monkeypatch.undo()

    def read_only(*_a, **_k):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".summary.md.abc.tmp"))

    monkeypatch.setattr(atomic.tempfile, "mkstemp", read_only)
    with pytest.raises(PermissionError) as info:
        atomic.write_text(tmp_path / "summary.md", "x")
    assert info.value.filename == str(tmp_path / "summary.md")
    assert not list(Path(tmp_path).glob(".*.tmp"))
