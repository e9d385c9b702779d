"""Queries against a collection, shared by the CLI and the HTTP service: text in, image
in, with the model's own similarity and the same input checks everywhere."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from vsekit.bundle import bundle_dir, precision_of
from vsekit.evidence.store import evidence_tap, fill_index_evidence
from vsekit.index.algebra import parse_query, query_vector
from vsekit.index.collection import Collection, Hit, UpdateReport, check_model, model_info
from vsekit.index.filters import Filters
from vsekit.index.snapshot import Snapshot
from vsekit.index.stacking import stacked_search
from vsekit.runtime import BaseModel, ModelError, load_model
from vsekit.runtime.relevance import model_relevance
from vsekit.text.spelling import Normalised, speller_for
from vsekit.text.tokenizer import tokenize

MAX_QUERY_CHARS = 500
MAX_K = 1000


def check_query(text: str) -> str:
    """The stripped query; ValueError if it is empty, not UTF-8 (undecodable bytes on a
    command line arrive as lone surrogates) or longer than MAX_QUERY_CHARS."""
    q = (text or "").strip()
    if not q:
        raise ValueError("query: empty")
    try:
        q.encode("utf-8")
    except UnicodeEncodeError as e:  # bytes that are not UTF-8, as the shell passed them
        raise ValueError(f"query: not valid UTF-8 text (at character {e.start + 1})") from None
    if len(q) > MAX_QUERY_CHARS:
        raise ValueError(f"query: {len(q)} characters, at most {MAX_QUERY_CHARS}")
    return q


def check_words(model: BaseModel, text: str) -> list[str]:
    """The query's words the model does not know (it reads them as ``<unk>``);
    ValueError if it knows none of them, since the ranking would then mean nothing."""
    known, unknown = model.unknown_words(text)
    if unknown and not known:
        raise ValueError(f"query: the model knows none of its words ({', '.join(unknown)})")
    return unknown


def correct_query(model: BaseModel, text: str, allow_paths: bool = True) -> Normalised:
    """The query as search reads it: in each sentence term, the informal forms and
    misspellings of words the model does not know (or knows only weakly) rewritten to
    words it learnt (:mod:`vsekit.text.spelling`), with the changes made; the rest of
    the query (operators, weights, ``#ID``, paths) as typed. Unchanged for a model that
    reads word pieces alone (it has no training-word counts). ValueError for a
    malformed query, as :func:`embed_query` raises."""
    q = check_query(text)
    vocab = model.text_vocabulary
    if vocab is None:
        return Normalised(q)
    speller = speller_for(vocab)
    parts, changes, at = [], [], 0
    for t in parse_query(q, allow_paths):
        if t.text is None:
            continue
        start = q.index(t.text, at)  # a term's text is a piece of the query as typed
        fixed = speller.normalise(t.text)
        parts += [q[at:start], fixed.text]
        changes += fixed.changes
        at = start + len(t.text)
    if not changes:
        return Normalised(q)
    return Normalised(check_query("".join([*parts, q[at:]])), tuple(changes))


def check_k(k: int) -> int:
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k: must be between 1 and {MAX_K}, got {k}")
    return k


def _score_fn(model: BaseModel):
    if model.similarity_name == "cosine":
        return None  # plain dot products of unit vectors: exact or FAISS
    return lambda emb, q: model.similarity(emb, q).T  # [n, Q] -> [Q, n]


def embed_query(
    model: BaseModel,
    text: str,
    indexed: Callable[[int], np.ndarray | None] = lambda _: None,
    allow_paths: bool = True,
) -> tuple[np.ndarray, list[str]]:
    """``([1, D] query vector, words the model does not know)`` of a text query, with
    the query algebra of :mod:`vsekit.index.algebra` (``"a dog" + "beach" - "snow"``,
    weights, ``#ID`` and, where ``allow_paths``, photo files). ``indexed(id)``: an
    indexed photo's embedding. ValueError naming the term that is malformed or whose
    words the model knows none of."""
    q = check_query(text)
    terms = parse_query(q, allow_paths)
    if len(terms) == 1 and terms[0].text is not None and terms[0].weight == 1:
        return model.encode_text([terms[0].text]), check_words(model, terms[0].text)
    if model.similarity_name != "cosine":
        raise ValueError(
            f"query: sums of terms, #ID and photo terms need a cosine model, not "
            f"{model.similarity_name}"
        )
    unknown: list[str] = []
    for t in terms:
        if t.text is not None:
            try:
                unknown += check_words(model, t.text)
            except ValueError as e:
                raise ValueError(f"query: term {t.describe()}: {str(e).split(': ', 1)[1]}") from e
    vec = query_vector(terms, lambda s: model.encode_text([s])[0], model.encode_image, indexed)
    return vec[None], unknown


def search_text(
    coll: Collection,
    model: BaseModel,
    text: str,
    k: int = 20,
    method: str = "auto",
    filters: Filters | None = None,
    stack: bool = False,
) -> list[Hit]:
    """Photos for a text query, with the query algebra (:func:`embed_query`), among
    those ``filters`` keep."""
    emb, _ = embed_query(model, text, coll.embedding_of)
    cue = has_text(text)
    return search_text_embedding(coll, model, emb, k, method, filters, stack, cue, text,
                                 query_words(text))  # fmt: skip


def has_text(query: str, allow_paths: bool = True) -> bool:
    """Whether a query has a sentence among its terms: the relevance cue is calibrated on
    sentences, so a query of photos alone (``#12``, ``./a.jpg``) gets none."""
    return any(t.text is not None for t in parse_query(check_query(query), allow_paths))


def query_words(query: str, allow_paths: bool = True) -> int:
    """The number of words in a query's sentence terms (tokens with a letter or digit in
    them: ``"a dog" + "beach"`` has 3, ``#12`` none): the relevance cue reads a query of
    few words with the thresholds calibrated on short texts
    (:mod:`vsekit.runtime.relevance`)."""
    terms = parse_query(check_query(query), allow_paths)
    return sum(text_words(t.text) for t in terms if t.text is not None)


def text_words(text: str) -> int:
    """The words of one sentence term, as :func:`query_words` counts them."""
    return sum(any(c.isalnum() for c in w) for w in tokenize(text))


def _ranked(snap: Snapshot, k: int, stack: bool, search) -> list[Hit]:
    """The first ``k`` hits of ``search(n)`` (the first ``n`` hits of one snapshot), or,
    with ``stack``, the first ``k`` stacks of copies (:mod:`vsekit.index.stacking`)."""
    check_k(k)
    if not stack:
        return search(k)
    return stacked_search(search, snap, k)


def search_text_embedding(
    coll: Collection,
    model: BaseModel,
    q: np.ndarray,
    k: int = 20,
    method: str = "auto",
    filters: Filters | None = None,
    stack: bool = False,
    cue: bool = True,
    text: str | None = None,
    words: int | None = None,
) -> list[Hit]:
    """Images best matching an already-embedded text query ``q`` ([D] or [1, D]), scored
    with the model's own similarity (the service embeds outside its collection lock),
    less each image's CSLS penalty when the model has hubness reduction, plus the
    bonus of the model's enabled evidence sources for the query ``text`` where given
    (:func:`evidence_text`; a query they have nothing to say about ranks exactly as
    without). One snapshot serves the whole query, so a writer's commit cannot put the
    two out of step. Each hit carries the relevance cue of its score when the model
    ships a calibration (:mod:`vsekit.runtime.relevance`) unless ``cue`` is False (a
    query of photo terms only: see :func:`has_text`), read with the thresholds for a
    query of ``words`` words (:func:`query_words`; None: those for sentences); ``stack``
    folds copies of a photo into one hit."""
    snap = coll.snapshot
    bias = text_query_bias(coll, model, snap)
    bonus = None if text is None else query_evidence_bias(coll, model, snap, text)
    bias = _add(bias, bonus)
    q = np.atleast_2d(q)
    hits = _ranked(snap, k, stack, lambda n: coll.search(
        q, n, method, _score_fn(model), bias, snap, filters)[0])  # fmt: skip
    rel = model_relevance(model) if cue else None
    if rel is None:
        return hits
    rel = rel.bands(words)

    def band(h: Hit) -> str:
        """The cue of the score the thresholds were calibrated on: the model's
        (similarity less the CSLS penalty), without the evidence bonus."""
        pos = snap.id_to_pos.get(h.id) if bonus is not None else None
        return rel.cue(h.score - (0.0 if pos is None else float(bonus[snap.rows[pos]])))

    return [replace(h, cue=band(h), copies=tuple(replace(c, cue=band(c)) for c in h.copies))
            for h in hits]  # fmt: skip


def _add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    if a is None or b is None:
        return a if b is None else b
    return a + b


def evidence_text(query: str, allow_paths: bool = True) -> str:
    """The words of a query the evidence sources read: its sentence terms with a positive
    weight, joined (``"a red car" - "snow"`` -> ``a red car``: a term taken away names
    nothing the photos should have)."""
    terms = parse_query(check_query(query), allow_paths)
    return ", ".join(t.text for t in terms if t.text is not None and t.weight > 0)


def query_evidence_bias(
    coll: Collection, model: BaseModel, snap: Snapshot, query: str
) -> np.ndarray | None:
    """``[rows]``: the bonus of the model's enabled evidence sources for ``query``
    (:func:`vsekit.evidence.store.evidence_bias`); None when none has anything to say."""
    from vsekit.evidence.store import evidence_bias, model_sources

    sources = model_sources(model)
    text = evidence_text(query) if sources else ""
    if not text:
        return None
    return evidence_bias(coll.path, snap, sources, text)


def text_query_bias(
    coll: Collection, model: BaseModel, snap: Snapshot | None = None
) -> np.ndarray | None:
    """``[rows]``: minus each indexed image's CSLS penalty (:mod:`vsekit.runtime.hubness`),
    read from the index's verified cache and completed in memory; None without hubness
    reduction. Writes nothing."""
    hub = model.hubness
    if hub is None:
        return None
    return -coll.row_penalties(model.image_penalty, hub.key, snap)


def store_caches(coll: Collection, model: BaseModel) -> None:
    """What ``vse index`` stores after an update, under the writer lock: the photos'
    hubness penalties (only rows the cache lacks are computed) and, for large indexes,
    the FAISS index."""
    hub = model.hubness
    if hub is None:
        coll.store_caches()
    else:
        coll.store_caches(model.image_penalty, hub.key)


def update_index(
    coll: Collection,
    model: BaseModel,
    folder: str | os.PathLike,
    batch_size: int = 16,
    progress: bool = False,
    exclude: Sequence[str] = (),
    batches=None,
) -> UpdateReport:
    """One index update as ``vse index``, ``--watch``, ``vse serve --watch`` and
    :meth:`vsekit.index.PhotoIndex.add` make it: embed what is new or changed under
    ``folder`` (``batches``: where embedded batches come from, e.g. a Ray cluster), then
    store each photo's hubness penalty (:func:`store_caches`) and, under the writer
    lock, the enabled evidence sources' arrays, computed from the pixels the update
    decoded (:func:`vsekit.evidence.store.fill_index_evidence`)."""
    tap = evidence_tap(model)
    rep = coll.update(folder, model.encode_image, batch_size, progress,
                      reduce_to=model.decode_size, exclude=exclude, batches=batches,
                      tap=tap)  # fmt: skip
    store_caches(coll, model)
    with coll.store.writer():  # one writer at a time fills the evidence files too
        coll.refresh()  # what another writer committed meanwhile keeps its evidence
        fill_index_evidence(coll, model, progress=progress, tap=tap)
    return rep


def search_vector(
    coll: Collection,
    model: BaseModel,
    emb: np.ndarray,
    k: int = 20,
    method: str = "auto",
    filters: Filters | None = None,
    stack: bool = False,
    leave_out: str | None = None,
) -> list[Hit]:
    """Images nearest to an image embedding (cosine between image embeddings); no
    relevance cue (the calibration is for text queries). ``leave_out``: a path whose
    hit is not listed (the query photo itself, when it is indexed)."""
    snap = coll.snapshot
    q = np.atleast_2d(emb)

    def search(n: int) -> list[Hit]:
        if leave_out is None:
            return coll.search(q, n, method, snap=snap, filters=filters)[0]
        hits = coll.search(q, n + 1, method, snap=snap, filters=filters)[0]
        return [h for h in hits if os.path.realpath(h.path) != leave_out][:n]

    return _ranked(snap, k, stack, search)


def search_image(
    coll: Collection,
    model: BaseModel,
    image,
    k: int = 20,
    method: str = "auto",
    filters: Filters | None = None,
    stack: bool = False,
) -> list[Hit]:
    """``image``: a path or a PIL image (ImageError if unreadable). "Photos like this
    one": a path that is itself indexed is not listed among them."""
    own = os.path.realpath(image) if isinstance(image, (str, os.PathLike)) else None
    return search_vector(coll, model, model.encode_image(image), k, method, filters, stack,
                         leave_out=own)  # fmt: skip


def open_collection(
    index: str | Path, model_name: str | None = None, device: str | None = None
) -> tuple[Collection, BaseModel]:
    """The collection at ``index`` and its model (by default the one it was built with),
    loaded once: the image precision (fp32 / int8) whose fingerprint is the index's is
    read from the bundle first. CollectionError if the model's fingerprint is not the
    index's (:func:`~vsekit.index.schema.check_model`)."""
    coll = Collection(index)
    name = model_name or coll.model_name
    precision = None
    if not os.environ.get("VSEKIT_PRECISION"):
        try:
            precision = precision_of(bundle_dir(name), coll.fingerprint)
        except ModelError:
            precision = None
    model = load_model(name, device=device, image_precision=precision)
    check_model(coll.path, coll.snapshot.meta, model_info(model, name))
    return coll, model
