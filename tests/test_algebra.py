"""Query algebra: parsing, and rankings equal to a naive weighted sum of unit vectors."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.conftest import hubness_bundle, make_tiny_model, write_image
from vsekit.index import Collection, model_info
from vsekit.index.algebra import Term, parse_query
from vsekit.index.query import search_text, store_caches, text_query_bias

CAPTIONS = ["a dog runs on grass", "a red car", "two people in the snow", "a red dog"]


@pytest.mark.parametrize(
    "query,terms",
    [
        ("a dog on a beach", [Term(1, text="a dog on a beach")]),
        ("black-and-white dog", [Term(1, text="black-and-white dog")]),
        ("12:30 train", [Term(1, text="12:30 train")]),
        ('"a dog" + "beach" - "snow"',
         [Term(1, text="a dog"), Term(1, text="beach"), Term(-1, text="snow")]),
        ('2:"golden retriever" - 0.5:#12',
         [Term(2, text="golden retriever"), Term(-0.5, file_id=12)]),
        ('dog + "cat - mouse"', [Term(1, text="dog"), Term(1, text="cat - mouse")]),
        ("#3 + ./x.jpg", [Term(1, file_id=3), Term(1, path="x.jpg")]),
    ],
)  # fmt: skip
def test_parse(query, terms):
    got = parse_query(query)
    assert [(t.weight, t.text, t.file_id) for t in got] == [
        (t.weight, t.text, t.file_id) for t in terms
    ]
    assert [t.path is None for t in got] == [t.path is None for t in terms]


@pytest.mark.parametrize(
    "query,msg",
    [('"dog" + "cat', "not closed"), ('"dog" + ""', "empty"), ("dog +  + cat", "empty term"),
     ('do"g" + cat', "quote the whole term"), ("1" + "0" * 39 + ':"dog" + "cat"', "weight")],
)  # fmt: skip
def test_malformed_queries_name_the_problem(query, msg):
    with pytest.raises(ValueError, match=msg):
        parse_query(query)


@pytest.mark.parametrize(
    "query", ['a sign that says "stop"', "/r/pics", '"unpaired quote', 'a dog\'s "toy"']
)
def test_one_plain_term_is_text_whatever_it_holds(query):
    assert parse_query(query, allow_paths=False) == [Term(1.0, text=query.strip())]


def test_the_service_never_reads_paths():
    with pytest.raises(ValueError, match="paths are not read here"):
        parse_query('"dog" + /etc/passwd', allow_paths=False)


@pytest.fixture
def indexed(tmp_path):
    bundle, photos = hubness_bundle(tmp_path, n_photos=8)
    import vsekit

    model = vsekit.load_model(str(bundle), backend="torch")
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    coll.update(photos, model.encode_image, progress=False)
    store_caches(coll, model)
    return coll, model, photos


def naive(coll, model, vectors, weights, k):
    q = sum(w * v / np.linalg.norm(v) for v, w in zip(vectors, weights, strict=True))
    q = q / np.linalg.norm(q)
    scores = np.asarray(coll.emb[coll.rows]) @ q + text_query_bias(coll, model)[coll.rows]
    order = np.argsort(-scores, kind="stable")[:k]
    return [(coll.paths[i], float(scores[i])) for i in order]


def test_ranking_equals_a_naive_weighted_sum(indexed):
    coll, model, photos = indexed
    first_id = int(coll.ids[0])
    query = f'"a dog runs" + 0.5:"a red car" - "people in snow" + 2:#{first_id}'
    hits = search_text(coll, model, query, k=5, method="exact")
    vecs = [model.encode_text(t) for t in ("a dog runs", "a red car", "people in snow")]
    vecs.append(coll.embedding_of(first_id))
    want = naive(coll, model, vecs, [1, 0.5, -1, 2], 5)
    assert [h.path for h in hits] == [p for p, _ in want]
    np.testing.assert_allclose([h.score for h in hits], [s for _, s in want], atol=1e-5)


def test_an_image_file_term_is_its_image_embedding(indexed):
    coll, model, photos = indexed
    path = sorted(photos.iterdir())[2]
    hits = search_text(coll, model, f'"a red car" - 0.5:{path}', k=4, method="exact")
    want = naive(coll, model, [model.encode_text("a red car"), model.encode_image(str(path))],
                 [1, -0.5], 4)  # fmt: skip
    assert [h.path for h in hits] == [p for p, _ in want]


def test_one_term_is_the_plain_query(indexed):
    coll, model, _ = indexed
    a = search_text(coll, model, "a red car", k=8, method="exact")
    b = search_text(coll, model, '"a red car"', k=8, method="exact")
    want = naive(coll, model, [model.encode_text("a red car")], [1], 8)
    assert [h.path for h in a] == [h.path for h in b] == [p for p, _ in want]


def test_faiss_ranks_sums_as_exact_does(indexed):
    coll, model, _ = indexed
    q = '"a dog runs" - "a red car"'
    exact = search_text(coll, model, q, k=5, method="exact")
    fast = search_text(coll, model, q, k=5, method="faiss")
    assert [h.path for h in exact] == [h.path for h in fast]


def test_unknown_words_are_checked_per_term(indexed):
    coll, model, _ = indexed
    with pytest.raises(ValueError, match="term 1:'zzqx': the model knows none"):
        search_text(coll, model, '"a dog" + "zzqx"', k=3)
    with pytest.raises(ValueError, match="#999: no indexed photo"):
        search_text(coll, model, '"a dog" + #999', k=3)
    with pytest.raises(ValueError, match="cancel"):
        search_text(coll, model, '"a dog" - "a dog"', k=3)


def test_service_takes_sums_and_ids_but_no_paths(tmp_path):
    from vsekit.serve.app import create_app

    model = make_tiny_model(CAPTIONS)
    for i in range(4):
        write_image(tmp_path / "p" / f"{i}.jpg", seed=i)
    coll = Collection(tmp_path / "idx", model_info(model, "tiny"))
    coll.update(tmp_path / "p", model.encode_image, progress=False)
    client = TestClient(create_app(coll, model), base_url="http://127.0.0.1")
    r = client.get("/search", params={"q": f'"a dog" - "a red car" + #{coll.ids[0]}', "k": 4})
    want = search_text(coll, model, f'"a dog" - "a red car" + #{coll.ids[0]}', k=4)
    assert r.status_code == 200 and [x["id"] for x in r.json()["results"]] == [h.id for h in want]
    r = client.get("/search", params={"q": '"a dog" + /etc/passwd'})
    assert r.status_code == 400 and "paths are not read here" in r.json()["error"]


def test_unknown_words_are_named_per_term_without_embedding(indexed, monkeypatch):
    from vsekit.index.api import PhotoIndex

    coll, model, _ = indexed
    index = PhotoIndex(coll, model, "tiny")
    monkeypatch.setattr(model, "encode_text", lambda *a, **k: pytest.fail("embedded"))
    assert index.unknown_words('"a dog zzqx" + "a red car"') == ["zzqx"]
    with pytest.raises(ValueError, match="knows none"):
        index.unknown_words('"a dog" + "zzqx"')
