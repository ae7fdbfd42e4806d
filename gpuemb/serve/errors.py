"""The one error of the inference runtime."""


class BundleError(ValueError):
    """A bundle is missing, corrupt or of another format, or a request does not fit it; the message says which
    file or argument is wrong and what to do."""
