"""The measured run, one module per job (import each name from its module): ``setup``
(configuration, option checks, dataset), ``loop`` (one rank's set-up and epoch loop), ``cache`` (``--cache``),
``checkpoint`` (``--checkpoint-every``), ``verify_host`` (``--verify``), ``summary`` (rank 0's summary and the
results folder's contents), ``driver`` (``run``: all of it in order, and failures)."""
