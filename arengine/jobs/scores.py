"""A job's kept scores: each model's per-segment inference output, appended to one file beside
the job as each inference ends (segments in any order).

The file is the job's checkpoint (a restarted job post-processes the segments it holds instead of
inferring them again) and, once the job is done, what new post-processing parameters are applied
to (`arengine/jobs/retag.py`) without the model. Scores are kept exactly (float32): tags derived
from them equal a fresh recognition's. Each record names its codec (`_CODECS`):
- `palette`: an array of at most 256 distinct values (the events model's int8 arithmetic gives 32
  over two hours) is its sorted values and a byte per score, zstd-compressed. The codes keep the
  scores' order, so a tagger compares them with its thresholds without decoding
  (`arengine/postprocess/labels.py`);
- `zstd`: the bytes shuffled into byte planes (all the first bytes, then the second...), which
  zstd finds the repetition of the high bytes in;
- no codec named: the first format, byte planes and zlib; still read, never written.

A model whose kind keeps columns apart (`Recognizer.kept_apart`: the notes' note and onset
activations, apart from the contour, which only pitch bends read) has its rows kept in two parts,
each with its codec; new parameters that read only the first part decompress it alone.

Records: a 4-byte length and a 4-byte CRC-32, then a JSON header line and the compressed array.
The first record is the plan (each model's name, kind and segment cut); a run whose plan differs
(the server's segment length or models changed) starts over. A record cut short by a crash ends
what is read; the next append overwrites it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import struct
import threading
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np
import zstandard

from arengine.errors import InsufficientStorage
from arengine.jobs.store import storage_full
from arengine.kinds.base import Recognizer
from arengine.kinds.catalog import KINDS
from arengine.postprocess.palette import MAX_VALUES, Palette

_FRAME = struct.Struct("<II")
"""A record's payload length and CRC-32."""
_MAX_RECORD = 1 << 30


class DamagedScores(ValueError):
    """A kept scores file that holds no plan, or a record that cannot be read back."""


@dataclass(frozen=True, slots=True)
class ModelPlan:
    """What must not change between runs of a job for its kept scores to apply."""

    name: str
    kind: str
    sample_rate: int
    cut: dict[str, int]
    """The segment plan's fields (`SegmentPlan`)."""

    @classmethod
    def of(cls, recognizer: Recognizer) -> ModelPlan:
        return cls(
            recognizer.name,
            recognizer.kind,
            recognizer.sample_rate,
            dataclasses.asdict(recognizer.plan),
        )


@dataclass(frozen=True, slots=True)
class KeptModel:
    """One finished model's kept scores: its segments' arrays in order, and the recording's
    length at its rate."""

    scores: Sequence[np.ndarray]
    total_samples: int

    def first_columns(self, columns: int) -> Sequence[np.ndarray]:
        """The segments' arrays cut to their first `columns` columns (a part kept apart, as
        the notes' contour, is not read)."""
        if isinstance(self.scores, _InOrder):
            return self.scores.first_columns(columns)
        return [scores[:, :columns] for scores in self.scores]

    def joined(self) -> np.ndarray | Palette:
        """Every segment's rows as one array, segment 0 first; palette-coded when every
        segment's scores were (one palette for all)."""
        if isinstance(self.scores, _InOrder):
            return self.scores.joined()
        return _concatenate(list(self.scores))


class _Arrays(Mapping[int, np.ndarray]):
    """Arrays by segment index, read from the file when asked for (a long job's scores stay on
    disk)."""

    def __init__(self, log: ScoreLog, model: int, columns: int | None = None) -> None:
        self._log = log
        self._model = model
        self._columns = columns

    def __len__(self) -> int:
        return len(self._log.offsets[self._model])

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._log.offsets[self._model]))

    def __contains__(self, segment: object) -> bool:
        return segment in self._log.offsets[self._model]

    def __getitem__(self, segment: int) -> np.ndarray:
        if segment not in self:
            raise KeyError(segment)
        return self._log.read(self._model, segment, columns=self._columns)

    def coded(self, segment: int) -> np.ndarray | Palette:
        return self._log.read(self._model, segment, decode=False)


class _InOrder(Sequence[np.ndarray]):
    """A finished model's arrays as a sequence, segment 0 first."""

    def __init__(self, arrays: _Arrays) -> None:
        self._arrays = arrays

    def __len__(self) -> int:
        return len(self._arrays)

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[np.ndarray]: ...
    def __getitem__(self, index: int | slice) -> np.ndarray | Sequence[np.ndarray]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._arrays[index]

    def first_columns(self, columns: int) -> _InOrder:
        return _InOrder(_Arrays(self._arrays._log, self._arrays._model, columns))

    def joined(self) -> np.ndarray | Palette:
        """The arrays in order as one (`KeptModel.joined`), decoded as little as they allow."""
        return _concatenate([self._arrays.coded(i) for i in range(len(self))])


