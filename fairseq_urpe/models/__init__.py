from . import transformer_lm_urpe  # noqa: F401, I001  (registers the model first,
from . import architectures  # noqa: F401  then its named architectures)
from . import relative_encoder  # noqa: F401  (the bidirectional encoder of the expressiveness benchmarks)
