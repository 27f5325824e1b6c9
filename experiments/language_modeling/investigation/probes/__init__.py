"""Investigation-only user dir (``--user-dir .../investigation/probes``): the plugin, with the changes the
language-model investigation tried switched on by environment variables. Not part of the plugin.

    PROBE_B_STD=s        add N(0, s^2) noise to T5's b at the start (the authors' code starts b at BERT's N(0, 0.02^2))
    PROBE_B_LRSCALE=k    b = k w with w stored (w starts at b / k): Adam's steps do not scale with the gradient,
                         so b moves k times faster, a k-fold learning rate for b alone
    PROBE_C_LRSCALE=k    the same for URPE's c (which still starts at 1)
"""

import os

import torch

import fairseq_urpe  # noqa: F401  (registers the archs)
from fairseq_urpe.modules import T5RelativeBias, ToeplitzReweighting

B_STD = float(os.environ.get("PROBE_B_STD", "0"))
B_LRSCALE = float(os.environ.get("PROBE_B_LRSCALE", "1"))
C_LRSCALE = float(os.environ.get("PROBE_C_LRSCALE", "1"))


def patch(cls, scale, noise=0.0):
    """``cls``'s table is used as ``scale * weight``; at the start ``weight = (table + noise) / scale``."""
    init, by_distance = cls.__init__, cls.by_distance

    def patched_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        with torch.no_grad():
            if noise > 0:
                self.weight.add_(torch.randn_like(self.weight) * noise)
            self.weight.div_(scale)

    cls.__init__ = patched_init
    cls.by_distance = lambda self, distance: by_distance(self, distance) * scale


patch(T5RelativeBias, B_LRSCALE, B_STD)
patch(ToeplitzReweighting, C_LRSCALE)