class ScoreLog:
    """The kept scores of one job; a `ScoreKeeper` (`arengine/engine/observer.py`).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "job.scores"
    >>> plan = (ModelPlan("speech", "speech", 16000, {"hop": 512}),)
    >>> log = ScoreLog.open(path, plan)
    >>> log.keep(0, 0, np.array([0.25, 0.5], np.float32))
    >>> log.close()
    >>> again = ScoreLog.open(path, plan)
    >>> again.kept(0)[0].tolist()
    [0.25, 0.5]
    >>> list(again.kept(0))
    [0]
    >>> again.close()
    """

    def __init__(self, path: Path, plan: tuple[ModelPlan, ...], file: Any) -> None:
        self.path = path
        self.plan = plan
        self._file = file
        self._lock = threading.Lock()
        self.offsets: list[dict[int, int]] = [{} for _ in plan]
        """Where each model's segment records start in the file, by segment index."""
        self.total_samples: list[int | None] = [None] * len(plan)
        self._scanned: dict[int, tuple[dict[str, Any], int, int]] = {}
        """The records the scan checked, by offset: header, and where the body lies."""

    @classmethod
    def open(cls, path: Path, plan: tuple[ModelPlan, ...]) -> ScoreLog:
        """The log at `path` for a job of `plan`: what an earlier run kept, when its plan was the
        same; a fresh log otherwise."""
        # Unbuffered: a write the full disk refuses leaves no bytes behind to be written later.
        file = path.open("r+b" if path.exists() else "w+b", buffering=0)
        log = cls(path, plan, file)
        try:
            end = log._scan()
            if end is None:  # no plan, or another: start over
                file.seek(0)
                file.truncate()
                log.offsets = [{} for _ in plan]
                log.total_samples = [None] * len(plan)
                log._scanned = {}
                log._append({"plan": [dataclasses.asdict(model) for model in plan]}, b"")
            else:
                file.seek(end)
                file.truncate()
        except BaseException:
            file.close()
            raise
        return log

    @classmethod
    @contextmanager
    def reading(cls, path: Path) -> Iterator[tuple[tuple[ModelPlan, ...], list[KeptModel] | None]]:
        """A finished job's plan and kept scores (for new post-processing parameters), read
        from the file while the context lasts; None for the scores when a model's are not all
        there."""
        with path.open("rb") as file:
            log = cls(path, (), file)
            plan = log._read_plan()
            if plan is None:
                raise DamagedScores(f"{path.name} holds no plan")
            log.plan = plan
            log.offsets = [{} for _ in plan]
            log.total_samples = [None] * len(plan)
            log._scan()
            yield plan, log._finished()

    def kept(self, model: int) -> Mapping[int, np.ndarray]:
        return _Arrays(self, model)

    def keep(self, model: int, segment: int, scores: np.ndarray) -> None:
        array = np.ascontiguousarray(scores)
        header: dict[str, Any] = {"m": model, "s": segment, "dtype": array.dtype.str}
        split = KINDS[self.plan[model].kind].recognizer.kept_apart
        if split is not None and array.ndim == 2 and array.shape[1] > split:
            (first, head), (second, tail) = _encode(array[:, :split]), _encode(array[:, split:])
            header |= {"shape": array.shape, "codec": [first, second], "split": split}
            offset = self._append({**header, "head": len(head)}, head + tail)
        else:
            codec, body = _encode(array)
            offset = self._append({**header, "shape": array.shape, "codec": codec}, body)
        with self._lock:
            self.offsets[model][segment] = offset

    def end(self, model: int, total_samples: int) -> None:
        self._append({"m": model, "end": total_samples}, b"")
        self.total_samples[model] = total_samples

    @overload
    def read(self, model: int, segment: int, *, columns: int | None = None) -> np.ndarray: ...
    @overload
    def read(
        self, model: int, segment: int, decode: bool, columns: int | None = None
    ) -> np.ndarray | Palette: ...
    def read(
        self, model: int, segment: int, decode: bool = True, columns: int | None = None
    ) -> np.ndarray | Palette:
        """One segment's scores (only the first `columns` columns, when given); palette-coded
        ones stay coded unless `decode`."""
        offset = self.offsets[model][segment]
        header, body = self._body_at(offset)
        dtype, shape = np.dtype(str(header["dtype"])), tuple(header["shape"])
        if "split" in header:
            return self._parts(header, body, dtype, shape, columns)
        scores = _decoded(header.get("codec", "zlib"), body, dtype, shape)
        if columns is not None:
            scores = (scores.decode() if isinstance(scores, Palette) else scores)[:, :columns]
        return scores.decode() if decode and isinstance(scores, Palette) else scores

    def _parts(
        self,
        header: dict[str, Any],
        body: bytes,
        dtype: np.dtype[Any],
        shape: tuple[int, ...],
        columns: int | None,
    ) -> np.ndarray:
        """A record kept in two parts: the first part alone when it holds `columns`."""
        (first, second), split, head = header["codec"], int(header["split"]), int(header["head"])
        left = _array(_decoded(first, body[:head], dtype, (shape[0], split)))
        if columns is not None and columns <= split:
            return left[:, :columns]
        right = _array(_decoded(second, body[head:], dtype, (shape[0], shape[1] - split)))
        joined = np.concatenate([left, right], axis=1)
        return joined if columns is None else joined[:, :columns]

    def close(self) -> None:
        self._file.close()

    def _append(self, header: dict[str, Any], body: bytes) -> int:
        payload = json.dumps(header).encode() + b"\n" + body
        with self._lock:
            offset = self._file.seek(0, os.SEEK_END)
            try:
                record = memoryview(_FRAME.pack(len(payload), zlib.crc32(payload)) + payload)
                while record:
                    record = record[self._file.write(record) :]
                # The checkpoint survives a machine's crash, not only the process's.
                os.fsync(self._file.fileno())
            except OSError as error:
                if not storage_full(error):
                    raise
                self._cut(offset)
                # The job's error, not a stage's fault with a traceback: the engine fails the
                # job with it.
                raise InsufficientStorage(
                    f"the data directory is full: the job's scores could not be kept "
                    f"({error.strerror or error}); submit it again once there is room"
                ) from None
        return int(offset)

    def _cut(self, offset: int) -> None:
        """Drop a record cut short at `offset`, so that a later one is not written after it
        (the scan stops at the first record it cannot read)."""
        with contextlib.suppress(OSError):  # the next open truncates after the last whole one
            self._file.truncate(offset)

    def _body_at(self, offset: int) -> tuple[dict[str, Any], bytes]:
        """The header and body of a record that `keep` wrote or the scan checked (which is
        not checked again)."""
        if offset in self._scanned:
            header, start, length = self._scanned[offset]
            return header, os.pread(self._file.fileno(), length, start)
        record = self._record_at(offset)
        if record is None:
            raise DamagedScores(f"{self.path.name}: the record at {offset} cannot be read")
        return record[0], record[1]

    def _record_at(self, offset: int) -> tuple[dict[str, Any], bytes, int] | None:
        """The record at `offset` (header, body, the next record's offset); None if cut short
        or corrupt."""
        fd = self._file.fileno()
        frame = os.pread(fd, _FRAME.size, offset)
        if len(frame) < _FRAME.size:
            return None
        length, crc = _FRAME.unpack(frame)
        if length > _MAX_RECORD:
            return None
        payload = os.pread(fd, length, offset + _FRAME.size)
        if len(payload) < length or zlib.crc32(payload) != crc:
            return None
        line, _, body = payload.partition(b"\n")
        try:
            header = json.loads(line)
        except ValueError:
            return None
        if not isinstance(header, dict):
            return None
        return header, body, offset + _FRAME.size + length

    def _read_plan(self) -> tuple[ModelPlan, ...] | None:
        record = self._record_at(0)
        if record is None or "plan" not in record[0]:
            return None
        try:
            return tuple(ModelPlan(**model) for model in record[0]["plan"])
        except TypeError:  # not a plan this version wrote
            return None

    def _finished(self) -> list[KeptModel] | None:
        """Every model's scores in order, if each model ended with all its segments kept."""
        models = []
        ended = zip(self.offsets, self.total_samples, strict=True)
        for model, (offsets, total) in enumerate(ended):
            if total is None or set(offsets) != set(range(len(offsets))):
                return None
            models.append(KeptModel(_InOrder(_Arrays(self, model)), total))
        return models

    def _scan(self) -> int | None:
        """Read the records after the plan into `offsets`; returns where the valid ones end, or
        None when the file holds no plan or another plan."""
        first = self._record_at(0)
        if first is None or self._read_plan() != self.plan:
            return None
        offset = first[2]
        while (record := self._record_at(offset)) is not None:
            header, body, following = record
            model = int(header.get("m", -1))
            if not 0 <= model < len(self.plan) or self.total_samples[model] is not None:
                break
            if "end" in header:
                self.total_samples[model] = int(header["end"])
            elif isinstance(header.get("s"), int) and header["s"] >= 0:
                self.offsets[model][header["s"]] = offset
                self._scanned[offset] = (header, following - len(body), len(body))
            else:
                break
            offset = following
        return offset


