"""`python -m lethe ...` is the `lethe` command."""

from lethe.cli import main

raise SystemExit(main())
