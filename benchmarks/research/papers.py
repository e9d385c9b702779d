"""The seeds' published figures, quoted from ``../shared/seeds/``, in one place.

Every reproduction in ``benchmarks/research/`` and the claims report set their results
beside these; nothing here is measured. Each table names the paper, its table, its split
and its features, which all differ from ours (Flickr8k dev, ResNet-50 on this CPU).
"""

from __future__ import annotations

# The FNE journal paper, Table 2 (Flickr8k test split, VGG16): R@1, R@5, R@10, Med r for
# annotation, then the same for retrieval.
TABLE2 = {
    "fc7-sh": (22.4, 49.8, 62.9, 6, 16.6, 41.2, 54.3, 8),
    "fne-sh": (25.0, 50.8, 64.3, 5, 18.6, 44.9, 58.0, 7),
    "fc7-mh": (23.0, 49.0, 63.3, 6, 18.5, 43.2, 56.1, 8),
    "fne-mh": (27.3, 56.8, 69.3, 4, 21.2, 47.1, 59.7, 6),
    "fc7-soe": (21.2, 48.1, 61.7, 6, 17.8, 43.6, 56.5, 8),
    "fne-soe": (24.0, 52.4, 63.9, 5, 18.7, 44.2, 57.7, 7),
    "fc7-moe": (21.5, 46.1, 60.0, 7, 15.6, 39.0, 51.9, 9),
    "fne-moe": (25.5, 55.5, 67.8, 4, 18.7, 44.4, 58.4, 7),
    "fc7-ph": (22.9, 48.8, 62.5, 6, 17.1, 41.7, 54.6, 8),
    "fne-ph": (26.3, 55.7, 68.5, 4, 20.5, 45.8, 58.1, 7),
    "fc7-poe": (21.0, 48.3, 62.0, 6, 16.9, 41.7, 55.3, 8),
    "fne-poe": (26.2, 53.6, 65.8, 5, 19.7, 45.6, 58.4, 7),
}

# Table 2's six recalls by row (annotation R@1/5/10, then retrieval; no Med r): the
# paper's rsum is their sum
TABLE2_RECALLS = {row: (*r[:3], *r[4:7]) for row, r in TABLE2.items()}

# The caption-retrieval report, Table 1 (MSCOCO, Karpathy's split, trained on 113,287
# images, searched among 1K test images; VGG-19): caption-to-image R@1, R@10, mean rank.
# Its recurrent rows, by our row names; its "GRU (Vendrov et al.)" row, which it did not
# train, stands for random word vectors.
REPORT_TABLE1 = {"fc7-soe": (37.0, 86.8, 7.3), "reg-lstm-glove": (35.4, 86.2, 7.5),
                 "reg-gru-random": (36.3, 85.8, 7.6)}  # fmt: skip
# The same table's regression baseline, plain ("Baseline") and "+ Weight".
REPORT_REGRESSION = {"plain": (10.3, 17.1, 176.1), "weight": (19.8, 65.5, 10.5)}

# Dong et al. (Word2VisualVec), Table 3 (Flickr8k test, ResNet-152 pool5 target),
# image-to-sentence R@1, R@5, R@10, Med r; their "word2vec" row stands for glove.
W2VV_I2T = {
    "bow": (33.6, 62.0, 75.3, 3),
    "trigram": (33.9, 62.0, 73.4, 3),
    "glove": (31.9, 61.8, 75.3, 3),
}
# Dong et al., Table 4: text-to-text mAP on Flickr8k, by the text representation (their
# "word2vec", 500-d vectors trained on Flickr tags, stands for glove; "nostop": stop words
# excluded from the input; "w2vv-": searched in Word2VisualVec's visual space).
W2VV_MAP = {"bow": 16.2, "bow-nostop": 26.3, "glove": 18.3, "glove-nostop": 31.1,
            "w2vv-bow": 33.1, "w2vv-glove": 36.2}  # fmt: skip
# Dong et al., Table 5 (MSVD, Xu et al.'s partition, ResNet-152): R@1, R@10, Med r,
# mean r; their "word2vec" row stands for glove.
W2VV_VIDEO = {"bow": (15.7, 41.5, 21, 171.9), "glove": (16.3, 44.8, 14, 110.2)}

# The tag-ranking paper, Tables 2-4 (COCO val, VGG-19, word2vec-300): p@1 and p@5 for
# alpha = 0, .25, .5, .75, 1, by (loss, tag scheme).
TAGS = {
    ("SJE D(I)", "nouns"): ((46.2, 57.5, 63.3, 64.6, 57.4), (68.8, 68.1, 67.9, 67.9, 66.3)),
    ("SJE D(I)", "syntactic"): ((41.1, 62.0, 62.6, 63.5, 57.3), (68.1, 67.9, 68.1, 67.8, 66.3)),
    ("SJE D(I)", "compound"): ((44.4, 55.6, 61.0, 61.6, 50.2), (69.5, 69.2, 69.2, 68.7, 64.4)),
    ("SJE D(II)", "nouns"): ((48.1, 58.5, 64.0, 65.3, 58.7), (71.6, 71.2, 70.3, 70.0, 67.5)),
    ("SJE D(II)", "syntactic"): ((43.9, 62.6, 63.1, 63.9, 58.6), (70.6, 70.2, 70.3, 69.8, 67.5)),
    ("SJE D(II)", "compound"): ((46.4, 56.6, 61.6, 62.4, 52.1), (72.3, 71.7, 71.2, 70.6, 65.4)),
    ("ListSJE K=5", "nouns"): ((46.6, 56.2, 62.5, 64.2, 57.9), (74.2, 74.1, 74.2, 73.9, 69.0)),
    ("ListSJE K=5", "syntactic"): ((42.8, 60.9, 61.7, 62.7, 58.0), (73.0, 73.2, 73.3, 73.2, 69.0)),
    ("ListSJE K=5", "compound"): ((44.9, 53.9, 59.7, 61.2, 50.9), (74.7, 74.7, 74.6, 74.1, 66.5)),
}

# The FNE journal paper, Table 5: how many of five seeds started training (validation and
# test scores above 10) under MOE at each setting of learning rate, margin and absolute
# value (``families.MOE_SETTINGS``), for FC7 and FNE.
MOE_STARTS = {
    "fc7-bl": 5,
    "fc7-bl-abs": 0,
    "fc7-abs": 0,
    "fne-bl": 0,
    "fne-bl-abs": 0,
    "fne-abs": 4,
}
