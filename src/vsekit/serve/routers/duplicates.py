"""``GET /duplicates``: exact copies and near-duplicates among the indexed photos;
``POST /duplicates/move``: keep one file of each group and move the others out (a dry
run unless ``apply``), as ``vse duplicates --move-to`` does."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, ConfigDict

from vsekit.index.dedupe import DedupeError, apply_plan, keeps_for, plan_json, plan_moves
from vsekit.index.duplicates import (
    HASH_DISTANCE,
    MAX_HASH_DISTANCE,
    MIN_THRESHOLD,
    NEAR_THRESHOLD,
    find_duplicates,
)
from vsekit.index.scan import printable
from vsekit.index.schema import CollectionError
from vsekit.serve.errors import ApiError
from vsekit.serve.state import Service, display_path, service

router = APIRouter()
Svc = Annotated[Service, Depends(service)]


def _groups(svc: Service, threshold: float, kind: str, hash_distance: int):
    with svc.lock:
        snap = svc.coll.snapshot
        if svc.coll.similarity != "cosine" and kind != "exact":
            raise ApiError(400, "kind: near-duplicates need a cosine model's embeddings")
    return snap, find_duplicates(snap, threshold, kind, hash_distance)  # outside the lock


@router.get("/duplicates")
def duplicates(
    svc: Svc,
    threshold: Annotated[float, Query(ge=MIN_THRESHOLD, le=1)] = NEAR_THRESHOLD,
    kind: Literal["all", "exact", "near"] = "all",
    hash_distance: Annotated[int, Query(ge=-1, le=MAX_HASH_DISTANCE)] = HASH_DISTANCE,
) -> dict:
    """Groups of duplicate photos: ``exact`` (same content) and ``near`` (perceptual
    hashes within ``hash_distance`` bits, or embeddings' cosine >= ``threshold``), each
    with its files (id, path, thumbnail) and ``keep``: the id of the file that
    ``POST /duplicates/move`` with ``keep=best`` keeps."""
    snap, groups = _groups(svc, threshold, kind, hash_distance)
    roots = svc.roots_for_display()
    keeps = keeps_for(snap, groups, "best")
    return {
        "threshold": threshold,
        "hash_distance": hash_distance,
        "groups": [
            {
                "kind": g.kind,
                "similarity": g.similarity,
                "hash_distance": g.hash_distance,
                "keep": k,
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
            for g, k in zip(groups, keeps, strict=True)
        ],
    }


class MoveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keep: Literal["best", "largest", "oldest"] = "best"
    #: the folder the files not kept go to: absolute, existing, outside the indexed folders
    move_to: str
    apply: bool = False  # False: a dry run, nothing moves


@router.post("/duplicates/move")
def move(svc: Svc, body: MoveRequest, request: Request) -> dict:
    """Keep one file of each duplicate group (at the default thresholds) and move the
    others into ``move_to``, under their paths relative to the indexed folder. A dry run
    (the plan) unless ``apply`` is true; nothing is deleted; when applied, the moved
    files leave the index and ``undo_file`` names the undo list written into
    ``move_to`` (``vse duplicates --undo FILE`` moves them back). Only indexed files are
    moved, and ``move_to`` must lie outside the indexed folders."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":  # a form post from another site cannot reach it
        raise ApiError(415, "body: send JSON (Content-Type: application/json)")
    if not body.move_to.strip() or not os.path.isabs(body.move_to):
        raise ApiError(400, "move_to: give an absolute path to a folder")
    snap, groups = _groups(svc, NEAR_THRESHOLD, "all", HASH_DISTANCE)
    try:
        with svc.lock:
            plan = plan_moves(snap, groups, body.keep, body.move_to, svc.coll.roots())
            if body.apply:
                apply_plan(plan, svc.coll, wait=False)
    except DedupeError as e:
        raise ApiError(400, str(e)) from e
    except CollectionError as e:
        raise ApiError(409, str(e)) from e
    roots = svc.roots_for_display()
    return plan_json(plan, lambda p: printable(p if roots is None else display_path(p, roots)))
