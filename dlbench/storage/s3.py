"""The S3 backend: the shared tier in an object store (``--data-dir s3://bucket/prefix``).

Client: Mountpoint's CRT client (``s3torchconnectorclient.MountpointS3Client``), chosen by measurement
(``benchmarks/s3_clients.py``: one process, GETs of the same objects, clients alternated, against SeaweedFS on
loopback, two runs on a shared 2-core host: 128 KiB objects 1035 and 622 GET/s against boto3's 569 and 217 and
s3dlio's 1013 and 993; 4 MiB objects 1125 and 418 MB/s against boto3's 848 and 283 and s3dlio's 1097 and 259).
s3dlio is as fast within that host's noise; the CRT client was kept because its ranged GET, streaming
(multipart) PUT, HEAD, LIST and DELETE are one small API, its retries can be switched off (``max_attempts=1``) so
that every retry is dlbench's own and counted, and it is the client of Amazon's S3 Connector for PyTorch.

Endpoint and credentials the standard way: ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (a local server;
path-style addressing is then used), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``(/``AWS_SESSION_TOKEN``) or
``AWS_PROFILE`` (``~/.aws/credentials``), ``AWS_REGION``/``AWS_DEFAULT_REGION`` (default us-east-1).

One client per process, made on first use and made again after a ``fork`` (a DataLoader worker, a prefetch
process: the parent's client and its threads are never used in the child); the CRT client reuses its
connections. Requests:

- a sample read (``preadv``) is one GET: the whole object when the read covers it (the size comes from the
  manifest, ``set_sizes``: no HEAD), else a ranged GET of exactly the bytes asked for;
- a header read (``pread`` at offset 0, npy's header) of an object of at most ``WHOLE_MAX`` bytes fetches the
  whole object once and serves the next data read of that handle from those bytes: one GET per sample, not two
  (mlcommons/storage#668's HEAD + range GETs);
- HDF5: libhdf5 opens the object's bytes as a file image (``h5f_opener``: one whole-object GET per file open,
  the file's bytes held in memory while it is open; a file over ``DLBENCH_S3_H5_IMAGE_MAX``, default 1 GiB, is
  refused in one line); the ros3 driver is not used (the PyPI h5py has no ros3:
  ``h5py.registered_drivers()``); the sample reads are the reader's own ``preadv`` calls, one ranged GET per array
  of a sample (hep_cnn's two arrays: two GETs per sample);
- writes (``generate``) go to a local spool file; ``rename(x.part, x)`` is the object's PUT (the CRT client
  uploads large ones in 8 MiB parts), so a failed or interrupted generation leaves no partial object;
- retries: ``ATTEMPTS`` attempts (``DLBENCH_S3_ATTEMPTS``, default 5) with exponential backoff from 50 ms for
  throttling (503 SlowDown), server errors and connection failures, each counted; then one line naming the
  object. Missing object: ``FileNotFoundError``; missing bucket, refused credentials: ``S3Error`` at once.

``--cache``: only ``keep`` (``check_cache``); a run's cache verdict is ``unknown`` with that reason
(``restate_cache``: the kernel's device-byte counters count no GET; the server's caching is the server's).

``stats()``: requests and bytes by kind (GET/PUT/HEAD/LIST/DELETE), retries, throttled replies, and per GET the
latency and the time to first byte (ns, lists), for the run's summary (``request_summary``; a DataLoader worker's
travel with its batches: ``worker_payload``/``absorb_worker``); ``dlbench.simulate.objectstore.modelled_block``:
the same block for ``simulate`` on a ``pfs.kind: object_store`` profile.

Datasets at ``s3://`` URLs (the manifest's master copy in the bucket, the local control folder, ``generate`` into
a bucket) are ``dlbench.data.bucket``'s: this backend knows objects, not datasets. ``probe``: calibrate-storage's
measurement of an endpoint.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from .pagecache import CacheMode

WHOLE_MAX = 16 << 20       # a header read of an object at most this big fetches the object (then one GET/sample)
PART = 8 << 20             # PUT chunk handed to the client (it uploads parts of its own part size)
BACKOFF_S = 0.05
KINDS = ("GET", "PUT", "HEAD", "LIST", "DELETE")


class NoDataset(DataError):
    """``dlbench.data.bucket.fetch_manifest``: the prefix holds no dataset (no manifest object)."""


class S3Error(DataError):
    """A request the store refused or could not answer (one line naming the object and the reason)."""


def is_s3(data_dir: Any) -> bool:
    return isinstance(data_dir, str) and data_dir.startswith("s3://")


def parse_url(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` -> (bucket, prefix without slashes at the ends)."""
    if not url.startswith("s3://"):
        raise ConfigError(f"--data-dir {url}: not an s3:// URL")
    rest = url[5:]
    bucket, _, prefix = rest.partition("/")
    if not bucket or any(c in bucket for c in " \\?#") or ".." in prefix.split("/"):
        raise ConfigError(f"--data-dir {url}: an S3 data dir is s3://BUCKET[/PREFIX] (prefix without '..')")
    return bucket, prefix.strip("/")


