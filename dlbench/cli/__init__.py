"""The ``dlbench`` command line: the group ``main`` (the console script) and its commands, one module per
family (``data``, ``run``, ``results``, ``simulate``, ``study``, ``calibrate``, ``checkpoint``), the options
they share (``options``) and the error discipline (``group``).

No logic lives here, and nothing heavy (mpi4py, h5py, torch) is imported at import time: each command
imports what it needs when it runs. A ``DlbenchError`` becomes one line on stderr and its exit code.
"""

from __future__ import annotations

import click

from .. import __version__
from . import calibrate, checkpoint, data, results, run, simulate, study
from .group import DlbenchGroup


@click.group(cls=DlbenchGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="dlbench")
def main() -> None:
    """dlbench: how much of your deep-learning epoch is I/O, and which data-loading strategy removes it."""


for _command in (data.generate, data.verify, data.list_group, data.show, run.run, results.report_cmd,
                 results.compare_cmd, results.plot_cmd, results.import_group, study.sustain_cmd, study.study_cmd,
                 study.jobscript_cmd, simulate.simulate_cmd, calibrate.calibrate, calibrate.calibrate_storage_cmd,
                 checkpoint.checkpoint_cmd):
    main.add_command(_command)
