"""Observation and reward normalisation of a vector env, in the main process (PPO's continuous-action details).

Huang et al. (2022), "The 37 Implementation Details of Proximal Policy Optimization" (ICLR blog
track), continuous-action details 6-9: observations normalised by a running mean and variance and
clipped, rewards divided by the running standard deviation of a discounted return and clipped.
Used by ppo_continuous.py, rpo_continuous.py and ppo_continuous_lstm.py, which show where it sits
(on the vector env, below the agent) and save its statistics with the model. It is a wrapper, as
gymnasium's own are: gymnasium's vector ``NormalizeObservation`` refuses the same-step autoreset
the scripts use and would leave ``infos["final_obs"]`` raw.
"""

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector.utils import batch_space
from gymnasium.wrappers.utils import RunningMeanStd


class NormalizeObservation(gym.vector.VectorWrapper):
    """Normalise a vector env's observations by a running mean and variance, then clip them.

    o ↦ clip((o - mean) / sqrt(var + epsilon), -clip, clip), float32, with mean and var the
    running moments (``gymnasium.wrappers.utils.RunningMeanStd``, the parallel update of Chan
    et al. 1979) of every observation seen: at reset, at each step, and the final
    observations of the episodes that end (which the per-env wrappers of CleanRL also see).

    gymnasium's own ``gymnasium.wrappers.vector.NormalizeObservation`` refuses the same-step
    autoreset the scripts use (gymnasium 1.4 raises ``ValueError``), and would leave
    ``infos["final_obs"]`` raw. This one normalises ``infos["final_obs"]`` too, with the same
    statistics as the step's observations, so a truncated episode bootstraps from the value of
    its final observation as the agent sees it.

    Args:
        env: a vector env with flat Box observations and same-step autoreset.
        epsilon: added to the variance under the square root.
        clip: bound of the normalised observations.

    Attributes:
        obs_rms: the running statistics (``mean``, ``var`` float64 ``[obs_dim]``, ``count``).
        update_running_mean: False freezes the statistics (evaluation).
    """

    def __init__(self, env: gym.vector.VectorEnv, epsilon: float = 1e-8, clip: float = 10.0):
        super().__init__(env)
        shape = env.single_observation_space.shape
        self.single_observation_space = gym.spaces.Box(-clip, clip, shape=shape, dtype=np.float32)
        self.observation_space = batch_space(self.single_observation_space, env.num_envs)
        self.obs_rms = RunningMeanStd(shape=shape)
        self.epsilon = epsilon
        self.clip = clip
        self.update_running_mean = True

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """Raw observations ``[B, obs_dim]`` -> normalised and clipped, float32 (statistics unchanged)."""
        scaled = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        if self.update_running_mean:
            self.obs_rms.update(obs)
        return self.normalize(obs), infos

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        ended = np.flatnonzero(infos["_final_obs"]) if "_final_obs" in infos else np.zeros(0, dtype=np.int64)
        if len(ended):
            finals = np.stack([np.asarray(infos["final_obs"][i]) for i in ended])
        if self.update_running_mean:
            if len(ended):
                self.obs_rms.update(finals)
            self.obs_rms.update(obs)
        if len(ended):
            final_obs = infos["final_obs"].copy()
            for i, final in zip(ended, self.normalize(finals)):
                final_obs[i] = final
            infos["final_obs"] = final_obs
        return self.normalize(obs), rewards, terminations, truncations, infos

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The statistics as tensors, keys ``obs_rms.{mean,var,count,epsilon,clip}`` (float64)."""
        return {
            "obs_rms.mean": torch.tensor(self.obs_rms.mean, dtype=torch.float64),
            "obs_rms.var": torch.tensor(self.obs_rms.var, dtype=torch.float64),
            "obs_rms.count": torch.tensor(float(self.obs_rms.count), dtype=torch.float64),
            "obs_rms.epsilon": torch.tensor(float(self.epsilon), dtype=torch.float64),
            "obs_rms.clip": torch.tensor(float(self.clip), dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Set the statistics from :meth:`state_dict`'s entries (other keys are ignored).

        Raises:
            ValueError: (one line naming the entry) an entry is missing, not a float64 tensor of this env's
                shape, not finite, a negative variance, or a count, epsilon or clip that is not positive.
        """
        shape = self.obs_rms.mean.shape
        mean = statistic(state, "obs_rms.mean", shape)
        var = statistic(state, "obs_rms.var", shape, low=0.0)
        keys = ("obs_rms.count", "obs_rms.epsilon", "obs_rms.clip")
        count, epsilon, clip = (statistic(state, key, (), low=0.0, positive=True) for key in keys)
        self.obs_rms.mean, self.obs_rms.var, self.obs_rms.count = mean, var, float(count)
        self.epsilon, self.clip = float(epsilon), float(clip)


