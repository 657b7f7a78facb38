"""Calibration commands: measure this machine and write a profile the run and the simulator read.

- ``compute.py``: ``dlbench calibrate``, the real training step's time on the device at hand (a compute profile);
- ``storage.py``: ``dlbench calibrate-storage``, the shared and local tiers, memory, the network and the
  loader's mechanisms (a system profile).

A package of its own, above ``storage/``, ``compute/`` and ``strategies/``: it measures through their public
APIs (the tiers, ``strategies.stages.exchange.Exchange``, ``strategies.prefetch.StepDataset``) and nothing below
imports it."""
