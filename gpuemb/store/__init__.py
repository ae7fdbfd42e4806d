"""The tiered embedding store: key encoding, slab allocation, device/host/SSD tiers (DESIGN.md, "The embedding store")."""
