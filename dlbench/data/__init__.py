"""Datasets: generation (parallel, deterministic, resumable, atomic), manifest, formats, content, verify.

Public entry points: ``generate.generate``, ``manifest.Manifest``, ``formats.open_reader`` /
``formats.MemoryReader`` / ``formats.aligned_empty``, ``content.expected_row``, ``verify.verify``.
Submodules are imported lazily by callers (h5py and Pillow load only when used).
"""
