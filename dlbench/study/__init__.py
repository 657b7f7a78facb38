"""Studies (``configs/studies/*.yaml``): one schema (``study.schema``) and two drivers, ``study.measure`` (the
measured runs: ``dlbench study FILE``) and ``study.simulate`` (the performance model: ``dlbench study FILE
--simulate``, ``dlbench simulate --study FILE``). ``study.table`` is the measured runs' traffic table.
Import each name from the module that defines it."""
