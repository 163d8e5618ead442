"""The benchmark tools work on tiny inputs (their timings are never asserted)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from loadtests.agreement import frame_f1
from loadtests.memory_over_time import growth
from loadtests.recordings import write_recording
from loadtests.thread_sweep import cpu_seconds
from tests.postgres import PostgreSQL, needs_postgresql


@pytest.mark.parametrize(
    ("name", "rate", "channels"), [("a.wav", 16000, 1), ("a.flac", 44100, 2), ("a.mp3", 44100, 2)]
)
def test_recordings_are_written_with_their_speech_intervals(
    tmp_path: Path, name: str, rate: int, channels: int
) -> None:
    path = tmp_path / name
    speech = write_recording(path, minutes=0.25, rate=rate, channels=channels, seed=3)
    info = sf.info(str(path))
    assert (info.samplerate, info.channels) == (rate, channels)
    assert info.duration == pytest.approx(15.0, abs=0.1)
    assert speech and all(0 <= start < end <= 15.0 for start, end in speech)
    assert json.loads((tmp_path / f"{name}.speech.json").read_text()) == [list(s) for s in speech]


def test_frame_f1() -> None:
    assert frame_f1([(1.0, 2.0)], [(1.0, 2.0)], 3.0) == 1.0
    assert frame_f1([(0.0, 1.0)], [(2.0, 3.0)], 3.0) == 0.0
    assert frame_f1([(0.0, 2.0)], [(1.0, 2.0)], 3.0) == pytest.approx(2 * 100 / 300)


def test_growth_compares_the_documented_windows() -> None:
    seconds = np.arange(0, 20 * 60, 1.0)
    flat = np.full_like(seconds, 300.0)
    assert growth(seconds, flat) == (0.0, "last 5 min vs min 5-10")
    rising = 300.0 + seconds / 60  # +1 MiB a minute
    percent, _ = growth(seconds, rising)
    assert percent == pytest.approx(100 * (317.5 / 307.5 - 1), rel=1e-3)
    short = np.arange(0, 90, 1.0)
    assert growth(short, np.full_like(short, 10.0))[1] == "last third vs middle third"


def test_cpu_seconds_of_this_process_increase() -> None:
    """The kernel counts CPU time in clock ticks (10 ms): work until one has counted it, which
    a fixed amount of work may not reach on a fast machine."""
    before = cpu_seconds(os.getpid())
    deadline = time.monotonic() + 30
    while cpu_seconds(os.getpid()) <= before and time.monotonic() < deadline:
        sum(i * i for i in range(200_000))
    assert cpu_seconds(os.getpid()) > before


def test_the_mixed_recording_and_note_f1(tmp_path: Path) -> None:
    from loadtests.notes_vs_basic_pitch import mixed
    from tests.music import f1

    audio, notes = mixed(10, tmp_path)
    duration = len(audio) / 22050
    assert duration >= 10 and notes
    assert all(0 <= n.start < n.end <= duration for n in notes)
    exact = [(n.start, n.end, n.midi) for n in notes]
    assert f1(notes, exact) == (1.0, 1.0, 1.0)
    late = [(s + 0.06, e, m) for s, e, m in exact]  # onsets 60 ms late: outside the tolerance
    assert f1(notes, late)[2] == 0.0
    octave = [(s, e, m + 12) for s, e, m in exact]
    assert f1(notes, octave)[2] == 0.0


def test_the_events_recording_holds_its_sounds_at_the_times_it_says() -> None:
    from loadtests.events import EVERY_S, INSERTED, RATE, recording

    audio, inserted = recording(1.5)
    assert len(audio) == 90 * RATE
    assert [name for name, _ in inserted] == list(INSERTED)  # one of each, in turn
    for (_, at), (_, after) in itertools.pairwise(inserted):
        assert EVERY_S - 1 < after - at < EVERY_S + 1
    quiet = audio[: int(inserted[0][1] * RATE)]
    assert np.sqrt(np.mean(quiet**2)) == pytest.approx(0.00316, rel=0.2)  # -50 dBFS of noise
    start = int(inserted[0][1] * RATE)
    assert np.abs(audio[start : start + RATE]).max() > 10 * np.abs(quiet).max()


def test_the_events_benchmark_finds_a_sound_only_by_its_own_labels() -> None:
    from arengine.models import DEFAULT_MODELS_DIR
    from arengine.postprocess.vocabulary import Ontology
    from loadtests.events import EXPECTED, own_labels

    ontology = Ontology.read(DEFAULT_MODELS_DIR / "events" / "ontology.json")
    phone, alarm_clock = own_labels(ontology, "phone"), own_labels(ontology, "alarm clock")
    assert {"/m/07cx4", "/m/01hnzm", "/m/07pp_mv"} <= phone  # Telephone, Ringtone, Alarm
    assert "/m/02fs_r" in alarm_clock - phone  # Beep, bleep: a Brief tone
    assert "/m/0dv5r" not in set().union(*(own_labels(ontology, s) for s in EXPECTED))  # Camera
    assert own_labels(ontology, "voice") >= {"/m/09x0r"}  # Speech


def test_the_fingerprint_benchmark_finds_its_own_excerpts(tmp_path: Path) -> None:
    from arengine.kinds.fingerprint.landmarks import add_recording
    from arengine.kinds.fingerprint.library import Library
    from arengine.kinds.fingerprint.recognizer import FingerprintRecognizer
    from loadtests.fingerprint import found, recognize, resampled, synthetic
    from tests.fingerprints import Placed, mix

    references = [synthetic(seed, 12.0) for seed in range(3)]
    assert not np.array_equal(references[0], references[1])
    library = Library.create(tmp_path / "library.sqlite")
    for i, samples in enumerate(references):
        add_recording(library, f"ref {i}", samples, {})
    placed = [Placed(2, 4.0, 2.0, 10.0), Placed(0, 20.0, 0.0, 8.0)]
    recording = mix(32.0, references, placed, snr_db=10.0)
    tags = recognize(FingerprintRecognizer(library.path, segment_s=10.0), recording)
    assert found(tags, placed, [8.0, 8.0]) == 2
    assert found(tags, [Placed(1, 4.0, 2.0, 10.0)], [8.0]) == 0
    assert len(resampled(references[0], 1.05)) == pytest.approx(len(references[0]) / 1.05, abs=2)


def test_a_dropped_requests_line_says_how_much_of_the_rise_was_kept() -> None:
    from loadtests.dropped_memory import Drop

    line = Drop(before=300.0, peak=400.0, after=310.0, idle_after_s=0.25).line(2)
    assert line == (
        "drop 2: RSS before 300 MiB, peak 400 (+100), after 310 (+10 MiB, 10% of the rise kept);"
        " engine idle 0.2 s after the hang-up"
    )


def test_the_events_benchmark_hands_the_segmenter_a_decoders_blocks() -> None:
    """One block of the whole recording made the segmenter copy what remained of it at every
    segment, which the torch side's CPU time counted (quadratic in the recording's length)."""
    from arengine.audio.decode import BLOCK_FRAMES
    from loadtests.events import decoder_blocks

    audio = np.arange(3 * BLOCK_FRAMES + 5, dtype=np.float32)
    blocks = list(decoder_blocks(audio))
    assert [len(block) for block in blocks] == [BLOCK_FRAMES] * 3 + [5]
    np.testing.assert_array_equal(np.concatenate(blocks), audio)


def test_the_events_benchmark_says_skipped_without_the_tflite_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make bench` runs it always: without Google's file (not in the repository) it says so."""
    from loadtests.events import main

    missing = tmp_path / "yamnet.tflite"
    monkeypatch.setenv("YAMNET_TFLITE", str(missing))
    main(["--minutes", "0.1"])
    assert capsys.readouterr().out == (
        f"skipped: no YAMNet TFLite file at {missing} (give its path or set YAMNET_TFLITE; "
        "models/events/README.md says where it comes from)\n"
    )
    main([str(missing)])
    assert capsys.readouterr().out.startswith(f"skipped: no YAMNet TFLite file at {missing} ")


