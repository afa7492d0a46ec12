"""One error hierarchy. Messages say what was found, what was expected, and the fix.

Exit codes follow docs/architecture.md: 1 = a check found a problem, 2 = bad input.
"""

from __future__ import annotations


class MmstackError(Exception):
    """Base error; `exit_code` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None, source: str | None = None):
        self.message = message
        self.fix = fix
        self.source = source  # the file (and field) the problem is in, when there is one
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = []
        if self.source:
            parts.append(f"{self.source}: ")
        parts.append(self.message)
        if self.fix:
            parts.append(f" (fix: {self.fix})")
        return "".join(parts)


class BadInput(MmstackError):
    """Unknown GPU, malformed file, bad option: exit 2."""

    exit_code = 2


class CheckFailed(MmstackError):
    """A check found a problem: exit 1."""

    exit_code = 1


class BuildFailed(MmstackError):
    """A recipe build failed; the channel is left as it was: exit 1."""

    exit_code = 1


def rattler_errors() -> tuple[type[Exception], ...]:
    """Every exception type py-rattler raises (SolverError, InstallerError, GatewayError, ...), and OSError.

    They share no base but Exception, so code that turns rattler's refusal into one line catches
    these, not everything: a bug of ours still surfaces as a traceback. Imported lazily: the base
    install does not carry py-rattler."""
    import rattler.exceptions as rx

    own = tuple(t for t in vars(rx).values()
                if isinstance(t, type) and issubclass(t, Exception) and not issubclass(t, Warning))
    return (*own, OSError)
