"""Megatron-LM's GPT sample index, emulated (pure: NumPy only, no I/O).

Megatron's ``GPTDataset`` does not read a stored sequence as a sample. Over the indexed dataset's documents
(the ``.idx``'s sequences) it builds three indices, once, before training:

- the **document index**: every document id once per epoch, the epochs concatenated and shuffled (as many
  epochs as it takes to hold the samples' tokens);
- the **sample index** (``num_samples + 1`` rows of ``(position in the document index, token offset)``): the
  token stream of the documents in document-index order cut into samples of ``seq_length + 1`` tokens (the
  inputs and the labels shifted by one), consecutive samples sharing one token: sample ``k`` starts at token
  ``k * seq_length`` of that stream, so a sample spans one, two or more documents;
- the **shuffle index**: a permutation of the samples (``dataset[i]`` is sample ``shuffle[i]``).

A sample is then one token range per document it touches: 1-2+ byte ranges of the ``.bin`` (not adjacent on
disk: the documents are shuffled). ``GptIndex`` builds the three for documents of given lengths;
``GptIndex.pieces(i)`` gives the ``(document, first token, tokens)`` ranges of ``dataset[i]`` in order.

Memory: the document index has ``documents x epochs`` entries (int64) and the token offsets of its entries
as many again; Megatron caches the same arrays as ``.npy`` files."""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError

SAMPLE_INDEX = ("megatron",)


class GptIndex:
    """The document, sample and shuffle indices of ``num_samples`` samples of ``seq_length + 1`` tokens over
    documents of ``doc_lengths`` tokens (Megatron's ``_build_document_sample_shuffle_indices``, learned from,
    vectorised: a sample's start is found by a search over the documents' cumulative token counts)."""

    def __init__(self, doc_lengths, seq_length: int, num_samples: int, seed: int):
        lengths = np.asarray(doc_lengths, dtype=np.int64)
        if seq_length < 1:
            raise ConfigError(f"tokens.seq_length={seq_length}: must be >= 1")
        if len(lengths) == 0 or (lengths < 1).any():
            raise ConfigError("tokens.sample_index=megatron: every document needs at least one token")
        self.seq_length, self.num_samples = int(seq_length), int(num_samples)
        need = self.num_samples * self.seq_length + 1            # the last sample's extra token
        self.epochs = max(1, -(-need // int(lengths.sum())))
        rng = np.random.default_rng(np.random.SeedSequence([int(seed) & (2**63 - 1), 0x6D67]))
        self.document_index = rng.permutation(np.tile(np.arange(len(lengths), dtype=np.int64), self.epochs))
        # token stream offset of each document-index entry (one past the end at the last)
        self._starts = np.zeros(len(self.document_index) + 1, dtype=np.int64)
        np.cumsum(lengths[self.document_index], out=self._starts[1:])
        first = np.arange(self.num_samples + 1, dtype=np.int64) * self.seq_length
        pos = np.searchsorted(self._starts, first, side="right") - 1
        self.sample_index = np.stack([pos, first - self._starts[pos]], axis=1)
        self.shuffle_index = rng.permutation(self.num_samples)
        self._lengths = lengths

    def pieces(self, i: int) -> list[tuple[int, int, int]]:
        """``dataset[i]``: the (document id, first token, tokens) ranges of its ``seq_length + 1`` tokens."""
        k = int(self.shuffle_index[i])
        pos, off = (int(x) for x in self.sample_index[k])
        left = self.seq_length + 1
        out = []
        while left > 0:
            doc = int(self.document_index[pos])
            n = min(left, int(self._lengths[doc]) - off)
            out.append((doc, off, n))
            left -= n
            pos, off = pos + 1, 0
        return out