class RewardNormalization:
    """Rewards scaled as Huang et al. (2022), continuous-action details 8-9, and ppo_procgen.py / ppg_procgen.py do:
    divided by the running standard deviation of the discounted return G ← γ G (1 - terminated) + r
    (``gymnasium.wrappers.vector.NormalizeReward``), then clipped to ±``reward_clip``.

    Its :meth:`state_dict` / :meth:`load_state_dict` hold the running statistics, as a checkpoint does.

    Attributes:
        reward: the ``NormalizeReward`` layer.
        envs: the vector env with normalised rewards.
    """

    def __init__(self, envs: gym.vector.VectorEnv, gamma: float, reward_clip: float):
        self.reward = gym.wrappers.vector.NormalizeReward(envs, gamma=gamma)
        self.envs = gym.wrappers.vector.TransformReward(self.reward, lambda reward: np.clip(reward, -reward_clip, reward_clip))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """``return_rms.{mean,var,count}`` (float64) and the per-env discounted return ``accumulated_reward``
        ``[num_envs]``: all a checkpoint needs to continue the normalisation exactly under same-step autoreset (the
        scripts' envs), where ``NormalizeReward``'s record of the last dones changes nothing that follows."""
        rms = self.reward.return_rms
        return {
            "return_rms.mean": torch.tensor(rms.mean, dtype=torch.float64),
            "return_rms.var": torch.tensor(rms.var, dtype=torch.float64),
            "return_rms.count": torch.tensor(float(rms.count), dtype=torch.float64),
            "accumulated_reward": torch.from_numpy(self.reward.accumulated_reward.copy()),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Set the statistics from :meth:`state_dict`'s ``state``.

        Raises:
            ValueError: (one line naming the entry) a statistic missing, of another dtype or shape, or not finite;
                ``return_rms.var`` < 0, ``return_rms.count`` <= 0, ``accumulated_reward`` not of shape ``[num_envs]``.
        """
        self._set(*self._checked(state))

    def _checked(self, state: dict[str, torch.Tensor]) -> tuple:
        num_envs = self.reward.accumulated_reward.shape
        mean = statistic(state, "return_rms.mean", ())
        var = statistic(state, "return_rms.var", (), low=0.0)
        count = statistic(state, "return_rms.count", (), low=0.0, positive=True)
        accumulated = statistic(state, "accumulated_reward", num_envs, dtype=torch.float32)
        return mean, var, count, accumulated

    def _set(self, mean, var, count, accumulated) -> None:
        self.reward.return_rms.mean, self.reward.return_rms.var, self.reward.return_rms.count = mean, var, float(count)
        self.reward.accumulated_reward[:] = accumulated


class Normalization:
    """The training normalisation of a vector env (Huang et al. 2022, continuous-action details 6-9).

    Observations: :class:`NormalizeObservation`, clipped to ±``obs_clip``. Rewards:
    :class:`RewardNormalization` on top. Episode statistics stay those of the raw rewards,
    recorded inside each env.

    Its :meth:`state_dict` / :meth:`load_state_dict` hold the running statistics of both layers,
    as a checkpoint does; the env below them (``raw``) is checkpointed on its own, so that its
    replay leaves the statistics alone.

    Attributes:
        raw: the vector env below the normalisation.
        obs: the :class:`NormalizeObservation` layer (its ``normalize`` turns raw observations
            into what the agent sees).
        reward: the ``NormalizeReward`` layer.
        envs: the normalised vector env the run steps.
    """

    def __init__(self, envs: gym.vector.VectorEnv, gamma: float, obs_clip: float, reward_clip: float):
        self.raw = envs
        self.obs = NormalizeObservation(envs, clip=obs_clip)
        self.rewards = RewardNormalization(self.obs, gamma, reward_clip)
        self.reward, self.envs = self.rewards.reward, self.rewards.envs

    def state_dict(self) -> dict[str, torch.Tensor]:
        """:meth:`NormalizeObservation.state_dict`'s ``obs_rms.*`` and :meth:`RewardNormalization.state_dict`'s entries."""
        return {**self.obs.state_dict(), **self.rewards.state_dict()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Set both layers' statistics from :meth:`state_dict`'s ``state``.

        Raises:
            ValueError: (one line naming the entry) as :meth:`NormalizeObservation.load_state_dict` and
                :meth:`RewardNormalization.load_state_dict`; nothing is set unless every entry passes.
        """
        rewards = self.rewards._checked(state)  # the return statistics checked before anything is set
        self.obs.load_state_dict(state)
        self.rewards._set(*rewards)


def statistic(
    state: dict, key: str, shape: tuple, dtype: torch.dtype = torch.float64, low: float | None = None, positive: bool = False
) -> np.ndarray:
    """``state[key]`` as a numpy array, checked: a finite tensor of ``dtype`` and ``shape``, at least ``low``
    (greater than 0 with ``positive``).

    Raises:
        ValueError: one line naming ``key`` and what is wrong (a saved file's statistics damaged or forged).
    """
    value = state.get(key) if isinstance(state, dict) else None
    if not isinstance(value, torch.Tensor) or value.dtype != dtype or tuple(value.shape) != tuple(shape):
        found = f"{value.dtype} {list(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
        found = "missing" if value is None else found
        raise ValueError(f"the normalisation's {key!r} is {found}, not a {dtype} tensor of shape {list(shape)}")
    if not torch.isfinite(value).all():
        raise ValueError(f"the normalisation's {key!r} is not finite")
    if low is not None and (value < low).any() or positive and (value <= 0).any():
        raise ValueError(f"the normalisation's {key!r} must be {'> 0' if positive else f'>= {low}'}")
    return value.numpy().copy()
