"""EnvPool's Atari envs in the scripts that use them (ppo_atari_envpool.py, ppo_rnd_envpool.py, pqn_atari_envpool.py,
pqn_atari_envpool_lstm.py; the Procgen scripts share the first two): the game statistics wrapper their ``make_envs``
applies, the check of a rollout's rewards, and the check of ``--env-id``."""

from __future__ import annotations

import difflib
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import torch

from cleanrl_utils.faults import EnvFault
from cleanrl_utils.flags import fail, require


class GameStatistics(gym.vector.VectorWrapper):
    """EnvPool's envs reporting games as gymnasium's ``RecordEpisodeStatistics`` reports an episode; env 0's games on video.

    With episodic life a lost life ends an episode, not the game. A game's score is the sum of its
    unclipped rewards (``info["reward"]``) over all its lives; the info of the step where the game
    ends (``info["terminated"]``: no lives left; or the time limit) has ``info["episode"]``
    (``"r"``: scores, ``"l"``: frames, ``[num_envs]``) and ``info["_episode"]`` (bool ``[num_envs]``),
    where ``Run.log_episodes`` and ``cleanrl_utils.evals.run_episodes`` read them.

    With ``video_dir``, env 0's games that ``video_episodes(game_index) -> bool`` picks (gymnasium's
    schedule when None, as ``RecordVideo``) are written there as ``rl-video-episode-{i}.mp4``, one
    frame per agent step; a game in progress is written by :meth:`close`.

    Args:
        frame_skip: frames per agent step (lengths are counted in frames; videos play at 60 frames a second).
    """

    def __init__(self, envs: gym.vector.VectorEnv, frame_skip: int, video_dir: Optional[str] = None, video_episodes=None):
        from gymnasium.utils.save_video import capped_cubic_video_schedule

        super().__init__(envs)
        self.frame_skip = frame_skip
        self.game_returns = np.zeros(envs.num_envs)  # unclipped score of each env's current game
        self.video_dir, self.trigger = video_dir, video_episodes or capped_cubic_video_schedule
        self.game, self.frames = 0, []  # env 0's game index, and the frames of it recorded so far

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        """Reset all envs; ``seed`` is not used: EnvPool's envs are seeded when made."""
        obs, info = self.env.reset()
        self._record_frame()
        return obs, info

    def step(self, actions):
        obs, rewards, terminations, truncations, info = self.env.step(actions)
        game_over = info["terminated"].astype(bool) | truncations
        self.game_returns += info["reward"]
        info["episode"] = {"r": self.game_returns.copy(), "l": info["elapsed_step"] * self.frame_skip}
        info["_episode"] = game_over
        self.game_returns[game_over] = 0.0
        self._record_frame()
        if game_over[0]:
            self._write_video()
            self.game += 1
        return obs, rewards, terminations, truncations, info

    def close(self, **kwargs):
        self._write_video()
        return super().close(**kwargs)

    def _record_frame(self) -> None:
        if self.video_dir and self.trigger(self.game):
            self.frames.append(self.env.render()[0])

    def _write_video(self) -> None:
        from gymnasium.utils.save_video import save_video

        if self.frames:
            fps = 60 // self.frame_skip
            save_video(self.frames, self.video_dir, episode_trigger=lambda _: True, episode_index=self.game, fps=fps)
        self.frames = []


def check_rollout(global_step: int, **rollout: Any) -> None:
    """Raise :class:`~cleanrl_utils.faults.EnvFault` naming the env and the global step of the first NaN or infinite
    value of a rollout (a reward beyond float32's range is infinite once stored), in step order, then env order.

    The scripts whose envs are one vector env of their own library (EnvPool, Procgen) call it once per rollout, after
    it, on the arrays they stored: nothing runs per env per step for it. Their frames are uint8, always finite.

    Args:
        global_step: the run's steps at the rollout's end (the last vector step's).
        rollout: by name (``reward=rewards``), numpy arrays or torch tensors ``[num_steps, num_envs, ...]``.

    Raises:
        EnvFault: ``env 1 returned a non-finite reward (nan) at global step 1216 (step 7 of the rollout)``.
    """
    for name, values in rollout.items():
        finite = torch.isfinite(values) if isinstance(values, torch.Tensor) else np.isfinite(values)
        if bool(finite.all()):
            continue
        bad = ~finite.reshape(finite.shape[0], finite.shape[1], -1).all(-1)
        step, env = (int(index) for index in (bad.nonzero()[0] if isinstance(bad, torch.Tensor) else np.argwhere(bad)[0]))
        num_steps, num_envs = bad.shape
        at = global_step - (num_steps - 1 - step) * num_envs
        shown = values[step, env].flatten()[~finite[step, env].flatten()][0].item()
        raise EnvFault(f"env {env} returned a non-finite {name} ({shown}) at global step {at} (step {step} of the rollout)")


def check_envpool_atari(args: Any, envpool: Any) -> None:
    """Stop in one line naming ``--env-id`` unless ``args.env_id`` is an EnvPool Atari id (``envpool``: the module, None
    when not installed); ``BreakoutNoFrameskip-v4`` and ``ALE/Breakout-v5`` get ``did you mean Breakout-v5?``."""
    require(envpool is not None, "--env-id", "EnvPool is not installed: pip install -e '.[envpool]'")
    known = envpool.list_all_envs()

    def atari(env_id: str) -> bool:
        return type(envpool.make_spec(env_id)).__name__ == "AtariEnvSpec"

    if args.env_id not in known:
        game = args.env_id.removeprefix("ALE/").split("NoFrameskip")[0].split("-v")[0]
        close = [f"{game}-v5"] if f"{game}-v5" in known else difflib.get_close_matches(args.env_id, known, n=10)
        close = [env_id for env_id in close if atari(env_id)][:3]  # Atari ids only (not Hopper-v5 for Hoper-v5)
        suggestion = f"; did you mean {', '.join(close)}?" if close else ""
        fail("--env-id", f"unknown EnvPool Atari game {args.env_id!r}{suggestion}")
    ids = f"{args.script}.py takes Atari ids such as Breakout-v5"
    require(atari(args.env_id), "--env-id", f"{args.env_id} is not an Atari game; {ids}")
