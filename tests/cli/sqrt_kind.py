"""A position kind no module of the package has, for the test that trains it through the tools."""

import torch
from torch import nn

from fairseq_urpe.modules import RelativePositionFunction
from fairseq_urpe.modules.precision import at_least_float32

KIND = "sqrt_test"
HEADS = 4  # transformer_lm_urpe_tiny's


class SqrtDistanceBias(RelativePositionFunction):
    """``b_h(k) = -w_h sqrt(|k|)`` with a learned ``w`` (H,) starting at 0.5: a bias no kind of the package has."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.weight = nn.Parameter(torch.full((num_heads,), 0.5))

    def by_distance(self, distance: torch.Tensor) -> torch.Tensor:
        weight = at_least_float32(self.weight).view(-1, *([1] * distance.dim()))  # (H, 1, ...)
        return -weight * distance.abs().to(weight.dtype).sqrt()  # (H, ...)


def register() -> None:
    """What a plugin adds for a new kind: its declaration (built as ``SqrtDistanceBias(num_heads=H)``)."""
    from fairseq_urpe.models.kind_record import PositionKind
    from fairseq_urpe.models.position_kinds import register_kind

    register_kind(KIND, PositionKind(SqrtDistanceBias, description="-w_h sqrt(|k|), learned w (a test's kind)"))
