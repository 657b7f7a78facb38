"""What identifies a dataset's content, below the registry and the manifest (both ``data.manifest`` and
``data.format_base`` read it): the standard content version and the data-defining part of a workload."""
from __future__ import annotations

CONTENT_VERSION = "dlbench.content/1"   # a format module's ``CONTENT_VERSION`` replaces it (jpeg: dlbench.jpeg/2)


def spec_of(workload) -> dict:
    """The data-defining part of a resolved Workload (what two datasets must share to be the same)."""
    return {
        "name": workload.name,
        "layout": workload.layout,
        "arrays": [{"name": a.name, "shape": list(a.shape), "dtype": a.dtype, "role": a.role}
                   for a in workload.arrays],
        "samples": int(workload.samples),
        "samples_per_file": int(workload.samples_per_file),
        "shared_file": workload.shared_file,
        "classes": int(workload.classes),
        "jpeg": None if workload.jpeg is None else {
            "size": {k: getattr(workload.jpeg.size, k) for k in
                     ("kind", "mean_bytes", "std_bytes", "min_bytes", "max_bytes")},
            "decoded_shape": list(workload.jpeg.decoded_shape)},
        # only when set, so the spec (and the identity) of every dataset without it is unchanged
        **({"record_size": {k: getattr(workload.record_size, k) for k in
                            ("kind", "mean_bytes", "std_bytes", "min_bytes", "max_bytes")}}
           if getattr(workload, "record_size", None) is not None else {}),
    }
