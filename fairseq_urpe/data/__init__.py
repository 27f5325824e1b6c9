"""Synthetic data for the expressiveness benchmarks: plain numpy/torch, nothing about fairseq."""

from .memory_tasks import MEMORY_TASKS, memory_batch
from .position_tasks import POSITION_TASKS, etp_targets, pi_targets, position_example

__all__ = ["MEMORY_TASKS", "memory_batch", "POSITION_TASKS", "etp_targets", "pi_targets", "position_example"]
