"""Small real videos for tests, written with PyAV: solid-colour or image-based frames,
optionally with a sine-tone or silent audio track."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
from PIL import Image


def write_video(
    path: Path,
    frames: Sequence[Image.Image | tuple[int, int, int]],
    seconds_each: float = 1.0,
    fps: int = 8,
    size: tuple[int, int] = (64, 48),
    audio: str | None = None,
    codec: str | None = None,
) -> Path:
    """A clip showing each of ``frames`` (an image or an RGB colour) for
    ``seconds_each``. ``audio``: None (no track), ``"tone"`` or ``"silence"``."""
    import av

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    codec = codec or ("libvpx" if path.suffix == ".webm" else "mpeg4")
    with av.open(str(path), "w") as c:
        vs = c.add_stream(codec, rate=fps)
        vs.width, vs.height = size
        vs.pix_fmt = "yuv420p"
        a_stream = None
        if audio is not None:
            a_stream = c.add_stream(
                "libopus" if path.suffix == ".webm" else "aac",
                rate=48000 if path.suffix == ".webm" else 16000,
            )
            a_stream.layout = "mono"
        n_per = max(1, round(seconds_each * fps))
        k = 0
        for f in frames:
            im = f if isinstance(f, Image.Image) else Image.new("RGB", size, f)
            im = im.convert("RGB").resize(size)
            for _ in range(n_per):
                vf = av.VideoFrame.from_image(im)
                vf.pts = k
                vf.time_base = Fraction(1, fps)
                k += 1
                for p in vs.encode(vf):
                    c.mux(p)
        for p in vs.encode():
            c.mux(p)
        if a_stream is not None:
            total = len(frames) * n_per / fps
            n = int(total * 16000)
            t = np.arange(n) / 16000
            y = 0.3 * np.sin(2 * np.pi * 440 * t) * (1 + np.sin(2 * np.pi * 3 * t))
            if audio == "silence":
                y = np.zeros(n)
            pos, step = 0, a_stream.codec_context.frame_size or 1024
            while pos < n:
                chunk = y[pos : pos + step].astype(np.float32)[None]
                af = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
                af.sample_rate = 16000
                af.pts = pos
                af.time_base = Fraction(1, 16000)
                pos += step
                for p in a_stream.encode(af):
                    c.mux(p)
            for p in a_stream.encode():
                c.mux(p)
    return path
