"""Faults: the errors a run cannot survive and a user can act on, each said in one line.

A :class:`Fault` is raised where it is found; the block a script opens with ``with run.stop_on_fault(envs):``
(:meth:`cleanrl_utils.run.Run.stop_on_fault`) ends the run with ``<script>.py: <what>; last checkpoint: <file>``.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import torch


class Fault(RuntimeError):
    """An error that ends a run in one line."""


class NonFinite(Fault):
    """A loss, gradient norm or parameter that is NaN or infinite."""


class EnvFault(Fault):
    """An env (or its worker) that returned what it must not, died, or did not answer within --env-timeout."""


class WriteFailed(Fault, OSError):
    """A model or checkpoint file that could not be written (a full disk, a read-only folder)."""


def check_finite(update: int | str, global_step: int, **quantities: torch.Tensor | float) -> None:
    """Raise :class:`NonFinite` naming the first of ``quantities`` (scalar tensors or numbers, by name) that is not
    finite. Call it once per update, before ``optimizer.step()``: a diverging update stops before it reaches the
    weights. ``update``: its number, or where it is ("iteration 4, epoch 2"); ``global_step``: env steps so far.

    Raises:
        NonFinite: ``non-finite value_loss (nan) at update 37, global step 18944``.
    """
    values = [torch.as_tensor(value).detach() for value in quantities.values()]
    if all(value.device.type == "cpu" and value.numel() == 1 for value in values):
        if math.isfinite(sum(value.item() for value in values)):  # NaN and infinity carry through a sum
            return
    elif bool(torch.stack([torch.isfinite(value).all() for value in values]).all()):  # one read-back on a GPU
        return
    for name, value in zip(quantities, values):
        if not bool(torch.isfinite(value).all()):
            where = f"update {update}" if isinstance(update, int) else update
            shown = value.flatten()[~torch.isfinite(value.flatten())][0].item()
            raise NonFinite(f"non-finite {name} ({shown}) at {where}, global step {global_step}")


def check_parameters(tensors: dict[str, Any], what: str) -> None:
    """Raise :class:`NonFinite` if a floating tensor of ``tensors`` (networks or tensors by name) is not finite;
    ``what``: the file about to be written (``the model``), named in the message."""
    for name, value in tensors.items():
        entries = value.state_dict().items() if isinstance(value, torch.nn.Module) else [("", value)]
        for key, tensor in entries:
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise NonFinite(f"{name}{'.' + key if key else ''} holds non-finite values: {what} not written")


def free_space(path: Any) -> str:
    """The free space on the disk of ``path`` (or of its nearest existing parent): ``"12 MiB free on its disk"``."""
    folder = next((p for p in [Path(path), *Path(path).parents] if p.exists()), Path("/"))
    free = shutil.disk_usage(folder).free // 2**20
    return f"{free} MiB free on its disk" + (": the disk is full" if free < 1 else "")


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (its type's name when it has none), at most 200 characters."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
