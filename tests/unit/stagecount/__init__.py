"""A stage added the way a newcomer adds one (tests/unit/test_add_stage.py): the stage in its own module
(``tally.py``: a ``dlbench.strategies.stage.Stage`` subclass overriding the hooks it needs), plugged into a
``PlannedExecutor`` by overriding ``epoch_stages`` (``strategy.py``, with the strategy that runs it). Nothing in
dlbench is touched. ``misspelled.py`` is the same stage with a misspelled hook: importing it fails."""
