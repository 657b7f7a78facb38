"""What a call through a format's driver costs on the per-sample paths (issue 27: hooks became methods of a
``FormatDriver`` subclass instead of module functions found by ``getattr``).

In one process, tiny rows (so the lookup, not the copy, dominates), µs per call, best of ``--repeat``:
  ``driver()``            ``workload.format.driver()`` (asked per sample by content and decode paths)
  ``sample_nbytes``       the ``Workload.sample_nbytes`` property (the driver's ``mean_sample_nbytes``)
  ``fill_row <layout>``   ``content.fill_row`` (hdf5_blocks: the format's own ``fill_row``; npz: the default,
                          ``expected_row`` copied)
  ``MemoryReader``        ``MemoryReader(cache=False).read_into`` (the in-memory fake's per-sample row)
The code measured is the one imported: run it with PYTHONPATH at two checkouts, alternated, to compare.

    PYTHONPATH=. python benchmarks/format_hooks.py [--calls 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import best_of  # noqa: E402

WL = """\
name: hooks-{layout}
layout: {layout}
arrays:
  - {{name: data, shape: [8], dtype: uint8, role: data}}
  - {{name: label, shape: [1], dtype: int32, role: label}}
samples: 64
samples_per_file: 8
batch_size: 8
compute: {{}}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the workload YAMLs go (default: a temporary folder)")
    a = ap.parse_args()
    import tempfile

    from dlbench import workload as wl
    from dlbench.data.content import fill_row
    from dlbench.data.formats import MemoryReader

    n = a.calls
    rows = []
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        loaded = {}
        for layout in ("hdf5_blocks", "npz"):
            p = Path(tmp) / f"{layout}.yaml"
            p.write_text(WL.format(layout=layout))
            loaded[layout] = wl.load(str(p))
        w = loaded["npz"]
        fmt = w.format
        out = np.zeros(64, np.uint8)

        def drv():
            for _ in range(n):
                fmt.driver()

        def nbytes():
            for _ in range(n):
                w.sample_nbytes  # noqa: B018  (the property is what is timed)

        rows.append(("driver()", best_of(drv, a.repeat)))
        rows.append(("sample_nbytes", best_of(nbytes, a.repeat)))
        for layout, x in loaded.items():
            def fill(x=x):
                for i in range(n):
                    fill_row(x, 0, i % 64, out)
            rows.append((f"fill_row {layout}", best_of(fill, a.repeat)))
        r = MemoryReader(w, 0, cache=False)

        def mem():
            for i in range(n):
                r.read_into(i % 64, out)
        rows.append(("MemoryReader", best_of(mem, a.repeat)))
    print(f"{n} calls, best of {a.repeat}; µs per call")
    for name, s in rows:
        print(f"{name:<22} {s / n * 1e6:8.3f}")


if __name__ == "__main__":
    main()
