"""A sources file (`arengine listen --sources sources.toml`): the cameras, streams and sound
devices one client reads and sends to a server, each under its name.

Every mistake in the file is reported at once, with the key it is under, before anything
connects: a watcher started at night should not find at dawn that its third camera never ran.

    [defaults]                          # optional: each source's value unless it sets its own
    models = "events"
    reconnect_max_s = 30

    [sources.hall]
    url = "rtsp://192.168.1.20:554/stream1"
    profile = "alarms"
    parameters = { threshold = 0.6, min_duration_ms = 200 }

    [sources.radio]
    url = "http://icecast.example:8000/live.ogg"

    [sources.desk]
    url = "alsa:default"                # a sound device: PyAV's input format, then its name

Example::

    >>> sources = parse({"sources": {"hall": {"url": "rtsp://cam/1", "models": ["events"]}}})
    >>> sources[0].name, sources[0].kind, sources[0].models
    ('hall', 'network', 'events')
"""

from __future__ import annotations

import random
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arengine_client.live import SOURCE_NAME, SOURCE_RULE

NETWORK_SCHEMES = frozenset({"rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "udp", "tcp"})
"""The addresses read as network streams: a camera's RTSP, an HTTP or Icecast stream."""

DEVICE_FORMATS = frozenset({"alsa", "pulse", "oss", "jack", "avfoundation", "dshow", "openal"})
"""FFmpeg's capture devices, named as `format:device` (`alsa:default`, `dshow:audio=Mic`)."""

SOURCE_KEYS = {
    "url": "where the audio comes from: rtsp://, http(s)://, `device:name` or a file's path",
    "models": "the model, or several (a list, or names separated by commas)",
    "profile": "the models' named parameter set (a label model's manifest declares them)",
    "parameters": "post-processing parameters, as the query takes them (threshold = 0.6)",
    "options": "FFmpeg options for opening the source (rtsp_transport = 'udp')",
    "sample_rate": "the rate the audio is sent at, in Hz",
    "timeout_s": "seconds without audio before the source counts as gone",
    "reconnect_min_s": "the first wait before reconnecting; it doubles up to reconnect_max_s",
    "reconnect_max_s": "the longest wait before reconnecting",
}
"""What a source may set (and `[defaults]` too, but `url`), with what each means."""

DEFAULT_MODELS = "speech"
"""The models of a source that names none (those of `arengine listen`)."""

DEFAULT_RATE = 16000
"""The rate a source is sent at unless it says: most models' own."""

DEFAULT_TIMEOUT_S = 10.0
"""Seconds a source may stay silent (no packet at all) before it is reconnected."""


class SourcesFileError(ValueError):
    """A sources file that cannot be used; the message lists every problem found."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Waits before reconnecting: doubling from `min_s` up to `max_s`, each drawn between its
    half and its whole ("equal jitter"), so that sources dropped together (the server went
    away) do not all come back in the same instant, nor hammer it."""

    min_s: float = 0.5
    max_s: float = 30.0

    @classmethod
    def of(cls, min_s: float | None, max_s: float | None) -> Backoff:
        """The given bounds, the defaults for the others."""
        default = cls()
        return cls(min_s or default.min_s, max_s or default.max_s)

    def delay_s(self, attempt: int, draw: Callable[[], float] = random.random) -> float:
        """The wait before reconnection number `attempt` (from 0) of a run of failures.

        >>> Backoff(1.0, 8.0).delay_s(0, lambda: 1.0), Backoff(1.0, 8.0).delay_s(10, lambda: 0.0)
        (1.0, 4.0)
        """
        ceiling = min(self.max_s, self.min_s * 2.0 ** min(attempt, 60))
        return ceiling / 2 + draw() * ceiling / 2


@dataclass(frozen=True, slots=True)
class Source:
    """One source of a sources file, checked."""

    name: str
    url: str
    models: str = DEFAULT_MODELS
    parameters: Mapping[str, float | str] = field(default_factory=dict)
    """Post-processing parameters, `profile` among them, sent as the stream's query."""
    options: Mapping[str, str] = field(default_factory=dict)
    sample_rate: int = DEFAULT_RATE
    timeout_s: float = DEFAULT_TIMEOUT_S
    backoff: Backoff = Backoff()

    @property
    def kind(self) -> str:
        """`network`, `device` or `file` (a recording, read once at real speed)."""
        scheme = _scheme(self.url)
        if scheme in NETWORK_SCHEMES:
            return "network"
        return "device" if scheme in DEVICE_FORMATS else "file"

    @property
    def target(self) -> tuple[str, str | None]:
        """What PyAV opens: the address (or device, or path) and the input format, if forced.

        >>> Source("desk", "alsa:default").target, Source("cam", "rtsp://cam/1").target
        (('default', 'alsa'), ('rtsp://cam/1', None))
        """
        kind = self.kind
        if kind == "device":
            device_format, _, device = self.url.partition(":")
            return device, device_format
        if kind == "file":
            return str(Path(self.url.removeprefix("file:"))), None
        return self.url, None


def load(path: Path) -> list[Source]:
    """The sources of the file at `path`; `SourcesFileError` naming every problem otherwise."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SourcesFileError(f"{path}: cannot read it: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise SourcesFileError(f"{path}: not valid TOML: {error}") from None
    try:
        return parse(data)
    except SourcesFileError as error:
        raise SourcesFileError(f"{path}: {error}") from None


def parse(data: Mapping[str, Any]) -> list[Source]:
    """The sources of a parsed file; `SourcesFileError` naming every problem otherwise."""
    problems: list[str] = []
    for key in data:
        if key not in ("defaults", "sources"):
            problems.append(f"unknown table {key!r}; a sources file has [defaults], [sources.NAME]")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append("defaults: must be a table ([defaults])")
        defaults = {}
    if "url" in defaults:
        problems.append("defaults.url: each source has its own url")
    tables = data.get("sources")
    if not isinstance(tables, dict) or not tables:
        problems.append("no sources: add one as [sources.NAME] with its url")
        tables = {}
    sources = []
    for name, table in tables.items():
        where = f"sources.{name}"
        if not re.fullmatch(SOURCE_NAME, name):
            problems.append(f"{where}: a source's name must be {SOURCE_RULE}")
        if not isinstance(table, dict):
            problems.append(f"{where}: must be a table ([{where}] with its url)")
            continue
        source = _source(name, {**defaults, **table}, where, problems)
        if source is not None:
            sources.append(source)
    if problems:
        raise SourcesFileError("\n  ".join(["the sources file has mistakes:", *problems]))
    return sources


def _source(name: str, table: dict[str, Any], where: str, problems: list[str]) -> Source | None:
    """The source of a table (its defaults merged in); None after adding its problems."""
    before = len(problems)
    for key in table:
        if key not in SOURCE_KEYS:
            allowed = ", ".join(SOURCE_KEYS)
            problems.append(f"{where}: unknown key {key!r}; a source may set {allowed}")
    url = table.get("url")
    if not isinstance(url, str) or not url.strip():
        problems.append(f"{where}.url: required, a string ({SOURCE_KEYS['url']})")
    elif "://" in url and _scheme(url) not in NETWORK_SCHEMES:
        schemes = ", ".join(sorted(NETWORK_SCHEMES))
        problems.append(f"{where}.url: {_scheme(url)}:// is not read; use one of {schemes}")
    models = _models(table.get("models", DEFAULT_MODELS), f"{where}.models", problems)
    parameters = _parameters(table, where, problems)
    options = _table(table.get("options", {}), f"{where}.options", problems)
    rate = _number(table, "sample_rate", where, problems, 8000, 192000, whole=True)
    timeout = _number(table, "timeout_s", where, problems, 0.5, 600)
    low = _number(table, "reconnect_min_s", where, problems, 0.01, 3600)
    high = _number(table, "reconnect_max_s", where, problems, 0.01, 3600)
    backoff = Backoff.of(low, high)
    if backoff.max_s < backoff.min_s:
        problems.append(f"{where}: reconnect_max_s is below reconnect_min_s")
    if len(problems) > before:
        return None
    return Source(
        name, str(url), models, parameters, {k: str(v) for k, v in options.items()},
        int(rate or DEFAULT_RATE), timeout or DEFAULT_TIMEOUT_S, backoff,
    )  # fmt: skip


def _scheme(url: str) -> str:
    return url.partition(":")[0].lower() if ":" in url else ""


def _models(value: Any, where: str, problems: list[str]) -> str:
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        problems.append(f'{where}: a model\'s name, or a list of them ("events", ["events"])')
        return DEFAULT_MODELS
    if not names:
        problems.append(f"{where}: name at least one model")
    return ",".join(n.strip() for n in names)


def _parameters(table: dict[str, Any], where: str, problems: list[str]) -> dict[str, float | str]:
    """`parameters` and `profile` as the stream's query (the server checks their names and
    ranges: it knows the models' kinds, the client does not)."""
    parameters = _table(table.get("parameters", {}), f"{where}.parameters", problems)
    profile = table.get("profile")
    if profile is not None and not isinstance(profile, str):
        problems.append(f"{where}.profile: must be a string (a profile's name)")
    elif profile is not None:
        parameters["profile"] = profile
    return parameters


def _table(value: Any, where: str, problems: list[str]) -> dict[str, float | str]:
    if not isinstance(value, dict):
        problems.append(f"{where}: must be a table ({{ name = value, ... }})")
        return {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, int | float | str):
            problems.append(f"{where}.{key}: must be a number or a string, got {item!r}")
    return {k: v for k, v in value.items() if isinstance(v, int | float | str)}


def _number(
    table: dict[str, Any],
    key: str,
    where: str,
    problems: list[str],
    low: float,
    high: float,
    whole: bool = False,
) -> float | None:
    """`table[key]` within [low, high], or None when it is absent or wrong (a problem added)."""
    if key not in table:
        return None
    value = table[key]
    kind = "a whole number" if whole else "a number"
    wrong_type = isinstance(value, bool) or not isinstance(value, int if whole else int | float)
    if wrong_type or not low <= value <= high:
        problems.append(f"{where}.{key}: must be {kind} from {low:g} to {high:g}, got {value!r}")
        return None
    return float(value)
