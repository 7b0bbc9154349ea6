"""Validation targets: the schema of calibration/targets/*.yaml and its loader.

A target file holds published numbers (never simulator inputs) with their source:

    source: "NeMo-RL speculative decoding, arXiv 2604.26779"
    hardware: gb200
    targets:
      - id: think_ar_generation_s          # unique over every file loaded together
        scenario: scenarios/8b_rl_think_sync.yaml   # relative to the target file or a folder above it
        overrides: {}                       # dotted scenario overrides
        metric: stage_s                     # one of METRICS
        params: {stage: generation, run: ar}   # checked against the metric's own schema
        measured: 133.6                     # quantitative metrics only
        tolerance: 0.10                     # relative, (0, 10]
        role: fit                           # fit | prediction
        pins: [think_response_median]       # fit rows: the fitted parameters this row pins
        source: "[S] stage table"           # [P] primary / [S] secondary, with where
        note: "free text"

Roles: `fit` rows are the data some parameter was fitted to (they say which in `pins`); every
other row is a `prediction`. Ordinal metrics (`ordinal`) carry no `measured`/`tolerance`: they
pass when the `slower` configuration simulates slower than the `faster` one.
Every problem is a SpecError naming the file, the row and the field (the CLI exits 2).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specsim import inputs
from specsim.errors import SpecError

#: the data folder `specsim validate` and `specsim calibrate` look for, from the working directory up
CALIBRATION_FOLDER = "calibration"
MAX_TOLERANCE = 10.0   # a relative tolerance above 1000 % checks nothing


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ----------------------------------------------------------------------------- per-metric params
class NoParams(_Strict):
    """Metrics of a whole comparison (speedups, shares): no parameters."""


class StageParams(_Strict):
    """One stage of the steady step of the AR baseline (`ar`) or the SD variant (`sd`).
    prepare = weight sync + rollout-engine preparation (simulated: weight_sync_s); data = loading
    the step's prompt batch (simulated: data_s)."""

    stage: Literal["data", "generation", "logprob", "training", "prepare", "step"]
    run: Literal["ar", "sd"]


class RunParams(_Strict):
    """A steady pipeline quantity of the AR baseline or the SD variant."""

    run: Literal["ar", "sd"]


class TauParams(_Strict):
    """The acceptance model's mean acceptance length at RL step `step` (policy versions since the
    drafter's last update) and the scenario's draft length."""

    step: int = Field(default=0, ge=0, le=10**6)


class BatchParams(_Strict):
    """A fixed batch of `batch` sequences (prompt `prompt`, response `tokens`) decoding to the end."""

    batch: int = Field(ge=1, le=65536)
    prompt: int = Field(default=128, ge=1, le=10**6)
    tokens: int = Field(default=512, ge=1, le=10**6)


class EngineRunParams(BatchParams):
    """The same fixed-batch engine run as BatchParams, for the AR baseline or the SD variant."""

    run: Literal["ar", "sd"]


class Arm(_Strict):
    """One side of an ordinal comparison: the AR baseline or the SD variant of the target's
    scenario with extra overrides."""

    run: Literal["ar", "sd"]
    overrides: dict[str, Any] = Field(default_factory=dict)


class OrdinalParams(_Strict):
    """`slower`'s steady `quantity` exceeds `faster`'s (a published qualitative finding)."""

    quantity: Literal["generation_s", "step_s"] = "generation_s"
    slower: Arm
    faster: Arm


METRIC_PARAMS: dict[str, type[_Strict]] = {
    "generation_speedup": NoParams,     # AR / SD steady generation time
    "e2e_speedup": NoParams,            # AR / SD steady step time
    "generation_share": NoParams,       # AR generation / AR step
    "rollout_time_reduction": NoParams,  # 1 − SD/AR generation time
    "e2e_time_reduction": NoParams,     # 1 − SD/AR step time
    "stage_s": StageParams,             # one stage's steady time, seconds
    "simulated_tau": NoParams,          # the SD run's measured mean acceptance length (ratio of sums)
    "tau": TauParams,                   # the acceptance model's τ at an RL step
    "engine_speedup_at_batch": BatchParams,
    "engine_tpot_s": EngineRunParams,   # mean time per output token of a running sequence, that run
    "exposed_generation_s": RunParams,  # generation time the trainer waits for (async)
    "effective_step_s": RunParams,      # steady step time (async: the pipeline's period)
    "refit_s": NoParams,                # one policy version's weight transfer to the engines (closed form)
    "ordinal": OrdinalParams,
}
METRICS = tuple(METRIC_PARAMS)


