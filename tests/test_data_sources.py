from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import write_image
from vsekit.lab.data import (
    DatasetError,
    detect_format,
    load_dataset,
    load_flickr8k,
    load_karpathy,
    load_precomp,
)


# ------------------------------------------------------------------ Flickr8k
def make_flickr8k(root: Path, crlf: bool = False) -> Path:
    names = ["a_1.jpg", "b_2.jpg", "c_3.jpg", "d_4.jpg"]
    for k, n in enumerate(names):
        write_image(root / "Flicker8k_Dataset" / n, k)
    text = root / "Flickr8k_text"
    text.mkdir()
    lines = []
    for n in names:
        for j in range(5 if n != "d_4.jpg" else 2):
            key = f"{n}.1#{j}" if (n == "b_2.jpg" and j == 0) else f"{n}#{j}"
            lines.append(f"{key}\tCaption {j} of {n} .")
    nl = "\r\n" if crlf else "\n"
    (text / "Flickr8k.token.txt").write_bytes((nl.join(lines) + nl).encode())
    (text / "Flickr_8k.trainImages.txt").write_bytes(f"a_1.jpg{nl}b_2.jpg{nl}".encode())
    (text / "Flickr_8k.devImages.txt").write_bytes(f"c_3.jpg{nl}".encode())
    # no test split file; d_4.jpg is in no split
    return root


@pytest.mark.parametrize("crlf", [False, True])
def test_flickr8k_layout_and_quirks(tmp_path, crlf):
    ds = load_flickr8k(make_flickr8k(tmp_path, crlf))
    assert [im.id for im in ds.images] == ["a_1.jpg", "b_2.jpg", "c_3.jpg", "d_4.jpg"]
    assert [im.split for im in ds.images] == ["train", "train", "dev", "unassigned"]
    assert ds.split_sizes() == {
        "train": {"images": 2, "captions": 10},
        "dev": {"images": 1, "captions": 5},
        "unassigned": {"images": 1, "captions": 2},
    }
    assert list(ds.captions_per_image()) == [5, 5, 5, 2]
    # the "name.jpg.1#0" quirk belongs to b_2.jpg; CR never leaks into text
    assert ds.captions[5].text == "Caption 0 of b_2.jpg ." and ds.captions[5].image == 1
    assert all("\r" not in c.text for c in ds.captions)
    assert ds.images[0].path.is_file()
    dev = ds.split("val")  # alias
    assert len(dev) == 1 and len(dev.captions) == 5 and dev.captions[0].image == 0


def test_flickr8k_missing_images_are_listed(tmp_path):
    root = make_flickr8k(tmp_path)
    (root / "Flicker8k_Dataset" / "c_3.jpg").unlink()
    (root / "Flicker8k_Dataset" / "d_4.jpg").unlink()
    with pytest.raises(
        DatasetError, match=r"2 captioned image file\(s\) missing: c_3.jpg, d_4.jpg"
    ):
        load_flickr8k(root)


def test_flickr8k_bad_line_names_file_and_line(tmp_path):
    root = make_flickr8k(tmp_path)
    tok = root / "Flickr8k_text" / "Flickr8k.token.txt"
    tok.write_text(tok.read_text() + "garbage line without tab\n")
    with pytest.raises(DatasetError, match=r"Flickr8k.token.txt:18:"):
        load_flickr8k(root)


def test_real_flickr8k(flickr8k_root):
    ds = load_dataset(flickr8k_root)
    assert ds.split_sizes() == {
        "train": {"images": 6000, "captions": 30000},
        "dev": {"images": 1000, "captions": 5000},
    }
    assert (ds.captions_per_image() == 5).all()
    train = ds.split("train")
    assert len(train.captions) == 30000 and train.caption_to_image.max() == 5999


# ------------------------------------------------------------------ Karpathy
def make_karpathy(root: Path) -> Path:
    entries = []
    for k, split in enumerate(["train", "val", "test", "restval"]):
        fname = f"img{k}.jpg"
        write_image(root / "images" / "sub" / fname, k)
        sents = [
            {"raw": f"Raw caption {j}.", "tokens": ["raw", "caption", str(j)]} for j in range(k + 1)
        ]
        if k == 2:
            sents = [{"tokens": ["only", "tokens"]}]
        entries.append({"filename": fname, "filepath": "sub", "split": split, "sentences": sents})
    path = root / "dataset_coco.json"
    path.write_text(json.dumps({"images": entries, "dataset": "coco"}))
    return path


def test_karpathy_splits_and_restval(tmp_path):
    path = make_karpathy(tmp_path)
    ds = load_karpathy(path, image_root=tmp_path / "images")
    assert [im.split for im in ds.images] == ["train", "dev", "test", "train"]
    assert ds.images[1].path == tmp_path / "images" / "sub" / "img1.jpg"
    assert list(ds.captions_per_image()) == [1, 2, 1, 4]
    assert ds.captions[3].text == "only tokens"
    kept = load_karpathy(path, fold_restval=False)
    assert kept.images[3].split == "restval" and kept.images[0].path is None
    assert detect_format(path) == "karpathy"
    assert load_dataset(tmp_path, "karpathy").split_sizes()["train"] == {"images": 2, "captions": 5}


