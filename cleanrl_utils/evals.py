"""Evaluation helper: run a policy for a number of whole episodes.

Each script's ``evaluate()`` builds its own environment and network, loads the saved
weights and hands both to :func:`run_episodes`.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np


def run_episodes(
    envs,
    policy: Callable[[np.ndarray], np.ndarray],
    num_episodes: int,
    seed: int | None = None,
    on_done: Optional[Callable[[np.ndarray], None]] = None,
) -> np.ndarray:
    """Run ``policy`` in ``envs`` until ``num_episodes`` episodes have ended.

    Args:
        envs: a gymnasium vector env wrapped in
            ``gymnasium.wrappers.vector.RecordEpisodeStatistics``.
        policy: maps a batch of observations ``[num_envs, *obs_shape]`` to actions
            ``[num_envs, *action_shape]`` (numpy in, numpy out).
        num_episodes: how many episodes to collect; must be positive.
        seed: seed of the first reset (sub-env i gets seed + i).
        on_done: called after each step with the bool mask ``[num_envs]`` of envs whose episode
            ended (terminated or truncated), e.g. to reset a recurrent policy's state.

    Returns:
        Episodic returns, float64 ``[num_episodes]``, in the order the episodes ended.

    Raises:
        ValueError: ``num_episodes`` is not positive.
    """
    if num_episodes <= 0:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}")
    returns: list[float] = []
    obs, _ = envs.reset(seed=seed)
    while len(returns) < num_episodes:
        obs, _, terminations, truncations, infos = envs.step(policy(obs))
        if on_done is not None:
            on_done(np.logical_or(terminations, truncations))
        if "_episode" in infos:
            returns.extend(infos["episode"]["r"][infos["_episode"]].tolist())
    return np.asarray(returns[:num_episodes], dtype=np.float64)
