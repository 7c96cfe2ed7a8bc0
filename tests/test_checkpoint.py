"""Checkpoint plumbing: RNG states, env replay logs, atomic files, refusal of foreign checkpoints."""

from __future__ import annotations

import dataclasses
import random

import gymnasium as gym
import numpy as np
import pytest
import torch

from cleanrl_utils import checkpoint, files, resume
from cleanrl_utils.resume import make_generator
from cleanrl_utils.wrappers import SAME_STEP, ReplayableEnv, envs_state, generator_state
from tests.conftest import assert_stops_with_one_line, run_dir, run_script


def _roundtrip(value, tmp_path):
    path = tmp_path / "value.pt"
    torch.save(value, path)
    return torch.load(path, weights_only=True)


def test_rng_state_roundtrip_restores_every_generator(tmp_path):
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    state = _roundtrip(checkpoint.rng_state(), tmp_path)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(99), np.random.seed(99), torch.manual_seed(99)
    resume.set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_generator_state_roundtrip(tmp_path):
    generator = np.random.default_rng(5)
    generator.normal(size=7)
    state = _roundtrip(generator_state(generator), tmp_path)
    expected = generator.integers(1 << 30, size=5)
    assert np.array_equal(make_generator(state).integers(1 << 30, size=5), expected)


def _vector(make, n, mode="sync"):
    """``n`` envs of ``make`` as the scripts build them: episode statistics, a replay log, same-step autoreset."""

    def thunk(index):
        return lambda: ReplayableEnv(gym.wrappers.RecordEpisodeStatistics(make()), index)

    thunks = [thunk(i) for i in range(n)]
    if mode == "async":
        return gym.vector.AsyncVectorEnv(thunks, autoreset_mode=SAME_STEP, context="forkserver")
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=SAME_STEP)


def _episode_returns(infos: dict) -> list[float]:
    """The returns of the episodes that ended in a vector step (``RecordEpisodeStatistics``' info)."""
    final = infos.get("final_info", {})
    return np.asarray(final["episode"]["r"])[final["_episode"]].tolist() if "_episode" in final else []


def _play(envs, actions):
    """Step ``envs`` through ``actions``; everything the run would see, per step."""
    seen = []
    for action in actions:
        obs, reward, terminated, truncated, infos = envs.step(action)
        seen.append((obs.copy(), reward.copy(), terminated.copy(), truncated.copy(), np.asarray(_episode_returns(infos))))
    return seen


def _assert_same(a, b):
    assert len(a) == len(b)
    for step_a, step_b in zip(a, b):
        for x, y in zip(step_a, step_b):
            assert np.array_equal(x, y)


def _check_resume(make, n, steps_before, steps_after, mode="sync", seed=7, tmp_path=None, vector_factory=None):
    """Run, save the envs' state, run on; a fresh vector env restored from the state sees the same."""
    factory = vector_factory or (lambda n, mode: _vector(make, n, mode))
    envs = factory(n, mode)
    envs.action_space.seed(1)
    actions = [envs.action_space.sample() for _ in range(steps_before + steps_after)]
    envs.reset(seed=seed)
    _play(envs, actions[:steps_before])
    state = envs_state(envs)
    if tmp_path is not None:
        state = _roundtrip(state, tmp_path)
    after = _play(envs, actions[steps_before:])
    envs.close()
    fresh = factory(n, mode)
    resume.restore_envs(fresh, state)
    replayed = _play(fresh, actions[steps_before:])
    fresh.close()
    _assert_same(after, replayed)


def test_cartpole_resumes_exactly_across_episode_ends(tmp_path):
    # 600 random steps of 3 envs: many episodes end and autoreset before and after the checkpoint
    _check_resume(lambda: gym.make("CartPole-v1"), 3, 300, 300, tmp_path=tmp_path)


def test_restore_returns_the_observation_to_act_on():
    envs = _vector(lambda: gym.make("CartPole-v1"), 2)
    envs.reset(seed=1)
    for _ in range(37):
        obs, *_ = envs.step(envs.action_space.sample())
    state = envs_state(envs)
    fresh = _vector(lambda: gym.make("CartPole-v1"), 2)
    assert np.array_equal(resume.restore_envs(fresh, state), obs)
    with pytest.raises(ValueError, match="the checkpoint has 2 envs, this run 3"):
        resume.restore_envs(_vector(lambda: gym.make("CartPole-v1"), 3), state)


