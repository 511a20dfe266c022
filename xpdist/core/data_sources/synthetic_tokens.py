"""dataset=synthetic_tokens: random token sequences and labels, made in memory from the seed."""

from __future__ import annotations

from xpdist.core.data_sources import InMemorySpec


class SyntheticTokens(InMemorySpec):
    name = "synthetic_tokens"

    def input_shape(self, cfg, launch_dir):
        return (int(cfg.dataset.seq_len),)


SPEC = SyntheticTokens()
