"""Dropout: the ReLU-dropout kernel with the ReLU sign test skipped, so its mask is one bit per element too."""
import numpy as np

from gpuemb.kernels.relu_dropout import ReLUDropout, keep_threshold

from .module import Module


class Dropout(Module):
    """Zero each element with probability p and scale the rest by 1 / (1 - p), in training mode only.

    seed: the Philox key. Each training call draws with the next step, so the masks differ between steps and can
    be drawn again from (seed, step).
    """

    extra_state_names = ("step",)  # with the seed, the step fixes every later mask: a resume needs it

    def __init__(self, p=0.5, seed=0):
        keep_threshold(p)
        self.p, self.seed, self.step = p, int(seed), 0

    def forward(self, x):
        shape = x.shape
        # rows past the first axis flatten into it: a sample's row index is row0 times that stride plus its own
        stride = int(np.prod(shape[1:-1], dtype=np.int64))
        y = ReLUDropout(self.p, self.seed, self.step, self.training, relu=False,
                        row0=self.row0 * stride).apply(x.reshape(-1, shape[-1]))
        if self.training:
            self.step += 1
        return y.reshape(shape)
