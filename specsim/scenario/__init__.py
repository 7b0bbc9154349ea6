"""The scenario file: its schema (:mod:`.schema`, one class per section) and its loading
(:mod:`.loading`: YAML, `--set` overrides, errors naming file and field)."""

from specsim.scenario.base import ScenarioError, Strict
from specsim.scenario.loading import (
    apply_overrides,
    check_derived,
    ignored_fields,
    load_scenario,
    parse_override,
    read_yaml,
    set_dotted,
    source_file,
    spec_error_to_scenario,
    to_yaml,
    validate_doc,
)
from specsim.scenario.paths import MAX_SWEEP_ROWS, path_problem, sweep_rows
from specsim.scenario.schema import (
    CapacitySection,
    DrafterSection,
    LengthSpec,
    OutputSection,
    PipelineSection,
    RolloutSection,
    Scenario,
    SpeculationSection,
    StalenessSection,
    TrainingSection,
    WorkloadSection,
)

__all__ = [
    "MAX_SWEEP_ROWS", "CapacitySection", "DrafterSection", "LengthSpec", "OutputSection", "PipelineSection",
    "RolloutSection", "Scenario", "ScenarioError", "SpeculationSection", "StalenessSection", "Strict",
    "TrainingSection", "WorkloadSection", "apply_overrides", "check_derived", "ignored_fields", "load_scenario", "parse_override",
    "path_problem", "read_yaml", "set_dotted", "source_file", "spec_error_to_scenario", "sweep_rows", "to_yaml",
    "validate_doc",
]