def test_the_long_birds_recording_is_48_khz_birdsong_whose_windows_differ(tmp_path: Path) -> None:
    from loadtests.birds import windows_of, write_birds

    path = tmp_path / "birds.wav"
    write_birds(path, minutes=0.5)
    audio, rate = sf.read(path, dtype="float32")
    assert rate == 48000 and len(audio) == 30 * 48000
    assert np.abs(audio).max() > 0.01  # birdsong (peak 0.034 in the clip), not the noise alone
    windows = windows_of(audio)
    assert len(windows) == 10 and len({w.tobytes() for w in windows}) == 10


def test_the_recall_benchmark_judges_offsets_and_factors_at_the_played_speed() -> None:
    from arengine.types import Extra, Tag
    from loadtests.fingerprint_recall import LEAD_S, Query, judge

    query = Query(3, 12.0, np.zeros(1), speed=1.05, pitch=1.05)
    # The tag starts 1 s into the excerpt: 1.05 s further into the reference at that speed.
    right = Tag(
        LEAD_S + 1.0,
        LEAD_S + 9.0,
        "x",
        0.5,
        extra=Extra(
            reference="3", reference_start=13.05, reference_end=21.4, speed=1.051, pitch=1.049
        ),
    )
    found, offset_error, _, _ = judge([right], query)
    assert found and offset_error <= 0.01
    slow = dataclasses.replace(right, extra=Extra({**right.extra, "speed": 1.0, "pitch": 1.0}))
    assert judge([slow], query)[0] is False  # its factors are 5% off
    other = dataclasses.replace(right, extra=Extra({**right.extra, "reference": "4"}))
    assert judge([other], query)[::3] == (False, 1)  # nothing found, one wrong tag