def test_pendulum_time_limit_is_restored():
    # Pendulum ends only by its 200-step limit: the TimeLimit counter must come back exactly
    _check_resume(lambda: gym.make("Pendulum-v1"), 2, 150, 120)


def test_async_envs_resume_exactly():
    _check_resume(lambda: gym.make("CartPole-v1"), 2, 120, 120, mode="async")


def test_episode_statistics_continue_across_the_resume():
    envs = _vector(lambda: gym.make("CartPole-v1"), 1)
    envs.reset(seed=3)
    for _ in range(5):
        envs.step(np.array([0]))
    state = envs_state(envs)
    fresh = _vector(lambda: gym.make("CartPole-v1"), 1)
    resume.restore_envs(fresh, state)
    lengths = []
    while not lengths:
        _, _, _, _, infos = fresh.step(np.array([0]))
        if "final_info" in infos and "_episode" in infos["final_info"]:
            lengths.append(int(infos["final_info"]["episode"]["l"][0]))
    # the episode that started before the checkpoint is counted whole
    original = _vector(lambda: gym.make("CartPole-v1"), 1)
    original.reset(seed=3)
    length = 0
    while True:
        length += 1
        _, _, terminated, truncated, _ = original.step(np.array([0]))
        if terminated[0] or truncated[0]:
            break
    assert lengths == [length]


def test_breakout_resumes_exactly(tmp_path):
    """dqn_atari.py's Breakout (no-op starts, frame skips, episodic life, frame stacks), 2 envs in gymnasium's
    SyncVectorEnv: 400 random steps, the replay logs saved (through a file), then a fresh vector env restored from
    them sees what the first saw in the next 300 steps (observations, rewards, flags, ended games' scores)."""
    from cleanrl.dqn_atari import make_env
    from cleanrl_utils.resume import restore_envs
    from cleanrl_utils.wrappers import SAME_STEP, envs_state

    def breakouts() -> gym.vector.SyncVectorEnv:
        return gym.vector.SyncVectorEnv(
            [make_env("BreakoutNoFrameskip-v4", i, False, "") for i in range(2)], autoreset_mode=SAME_STEP
        )

    def play(envs, actions) -> list:
        seen = []
        for action in actions:
            obs, reward, terminated, truncated, infos = envs.step(action)
            final = infos.get("final_info", {})
            scores = final["episode"]["r"][final["_episode"]] if "_episode" in final else np.zeros(0)
            seen.append((obs.copy(), reward.copy(), terminated.copy(), truncated.copy(), np.asarray(scores)))
        return seen

    envs = breakouts()
    actions = np.random.default_rng(1).integers(4, size=(700, 2))
    envs.reset(seed=7)
    play(envs, actions[:400])
    state = _roundtrip(envs_state(envs), tmp_path)
    after = play(envs, actions[400:])
    envs.close()
    fresh = breakouts()
    restore_envs(fresh, state)
    replayed = play(fresh, actions[400:])
    fresh.close()
    _assert_same(after, replayed)
    assert any(len(scores) for *_, scores in after)  # a game ended after the checkpoint


@dataclasses.dataclass
class _Args:
    """The header arguments of a hand-written file: its run, its script."""

    env_id: str = "CartPole-v1"
    exp_name: str = "ppo"
    seed: int = 1
    script: str = "ppo"


