"""``python -m dlbench ...``: the same command line as the ``dlbench`` script."""
from .cli import main

main()
