"""dlbench: how much of a deep-learning epoch is I/O, and which data-loading strategy removes it."""

__version__ = "0.1.0"