_ZSTD_LEVEL = 3
"""zstd's default: faster than zlib's 6 both ways, and as small on these scores."""


def _encode(array: np.ndarray) -> tuple[str, bytes]:
    """The codec that fits `array` and its body: `palette` where it applies, else `zstd`."""
    coded = Palette.of(array) if array.dtype.kind == "f" else None
    compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    if coded is None:
        return "zstd", compressor.compress(_planes(array))
    values = coded.values.astype(array.dtype)
    return "palette", compressor.compress(values.tobytes() + coded.codes.tobytes())


def _planes(array: np.ndarray) -> bytes:
    """The array's bytes in byte planes: all the first bytes, then the second..."""
    width = array.dtype.itemsize
    planes = array.reshape(-1).view(np.uint8).reshape(-1, width).T
    return np.ascontiguousarray(planes).tobytes()


def _unplanes(data: bytes, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    planes = np.frombuffer(data, np.uint8).reshape(dtype.itemsize, -1)
    # One plane at a time into its column: 4x faster than copying the transpose at once.
    out = np.empty((planes.shape[1], dtype.itemsize), np.uint8)
    for byte, plane in enumerate(planes):
        out[:, byte] = plane
    return out.view(dtype).reshape(shape)


def _zlib(body: bytes, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    """The first format: byte planes, zlib."""
    return _unplanes(zlib.decompress(body), dtype, shape)


def _zstd(body: bytes, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    return _unplanes(_decompress(body), dtype, shape)


def _palette(body: bytes, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Palette:
    data = _decompress(body)
    size = int(np.prod(shape))
    count = (len(data) - size) // dtype.itemsize
    values = np.frombuffer(data, dtype, count)
    codes = np.frombuffer(data, np.uint8, size, offset=count * dtype.itemsize)
    return Palette(codes.reshape(shape), values)


def _decompress(body: bytes) -> bytes:
    # The frame holds its size: one allocation, no streaming.
    return zstandard.ZstdDecompressor().decompress(body)


_CODECS: dict[str, Any] = {"zlib": _zlib, "zstd": _zstd, "palette": _palette}
"""How each record's body is read, by the codec its header names (none: `zlib`)."""


def _decoded(
    codec: str, body: bytes, dtype: np.dtype[Any], shape: tuple[int, ...]
) -> np.ndarray | Palette:
    read = _CODECS.get(codec)
    if read is None:
        raise DamagedScores(f"unknown codec {codec!r}")
    scores: np.ndarray | Palette = read(body, dtype, shape)
    return scores


def _array(scores: np.ndarray | Palette) -> np.ndarray:
    return scores.decode() if isinstance(scores, Palette) else scores


def _concatenate(parts: list[np.ndarray | Palette]) -> np.ndarray | Palette:
    """Rows of `parts` in order; one palette when every part is coded and their values fit."""
    coded = [part for part in parts if isinstance(part, Palette)]
    if coded and len(coded) == len(parts):
        values = np.unique(np.concatenate([part.values for part in coded]))
        mappings: dict[bytes, np.ndarray | None] = {}
        codes = []
        for part in coded if len(values) <= MAX_VALUES else []:
            key = part.values.tobytes()
            if key not in mappings:
                mappings[key] = _mapping(part.values, values)
            mapping = mappings[key]
            if mapping is not None:
                codes.append(
                    part.codes if len(mapping) == len(values) else mapping.take(part.codes)
                )
        if codes and len(codes) == len(parts):
            return Palette(np.concatenate(codes), values)
    arrays = [part.decode() if isinstance(part, Palette) else part for part in parts]
    return np.concatenate(arrays) if arrays else np.zeros(0, np.float32)


def _mapping(own: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """Codes of `own` values in the joint ascending `values`; None if a value would change (0.0
    in one part, -0.0 in another)."""
    mapping = np.searchsorted(values, own).astype(np.uint8)
    return mapping if values[mapping].tobytes() == own.tobytes() else None
