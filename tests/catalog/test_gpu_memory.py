"""The memory a profile gives a process matches what the GPUs report (calibration/published/
gpu_memory_totals.csv): never more than nvidia-smi's total, at most 1.5 % less (nvidia-smi's reserved
memory), and within 0.5 % of CUDA's own total where it was measured."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from specsim.catalog.hardware import load_hardware

TOTALS = Path(__file__).resolve().parents[2] / "calibration" / "published" / "gpu_memory_totals.csv"
ROWS = list(csv.DictReader(TOTALS.open(encoding="utf-8")))
MIB = 2**20


def test_every_bundled_profile_has_a_published_total():
    from specsim.catalog.hardware import PROFILE_DIR
    assert {r["profile"] for r in ROWS} == {p.stem for p in PROFILE_DIR.glob("*.yaml")}


@pytest.mark.parametrize("row", ROWS, ids=[r["profile"] for r in ROWS])
def test_profile_memory_is_what_a_process_gets(row):
    hw = load_hardware(row["profile"])
    smi_bytes = int(row["nvidia_smi_total_mib"]) * MIB
    assert 0.985 * smi_bytes <= hw.hbm_bytes <= smi_bytes
    if row["cuda_total_bytes"]:
        assert hw.hbm_bytes == pytest.approx(int(row["cuda_total_bytes"]), rel=0.005)


@pytest.mark.parametrize("row", ROWS, ids=[r["profile"] for r in ROWS])
def test_datasheet_gigabytes_are_binary(row):
    """nvidia-smi's total is within 0.6 % of the datasheet figure in GiB, 6-8 % above it in 10^9 bytes."""
    smi_bytes = int(row["nvidia_smi_total_mib"]) * MIB
    datasheet = float(row["datasheet_gb"])
    assert smi_bytes == pytest.approx(datasheet * 2**30, rel=0.006)
    assert smi_bytes > 1.05 * datasheet * 1e9
