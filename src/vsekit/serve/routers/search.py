"""``GET /search``, ``POST /search/image`` and ``GET /health``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Query, UploadFile

from vsekit.index.filters import Filters
from vsekit.index.query import (
    MAX_K,
    MAX_QUERY_CHARS,
    check_query,
    correct_query,
    embed_query,
    has_text,
    query_words,
    search_text_embedding,
    search_vector,
)
from vsekit.index.schema import DamagedIndex
from vsekit.serve.errors import ApiError
from vsekit.serve.state import Service, hit_json, service
from vsekit.text.spelling import Normalised

router = APIRouter()
Svc = Annotated[Service, Depends(service)]


@router.get("/health")
def health(svc: Svc) -> dict:
    from vsekit.runtime.precision import cpu_info

    with svc.lock:
        n = len(svc.coll)
    choice = svc.model.precision_choice
    precision = {"image": svc.model.precision, "text": "fp32",
                 "reason": f"the {svc.model.backend} backend runs fp32"}  # fmt: skip
    if choice is not None:
        precision = choice.as_dict()
    return {"status": "ok", "images": n, "model": svc.coll.model_name,
            "precision": precision, "cpu": cpu_info().int8_class}  # fmt: skip


@router.get("/search")
def search(
    svc: Svc,
    q: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_CHARS)],
    k: Annotated[int, Query(ge=1, le=MAX_K)] = 20,
    after: Annotated[str | None, Query(max_length=10)] = None,
    before: Annotated[str | None, Query(max_length=10)] = None,
    camera: Annotated[str | None, Query(max_length=100)] = None,
    near: Annotated[str | None, Query(max_length=60)] = None,
    stack: bool = False,
    exact: bool = False,
) -> dict:
    """Photos and videos for a text query (a video hit names the ``start`` and ``end``
    of its best segment, in seconds). Query algebra: ``"a dog" + "beach" - "snow"``,
    ``2:"golden retriever"``, ``#ID`` for an indexed photo. Filters from EXIF:
    ``after``/``before`` (2019, 2019-06, 2019-06-15), ``camera``, ``near`` (LAT,LON,KM).
    Each result has its raw ``score`` and a relevance ``cue`` (``strong``, ``weak`` or
    ``none``, calibrated on held-out captions, and for a query of a few words on their
    noun phrases; null if the model has no calibration or the query has no sentence,
    only photo terms).
    ``stack=true`` (what the page asks): copies of one photo (same content or
    near-duplicates) are one result, the others listed in its ``copies`` (each a result
    of its own); by default every file is its own result and ``copies`` is empty.
    Misspellings and informal forms of words the model does not know are corrected
    (``searched``: the query as searched; ``corrections``: each word's ``from``, ``to``
    and ``why``) unless ``exact=true``."""
    try:  # the model is read-only: encode outside the collection's lock
        q = check_query(q)
        fix = Normalised(q) if exact else correct_query(svc.model, q, allow_paths=False)
        emb, _ = embed_query(svc.model, fix.text, svc.embedding_of, allow_paths=False)
        filters = Filters.parse(after, before, camera, near)
    except DamagedIndex as e:  # a damaged stored row (#ID): the index's fault
        raise ApiError(503, str(e)) from e
    except ValueError as e:
        raise ApiError(400, str(e)) from e
    cue = has_text(q, allow_paths=False)  # photo terms alone (#ID) get no cue
    found = svc.hits(search_text_embedding, emb, k, filters=filters, stack=stack, cue=cue,
                     text=fix.text, words=query_words(fix.text, allow_paths=False))  # fmt: skip
    return {"query": q, "searched": fix.text,
            "corrections": [c.as_dict() for c in fix.changes],
            "results": [hit_json(h, svc.roots_for_display()) for h in found]}  # fmt: skip


@router.post("/search/image")
def search_image(
    svc: Svc,
    file: Annotated[UploadFile, File()],
    k: Annotated[int, Query(ge=1, le=MAX_K)] = 20,
    after: Annotated[str | None, Query(max_length=10)] = None,
    before: Annotated[str | None, Query(max_length=10)] = None,
    camera: Annotated[str | None, Query(max_length=100)] = None,
    near: Annotated[str | None, Query(max_length=60)] = None,
    stack: bool = False,
) -> dict:
    """Photos similar to an uploaded image (multipart ``file``), among those the EXIF
    filters keep; ``stack`` as for ``GET /search`` (no relevance cue)."""
    try:
        filters = Filters.parse(after, before, camera, near)
    except DamagedIndex as e:  # a damaged stored row (#ID): the index's fault
        raise ApiError(503, str(e)) from e
    except ValueError as e:
        raise ApiError(400, str(e)) from e
    im = svc.read_upload(file)
    with svc.backbone_slots:
        emb = svc.model.encode_image(im)
    found = svc.hits(search_vector, emb, k, filters=filters, stack=stack)
    return {"results": [hit_json(h, svc.roots_for_display()) for h in found]}
