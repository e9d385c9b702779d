"""Reading videos safely: frames sampled uniformly in time, and the audio track.

Decoding uses PyAV (FFmpeg's libraries), in the ``[video]`` extra. Frames come out as
RGB PIL images, so every frame takes exactly the photo path afterwards (crops, backbone,
projection). Word2VisualVec section 3.4 mean-pools frame features over a clip; the index
also keeps per-segment vectors so a search can say *when* in a video the match is.

Sampling (:func:`sample_times`): either one frame every ``every`` seconds, at the middle
of each interval, or ``n`` frames per clip at the middles of ``n`` equal parts. A clip
shorter than one interval still gives one frame. At most ``max_frames`` frames are taken;
a longer video is sampled more sparsely, never truncated.

Failures raise :class:`VideoError` (a :class:`~vsekit.media.images.ImageError`, so everything
that reports and skips a bad photo does the same for a bad video). A frame larger than
the pixel budget of :mod:`vsekit.media.images` is refused before decoding.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
from PIL import Image

from vsekit.media.images import MAX_PIXELS, ImageError, ImageTooLarge
from vsekit.similarity import unit as l2_unit

VIDEO_SUFFIXES = (".mp4", ".mov", ".webm", ".mkv", ".m4v", ".avi")
MAX_FRAMES = 600  # frames per video at most (10 minutes at one frame a second)
INSTALL_HINT = "videos need the [video] extra: pip install 'vsekit[video]'"


class VideoError(ImageError):
    """A video could not be read; ``str(e)`` is ``"<path>: <reason>"``."""


def is_video(path: str | os.PathLike) -> bool:
    return str(path).lower().endswith(VIDEO_SUFFIXES)


def video_support() -> bool:
    """Whether PyAV is installed (the ``[video]`` extra)."""
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def _av():
    try:
        import av
    except ImportError as e:
        raise VideoError(INSTALL_HINT) from e
    return av


@dataclass(frozen=True)
class VideoInfo:
    duration: float  # seconds (0.0 when the container does not say)
    width: int
    height: int
    has_audio: bool


@dataclass(frozen=True)
class Sampling:
    """How frames are chosen: ``every`` seconds, or ``n`` per clip (exactly one is set)."""

    every: float | None = 1.0
    n: int | None = None
    max_frames: int = MAX_FRAMES

    def __post_init__(self) -> None:
        if (self.every is None) == (self.n is None):
            raise ValueError("video sampling: give exactly one of every (seconds) or n (frames)")
        if self.every is not None and not self.every > 0:
            raise ValueError(f"video sampling: every must be > 0 seconds, got {self.every}")
        if self.n is not None and self.n < 1:
            raise ValueError(f"video sampling: n must be >= 1, got {self.n}")
        if self.max_frames < 1:
            raise ValueError(f"video sampling: max_frames must be >= 1, got {self.max_frames}")

    def describe(self) -> dict:
        return {"every": self.every, "n": self.n, "max_frames": self.max_frames}


def sample_times(duration: float, sampling: Sampling) -> np.ndarray:
    """``[F]`` frame times in seconds, increasing, for a clip of ``duration`` seconds."""
    duration = max(float(duration), 0.0)
    if sampling.n is not None:
        n = min(sampling.n, sampling.max_frames)
    else:
        n = max(1, math.ceil(duration / sampling.every - 1e-9))
        n = min(n, sampling.max_frames)
    if sampling.every is not None and n * sampling.every >= duration - 1e-9 and n > 1:
        step = sampling.every
    else:
        step = duration / n if duration > 0 else 0.0
    return (np.arange(n) + 0.5) * step


def _name(src) -> str:
    return str(src) if isinstance(src, str | os.PathLike) else getattr(src, "name", "upload")


def _open(av, src):
    """A container for a path or an open binary file (the service's verified file)."""
    name = _name(src)
    if isinstance(src, str | os.PathLike):
        if not os.path.exists(name):
            raise VideoError(f"{name}: no such file")
        src = name
    try:
        return av.open(src)
    except (av.FFmpegError, UnicodeDecodeError, ValueError) as e:
        raise VideoError(f"{name}: not a readable video ({e})") from e


def _duration(container, stream) -> float:
    if container.duration:
        return container.duration / 1_000_000  # AV_TIME_BASE
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    return 0.0


def probe(path: str | os.PathLike) -> VideoInfo:
    """Duration, frame size and whether there is an audio track (no frame is decoded)."""
    av = _av()
    with _open(av, path) as c:
        if not c.streams.video:
            raise VideoError(f"{path}: no video stream")
        v = c.streams.video[0]
        return VideoInfo(
            _duration(c, v), v.codec_context.width, v.codec_context.height, bool(c.streams.audio)
        )


def _size_for(w: int, h: int, reduce_to: int | None) -> tuple[int, int]:
    if not reduce_to or min(w, h) <= reduce_to:
        return w, h
    s = reduce_to / min(w, h)
    return max(1, round(w * s)), max(1, round(h * s))


def iter_frames(
    path: str | os.PathLike | BinaryIO,
    sampling: Sampling | None = None,
    reduce_to: int | None = None,
    times: Sequence[float] | None = None,
) -> Iterator[tuple[float, Image.Image]]:
    """``(time, frame)`` for each sampled time: the frame shown then, as an RGB image
    scaled (down only) so its short side is ``reduce_to``. Decodes sequentially, once,
    holding one decoded frame at a time.

    ``times``: these times (increasing) instead of ``sampling``'s.
    Raises :class:`VideoError` for an unreadable or empty video, and
    :class:`~vsekit.media.images.ImageTooLarge` for frames over the pixel budget.
    """
    av = _av()
    sampling = sampling or Sampling()
    name = _name(path)
    with _open(av, path) as c:
        if not c.streams.video:
            raise VideoError(f"{name}: no video stream")
        stream = c.streams.video[0]
        w, h = stream.codec_context.width, stream.codec_context.height
        if w * h > MAX_PIXELS:
            raise ImageTooLarge(f"{name}: {w}x{h} frames, over the budget of {MAX_PIXELS:,} pixels")
        stream.thread_type = "AUTO"
        if times is None:
            times = sample_times(_duration(c, stream), sampling)
        out_w, out_h = _size_for(w, h, reduce_to)

        def image(frame) -> Image.Image:
            try:
                return frame.to_image(width=out_w, height=out_h).convert("RGB")
            except av.FFmpegError as e:
                raise VideoError(f"{name}: damaged video ({e})") from e

        k, prev = 0, None
        try:
            for frame in c.decode(stream):
                t = frame.time if frame.time is not None else 0.0
                while k < len(times) and t > times[k] + 1e-6:
                    yield float(times[k]), image(prev if prev is not None else frame)
                    k += 1
                if k == len(times):
                    return
                prev = frame
        except av.FFmpegError as e:
            raise VideoError(f"{name}: damaged video ({e})") from e
        if prev is None:
            raise VideoError(f"{name}: no decodable frame")
        while k < len(times):  # the last frame is shown until the end
            yield float(times[k]), image(prev)
            k += 1


def frame_at(
    src: str | os.PathLike | BinaryIO, t: float, reduce_to: int | None = None
) -> Image.Image:
    """The frame shown at ``t`` seconds (the last one if ``t`` is past the end)."""
    for _, im in iter_frames(src, reduce_to=reduce_to, times=[max(float(t), 0.0)]):
        return im
    raise VideoError(f"{_name(src)}: no decodable frame")


def read_frames(
    path: str | os.PathLike, sampling: Sampling | None = None, reduce_to: int | None = None
) -> tuple[np.ndarray, list[Image.Image]]:
    """``(times [F], frames)``: all of :func:`iter_frames` at once."""
    pairs = list(iter_frames(path, sampling, reduce_to))
    return np.array([t for t, _ in pairs]), [im for _, im in pairs]


def read_audio(
    path: str | os.PathLike, rate: int = 16_000, max_seconds: float = 600.0
) -> np.ndarray | None:
    """``[T]`` float32 mono samples at ``rate`` Hz (the first ``max_seconds``), or None
    when the file has no audio track."""
    av = _av()
    name = str(path)
    with _open(av, path) as c:
        if not c.streams.audio:
            return None
        stream = c.streams.audio[0]
        resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
        chunks, total, limit = [], 0, int(max_seconds * rate)
        try:
            for frame in c.decode(stream):
                for out in resampler.resample(frame):
                    x = out.to_ndarray().reshape(-1)
                    chunks.append(x)
                    total += len(x)
                if total >= limit:
                    break
            for out in resampler.resample(None):
                chunks.append(out.to_ndarray().reshape(-1))
        except av.FFmpegError as e:
            raise VideoError(f"{name}: damaged audio track ({e})") from e
    y = np.concatenate(chunks).astype(np.float32) if chunks else np.zeros(0, np.float32)
    return y[:limit]


def segments(
    times: np.ndarray, duration: float, seconds: float
) -> list[tuple[float, float, np.ndarray]]:
    """Group sampled frame ``times`` into consecutive segments of ``seconds``:
    ``[(start, end, frame indices)]``, empty segments left out."""
    if seconds <= 0:
        raise ValueError(f"segment length must be > 0 seconds, got {seconds}")
    end_all = max(float(duration), float(times[-1]) if len(times) else 0.0)
    idx = np.floor(np.asarray(times) / seconds).astype(np.int64)
    out = []
    for s in np.unique(idx):
        start = float(s * seconds)
        out.append((start, min(start + seconds, end_all), np.flatnonzero(idx == s)))
    return out


@dataclass
class VideoVectors:
    """A video's embeddings: one per segment, and the whole clip's."""

    clip: np.ndarray  # [D]
    segments: np.ndarray  # [S, D]
    starts: np.ndarray  # [S] seconds
    ends: np.ndarray  # [S] seconds
    frames: int  # frames embedded
    features: np.ndarray | None = None  # [F] mean frame features, when embed gave them


def embed_video(
    path: str | os.PathLike,
    embed: Callable[[Sequence[Image.Image]], np.ndarray | tuple[np.ndarray, np.ndarray]],
    sampling: Sampling | None = None,
    segment_seconds: float = 2.0,
    reduce_to: int | None = None,
    batch_size: int = 16,
    normalize: bool = True,
) -> VideoVectors:
    """Embed the sampled frames ``batch_size`` at a time with ``embed`` (images ->
    ``[n, D]``, or ``([n, D], [n, F] features)``), then average them per segment of
    ``segment_seconds`` and over the whole clip (re-normalised to unit length when
    ``normalize``); features, when given, are averaged over the clip."""
    times, vecs, feats, batch = [], [], [], []

    def run(batch: list) -> None:
        out = embed(batch)
        if isinstance(out, tuple):
            out, f = out
            feats.append(np.asarray(f, np.float32))
        vecs.append(np.asarray(out, np.float32))

    for t, im in iter_frames(path, sampling, reduce_to):
        times.append(t)
        batch.append(im)
        if len(batch) == batch_size:
            run(batch)
            batch = []
    if batch:
        run(batch)
    v = np.concatenate(vecs)

    def unit(x: np.ndarray) -> np.ndarray:
        return l2_unit(x) if normalize else x

    duration = probe(path).duration
    segs = segments(np.asarray(times), duration, segment_seconds)
    return VideoVectors(
        clip=unit(v.mean(0)),
        segments=unit(np.stack([v[i].mean(0) for _, _, i in segs])),
        starts=np.array([s for s, _, _ in segs]),
        ends=np.array([e for _, e, _ in segs]),
        frames=len(v),
        features=np.concatenate(feats).mean(0) if feats else None,
    )
