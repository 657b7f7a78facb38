"""``python -m dlbench.cli``: the ``dlbench`` command."""

from . import main

main()
