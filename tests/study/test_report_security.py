"""User text is text: hostile strings in every text field of report.html (and the summaries it
renders) leave no live tag, handler, unsafe link or unlisted script, and the page's
Content-Security-Policy allows only its own sorting script."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markupsafe import escape

from specsim.study.report.html import REPORT_FILE, render_page, safe_markdown
from specsim.study.report.tables import md_text
from specsim.study.runner import run_scenario

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "scenarios" / "30b_a3b_h100_async.yaml"
SMALL = ["rollout.gpus=8", "training.gpus=16", "workload.prompts=8", "workload.group_size=4",
         "workload.max_response_tokens=2048", "workload.response_tokens={kind: lognormal, median: 300, p99: 1500}",
         "pipeline.steps=3", "sweep={speculation.k: [0, 3], replicates: 1}", "output.capacity.rollout_gpus=[8]",
         "output.plots=false"]

HOSTILE = [
    "<script>alert(1)</script>", "<img src=x onerror=alert(2)>", "[x](javascript:alert(3))",
    "[y](JaVaScRiPt:alert(4))", "![z](data:text/html,<script>alert(5)</script>)", "<a href='javascript:alert(6)'>a</a>",
    "\"><svg onload=alert(7)>", "'><iframe src=javascript:alert(8)>", "<style>body{display:none}</style>",
    "[r][ref]\n\n[ref]: javascript:alert(9)", "<javascript:alert(10)>", "| a | <b onclick=alert(11)>b</b> |",
    "&lt;script&gt;alert(12)&lt;/script&gt;", "`<script>`", "<!-- --><script>alert(13)</script>",
]
#: the tags a report may hold (the template's own and what Markdown makes of text)
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "nav", "a", "main", "h1", "h2", "h3", "h4", "p",
                "section", "div", "ul", "ol", "li", "figure", "img", "figcaption", "code", "table", "thead",
                "tbody", "tr", "th", "td", "pre", "dl", "dt", "dd", "script", "strong", "em", "hr", "br",
                "blockquote"}


class _Live(HTMLParser):
    """Every element, attribute and script of a page, as a browser's tokenizer sees them."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.scripts, self.metas, self._in_script = [], [], [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]
        if tag == "meta":
            self.metas.append(dict(attrs))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def assert_inert(page: str) -> None:
    """No tag outside the template's set, no event handler, no unsafe URL, one script: the page's,
    allowed by its hash in a Content-Security-Policy that loads nothing from anywhere."""
    p = _Live()
    p.feed(page)
    p.close()
    assert set(p.tags) <= ALLOWED_TAGS, set(p.tags) - ALLOWED_TAGS
    assert not [a for a in p.attrs if a[1].lower().startswith("on")]
    for tag, name, value in p.attrs:
        if name in ("href", "src"):
            assert re.match(r"^(#|https?:|data:image/png;base64,|[^:]*$)", value), (tag, name, value)
    assert p.tags.count("script") == 1 and p.tags.count("style") == 1
    csp = [m["content"] for m in p.metas if (m.get("http-equiv") or "").lower() == "content-security-policy"]
    assert len(csp) == 1
    digest = base64.b64encode(hashlib.sha256(p.scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp[0] and "default-src 'none'" in csp[0]
    assert "unsafe-inline" not in csp[0].split("script-src", 1)[1].split(";")[0]


def _page(text: str) -> str:
    table = pd.DataFrame({text: [text, 1.5], "x": [text, text]})
    plots = [{"name": text, "file": text, "data": "AAAA", "path": text, "csv": text, "caption": text}]
    return render_page(title=text, lede=text, caveat_list=[text, text], summary_md=f"# t\n\n{text}\n\n- {text}\n\n"
                       f"| a | b |\n|---|---|\n| {text} | {md_text(text)} |\n", plots=plots, table=table,
                       rows_note=text, resolved_yaml=text, provenance={text: text})


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_text_in_every_field_of_the_page_is_inert(text):
    page = _page(text)
    assert_inert(page)
    assert f"<h1>{escape(text)}</h1>" in page        # the text is shown, as text


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("<>\"'`=/:[]()!|*_&;#\\ \nabjscriptvlonerx")), max_size=60))
def test_any_text_renders_inert(text):
    assert_inert(_page(text))


def test_markdown_keeps_safe_links_and_drops_unsafe_ones():
    html = safe_markdown("[a](https://x.org/p) [b](plots/f.png) [c](#trust) [d](javascript:alert(1)) "
                         "[e](java\tscript:alert(1)) ![f](data:text/html,x)")
    assert 'href="https://x.org/p"' in html and 'href="plots/f.png"' in html and 'href="#trust"' in html
    assert "javascript" not in html and "data:" not in html
    assert safe_markdown("<b>x</b>") == "<p>&lt;b&gt;x&lt;/b&gt;</p>"


def test_md_text_reads_as_itself():
    assert safe_markdown(md_text("*a* [b](c) | <i>d</i> e_f _g_")) == \
        "<p>*a* [b](c) | &lt;i&gt;d&lt;/i&gt; e_f _g_</p>"


def test_a_run_with_a_hostile_name_and_description_writes_an_inert_report(tmp_path):
    out = tmp_path / "run"
    run_scenario(SCEN, [*SMALL, "name=<img src=x onerror=alert(1)>",
                        "description=<script>alert(2)</script> [x](javascript:alert(3)) <b onmouseover=alert(4)>b</b>"],
                 out=out, jobs=1, progress=False)
    page = (out / REPORT_FILE).read_text(encoding="utf-8")
    assert_inert(page)
    assert "&lt;script&gt;alert(2)" in page
    md = (out / "summary.md").read_text(encoding="utf-8")
    prose = re.sub(r"(`+)[^`].*?\1", "", md.split("## Resolved scenario")[0], flags=re.S)   # code is code
    assert "<script>" not in prose and "<img" not in prose and not re.search(r"(?<!\\)\]\(javascript", prose)
    assert "&lt;img src=x onerror=alert(1)&gt;" in md


def test_a_name_with_tex_markup_is_drawn_as_text_on_every_plot(tmp_path):
    from small_sweep import TINY_SYNC

    out = tmp_path / "run"
    doc = {**TINY_SYNC, "name": "a$x^{$ _b", "output": {"plots": True}}
    (tmp_path / "s.yaml").write_text(__import__("yaml").safe_dump(doc), encoding="utf-8")
    res = run_scenario(tmp_path / "s.yaml", [], out=out, jobs=1, progress=False)
    assert res.out_dir and list((out / "plots").glob("*.png"))
    assert_inert((out / REPORT_FILE).read_text(encoding="utf-8"))
