"""``GET /duplicates``: exact copies and near-duplicates among the indexed photos."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from vsekit.index.duplicates import MIN_THRESHOLD, NEAR_THRESHOLD, find_duplicates
from vsekit.index.scan import printable
from vsekit.serve.errors import ApiError
from vsekit.serve.state import Service, display_path, service

router = APIRouter()
Svc = Annotated[Service, Depends(service)]


@router.get("/duplicates")
def duplicates(
    svc: Svc,
    threshold: Annotated[float, Query(ge=MIN_THRESHOLD, le=1)] = NEAR_THRESHOLD,
    kind: Literal["all", "exact", "near"] = "all",
) -> dict:
    """Groups of duplicate photos: ``exact`` (same content) and ``near`` (cosine of their
    embeddings >= ``threshold``), each with its files (id, path, thumbnail)."""
    with svc.lock:
        snap = svc.coll.snapshot
        if svc.coll.similarity != "cosine" and kind != "exact":
            raise ApiError(400, "kind: near-duplicates need a cosine model's embeddings")
    groups = find_duplicates(snap, threshold, kind)  # on the snapshot: outside the lock
    roots = svc.roots_for_display()
    return {
        "threshold": threshold,
        "groups": [
            {
                "kind": g.kind,
                "similarity": g.similarity,
                "files": [
                    {
                        "id": i,
                        "path": printable(p if roots is None else display_path(p, roots)),
                        "thumb": f"/thumbs/{i}",
                        "image": f"/images/{i}",
                    }
                    for i, p in zip(g.ids, g.paths, strict=True)
                ],
            }  # fmt: skip
            for g in groups
        ],
    }