def test_karpathy_missing_field(tmp_path):
    path = tmp_path / "dataset_x.json"
    path.write_text(json.dumps({"images": [{"filename": "a.jpg", "sentences": []}]}))
    with pytest.raises(DatasetError, match=r"images\[0\]: missing field 'split'"):
        load_karpathy(path)


# ------------------------------------------------------------------ precomp
@pytest.mark.parametrize("per_caption", [False, True])
def test_precomp_rows_per_image_or_per_caption(tmp_path, per_caption):
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(3, 6)).astype(np.float32)
    caps_per = 5
    rows = np.repeat(feats, caps_per, axis=0) if per_caption else feats
    np.save(tmp_path / "dev_ims.npy", rows)
    (tmp_path / "dev_caps.txt").write_text("\n".join(f"cap {k}" for k in range(15)) + "\n")
    np.save(tmp_path / "train_ims.npy", feats[:1])
    (tmp_path / "train_caps.txt").write_text("a\nb\n")
    ds = load_precomp(tmp_path)
    assert detect_format(tmp_path) == "precomp"
    assert ds.split_sizes() == {
        "dev": {"images": 3, "captions": 15},
        "train": {"images": 1, "captions": 2},
    }
    dev = ds.split("dev")
    np.testing.assert_array_equal(np.asarray(dev.features), feats)
    np.testing.assert_array_equal(dev.caption_to_image, np.repeat(np.arange(3), 5))
    np.testing.assert_array_equal(ds.split("train").features[[0]], feats[:1])


def test_precomp_mismatch(tmp_path):
    np.save(tmp_path / "test_ims.npy", np.zeros((4, 2), np.float32))
    (tmp_path / "test_caps.txt").write_text("a\nb\nc\nd\ne\nf\n")
    with pytest.raises(DatasetError, match="4 feature rows do not match 6 captions"):
        load_precomp(tmp_path)


# ------------------------------------------------------------------ COCO
def make_coco(root: Path) -> Path:
    for split, ids in (("train2014", [1, 2]), ("val2014", [3])):
        images = [{"id": i, "file_name": f"COCO_{split}_{i:012d}.jpg"} for i in ids]
        for im in images:
            write_image(root / split / im["file_name"], im["id"])
        anns = [
            {"id": 10 * i + j, "image_id": i, "caption": f"cap {j} of {i}"}
            for i in ids
            for j in range(i)
        ]
        (root / "annotations").mkdir(exist_ok=True)
        (root / "annotations" / f"captions_{split}.json").write_text(
            json.dumps({"images": images, "annotations": anns})
        )
    return root


def test_coco_split_from_file_names(tmp_path):
    root = make_coco(tmp_path)
    assert detect_format(root) == "coco"
    ds = load_dataset(root)
    assert ds.split_sizes() == {
        "train": {"images": 2, "captions": 3},
        "dev": {"images": 1, "captions": 3},
    }
    assert ds.images[2].path == root / "val2014" / "COCO_val2014_000000000003.jpg"


def test_coco_split_lists(tmp_path):
    root = make_coco(tmp_path)
    (root / "splits").mkdir()
    (root / "splits" / "test.txt").write_text("3\nCOCO_train2014_000000000001.jpg\n")
    (root / "splits" / "train.txt").write_text("2\n")
    ds = load_dataset(root, "coco")
    assert [im.split for im in ds.images] == ["test", "train", "test"]


def test_coco_bad_reference(tmp_path):
    path = tmp_path / "captions_train2014.json"
    path.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "x.jpg"}],
                "annotations": [{"image_id": 2, "caption": "c"}],
            }
        )
    )
    with pytest.raises(DatasetError, match=r"annotations\[0\]: image_id 2 not in images"):
        load_dataset(path)


# ------------------------------------------------------------------ folder
def test_folder_jsonl_and_csv(tmp_path):
    for n in ("x.jpg", "y/z.png"):
        write_image(tmp_path / n)
    (tmp_path / "captions.jsonl").write_text(
        '{"image": "x.jpg", "caption": "a red thing"}\n\n'
        '{"image": "y/z.png", "caption": "blue", "split": "dev"}\n'
        '{"file": "x.jpg", "text": "another"}\n'
    )
    ds = load_dataset(tmp_path)
    assert ds.split_sizes() == {
        "train": {"images": 1, "captions": 2},
        "dev": {"images": 1, "captions": 1},
    }
    csv_dir = tmp_path / "c"
    write_image(csv_dir / "x.jpg")
    (csv_dir / "captions.csv").write_text('image,caption\nx.jpg,"one, with comma"\nx.jpg,two\n')
    ds2 = load_dataset(csv_dir / "captions.csv")
    assert [c.text for c in ds2.captions] == ["one, with comma", "two"]


def test_folder_errors_name_line(tmp_path):
    write_image(tmp_path / "x.jpg")
    (tmp_path / "captions.jsonl").write_text(
        '{"image": "x.jpg", "caption": "ok"}\n{"image": "x.jpg"}\n'
    )
    with pytest.raises(DatasetError, match=r"captions.jsonl:2: missing field 'caption'"):
        load_dataset(tmp_path)
    (tmp_path / "captions.jsonl").write_text('{"image": "gone.jpg", "caption": "c"}\n')
    with pytest.raises(DatasetError, match="missing: gone.jpg"):
        load_dataset(tmp_path)


def test_unknown_layout(tmp_path):
    with pytest.raises(DatasetError, match="cannot tell the dataset format"):
        load_dataset(tmp_path)
