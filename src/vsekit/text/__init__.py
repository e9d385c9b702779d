"""Text for the core: tokenizer, vocabulary, word pieces and the vocabulary expansion
(NumPy only; the trainable text encoders live in :mod:`vsekit.lab.text`)."""
