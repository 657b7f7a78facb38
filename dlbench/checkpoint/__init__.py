"""Checkpoint I/O of large-model training (issue 28): models (``models``), content (``content``), the
engine (``engine``: layouts stream, shards, dcp; durable publish; restores), the ``--checkpoint-every`` schedule
(``schedule``), aggregation (``aggregate``) and
the ``dlbench checkpoint`` driver (``bench``)."""
