"""Search filters from what photos say about themselves (EXIF): capture date, camera and
place. A filter selects files before the top-k, so a search returns exactly ``k``
results whenever at least ``k`` files match (exact and FAISS search alike).

Dates are partial ISO dates, each naming the day its period starts: ``--after
2019-06`` keeps photos taken on or after 1 June 2019, ``--before 2020`` those taken
before 1 January 2020 (so ``--after 2019-06 --before 2019-07`` is June 2019). A photo without an
EXIF date is dated by its file's modification time (``taken_from="mtime"`` in its
metadata). ``camera`` matches a case-insensitive part of "make model" (``pixel``,
``canon eos``). ``near`` keeps photos with GPS within a radius (``LAT,LON,KM``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_DATE = re.compile(r"^(\d{4})(?:-(\d{1,2}))?(?:-(\d{1,2}))?$")


def parse_date(text: str, field: str) -> str:
    """``2019`` / ``2019-06`` / ``2019-06-15`` -> the ISO day that starts the period:
    ``--after`` keeps photos taken on or after it, ``--before`` those taken before it
    (``--before 2020``: up to the last moment of 2019)."""
    import datetime as dt

    m = _DATE.match(text.strip())
    if not m:
        raise ValueError(f"{field}: {text!r} is not a date (YYYY, YYYY-MM or YYYY-MM-DD)")
    y, mo, d = int(m.group(1)), int(m.group(2) or 1), int(m.group(3) or 1)
    try:
        return dt.date(y, mo, d).isoformat()
    except ValueError as e:
        raise ValueError(f"{field}: {text!r}: {e}") from None


def parse_near(text: str) -> tuple[float, float, float]:
    """``"LAT,LON,KM"`` (``KM`` defaults to 10)."""
    parts = [p.strip() for p in text.split(",")]
    try:
        lat, lon = float(parts[0]), float(parts[1])
        km = float(parts[2]) if len(parts) > 2 else 10.0
    except (IndexError, ValueError):
        raise ValueError(f"near: {text!r} is not LAT,LON[,KM]") from None
    if len(parts) > 3 or not (-90 <= lat <= 90 and -180 <= lon <= 180 and km > 0):
        raise ValueError(f"near: {text!r} is not LAT,LON[,KM] (|lat| <= 90, |lon| <= 180, km > 0)")
    return lat, lon, km


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance in km (arrays broadcast; NaN stays NaN)."""
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dp, dl = p2 - p1, np.radians(np.asarray(lon2) - np.asarray(lon1))
    a = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * 6371.0088 * np.arcsin(np.sqrt(np.clip(a, 0, 1)))


@dataclass(frozen=True)
class Filters:
    """``after``/``before``: ISO days (on or after / strictly before);
    ``camera``: a part of "make model"; ``near``: ``(lat, lon, km)``."""

    after: str | None = None
    before: str | None = None
    camera: str | None = None
    near: tuple[float, float, float] | None = None

    @classmethod
    def parse(
        cls,
        after: str | None = None,
        before: str | None = None,
        camera: str | None = None,
        near: str | None = None,
    ) -> Filters:
        """From user text (CLI flags, query parameters); ValueError naming the field."""
        cam = (camera or "").strip().lower() or None
        f = cls(
            parse_date(after, "after") if after else None,
            parse_date(before, "before") if before else None,
            cam,
            parse_near(near) if near else None,
        )
        if f.after and f.before and f.after >= f.before:
            raise ValueError(f"after: {after} is not before {before}")
        return f

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.after, self.before, self.camera, self.near))

    def files(self, snap) -> np.ndarray:
        """``[files]`` bool: which files of ``snap`` pass (unknown values never pass a
        filter on them). Vectorised over the snapshot's metadata arrays."""
        arr = snap.photo_meta.get("arrays")
        n = len(snap)
        if self and n and not snap.photo_meta.get("recorded", True):
            raise ValueError(
                "filters: this index holds no photo dates, cameras or places yet (it was "
                "made before they were recorded); run `vse index FOLDER` once to add them"
            )
        if arr is None:
            return np.ones(n, bool)
        keep = np.ones(n, bool)
        if self.after or self.before:
            taken = arr["taken"]
            keep &= taken != ""
            if self.after:
                keep &= taken >= self.after
            if self.before:
                keep &= taken < self.before
        if self.camera:
            match = np.array([self.camera in c for c in arr["cameras"]], bool)
            keep &= match[arr["camera_of"]] if len(match) else False
        if self.near:
            lat0, lon0, km = self.near
            with np.errstate(invalid="ignore"):  # NaN (no GPS) compares False
                box = np.flatnonzero(np.abs(arr["lat"] - lat0) <= km / 110.0)  # a cheap cut
            near = np.zeros(n, bool)
            near[box[haversine_km(lat0, lon0, arr["lat"][box], arr["lon"][box]) <= km]] = True
            keep &= near
        return keep

    def rows(self, snap) -> np.ndarray:
        """``[n_rows]`` bool: the live rows of the files that pass (a video's segments
        with it)."""
        ok = self.files(snap)
        allowed = np.zeros(snap.n_rows, bool)
        allowed[snap.rows[ok]] = True
        for pos, seg in snap.segment_rows.items():
            if ok[pos]:
                allowed[seg] = True
        return allowed & snap.live
