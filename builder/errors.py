"""One error hierarchy. Each class carries its exit code; the CLI maps them to messages in one place."""

from __future__ import annotations

from builder.redact import redact


class ImgbuildError(Exception):
    """Base of every error imgbuild reports to a user (never shown with a traceback unless --debug)."""

    exit_code = 1
    label = "error"

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        """The message as printed: the one place errors are shown, so the one place they are redacted
        (a URL's credentials become ***, whatever value a message quotes)."""
        text = f"{self.label}: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return redact(text)


class SpecError(ImgbuildError):
    """stacks.yaml or a layer kind is malformed: unknown key, wrong type, bad reference, cycle, ..."""

    exit_code = 2
    label = "spec error"

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None, hint: str | None = None):
        where = ""
        if file:
            where = file + (f":{line}" if line else "")
        if key:
            where = f"{where}: {key}" if where else key
        super().__init__(f"{where}: {message}" if where else message, hint=hint)
        self.file, self.line, self.key, self.reason = file, line, key, message


class RenderError(ImgbuildError):
    """A value cannot be written into a Dockerfile safely, or a template is broken."""

    exit_code = 2
    label = "render error"


class PreflightError(ImgbuildError):
    """The stack is impossible (version, driver or arch rules) and must not be built."""

    exit_code = 3
    label = "preflight"


class SourceError(ImgbuildError):
    """A git pin could not be fetched or does not verify."""

    exit_code = 4
    label = "source error"


class EngineError(ImgbuildError):
    """The Docker engine or BuildKit is missing, unusable, or a build failed."""

    exit_code = 5
    label = "engine error"


class RegistryError(ImgbuildError):
    """The registry is unreachable or refused a request."""

    exit_code = 6
    label = "registry error"


class ValidationFailed(ImgbuildError):
    """An image was built but failed its in-image checks; no tag was moved."""

    exit_code = 7
    label = "validation failed"


class DiffError(ImgbuildError):
    """`imgbuild diff` could not compare: CI gates on 0 equal / 1 different, so every failure is 2."""

    exit_code = 2
    label = "diff error"


class Interrupted(BaseException):
    """Ctrl-C, or SIGTERM (CI cancelling a job). A BaseException like KeyboardInterrupt, so that no
    `except ImgbuildError` on the way up takes it for one failed layer and carries on with the next.
    The CLI raises it from its signal handlers instead of KeyboardInterrupt, which typer (run with
    standalone_mode=False) turns into a return value: the process then exited 0 on Ctrl-C."""

    exit_code = 130
