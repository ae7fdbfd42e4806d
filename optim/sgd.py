"""SGD with optional momentum, Nesterov momentum and L2 weight decay (the update of torch.optim.SGD).

``g = grad + weight_decay·w``; with momentum ``buf = momentum·buf + g`` and ``g = buf``, or
``g = g + momentum·buf`` for Nesterov; then ``w -= lr·g``. Plain SGD is momentum 0 and keeps no state.
"""
from dataclasses import dataclass

from gpuemb.autograd.checks import check

from .optimizer import Optimizer
from .rule import UpdateRule


@dataclass(frozen=True)
class SGDRule(UpdateRule, name="sgd"):
    """The SGD update of one parameter (or of rows); see the module docstring."""

    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0

    @property
    def state_names(self):
        return ("momentum_buffer",) if self.momentum else ()

    def validate(self):
        self.check_real("momentum")
        self.check_real("weight_decay")
        check(not self.nesterov or self.momentum > 0, type(self).__name__,
              "nesterov=True needs momentum > 0; set a momentum or turn nesterov off")

    def fused_args(self):
        return ("momentum", (self.momentum, self.nesterov)) if self.momentum else ("sgd", ())

    def update(self, param, grad, state, lr, step):
        g = self.decayed(param, grad)
        if self.momentum:
            buf = state["momentum_buffer"]
            buf *= self.momentum
            buf += g
            g = g + self.momentum * buf if self.nesterov else buf
        param -= lr * g


class SGD(Optimizer, name="sgd"):
    """Stochastic gradient descent; ``lr`` is a float or a Schedule."""

    def __init__(self, params, lr, momentum=0.0, nesterov=False, weight_decay=0.0):
        super().__init__(params, SGDRule(momentum, nesterov, weight_decay), lr)