class TargetRow(_Strict):
    id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.\-]+$")
    scenario: str = Field(min_length=1)
    overrides: dict[str, Any] = Field(default_factory=dict)
    metric: Literal[METRICS]  # type: ignore[valid-type]
    params: dict[str, Any] = Field(default_factory=dict)
    measured: float | None = None
    tolerance: float | None = None
    role: Literal["fit", "prediction"]
    pins: list[str] = Field(default_factory=list)
    source: str = Field(min_length=1)
    note: str = ""

    @field_validator("measured", "tolerance", mode="before")
    @classmethod
    def _number(cls, v):
        if isinstance(v, bool):
            raise ValueError("a number, not a boolean")  # noqa: TRY004 - pydantic reports ValueError
        return v

    @model_validator(mode="after")
    def _consistent(self):
        schema = METRIC_PARAMS[self.metric]
        try:
            schema.model_validate(self.params)
        except ValidationError as exc:
            e = exc.errors()[0]
            loc = ".".join(str(p) for p in e["loc"])
            raise ValueError(f"params{'.' + loc if loc else ''}: {e['msg']} (metric {self.metric} takes "
                             f"{sorted(schema.model_fields) or 'no params'})") from None
        if self.metric == "ordinal":
            if self.measured is not None or self.tolerance is not None:
                raise ValueError("an ordinal target has no measured value or tolerance")
        else:
            if self.measured is None or not math.isfinite(self.measured) or self.measured == 0:
                raise ValueError(f"measured must be a finite non-zero number, got {self.measured!r}")
            tol = 0.10 if self.tolerance is None else self.tolerance
            if not (math.isfinite(tol) and 0 < tol <= MAX_TOLERANCE):
                raise ValueError(f"tolerance must be a relative tolerance in (0, {MAX_TOLERANCE}], got {tol!r}")
        if self.role == "fit" and not self.pins:
            raise ValueError("a fit row must name the fitted parameters it pins (pins: [...])")
        if self.role == "prediction" and self.pins:
            raise ValueError("a prediction pins no parameters (remove pins or make the role fit)")
        return self

    @property
    def tol(self) -> float:
        return 0.10 if self.tolerance is None else float(self.tolerance)

    @property
    def parsed_params(self) -> _Strict:
        return METRIC_PARAMS[self.metric].model_validate(self.params)


class TargetFile(_Strict):
    source: str = Field(min_length=1)
    hardware: str = Field(min_length=1)
    targets: list[TargetRow] = Field(min_length=1)
    fit: dict[str, Any] | None = None   # the workload fit's parameter block (specsim.calibrate.workload.fit)


def _pydantic_to_spec(exc: ValidationError, path: Path, doc: Any) -> SpecError:
    e = exc.errors()[0]
    loc = list(e["loc"])
    field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in loc).replace(".[", "[")
    value: Any = doc
    for p in loc:
        try:
            value = value[p]
        except (KeyError, IndexError, TypeError):
            value = e.get("input")
            break
    if isinstance(value, (dict, list)) and len(repr(value)) > 200:
        value = f"{type(value).__name__} of {len(value)}"
    msg = e["msg"].removeprefix("Value error, ")
    return SpecError(field or "(file)", value, msg, str(path))


def load_target_file(path: Path) -> TargetFile:
    if not path.is_file():
        raise SpecError("targets", str(path), "an existing target YAML file")
    doc = inputs.read_yaml(path, "(file)", "validation target YAML")
    if not isinstance(doc, dict):
        raise SpecError("(file)", type(doc).__name__, "a mapping with source, hardware and a `targets:` list", str(path))
    try:
        return TargetFile.model_validate(doc)
    except ValidationError as exc:
        raise _pydantic_to_spec(exc, path, doc) from None


def resolve_scenario_path(scenario: str, target_file: Path) -> Path:
    """A relative scenario path is looked up next to the target file, then in each folder above it
    (for the bundled targets: the repository root). Absolute paths are used as given."""
    p = Path(scenario)
    if p.is_absolute():
        return p
    for folder in [target_file.resolve().parent, *target_file.resolve().parent.parents]:
        if (folder / p).is_file():
            return folder / p
    raise SpecError("scenario", scenario, "a scenario file relative to the target file or a folder above it",
                    str(target_file))


def find_calibration_dir(given: str | Path | None = None, start: str | Path | None = None) -> Path:
    """The calibration data folder (targets/, published/, traces/ of a specsim checkout).

    `given` (the commands' --calibration option) must be an existing folder. Otherwise the first
    `calibration/` folder in `start` (default: the working directory) or a folder above it: the data
    belongs to the checkout or project the command runs in, never to where the package is installed
    (an installed wheel carries no calibration data). Neither: a SpecError naming the folder searched.
    """
    if given is not None:
        p = Path(given)
        if not p.is_dir():
            raise SpecError("--calibration", str(given), "an existing calibration folder (holding targets/, "
                            "published/)", "the command line")
        return p.resolve()
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CALIBRATION_FOLDER).is_dir():
            return folder / CALIBRATION_FOLDER
    raise SpecError("--calibration", str(here), f"a calibration folder: there is no {CALIBRATION_FOLDER}/ folder in "
                    "the working directory or any folder above it; run from a specsim checkout, or pass "
                    "--calibration DIR (or the input files themselves)", "the command line")


def calibration_dir_if_any(start: str | Path | None = None) -> Path | None:
    """The calibration folder found from `start` (find_calibration_dir's search), or None."""
    try:
        return find_calibration_dir(None, start)
    except SpecError:
        return None


def target_files(paths: list[str] | None, calibration: str | Path | None = None) -> list[Path]:
    """The given files (a folder means its *.yaml), or else the targets/*.yaml of the calibration
    folder (`calibration`, or the one found from the working directory: find_calibration_dir)."""
    if not paths:
        folder = find_calibration_dir(calibration) / "targets"
        files = sorted(folder.glob("*.yaml"))
        if not files:
            raise SpecError("targets", str(folder), "a folder holding target YAML files")
        return files
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.yaml"))
            if not found:
                raise SpecError("targets", str(p), "a folder holding target YAML files")
            out += found
        else:
            out.append(p)
    return out


def check_tolerance(tolerance: float | None) -> float | None:
    """The --tolerance override: finite, in (0, MAX_TOLERANCE]."""
    if tolerance is None:
        return None
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance) \
            or not 0 < tolerance <= MAX_TOLERANCE:
        raise SpecError("--tolerance", tolerance, f"a finite relative tolerance in (0, {MAX_TOLERANCE}]",
                        "the command line")
    return float(tolerance)
