"""Which S3 client dlbench's S3 backend uses: GETs of the same objects by each installed client, one process.

    eval "$(scripts/s3-local.sh start)"
    python benchmarks/s3_clients.py [--objects 32] [--rounds 5] [--sizes 131072,4194304] [--bucket dlbench]
    scripts/s3-local.sh stop

Per object size, ``--objects`` objects are PUT once; then each client GETs all of them (whole object, bytes in
Python memory), the clients alternated round by round (A B C A B C ...), best round kept. Prints GETs/s and
MB/s per client and size, and each client's time relative to boto3's (the first client's where boto3 is not
installed) in the same run. Clients: boto3
(``get_object`` + ``read``), s3torchconnectorclient (Mountpoint's CRT client: ``get_object`` stream joined),
s3dlio (``get``). A client that is not installed is reported as such.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _clients(bucket: str):
    out = {}
    try:
        import boto3
        from botocore.config import Config

        s3 = boto3.client("s3", config=Config(s3={"addressing_style": "path"}, max_pool_connections=4))
        out["boto3"] = lambda k: s3.get_object(Bucket=bucket, Key=k)["Body"].read()
    except ImportError:
        print("boto3: not installed", file=sys.stderr)
    try:
        from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client

        mp = MountpointS3Client(os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
                                endpoint=os.environ.get("AWS_ENDPOINT_URL"), force_path_style=True)
        out["s3torchconnectorclient"] = lambda k: b"".join(mp.get_object(bucket, k))
    except ImportError:
        print("s3torchconnectorclient: not installed", file=sys.stderr)
    try:
        import s3dlio

        out["s3dlio"] = lambda k: s3dlio.get(f"s3://{bucket}/{k}")
    except ImportError:
        print("s3dlio: not installed", file=sys.stderr)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objects", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="131072,4194304")
    ap.add_argument("--bucket", default="dlbench")
    ap.add_argument("--prefix", default="bench-clients")
    a = ap.parse_args(argv)
    from dlbench.storage.s3 import S3Backend

    clients = _clients(a.bucket)
    ref = "boto3" if "boto3" in clients else next(iter(clients))
    res: dict = {}
    for size in (int(s) for s in a.sizes.split(",")):
        st = S3Backend(f"s3://{a.bucket}/{a.prefix}/{size}")   # the objects PUT through dlbench's backend
        rels = [f"{i:05d}" for i in range(a.objects)]
        keys = [f"{a.prefix}/{size}/{r}" for r in rels]
        body = os.urandom(size)
        for r in rels:
            h = st.open(r + ".part", write=True)
            st.pwrite(h, body, 0)
            st.rename(r + ".part", r)
        best = {n: float("inf") for n in clients}
        for _ in range(a.rounds):
            for name, get in clients.items():
                t0 = time.perf_counter()
                for k in keys:
                    if len(get(k)) != size:
                        raise SystemExit(f"{name}: short object {k}")
                best[name] = min(best[name], time.perf_counter() - t0)
        for name, t in best.items():
            res[(name, size)] = t
            print(f"{size:>9} B  {name:<24} {a.objects / t:9.0f} GET/s  {a.objects * size / t / 1e6:8.1f} MB/s  "
                  f"time / {ref}'s: {t / best[ref]:.2f}")
        for r in rels:
            st.remove(r)
    return res


if __name__ == "__main__":
    main()
