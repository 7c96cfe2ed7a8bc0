"""Structured spaces for the scripts: the leaves of Dict / Tuple observations, action masks, MultiDiscrete actions.

``ppo_structured.py`` and ``dqn_structured.py`` encode a Dict or Tuple observation key by key
(their networks are in the scripts); this module holds what is not a network: the leaves an
encoder reads (:func:`observation_leaves`, :func:`leaf`, :func:`image_layout`, :class:`OneHot`),
the action dimensions (:func:`action_dims`), action masks (:class:`ActionMaskFromInfo` moves
``info["action_mask"]`` into the observation; :func:`check_action_masks`), and the scripts'
one-line refusals for structured spaces (:func:`check_structured_env`).

Masks follow the convention of Huang & Ontañón (2022), "A Closer Look at Invalid Action
Masking in Policy Gradient Algorithms", FLAIRS-35, arXiv:2006.14171, also used by sb3-contrib's
``MaskablePPO``: a boolean vector of ``sum(action_dims)`` entries, true where the action is
allowed; for MultiDiscrete actions the per-dimension masks are concatenated in order.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from cleanrl_utils.faults import EnvFault
from cleanrl_utils.flags import fail

ACTION_MASK = "action_mask"
"""The Dict observation key (top level) that holds the action mask; encoders do not read it."""


class ActionMaskFault(EnvFault):
    """An env whose info holds no action mask, or one of the wrong size, under ``--action-mask info``."""


LEAF_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
"""Leaf spaces an encoder reads: Box (images, vectors), Discrete and MultiDiscrete (one-hot), MultiBinary."""


def observation_leaves(space: gym.Space) -> list[tuple[tuple[str, ...], gym.Space]]:
    """The leaves of an observation space, as ``(path, space)`` in a fixed order.

    A path is the field names from the top to the leaf, as the namedarraytuples of
    :func:`cleanrl_utils.namedarraytuple.example_from_space` name them: Dict keys in the
    space's order (gymnasium sorts them), ``"f0", "f1", ...`` for Tuple entries. A space that is
    itself a leaf has the path ``()``.

    Args:
        space: the single-env observation space: a leaf space, or a Dict / Tuple of them (nested);
            its top-level ``action_mask`` key is not listed (an encoder leaves it out).

    Returns:
        ``[(path, leaf space), ...]``; empty when the only key is ``action_mask``.

    Raises:
        ValueError: a leaf no encoder reads (Text, Graph, Sequence, OneOf, ...), or an empty
            Box; the message names the leaf's path and space.
    """
    leaves: list[tuple[tuple[str, ...], gym.Space]] = []

    def walk(sub: gym.Space, path: tuple[str, ...]) -> None:
        if isinstance(sub, gym.spaces.Dict):
            for key, child in sub.spaces.items():
                if path or key != ACTION_MASK:
                    walk(child, path + (str(key),))
        elif isinstance(sub, gym.spaces.Tuple):
            for index, child in enumerate(sub.spaces):
                walk(child, path + (f"f{index}",))
        elif isinstance(sub, LEAF_SPACES):
            if isinstance(sub, gym.spaces.Box) and int(np.prod(sub.shape)) == 0:
                raise ValueError(f"observation {'/'.join(path) or 'space'} is an empty Box {sub}")
            leaves.append((path, sub))
        else:
            where = "/".join(path) or "the observation space"
            mission = type(sub).__name__ == "MissionSpace"
            varies = " (a MiniGrid mission whose sentence varies between episodes)" if mission else ""
            raise ValueError(
                f"{where} is a {type(sub).__name__} space{varies}, which no encoder reads: "
                "Box, Discrete, MultiDiscrete and MultiBinary leaves (in Dict or Tuple spaces) only"
            )

    walk(space, ())
    return leaves


def fixed_mission(space: gym.Space) -> str | None:
    """The sentence of a MiniGrid ``mission`` key (a ``MissionSpace``, text) that is always the same, None otherwise.

    Without placeholders the sentence is fixed (DoorKey's "use the key to open the door and then get to the goal"):
    it carries no information and a script may leave it out. With placeholders (Fetch: "go get a blue key", ...) it
    varies and holds the goal; no encoder here reads text, so such tasks are refused.
    """
    mission = space.spaces.get("mission") if isinstance(space, gym.spaces.Dict) else None
    if type(mission).__name__ != "MissionSpace" or getattr(mission, "ordered_placeholders", 0) is not None:
        return None
    return str(mission.mission_func())


def leaf(obs: Any, path: tuple[str, ...]) -> Any:
    """The leaf at ``path`` of ``obs`` (a namedarraytuple of arrays or tensors, nested; or the array itself for ``()``)."""
    for name in path:
        obs = obs.get(name)
    return obs


def image_layout(space: gym.Space) -> tuple[int, int, int, bool] | None:
    """``(channels, height, width, channels_last)`` of a 3-D Box leaf (an image), None for any other leaf.

    Channels are last when the last axis is the shortest (MiniGrid's ``(7, 7, 3)``, RGB
    ``(64, 64, 3)``), first otherwise (``(4, 84, 84)``); an encoder permutes channels-last
    batches ``[B, H, W, C]`` to ``[B, C, H, W]``.
    """
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
        return None
    if space.shape[2] < space.shape[0]:
        return space.shape[2], space.shape[0], space.shape[1], True
    return space.shape[0], space.shape[1], space.shape[2], False


class OneHot(nn.Module):
    """Discrete ``[B]`` or MultiDiscrete ``[B, *shape]`` integer leaves -> concatenated one-hots ``[B, sum(nvec)]`` (float32).

    Value v of dimension j (from ``start_j``) sets entry ``offset_j + v - start_j``.

    Args:
        space: a Discrete or MultiDiscrete space.
    """

    def __init__(self, space: gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        super().__init__()
        nvec = np.asarray(space.nvec if isinstance(space, gym.spaces.MultiDiscrete) else [space.n]).reshape(-1)
        starts = np.asarray(space.start).reshape(-1) * np.ones_like(nvec)
        offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]]) - starts
        self.register_buffer("offsets", torch.as_tensor(offsets, dtype=torch.long), persistent=False)
        self.size = int(nvec.sum())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = x.reshape(x.shape[0], -1).long() + self.offsets
        return torch.zeros(x.shape[0], self.size, device=x.device).scatter_(1, index, 1.0)


def action_dims(action_space: gym.Space) -> list[int]:
    """The sizes of the categorical dimensions of an action space: ``[n]`` for Discrete(n), ``nvec`` (flattened) for
    MultiDiscrete; an action mask has ``sum`` of them entries.

    Raises:
        ValueError: another space, or a MultiDiscrete with a nonzero ``start`` (actions are 0-based here).
    """
    if isinstance(action_space, gym.spaces.Discrete):
        if int(action_space.start) != 0:
            raise ValueError(f"action space {action_space} starts at {action_space.start}; supported: actions from 0")
        return [int(action_space.n)]
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        if np.any(action_space.start != 0):
            raise ValueError(f"action space {action_space} has a nonzero start; supported: actions from 0")
        return [int(n) for n in action_space.nvec.reshape(-1)]
    raise ValueError(f"action space {action_space}: supported are Discrete and MultiDiscrete")


def mask_space(observation_space: gym.Space) -> gym.Space | None:
    """The space of the top-level ``action_mask`` key of a Dict observation space, None without one."""
    if isinstance(observation_space, gym.spaces.Dict):
        return observation_space.spaces.get(ACTION_MASK)
    return None


def uses_masks(action_mask: str, observation_space: gym.Space) -> bool:
    """Whether a run masks its actions: ``--action-mask`` is not ``"off"`` and the observation has an ``action_mask``
    key (``--action-mask info`` put it there, see :class:`ActionMaskFromInfo`)."""
    return action_mask != "off" and mask_space(observation_space) is not None


def check_mask_space(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Check that an ``action_mask`` key, if there is one, fits the action space.

    Raises:
        ValueError: the mask is not a Box or MultiBinary of shape ``[sum(action_dims)]``.
    """
    space, size = mask_space(observation_space), sum(action_dims(action_space))
    if space is None:
        return
    if not isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)) or tuple(space.shape) != (size,):
        raise ValueError(
            f"observation key {ACTION_MASK!r} is {space}; for actions {action_space} it must be a MultiBinary "
            f"or Box of shape ({size},), true where an action is allowed"
        )


