"""``POST /annotate`` (an uploaded image) and ``GET /annotate/{id}`` (an indexed one):
the best captions of the model's pool, and tags when it has a tagger."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Query, UploadFile

from vsekit.media.video import is_video
from vsekit.serve.errors import ApiError
from vsekit.serve.state import Service, service

router = APIRouter()
Svc = Annotated[Service, Depends(service)]


def annotation(svc: Service, emb, k: int, feats=None) -> dict:
    caps = svc.caption_pool().best(emb, k)[0]
    tags = svc.model.tags_from_features(feats, 10)[0] if feats is not None else []
    return {
        "captions": [{"text": c, "score": round(s, 6)} for c, s in caps],
        "tags": [{"tag": t, "score": round(s, 6)} for t, s in tags],
    }


@router.post("/annotate")
def annotate(
    svc: Svc, file: Annotated[UploadFile, File()], k: Annotated[int, Query(ge=1, le=50)] = 5
) -> dict:
    im = svc.read_upload(file)
    with svc.backbone_slots:
        emb, feats = svc.model.embed_with_features([im])
    return annotation(svc, emb, k, feats)


@router.get("/annotate/{file_id}")
def annotate_indexed(svc: Svc, file_id: int, k: Annotated[int, Query(ge=1, le=50)] = 5) -> dict:
    """From the stored embedding; tags need the image's features, so it is decoded."""
    with svc.lock:
        emb = svc.coll.embedding_of(file_id)
    if emb is None:
        raise ApiError(404, f"id: no indexed image {file_id}")
    feats = None
    if svc.model.tagger is not None and not is_video(svc.path_of(file_id) or ""):
        with svc.open_indexed(file_id) as fh:
            im = svc.decode(fh, f"id: image {file_id}", svc.model.decode_size)
        with svc.backbone_slots:
            feats = svc.model.image_features([im])
    return annotation(svc, emb, k, feats)
