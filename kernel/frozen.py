"""The one base of every spec model (immutable, an unknown key is an error), and the
type of a file path a spec names (resolved against the spec's own folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo

#: The validation context key holding the folder of the spec being loaded.
SPEC_DIR = "spec_dir"


class Frozen(BaseModel):
    """Base for spec models: immutable (``frozen``), unknown keys are errors (``forbid``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def spec_dir(info: ValidationInfo) -> Path | None:
    """The folder of the spec being loaded (None when the model is validated again
    elsewhere, e.g. in a node from the resolved spec, whose paths are absolute)."""
    ctx: Any = info.context
    base = ctx.get(SPEC_DIR) if isinstance(ctx, dict) else None
    return Path(base) if base is not None else None


def resolve_spec_path(value: str, info: ValidationInfo) -> str:
    """A relative path becomes absolute against the spec's folder (``~`` expanded);
    without a spec folder in the context (validated again from a resolved spec) the
    value is kept as it is."""
    path = Path(value).expanduser()
    base = spec_dir(info)
    if base is None or path.is_absolute():
        return str(path)
    return str((base / path).resolve())


def _existing(kind: str) -> Any:
    def check(value: str, info: ValidationInfo) -> str:
        path = resolve_spec_path(value, info)
        base = spec_dir(info)
        if base is not None and not (Path(path).is_dir() if kind == "folder" else
                                     Path(path).is_file()):
            where = "" if Path(value).expanduser().is_absolute() else f" (read from {base})"
            raise ValueError(f"no such {kind}: {value}{where}")
        return path

    return AfterValidator(check)


#: A file or folder a spec names: relative to the spec's own folder, stored absolute
#: (so the resolved spec, the nodes and a resumed run all read the same file).
SpecPath = Annotated[str, AfterValidator(resolve_spec_path)]
#: A :data:`SpecPath` that must be an existing file when the spec is loaded.
SpecFile = Annotated[str, _existing("file")]
#: A :data:`SpecPath` that must be an existing folder when the spec is loaded.
SpecDir = Annotated[str, _existing("folder")]
