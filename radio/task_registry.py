"""Names of the semantic-multiplexing tasks (no numpy: ``radio/config.py`` imports it).

Built-in tasks are registered by dotted path into ``radio/tasks.py`` and imported when
first built; a user task is any ``package.module:builder`` with the signature
``builder(seed, cifar10_dir, text_csv_path) -> radio.tasks.TaskData``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kernel.registry import Registry, callable_hook

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
#: Tasks on data generated here (``radio/synthetic.py``), written in the file formats of
#: CIFAR-10 and of the sentiment CSV and read back by the same loaders as FILE_TASKS.
GENERATED_TASKS: tuple[str, ...] = ("shapes10", "synthetic_sentiment")


#: name (or ``package.module:builder``) -> builder(seed, cifar10_dir, text_csv_path)
TASK_BUILDERS: Registry[TaskBuilder] = Registry(
    "radio task", validate=callable_hook("(seed, cifar10_dir, text_csv_path) -> TaskData")
)
for _name in DIGITS_TASKS + FILE_TASKS + GENERATED_TASKS:
    TASK_BUILDERS.add_path(_name, f"radio.tasks:BUILTIN.{_name}")
