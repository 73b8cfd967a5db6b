"""The object catalog: one item per object version, and the one adapter that reads and writes it."""
