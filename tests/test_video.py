"""Video: frame sampling and decoding, the bag-of-MFCC audio channel, the video dataset
loaders, video FeatureStores and Word2VideoVec through the shared trainer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.media import write_video
from vsekit.lab.audio import AUDIO_NONE, AUDIO_OK, AUDIO_SILENT, AudioCodebook, mfcc
from vsekit.lab.data import DatasetError, load_dataset
from vsekit.media import video
from vsekit.media.images import ImageError, ImageTooLarge

pytest.importorskip("av")

RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


# ------------------------------------------------------------------ sampling, decoding
@pytest.mark.parametrize(
    "duration, sampling, want",
    [
        (3.0, video.Sampling(every=1.0), [0.5, 1.5, 2.5]),
        (2.5, video.Sampling(every=1.0), [0.5, 1.5, 2.5]),  # the last, partial interval too
        (0.4, video.Sampling(every=1.0), [0.2]),  # shorter than one interval: its middle
        (4.0, video.Sampling(every=None, n=4), [0.5, 1.5, 2.5, 3.5]),
        (10.0, video.Sampling(every=1.0, max_frames=2), [2.5, 7.5]),  # sparser, not cut
    ],
)
def test_sample_times(duration, sampling, want):
    np.testing.assert_allclose(video.sample_times(duration, sampling), want)


def test_sampling_needs_exactly_one_rule():
    with pytest.raises(ValueError, match="exactly one"):
        video.Sampling(every=1.0, n=3)
    with pytest.raises(ValueError, match="> 0"):
        video.Sampling(every=0.0)


def test_frames_are_the_ones_shown_at_the_sampled_times(tmp_path):
    p = write_video(tmp_path / "c.mp4", [RED, GREEN, BLUE], seconds_each=1.0)
    times, frames = video.read_frames(p, video.Sampling(every=0.5))
    np.testing.assert_allclose(times, [0.25, 0.75, 1.25, 1.75, 2.25, 2.75])
    colours = [np.asarray(f)[10, 10].argmax() for f in frames]  # 0 red, 1 green, 2 blue
    assert colours == [0, 0, 1, 1, 2, 2]
    _, small = video.read_frames(p, video.Sampling(every=1.0), reduce_to=24)
    assert small[0].size == (32, 24)  # scaled down to the short side, aspect kept
    info = video.probe(p)
    assert info.duration == pytest.approx(3.0, abs=0.1) and not info.has_audio


def test_unreadable_videos_are_clear_errors(tmp_path, monkeypatch):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 100)
    with pytest.raises(ImageError, match="bad.mp4"):
        video.read_frames(bad)
    with pytest.raises(video.VideoError, match="no such file"):
        video.read_frames(tmp_path / "missing.mp4")
    p = write_video(tmp_path / "ok.mp4", [RED], size=(64, 48))
    monkeypatch.setattr(video, "MAX_PIXELS", 64 * 48 - 1)
    with pytest.raises(ImageTooLarge, match="64x48"):
        video.read_frames(p)
    # a truncated file: what decodes is used or it is an error, never a crash
    whole = write_video(tmp_path / "whole.mp4", [RED, GREEN, BLUE]).read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole[: len(whole) // 3])
    with pytest.raises(ImageError):
        video.read_frames(cut)


def test_segments_group_frames_by_time():
    segs = video.segments(np.array([0.5, 1.5, 2.5, 3.5, 4.5]), 5.0, 2.0)
    assert [(s, e, list(i)) for s, e, i in segs] == [
        (0.0, 2.0, [0, 1]),
        (2.0, 4.0, [2, 3]),
        (4.0, 5.0, [4]),
    ]


# ------------------------------------------------------------------ audio
def test_audio_track_tone_silence_and_none(tmp_path):
    tone = video.read_audio(write_video(tmp_path / "t.mp4", [RED, GREEN], audio="tone"))
    assert tone is not None and len(tone) == pytest.approx(32000, rel=0.1)
    m, flag = mfcc(tone)
    assert flag == AUDIO_OK and m.shape[1] == 20 and len(m) > 10
    silent = video.read_audio(write_video(tmp_path / "s.mp4", [RED], audio="silence"))
    assert mfcc(silent)[1] == AUDIO_SILENT and len(mfcc(silent)[0]) == 0
    assert video.read_audio(write_video(tmp_path / "n.mp4", [RED])) is None
    assert mfcc(None)[1] == AUDIO_NONE


def test_codebook_assignment_equals_naive_nearest_centroid():
    rng = np.random.default_rng(0)
    frames = rng.normal(size=(500, 20)).astype(np.float32) * 3 + 1
    book = AudioCodebook.fit(frames, 16, seed=0)
    x = (frames - book.mean) / book.std
    naive = [int(np.argmin([np.sum((r - c) ** 2) for c in book.centroids])) for r in x]
    assert book.assign(frames).tolist() == naive
    h = book.histogram(frames[:50])
    assert h.shape == (16,) and h.sum() == pytest.approx(1.0)
    assert np.array_equal(h * 50, np.bincount(naive[:50], minlength=16))
    assert not book.histogram(np.zeros((0, 20), np.float32)).any()
    with pytest.raises(ValueError, match="cannot fit 1000 centroids"):
        AudioCodebook.fit(frames, 1000)


# ------------------------------------------------------------------ dataset loaders
def test_msvd_layout_with_the_standard_split(tmp_path):
    root = tmp_path / "msvd"
    (root / "YouTubeClips").mkdir(parents=True)
    clips = ["abc_1_5", "def_0_9", "ghi_3_8"]
    for c in clips:
        write_video(root / "YouTubeClips" / f"{c}.avi", [RED])
    (root / "AllVideoDescriptions.txt").write_text(
        "# header comment\nabc_1_5 a man is slicing an onion\nabc_1_5 someone cuts an onion\n"
        "def_0_9 a cat plays with a ball\nghi_3_8 a girl rides a horse\n"
    )
    (root / "youtube_mapping.txt").write_text("abc_1_5 vid1\ndef_0_9 vid1250\nghi_3_8 vid1400\n")
    ds = load_dataset(root)
    assert ds.name == "msvd" and [im.id for im in ds.images] == clips
    assert [im.split for im in ds.images] == ["train", "dev", "test"]
    assert ds.captions_per_image().tolist() == [2, 1, 1]
    (root / "YouTubeClips" / "ghi_3_8.avi").unlink()
    with pytest.raises(DatasetError, match="1 captioned video file.*ghi_3_8"):
        load_dataset(root)
    assert len(load_dataset(root, "msvd", missing="skip")) == 2


def test_msvd_original_csv_keeps_english_rows(tmp_path):
    root = tmp_path / "msvd"
    (root / "YouTubeClips").mkdir(parents=True)
    write_video(root / "YouTubeClips" / "abc_1_5.avi", [RED])
    (root / "MSR Video Description Corpus.csv").write_text(
        "VideoID,Start,End,WorkerID,Source,AnnotationTime,Language,Description\n"
        "abc,1,5,7,clean,20,English,a man slices an onion\n"
        "abc,1,5,8,clean,22,German,ein Mann schneidet eine Zwiebel\n"
    )
    ds = load_dataset(root)
    assert ds.texts == ["a man slices an onion"]


def test_msrvtt_json(tmp_path):
    root = tmp_path / "msrvtt"
    (root / "TrainValVideo").mkdir(parents=True)
    for v in ("video0", "video1"):
        write_video(root / "TrainValVideo" / f"{v}.mp4", [RED])
    info = {
        "videos": [
            {"video_id": "video0", "split": "train"},
            {"video_id": "video1", "split": "validate"},
        ],
        "sentences": [
            {"video_id": "video0", "caption": "a car drives", "sen_id": 0},
            {"video_id": "video1", "caption": "people dance", "sen_id": 1},
            {"video_id": "video1", "caption": "a group dances", "sen_id": 2},
        ],
    }
    (root / "train_val_videodatainfo.json").write_text(json.dumps(info))
    ds = load_dataset(root)
    assert ds.name == "msrvtt" and [im.split for im in ds.images] == ["train", "dev"]
    assert ds.split("dev").texts == ["people dance", "a group dances"]
    info["sentences"].append({"video_id": "video9", "caption": "x"})
    (root / "train_val_videodatainfo.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"sentences\[3\]: video 'video9'"):
        load_dataset(root)


def video_folder(tmp_path, n=8, n_train=6, audio=True):
    """A folder of clips with captions.jsonl: clip k shows colour k then white, and its
    captions carry a word that names it. Clip 0 has no audio track, clip 1 is silent."""
    root = tmp_path / "clips"
    root.mkdir()
    rng = np.random.default_rng(0)
    recs = []
    for k in range(n):
        colour = tuple(int(x) for x in rng.integers(0, 255, 3))
        kind = None if (k == 0 or not audio) else "silence" if k == 1 else "tone"
        write_video(root / f"c{k}.mp4", [colour, WHITE], seconds_each=1.0, audio=kind)
        split = "train" if k < n_train else "dev"
        for j in range(2):
            recs.append({"video": f"c{k}.mp4", "caption": f"clip w{k} shown {j}", "split": split})
    (root / "captions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return root


def test_folder_of_videos_loads(tmp_path):
    ds = load_dataset(video_folder(tmp_path, n=3, n_train=2, audio=False))
    assert [im.path.suffix for im in ds.images] == [".mp4"] * 3 and len(ds.captions) == 6


# ------------------------------------------------------------------ FeatureStore
def test_video_row_is_the_mean_over_frames_and_crops(tmp_path):
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.extract import ExtractItem, embed_images, extract_to_store

    root = video_folder(tmp_path, n=3, n_train=2, audio=False)
    ds = load_dataset(root)
    items = [ExtractItem(im.id, im.path, im.split) for im in ds.images]
    items.append(ExtractItem("broken", root / "broken.mp4", "train"))
    (root / "broken.mp4").write_bytes(b"not a video")
    model = create_backbone("tiny-test", weights="random")
    sampling = video.Sampling(every=0.5)
    store = extract_to_store(
        items, tmp_path / "store", model, crops=2, batch_size=2, progress=False, sampling=sampling
    )
    assert store.n == 3 and store.meta["video"] == sampling.describe()
    assert (
        json.loads((tmp_path / "store" / "failed.jsonl").read_text().splitlines()[0])["id"]
        == "broken"
    )
    # naive reference: every frame through the image path, then the mean over frames
    from vsekit.lab.features.crops import decode_size

    _, frames = video.read_frames(items[1].path, sampling, decode_size(model.input_size))
    per_frame, _ = embed_images(model.eval(), frames, crops=2)
    np.testing.assert_allclose(store.pooled[1], per_frame.mean(0), rtol=1e-5, atol=1e-6)
    # other sampling settings are another store
    from vsekit.lab.features.store import StoreError

    with pytest.raises(StoreError, match="video"):
        extract_to_store(items, tmp_path / "store", model, crops=2, batch_size=2,
                         progress=False, sampling=video.Sampling(every=2.0))  # fmt: skip


def test_video_extraction_resumes_to_the_same_bytes(tmp_path):
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.extract import ExtractItem, extract_to_store

    ds = load_dataset(video_folder(tmp_path, n=4, n_train=3, audio=False))
    items = [ExtractItem(im.id, im.path, im.split) for im in ds.images]
    model = create_backbone("tiny-test", weights="random")
    whole = extract_to_store(items, tmp_path / "a", model, crops=1, batch_size=1, progress=False)

    class Kill(Exception):
        pass

    def die(done):
        if done == 2:
            raise Kill

    with pytest.raises(Kill):
        extract_to_store(items, tmp_path / "b", model, crops=1, batch_size=1, progress=False,
                         on_batch=die)  # fmt: skip
    resumed = extract_to_store(items, tmp_path / "b", model, crops=1, batch_size=1, progress=False)
    assert np.array_equal(np.asarray(whole.pooled), np.asarray(resumed.pooled))


# ------------------------------------------------------------------ Word2VideoVec
def test_word2videovec_with_audio_trains_and_evaluates_from_a_config(tmp_path, capsys):
    from vsekit.cli import main

    root = video_folder(tmp_path)
    cfg = tmp_path / "w2vv.yaml"
    cfg.write_text(f"""
