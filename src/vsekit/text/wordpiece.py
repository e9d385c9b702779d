"""WordPiece tokenisation for pretrained sentence encoders, without PyTorch.

The PyTorch encoder (:mod:`vsekit.lab.text.pretrained`) and the ONNX Runtime backend both call
:class:`WordPieceTokenizer`, so a caption becomes the same token ids on either path. It
runs Hugging Face's ``tokenizers`` (Rust) from the model's own ``tokenizer.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: captions are short (Flickr8k: 99.9% under 40 word pieces); longer text is truncated
MAX_TOKENS = 64


class WordPieceTokenizer:
    """``tok(texts) -> {"input_ids": [B, T] int64, "attention_mask": [B, T] int64}``,
    padded to the longest text of the batch (at most ``max_length`` pieces, [CLS] and
    [SEP] included)."""

    def __init__(self, path: str | Path, max_length: int = MAX_TOKENS) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        self.tok = Tokenizer.from_file(str(self.path))
        self.tok.enable_truncation(max_length)
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")
        self.max_length = max_length

    def __call__(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        enc = self.tok.encode_batch([t if t.strip() else "." for t in texts])
        ids = np.asarray([e.ids for e in enc], dtype=np.int64).reshape(len(texts), -1)
        mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64).reshape(ids.shape)
        return {"input_ids": ids, "attention_mask": mask}

    def unknown_words(self, text: str) -> list[str]:
        """Words that became ``[UNK]`` (WordPiece splits almost anything into pieces)."""
        enc = self.tok.encode(text)
        return [
            text[a:b] for t, (a, b) in zip(enc.tokens, enc.offsets, strict=True) if t == "[UNK]"
        ]
