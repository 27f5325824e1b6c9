"""Importing this registers the models and their named architectures (each arch module imports its model)."""

from . import architectures  # noqa: F401  (relative_transformer_lm and its transformer_lm_* archs)
from . import relative_encoder  # noqa: F401  (the bidirectional encoder of the expressiveness benchmarks)