name: tiny-word2videovec
data: {{root: {root}, store: {tmp_path / "store"}, backbone: tiny-test, crops: 1,
        weights: random, features: baseline_raw+audio, video_every: 0.5, audio_k: 4}}
model: {{kind: w2vv, text: {{kind: bow}}, hidden: [16], similarity: cosine}}
loss: {{name: mse}}
train: {{optimizer: rmsprop, lr: 0.01, epochs: 3, batch_size: 4, captions: all,
         collapse_epochs: 0, grad_clip: 0}}
""")
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--run-dir", str(run)]) == 0
    meta = json.loads((tmp_path / "store" / "meta.json").read_text())
    assert meta["audio"]["k"] == 4 and meta["audio"]["fit_split"] == "train"
    assert meta["audio"]["clips"] == {"audio": 6, "no audio track": 1, "silent": 1}
    from vsekit.lab.features.store import FeatureStore
    from vsekit.lab.train.features import image_features

    store = FeatureStore(tmp_path / "store")
    flags = store.audio_flags
    assert flags[0] == AUDIO_NONE and flags[1] == AUDIO_SILENT and (flags[2:] == AUDIO_OK).all()
    assert not store.audio[:2].any() and np.allclose(store.audio[2:].sum(1), 1.0)
    feats = image_features(store, "baseline_raw+audio", store.ids[:3])
    assert feats.shape == (3, 5 + 4)  # tiny backbone's fc (5) + 4 audio words
    capsys.readouterr()
    assert main(["eval", str(run), "--split", "dev"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[1].startswith("video-to-sentence") and "Med r" in table


def test_joint_embedding_trains_on_video_features(tmp_path):
    from vsekit.lab.train.config import ExperimentConfig, from_dict
    from vsekit.lab.train.retrieval_data import load_train_data
    from vsekit.lab.train.trainer import Trainer

    root = video_folder(tmp_path, audio=False)
    cfg = from_dict(ExperimentConfig, {
        "data": {"root": str(root), "store": str(tmp_path / "store"), "backbone": "tiny-test",
                 "crops": 1, "weights": "random", "features": "baseline"},
        "model": {"text": {"kind": "gru", "word_dim": 8, "embed_dim": 8}},
        "train": {"epochs": 2, "batch_size": 4, "collapse_epochs": 0},
    })  # fmt: skip
    data = load_train_data(cfg, progress=False)
    assert data.train_feats.shape == (6, 5)
    res = Trainer(cfg, data, tmp_path / "run", progress=False).fit()
    assert np.isfinite(res["best_metrics"]["rsum"])
    assert torch.isfinite(data.train_feats).all()


def test_audio_pass_resumes_after_a_kill(tmp_path, monkeypatch):
    from vsekit.lab.features import audio_store
    from vsekit.lab.features.backbones import create_backbone
    from vsekit.lab.features.extract import ExtractItem, extract_to_store
    from vsekit.lab.features.store import FeatureStore

    ds = load_dataset(video_folder(tmp_path, n=5, n_train=4))
    items = [ExtractItem(im.id, im.path, im.split) for im in ds.images]
    model = create_backbone("tiny-test", weights="random")
    store = extract_to_store(items, tmp_path / "s", model, crops=1, progress=False)
    paths = {im.id: im.path for im in ds.images}
    real, calls = audio_store.read_audio, []

    def dying(path, rate):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(path, rate)

    monkeypatch.setattr(audio_store, "read_audio", dying)
    with pytest.raises(KeyboardInterrupt):
        audio_store.add_audio(store, paths, k=2, progress=False)
    assert "audio" not in FeatureStore(tmp_path / "s").meta  # nothing half-written
    calls.clear()
    monkeypatch.setattr(audio_store, "read_audio", lambda p, r: (calls.append(p), real(p, r))[1])
    info = audio_store.add_audio(FeatureStore(tmp_path / "s"), paths, k=2, progress=False)
    assert len(calls) == 3  # the two clips done before the kill are not decoded again
    assert info["clips"] == {"audio": 3, "no audio track": 1, "silent": 1}
    assert not (tmp_path / "s" / ".audio-mfcc").exists()
