"""`python -m kiln` is the `kiln` command."""

from .cli import main

raise SystemExit(main())