def test_the_recall_benchmark_judges_a_peer_without_factors_at_the_true_speed() -> None:
    from arengine.types import Extra, Tag
    from loadtests.fingerprint_recall import LEAD_S, Query, judge

    query = Query(3, 12.0, np.zeros(1), speed=1.05, pitch=1.05)
    # No speed reported: its start is carried back at the played speed, no factor is judged.
    peer = Tag(
        LEAD_S + 1.0, LEAD_S + 9.0, "x", 9.0, extra=Extra(reference="3", reference_start=13.05)
    )
    found, offset_error, factor_error, wrong = judge([peer], query, factors=False)
    assert found and offset_error <= 0.01 and np.isnan(factor_error) and wrong == 0
    late = dataclasses.replace(peer, extra=Extra({**peer.extra, "reference_start": 14.0}))
    assert judge([late], query, factors=False)[::3] == (False, 1)


def test_the_recall_benchmark_adds_its_queries_to_a_copy_of_a_built_library(
    tmp_path: Path,
) -> None:
    from arengine.kinds.fingerprint.landmarks import add_recording
    from arengine.kinds.fingerprint.library import Library
    from loadtests.fingerprint import synthetic
    from loadtests.fingerprint_recall import built_on

    original = tmp_path / "library.sqlite"
    add_recording(Library.create(original), "distractor", synthetic(1, 5.0), {})
    built = built_on(tmp_path, original, queries=2, seconds=5.0)
    assert built.ids == [2, 3] and len(built.rendered) == 2 and built.path != original
    titles = [reference.title for reference in Library(built.path).references()]
    assert titles == ["distractor", "queried 0", "queried 1"]
    assert len(Library(original).references()) == 1  # the built library is left as it was


OLAF_OUTPUT = """\
33, 8.22, 16.73, /tmp/fp/peers/r1.wav, 3542454583, 3.79, 12.30
7, 10.06, 13.46, /tmp/fp/peers/r12.wav, 2334948810, 13.03, 16.44
0, 0.00, 0.00, , 0, 0.00, 0.00
"""
AUDFPRINT_OUTPUT = """\
Fri Nov 27 05:30:49 2026 Reading hash table audfprint.pklz
Read fprints for 12 files ( 5796 hashes) from audfprint.pklz (0.00% dropped)
Matched    8.4 s starting at    7.3 s in /tmp/fp/peers/q0.wav to time   10.3 s in \
/tmp/fp/peers/r4.wav with    56 of   120 common hashes at rank  0
NOMATCH /tmp/fp/peers/q1.wav 24.2 sec 1777 raw hashes
Processed 2 files (48.4 s total dur) in 2.6 s sec = 0.054 x RT
"""


