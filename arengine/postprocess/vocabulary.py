"""What a label model's names mean: ids, groups, profiles, and the list syntax of the query.

AudioSet's names contain commas ("Child speech, kid speaking", "Inside, small room"), so a list in
a query is separated by semicolons, which no AudioSet name contains: `labels=Glass;Shatter`,
`thresholds=Glass:0.2;Child speech, kid speaking:0.6` (the value after the last colon). An item is
a label's name or id (`/m/09x0r`), a group's name, or an ontology class (`Dog`, `/m/0bt9lr`), any
case; an ontology class stands for every label under it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arengine.errors import ErrorCode, InvalidInput

SEPARATOR = ";"
"""Between the items of a list in a query: AudioSet's names contain commas, never semicolons."""


def _invalid(message: str) -> InvalidInput:
    return InvalidInput(message, code=ErrorCode.INVALID_PARAMETER)


def split_list(text: str) -> tuple[str, ...]:
    """`"Glass; Shatter;"` -> `("Glass", "Shatter")`.

    >>> split_list("Child speech, kid speaking;/m/07rn7sz")
    ('Child speech, kid speaking', '/m/07rn7sz')
    """
    return tuple(item.strip() for item in text.split(SEPARATOR) if item.strip())


def split_values(name: str, text: str) -> dict[str, float]:
    """`"Glass:0.2;Siren:0.4"` -> `{"Glass": 0.2, "Siren": 0.4}`; the value follows the last colon.

    >>> split_values("thresholds", "Inside, small room:0.6")
    {'Inside, small room': 0.6}
    """
    values: dict[str, float] = {}
    for item in split_list(text):
        label, colon, number = item.rpartition(":")
        try:
            if not colon or not label.strip():
                raise ValueError(item)
            value = float(number)
        except ValueError:
            raise _invalid(
                f"{name} takes label:value items separated by '{SEPARATOR}' "
                f"(Glass:0.2;Siren:0.4), got {item!r}"
            ) from None
        # Names match in any case: a label given twice would leave which value wins to chance.
        if any(label.strip().casefold() == known.casefold() for known in values):
            raise _invalid(f"{name} gives {label.strip()!r} more than once; give each label once")
        values[label.strip()] = value
    return values


@dataclass(frozen=True, slots=True)
class Ontology:
    """Classes by id: name and children (AudioSet's `ontology.json`, or none)."""

    names: Mapping[str, str] = field(default_factory=dict)
    children: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Ontology:
        classes = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            {c["id"]: c["name"] for c in classes},
            {c["id"]: tuple(c["child_ids"]) for c in classes},
        )

    def under(self, class_id: str) -> set[str]:
        """The class and every class below it."""
        found, todo = set(), [class_id]
        while todo:
            current = todo.pop()
            if current not in found:
                found.add(current)
                todo.extend(self.children.get(current, ()))
        return found


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """A label model's names (and ids), its named groups and profiles, and its ontology."""

    labels: tuple[str, ...]
    ids: tuple[str, ...] | None = None
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Named groups (`dog = ["Bark", "Howl", ...]`) from the manifest's label map."""
    profiles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Named sets of post-processing values (`safety`), from the manifest."""
    ontology: Ontology = field(default_factory=Ontology)

    def members(self, item: str) -> tuple[tuple[int, ...], str, str | None]:
        """The label indices an item names, its display name and its id (if any).

        A group of the manifest; an ontology class (the labels under it: `Dog` is Dog, Bark,
        Yip, Howl...); else a label's name or id.
        """
        key = item.strip().casefold()
        for name, labels in self.groups.items():
            if key == name.casefold():
                return tuple(self.one(label) for label in labels), name, None
        for class_id, name in self.ontology.names.items():
            if key in (name.casefold(), class_id.casefold()):
                under = self.ontology.under(class_id)
                found = tuple(i for i in range(len(self.labels)) if self._id(i) in under)
                if found:
                    return found, name, class_id
        for index, label in enumerate(self.labels):
            if key in (label.casefold(), self._id(index).casefold()):
                return (index,), label, self.ids[index] if self.ids else None
        raise _invalid(
            f"unknown label {item!r}: give a label's name"
            + (" or id (/m/09x0r)" if self.ids else "")
            + (f", a group ({', '.join(self.groups)})" if self.groups else "")
            + (" or an ontology class" if self.ontology.names else "")
            + f"; separate several with '{SEPARATOR}'"
        )

    def one(self, item: str) -> int:
        """The index of one label, by its name or id."""
        key = item.strip().casefold()
        for index, label in enumerate(self.labels):
            if key in (label.casefold(), self._id(index).casefold()):
                return index
        raise _invalid(f"unknown label {item!r} in a group: give a label's name or id")

    def indices(self, items: Iterable[str]) -> set[int]:
        return {index for item in items for index in self.members(item)[0]}

    def profile(self, name: str) -> Mapping[str, Any]:
        for known, values in self.profiles.items():
            if name.strip().casefold() == known.casefold():
                return values
        accepted = ", ".join(self.profiles) or "none: the manifest declares no profiles"
        raise _invalid(f"unknown profile {name!r}; accepted: {accepted}")

    def _id(self, index: int) -> str:
        return self.ids[index] if self.ids else ""
