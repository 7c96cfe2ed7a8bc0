"""Stable-Baselines3's PPO (``MultiInputPolicy``) on MiniGrid-DoorKey-5x5-v0, set up as ``cleanrl/ppo_structured.py``.

The baseline of the speed comparison in benchmark/results/structured/README.md ("ppo_structured.py against SB3's PPO
on MiniGrid"): ppo_structured.py's defaults, as far as SB3 expresses them.

- Envs: 16 in one process (``DummyVecEnv``); each is ``gym.make`` -> ``FilterObservation`` (``mission``,
  a text space, left out) -> SB3's ``Monitor`` (episode returns). SB3 adds its ``VecTransposeImage``
  (the 7x7x3 image to 3x7x7) by itself.
- Network: the features extractor below (ppo_structured.py's ``Encoder`` for these two leaves:
  rl-starter-files' CNN for MiniGrid's symbolic image, read as raw floats, ``normalize_images=False``;
  the direction one-hot, which SB3's preprocessing does for a Discrete key), shared by separate
  actor and critic heads of 64 tanh units.
- PPO: 16 envs x 128 steps, 4 epochs of minibatches of 256, Adam 1e-3 (eps 1e-5) annealed
  linearly to 0, γ 0.99, λ 0.95, clip 0.2, value clip 0.2, entropy 0.01, value 0.5, gradient
  norm 0.5, advantages normalised per minibatch; one torch thread.
- --total-timesteps is rounded down to whole rollouts of 2048 steps, as ppo_structured.py does.

Differences SB3 cannot express: its value clipping uses the clipped loss alone (ours the maximum of
clipped and unclipped, as CleanRL); its orthogonal initialisation also covers the CNN (ours leaves
the CNN at PyTorch's default); its Adam is not fused.

    python benchmark/scripts/sb3_ppo_structured.py --total-timesteps 300000 --seed 1

Prints the mean return of the last 20 episodes, steps per second of ``model.learn`` and the wall
time of the whole process.
"""

import argparse
import time

START = time.perf_counter()

import gymnasium as gym  # noqa: E402
import minigrid  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

gym.register_envs(minigrid)


class MiniGridExtractor(BaseFeaturesExtractor):
    """``image`` (3x7x7 after SB3's transpose) through conv 2x2 16, max-pool 2, conv 2x2 32, conv 2x2 64 (ReLU),
    flattened, concatenated with ``direction`` (one-hot from SB3's preprocessing, flattened as its CombinedExtractor does)."""

    def __init__(self, observation_space: gym.spaces.Dict):
        image = observation_space["image"]
        assert image.shape[0] == 3, f"expected a channels-first image, got {image.shape}"
        cnn = nn.Sequential(
            nn.Conv2d(3, 16, 2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 2), nn.ReLU(),
            nn.Conv2d(32, 64, 2), nn.ReLU(), nn.Flatten(),
        )  # fmt: skip
        with torch.no_grad():
            n_image = cnn(torch.zeros((1, *image.shape))).shape[1]
        super().__init__(observation_space, features_dim=n_image + observation_space["direction"].n)
        self.cnn = cnn

    def forward(self, obs: dict) -> torch.Tensor:
        return torch.cat([obs["direction"].flatten(1), self.cnn(obs["image"])], dim=1)  # [B, 4] acting, [B, 1, 4] training


def make_env(env_id: str):
    def thunk():
        env = gym.make(env_id)
        env = gym.wrappers.FilterObservation(env, [key for key in env.observation_space.spaces if key != "mission"])
        return Monitor(env)

    return thunk


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="MiniGrid-DoorKey-5x5-v0")
    parser.add_argument("--total-timesteps", type=int, default=300000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)

    num_envs, num_steps, lr = 16, 128, 1e-3
    batch = num_envs * num_steps
    total = args.total_timesteps // batch * batch  # whole rollouts, as ppo_structured.py
    env = DummyVecEnv([make_env(args.env_id) for _ in range(num_envs)])
    model = PPO(
        "MultiInputPolicy",
        env,
        # SB3 calls the schedule with the progress left after the rollout (1 - k/n at update k);
        # ppo_structured.py's rate at update k is lr * (1 - (k-1)/n)
        learning_rate=lambda progress: lr * min(1.0, progress + batch / total),
        n_steps=num_steps,
        batch_size=batch // 8,
        n_epochs=4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        clip_range_vf=0.2,
        normalize_advantage=True,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs=dict(
            features_extractor_class=MiniGridExtractor,
            normalize_images=False,
            share_features_extractor=True,
            net_arch=dict(pi=[64], vf=[64]),
            activation_fn=nn.Tanh,
            optimizer_class=torch.optim.Adam,
            optimizer_kwargs=dict(eps=1e-5),
        ),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total)
    learn_time = time.perf_counter() - start
    returns = [info["r"] for info in model.ep_info_buffer][-20:]
    print(f"steps {model.num_timesteps}, episodes' mean return (last 20) {np.mean(returns):.3f}")
    print(f"SPS {model.num_timesteps / learn_time:.0f} (model.learn, {learn_time:.1f} s)")
    print(f"wall time {time.perf_counter() - START:.1f} s (whole process, imports included)")
