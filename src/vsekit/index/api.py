"""The Python API over a photo index: :func:`open_index`, used by the CLI and the service.

index = vsekit.open_index("~/.cache/vsekit/index")
index.add("~/Pictures")                  # embed new and changed photos
for hit in index.search("a dog on a beach", k=5):
    print(hit.score, hit.path)
index.search('"a dog" + "beach" - "snow"', filters=Filters.parse(after="2019-06"))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from PIL import Image

from vsekit.index.algebra import parse_query
from vsekit.index.collection import Collection, Hit, UpdateReport, model_info
from vsekit.index.filters import Filters
from vsekit.index.query import (
    check_query,
    check_words,
    correct_query,
    open_collection,
    search_image,
    search_text,
    update_index,
)
from vsekit.runtime import BaseModel, load_model
from vsekit.text.spelling import Normalised


class PhotoIndex:
    """A folder index and the model it was built with (loaded once)."""

    def __init__(self, collection: Collection, model: BaseModel, model_name: str) -> None:
        self.collection = collection
        self.model = model
        self.model_name = model_name

    def __len__(self) -> int:
        return len(self.collection)

    @property
    def path(self) -> Path:
        return self.collection.path

    def add(
        self,
        folder: str | os.PathLike,
        batch_size: int = 16,
        progress: bool = False,
        exclude: Sequence[str] = (),
    ) -> UpdateReport:
        """Embed the photos and videos under ``folder`` that are new or changed, drop the
        ones that are gone, and store each new photo's hubness penalty and evidence
        (:func:`vsekit.index.query.update_index`)."""
        return update_index(self.collection, self.model, folder, batch_size, progress, exclude)

    def search(
        self,
        query: str | os.PathLike | Image.Image,
        k: int = 20,
        method: str = "auto",
        filters: Filters | None = None,
        stack: bool = False,
        exact: bool = False,
    ) -> list[Hit]:
        """Photos best matching ``query``: a sentence or a sum of terms (``str``, see
        :mod:`vsekit.index.algebra`), or an image (a :class:`pathlib.Path` or a PIL
        image) for photos that look like it; among those ``filters`` keep
        (``Filters.parse(after="2019-06", camera="pixel")``). ``stack``: copies of one
        photo make one hit, the others in its ``copies`` (:mod:`vsekit.index.stacking`).
        A text query's hits carry a relevance cue (``strong``/``weak``/``none``) where
        the model ships a calibration. A text query is searched as :meth:`correct`
        rewrites it (misspellings and informal forms of words the model does not know),
        as ``vse search`` searches it, unless ``exact``."""
        if isinstance(query, str):
            if not exact:
                query = self.correct(query).text
            return search_text(self.collection, self.model, query, k, method, filters, stack)
        return search_image(self.collection, self.model, query, k, method, filters, stack)

    def correct(self, query: str) -> Normalised:
        """The text query as :meth:`search` reads it and the words it rewrote
        (:func:`vsekit.index.query.correct_query`): ``index.correct("kid on
        skatebord").text == "kid on skateboard"``."""
        return correct_query(self.model, query)

    def unknown_words(self, query: str) -> list[str]:
        """The words of a text query (each term of a sum) the model does not know: it
        reads them as ``<unk>``. ValueError for a malformed query or a term whose words
        it knows none of, as :meth:`search` would raise."""
        out: list[str] = []
        for term in parse_query(check_query(query)):  # words only: nothing is embedded
            if term.text is not None:
                out += check_words(self.model, term.text)
        return out

    def weak_words(self, query: str) -> list[tuple[str, int]]:
        """``(word, count)`` for the words of a text query the model knows only weakly
        (:meth:`vsekit.runtime.base.BaseModel.weak_words`; count 0: only by analogy)."""
        out: dict[str, int] = {}
        for term in parse_query(check_query(query)):
            if term.text is not None:
                out.update(self.model.weak_words(term.text))
        return list(out.items())

    def close(self) -> None:
        self.collection.close()


def open_index(
    path: str | os.PathLike,
    model: str | None = None,
    create: bool = False,
    storage: str = "f32",
) -> PhotoIndex:
    """The index at ``path`` with the model it was built with (or ``model``, which must
    have the same fingerprint). ``create=True`` makes a new, empty index for ``model``
    (default: the shipped default model) when ``path`` holds none, storing its rows as
    ``storage`` (``f32``, or ``int8``: a quarter of the disk, for collections beyond RAM)."""
    path = Path(path).expanduser()
    if create and not (path / "index.sqlite").exists():
        name = model or "default"
        m = load_model(name)
        return PhotoIndex(Collection(path, dict(model_info(m, name), storage=storage)), m, name)
    coll, m = open_collection(path, model)
    return PhotoIndex(coll, m, model or coll.model_name)
