"""A strategy's (or one plan's) sample-order semantics, typed: a row of docs/STRATEGIES.md's table.

Each of the three properties is a ``Clause``: an ``Answer`` (``YES``, ``NO``, or ``DEPENDS`` on an option, where
the strategy's plan then states its own row) and the table's wording ("no (per-node subsets)"). Tests decide on
the answers; run.json and simulate print the wordings (``Semantics.as_dict``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum


class Answer(Enum):
    YES = "yes"
    NO = "no"
    DEPENDS = "depends"      # on an option (deepio's mode): the plan states its own row


@dataclass(frozen=True)
class Clause:
    """One cell of the table: ``answer`` and its ``wording`` ("": the answer's own word). A wording that
    starts with "yes" or "no" must agree with the answer; ``DEPENDS`` needs a wording."""

    answer: Answer
    wording: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.answer, Answer):
            raise TypeError(f"semantics clause {self.answer!r}: an Answer (YES, NO, DEPENDS)")
        head = self.wording.split(" ", 1)[0].rstrip(";,")
        if head in ("yes", "no") and self.answer is not Answer.DEPENDS and head != self.answer.value:
            raise ValueError(f"semantics clause {self.wording!r}: says {head}, its answer is {self.answer.value}")
        if self.answer is Answer.DEPENDS and not self.wording:
            raise ValueError("semantics clause DEPENDS: needs a wording saying on what")

    @property
    def holds(self) -> bool:
        """The property holds (``YES``)."""
        return self.answer is Answer.YES

    def __str__(self) -> str:
        return self.wording or self.answer.value


def yes(note: str = "") -> Clause:
    """``YES``, worded "yes" or "yes (note)"."""
    return Clause(Answer.YES, f"yes ({note})" if note else "")


def no(note: str = "") -> Clause:
    """``NO``, worded "no" or "no (note)"."""
    return Clause(Answer.NO, f"no ({note})" if note else "")


@dataclass(frozen=True)
class Semantics:
    """A row of the sample-order semantics table (docs/STRATEGIES.md)."""

    full_permutation_each_epoch: Clause
    global_batch_is_global_shuffle: Clause
    order_changes: Clause

    def __post_init__(self) -> None:
        for f in fields(self):
            if not isinstance(getattr(self, f.name), Clause):
                raise TypeError(f"Semantics.{f.name}: {getattr(self, f.name)!r} is not a Clause (semantics.yes(), "
                                f"no() or Clause(Answer, wording))")

    def as_dict(self) -> dict:
        """run.json's and simulate's ``semantics``: the wordings under the table's keys."""
        return {"each_epoch_a_full_permutation": str(self.full_permutation_each_epoch),
                "global_batch_is_global_shuffles": str(self.global_batch_is_global_shuffle),
                "order_changes": str(self.order_changes)}


__all__ = ["Answer", "Clause", "Semantics", "yes", "no"]