def test_files_are_atomic_and_refuse_other_scripts_kinds_and_junk(tmp_path):
    run = tmp_path / "run"
    content = {"global_step": 128, "state": {"w": torch.ones(2)}}
    path = files.write_file(files.checkpoint_path(run, 128), "checkpoint", _Args(), content)
    files.write_file(files.checkpoint_path(run, 1024), "checkpoint", _Args(), {"global_step": 1024})
    (run / "args.json").write_text('{"env_id": "CartPole-v1", "exp_name": "ppo", "seed": 1}')  # its run's arguments
    assert not list(path.parent.glob("*.tmp"))
    assert [files.checkpoint_step(p) for p in files.checkpoints(run)] == [128, 1024]
    assert resume.load(str(run), "ppo")["global_step"] == 1024  # the newest in a run directory
    assert resume.load(str(path), "ppo")["state"]["w"].tolist() == [1.0, 1.0]
    with pytest.raises(files.FileRefused, match="written by ppo.py, not by dqn.py"):
        resume.load(str(path), "dqn")
    with pytest.raises(files.FileRefused, match="is a checkpoint file, not a model file"):
        files.read_file(path, "model", "ppo")
    with pytest.raises(files.FileRefused, match="has no checkpoints"):
        resume.load(str(tmp_path), "ppo")
    (run / "args.json").write_text('{"env_id": "CartPole-v1", "exp_name": "ppo", "seed": 2}')
    with pytest.raises(files.FileRefused, match=r"belongs to another run than .* \(its seed differ\)"):
        resume.load(str(path), "ppo")
    torch.save({"model": {}}, tmp_path / "model.pt")
    with pytest.raises(files.FileRefused, match="not a model or checkpoint file of this project"):
        files.read_file(tmp_path / "model.pt", "checkpoint")
    (tmp_path / "junk.pt").write_text("junk")
    with pytest.raises(files.FileRefused, match="cannot be read as a cleanrl file"):
        files.read_file(tmp_path / "junk.pt", "checkpoint")


def test_a_network_of_another_shape_or_activation_is_refused_in_one_line(tmp_path):
    saved_net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
    path = files.write_file(
        tmp_path / "m.cleanrl_model", "model", _Args(), {"agent": saved_net.state_dict()}, {"agent": saved_net}
    )
    content = files.read_file(path, "model", "ppo")
    files.load_module(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh()), "agent", content)  # fits
    with pytest.raises(files.FileRefused, match=r"its agent differs from this script's: '\(1\): Tanh\(\)' there"):
        files.load_module(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), "agent", content)
    with pytest.raises(files.FileRefused, match="out_features=16"):
        files.load_module(torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh()), "agent", content)


# ---- flags given on resume


def test_resume_refuses_contradicting_flags_and_missing_files(tmp_path):
    flags = ["--env-id", "CartPole-v1", "--num-envs", "1", "--num-steps", "128", "--total-timesteps", "512"]
    run_script("ppo.py", *flags, "--checkpoint-interval", "256", cwd=tmp_path)
    run = run_dir(tmp_path)
    (tmp_path / "other").mkdir()
    assert sorted(file.name for file in (run / "checkpoints").iterdir()) == ["step_256.pt", "step_512.pt"]
    assert_stops_with_one_line(
        "ppo.py",
        ["--resume", str(run), "--learning-rate", "0.1"],
        "--learning-rate",
        "0.1 differs from the resumed run's 0.00025; leave it out to continue the run as it was started",
        tmp_path / "other",
    )
    missing = tmp_path / "nothing"
    message = f"{missing}: no such file"
    assert_stops_with_one_line("ppo.py", ["--resume", str(missing)], "--resume", message, tmp_path / "other")


def test_resume_keeps_the_runs_checkpoint_flags_unless_given(tmp_path):
    from cleanrl.ppo import Args

    saved = Args(env_id="Acrobot-v1", checkpoint_interval=256, torch_threads=2, exp_name="ppo", script="ppo")
    path = files.write_file(files.checkpoint_path(tmp_path / "run", 512), "checkpoint", saved, {"global_step": 512})
    (tmp_path / "run" / "args.json").write_text('{"env_id": "Acrobot-v1", "exp_name": "ppo", "seed": 1}')

    def resumed(argv: list[str], **given):
        return resume.resumed_args(Args(resume=str(path), script="ppo", **given), argv)[0]

    plain = resumed(["--resume", str(path)])
    assert (plain.env_id, plain.checkpoint_interval, plain.torch_threads) == ("Acrobot-v1", 256, 2)
    changed = resumed(
        ["--resume", str(path), "--checkpoint-interval", "100", "--torch-threads=3"], checkpoint_interval=100, torch_threads=3
    )
    assert (changed.env_id, changed.checkpoint_interval, changed.torch_threads) == ("Acrobot-v1", 100, 3)
    # given explicitly, a default value counts too: checkpoints can be turned off on resume
    off = resumed(["--resume", str(path), "--checkpoint-interval", "0", "--torch-threads", "1"])
    assert (off.checkpoint_interval, off.torch_threads) == (0, 1)
    # and a flag a resumed run keeps, given with its default value, which differs from the run's, is refused
    with pytest.raises(SystemExit):
        resumed(["--resume", str(path), "--env-id", "CartPole-v1"])