def test_olafs_result_lines_become_tags_of_the_reference_they_name() -> None:
    from loadtests.fingerprint_peers import olaf_tags

    first, second = olaf_tags(OLAF_OUTPUT)  # the empty line (no match) gives no tag
    assert (first.extra.get("reference"), first.start, first.end, first.score) == (
        "1",
        8.22,
        16.73,
        33.0,
    )
    assert (first.extra.get("reference_start"), first.extra.get("reference_end")) == (3.79, 12.30)
    assert second.extra.get("reference") == "12"


def test_audfprints_time_range_lines_become_tags_per_query() -> None:
    from loadtests.fingerprint_peers import audfprint_tags

    tags = audfprint_tags(AUDFPRINT_OUTPUT)
    (tag,) = tags["/tmp/fp/peers/q0.wav"]
    assert list(tags) == ["/tmp/fp/peers/q0.wav"]
    assert (tag.extra.get("reference"), tag.start, tag.score, tag.extra.get("reference_start")) == (
        "4",
        7.3,
        56.0,
        10.3,
    )
    assert tag.end == pytest.approx(15.7) and tag.extra.get("reference_end") == pytest.approx(18.7)


def test_a_peers_own_timer_is_read_from_its_output() -> None:
    from loadtests.fingerprint_peers import own_seconds

    olaf = "Matched 516 fp's from 24.0s (22 fp/s) in 0.023s (1046 times realtime)\n"
    assert own_seconds(olaf * 2) == pytest.approx(0.046)
    assert own_seconds(AUDFPRINT_OUTPUT) == pytest.approx(2.6)
    assert own_seconds(OLAF_OUTPUT) == 0.0


def test_a_librarys_size_is_read_with_its_wal_checkpointed(tmp_path: Path) -> None:
    from arengine.kinds.fingerprint.landmarks import add_recording
    from arengine.kinds.fingerprint.library import Library
    from loadtests.fingerprint import library_bytes, synthetic

    library = Library.create(tmp_path / "library.sqlite")
    add_recording(library, "ref", synthetic(1, 12.0), {})
    size = library_bytes(library.path)  # raised "database table is locked" inside a transaction
    assert size == os.path.getsize(library.path) > 0
    assert os.path.getsize(f"{library.path}-wal") == 0


def test_the_replicas_benchmark_counts_each_recorded_finish_across_the_logs(
    tmp_path: Path,
) -> None:
    """A job whose finish two replicas both recorded is counted twice; lines that are not JSON
    or were cut by a kill are skipped."""
    from loadtests.replicas import done_records

    def line(message: str) -> str:
        return json.dumps({"level": "INFO", "logger": "arengine", "message": message})

    first, second = tmp_path / "replica-0.log", tmp_path / "replica-1.log"
    first.write_text(
        "\n".join([line("job a1: running speech"), line("job a1: done, 3 tags"), "INFO: uvicorn"])
        + '\n{"level": "INFO", "message": "job b2: do'
    )
    second.write_text("\n".join([line("job b2: done, 0 tags"), line("job a1: done, 3 tags")]))
    assert done_records([first, second]) == {"a1": 2, "b2": 1}


def test_the_replicas_benchmark_finds_files_left_in_the_data_directory(tmp_path: Path) -> None:
    from loadtests.replicas import leftover_files

    (tmp_path / "uploads").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "claim").write_text("")  # not a job's file
    assert leftover_files(tmp_path) == []
    (tmp_path / "results" / "j1.scores").write_bytes(b"x")
    assert leftover_files(tmp_path) == ["results/j1.scores"]


@pytest.mark.slow
@needs_postgresql()
def test_the_replicas_benchmark_starts_postgres_and_counts_the_job_rows() -> None:
    """Its own PostgreSQL (initdb and pg_ctl in a temporary folder, as root too) and the rows a
    job leaves, the schema's version and the fingerprint libraries apart."""
    from loadtests.cluster import Postgres

    database = Postgres()
    database.start()
    try:
        database.query("CREATE TABLE jobs (id text); CREATE TABLE alembic_version (v text)")
        database.query("CREATE TABLE fingerprint_references (id text)")
        database.query("INSERT INTO jobs VALUES ('a'); INSERT INTO alembic_version VALUES ('1')")
        database.query("INSERT INTO fingerprint_references VALUES ('r')")
        assert database.job_rows() == {"jobs": 1}
        assert database.active_s() >= 0
    finally:
        database.stop()
    assert not database.folder.exists()


