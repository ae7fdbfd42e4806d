"""What goes wrong in the embedding store. Every message says what was asked, what there is, and what to change."""


class StoreError(RuntimeError):
    """The embedding store cannot do what was asked."""


class StoreFullError(StoreError):
    """An allocation would pass the tier's ``max_rows`` bound; nothing was allocated."""


class RowStateError(StoreError):
    """A row id was freed twice, or was never handed out by this allocator."""


class SsdFileError(StoreError):
    """The SSD tier's file cannot be used: another run holds it, or the disk refused a write (full, too large for
    the file system, failing). The message names the file and what to do."""
