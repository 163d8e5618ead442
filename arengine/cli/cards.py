"""Model cards as a Markdown table: `models/README.md` holds this table, and a test checks it.

The cells come from the manifests (`[card]`, labels, rate) and from the loaded recognizer (its
segment plan), so the table cannot drift from what `GET /v1/models` shows. The real-time factor
is left out: it is measured on the machine that loads the models.

    arengine models --markdown      # prints the table for the models that load
"""

from __future__ import annotations

from collections.abc import Mapping

from arengine.models.registry import LoadedModel

COLUMNS = ("model", "kind", "task", "labels", "licence", "source", "version", "input", "segments")
SHOWN_LABELS = 6
"""Labels listed in a cell; longer lists end with the count."""


def _seconds(samples: int, rate: int) -> str:
    return f"{samples / rate:.3f}".rstrip("0").rstrip(".") + " s"


def segment_plan(loaded: LoadedModel) -> str:
    """`30 s segments, 2 s pre-roll, 0.032 s frames` for one model."""
    recognizer = loaded.recognizer
    plan, rate = recognizer.plan, recognizer.sample_rate
    parts = [f"{_seconds(plan.segment_samples, rate)} segments"]
    if plan.preroll_frames:
        parts.append(f"{_seconds(plan.preroll_frames * plan.hop, rate)} pre-roll")
    # A plan's step may hold several scores (a notes window holds 142 frames of 256 samples).
    score_hop = getattr(recognizer, "score_hop", plan.hop)
    parts.append(f"a score every {_seconds(score_hop, rate)}")
    return ", ".join(parts)


def _labels(labels: tuple[str, ...]) -> str:
    if len(labels) <= SHOWN_LABELS:
        return ", ".join(labels)
    return f"{', '.join(labels[:SHOWN_LABELS])}, ... ({len(labels)})"


def _input(rate: int, shape: tuple[int | None, ...] | None) -> str:
    """`16000 Hz mono`, and a classifier's network input: `(windows, 32, 47) log-mel`."""
    if shape is None:
        return f"{rate} Hz mono"
    axes = ", ".join("windows" if axis is None else str(axis) for axis in shape)
    return f"{rate} Hz mono, network input ({axes}) log-mel"


def row(loaded: LoadedModel) -> tuple[str, ...]:
    """One model's cells, in `COLUMNS` order; a field the card leaves out shows as `-`."""
    card, recognizer = loaded.manifest.card, loaded.recognizer
    return (
        f"`{recognizer.name}`",
        recognizer.kind,
        card.task or "-",
        _labels(recognizer.labels),
        card.licence or "-",
        card.source or "-",
        card.version or "-",
        _input(recognizer.sample_rate, recognizer.input_shape),
        segment_plan(loaded),
    )


def markdown_table(models: Mapping[str, LoadedModel]) -> str:
    """The cards of `models`, sorted by name, as a Markdown table (no trailing newline)."""
    lines = [f"| {' | '.join(COLUMNS)} |", f"|{'---|' * len(COLUMNS)}"]
    for _, loaded in sorted(models.items()):
        cells = (cell.replace("|", "\\|") for cell in row(loaded))
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)
