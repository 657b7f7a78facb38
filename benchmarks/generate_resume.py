"""What the checksum check costs: generation (recording each file's sum64: of the bytes written, or read back where a
format writes outside ``_write_all``), and a re-run that finds every file complete (before issue 12 it trusted the
size alone; now it reads each skipped file and checks its sum64).

    PYTHONPATH=. python benchmarks/generate_resume.py [--dir /tmp/...] [--repeats 3]

For CosmoFlow ``tiny`` (32 × 256 KiB files), ImageNet ``tiny`` and CosmoFlow with 24 ``small`` samples
(24 × 16 MiB), one run, page cache warm: the fresh generation's time, the re-run's time (all skipped,
checksum checked), and, as the reference taken in the same run, a plain read of the same files (``open`` +
``readinto`` a reused buffer, no checksum): re-run / read says what the check adds beyond reading. Best of
--repeats. Data is deleted after.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def _read_all(d: Path, paths) -> None:
    buf = bytearray(8 << 20)
    mv = memoryview(buf)
    for p in paths:
        with open(d / p, "rb", buffering=0) as f:
            while f.readinto(mv):
                pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="the tiny datasets only (that the script runs)")
    a = ap.parse_args()
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest
    from dlbench.workload import load

    tmp = Path(tempfile.mkdtemp(prefix="dlbench-gen-resume-", dir=a.dir))
    try:
        print(f"{'dataset':<22} {'MB':>7} {'generate s':>11} {'re-run s':>9} {'read s':>8} {'re-run/read':>12} "
              f"{'re-run/generate':>16}")
        cases = (("cosmoflow", "tiny", None), ("imagenet", "tiny", None), ("cosmoflow", "small", 24))
        for name, scale, n in cases[:2] if a.smoke else cases:
            wl = load(name, scale=scale, samples=n)
            gen, rerun, rd = [], [], []
            for k in range(a.repeats):
                d = tmp / f"{name}-{scale}-{k}"
                t = time.perf_counter()
                generate(wl, d, progress=False)
                gen.append(time.perf_counter() - t)
                t = time.perf_counter()
                res = generate(wl, d, progress=False)
                rerun.append(time.perf_counter() - t)
                assert res.files_written == 0
                m = Manifest.load(d)
                t = time.perf_counter()
                _read_all(d, m.paths)
                rd.append(time.perf_counter() - t)
                shutil.rmtree(d)
            mb = m.dataset_nbytes / 1e6
            g, r, x = min(gen), min(rerun), min(rd)
            print(f"{name + ' ' + (scale if n is None else f'{n}x' + scale):<22} {mb:7.1f} {g:11.3f} {r:9.3f} "
                  f"{x:8.3f} {r / x:12.2f} {r / g:16.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
