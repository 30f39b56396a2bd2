"""``python -m prefillscope``: the same command line as the ``prefillscope`` script."""

from prefillscope.cli import main

main()
