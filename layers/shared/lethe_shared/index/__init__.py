"""The subject index: entries, their table, how objects' rows become entries, and keeping it
current."""
