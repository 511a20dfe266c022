"""dataset=synthetic_tokens: random token sequences and labels, made in memory from the seed."""

from __future__ import annotations

from dataclasses import dataclass

from xpdist.core.data_sources import InMemoryDataset, InMemorySpec

@dataclass
class SyntheticTokensDataset(InMemoryDataset):
    name: str = "synthetic_tokens"
    per_replica_batch_size: int = 32
    # Number of examples (sequences).
    num_examples: int = 1024
    # Tokens per sequence.
    seq_len: int = 64
    # Token ids are 0..vocab_size-1, drawn uniformly.
    vocab_size: int = 1000
    # Number of classes of the sequence label.
    num_classes: int = 2


class SyntheticTokens(InMemorySpec):
    name = "synthetic_tokens"
    config = SyntheticTokensDataset

    def input_shape(self, cfg, launch_dir):
        return (int(cfg.dataset.seq_len),)


SPEC = SyntheticTokens()
