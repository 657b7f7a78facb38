"""The ``dlbench`` command group's error discipline: a ``DlbenchError`` becomes one line on stderr and its exit
code; an OSError on standard output exit 6 (a closed pipe: 1); a bad flag or a config error under MPI ends every
rank with that one line (``comm.fail_together``); SIGINT/SIGTERM exit 130/143 with one line."""

from __future__ import annotations

import errno
import os
import sys

import click

from ..errors import ConfigError, DlbenchError, Interrupted


def _launcher_rank() -> int:
    for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if k in os.environ:
            try:
                return int(os.environ[k])
            except ValueError:
                pass
    return 0


def stdout_broken(e: OSError) -> bool:
    """True when ``e`` came from writing standard output (a full device, a closed pipe: a ``click.echo`` to
    stdout, or a flush of it that fails too); standard output is then pointed at /dev/null so the exit's own
    flush does not print a second error."""
    broken = False
    tb = e.__traceback__
    while tb is not None:
        f = tb.tb_frame
        if f.f_code.co_name == "echo" and f.f_code.co_filename.replace(os.sep, "/").endswith("click/utils.py"):
            target = f.f_locals.get("file")
            try:
                broken = target is None or target.fileno() == 1
            except (OSError, ValueError, AttributeError):
                broken = target is sys.stdout
        tb = tb.tb_next
    if not broken:
        try:
            sys.stdout.flush()
        except OSError:
            broken = True
    if broken:
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.close(fd)
        except OSError:
            pass
    return broken


def _os_error_line(e: OSError) -> str:
    """One line for an OSError no command turned into a DlbenchError: standard output that cannot be
    written, or the file and the reason (a name too long, a full disk)."""
    why = e.strerror or str(e)
    if stdout_broken(e):
        return f"cannot write to standard output: {why} (errno {errno.errorcode.get(e.errno or 0, e.errno)})"
    where = f"{e.filename}: " if e.filename else ""
    hint = {errno.ENAMETOOLONG: "; use shorter names (at most 255 bytes per path component)",
            errno.ENOSPC: "; free space or choose another folder",
            errno.EDQUOT: "; free space or choose another folder"}.get(e.errno or 0, "")
    return f"{where}{why}{hint}"


_MPI_COMMANDS = ("run", "generate", "verify", "study", "calibrate-storage")   # the commands that start MPI


class DlbenchGroup(click.Group):
    """Turns DlbenchError into one line and an exit code; usage errors keep click's format."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:   # a bad flag on one rank only: the others must not wait in MPI for it
            if ctx.invoked_subcommand in _MPI_COMMANDS:
                from ..comm import fail_together

                try:
                    fail_together(ConfigError(e.format_message()))
                except DlbenchError:
                    pass   # every rank stops; this one says why with click's usage line
            raise
        except OSError as e:   # an output the command could not write (stdout on a full device, a full disk)
            msg = _os_error_line(e)
            click.echo(f"dlbench: error: {msg}", err=True)
            ctx.exit(6 if e.errno != errno.EPIPE else 1)
        except DlbenchError as e:
            if ctx.invoked_subcommand in _MPI_COMMANDS:   # stopped before MPI started: the other ranks must not wait
                from ..comm import fail_together

                try:
                    fail_together(e)
                except DlbenchError as agreed:
                    e = agreed
            # a config error is the same on every rank: say it once (so is one the ranks agreed on: ``once``)
            if not ((isinstance(e, ConfigError) or getattr(e, "once", False)) and _launcher_rank() != 0):
                kind = "" if isinstance(e, Interrupted) else "error: "
                click.echo(f"dlbench: {kind}{e}", err=True)
            sys.stdout.flush()
            ctx.exit(e.exit_code)
        except KeyboardInterrupt as e:
            sig = getattr(e, "signal_name", "SIGINT")
            if _launcher_rank() == 0:  # every rank gets Ctrl-C: say it once
                click.echo(f"dlbench: interrupted by {sig}", err=True)
            ctx.exit(143 if sig == "SIGTERM" else 130)

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            from ..errors import did_you_mean

            if args and "No such command" in str(e):
                raise click.UsageError(f"unknown command '{args[0]}'; choose one of: "
                                       f"{', '.join(sorted(self.commands))}{did_you_mean(args[0], self.commands)}",
                                       ctx) from None
            raise


def sigterm_as_interrupt():
    """SIGINT and SIGTERM (a scheduler's cancel, `kill`) raised once as an interrupt in the main thread, so the
    command records itself and removes what it wrote; a second signal never cuts that clean-up short
    (``dlbench.stop``)."""
    from ..stop import StopSignals

    return StopSignals()
