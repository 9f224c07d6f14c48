"""Names of the semantic-multiplexing tasks (no numpy: ``radio/config.py`` imports it).

Built-in tasks are registered by dotted path into ``radio/tasks.py`` and imported when
first built; a user task is any ``package.module:builder`` with the signature
``builder(seed, cifar10_dir, text_csv_path) -> radio.tasks.TaskData``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from nodes.registry import Registry

if TYPE_CHECKING:
    from radio.tasks import TaskData

TaskBuilder = Callable[[int, "str | None", "str | None"], "TaskData"]

#: Tasks defined on scikit-learn's built-in 8x8 digits (no download); see radio/tasks.py.
DIGITS_TASKS: tuple[str, ...] = (
    "digit",
    "parity",
    "magnitude",
    "prime",
    "ink",
    "mod3",
    "loop",
    "top_heavy",
)
#: Tasks that need user-provided local files (``cifar10_dir``, ``text_csv_path``).
FILE_TASKS: tuple[str, ...] = ("cifar10", "text_sentiment")


def _task_builder(obj: object) -> TaskBuilder:
    """Accept a task builder: a callable ``(seed, cifar10_dir, text_csv_path) -> TaskData``."""
    if not callable(obj):
        raise TypeError(f"must be a callable (seed, cifar10_dir, text_csv_path), got {obj!r}")
    return cast(TaskBuilder, obj)


#: name (or ``package.module:builder``) -> builder(seed, cifar10_dir, text_csv_path)
TASK_BUILDERS: Registry[TaskBuilder] = Registry("radio task", validate=_task_builder)
for _name in DIGITS_TASKS + FILE_TASKS:
    TASK_BUILDERS.add_path(_name, f"radio.tasks:BUILTIN.{_name}")