@pytest.mark.slow
def test_the_references_benchmark_fills_both_backends_alike(
    tmp_path: Path, postgresql: PostgreSQL
) -> None:
    """Tiny: 6 references (3 fingerprinted, 3 copies with their own hashes) in a SQLite file
    and on PostgreSQL; both hold the same rows, and the copies' hashes differ from their base's."""
    from arengine.kinds.fingerprint.landmarks import RATIO_LEVELS
    from arengine.kinds.fingerprint.library import Library
    from loadtests.references_db import fill, fingerprinted, references, shared_database

    base = fingerprinted(3)
    copies = list(references(base, 6))
    assert len(copies) == 6 and not np.array_equal(copies[3][:, 0], copies[0][:, 0])
    np.testing.assert_array_equal(copies[3][:, 1], copies[0][:, 1])
    # A copy moves what a query asks exactly, never the ratio's level, whose neighbours its
    # original's query asks too (scheme 3): that would find the copy as no other recording is.
    moved = copies[3][:, 0] ^ copies[0][:, 0]
    assert moved.any() and not (moved & (RATIO_LEVELS - 1)).any()
    file = Library.create(tmp_path / "jingles" / "library.sqlite")
    database = shared_database(postgresql.database())
    shared = Library.shared(database, "jingles")
    for library in (file, shared):
        assert fill(library, base, 6) > 0
    query = np.concatenate([hashes[:, 0] for hashes in copies])
    in_file, in_database = file.lookup(query), shared.lookup(query)
    np.testing.assert_array_equal(np.unique(in_file, axis=0), np.unique(in_database, axis=0))
    assert [r.title for r in file.references()] == [r.title for r in shared.references()]
    file.database.dispose()
    database.dispose()


def test_gil_profile_sorts_samples_into_areas_by_the_innermost_frame_naming_one() -> None:
    from arengine.engine.request import EngineRequest
    from loadtests.gil_profile import ENGINE, ENGINE_TASKS, area_of, shares, table

    site = "/venv/lib/python3.11/site-packages"
    loop = [
        f"run_forever ({site}/../asyncio/base_events.py:607)",
        f"run ({site}/uvicorn/server.py:1)",
    ]
    src = "/src/arengine"
    task = f"{src}/engine/request.py"
    pool = [f"_work ({src}/engine/pool.py:149)", f"_run ({task}:243)"]
    samples = [
        ([*loop, f"_on_part_data ({src}/http/uploads.py:9)", "find (<frozen x>:1)"], 3),
        ([*loop, f"data_received ({site}/uvicorn/protocols/http/httptools_impl.py:1)"], 2),
        ([*pool, f"_decode ({task}:281)", f"decode ({src}/audio/decode.py:1)"], 4),
        ([*pool, f"_infer ({task}:342)", f"push ({src}/kinds/speech/tagger.py:1)"], 1),
        ([*pool, f"_infer ({task}:312)", "sum (/np/_core/fromnumeric.py:1)"], 5),
        ([*pool, f"take ({task}:175)"], 1),
        ([*pool, f"EngineRequest._postprocess_in_order ({task}:400)", "<listcomp> (x:1)"], 0),
    ]
    assert [area_of(frames) for frames, _ in samples] == [
        "multipart and spooling",
        "HTTP and event loop",
        "decoding",
        "post-processing",
        "inference glue",
        ENGINE,
        "post-processing",
    ]
    # Numpy's frames under a task function count in its stage, wherever the engine's module is.
    assert all(callable(getattr(EngineRequest, name, None)) for name in ENGINE_TASKS)
    row = shares(samples, possible=32)
    assert row["total"] == 0.5 and row["inference glue"] == 5 / 32
    assert "| **all** | **50%** |" in table({"x.wav": row})