class ActionMaskFromInfo(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Move the env's ``info["action_mask"]`` into the observation, under the key ``action_mask``.

    A Dict observation gets the key added; any other observation ``o`` becomes
    ``{"observation": o, "action_mask": mask}``. The mask of each ``reset`` and ``step`` is the
    one of the observation returned with it, so a mask then travels with its observation
    (rollout storage, replay, the final observation of an episode, checkpoints).

    Args:
        env: an environment whose ``reset`` and ``step`` infos hold ``"action_mask"``: a boolean
            (or 0/1) array of ``sum(action_dims)`` entries, true where the action is allowed.

    Raises:
        ValueError: the env's observation space already has an ``action_mask`` key.
        ActionMaskFault: (at ``reset``/``step``) an info without ``"action_mask"``, or one of the wrong size.
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.size = sum(action_dims(env.action_space))
        mask = gym.spaces.MultiBinary(self.size)
        space = env.observation_space
        if isinstance(space, gym.spaces.Dict):
            if ACTION_MASK in space.spaces:
                raise ValueError(f"the observation already has an {ACTION_MASK!r} key; it needs no mask from the info")
            self.observation_space = gym.spaces.Dict({**space.spaces, ACTION_MASK: mask})
        else:
            self.observation_space = gym.spaces.Dict({"observation": space, ACTION_MASK: mask})

    def _with_mask(self, observation: Any, info: dict, call: str) -> Any:
        if ACTION_MASK not in info:
            raise ActionMaskFault(f"the env's {call} gave no info[{ACTION_MASK!r}] (--action-mask info)")
        mask = np.asarray(info[ACTION_MASK]).astype(np.int8).reshape(-1)
        if mask.shape != (self.size,):
            raise ActionMaskFault(
                f"the env's {call} gave info[{ACTION_MASK!r}] of shape {np.shape(info[ACTION_MASK])}, not ({self.size},)"
            )
        if isinstance(observation, dict):
            return {**observation, ACTION_MASK: mask}
        return {"observation": observation, ACTION_MASK: mask}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observation, info = self.env.reset(seed=seed, options=options)
        return self._with_mask(observation, info, "reset"), info

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._with_mask(observation, info, "step"), reward, terminated, truncated, info


def check_action_masks(masks: np.ndarray, dims: list[int], step: int) -> None:
    """Raise a fault naming the first env whose mask allows no action in some dimension.

    Args:
        masks: bool ``[num_envs, sum(dims)]``, the masks of the observations the envs act on next.
        dims: :func:`action_dims` of the action space.
        step: the vector step the observations came from, for the message.

    Raises:
        cleanrl_utils.faults.EnvFault: ``"env 3 gave an all-false action mask at vector step 120 (action dimension 0)"``.
    """
    if len(dims) == 1:
        empty = ~masks.any(axis=1, keepdims=True)
    else:
        bounds = np.cumsum([0] + dims)
        empty = np.stack([~masks[:, a:b].any(axis=1) for a, b in zip(bounds[:-1], bounds[1:])], axis=1)
    if empty.any():
        env, dim = (int(i) for i in np.argwhere(empty)[0])
        raise EnvFault(f"env {env} gave an all-false action mask at vector step {step} (action dimension {dim})")


def check_structured_env(args: Any, make_env: Callable, seed: int | None = None) -> tuple[gym.Space, gym.Space]:
    """Build one env with the script's ``make_env`` as the run will, check what its encoders and masks need, and say
    where the masks come from.

    Resets the env once (seeded with ``seed``) to see whether its info holds a mask.

    Args:
        args: the run's ``Args`` (``env_id``, ``action_mask``, ``capture_video``).
        make_env: the script's ``make_env(env_id, idx, capture_video, video_dir, training=False, action_mask=...)``.
        seed: the seed of that reset.

    Returns:
        ``(observation_space, action_space)`` of one env, after the script's wrappers.

    Raises:
        SystemExit: (status 2, one line naming ``--env-id``, ``--action-mask`` or ``--capture-video``)
            a leaf no encoder reads, an action space other than Discrete / MultiDiscrete, a mask
            that does not fit; ``--action-mask info`` on an env with no mask in its info or one in
            its observation; ``--action-mask auto`` on an env whose mask is in its info only; a first
            reset that does not fit the env's declared spaces (the script's ``CheckedEnv``); a video asked of
            an env that cannot render ``rgb_array`` frames.
    """
    try:
        env = make_env(args.env_id, 0, False, "", training=False, action_mask=args.action_mask)()
    except ValueError as error:  # ActionMaskFromInfo on an observation that already has a mask
        fail("--action-mask", f"{args.env_id}: {error}")
    try:
        observation_leaves(env.observation_space)
        action_dims(env.action_space)
        check_mask_space(env.observation_space, env.action_space)
        _, info = env.reset(seed=seed)
    except ValueError as error:
        fail("--env-id", f"{args.env_id}: {error}")
    except ActionMaskFault as error:  # --action-mask info: the info holds no mask
        fail("--action-mask", f"{args.env_id}: {error}")
    except EnvFault as error:  # the script's CheckedEnv: a first reset that does not fit the env's declared spaces
        fail("--env-id", f"{args.env_id}: {error}")
    finally:
        env.close()
    in_observation = mask_space(env.observation_space) is not None
    if args.action_mask == "auto" and not in_observation and ACTION_MASK in info:
        fail("--action-mask", f"{args.env_id} gives its mask in info[{ACTION_MASK!r}]: use --action-mask info (or off)")
    if args.capture_video and "rgb_array" not in (env.metadata.get("render_modes") or []):
        fail("--capture-video", f"{args.env_id} cannot render rgb_array frames for a video")
    sentence = fixed_mission(env.unwrapped.observation_space)
    if sentence is not None and "mission" not in env.observation_space.spaces:
        print(f"observation: the mission is always {sentence!r}: left out")
    if args.action_mask == "off":
        print("action masks: off (the agent acts and learns without them)")
    elif in_observation:
        source = "info['action_mask']" if args.action_mask == "info" else f"the observation key {ACTION_MASK!r}"
        print(f"action masks: from {source}")
    else:
        print(f"action masks: none (no {ACTION_MASK!r} key in the observation, none in the info)")
    return env.observation_space, env.action_space
