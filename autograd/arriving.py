"""A Tensor whose array is being filled: its shape and dtype are known at once, its values once ``arrive()`` ran.

A sharded lookup on an overlapped communicator (gpuemb/distributed/exchange.py) starts the all-to-all of its rows
and returns at once; the rows are placed when the result is first read. Reading ``.data`` runs ``arrive`` first,
once, so every op that takes the tensor (``Function.apply`` reads ``.data``) sees the rows, and whatever the model
computes before that (DLRM's bottom MLP) runs while the rows travel. ``shape``, ``dtype``, ``ndim`` and ``size``
do not wait.
"""
from .tensor import Tensor


class ArrivingTensor(Tensor):
    """``tensor`` (an op's output, its tape links kept) whose array ``arrive()`` fills before it is first read."""

    def __init__(self, tensor, arrive):  # noqa: super().__init__ not called: the fields are tensor's own
        fields = dict(vars(tensor))
        self._data = fields.pop("data")
        vars(self).update(fields)
        self._arrive = arrive

    @property
    def data(self):
        if self._arrive is not None:
            arrive, self._arrive = self._arrive, None
            arrive()
        return self._data

    @data.setter
    def data(self, value):
        self._data = value

    @property
    def arrived(self):
        return self._arrive is None

    @property
    def shape(self):
        return tuple(self._data.shape)

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def size(self):
        return int(self._data.size)
