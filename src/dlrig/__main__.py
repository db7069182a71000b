"""`python -m dlrig`: the same as the `dlrig` command."""

from dlrig.cli.main import main

main()
