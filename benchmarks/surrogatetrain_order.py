"""Time of surrogatetrain's epoch-order heuristic (``order_heuristic``: nearest neighbour from every start,
then 2-opt + or-opt scored by cost deltas) for E epochs on real transition costs (F samples, buffer C), pure
(no MPI), and its summed cost against the drawing order. Every rank runs it before training.

    python benchmarks/surrogatetrain_order.py [--epochs 30 60 90] [--samples 4000] [--buffer 1500]
"""

import argparse

import numpy as np
from _bench import best_of

from dlbench.plan import epoch_permutation
from dlbench.plan.surrogatetrain import order_heuristic, path_cost, transition_costs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, nargs="+", default=[30, 60, 90])
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--buffer", type=int, default=1500)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    print(f"{'E':>4} {'heuristic_s':>12} {'cost':>9} {'drawing_order_cost':>19} {'uniform_random_s':>17}")
    for E in a.epochs:
        perms = np.stack([epoch_permutation(0, k, a.samples) for k in range(E)])
        cost = transition_costs(perms, a.buffer)
        t = best_of(lambda cost=cost: order_heuristic(cost), a.repeats)
        h = order_heuristic(cost)
        rnd = np.random.default_rng(E).integers(0, 1000, (E, E))
        np.fill_diagonal(rnd, 0)
        tr = best_of(lambda rnd=rnd: order_heuristic(rnd), a.repeats)
        print(f"{E:>4} {t:>12.3f} {path_cost(cost, h):>9} {path_cost(cost, range(E)):>19} {tr:>17.3f}")


if __name__ == "__main__":
    main()
