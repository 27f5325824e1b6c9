from . import transformer_lm_urpe  # noqa: F401  (registers models and architectures)
