"""``--task position_synthetic``: the URPE paper's ETP and PI tasks, generated on the fly from a seed.

Every example has ``--seq-len`` tokens and as many targets (no padding, no BOS/EOS). The dictionary
holds fairseq's four specials, the tokens ``"0" .. str(V-1)`` and ``<filler>`` (ETP's target for the
second half); PI's target ``i`` is the token ``str(i)``, so PI needs ``--seq-len <= --vocab-size``.
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from fairseq.data import Dictionary, FairseqDataset
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.tasks import FairseqTask, register_task

from ..data.position_tasks import FILLER, POSITION_TASKS, position_example

FILLER_SYMBOL = "<filler>"


@dataclass
class PositionSyntheticConfig(FairseqDataclass):
    synthetic_task: ChoiceEnum(list(POSITION_TASKS)) = field(
        default="etp", metadata={"help": "'etp': y_i = x_{2i+1} (i < n/2), filler after; 'pi': y_i = i"}
    )
    vocab_size: int = field(default=1000, metadata={"help": "input tokens are drawn uniformly from this many"})
    seq_len: int = field(default=128, metadata={"help": "tokens per example (n)"})
    train_size: int = field(default=128000, metadata={"help": "examples per training epoch"})
    valid_size: int = field(default=2048, metadata={"help": "examples in the valid (and test) split"})
    data_seed: int = field(default=1, metadata={"help": "seed of the data; example k of a split depends only on it"})


class PositionSyntheticDataset(FairseqDataset):
    """``size`` examples of one split, each computed from ``(seed, split, index)`` when asked for."""

    def __init__(self, cfg, split, size, dictionary):
        self.cfg, self.split, self.count, self.dictionary = cfg, split, size, dictionary
        self.offset = dictionary.nspecial  # token t -> dictionary index offset + t
        self.filler = dictionary.index(FILLER_SYMBOL)
        self.sizes = np.full(size, cfg.seq_len, dtype=np.int64)

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        tokens, targets = position_example(
            str(self.cfg.synthetic_task), self.cfg.vocab_size, self.cfg.seq_len, self.cfg.data_seed, self.split, index
        )
        targets = np.where(targets == FILLER, self.filler, targets + self.offset)
        return {"id": index, "source": torch.from_numpy(tokens + self.offset), "target": torch.from_numpy(targets)}

    def num_tokens(self, index):
        return self.cfg.seq_len

    def size(self, index):
        return self.cfg.seq_len

    def ordered_indices(self):
        return np.arange(self.count)

    def collater(self, samples):
        if not samples:
            return {}
        source = torch.stack([s["source"] for s in samples])  # (B, n): all examples have length n
        return {
            "id": torch.tensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": source.numel(),
            "net_input": {"src_tokens": source, "src_lengths": torch.full((len(samples),), source.size(1))},
            "target": torch.stack([s["target"] for s in samples]),
        }


@register_task("position_synthetic", dataclass=PositionSyntheticConfig)
class PositionSyntheticTask(FairseqTask):
    """Token-level classification of synthetic sequences (train with ``--criterion token_accuracy``)."""

    def __init__(self, cfg, dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary

    @classmethod
    def build_dictionary_for(cls, vocab_size):
        dictionary = Dictionary()
        for token in range(vocab_size):
            dictionary.add_symbol(str(token))
        dictionary.add_symbol(FILLER_SYMBOL)
        return dictionary

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        if cfg.vocab_size < 1 or cfg.seq_len < 2:
            raise ValueError(f"--vocab-size must be >= 1 and --seq-len >= 2; got {cfg.vocab_size}, {cfg.seq_len}")
        if cfg.synthetic_task == "pi" and cfg.seq_len > cfg.vocab_size:
            raise ValueError(f"--synthetic-task pi labels positions with tokens: --seq-len {cfg.seq_len} "
                             f"must not exceed --vocab-size {cfg.vocab_size}")
        return cls(cfg, cls.build_dictionary_for(cfg.vocab_size))

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        size = self.cfg.train_size if split == "train" else self.cfg.valid_size
        self.datasets[split] = PositionSyntheticDataset(self.cfg, split, size, self.dictionary)

    def max_positions(self):
        return self.cfg.seq_len

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
