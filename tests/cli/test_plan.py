"""`runner.plan`: every input gets its own output name, whatever else is in the run."""

from __future__ import annotations

from pathlib import Path

from arengine.cli.runner import plan, remaining
from arengine.outputs.formats import FORMATS

OUT = Path("out")


def _names(files: list[str], folders: list[str] = [], fmt: str = "json") -> list[str]:  # noqa: B006
    work = plan([Path(f) for f in files], FORMATS[fmt], OUT, [Path(f) for f in folders])
    return [str(item.target.relative_to(OUT)) for item in work]


def test_a_file_named_directly_goes_in_the_output_folder() -> None:
    assert _names(["calls/talk.flac", "x.mp3"], fmt="birdnet") == [
        "talk.BirdNET.results.csv",
        "x.BirdNET.results.csv",
    ]


def test_a_file_under_a_folder_keeps_its_path_under_it() -> None:
    files = ["archive/x/a.wav", "archive/y/a.wav", "archive/b.flac"]
    assert _names(files, ["archive"]) == ["x/a.json", "y/a.json", "b.json"]


def test_one_stem_in_one_folder_keeps_the_extensions() -> None:
    files = ["in/a.mp3", "in/a.wav", "in/A.flac", "in/b.wav"]
    assert _names(files, ["in"]) == ["a.mp3.json", "a.wav.json", "A.flac.json", "b.json"]


def test_what_still_collides_is_numbered_in_input_order() -> None:
    files = ["one/a.wav", "two/a.wav", "three/a.wav"]
    assert _names(files, ["one", "two"]) == ["a.json", "a-2.json", "a-3.json"]


def test_a_name_does_not_depend_on_which_outputs_are_done(tmp_path: Path) -> None:
    """The in-process `--resume` named only the files left to do, so `a.mp3`, left alone, took
    the name of `a.wav`'s output and overwrote it."""
    files = [tmp_path / "in" / "a.mp3", tmp_path / "in" / "a.wav"]
    work = plan(files, FORMATS["csv"], tmp_path / "out", [tmp_path / "in"])
    work[1].target.parent.mkdir(parents=True)
    work[1].target.write_text("done")
    assert remaining(work) == [work[0]]
    assert work[0].target != work[1].target
    again = plan(files, FORMATS["csv"], tmp_path / "out", [tmp_path / "in"])
    assert again == work
