"""Text encoders: a sentence in, one L2-normalised vector out.

Every encoder owns its preprocessing: ``prepare(texts) -> dict`` turns raw captions into
tensors (token ids, lengths, ...), and ``forward(**batch) -> [B, D]``. Encoders are created
by name from a registry (``create_text_encoder("gru", vocab, cfg)``); a new one is one
``@register_text_encoder`` class.

Recurrent encoders (journal paper 3.2; caption-retrieval report 4.2): a trainable word
embedding (optionally initialised from GloVe for the words it knows), a GRU or LSTM,
stacked and/or bidirectional; the sentence embedding is the final hidden state of the last
layer (for bidirectional encoders, the mean of the two directions), L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from vsekit.registry import Registry
from vsekit.text.tokenizer import tokenize
from vsekit.text.vocab import Vocabulary


@dataclass
class TextEncoderConfig:
    kind: str = "gru"  # registered encoder name: gru | lstm | minilm | bow | trigram | ...
    word_dim: int = 300  # word embedding size (50 to initialise from GloVe 6B-50d)
    embed_dim: int = 1024  # output size = RNN hidden size
    num_layers: int = 1  # stacked RNN layers
    bidirectional: bool = False  # mean of both directions' final states
    glove: bool = False  # initialise known words from GloVe
    dropout: float = 0.0  # dropout on word embeddings
    stopwords: bool = False  # vectorisers (bow, trigram, mean_glove): drop English stop words
    finetune_layers: int = 0  # minilm: train the top k transformer layers (0: frozen, cached)
    finetune_cache: bool = False  # minilm: cache the frozen lower layers' token states
    finetune_lr_scale: float = 0.1  # minilm: the tuned layers' lr is train.lr times this
    proj_hidden: int = 0  # minilm: hidden width of the projection MLP (0: linear)


TEXT_ENCODERS: Registry[type[nn.Module]] = Registry(
    "text encoder", modules=("vsekit.lab.text.vectorizers", "vsekit.lab.text.pretrained")
)
register_text_encoder = TEXT_ENCODERS.register
list_text_encoders = TEXT_ENCODERS.names


def create_text_encoder(vocab: Vocabulary, cfg: TextEncoderConfig) -> nn.Module:
    return TEXT_ENCODERS.get(cfg.kind)(vocab, cfg)


class RecurrentEncoder(nn.Module):
    rnn_class: type[nn.RNNBase] = nn.GRU

    def __init__(self, vocab: Vocabulary, cfg: TextEncoderConfig) -> None:
        super().__init__()
        self.vocab, self.cfg = vocab, cfg
        self.embed_dim = self.dim = cfg.embed_dim  # every text encoder's output size is .dim
        self.embed = nn.Embedding(len(vocab), cfg.word_dim, padding_idx=0)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        if cfg.glove:
            from vsekit.lab.text.glove import glove_matrix

            mat, _ = glove_matrix(vocab.itos, cfg.word_dim)
            self.embed.weight.data.copy_(torch.from_numpy(mat))
        self.drop = nn.Dropout(cfg.dropout)
        self.rnn = self.rnn_class(
            cfg.word_dim,
            cfg.embed_dim,
            num_layers=cfg.num_layers,
            batch_first=True,
            bidirectional=cfg.bidirectional,
        )

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """``{"ids": [B, T] long (0-padded), "lengths": [B] long}``; empty captions get
        one ``<unk>`` so every sequence has a final state."""
        seqs = [self.vocab.encode(tokenize(t)) or [self.vocab.unk_id] for t in texts]
        return pad_ids(seqs)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.embed(ids))  # (B, T, W)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h = self.rnn(packed)
        if isinstance(h, tuple):  # LSTM: (h, c)
            h = h[0]
        n_dir = 2 if self.cfg.bidirectional else 1
        last = h.view(self.cfg.num_layers, n_dir, ids.shape[0], self.embed_dim)[-1]  # (dirs,B,D)
        return nn.functional.normalize(last.mean(dim=0), dim=1)


def pad_ids(seqs: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    ids = torch.zeros(len(seqs), int(lengths.max()) if len(seqs) else 0, dtype=torch.long)
    for k, s in enumerate(seqs):
        ids[k, : len(s)] = torch.tensor(s, dtype=torch.long)
    return {"ids": ids, "lengths": lengths}


@register_text_encoder("gru")
class GRUEncoder(RecurrentEncoder):
    rnn_class = nn.GRU


@register_text_encoder("lstm")
class LSTMEncoder(RecurrentEncoder):
    rnn_class = nn.LSTM
