"""dlbench.data.gpt_index: Megatron-LM GPTDataset's document, sample and shuffle indices, emulated."""

import numpy as np
import pytest

from dlbench.data.gpt_index import GptIndex
from dlbench.errors import ConfigError


def _megatron_loop(lengths, doc_index, seq_length, num_samples):
    """The sample index as Megatron's helper builds it, one token at a time (the reference)."""
    out = [(0, 0)]
    pos, off = 0, 0
    for _ in range(num_samples):
        left = seq_length + 1
        while left != 0:
            n = int(lengths[doc_index[pos]]) - off
            left -= n
            if left <= 0:
                off += left + n - 1      # the next sample starts at this sample's last token
                left = 0
            else:
                pos, off = pos + 1, 0
        out.append((pos, off))
    return np.array(out)


@pytest.mark.parametrize("lengths, seq", [([7, 3, 12, 5, 9], 4), ([5] * 6, 4), ([5] * 6, 5), ([2, 9, 1, 4], 11)])
def test_sample_index_is_megatrons(lengths, seq):
    n = 9
    gi = GptIndex(lengths, seq, n, seed=3)
    assert np.array_equal(gi.sample_index, _megatron_loop(lengths, gi.document_index, seq, n))
    # every document once per epoch, enough epochs for the samples' tokens
    assert np.array_equal(np.bincount(gi.document_index), np.full(len(lengths), gi.epochs))
    assert gi.epochs * sum(lengths) >= n * seq + 1 > (gi.epochs - 1) * sum(lengths)
    assert sorted(gi.shuffle_index.tolist()) == list(range(n))


def test_pieces_cut_seq_length_plus_one_tokens_across_documents():
    lengths = [3, 4, 2, 6, 5]
    gi = GptIndex(lengths, 6, 5, seed=1)
    stream = np.concatenate([np.arange(lengths[d]) + 100 * d for d in gi.document_index])
    spans = []
    for i in range(5):
        p = gi.pieces(i)
        assert sum(n for _, _, n in p) == 7 and all(0 <= t and t + n <= lengths[d] for d, t, n in p)
        k = int(gi.shuffle_index[i])
        got = np.concatenate([np.arange(t, t + n) + 100 * d for d, t, n in p])
        assert np.array_equal(got, stream[k * 6:k * 6 + 7])        # tokens k*seq .. k*seq+seq of the stream
        spans.append(len(p))
    assert max(spans) >= 3             # documents shorter than a sample: 2+ ranges
    assert GptIndex([4] * 8, 3, 6, seed=1).pieces(0) and all(
        len(GptIndex([4] * 8, 3, 6, seed=1).pieces(i)) <= 2 for i in range(6))   # seq + 1 = a document: <= 2


def test_seeded_and_refused():
    a, b = GptIndex([5] * 10, 4, 8, seed=7), GptIndex([5] * 10, 4, 8, seed=7)
    assert np.array_equal(a.document_index, b.document_index) and np.array_equal(a.shuffle_index, b.shuffle_index)
    assert not np.array_equal(GptIndex([5] * 10, 4, 8, seed=8).document_index, a.document_index)
    with pytest.raises(ConfigError, match="seq_length=0"):
        GptIndex([5], 0, 1, seed=0)
