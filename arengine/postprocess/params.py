"""Post-processing parameters, each declared once: its default, a one-line doc and its bounds.

A model kind's parameters are a frozen dataclass of `Params` whose fields are made with `param()`.
The same check runs on a manifest's `[postprocess]` table (a bad value makes the model unavailable,
with the reason) and on a client's query overrides (a 422 naming the parameter and its range);
`GET /v1/models`, the OpenAPI query description and the README are derived from the declarations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Self

from arengine.errors import ErrorCode, InvalidInput


@dataclass(frozen=True, slots=True)
class Bounds:
    """The accepted range of one parameter; `whole` asks for a whole number."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    whole: bool = False
    infinite_is_unlimited: bool = False
    """`inf` is accepted and means no limit (manifests only: queries refuse non-finite numbers)."""
    excluded: tuple[float, ...] = ()
    """Values inside the range that mean nothing (birds' `week` 0: -1 is all year, 1-48 a week)."""

    def text(self) -> str:
        """The range as a client reads it, for example `0 < x < 1` or `0 <= x <= 60000`."""
        low = "<" if self.low_open else "<="
        high = "<" if self.high_open else "<="
        kind = "a whole number " if self.whole else ""
        but = "".join(f", not {_number(value)}" for value in self.excluded)
        return f"{kind}{_number(self.low)} {low} x {high} {_number(self.high)}{but}"

    def accepts(self, value: float) -> bool:
        if math.isinf(value) and value > 0 and self.infinite_is_unlimited:
            return True
        if not math.isfinite(value) or (self.whole and not float(value).is_integer()):
            return False
        if value in self.excluded:
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def param(default: Any, doc: str, bounds: Bounds) -> Any:
    """A dataclass field of a `Params` class: its default, documentation and bounds."""
    return dataclasses.field(default=default, metadata={"doc": doc, "bounds": bounds})


def retuned(base: type, name: str, default: Any) -> Any:
    """`base`'s parameter `name` with another default, its documentation and bounds kept: a kind
    that shares a parameter but was tuned apart declares only the new value."""
    inherited = {f.name: f for f in dataclasses.fields(base)}[name]
    if isinstance(default, Mapping):
        frozen = MappingProxyType(dict(default))
        return dataclasses.field(default_factory=lambda: frozen, metadata=inherited.metadata)
    return dataclasses.field(default=default, metadata=inherited.metadata)


def _invalid(message: str) -> InvalidInput:
    return InvalidInput(message, code=ErrorCode.INVALID_PARAMETER)


class Params:
    """Mixin for a kind's parameter dataclass: checks on construction, overrides, description."""

    kind: ClassVar[str]
    """The model kind these parameters belong to, as the error messages name it."""

    def __post_init__(self) -> None:
        for name, bounds in self.bounds().items():
            value = getattr(self, name)
            if value is not None and not bounds.accepts(float(value)):
                raise _invalid(f"{name} must be {bounds.text()}, got {value}")
        self.check()

    def check(self) -> None:
        """Checks that involve several parameters; a subclass raises `InvalidInput`."""

    @classmethod
    def bounds(cls) -> dict[str, Bounds]:
        """The overridable parameters and their bounds, in declaration order."""
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        return {f.name: f.metadata["bounds"] for f in fields if "bounds" in f.metadata}

    @classmethod
    def texts(cls) -> dict[str, str]:
        """Text parameters (label lists) and their documentation: none unless a kind has some."""
        return {}

    @classmethod
    def docs(cls) -> dict[str, str]:
        """One line of documentation per overridable parameter."""
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        return {f.name: f.metadata["doc"] for f in fields if "doc" in f.metadata}

    def with_overrides(self, overrides: Mapping[str, Any]) -> Self:
        """These values plus `overrides`; `InvalidInput` names a parameter that does not apply
        to this kind or a value outside its bounds (with the range)."""
        bounds = self.bounds()
        unknown = sorted(set(overrides) - set(bounds))
        if unknown:
            raise _invalid(
                f"{', '.join(unknown)} does not apply to {self.kind} models; "
                f"accepted: {', '.join(bounds)}"
            )
        values = {}
        for name, value in overrides.items():
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise _invalid(f"{name} must be a number, got {value!r}")
            whole = bounds[name].whole and float(value).is_integer()
            values[name] = int(value) if whole else value
        return dataclasses.replace(self, **values)  # type: ignore[type-var]

    def as_dict(self) -> dict[str, float]:
        """The overridable parameters as numbers (`None`, automatic, is left out)."""
        return {
            name: float(getattr(self, name))
            for name in self.bounds()
            if getattr(self, name) is not None
        }

    def defaults(self) -> dict[str, float]:
        """The parameters as `GET /v1/models` lists them: `as_dict`, unless a kind also lists
        parameters kept in tables (per-label thresholds)."""
        return self.as_dict()
