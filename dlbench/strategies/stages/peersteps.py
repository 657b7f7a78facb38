"""``PeerSteps``: the peer stage in the executor's step protocol: a ``PeerPush`` driven on the ring's slots."""

from __future__ import annotations

from ...errors import RunError
from ..stage import Stage
from .filler import Filler
from .peerpush import PeerPush
from .ring import Ring
from .view import EpochView


class PeerSteps(Stage):
    """When ``peers`` (a ``PeerPush``) posts and completes an epoch's messages. Receives go straight into the
    step's ring slot as soon as it is the step's (``Ring.claim``: its step − depth's fills copied out, by the
    fill thread ``filler``, and its device copy completed), up to depth − 1 steps ahead; sends as soon as the
    rank holds the samples, those a peer needs next step at the latest right after this rank's step (a sample
    still being stored by the fill thread is waited for). ``recv_ring``: where received bytes land (a decoding
    format's raw ring, decoded into ``ring`` by ``decode(raw, n, out)``)."""

    def __init__(self, peers: PeerPush, ring: Ring, recv_ring: Ring, filler: Filler | None, decode=None,
                 strategy: str = "?"):
        self.peers, self.ring, self.recv_ring, self.filler = peers, ring, recv_ring, filler
        self.decode, self.strategy = decode, strategy
        self.active = False
        self.posted = 0              # steps whose receives are posted

    def begin(self, view: EpochView) -> None:
        self.peers.begin(view)
        self.active = self.peers.active()    # this epoch has peer accesses or sends (else no per-step calls)
        self.posted = 0
        if self.active:
            D = self.ring.depth
            self._post_recvs_upto(view, D, block=False)
            self._post_sends(view, 0, D - 1)

    def before_step(self, view: EpochView, t: int) -> None:
        """Step t's receives posted (at the latest now) and completed (decoded, for a decoding format)."""
        if not self.active:
            return
        self._post_recvs_upto(view, t + 1, block=True)
        decode = self.decode
        if decode is not None and self.recv_ring is not self.ring:     # received stored rows: decode into the batch
            raw_t, out_t = self.recv_ring[t], self.ring[t]
            self.peers.wait_recvs(view, t, lambda j, n, a=raw_t, b=out_t: decode(a[j], n, b[j]))
        else:
            self.peers.wait_recvs(view, t)

    def after_step(self, view: EpochView, t: int) -> None:
        """Receives posted into the slots that became free, sends that became possible."""
        if not self.active:
            return
        D = self.ring.depth
        self._post_recvs_upto(view, t + 1 + D, block=False)
        self._post_sends(view, t + 1, t + D)

    def finish(self, view: EpochView) -> None:
        self.peers.finish(view)

    def _post_recvs_upto(self, view: EpochView, limit: int, block: bool) -> None:
        """Receives of steps < ``limit`` into their ring slots, once the slot's last fill job is done."""
        f, D = self.filler, self.ring.depth
        while self.posted < min(limit, view.steps):
            s = self.posted
            if f is not None and s >= D and not f.is_done(f.base + s - D):
                if not block:
                    return
                f.wait(f.base + s - D)
            self.ring.claim(s)            # a pinned ring: the slot's last device copy (step s − D) completed
            self.peers.post_recvs(view, s, self.recv_ring[s])
            self.posted += 1

    def _post_sends(self, view: EpochView, t_next: int, upto: int) -> None:
        """Sends up to step ``upto``; those a peer needs at ``t_next`` must go now (the receiver blocks on them
        before its next barrier): wait for this rank's fills if one is still being stored."""
        peers, f = self.peers, self.filler
        peers.post_sends(view, upto)
        first = peers.first_pending_step()
        if first is not None and first <= t_next and f is not None:
            f.wait(f.base + t_next - 1)
            peers.post_sends(view, upto)
            first = peers.first_pending_step()
        if first is not None and first <= t_next:
            raise RunError(f"plan of {self.strategy}: rank {peers.ctx.rank} must send a sample at epoch "
                           f"{view.epoch} step {first} that it does not hold then")

    def stats(self) -> dict:
        """As run.json's ``tiers.peer`` (``PeerPush.stats``)."""
        return self.peers.stats()


__all__ = ["PeerSteps"]
