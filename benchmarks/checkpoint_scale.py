"""Simulated checkpoints of Llama 3 70B (8 nodes) and 405B (64 nodes), 8 ranks per node, against an assumed
shared file system, beside MLPerf Storage v3.0's published medians (70 and 156 GiB/s), and the Young/Daly
interval and goodput. The curve is an assumption (say which when quoting): a node link of ``--link-gbps`` and
an aggregate write curve ``--write-curve``; the point is the shape: ZeRO-1's uneven nodes (405B: the nodes
of data-parallel rank 0 write the model states too) and the bandwidth that bytes / slowest node gives.

    python benchmarks/checkpoint_scale.py --write-curve 1:12,8:90,64:400 --link-gbps 25 --file-s 0.005
"""

from __future__ import annotations

import argparse
import sys

MLPERF_V3_MEDIAN_GIB_S = {"llama3-70b": 70, "llama3-405b": 156}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-curve", default="1:12,8:90,64:400")
    ap.add_argument("--link-gbps", type=float, default=25.0)
    ap.add_argument("--file-s", type=float, default=0.005)
    ap.add_argument("--mtbf-hours", type=float, default=50_000.0)
    ap.add_argument("--models", default="llama3-70b,llama3-405b")
    a = ap.parse_args(argv)

    from dlbench.checkpoint.models import PRESETS
    from dlbench.simulate.checkpoint import cost, parse_curve, table, young_daly

    curve = parse_curve(a.write_curve)
    rows = []
    for name in a.models.split(","):
        m = PRESETS[name]
        r = cost(m, m.world // 8, 8, curve, a.link_gbps, a.file_s, "shards")
        r.update(young_daly(r["durable_s"], a.mtbf_hours, m.world))
        rows.append(r)
    print(f"assumed: node link {a.link_gbps:g} GB/s, aggregate write curve {a.write_curve} (nodes:GB/s), "
          f"{a.file_s * 1e3:g} ms per file, DeepSpeed shard files, sync (stall = durable), MTBF {a.mtbf_hours:g} h "
          f"per accelerator")
    print(table(rows, MLPERF_V3_MEDIAN_GIB_S))
    for r in rows:
        print(f"  {r['model']}: Young/Daly interval {r['interval_s'] / 60:.1f} min, goodput {r['goodput']:.4f} "
              f"(job MTBF {r['job_mtbf_s'] / 3600:.1f} h)")
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
