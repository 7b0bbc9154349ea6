"""What every scenario section shares: the error type (file, field, value, allowed) and the
`Strict` base class (unknown keys refused; numbers strict about true/false and NaN; booleans only
true or false)."""

from __future__ import annotations

import math
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from specsim.errors import short_repr


class ScenarioError(ValueError):
    """A bad scenario: `file`, dotted `field`, offending `value`, and what is `allowed`."""

    def __init__(self, file: str | None, field: str, value: Any, allowed: str):
        self.file, self.field, self.value, self.allowed = file, field, value, allowed
        super().__init__(file, field, value, allowed)   # reconstructible: type(e)(*e.args)

    def __str__(self) -> str:
        return self.message()

    def message(self) -> str:
        where = f"{self.file}: " if self.file else ""
        v = short_repr(self.value)
        return f"{where}{self.field}: {self.allowed}, got {v}"


SEP = "\x1f"


def field_error(field: str, value: Any, allowed: str) -> ValueError:
    """A cross-field validation failure that still names one field and its value."""
    return ValueError(f"{SEP}{field}{SEP}{short_repr(value)}{SEP}{allowed}")


class Raw(str):
    """A value already rendered with repr()."""

    def __repr__(self) -> str:
        return str(self)


def _number_kind(annotation: Any) -> str | None:
    """'int' / 'float' when a field's annotation is int / float (optionally `| None`), else None."""
    args = set(typing.get_args(annotation)) or {annotation}
    args.discard(type(None))
    if args == {int}:
        return "int"
    if args == {float} or args == {int, float}:
        return "float"
    return None


class Strict(BaseModel):
    """Base of every section: unknown keys refused; numbers strict about bools and NaN."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @model_validator(mode="before")
    @classmethod
    def _plain_numbers(cls, data: Any) -> Any:
        """true/false is not a number (pydantic would read `k: true` as 1), a number or a word is not
        true/false (pydantic would read `plots: 1` or `yes` as true), and NaN/inf are refused before
        any bound is checked (NaN fails every bound with a misleading message)."""
        if not isinstance(data, dict):
            return data
        for name, fld in cls.model_fields.items():
            if name not in data:
                continue
            v = data[name]
            if fld.annotation is bool and not isinstance(v, bool):
                raise field_error(name, v, "true or false (YAML's booleans; 1, yes or on are not read as one)")
            kind = _number_kind(fld.annotation)
            if kind is None or v is None:
                continue
            if isinstance(v, bool):
                raise field_error(name, v, f"a {'whole ' if kind == 'int' else ''}number (true/false is not a number)")
            if isinstance(v, (float, str)):
                try:
                    f = float(v)
                except (TypeError, ValueError, OverflowError):
                    continue
                if not math.isfinite(f):
                    raise field_error(name, v, "a finite number (not NaN or infinity)")
        return data
