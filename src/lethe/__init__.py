"""Lethe: a serverless data lake on AWS that can forget (the `lethe` CLI and the local cloud)."""

# The version when run from a source checkout without installing; an installed `lethe` reports
# its distribution's version (lethe.cli.version). Kept equal to pyproject.toml's by a unit test.
__version__ = "0.1.0"
