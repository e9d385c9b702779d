"""The audio channel of a video: a bag of quantised MFCCs (Word2VisualVec section 3.4,
after Davis & Mermelstein 1980).

1. MFCCs per 25 ms-ish frame (librosa's defaults at 16 kHz: ``n_fft`` 2048, hop 512),
   ``n_mfcc`` coefficients, standardised with the codebook's train-frame mean and std.
2. A k-means codebook of ``k`` centroids (FAISS), fitted on MFCC frames of the *training*
   clips only.
3. Per clip: the histogram of nearest centroids, L1-normalised (it sums to 1).

A clip without an audio track, or whose track is silent (RMS below ``SILENCE_RMS``), gets
a zero histogram and a flag, so "no sound" is never confused with a sound. MFCCs need
librosa and decoding needs PyAV: both are in the ``[video]`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RATE = 16_000
N_MFCC = 20
SILENCE_RMS = 1e-4
#: flags stored per clip
AUDIO_OK, AUDIO_NONE, AUDIO_SILENT = 0, 1, 2
FLAG_NAMES = {AUDIO_OK: "audio", AUDIO_NONE: "no audio track", AUDIO_SILENT: "silent"}


def mfcc(y: np.ndarray | None, rate: int = RATE, n_mfcc: int = N_MFCC) -> tuple[np.ndarray, int]:
    """``([T, n_mfcc] float32, flag)``; ``T`` is 0 for a missing or silent track."""
    if y is None:
        return np.zeros((0, n_mfcc), np.float32), AUDIO_NONE
    y = np.asarray(y, np.float32)
    if len(y) == 0 or float(np.sqrt(np.mean(y**2))) < SILENCE_RMS:
        return np.zeros((0, n_mfcc), np.float32), AUDIO_SILENT
    try:
        import librosa
    except ImportError as e:
        raise ImportError("MFCCs need the [video] extra: pip install 'vsekit[video]'") from e
    n_fft = min(2048, 1 << int(np.floor(np.log2(max(len(y), 32)))))
    m = librosa.feature.mfcc(y=y, sr=rate, n_mfcc=n_mfcc, n_fft=n_fft, hop_length=n_fft // 4)
    return np.ascontiguousarray(m.T, dtype=np.float32), AUDIO_OK


@dataclass
class AudioCodebook:
    """``k`` centroids ``[k, n_mfcc]`` over standardised MFCC frames."""

    centroids: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    n_fit: int  # MFCC frames it was fitted on

    @property
    def k(self) -> int:
        return len(self.centroids)

    @classmethod
    def fit(
        cls, frames: np.ndarray, k: int, seed: int = 0, max_frames: int = 200_000
    ) -> AudioCodebook:
        """k-means (FAISS, 20 iterations) on ``frames [T, n_mfcc]`` (a seeded sample of
        at most ``max_frames``)."""
        import faiss

        frames = np.asarray(frames, np.float32)
        if len(frames) < k:
            raise ValueError(
                f"audio codebook: {len(frames)} MFCC frames cannot fit {k} centroids; "
                "use a smaller k or more training clips with sound"
            )
        rng = np.random.default_rng(seed)
        if len(frames) > max_frames:
            frames = frames[rng.choice(len(frames), max_frames, replace=False)]
        mean, std = frames.mean(0), frames.std(0) + 1e-6
        x = np.ascontiguousarray((frames - mean) / std, dtype=np.float32)
        km = faiss.Kmeans(x.shape[1], k, niter=20, seed=seed, verbose=False)
        km.train(x)
        return cls(km.centroids.copy(), mean.astype(np.float32), std.astype(np.float32), len(x))

    def assign(self, frames: np.ndarray) -> np.ndarray:
        """``[T]`` index of the nearest centroid of each frame (squared L2)."""
        x = (np.asarray(frames, np.float32) - self.mean) / self.std
        d = (x**2).sum(1)[:, None] - 2 * x @ self.centroids.T + (self.centroids**2).sum(1)[None]
        return d.argmin(1)

    def histogram(self, frames: np.ndarray) -> np.ndarray:
        """``[k]`` L1-normalised bag of quantised MFCCs (zeros for no frames)."""
        h = np.zeros(self.k, np.float32)
        if len(frames):
            h += np.bincount(self.assign(frames), minlength=self.k).astype(np.float32)
            h /= h.sum()
        return h

    def arrays(self) -> dict[str, np.ndarray]:
        return {"centroids": self.centroids, "mean": self.mean, "std": self.std}
