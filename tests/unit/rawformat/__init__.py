"""A format added the way a contributor adds one (tests/unit/test_add_format.py): one format module
(``fmt_raw``) and one ``register(Format(...))`` line (here made by the test, with ``module`` a dotted path
outside ``dlbench.data``). Nothing else in dlbench is touched."""