def attempts() -> int:
    v = os.environ.get("DLBENCH_S3_ATTEMPTS", "5")
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"DLBENCH_S3_ATTEMPTS={v!r}: must be an integer >= 1")
    return n


def h5_image_max() -> int:
    """The largest HDF5 object opened as a file image (``DLBENCH_S3_H5_IMAGE_MAX`` bytes, default 1 GiB)."""
    v = os.environ.get("DLBENCH_S3_H5_IMAGE_MAX", str(1 << 30))
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"DLBENCH_S3_H5_IMAGE_MAX={v!r}: must be a number of bytes >= 1")
    return n


def endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


_CLIENT: list = [-1, None]     # [pid, client]: one client per process (made again in a forked child)


def process_client():
    """This process's client (thread-safe, its connections reused by every backend of the process)."""
    import threading

    if _CLIENT[0] != os.getpid():
        with _LOCK.setdefault(os.getpid(), threading.Lock()):
            if _CLIENT[0] != os.getpid():
                _CLIENT[1] = _make_client()
                _CLIENT[0] = os.getpid()
    return _CLIENT[1]


_LOCK: dict = {}
_LIVE: list = []   # this process's backends opened by the run (their counters: ``process_stats``)


def _s3_exception():
    global _S3EXC
    if _S3EXC is None:
        from s3torchconnectorclient._mountpoint_s3_client import S3Exception

        _S3EXC = S3Exception
    return _S3EXC


_S3EXC: type[Exception] | None = None


def _make_client():
    try:
        from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client
    except ImportError:
        raise ConfigError("--data-dir s3://...: needs the S3 client: pip install 'dlbench[s3]' "
                          "(s3torchconnectorclient)") from None
    ep = endpoint()
    kw: dict[str, Any] = {"max_attempts": 1}
    if ep:
        kw.update(endpoint=ep, force_path_style=True)
    if os.environ.get("AWS_PROFILE"):
        kw["profile"] = os.environ["AWS_PROFILE"]
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return MountpointS3Client(region, **kw)


def _classify(msg: str) -> str:
    """'missing' | 'bucket' | 'auth' | 'retry' | 'other' from the client's error text."""
    m = msg.lower()
    if "bucket does not exist" in m or "nosuchbucket" in m:
        return "bucket"
    if "key does not exist" in m or "nosuchkey" in m or "not found" in m:
        return "missing"
    if "forbidden" in m or "access key" in m or "signature" in m or "access denied" in m or "credentials" in m:
        return "auth"
    if ("slowdown" in m or "slow down" in m or "503" in m or "service unavailable" in m or "internal" in m
            or "crt error" in m or "socket" in m or "connection" in m or "timeout" in m or "timed out" in m
            or "throttl" in m or "reduce your request rate" in m):
        return "retry"
    return "other"


class _Handle:
    """A read handle: the object's key, its size when known (manifest), and the object's bytes when a header
    read fetched it whole (served to the next data read, then dropped)."""

    __slots__ = ("key", "size", "img")

    def __init__(self, key: str, size: int | None):
        self.key, self.size = key, size
        self.img: bytes | None = None


