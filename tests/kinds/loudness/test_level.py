"""The level of a window in dBFS: known signals give their known levels."""

from __future__ import annotations

import numpy as np
import pytest

from arengine.kinds.loudness.level import FLOOR_DBFS, levels_dbfs

RATE = 16000


@pytest.mark.parametrize("amplitude", [1.0, 0.5, 0.01])
def test_a_sine_is_its_amplitude_less_3_db(amplitude: float) -> None:
    t = np.arange(RATE) / RATE
    sine = (amplitude * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    levels = levels_dbfs(sine, 800)
    assert levels.shape == (20,)
    assert levels == pytest.approx(20 * np.log10(amplitude) - 3.0103, abs=0.01)


def test_a_full_scale_square_is_0_dbfs_and_silence_the_floor() -> None:
    square = np.tile(np.array([1, -1], np.float32), 800)
    audio = np.concatenate([square, np.zeros(1600, np.float32)])
    assert levels_dbfs(audio, 800).tolist() == [0.0, 0.0, FLOOR_DBFS, FLOOR_DBFS]


def test_each_window_is_its_own_samples_and_a_partial_one_is_left_out() -> None:
    audio = np.concatenate([np.full(800, 0.1), np.full(800, 0.01), np.full(300, 1.0)])
    assert levels_dbfs(audio.astype(np.float32), 800).tolist() == pytest.approx(
        [-20, -40], abs=1e-4
    )
