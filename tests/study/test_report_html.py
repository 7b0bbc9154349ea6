"""report.html: a well-formed, self-contained page holding every table, plot and caveat of its
results folder (parsed on every run), and the caveat rules themselves."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import yaml

from specsim.study.report.html import LONG_DRAFT_K, REPORT_FILE, caveats
from specsim.study.runner import run_scenario

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "scenarios" / "30b_a3b_h100_async.yaml"
SMALL = ["rollout.gpus=8", "training.gpus=16", "workload.prompts=8", "workload.group_size=4",
         "workload.max_response_tokens=2048", "workload.response_tokens={kind: lognormal, median: 300, p99: 1500}",
         "pipeline.steps=4", "sweep={speculation.k: [0, 3], replicates: 2}", "output.capacity.rollout_gpus=[8]"]
VOID = {"meta", "link", "img", "br", "hr", "input", "source", "col", "area", "base", "wbr"}


class _Page(HTMLParser):
    """Collects what the test checks and fails on unbalanced or misnested tags."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.ids, self.imgs, self.tables = [], [], set(), [], []
        self._cell, self._row, self._in_pre, self.pre = None, None, False, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "img":
            self.imgs.append(a)
        if tag in VOID:
            return
        self.stack.append(tag)
        if tag == "table":
            self.tables.append({"cls": a.get("class", ""), "rows": []})
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "pre":
            self._in_pre = True
            self.pre.append("")

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
            return
        self.stack.pop()
        if tag in ("td", "th") and self._row is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append(self._row)
        elif tag == "pre":
            self._in_pre = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        if self._in_pre:
            self.pre[-1] += data


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "run"
    run_scenario(SCEN, SMALL, out=out, jobs=1, progress=False)
    return out


def test_the_report_is_well_formed_and_self_contained(folder):
    page = _Page()
    page.feed((folder / REPORT_FILE).read_text(encoding="utf-8"))
    page.close()
    assert page.errors == [] and page.stack == []
    assert {"trust", "summary", "plots", "points", "scenario", "provenance"} <= page.ids
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["plots"], "the small sweep draws plots"
    srcs = [i["src"] for i in page.imgs]
    assert len(srcs) == len(summary["plots"])
    for src, file in zip(srcs, summary["plots"].values(), strict=True):
        assert src.startswith("data:image/png;base64,")            # embedded, not linked
        assert base64.b64decode(src.split(",", 1)[1]) == (folder / "plots" / file).read_bytes()
    sortable = [t for t in page.tables if "sortable" in t["cls"]]
    assert len(sortable) == 1
    points = pd.read_csv(folder / "points.csv")
    header, *rows = sortable[0]["rows"]
    assert header == list(points.columns) and len(rows) == len(points)
    assert yaml.safe_load(page.pre[-1]) == yaml.safe_load((folder / "resolved.yaml").read_text(encoding="utf-8"))


def test_the_summary_tables_are_on_the_page(folder):
    html = (folder / REPORT_FILE).read_text(encoding="utf-8")
    md = (folder / "summary.md").read_text(encoding="utf-8")
    assert "Best configuration" in html and "SD gain over the best AR configuration" in md
    assert "SD gain over the best AR configuration" in html
    assert "```" not in html                                           # fenced YAML is rendered, not leaked


def _resolved(**over):
    doc = {"model": "Qwen3-8B", "hardware": "gb200", "pipeline": {"mode": "sync"},
           "rollout": {"gpus": 32, "tp": 1, "ep": 1, "pp": 1}, "speculation": {"k": 3}}
    doc.update(over)
    return doc


def test_caveat_rules():
    base = caveats(_resolved(), {"swept": {}})
    assert not any("projection" in c for c in base)                    # a validated configuration
    assert any("projection" in c for c in caveats(_resolved(model="Qwen3-235B-A22B"), {}))
    assert any("No measured RL run" in c for c in caveats(_resolved(model="Qwen3-235B-A22B", hardware="b200"), {}))
    ar_only = caveats(_resolved(model="Qwen3-235B-A22B"), {})            # NeMo-RL's AR rows, no SD run
    assert any("measured AR step times" in c for c in ar_only) and not any("No measured RL run" in c for c in ar_only)
    assert any(f"k ≥ {LONG_DRAFT_K}" in c for c in caveats(_resolved(), {"swept": {"speculation.k": [0, 3, 5]}}))
    assert not any(f"k ≥ {LONG_DRAFT_K}" in c for c in base)
    async_ = caveats(_resolved(pipeline={"mode": "async"}), {})
    assert any("async" in c for c in async_) and any("NVLink" in c for c in async_)
    assert any("over-provisioned" in c for c in caveats(_resolved(), {"best": {"mean_active_batch": 1.7}}))
    assert any("Run warning: x" == c for c in caveats(_resolved(), {"run": {"warnings": ["x"]}}))
    gb200 = [c for c in caveats(_resolved(hardware="gb200"), {}) if "GB200" in c]   # NeMo-RL's measured steps
    assert len(gb200) == 1 and "optimistic" in gb200[0]
    assert not any("GB200" in c for c in caveats(_resolved(hardware="h100_sxm"), {}))
    h100 = [c for c in caveats(_resolved(hardware="h100_sxm", model="Qwen3-235B-A22B"), {}) if "PR #3278" in c]
    assert len(h100) == 1 and "split" in h100[0]                       # NeMo-RL's measured stage times
    assert not any("PR #3278" in c for c in caveats(_resolved(hardware="gb200", model="Qwen3-235B-A22B"), {}))
    assert not any("PR #3278" in c for c in caveats(_resolved(hardware="h100_sxm"), {}))
