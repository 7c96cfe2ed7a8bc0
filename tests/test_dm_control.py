"""dm_control ids (``dm_control/<domain>-<task>-v0``, through Shimmy: the dm_control extra) in the continuous scripts.

One function registers them (cleanrl_utils.dmc.register), where each process needs them: the
argument checks (check_env, in the main process), the async env workers (fresh interpreters from the forkserver:
each script's make_env registers the id before it makes the env) and the evaluation of a saved model (a fresh
process, the evaluation tool). Each script's make_env flattens their Dict observations (FlattenObservation), and
check_env checks the Box they become,
still refusing a Dict that holds an image. Their tasks draw from a legacy numpy RandomState, which a
checkpoint's env replay log saves and restores.

Smoke runs on dm_control/cartpole-balance-v0 (episodes of 1000 steps): rpo_continuous.py with async envs
(the PPO family) and sac_continuous.py (the replay family), each saving a model that is then evaluated.
"""

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from cleanrl import ddpg_continuous, ppo_continuous, ppo_continuous_lstm, rpo_continuous, sac_continuous, td3_continuous
from cleanrl_utils import checkpoint, resume
from cleanrl_utils.env_checks import check_env
from cleanrl_utils.resume import make_generator
from cleanrl_utils.wrappers import SAME_STEP, generator_state
from tests.conftest import ROOT, assert_stops_with_one_line, enjoy, run_dir, run_script, scalars

pytest.importorskip("shimmy")
pytest.importorskip("dm_control")

CARTPOLE = "dm_control/cartpole-balance-v0"  # observations {"position": (3,), "velocity": (2,)}, actions Box(-1, 1, (1,))
MODULES = [ppo_continuous, rpo_continuous, ppo_continuous_lstm, ddpg_continuous, td3_continuous, sac_continuous]


def test_ids_are_registered_where_asked_for_and_only_then():
    """In a fresh interpreter: a dm_control id is unknown until registered, another id imports nothing of Shimmy,
    and rendering is set up headless before dm_control picks its OpenGL backend."""
    code = f"""
import os, sys
import gymnasium as gym
from cleanrl_utils.dmc import register as register_dm_control
os.environ.pop("DISPLAY", None); os.environ.pop("WAYLAND_DISPLAY", None); os.environ.pop("MUJOCO_GL", None)
assert {CARTPOLE!r} not in gym.registry
register_dm_control("Pendulum-v1")
assert "shimmy" not in sys.modules and "dm_control" not in sys.modules and "MUJOCO_GL" not in os.environ
register_dm_control({CARTPOLE!r})
assert {CARTPOLE!r} in gym.registry and os.environ["MUJOCO_GL"] == "egl"
import dm_control._render
print(dm_control._render.BACKEND)
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "egl"


def test_an_unknown_dm_control_id_without_the_extra_names_the_extra(tmp_path):
    """Shimmy not installed (its import blocked): the id is refused in one line that says which extra to install."""
    code = (
        "import runpy, sys; sys.modules['shimmy'] = None; "
        f"sys.argv = ['rpo_continuous.py', '--env-id', {CARTPOLE!r}]; "
        f"runpy.run_path({str(ROOT / 'cleanrl' / 'rpo_continuous.py')!r}, run_name='__main__')"
    )
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=environ, timeout=120
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: --env-id: unknown environment '{CARTPOLE}'")
    assert "dm_control ids need the dm_control extra: pip install -e '.[dm_control]'" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_a_mistyped_dm_control_id_gets_suggestions(tmp_path):
    assert_stops_with_one_line(
        "sac_continuous.py",
        ["--env-id", "dm_control/cartpole-balanse-v0"],
        "--env-id",
        f"did you mean {CARTPOLE}",
        tmp_path,
    )


class DictImageEnv(gym.Env):
    """A Dict observation holding an image beside a vector, and Box actions: not flattened by the scripts."""

    observation_space = gym.spaces.Dict(
        {"position": gym.spaces.Box(-1, 1, (2,)), "camera": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)}
    )
    action_space = gym.spaces.Box(-1, 1, (1,))


class ImageEnv(DictImageEnv):
    """The image alone, as a Box."""

    observation_space = DictImageEnv.observation_space["camera"]


gym.register("tests-DictImage-v0", entry_point=DictImageEnv)
gym.register("tests-Image-v0", entry_point=ImageEnv)


def check(env_id, capsys):
    """check_env as the continuous scripts call it: (observation space, action space), or (None, its one stderr line)."""
    args = SimpleNamespace(env_id=env_id, script="a_script", env_timeout=60.0)
    try:
        return check_env(args, gym.spaces.Box, gym.spaces.Box, obs_ndim=1, flatten=True)
    except SystemExit as exit:
        assert exit.code == 2
        return None, capsys.readouterr().err.strip()


def test_check_env_checks_the_flattened_box_and_still_refuses_images(capsys):
    observation_space, action_space = check(CARTPOLE, capsys)
    assert observation_space == gym.spaces.Box(-np.inf, np.inf, (5,), np.float64)  # 3 positions, 2 velocities
    assert action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float64)
    # a dm_control task with an observation of shape (): still one entry of the vector
    walker, _ = check("dm_control/walker-walk-v0", capsys)
    assert walker.shape == (24,)  # orientations 14, height (), velocity 9
    _, line = check("tests-DictImage-v0", capsys)
    assert line.startswith("error: --env-id: tests-DictImage-v0 has the entry 'camera' Box(0, 255, (8, 8, 3)")
    assert "flattens Dicts of vectors only" in line
    _, line = check("tests-Image-v0", capsys)  # an image Box: refused as before
    assert "1-dimensional observations only" in line
    assert check("Pendulum-v1", capsys)[0].shape == (3,)  # a Box: unchanged


@pytest.mark.parametrize("module", MODULES, ids=lambda module: module.__name__.split(".")[-1])
def test_every_continuous_script_flattens_dm_control_observations(module):
    """Each script's own make_env (training and evaluation envs) gives the flat vector its networks are sized for."""
    for training in (True, False):
        env = module.make_env(CARTPOLE, 0, False, "", training=training)()
        assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (5,), np.float64)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (5,) and obs.dtype == np.float64
        obs, *_ = env.step(env.action_space.sample())
        assert obs.shape == (5,)
        env.close()
    # and a Box observation passes unchanged: the same numbers as the env without the wrapper
    flat, plain = module.make_env("Pendulum-v1", 0, False, "", training=False)(), gym.make("Pendulum-v1")
    assert np.array_equal(flat.reset(seed=3)[0], plain.reset(seed=3)[0]) and flat.observation_space == plain.observation_space


