"""The planned executor's stages, one module each (CONVENTIONS 8: sampler → source → cache → prefetch → batch).
``PlannedExecutor`` (``strategies/planned.py``) drives them through the step protocol of ``strategies/stage.py``
(``begin``, ``before_step``, ``after_step``, ``finish``/``abort``, ``close``, ``stats``); each is testable alone
with a fake reader, a fake clock and, for the MPI stages, an in-process two-rank comm (tests/unit/fakecomm.py).

- ``store.py``: ``SampleStore`` (one own tier with a reference count per sample id), ``Stores`` (the rank's tiers
  by plan tier code).
- ``ring.py``: ``Ring`` (``depth`` page-aligned batch buffers, step t in slot t mod depth) and ``SlotState`` (each
  slot's owner: FREE → FILLING → READY [→ HELD] → FREE, transitions checked).
- ``view.py``: ``EpochView`` (one rank's epoch of a plan as flat arrays).
- ``loader.py``: ``Loader`` (a step's non-peer accesses into its slot, inline or by loader threads).
- ``filler.py``: ``Keeps`` (each step's cache fills and evictions) and ``Filler`` (the fill thread).
- ``peerpush.py``: ``PeerPush`` (PEER accesses as non-blocking MPI on the plan's schedule); ``peersteps.py``:
  ``PeerSteps`` (when it posts and completes, on the ring's slots).
- ``stager.py``: ``Stager`` (the plan's prologue, epoch −1).
- ``exchange.py``: ``Exchange`` (an epoch's background transfers: pls's exchange).

Import each name from its module (this package re-exports nothing).
"""
