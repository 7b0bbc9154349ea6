"""User-facing input errors: each names the field, the value and what is allowed."""

import yaml

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml_text(text: str):
    """yaml.safe_load semantics, with libyaml's C loader when it is available (5-10x faster)."""
    return yaml.load(text, Loader=_YAML_LOADER)


class SpecError(ValueError):
    """A bad input value. `field` is a dotted path (e.g. 'drafter.tau'); `where` (a file) may be filled in later by the loader."""

    def __init__(self, field: str, value, allowed: str, where: str | None = None):
        self.field, self.value, self.allowed, self.where = field, value, allowed, where
        super().__init__(self.message())

    def message(self) -> str:
        loc = f" in {self.where}" if self.where else ""
        return f"{self.field} must be {self.allowed}, got {self.value!r}{loc}"


class LayoutError(ValueError):
    """A model/layout that does not fit on the GPUs: says what needs how much on which GPU."""


class InvariantError(RuntimeError):
    """An internal consistency check failed during a simulation (a bug, never a user error).

    Names the engine, the step and the quantity so the failure can be reproduced.
    """

    def __init__(self, engine: str, step: int, quantity: str, detail: str):
        self.engine, self.step, self.quantity = engine, step, quantity
        super().__init__(f"internal invariant violated in {engine} at step {step}: {quantity}: {detail}")