class _Spool:
    """A write handle: the object's bytes on the local disk until ``rename`` PUTs them."""

    __slots__ = ("rel", "path", "fd")

    def __init__(self, rel: str, path: str, fd: int):
        self.rel, self.path, self.fd = rel, path, fd

    def pwrite(self, buf, offset: int) -> int:
        return os.pwrite(self.fd, buf, offset)


class S3Backend:
    """Objects ``s3://bucket/prefix/<rel>`` (module docstring)."""

    name = "s3"
    direct = False
    paths = False

    def __init__(self, url: str, *, spool_dir: str | Path | None = None):
        self.url = url
        self.bucket, self.prefix = parse_url(url)
        self._pre = self.prefix + "/" if self.prefix else ""
        self.attempts = attempts()
        self.spool_dir = str(spool_dir) if spool_dir is not None else None
        self._spools: dict[str, _Spool] = {}
        self.sizes: dict[str, int] = {}      # relative name -> bytes (the manifest's), so reads need no HEAD
        self._client = None
        self._pid = -1
        self._rh: dict[int, _Handle] = {}   # read handles are small integers, as descriptors (the readers compare them)
        self._next = 0
        self.reset_stats()

    # ---- plumbing -----------------------------------------------------------------------------------
    def reset_stats(self) -> None:
        self.requests = dict.fromkeys(KINDS, 0)
        self.nbytes = dict.fromkeys(KINDS, 0)
        self.retries = 0
        self.throttled = 0
        self.get_ns: list[int] = []
        self.ttfb_ns: list[int] = []

    @property
    def client(self):
        if self._pid != os.getpid():   # first use, or a forked child: the process's client
            self._client = process_client()
            self._pid = os.getpid()
        return self._client

    def __del__(self):   # spool files never PUT (an error before their rename) do not outlive the backend
        for sp in list(getattr(self, "_spools", {}).values()):
            if getattr(self, "_pid", -1) in (-1, os.getpid()):
                self._drop(sp)

    def __getstate__(self):   # pickled into spawned workers: the client is made there
        d = dict(self.__dict__)
        d["_client"], d["_pid"], d["_spools"] = None, -1, {}
        return d

    def key(self, rel: str) -> str:
        from .backend import _check_rel

        return self._pre + _check_rel(rel)

    def where(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _call(self, kind: str, key: str, fn):
        """``fn()`` with retries (module docstring); counts the request (and each retry)."""
        S3Exception = _s3_exception()
        delay = BACKOFF_S
        t_first = time.perf_counter()
        for attempt in range(1, self.attempts + 1):
            self.requests[kind] += 1
            try:
                return fn()
            except S3Exception as e:
                msg = str(e)
                why = _classify(msg)
                if why == "missing":
                    raise FileNotFoundError(2, "No such object", self.where(key)) from None
                if why == "bucket":
                    raise S3Error(f"{self.where(key)}: bucket {self.bucket!r} does not exist at "
                                  f"{endpoint() or 'the default AWS endpoint'}; create it or fix --data-dir") \
                        from None
                if why == "auth":
                    raise S3Error(f"{self.where(key)}: {kind} refused: the credentials were not accepted "
                                  f"({msg.split(':')[-1].strip()}); check AWS_ACCESS_KEY_ID/"
                                  f"AWS_SECRET_ACCESS_KEY or AWS_PROFILE") from None
                if why != "retry" or attempt == self.attempts:
                    raise S3Error(f"{self.where(key)}: {kind} failed after {attempt} attempt(s) over "
                                  f"{time.perf_counter() - t_first:.1f} s: {msg}") from None
                if "slow" in msg.lower() or "503" in msg or "throttl" in msg.lower():
                    self.throttled += 1
                self.retries += 1
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def _get(self, key: str, start: int | None = None, end: int | None = None):
        """One GET (ranged when start/end are given): the body as a list of chunks; latency and TTFB kept."""
        client = self.client

        def go():
            t0 = time.perf_counter_ns()
            stream = client.get_object(self.bucket, key, start, end) if start is not None else \
                client.get_object(self.bucket, key)
            it = iter(stream)
            try:
                first = next(it)
            except StopIteration:
                first = b""
            t1 = time.perf_counter_ns()
            chunks = [first]
            chunks.extend(it)
            t2 = time.perf_counter_ns()
            self.ttfb_ns.append(t1 - t0)
            self.get_ns.append(t2 - t0)
            return chunks
        chunks = self._call("GET", key, go)
        self.nbytes["GET"] += sum(len(c) for c in chunks)
        return chunks

    # ---- the readers' calls -------------------------------------------------------------------------
    def set_sizes(self, rels, nbytes) -> None:
        """Object sizes from the manifest (then a read never needs a HEAD)."""
        for r, n in zip(rels, nbytes):
            self.sizes[str(r)] = int(n)

    def keys(self, rels) -> list[str]:
        """The readers' keys: the relative names (as the memory backend's; ``file_image`` takes them too)."""
        from .backend import _check_rel

        return [_check_rel(str(r)) for r in rels]

    def open_read(self, key: str, flags: int = os.O_RDONLY) -> int:
        h = self._next
        self._next += 1
        self._rh[h] = _Handle(self._pre + key, self.sizes.get(key))   # no request: the GET comes with the read
        return h

    def preadv(self, fd: int, buffers, offset: int) -> int:
        handle = self._rh[fd]
        views = [memoryview(b).cast("B") for b in buffers]
        want = sum(len(v) for v in views)
        size = handle.size
        img = handle.img
        if img is not None:
            handle.img = None
            chunks = [memoryview(img)[offset:offset + want]]
        elif offset == 0 and size is not None and want >= size:
            chunks = self._get(handle.key)                       # the whole object: a plain GET
        else:
            if size is not None:
                want = max(0, min(want, size - offset))
            if want == 0:
                return 0
            try:
                chunks = self._get(handle.key, offset, offset + want)
            except S3Error as e:
                if "416" in str(e) or "range" in str(e).lower():
                    return 0
                raise
        got = 0
        vi, vo = 0, 0
        for c in chunks:
            cm = memoryview(c).cast("B")
            co = 0
            while co < len(cm) and vi < len(views):
                v = views[vi]
                n = min(len(v) - vo, len(cm) - co)
                v[vo:vo + n] = cm[co:co + n]
                vo += n
                co += n
                got += n
                if vo == len(v):
                    vi, vo = vi + 1, 0
        return got

    def pread(self, fd: int, n: int, offset: int) -> bytes:
        handle = self._rh[fd]
        size = handle.size
        if offset == 0 and size is not None and size <= WHOLE_MAX:
            img = b"".join(self._get(handle.key))
            handle.img = img
            return img[:n]
        if size is not None:
            n = max(0, min(n, size - offset))
            if n == 0:
                return b""
        return b"".join(self._get(handle.key, offset, offset + n))

    def h5f_opener(self):
        """libhdf5 opens the object's bytes as a file image (one GET of the object)."""
        import h5py

        limit = h5_image_max()

        def open_image(key: str, flags, fapl=None):
            size = self.sizes.get(key)
            if size is not None and size > limit:
                raise ConfigError(f"{self.where(self._pre + key)}: an HDF5 file over S3 is read as a file image (the "
                                  f"whole object in memory per open file); {size:,} B is more than "
                                  f"DLBENCH_S3_H5_IMAGE_MAX={limit:,}; raise it if the memory is there, or use "
                                  f"smaller files (--samples / samples_per_file)")
            try:
                return h5py.h5f.open_file_image(self.file_image(key))
            except FileNotFoundError:
                raise OSError(2, f"unable to open file (no object {self.where(self._pre + key)})") from None
        return open_image

    # ---- the generator's calls ----------------------------------------------------------------------
    def open(self, rel: str, write: bool = False, truncate: bool = True):
        self.key(rel)      # checks the name
        if write:
            old = self._spools.pop(rel, None)
            if old is not None and truncate:
                self._drop(old)
                old = None
            if old is not None:
                self._spools[rel] = old
                return old
            img = None
            if not truncate:
                try:
                    img = self.file_image(rel)     # writing into an existing object: its bytes first
                except FileNotFoundError:
                    pass
            fd, path = tempfile.mkstemp(prefix="dlbench-s3-", dir=self.spool_dir)
            sp = self._spools[rel] = _Spool(rel, path, fd)
            if img:
                os.pwrite(fd, img, 0)
            return sp
        if rel in self._spools:
            return self._spools[rel]
        size = self.sizes.get(rel)
        if size is None:
            size = self.size(rel)      # raises FileNotFoundError for a missing object
        h = self.open_read(rel)
        self._rh[h].size = size
        return h

    def close(self, handle) -> None:
        if type(handle) is int:
            self._rh.pop(handle, None)
        # a spool stays until its rename (the PUT) or remove

    def _drop(self, sp: _Spool) -> None:
        try:
            os.close(sp.fd)
        except OSError:
            pass
        try:
            os.unlink(sp.path)
        except FileNotFoundError:
            pass

    def pread_into(self, handle, buf, offset: int) -> int:
        if isinstance(handle, _Spool):
            return os.preadv(handle.fd, [buf], offset)
        return self.preadv(handle, [buf], offset)

    def pwrite(self, handle: _Spool, buf, offset: int) -> int:
        return handle.pwrite(buf, offset)

    def _put_file(self, key: str, path: str) -> None:
        client = self.client
        size = os.path.getsize(path)

        def go():
            w = client.put_object(self.bucket, key)
            with open(path, "rb", buffering=0) as fh:
                while True:
                    b = fh.read(PART)
                    if not b:
                        break
                    w.write(b)
            w.close()
        self._call("PUT", key, go)
        self.nbytes["PUT"] += size

    def rename(self, src: str, dst: str) -> None:
        sp = self._spools.pop(src, None)
        if sp is not None:
            try:
                self._put_file(self.key(dst), sp.path)
            finally:
                self._drop(sp)
            return
        sk, dk = self.key(src), self.key(dst)
        self._call("PUT", dk, lambda: self.client.copy_object(self.bucket, sk, self.bucket, dk))
        self.remove(src)

    def put(self, rel: str, local: str | Path) -> None:
        """Move a local file in: a ``.part`` name stays a local spool (the object appears at its rename, so a
        failed generation leaves nothing half-written in the bucket); any other name is PUT now."""
        if rel.endswith(".part"):
            old = self._spools.pop(rel, None)
            if old is not None:
                self._drop(old)
            self._spools[rel] = _Spool(rel, str(local), os.open(local, os.O_RDWR))
            return
        self._put_file(self.key(rel), str(local))
        Path(local).unlink()

    def mkdir(self, rel: str) -> None:
        pass   # prefixes are implied by the keys

    def free_bytes(self) -> int:
        return 1 << 62   # an object store has no free-space figure; quotas show up as PUT errors

    def checksum(self, rel: str, buf: bytearray | None = None) -> int:
        from .checksum import sum64

        return sum64(self.file_image(rel))

    def _head(self, key: str):
        client = self.client
        res = self._call("HEAD", key, lambda: client.head_object(self.bucket, key))
        return res

    def size(self, rel: str) -> int:
        sp = self._spools.get(rel)
        if sp is not None:
            return os.fstat(sp.fd).st_size
        key = self.key(rel)
        return int(self._head(key).size)

    def exists(self, rel: str) -> bool:
        if rel in self._spools:
            return True
        try:
            self._head(self.key(rel))
        except FileNotFoundError:
            return False
        return True

    def list(self, prefix: str = "") -> list[str]:
        client = self.client
        out: list[str] = []
        stream = self._call("LIST", self._pre + prefix, lambda: client.list_objects(self.bucket, self._pre + prefix))
        it = iter(stream)
        n = len(self._pre)
        while True:
            page = self._call("LIST", self._pre + prefix, lambda: next(it, None))
            if page is None:
                break
            out.extend(o.key[n:] for o in page.object_info)
        self.requests["LIST"] -= 1     # the stream's creation sends nothing
        return sorted(out)

    def remove(self, rel: str) -> None:
        sp = self._spools.pop(rel, None)
        if sp is not None:
            self._drop(sp)
            return
        key = self.key(rel)
        try:
            self._call("DELETE", key, lambda: self.client.delete_object(self.bucket, key))
        except FileNotFoundError:
            pass

    def file_image(self, rel: str) -> bytes:
        sp = self._spools.get(rel)
        if sp is not None:
            return Path(sp.path).read_bytes()
        return b"".join(self._get(self.key(rel)))

    # ---- counters -----------------------------------------------------------------------------------
    def stats(self) -> dict:
        return {"requests": dict(self.requests), "bytes": dict(self.nbytes), "retries": self.retries,
                "throttled": self.throttled, "get_ns": list(self.get_ns), "ttfb_ns": list(self.ttfb_ns)}


def request_summary(stats: list[dict], samples: int, price: float | None = None) -> dict:
    """Ranks' ``S3Backend.stats()`` -> the summary's ``s3`` block: requests and bytes by kind (summed over
    ranks), retries, throttled replies, requests per sample, GET latency and time to first byte P50/P95/P99 (ms)."""

    req = {k: sum(int(s["requests"].get(k, 0)) for s in stats) for k in KINDS}
    nb = {k: sum(int(s["bytes"].get(k, 0)) for s in stats) for k in KINDS}
    lat = np.concatenate([np.asarray(s["get_ns"], dtype=np.int64) for s in stats]) if stats else np.zeros(0)
    ttfb = np.concatenate([np.asarray(s["ttfb_ns"], dtype=np.int64) for s in stats]) if stats else np.zeros(0)

    def pct(a):
        if len(a) == 0:
            return None
        p = np.percentile(a, [50, 95, 99]) / 1e6
        return {"p50": round(float(p[0]), 3), "p95": round(float(p[1]), 3), "p99": round(float(p[2]), 3)}
    return {"requests": req, "bytes": nb, "retries": sum(int(s["retries"]) for s in stats),
            "throttled": sum(int(s["throttled"]) for s in stats),
            "requests_per_sample": round(req["GET"] / samples, 4) if samples else None,
            "get_latency_ms": pct(lat), "ttfb_ms": pct(ttfb),
            "per_rank_requests": [dict(s["requests"]) for s in stats],
            **({"cost_usd": round(req["GET"] / 1e6 * float(price), 6)} if price is not None else {})}


CACHE_LINE = ("unknown: the shared tier is S3: no client page cache, its reads are GETs (summary.s3); what the "
              "server served from its own cache is the server's, not measured here")


def restate_cache(summary: dict) -> None:
    """An S3 run's cache figures said as they are: /proc/self/io's device bytes count no GET, so the page-cache
    verdict ("warm: 0 MB came from the device") and the warning "I/O figures measure memory" would be false;
    the verdict is ``unknown`` with the reason (``CACHE_LINE``), the warning dropped, and the MLPerf Storage
    line no longer suggests ``--cache drop``/``direct`` (refused over S3)."""
    c = summary.get("cache")
    if c:
        c["verdict"], c["verdict_line"] = "unknown", CACHE_LINE
        for row in c.get("per_epoch") or []:
            row["verdict"] = "unknown"
        ml = c.get("mlperf") or {}
        if ml.get("line"):
            ml["line"] = ml["line"].replace("; pass --cache drop or --cache direct for cold reads",
                                            " (over S3: the server's RAM against the dataset is the server's)")
    pc = summary.get("page_cache")
    if pc:
        pc["warning"] = None


def check_cache(mode: CacheMode, url: str) -> None:
    """``--cache`` over S3: there is no client page cache (every read is a GET); ``keep`` is the one mode."""
    if mode is not CacheMode.KEEP:
        raise ConfigError(f"--cache {mode}: the shared tier is S3 ({url}): there is no client page cache to "
                          f"{'drop' if mode is CacheMode.DROP else 'bypass'} (every read is a GET; the server's own "
                          "caching is the server's); use --cache keep")


def open_run_backend(url: str, manifest) -> S3Backend:
    """A reader's backend in a run: the sizes from the manifest (no HEAD), its counters kept for the summary."""
    b = S3Backend(url)
    b.set_sizes(manifest.paths, manifest.nbytes)
    _LIVE.append((os.getpid(), b))   # a forked child's copies of its parent's backends are not its own
    return b


def process_stats() -> dict | None:
    """The counters of every backend this process's run opened, combined (None: none opened). Read once, at
    the run's end: the run's backends and its workers' counts are then let go, so that the next run in this
    process (a study's next entry) counts from zero."""
    pid = os.getpid()
    mine = [b for p, b in _LIVE if p == pid]
    _LIVE[:] = [(p, b) for p, b in _LIVE if p != pid]
    workers, worker_ns = list(_WORKERS.values()), (list(_WORKER_NS[0]), list(_WORKER_NS[1]))
    _WORKERS.clear()
    _WORKER_NS[0].clear()
    _WORKER_NS[1].clear()
    if not mine and not workers:
        return None
    out: dict[str, Any] = {"requests": dict.fromkeys(KINDS, 0), "bytes": dict.fromkeys(KINDS, 0), "retries": 0,
                           "throttled": 0, "get_ns": [], "ttfb_ns": []}
    for s in [b.stats() for b in mine] + workers:
        for k in KINDS:
            out["requests"][k] += s["requests"][k]
            out["bytes"][k] += s["bytes"][k]
        out["retries"] += s["retries"]
        out["throttled"] += s["throttled"]
    for b in mine:
        out["get_ns"].extend(b.get_ns)
        out["ttfb_ns"].extend(b.ttfb_ns)
    out["get_ns"].extend(worker_ns[0])
    out["ttfb_ns"].extend(worker_ns[1])
    return out


_WORKERS: dict[int, dict] = {}        # a DataLoader worker's pid -> its latest cumulative counts (trainer side)
_WORKER_NS: tuple[list, list] = ([], [])   # the workers' GET latencies and TTFBs shipped so far (trainer side)


def worker_payload() -> dict | None:
    """A DataLoader worker's S3 counters to ship with a batch: cumulative counts, and the latencies recorded
    since the last payload (None: this process opened no S3 reader)."""
    pid = os.getpid()
    mine = [b for p, b in _LIVE if p == pid]
    if not mine:
        return None
    out: dict[str, Any] = {"pid": pid, "requests": dict.fromkeys(KINDS, 0), "bytes": dict.fromkeys(KINDS, 0),
                           "retries": 0, "throttled": 0, "get_ns": [], "ttfb_ns": []}
    for b in mine:
        for k in KINDS:
            out["requests"][k] += b.requests[k]
            out["bytes"][k] += b.nbytes[k]
        out["retries"] += b.retries
        out["throttled"] += b.throttled
        n = getattr(b, "_sent", 0)
        out["get_ns"].extend(b.get_ns[n:])
        out["ttfb_ns"].extend(b.ttfb_ns[n:])
        b._sent = len(b.get_ns)
    return out


def absorb_worker(payload: dict | None) -> None:
    """The trainer's side of ``worker_payload``: counts replaced per worker, latencies appended."""
    if not payload:
        return
    _WORKERS[payload["pid"]] = payload
    _WORKER_NS[0].extend(payload["get_ns"])
    _WORKER_NS[1].extend(payload["ttfb_ns"])


# ---- calibrate-storage's S3 probe -------------------------------------------------------------------------------

def _get_worker(url: str, rels: list[str], size: int, stop_at: float, seed: int, out: list, k: int,
                lat: list | None) -> None:

    b = S3Backend(url)
    b.set_sizes(rels, [size] * len(rels))
    rng = np.random.default_rng(seed)
    buf = np.empty(size, dtype=np.uint8)
    got = 0
    t0 = time.perf_counter()
    while time.perf_counter() < stop_at:
        h = b.open_read(rels[int(rng.integers(len(rels)))])
        got += b.preadv(h, [buf], 0)
        b.close(h)
    out[k] = (got, time.perf_counter() - t0)
    if lat is not None:
        lat.extend(x / 1e9 for x in b.get_ns)


def get_rate(url: str, rels: list[str], size: int, threads: int, slice_s: float, comm, seed: int,
             latency: bool = False) -> tuple[float, list | None]:
    """Aggregate MB/s of ``threads`` GET loops per rank x ranks (whole objects of ``size`` bytes, at random),
    and rank 0's first thread's GET latencies (s) when ``latency``."""
    import threading

    out: list = [None] * threads
    lat: list | None = [] if latency else None
    process_client()
    comm.barrier()
    stop_at = time.perf_counter() + slice_s
    th = [threading.Thread(target=_get_worker, args=(url, rels, size, stop_at, seed * 1000 + k + 7919 * comm.rank,
                                                     out, k, lat if k == 0 else None)) for k in range(threads)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    got = sum(o[0] for o in out)
    dt = max(o[1] for o in out)
    tot_b = comm.allreduce(got, "sum")
    tot_t = comm.allreduce(dt, "max")
    return (tot_b / tot_t / 1e6 if tot_t > 0 else 0.0), lat


def probe(url: str, *, comm, threads: list[int], request_bytes: int, slice_s: float, repeat: int, echo=None,
          n_objects: int = 16) -> dict:
    """calibrate-storage against an S3 endpoint: each rank PUTs its own probe objects under
    ``<prefix>/.dlbench-calibrate/r<rank>/`` (4 KiB and ``request_bytes``; the PUT rate is timed), then GET
    latency (4 KiB objects, one thread), the aggregate GET rate t(γ) against concurrency (γ = ranks x threads,
    objects of ``request_bytes``) and the one-thread GET rate against object size (4 KiB, ``request_bytes``,
    4 MiB); every probe object is deleted at the end. Returns the figures (MB/s, s)."""

    sizes = sorted({4096, int(request_bytes), 4 << 20})
    base = f"{url.rstrip('/')}/.dlbench-calibrate/r{comm.rank}"
    b = S3Backend(base)
    made: list[str] = []
    raw: dict = {"endpoint": endpoint() or "aws", "objects_per_size": n_objects}
    try:
        put_s = 0.0
        put_b = 0
        for size in sizes:
            body = np.frombuffer(os.urandom(size), dtype=np.uint8)
            for i in range(n_objects):
                rel = f"{size}/o{i:04d}"
                t0 = time.perf_counter()
                h = b.open(rel + ".part", write=True)
                b.pwrite(h, body, 0)
                b.rename(rel + ".part", rel)
                put_s += time.perf_counter() - t0
                put_b += size
                made.append(rel)
        raw["put_mb_per_s"] = comm.allreduce(put_b, "sum") / comm.allreduce(put_s, "max") / 1e6
        rels = {size: [f"{size}/o{i:04d}" for i in range(n_objects)] for size in sizes}
        _, lat = get_rate(base, rels[4096], 4096, 1, slice_s, comm, seed=1, latency=True)
        lat = lat or []
        raw["latency_s"] = {"median": float(np.median(lat)) if lat else 0.0,
                            "p95": float(np.percentile(lat, 95)) if lat else 0.0, "requests": len(lat)}
        agg: dict[int, list[float]] = {}
        for t in threads:
            agg[t * comm.size] = [get_rate(base, rels[request_bytes], request_bytes, t, slice_s, comm, seed=10 + k)[0]
                                  for k in range(repeat)]
            if echo and comm.rank == 0:
                v = agg[t * comm.size]
                echo(f"  S3 GET: {t * comm.size:>3} concurrent  {float(np.median(v)):>10,.1f} MB/s  "
                     f"({min(v):,.1f} .. {max(v):,.1f})")
        raw["get_mb_per_s"] = {str(k): v for k, v in agg.items()}
        raw["get_mb_per_s_by_size"] = {str(s): get_rate(base, rels[s], s, 1, slice_s, comm, seed=99)[0] for s in sizes}
        if echo and comm.rank == 0:
            echo(f"  S3 latency (4 KiB GET, median): {raw['latency_s']['median'] * 1e3:,.3f} ms; PUT "
                 f"{raw['put_mb_per_s']:,.1f} MB/s; one GET stream by object size: " + ", ".join(
                     f"{int(s):,} B {v:,.1f} MB/s" for s, v in raw["get_mb_per_s_by_size"].items()))
        raw["agg"] = agg
        return raw
    finally:
        for rel in made:
            b.remove(rel)
