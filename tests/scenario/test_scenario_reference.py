"""The scenario reference page is generated from the schema: checked in, complete, and readable."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, create_model

from specsim.scenario import Scenario, load_scenario
from specsim.scenario.reference import (
    REGENERATE,
    render_default,
    render_type,
    scenario_reference_markdown,
    sections,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "scenario.md"


# ----------------------------------------------------------------------------- the checked-in page
def test_checked_in_page_is_the_generated_one():
    want = scenario_reference_markdown()
    have = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    assert have == want, (
        f"{PAGE.relative_to(ROOT)} is out of date with specsim/scenario/schema.py; regenerate it "
        f"from the repository root with:\n    {REGENERATE}")


def test_generation_is_deterministic():
    assert scenario_reference_markdown() == scenario_reference_markdown()


# ----------------------------------------------------------------------------- completeness
def _blocks(page: str) -> dict[str, str]:
    """Section heading line -> the text up to the next section heading."""
    out, head = {}, None
    for line in page.splitlines():
        if line.startswith("### "):
            head = line
            out[head] = ""
        elif head is not None:
            out[head] += line + "\n"
    return out


def test_every_section_and_field_is_documented():
    page = scenario_reference_markdown()
    blocks = _blocks(page)
    found = sections()
    models = [m for m, _ in found]
    # every nested section of the schema is reached, each once
    assert models[0] is Scenario and len(set(models)) == len(models)
    assert {"RolloutSection", "TrainingSection", "WorkloadSection", "LengthSpec", "DrafterSection",
            "StalenessSection", "SpeculationSection", "PipelineSection", "OutputSection",
            "CapacitySection"} <= {m.__name__ for m in models}
    assert len(blocks) == len(found)
    missing = []
    for (model, paths), (head, block) in zip(found, blocks.items()):
        doc = (model.__dict__.get("__doc__") or "").strip()
        if not doc:
            missing.append(f"{model.__name__}: no docstring")
        for p in paths:
            assert (f"`{p}`" if p else "top level") in head, (head, p)
        for name, fld in model.model_fields.items():
            where = ".".join(x for x in (paths[0], name) if x)
            if not (fld.description or "").strip():
                missing.append(f"{where}: no description")
            rows = [ln for ln in block.splitlines() if ln.startswith(f"| `{name}` |")]
            if len(rows) != 1:
                missing.append(f"{where}: {len(rows)} rows in the page")
                continue
            cells = [c.strip() for c in rows[0].split(" | ")]
            if len(cells) != 4 or not cells[1] or not cells[2] or len(cells[3].rstrip("|").strip()) < 3:
                missing.append(f"{where}: incomplete row {rows[0]!r}")
    assert not missing, "schema fields without a reference entry (add Field(description=...)):\n" + "\n".join(missing)


def test_table_rows_have_four_cells():
    """A `|` inside a cell is escaped, so every row splits into exactly four cells."""
    for line in scenario_reference_markdown().splitlines():
        if line.startswith("| `"):
            unescaped = line.replace("\\|", "")
            assert unescaped.count("|") == 5, line


# ----------------------------------------------------------------------------- the type renderer
def _field(annotation, **kw):
    return create_model("M", x=(annotation, Field(**kw))).model_fields["x"]


@pytest.mark.parametrize("annotation, kw, want", [
    (int, {"ge": 1}, "int ≥ 1"),
    (float | None, {"default": None, "gt": 0, "le": 1}, "float in (0, 1] | null"),
    (Literal["a", "b"], {"default": "a"}, "a | b"),
    (int | None, {"default": None, "ge": 1}, "int ≥ 1 | null"),
    (float, {"default": 0.0, "ge": 0, "lt": 1}, "float in [0, 1)"),
    (float, {"default": 0.5, "lt": 1}, "float < 1"),
    (int, {"default": 1, "le": 10**6}, "int ≤ 10⁶"),
    (int, {"default": 0, "ge": 0, "le": 2**63 - 1}, "int in [0, 2⁶³ − 1]"),
    (float, {"default": 0.0, "ge": -0.5, "le": 1.0}, "float in [-0.5, 1]"),
    (str, {}, "str"),
    (bool, {"default": True}, "bool"),
    (list[int] | None, {"default": None}, "list[int] | null"),
    (list[list[float]] | None, {"default": None, "max_length": 10}, "list[list[float]] ≤ 10 items | null"),
    (dict[str, Any], {"default_factory": dict}, "dict[str, any]"),
])
def test_render_type_examples(annotation, kw, want):
    assert render_type(_field(annotation, **kw)) == want


@given(base=st.sampled_from([int, float]), nullable=st.booleans(),
       lo=st.one_of(st.none(), st.tuples(st.sampled_from(["ge", "gt"]), st.integers(-999, 999))),
       hi=st.one_of(st.none(), st.tuples(st.sampled_from(["le", "lt"]), st.integers(-999, 999))))
def test_render_type_property(base, nullable, lo, hi):
    """Any int/float field with any bounds renders as `<type> <bounds>[ | null]`, the bounds
    written exactly as the constraints say (closed/open, inclusive/exclusive)."""
    kw = {}
    if lo:
        kw[lo[0]] = lo[1]
    if hi:
        kw[hi[0]] = hi[1]
    annotation = base | None if nullable else base
    got = render_type(_field(annotation, default=None, **kw))
    if lo and hi:
        bounds = f" in {'[' if lo[0] == 'ge' else '('}{lo[1]}, {hi[1]}{']' if hi[0] == 'le' else ')'}"
    elif lo:
        bounds = f" {'≥' if lo[0] == 'ge' else '>'} {lo[1]}"
    elif hi:
        bounds = f" {'≤' if hi[0] == 'le' else '<'} {hi[1]}"
    else:
        bounds = ""
    assert got == f"{base.__name__}{bounds}" + (" | null" if nullable else "")


def test_render_default():
    class Inner(BaseModel):
        a: int = 1
        b: str = "x"

    m = create_model(
        "M", req=(int, Field()), none=(int | None, Field(default=None)), flag=(bool, Field(default=False)),
        empty=(str, Field(default="")), ratio=(float, Field(default=0.9)), section=(Inner, Field(default=Inner())),
        changed=(Inner, Field(default=Inner(b="y"))), mapping=(dict[str, Any], Field(default_factory=lambda: {"k.p": "off"})),
        listed=(list[int], Field(default_factory=lambda: [1, 2])))
    got = {name: render_default(f) for name, f in m.model_fields.items()}
    assert got == {"req": "—", "none": "`null`", "flag": "`false`", "empty": '`""`', "ratio": "`0.9`",
                   "section": "defaults", "changed": "`{b: y}`", "mapping": "`{k.p: off}`", "listed": "`[1, 2]`"}


# ----------------------------------------------------------------------------- behaviour unchanged
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def test_there_are_scenarios():
    assert SCENARIOS


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_bundled_scenario_still_loads(path):
    sc = load_scenario(path)
    assert isinstance(sc, Scenario) and sc.rollout.gpus >= 1
