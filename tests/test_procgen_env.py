"""cleanrl_utils/procgen.py: Procgen's games under this project's vector-env conventions."""

import numpy as np
import pytest

from cleanrl_utils.envpool_atari import GameStatistics
from cleanrl_utils.procgen import ProcgenVectorEnv

pytest.importorskip("procgen")

NOOP = 4  # Procgen's action 4 moves nothing and presses no key


def test_an_episode_cut_by_the_time_limit_is_a_truncation_and_is_counted():
    """In leaper the frog that stays put never dies: every episode ends at the game's 500-step limit."""
    envs = GameStatistics(ProcgenVectorEnv("leaper", 3, seed=1), frame_skip=1)
    obs, _ = envs.reset()
    assert obs.shape == (3, 64, 64, 3) and obs.dtype == np.uint8
    for t in range(1, 1001):
        obs, rewards, terminations, truncations, info = envs.step(np.full(3, NOOP))
        assert not terminations.any() and (truncations == (t % 500 == 0)).all()
        assert info["_episode"].tolist() == truncations.tolist()
        if truncations.any():
            assert info["episode"]["l"].tolist() == [500] * 3 and info["episode"]["r"].tolist() == [0.0] * 3
    envs.close()


def test_deaths_are_terminations_and_the_episode_statistics_sum_the_game_rewards():
    envs = GameStatistics(ProcgenVectorEnv("starpilot", 4, seed=3), frame_skip=1)
    envs.reset()
    rng, returns, ended = np.random.default_rng(0), np.zeros(4), 0
    for _ in range(600):
        _, rewards, terminations, truncations, info = envs.step(rng.integers(0, 15, 4))
        returns += info["reward"]
        assert (rewards == info["reward"]).all() and not truncations.any()  # starpilot's limit is 1000 steps
        for i in np.flatnonzero(info["_episode"]):
            assert terminations[i] and info["episode"]["r"][i] == returns[i] and info["episode"]["l"][i] >= 1
            returns[i], ended = 0.0, ended + 1
    assert ended >= 4
    envs.close()


def test_the_same_seed_gives_the_same_episodes_and_another_seed_others():
    def frames(seed):
        envs = ProcgenVectorEnv("starpilot", 2, seed=seed)
        rng, seen = np.random.default_rng(0), [envs.reset()[0]]
        for _ in range(300):
            seen.append(envs.step(rng.integers(0, 15, 2))[0])
        return np.stack(seen)

    assert (frames(1) == frames(1)).all() and not (frames(1) == frames(2)).all()


def test_unknown_games_and_modes_are_refused():
    with pytest.raises(ValueError, match="unknown Procgen game 'starpilots'"):
        ProcgenVectorEnv("starpilots", 1, seed=1)
    with pytest.raises(ValueError, match="distribution mode 'memory'"):
        ProcgenVectorEnv("starpilot", 1, seed=1, distribution_mode="memory")
