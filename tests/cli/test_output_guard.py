"""One output guard for every command that writes (atomic.output_path / output_folder): checked on
the resolved path (`MISSING/../DIR` is DIR), a dangling link and "" refused, a foreign folder or an
existing file kept unless --force, and a folder locked while a command writes into it. Each refusal
comes before any work: an `error:` naming --out, exit 2, the user's files untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer.testing
import yaml
from small_sweep import TINY_SYNC

from specsim import atomic
from specsim.cli.app import app

#: every command that writes a results folder, with its arguments before --out
FOLDER_COMMANDS = {
    "run": lambda s: ["run", s, "--no-progress"],
    "plan": lambda s: ["plan", s, "--no-progress"],
    "explain": lambda s: ["explain", s],
    "project": lambda s: ["project", s, "--no-progress"],
    "validate": lambda s: ["validate", "--calibration", str(Path(__file__).resolve().parents[2] / "calibration")],
    "calibrate kernels": lambda s: ["calibrate", "kernels"],
}
#: every command that writes one file
FILE_COMMANDS = {
    "calibrate traces": lambda s: ["calibrate", "traces", "x.csv", "--hardware", "h200_sxm"],
    "calibrate collect": lambda s: ["calibrate", "collect", "--tiny"],
}


def cli(*args: str):
    res = typer.testing.CliRunner().invoke(app, list(args))
    return res, res.output + (res.stderr if res.stderr_bytes is not None else "")


def refused(res, text: str, *words: str) -> None:
    assert res.exit_code == 2, text
    assert "Traceback" not in text and "internal error" not in text, text
    assert "error:" in text and "--out" in text, text
    for w in words:
        assert w in text, (w, text)


@pytest.fixture
def scen(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(TINY_SYNC), encoding="utf-8")
    return str(p)


def _users_folder(tmp_path: Path) -> Path:
    d = tmp_path / "DIR"
    d.mkdir()
    for name in ("summary.md", "points.csv", "report.html"):
        (d / name).write_text(f"the user's {name}", encoding="utf-8")
    return d


def _untouched(d: Path) -> None:
    assert sorted(p.name for p in d.iterdir()) == ["points.csv", "report.html", "summary.md"]
    for p in d.iterdir():
        assert p.read_text(encoding="utf-8") == f"the user's {p.name}"


@pytest.mark.parametrize("cmd", sorted(FOLDER_COMMANDS))
def test_dotdot_through_a_missing_folder_is_checked_where_it_lands(cmd, scen, tmp_path):
    d = _users_folder(tmp_path)
    res, text = cli(*FOLDER_COMMANDS[cmd](scen), "--out", "MISSING/../DIR")
    refused(res, text, "--force", "summary.md")
    _untouched(d)
    assert not (tmp_path / "MISSING").exists()


@pytest.mark.parametrize("cmd", sorted(FOLDER_COMMANDS))
def test_a_link_to_a_users_folder_is_checked_as_that_folder(cmd, scen, tmp_path):
    d = _users_folder(tmp_path)
    (tmp_path / "link").symlink_to(d)
    res, text = cli(*FOLDER_COMMANDS[cmd](scen), "--out", "link")
    refused(res, text, "--force")
    _untouched(d)


@pytest.mark.parametrize("cmd", sorted(FOLDER_COMMANDS))
def test_a_refused_out_starts_no_worker_pool(cmd, scen, tmp_path, monkeypatch):
    """"Before any work": no command starts its worker processes for a folder it then refuses
    (`specsim run` starts its pool while it plans the study, and checks --out before that)."""
    from specsim.study import executors

    started = []

    def no_pool(*args, **kwargs):
        started.append(args)
        raise RuntimeError("a worker pool started for a refused --out")

    monkeypatch.setattr(executors, "WorkerPool", no_pool)
    _users_folder(tmp_path)
    jobs = ["--jobs", "2"] if cmd in ("run", "plan", "project") else []
    res, text = cli(*FOLDER_COMMANDS[cmd](scen), "--out", "DIR", *jobs)
    refused(res, text, "--force")
    assert not started


@pytest.mark.parametrize("cmd", sorted(FOLDER_COMMANDS) + sorted(FILE_COMMANDS))
def test_a_dangling_link_and_an_empty_path_are_refused(cmd, scen, tmp_path):
    args = {**FOLDER_COMMANDS, **FILE_COMMANDS}[cmd](scen)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x.csv")
    res, text = cli(*args, "--out", "dangling")
    refused(res, text, "symbolic link")
    assert os.path.islink(tmp_path / "dangling") and not (tmp_path / "nowhere").exists()
    res, text = cli(*args, "--out", "")
    refused(res, text, "empty path")


@pytest.mark.parametrize("cmd", sorted(FOLDER_COMMANDS))
def test_a_folder_another_writer_holds_is_refused_naming_it(cmd, scen, tmp_path):
    out = atomic.output_path(tmp_path / "r", folder=True)
    with atomic.FolderLock(out):
        res, text = cli(*FOLDER_COMMANDS[cmd](scen), "--out", str(out), "--force")
    refused(res, text, f"process {os.getpid()} holds its lock")


@pytest.mark.parametrize("cmd", sorted(FOLDER_COMMANDS))
def test_a_second_concurrent_invocation_on_the_same_folder_exits_2(cmd, scen, tmp_path):
    """Another process writing into the folder (here one holding its lock, as a running command
    does from its first write to its last) makes the command exit 2 naming that process, before
    any work: nothing in the folder but the marker and the lock file."""
    import subprocess
    import sys

    out = atomic.output_path(tmp_path / "r", folder=True)
    code = ("import sys\nfrom specsim import atomic\n"
            f"with atomic.FolderLock({str(out)!r}):\n    print('held', flush=True)\n    sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        assert holder.stdout.readline().strip() == "held"
        res, text = cli(*FOLDER_COMMANDS[cmd](scen), "--out", str(out))
    finally:
        holder.communicate("", timeout=30)
    refused(res, text, f"process {holder.pid} holds its lock")
    assert sorted(p.name for p in out.iterdir()) == sorted([atomic.MARKER, atomic.LOCK])


@pytest.mark.parametrize("cmd", sorted(FILE_COMMANDS))
def test_an_existing_file_reached_through_dotdot_needs_force(cmd, scen, tmp_path):
    (tmp_path / "t.csv").write_text("the user's trace", encoding="utf-8")
    res, text = cli(*FILE_COMMANDS[cmd](scen), "--out", "MISSING/../t.csv")
    refused(res, text, "--force")
    assert (tmp_path / "t.csv").read_text(encoding="utf-8") == "the user's trace"


def test_output_path_returns_the_resolved_path(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "to_a").symlink_to(tmp_path / "a")
    assert atomic.output_path(tmp_path / "to_a" / ".." / "new", folder=True) == (tmp_path / "new").resolve()
    assert atomic.output_path(tmp_path / "gone" / ".." / "f.csv", folder=False) == (tmp_path / "f.csv").resolve()
    assert not (tmp_path / "gone").exists()
