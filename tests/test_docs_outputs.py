"""Docs that cannot drift (benchmarks/docs_outputs.py): every quick output the README and the guide
quote equals what its command prints today, every marker names a known quote, and every quote is
quoted somewhere. The expensive quotes (main job, plan, suite, timings) are written by
`python benchmarks/docs_outputs.py --expensive` on a named machine, not checked here."""

import functools
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specsim.cli.app import app

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("docs_outputs", ROOT / "benchmarks" / "docs_outputs.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod            # its dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def _in_process(*args: str) -> str:
    """stdout of `specsim ARGS` run in this process (typer's CliRunner) from the repository root,
    with the environment docs_outputs.specsim gives its subprocess: the same text (a command's
    console is 160 columns wide whenever stdout is not a terminal, cli/common.py console) without
    an interpreter start and specsim's imports per command (~2.5 s of CPU each)."""
    env = {"COLUMNS": _module().COLUMNS, "NO_COLOR": "1", "TERM": "dumb"}
    before = Path.cwd()
    os.chdir(ROOT)
    try:
        res = CliRunner().invoke(app, list(args), env=env)
    finally:
        os.chdir(before)
    assert res.exit_code == 0, f"specsim {' '.join(args)} failed ({res.exit_code}):\n{res.output[-2000:]}"
    return res.stdout


@pytest.mark.long
def test_every_cheap_quote_matches_its_command(monkeypatch):
    m = _module()
    monkeypatch.setattr(m, "specsim", _in_process)
    values = {k: q.make() for k, q in m.quotes().items() if q.cheap}
    found = m.problems(values, set(m.quotes()))
    assert not found, ("the docs quote outputs their commands no longer print; regenerate with\n"
                       "    .venv/bin/python benchmarks/docs_outputs.py\n" + "\n".join(found))


def test_markers_are_filled_in_place_and_unknown_ones_are_named(tmp_path, monkeypatch):
    m = _module()
    text = ("a <!-- fact:x -->old<!-- /fact --> b\n<!-- docs-output:t -->\n```text\nold\n```\n<!-- /docs-output -->\n"
            "c <!-- fact:zzz -->1<!-- /fact -->\n")
    new = m.fill(text, {"x": "16", "t": "row 1\nrow 2"})
    assert "<!-- fact:x -->16<!-- /fact -->" in new and "```text\nrow 2\n```" not in new
    assert "<!-- docs-output:t -->\n```text\nrow 1\nrow 2\n```\n<!-- /docs-output -->" in new
    assert m.fill(new, {"x": "16", "t": "row 1\nrow 2"}) == new                          # idempotent
    doc = tmp_path / "page.md"
    doc.write_text(new)
    monkeypatch.setattr(m, "documents", lambda: [doc])
    monkeypatch.setattr(m, "ROOT", tmp_path)
    found = m.problems({"x": "17"}, {"x", "t", "never"})
    assert any("x quotes '16'" in f for f in found) and any("unknown quote 'zzz'" in f for f in found)
    assert "no document quotes 'never'" in found
