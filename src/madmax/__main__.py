"""`python -m madmax ...` runs the CLI (works where the `madmax` script is not on PATH)."""

from madmax.cli import main

main()
