"""The bag-of-MFCC audio channel of a video FeatureStore (Word2VisualVec section 3.4).

``add_audio(store, paths)`` decodes each row's audio track, fits the k-means codebook
on the ``fit_split`` rows only (as the FNE statistics are fitted on train), and writes::

    audio.f32                [n, k] float32, L1-normalised histograms (zeros: no sound)
    audio_flags.u8           [n] uint8: 0 audio, 1 no audio track, 2 silent
    audio_codebook.safetensors  centroids, MFCC mean and std

and ``meta["audio"]`` with the settings. Each clip's MFCC frames are kept in
``.audio-mfcc/<row>.npy`` (written atomically) as they are computed, so a killed run
resumes where it stopped; the files above are written atomically at the end and the
MFCC cache is then removed. The visual rows are never touched.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tqdm import tqdm

from vsekit.fsio import atomic_write, np_bytes
from vsekit.lab.audio import FLAG_NAMES, N_MFCC, RATE, AudioCodebook, mfcc
from vsekit.lab.features.store import FeatureStore, StoreError
from vsekit.media.video import read_audio


def add_audio(
    store: FeatureStore,
    paths: Mapping[str, str | Path],
    fit_split: str = "train",
    k: int = 1024,
    seed: int = 0,
    n_mfcc: int = N_MFCC,
    progress: bool = True,
) -> dict:
    """Compute and store the audio histograms of every row; returns ``meta["audio"]``.

    ``paths``: the media file of each store id. Raises :class:`StoreError` when an id has
    no path or the fit split has too few MFCC frames for ``k`` centroids."""
    missing = [i for i in store.ids if i not in paths]
    if missing:
        raise StoreError(f"{store.path}: no media file for {len(missing)} id(s), e.g. {missing[0]}")
    frames, flags = [], np.zeros(store.n, np.uint8)
    cache = store.path / ".audio-mfcc"
    cache.mkdir(exist_ok=True)
    for row, i in enumerate(tqdm(store.ids, desc="audio", unit="clip", disable=not progress)):
        f = cache / f"{row}.npy"
        if f.is_file():  # computed by an earlier, interrupted run
            d = np.load(f)
            m, flag = d[1:], int(d[0, 0])
        else:
            m, flag = mfcc(read_audio(paths[i], RATE), RATE, n_mfcc)
            head = np.full((1, n_mfcc), flag, np.float32)
            atomic_write(f, np_bytes(np.concatenate([head, m])))
        frames.append(m)
        flags[row] = flag
    fit_rows = store.rows(fit_split)
    if len(fit_rows) == 0:
        raise StoreError(f"{store.path}: no rows in split {fit_split!r} to fit the codebook on")
    fit = [frames[r] for r in fit_rows if len(frames[r])]
    if not fit:
        raise StoreError(f"{store.path}: no clip of split {fit_split!r} has sound")
    try:
        book = AudioCodebook.fit(np.concatenate(fit), k, seed)
    except ValueError as e:
        raise StoreError(f"{store.path}: {e}") from e
    hist = np.stack([book.histogram(f) for f in frames]) if frames else np.zeros((0, k))
    atomic_write(store.path / "audio.f32", np.ascontiguousarray(hist, np.float32).tobytes())
    atomic_write(store.path / "audio_flags.u8", flags.tobytes())
    atomic_write(
        store.path / "audio_codebook.safetensors",
        lambda t: save_file(book.arrays(), str(t)),
    )
    counts = {FLAG_NAMES[f]: int((flags == f).sum()) for f in FLAG_NAMES}
    info = {
        "k": book.k,
        "fit_split": fit_split,
        "n_fit_clips": len(fit),
        "n_fit_frames": book.n_fit,
        "rate": RATE,
        "n_mfcc": n_mfcc,
        "seed": seed,
        "clips": counts,
    }
    store.meta["audio"] = info
    atomic_write(store.path / "meta.json", json.dumps(store.meta, indent=2))
    shutil.rmtree(cache, ignore_errors=True)
    return info