def test_the_broadcast_benchmark_scores_bounds_offsets_and_the_tags_over_no_play() -> None:
    from arengine.types import Extra, Tag
    from loadtests.fingerprint_broadcast import Play, score

    plays = [Play("3", "ref 2", 100.0, 12.0, 20.0, "clean"),
             Play("5", "ref 4", 200.0, 0.0, 10.0, "mp3")]  # fmt: skip
    # Found: bounds and the offset (where the tag puts the play's start) within 0.5 s.
    right = Tag(
        100.3,
        119.6,
        "ref 2",
        0.9,
        extra=Extra(reference="3", reference_start=12.2, reference_end=31.6, speed=1.0, pitch=1.0),
    )
    late_end = Tag(
        200.0,
        208.0,
        "ref 4",
        0.9,
        extra=Extra(reference="5", reference_start=0.0, reference_end=8.0, speed=1.0, pitch=1.0),
    )
    wrong_offset = dataclasses.replace(
        late_end, end=210.0, extra=Extra({**late_end.extra, "reference_start": 1.0})
    )
    stray = dataclasses.replace(right, start=400.0, end=410.0)
    rows, missed = score([right, late_end, wrong_offset, stray], plays)
    assert (rows["clean"].plays, rows["clean"].found, rows["clean"].correct) == (1, 1, 1)
    assert (rows["mp3"].found, rows["mp3"].tags, rows["mp3"].correct) == (0, 2, 0)
    assert (rows["bed"].tags, rows["bed"].correct) == (1, 0)
    assert missed == [1]
    other = dataclasses.replace(right, extra=Extra({**right.extra, "reference": "4"}))
    assert score([other], plays)[0]["clean"].found == 0


def test_the_broadcast_benchmarks_plays_do_not_overlap_and_fit_their_references() -> None:
    from loadtests.fingerprint_broadcast import CONDITIONS, schedule

    references = [(str(i), f"ref {i}") for i in range(1, 11)]
    plays = schedule(60.0, 60, references, 60.0, seed=3)
    assert len(plays) == 60 and {p.condition for p in plays} == set(CONDITIONS)
    ordered = sorted(plays, key=lambda p: p.at)
    assert all(a.end < b.at for a, b in itertools.pairwise(ordered))
    assert all(p.at >= 0 and p.end <= 3600 for p in plays)
    assert all(8.0 <= p.seconds <= 30.0 and p.ref_start + p.seconds <= 60.0 for p in plays)
    with pytest.raises(ValueError, match="do not fit"):
        schedule(1.0, 10, references, 60.0, seed=3)


def test_the_replicas_benchmark_waits_for_jobs_gone_from_the_list_before_the_last_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job that ended early leaves the job list when its retention is over, before the last
    one ends: it counts as ended (the tool once polled until its 3-hour timeout)."""
    from loadtests import cluster

    polls = iter([[{"id": "a", "state": "done"}, {"id": "b", "state": "running"}]])
    monkeypatch.setattr(
        cluster, "listed", lambda group: next(polls, [{"id": "b", "state": "done"}])
    )
    monkeypatch.setattr(cluster, "result_tags", lambda group, job_id: [{"label": job_id}])
    monkeypatch.setattr("loadtests.cluster.time.sleep", lambda seconds: None)
    ended, tags = cluster.wait_done([], {"a": Path("a"), "b": Path("b")}, 5, fetch=True)
    assert set(ended) == {"a", "b"}
    assert tags == {"a": [{"label": "a"}], "b": [{"label": "b"}]}


def test_the_latency_tool_waits_for_every_label_off_before_the_next_alarm() -> None:
    """A label turned ON late by one alarm (a bell after the alarm clock) once counted as the
    next run's ON, before that run's alarm: a run ends only when every state is OFF again."""
    import threading

    from loadtests.sources_latency import _all_off
    from tests.mosquitto import Heard, Subscriber

    heard = Subscriber.__new__(Subscriber)  # its messages only: no broker
    heard._lock = threading.Lock()
    state = "arengine/nursery/events/{}/state"
    heard.messages = [
        Heard(state.format("alarm_clock"), "ON", False, 1.0),
        Heard(state.format("bell"), "ON", False, 1.5),
        Heard(state.format("alarm_clock"), "OFF", False, 3.0),
    ]
    assert not _all_off(heard)
    heard.messages.append(Heard(state.format("bell"), "OFF", False, 3.5))
    assert _all_off(heard)
