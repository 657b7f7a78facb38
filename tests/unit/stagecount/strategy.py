"""tallied: naive's plan (the DistributedSampler order, every sample from the shared tier), carried out by the
planned executor with one more stage, ``BatchTally`` (run.json ``strategy_stats[r].tally``)."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.plan.semantics import Semantics, no, yes
from dlbench.strategies import register
from dlbench.strategies.base import Executor, PlanContext, RunContext, Strategy
from dlbench.strategies.naive import shared_tier_plan
from dlbench.strategies.planned import PlannedExecutor
from dlbench.strategies.stage import Stage
from dlbench.strategies.stages.view import EpochView

from .tally import BatchTally


class TalliedExecutor(PlannedExecutor):
    def start(self) -> None:
        super().start()
        self.tally = BatchTally(self.ring, self.ctx.sample_nbytes, self.ctx.n_samples)   # after start: the ring is final

    def epoch_stages(self, view: EpochView) -> list[Stage]:
        return super().epoch_stages(view) + [self.tally]

    def stats(self) -> dict:
        return {**super().stats(), "tally": self.tally.stats()}


@dataclass(frozen=True, kw_only=True)
class TalliedOptions:
    pass


@register
class Tallied(Strategy):
    name = "tallied"
    display = "Tallied"
    summary = "naive's plan with a stage that counts and checksums every batch"
    semantics = Semantics(yes(), yes(), no())
    Options = TalliedOptions

    def plan(self, ctx: PlanContext, options: TalliedOptions):
        return shared_tier_plan(self.name, ctx, False)

    def executor(self, ctx: RunContext, plan, options: TalliedOptions) -> Executor:
        return TalliedExecutor(ctx, plan, capacity_bytes={}, fill_thread=False)