def test_generator_state_of_a_legacy_random_state_roundtrips(tmp_path):
    import torch

    generator = np.random.RandomState(7)
    generator.normal(size=3)  # a cached Gaussian is part of its state
    path = tmp_path / "state.pt"
    torch.save(generator_state(generator), path)
    restored = make_generator(torch.load(path, weights_only=True))
    assert isinstance(restored, np.random.RandomState)
    assert np.array_equal(restored.normal(size=5), generator.normal(size=5))


def test_dm_control_envs_resume_exactly_across_an_autoreset(tmp_path):
    """The episode after the first autoreset starts from the task's RandomState as it was then: replayed from the
    checkpoint's log, a fresh env continues with the same observations, rewards and ends. (Sync envs: the async
    workers run the same ReplayableEnv, and their make_env registers the ids, as the rpo smoke run below shows.)"""
    import torch

    def make():
        return gym.vector.SyncVectorEnv(
            [rpo_continuous.make_env(CARTPOLE, i, False, "") for i in range(2)], autoreset_mode=SAME_STEP
        )

    def episode_returns(infos):
        """The returns of the episodes that ended in this step (RecordEpisodeStatistics' ``episode`` in final_info)."""
        final = infos.get("final_info", {})
        return np.asarray(final["episode"]["r"])[final["_episode"]] if "_episode" in final else np.zeros(0)

    def play(envs, actions):
        seen = []
        for action in actions:
            obs, reward, terminated, truncated, infos = envs.step(action)
            seen.append((obs, reward, terminated, truncated, episode_returns(infos)))
        return seen

    actions = np.random.default_rng(0).uniform(-1, 1, size=(1100, 2, 1))
    envs = make()
    envs.reset(seed=5)
    *_, (obs, *_) = play(envs, actions[:1050])  # the episodes end by truncation at 1000 steps, then restart
    path = tmp_path / "state.pt"
    torch.save(checkpoint.capture({"envs": envs}), path)
    after = play(envs, actions[1050:])
    fresh = make()
    restored, missing = resume.restore({"envs": fresh}, {"state": torch.load(path, weights_only=True), "path": str(path)})
    assert not missing and np.array_equal(restored, obs)
    for step_after, step_replayed in zip(after, play(fresh, actions[1050:])):
        for a, b in zip(step_after, step_replayed):
            assert np.array_equal(a, b)
    envs.close(), fresh.close()


@pytest.mark.long  # a whole-run comparison: CI's -m long, out of the README's command (30 minutes)
def test_rpo_trains_on_dm_control_with_async_envs_and_evaluates_in_a_fresh_process(tmp_path):
    """rpo_continuous.py, 2 async envs (make_env registers the ids in the forkserver's workers), a model saved
    and evaluated at the end of training; the evaluation tool, a fresh process, scores it the same."""
    flags = ["--env-id", CARTPOLE, "--env-mode", "async", "--num-envs", "2", "--num-steps", "128"]
    flags += ["--num-minibatches", "4", "--total-timesteps", "512", "--save-model", "--eval-episodes", "1"]
    result = run_script("rpo_continuous.py", *flags, cwd=tmp_path)
    directory = run_dir(tmp_path)
    assert directory.name.startswith("dm_control-cartpole-balance-v0__rpo_continuous__1__")
    tags = scalars(directory)
    assert {"losses/policy_loss", "losses/value_loss", "eval/episodic_return"} <= set(tags), set(tags)
    assert len(tags["losses/policy_loss"]) == 2 and "evaluation over 1 episodes" in result.stdout
    trained = tags["eval/episodic_return"][0][1]
    assert 0 < trained <= 1000  # cartpole-balance: up to 1 per step, 1000 steps
    shown = enjoy(str(directory), "--eval-episodes", "1", cwd=tmp_path)
    mean = float(re.search(r"return (-?[\d.]+) ±", shown.stdout).group(1))
    assert mean == pytest.approx(trained, abs=0.01)  # same seed (the training seed + 100000), same frozen statistics


def test_sac_trains_on_dm_control_and_evaluates(tmp_path):
    """The replay family: float64 observations flattened, stored as float32 by the buffer, acted on as float32."""
    flags = ["--env-id", CARTPOLE, "--total-timesteps", "600", "--learning-starts", "300", "--batch-size", "32"]
    result = run_script("sac_continuous.py", *flags, "--save-model", "--eval-episodes", "1", cwd=tmp_path)
    directory = run_dir(tmp_path)
    tags = scalars(directory)
    assert {"losses/qf_loss", "losses/actor_loss", "eval/episodic_return"} <= set(tags), set(tags)
    assert "evaluation over 1 episodes" in result.stdout
    returns = sac_continuous.evaluate(str(directory / "sac_continuous.cleanrl_model"), eval_episodes=1)
    assert returns.shape == (1,) and 0 < returns[0] <= 1000
