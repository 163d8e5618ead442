"""The speech model: equal to silero-vad's own model, thread-safe, scriptable."""

from __future__ import annotations

import threading

import numpy as np
import soxr
import torch
from silero_vad import load_silero_vad

from arengine.models.speech import CONTEXT, WINDOW, SpeechModel
from tests.conftest import Phrases


def _speech_16k(phrases: tuple[list[np.ndarray], int]) -> np.ndarray:
    audio, rate = phrases
    gap = np.zeros(8000, np.float32)
    return np.concatenate([np.concatenate([gap, soxr.resample(a, rate, 16000)]) for a in audio])


def _windows(audio: np.ndarray) -> np.ndarray:
    n = -(-len(audio) // WINDOW)
    x = np.zeros(CONTEXT + n * WINDOW, np.float32)
    x[CONTEXT : CONTEXT + len(audio)] = audio
    return x


def test_matches_the_package_model_on_real_speech(
    speech_model: SpeechModel, phrases: Phrases
) -> None:
    x = _windows(_speech_16k(phrases))
    reference = load_silero_vad()
    reference.reset_states()
    n = (len(x) - CONTEXT) // WINDOW
    with torch.no_grad():
        theirs = torch.cat(
            [
                reference(
                    torch.from_numpy(x[CONTEXT + i * WINDOW : CONTEXT + (i + 1) * WINDOW]), 16000
                )
                for i in range(n)
            ],
            dim=1,
        )[0]
        ours = speech_model(torch.from_numpy(x)[None])[0]
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() <= 1e-4
    assert (theirs > 0.5).sum() > n // 4  # the comparison covers real speech, not only silence


def test_many_threads_sharing_the_model_match_one_thread(
    speech_model: SpeechModel, phrases: Phrases
) -> None:
    audio = _speech_16k(phrases)
    inputs = [torch.from_numpy(_windows(audio[i * 3000 :]))[None] for i in range(8)]
    with torch.no_grad():
        serial = [speech_model(x) for x in inputs]
    results: dict[tuple[int, int], torch.Tensor] = {}
    barrier = threading.Barrier(8)

    def work(worker: int) -> None:
        barrier.wait()
        for round_ in range(3):
            index = (worker + round_) % len(inputs)
            with torch.no_grad():
                results[(worker, round_)] = speech_model(inputs[index])

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 24
    for (worker, round_), out in results.items():
        assert torch.equal(out, serial[(worker + round_) % len(inputs)])


def test_batch_rows_are_independent(speech_model: SpeechModel, phrases: Phrases) -> None:
    audio = _speech_16k(phrases)[: 20 * WINDOW]
    a, b = _windows(audio), _windows(audio[::-1].copy())
    with torch.no_grad():
        batched = speech_model(torch.from_numpy(np.stack([a, b])))
        single = speech_model(torch.from_numpy(b)[None])
    assert torch.allclose(batched[1], single[0], atol=1e-6)


def test_scripted_model_gives_the_same_probabilities(
    speech_model: SpeechModel, phrases: Phrases
) -> None:
    x = torch.from_numpy(_windows(_speech_16k(phrases)))[None]
    scripted = torch.jit.script(speech_model)
    with torch.no_grad():
        assert torch.allclose(scripted(x), speech_model(x), atol=1e-5)
