"""Physical quantities in hardware profiles lie in plausible datasheet ranges: a value a unit off
(or 1e-300) is an error naming the file, the field, the value and the range, exit 2 -- never a
run of 10^303-second steps reported as a speedup."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specsim.catalog.hardware import PROFILE_DIR, list_hardware, load_hardware
from specsim.cli.app import app
from specsim.errors import SpecError

H100 = PROFILE_DIR / "h100_sxm.yaml"


def _profile(tmp_path: Path, path: tuple[str, ...], value) -> Path:
    doc = yaml.safe_load(H100.read_text(encoding="utf-8"))
    cur = doc
    for part in path[:-1]:
        cur = cur[part]
    if isinstance(cur[path[-1]], dict):
        cur[path[-1]]["value"] = value
    else:
        cur[path[-1]] = value
    p = tmp_path / "hw.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return p


@pytest.mark.parametrize(("path", "value"), [
    (("scaleout_gbit_per_s",), 1e-300), (("scaleout_gbit_per_s",), 1e7), (("hbm_tbps",), 3350.0),
    (("hbm_tbps",), 0.001), (("hbm_gb",), 80e9), (("hbm_gb",), 0.08), (("nvlink_gbps_per_direction",), 1e-3),
    (("nvlink_gbps_per_direction",), 4.5e5), (("peak_dense_tflops", "bf16"), 989e12),
    (("peak_dense_tflops", "bf16"), 1e-3), (("collective_latency_us", "scaleout"), 1e-9),
    (("collective_latency_us", "nvlink"), 1e9), (("nvlink_domain_gpus",), 10**6),
    (("efficiency", "inprocess_seq_overhead_us"), -1.0), (("efficiency", "inprocess_seq_overhead_us"), 1e6),
])
def test_implausible_physical_values_are_refused(tmp_path, path, value):
    prof = _profile(tmp_path, path, value)
    with pytest.raises(SpecError) as info:
        load_hardware(str(prof))
    assert info.value.field == ".".join(path) and info.value.where == str(prof) and "in [" in info.value.allowed


def test_the_235b_run_with_a_1e_300_network_is_an_error_not_a_speedup(tmp_path):
    prof = _profile(tmp_path, ("scaleout_gbit_per_s",), 1e-300)
    res = CliRunner().invoke(app, ["check", str(Path(__file__).resolve().parents[2] / "scenarios" / "235b_run.yaml"),
                                   "--set", f"hardware={prof}"])
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert res.exit_code == 2 and "scaleout_gbit_per_s" in out and "1e-300" in out and str(prof) in out, out
    assert "Traceback" not in out


def test_every_bundled_profile_is_inside_the_ranges():
    for name in list_hardware():
        load_hardware(name)


def test_kernel_tables_and_device_names_are_profile_keys_checked_on_load(tmp_path):
    """`kernel_tables:` and `device_names:` (what calibrate kernels / collect read about a GPU) are
    optional, checked, and never enter a cost (compare=False)."""
    from specsim.catalog.hardware import KernelTables

    b200 = load_hardware("b200")
    assert b200.kernel_tables == KernelTables("b200_sxm", "gb200", ("gb200", "h200_sxm", "h100_sxm"))
    doc = yaml.safe_load(open(b200.path).read())
    for key in ("kernel_tables", "device_names"):
        doc.pop(key)
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump(doc))
    bare = load_hardware(str(plain))
    assert bare.kernel_tables is None and bare.device_names == () and bare == b200
    for bad, field in (({"kernel_tables": {"system": "b200_sxm", "sibbling": "gb200"}}, "kernel_tables.sibbling"),
                       ({"kernel_tables": {"sibling": "gb200"}}, "kernel_tables.system"),
                       ({"device_names": "B200"}, "device_names"),
                       ({"device_names": ["B 200"]}, "device_names[0]")):
        f = tmp_path / "bad.yaml"
        f.write_text(yaml.safe_dump({**doc, **bad}))
        with pytest.raises(SpecError) as exc:
            load_hardware(str(f))
        assert exc.value.field == field, (bad, exc.value)
