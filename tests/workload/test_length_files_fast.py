"""Length files of every shape read in C (or in one pass) give exactly what a plain line-by-line
reader gives, and fall back to the strict reader's error naming the line; the machine cache of
parsed files is used across processes and never changes an answer."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specsim.errors import SpecError
from specsim.workload.lengths import parsed_cache
from specsim.workload.lengths.checks import read_lengths_file


def _oracle_csv(text: str, column: str) -> list[float]:
    """The column of a headered CSV, read by the csv module, one row at a time."""
    rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    col = [c.strip().lower() for c in rows[0]].index(column)
    return [float(r[col]) for r in rows[1:]]


cells = st.integers(min_value=1, max_value=2**40)


@given(st.lists(st.tuples(cells, cells, cells), min_size=1, max_size=40),
       st.sampled_from(["step,response_length,prompt", "Response_Length,x,y", "a,b,length"]),
       st.booleans())
def test_headered_csv_matches_a_line_by_line_reader(tmp_path_factory, rows, header, crlf):
    nl = "\r\n" if crlf else "\n"
    text = header + nl + nl.join(",".join(map(str, r)) for r in rows) + nl
    path = tmp_path_factory.mktemp("csv") / "lengths.csv"
    path.write_text(text, newline="")
    column = next(c for c in header.lower().split(",") if c in ("length", "response_length"))
    assert read_lengths_file(path, "f").tolist() == _oracle_csv(text, column)


@given(st.lists(st.one_of(cells, st.lists(cells, min_size=1, max_size=4)), min_size=1, max_size=40),
       st.sampled_from(["response_length", "generation_lengths", None]))
def test_jsonl_matches_a_line_by_line_reader(tmp_path_factory, values, key):
    records = values if key is None else [{"step": i, key: v} for i, v in enumerate(values)]
    path = tmp_path_factory.mktemp("jsonl") / "lengths.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    expected = [float(x) for v in values for x in (v if isinstance(v, list) else [v])]
    assert read_lengths_file(path, "f").tolist() == expected


@pytest.mark.parametrize(("name", "text", "line"), [
    ("short_row.csv", "step,length\n1,10\n2\n3,30\n", "line 3"),
    ("long_row.csv", "step,length\n1,10\n2,20,5\n3,30\n", "line 3"),
    ("fraction.csv", "step,length\n1,10\n2,20.5\n", "line 3"),
    ("zero.csv", "step,length\n1,10\n2,0\n", "line 3"),
    ("text.csv", "step,length\n1,10\n2,abc\n", "line 3"),
    ("two_values.jsonl", '{"length": 10}\n{"length": 20} {"length": 30}\n', "line 2"),
    ("split_object.jsonl", '{"length": 10, "a": [1\n]}\n', "line 1"),
    ("duplicate_key.jsonl", '{"length": 10}\n{"length": 20, "length": 30}\n', "length"),
    ("bool.jsonl", '{"length": 10}\n{"length": true}\n', "line 2"),
    ("missing_key.jsonl", '{"length": 10}\n{"other": 20}\n', "line 2"),
    ("huge_other_field.jsonl", '{"length": 10, "x": 1}\n{"length": 20, "x": 1e999}\n', "1e999"),
])
def test_defects_fall_back_to_the_strict_reader_which_names_them(tmp_path, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        read_lengths_file(path, "f")
    assert line in str(err.value)


def test_mixed_key_sets_follow_the_first_listed_column_per_record(tmp_path):
    """A record that has `length` as well as `response_length` is read by `length` (the first of
    the default columns), as the strict reader does; the fast reader must not apply the first
    record's choice to it."""
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"response_length": 10}\n{"response_length": 20, "length": 7}\n')
    assert read_lengths_file(path, "f").tolist() == [10.0, 7.0]


def test_a_parsed_file_is_loaded_from_the_cache_by_a_later_reader(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(parsed_cache, "MIN_CACHED_LENGTHS", 1)
    path = tmp_path / "l.csv"
    path.write_text("step,length\n1,10\n2,20\n")
    st_ = os.stat(path)
    first = parsed_cache.parsed_lengths(path, "f", None, st_.st_mtime_ns, st_.st_size)
    assert len(list((tmp_path / "cache" / "lengths").glob("*.npy"))) == 1

    def no_parse(*args, **kwargs):
        raise AssertionError("parsed again although the cache holds this file version")

    monkeypatch.setattr(parsed_cache, "read_lengths_file", no_parse)
    again = parsed_cache.parsed_lengths(path, "f", None, st_.st_mtime_ns, st_.st_size)
    assert again.tolist() == first.tolist() == [10.0, 20.0]


def test_an_edited_file_or_a_damaged_entry_is_parsed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(parsed_cache, "MIN_CACHED_LENGTHS", 1)
    path = tmp_path / "l.csv"
    path.write_text("length\n10\n20\n")
    s1 = os.stat(path)
    assert parsed_cache.parsed_lengths(path, "f", None, s1.st_mtime_ns, s1.st_size).tolist() == [10.0, 20.0]
    path.write_text("length\n10\n20\n30\n")
    s2 = os.stat(path)
    assert parsed_cache.parsed_lengths(path, "f", None, s2.st_mtime_ns, s2.st_size).tolist() == [10.0, 20.0, 30.0]
    for entry in (tmp_path / "cache" / "lengths").glob("*.npy"):
        entry.write_bytes(b"not an array")
    assert parsed_cache.parsed_lengths(path, "f", None, s2.st_mtime_ns, s2.st_size).tolist() == [10.0, 20.0, 30.0]


def test_an_unwritable_cache_changes_nothing(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SPECSIM_CACHE_DIR", str(blocker))      # a file where the folder should be
    monkeypatch.setattr(parsed_cache, "MIN_CACHED_LENGTHS", 1)
    path = tmp_path / "l.csv"
    path.write_text("length\n10\n20\n")
    s = os.stat(path)
    assert parsed_cache.parsed_lengths(path, "f", None, s.st_mtime_ns, s.st_size).tolist() == [10.0, 20.0]
    assert np.array_equal(read_lengths_file(path, "f"), [10.0, 20.0])
