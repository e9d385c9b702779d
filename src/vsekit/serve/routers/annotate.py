"""``POST /annotate`` (an uploaded image) and ``GET /annotate/{id}`` (an indexed one):
the best captions of the model's pool, and tags when it has a tagger, under the model's
consensus re-ranking and annotation veto when it has them on."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Query, UploadFile

from vsekit.bundle import ModelError
from vsekit.media.video import is_video
from vsekit.runtime.annotator import annotate_arrays
from vsekit.serve.errors import ApiError
from vsekit.serve.state import Service, service

router = APIRouter()
Svc = Annotated[Service, Depends(service)]


def _veto(svc: Service):
    """The model's annotation veto, or None; a damaged installation is a 500 naming
    its file."""
    try:
        return svc.model.annotation_veto
    except ModelError as e:
        raise ApiError(500, f"annotation veto: {e}") from e


def _consensus(svc: Service):
    """The model's consensus re-ranking, or None; a bad setting is a 500 naming its file
    and field."""
    try:
        return svc.model.annotator.consensus
    except ModelError as e:
        raise ApiError(500, f"annotation consensus: {e}") from e


def annotation(svc: Service, emb, k: int, feats=None) -> dict:
    """Captions and tags (:func:`vsekit.runtime.annotator.annotate_arrays`); with the
    model's annotation veto on, also what it left out and why."""
    a = annotate_arrays(svc.model, emb, k=k, features=feats, n_tags=10,
                        pool=svc.caption_pool(), veto=_veto(svc),
                        consensus=_consensus(svc))[0]  # fmt: skip
    return a.as_dict(digits=6)


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
    """From the stored embedding; tags and the annotation veto need the image's
    features, so it is decoded."""
    with svc.lock:
        emb = svc.coll.embedding_of(file_id)
    if emb is None:
        raise ApiError(404, f"id: no indexed image {file_id}")
    feats = None
    wanted = svc.model.tagger is not None or _veto(svc) is not None
    if wanted and not is_video(svc.path_of(file_id) or ""):
        with svc.open_indexed(file_id) as fh:
            im = svc.decode(fh, f"id: image {file_id}", svc.model.decode_size)
        with svc.backbone_slots:
            feats = svc.model.image_features([im])
    return annotation(svc, emb, k, feats)
