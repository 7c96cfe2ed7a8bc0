"""The DeepMind Control Suite's tasks as gymnasium ids (``dm_control/<domain>-<task>-v0``, registered by Shimmy).

Loaded only where such an id is used: :func:`cleanrl_utils.env_checks.check_env` and the evaluation register them in
the main process, a continuous script's ``make_env`` in each env worker (a fresh interpreter knows none of them).
"""

from __future__ import annotations

import importlib

import gymnasium as gym

PREFIX = "dm_control/"


def register(env_id: str | None = None) -> None:
    """Register Shimmy's ``dm_control/...`` ids (Tunyasuvunakool et al. 2020, arXiv:2006.12983) in this process if
    ``env_id`` is one (None: in any case) and they are not yet. ``torch._dynamo`` is imported first: a CUDA build's
    triton, loaded after dm_control's EGL has loaded Mesa's LLVM, crashes the process.

    Raises:
        ModuleNotFoundError: Shimmy or dm_control is missing (the message names the extra to install).
    """
    if env_id is not None and (not str(env_id).startswith(PREFIX) or env_id in gym.registry):
        return
    from cleanrl_utils.env_checks import headless_rendering

    importlib.import_module("torch._dynamo")
    headless_rendering()  # dm_control picks its rendering backend when imported
    try:
        import dm_control  # noqa: F401  without it Shimmy registers no dm_control id, silently
        import shimmy
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"dm_control ids need the dm_control extra: pip install -e '.[dm_control]' ({error})"
        ) from None
    gym.register_envs(shimmy)
