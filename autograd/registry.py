"""Registry: the names a config may use for one kind of thing, each bound to the class that implements it.

Every layer declares its choices once, where the classes are defined: a class joins its kind's registry with a
class keyword (``class SignSGDRule(UpdateRule, name="signsgd")``), so adding one touches its own file alone. The
run config's choices, flags, help and checks are read from the registries, never listed again.
"""


class Registry(dict):
    """``{name: class}`` of one kind (``what``: "row rule", "model", ...), in the order the names were added."""

    def __init__(self, what):
        super().__init__()
        self.what = what

    def add(self, name, cls):
        """Bind ``name`` to ``cls``; a name taken by another class is an error (two rules cannot share one)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.what} registry: name {name!r} of {cls.__name__}; use a non-empty string")
        if self.get(name, cls) is not cls:
            raise ValueError(f"{self.what} registry: {name!r} already names {self[name].__qualname__}; "
                             f"give {cls.__qualname__} another name")
        self[name] = cls
        return cls

    def lookup(self, name, where):
        """The class of ``name``; ValueError ``"<where>: unknown <what> ...; use one of ..."`` if there is none."""
        if name not in self:
            raise ValueError(f"{where}: unknown {self.what} {name!r}; use one of {', '.join(self)}")
        return self[name]

    def name_of(self, cls):
        """The name ``cls`` was registered under, or None."""
        return next((n for n, c in self.items() if c is cls), None)
