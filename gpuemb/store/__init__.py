"""The tiered embedding store: key encoding, slab allocation, device/host/SSD tiers (docs/design.md, "The
embedding store")."""
