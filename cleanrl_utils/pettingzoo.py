"""PettingZoo parallel envs for the multi-agent scripts: many envs stepped in this process, checkpointable.

:class:`ParallelEnvs` steps ``num_envs`` PettingZoo parallel envs (``env.step({agent: action})``,
Terry et al. 2021, arXiv:2009.14471) with the dicts of the parallel API kept as they are: the script
folds them into rows itself (``ppo_pettingzoo.py``'s ``fold_agents``). What it adds:

- same-step autoreset: an env none of whose agents acts any more is reset within the step; every agent
  whose episode ended (terminated or truncated, as the env says) gets its last observation and its episode
  statistics in its info (``info["final_obs"]``, ``info["episode"] = {"r": return, "l": length}``), whether
  the env goes on without it (an agent that died) or is reset;
- every episode starts with a seeded reset (the seeds drawn from a generator per env, seeded by the run's
  seed), so a checkpoint holds, per env, the seed of its episode and the actions since, and
  :meth:`ParallelEnvs.load_state_dict` replays them into fresh envs: the exact state (emulator, frame
  stacks, statistics) of any env that is deterministic given its seed and its actions;
- checks of each reset's and step's structure: an agent that acted but got no reward or flags, an agent that left
  ``env.agents`` without a termination or truncation, an agent not in ``possible_agents``, an observation whose shape
  is not its space's, raise :class:`EnvFault` naming the env, the agent and the vector step; the numbers (a NaN or
  infinite reward or observation) are checked once per rollout by the script, with :func:`check_rollout`;
- videos of env 0's episodes (``render_mode="rgb_array"``), as gymnasium's ``RecordVideo`` makes them.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np
import torch

from cleanrl_utils.faults import EnvFault


class ParallelEnvs:
    """``num_envs`` PettingZoo parallel envs with the same agents and spaces, stepped in turn in this process.

    Args:
        env_fns: one thunk per env, each returning a PettingZoo ``ParallelEnv``.
        video_dir: with a path, env 0's episodes that ``video_episodes(index)`` picks are recorded there
            (env 0 must render ``rgb_array``); gymnasium's cubic schedule when ``video_episodes`` is None.

    Attributes:
        possible_agents: the agents' names, in the order rows are folded.
        obs: per env, ``{agent: observation}`` of the agents that act next (after :meth:`reset` or :meth:`step`).
        steps: vector steps made (continued across a resume).

    Raises:
        ValueError: the envs' agents or spaces differ (one policy acts for all agents of all envs).
    """

    def __init__(self, env_fns: Sequence[Callable[[], Any]], video_dir: str | None = None, video_episodes=None):
        self.envs = []
        try:
            for env_fn in env_fns:
                self.envs.append(env_fn())
        except BaseException:
            self.close()
            raise
        self.num_envs = len(self.envs)
        self.possible_agents = list(self.envs[0].possible_agents)
        self.observation_space = self.envs[0].observation_space(self.possible_agents[0])
        self.action_space = self.envs[0].action_space(self.possible_agents[0])
        for index, env in enumerate(self.envs):
            if list(env.possible_agents) != self.possible_agents:
                raise ValueError(f"env {index} has the agents {env.possible_agents}, env 0 {self.possible_agents}")
            for agent in self.possible_agents:
                if env.observation_space(agent) != self.observation_space or env.action_space(agent) != self.action_space:
                    raise ValueError(
                        f"agent {agent!r} has the spaces {env.observation_space(agent)}, {env.action_space(agent)}; "
                        f"{self.possible_agents[0]!r} {self.observation_space}, {self.action_space}: one policy acts for all"
                    )
        self.steps, self._known = 0, set(self.possible_agents)
        self.obs: list[dict] = [{} for _ in self.envs]
        self._generators: list[np.random.Generator] = []
        self._logs: list[dict] = [{"seed": None, "actions": []} for _ in self.envs]
        self._returns: list[dict] = [{} for _ in self.envs]
        self._lengths: list[dict] = [{} for _ in self.envs]
        self.video_dir, self._video_episodes = video_dir, video_episodes
        self._episode, self._frames = 0, None

    # ---- the parallel API, vectorised

    def reset(self, seed: int) -> tuple[list[dict], list[dict]]:
        """Reset every env; env i's episodes are seeded from a generator seeded by ``(seed, i)``.

        Returns:
            ``(obs, infos)``: per env, ``{agent: observation}`` and ``{agent: info}``.

        Raises:
            EnvFault: an agent not in ``possible_agents``, an observation of another shape than its space's.
        """
        self._generators = [np.random.default_rng([seed, index]) for index in range(self.num_envs)]
        infos = [self._reset(index) for index in range(self.num_envs)]
        return self.obs, infos

    def step(self, actions: Sequence[dict]) -> tuple[list[dict], list[dict], list[dict], list[dict], list[dict]]:
        """Step every env with its agents' actions ``{agent: action}`` (the agents of :attr:`obs`).

        Returns:
            ``(obs, rewards, terminations, truncations, infos)``, per env a dict by agent: ``obs`` holds the
            agents that act next (an env whose agents all ended is reset: its next episode's first
            observations); the other four hold the agents that acted. The info of an agent whose episode
            ended holds ``"final_obs"`` (its last observation) and ``"episode"`` (``{"r": return, "l": length}``).

        Raises:
            EnvFault: as the module docstring says, naming the env, the agent and the vector step.
        """
        self.steps += 1
        results = [self._step(index, actions[index]) for index in range(self.num_envs)]
        return self.obs, *(list(values) for values in zip(*results))

    def _reset(self, index: int, seed: int | None = None) -> dict:
        if seed is None:
            seed = int(self._generators[index].integers(2**31))
        obs, infos = self.envs[index].reset(seed=seed)
        where = f"env {index} at vector step {self.steps} (its reset)"
        self._check(where, obs, self.envs[index].agents)
        self._check_shapes(where, obs, [agent for agent in self.possible_agents if agent in obs])
        self._logs[index] = {"seed": seed, "actions": []}
        self.obs[index] = {agent: obs[agent] for agent in self.possible_agents if agent in obs}
        self._returns[index] = dict.fromkeys(self.obs[index], 0.0)
        self._lengths[index] = dict.fromkeys(self.obs[index], 0)
        if index == 0 and self.video_dir is not None:
            self._start_video()
        return infos

    def _step(self, index: int, actions: dict, replaying: bool = False) -> tuple[dict, dict, dict, dict]:
        env, acting = self.envs[index], list(self.obs[index])
        missing = [agent for agent in acting if agent not in actions]
        if missing:
            raise ValueError(f"env {index}: no action for the agents {missing} that act")
        actions = {agent: actions[agent] for agent in acting}
        self._logs[index]["actions"].append({agent: int(action) for agent, action in actions.items()})
        obs, rewards, terminations, truncations, infos = env.step(actions)
        where = f"env {index} at vector step {self.steps}"
        self._check(where, obs, rewards, terminations, truncations, env.agents)
        for agent in acting:
            if agent not in rewards or agent not in terminations or agent not in truncations:
                raise EnvFault(f"{where}: agent {agent!r} acted but got no reward, termination or truncation")
            self._returns[index][agent] += float(rewards[agent])
            self._lengths[index][agent] += 1
        infos = {agent: dict(infos.get(agent, {})) for agent in acting}
        ended = [agent for agent in acting if terminations[agent] or truncations[agent]]
        still = set(env.agents)
        left = [agent for agent in acting if agent not in ended and agent not in still]
        if left:
            raise EnvFault(f"{where}: agent {left[0]!r} left the env without a termination or truncation")
        for agent in ended:
            if agent not in obs:
                raise EnvFault(f"{where}: agent {agent!r} ended without a last observation")
            infos[agent]["final_obs"] = obs[agent]
            infos[agent]["episode"] = {"r": self._returns[index].pop(agent), "l": self._lengths[index].pop(agent)}
        # the agents that act next: those still in the env that did not just end (an agent may also join)
        nexts = [agent for agent in self.possible_agents if agent in still and agent not in ended]
        absent = [agent for agent in nexts if agent not in obs]
        if absent:
            raise EnvFault(f"{where}: agent {absent[0]!r} is in env.agents but got no observation")
        self._check_shapes(where, obs, ended + nexts)
        for agent in nexts:
            self._returns[index].setdefault(agent, 0.0)
            self._lengths[index].setdefault(agent, 0)
        if index == 0 and self._frames is not None and not replaying:
            self._frames.append(env.render())
        if nexts:
            self.obs[index] = {agent: obs[agent] for agent in nexts}
        else:  # every agent ended: the env's next episode starts now (same-step autoreset)
            if index == 0 and self._frames is not None and not replaying:
                self._save_video()
            if not replaying:
                self._reset(index)
        return rewards, terminations, truncations, infos

    def _check(self, where: str, *dicts: Any) -> None:
        """Raise :class:`EnvFault` at the first agent of ``dicts`` (dicts and lists by agent) not in ``possible_agents``."""
        for agents in dicts:
            for agent in agents:
                if agent not in self._known:
                    known = f"the env's possible_agents {self.possible_agents}"
                    raise EnvFault(f"{where}: agent {agent!r} appeared but is not one of {known}")

    def _check_shapes(self, where: str, obs: dict, agents: list[str]) -> None:
        """Raise :class:`EnvFault` at the first of ``agents`` whose observation's shape is not its space's."""
        shape = self.observation_space.shape
        for agent in agents if shape is not None else ():
            if np.shape(obs[agent]) != shape:
                got = f"an observation of shape {np.shape(obs[agent])}"
                raise EnvFault(f"{where}: agent {agent!r} got {got}; its observation space is {self.observation_space}")

    # ---- videos of env 0

    def _start_video(self) -> None:
        from gymnasium.utils.save_video import capped_cubic_video_schedule

        trigger = self._video_episodes or capped_cubic_video_schedule
        self._frames = [self.envs[0].render()] if trigger(self._episode) else None
        self._episode += 1

    def _save_video(self) -> None:
        from moviepy.video.io.ImageSequenceClip import ImageSequenceClip

        os.makedirs(self.video_dir, exist_ok=True)
        fps = self.envs[0].metadata.get("render_fps", 30)
        clip = ImageSequenceClip([np.asarray(frame) for frame in self._frames], fps=fps)
        clip.write_videofile(os.path.join(self.video_dir, f"rl-video-episode-{self._episode - 1}.mp4"), logger=None)
        self._frames = None

    # ---- checkpoints

    def state_dict(self) -> dict:
        """Per env: the seed of its episode, the actions since, and its seed generator; the vector steps (plain data)."""
        return {
            "logs": [{"seed": log["seed"], "actions": [dict(a) for a in log["actions"]]} for log in self._logs],
            "generators": [generator.bit_generator.state for generator in self._generators],
            "steps": self.steps,
            "video_episode": self._episode,
        }

    def load_state_dict(self, state: dict) -> None:
        """Replay each env's episode from its seed and actions (fresh envs): :attr:`obs` is then what the run acts on.

        Raises:
            ValueError: the checkpoint holds another number of envs.
        """
        logs = state["logs"]
        if len(logs) != self.num_envs or len(state["generators"]) != self.num_envs:
            raise ValueError(f"the checkpoint has {len(logs)} envs, this run {self.num_envs}")
        for index, log in enumerate(logs):
            self._reset(index, seed=int(log["seed"]))
            self._frames = None
            for actions in log["actions"]:
                self._step(index, actions, replaying=True)
        self._generators = []
        for saved in state["generators"]:
            generator = np.random.default_rng()
            generator.bit_generator.state = saved
            self._generators.append(generator)
        self.steps, self._episode = int(state["steps"]), int(state["video_episode"])
        self._frames = None  # env 0's episode under way is not recorded

    def close(self) -> None:
        """Close every env; a video under way is saved (as gymnasium's ``RecordVideo`` does)."""
        if getattr(self, "_frames", None):  # (None while the envs are being made)
            self._save_video()
        for env in self.envs:
            env.close()


def log_agent_episodes(run: Any, global_step: int, infos: list[dict]) -> None:
    """Write the episodes that ended in a vector step to TensorBoard, per agent, and report progress.

    Tags: ``charts/episodic_return`` and ``charts/episodic_length`` (every agent's episodes), and
    ``charts/episodic_return/<agent>``, ``charts/episodic_length/<agent>`` (one curve per agent).
    """
    for env_infos in infos:
        for agent, info in env_infos.items():
            if "episode" in info:
                episodic_return, length = info["episode"]["r"], info["episode"]["l"]
                run.log_episode(global_step, episodic_return, length)
                run.writer.add_scalar(f"charts/episodic_return/{agent}", episodic_return, global_step)
                run.writer.add_scalar(f"charts/episodic_length/{agent}", length, global_step)
    run.progress(global_step)


def check_rollout(global_step: int, agents: list[str], **rollout: Any) -> None:
    """Raise :class:`EnvFault` naming the env, the agent and the global step of the first NaN or infinite value of a
    rollout's rows (a reward beyond float32's range is infinite once stored), in step order, then row order.

    ``ppo_pettingzoo.py`` calls it once per rollout, after it, on what it stored: nothing runs per agent per step.

    Args:
        global_step: the run's agent steps at the rollout's end (each vector step adds a row per agent of each env).
        agents: the envs' agents; row ``env * len(agents) + a`` is agent ``agents[a]`` of env ``env``.
        rollout: by name (``reward=rewards``), numpy arrays or torch tensors ``[num_steps, rows, ...]``; integer
            arrays (uint8 frames) are skipped.

    Raises:
        EnvFault: ``env 1, agent 'racer_0' got a non-finite reward (nan) at global step 1216 (step 7 of the rollout)``.
    """
    for name, values in rollout.items():
        if isinstance(values, torch.Tensor):
            if not values.is_floating_point() or bool(torch.isfinite(values).all()):
                continue
            finite = torch.isfinite(values).cpu().numpy()
            values = values.cpu().numpy()
        else:
            if np.asarray(values).dtype.kind != "f" or np.isfinite(values).all():
                continue
            finite = np.isfinite(values)
        bad = ~finite.reshape(finite.shape[0], finite.shape[1], -1).all(-1)
        step, row = (int(index) for index in np.argwhere(bad)[0])
        at = global_step - (bad.shape[0] - 1 - step) * bad.shape[1]
        shown = values[step, row].flatten()[~finite[step, row].flatten()][0].item()
        env, agent = divmod(row, len(agents))
        where = f"at global step {at} (step {step} of the rollout)"
        raise EnvFault(f"env {env}, agent {agents[agent]!r} got a non-finite {name} ({shown}) {where}")
