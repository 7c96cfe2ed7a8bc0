"""PPO on Procgen (ppo_procgen.py): the IMPALA CNN, GAE with Procgen's truncations, the losses, whole runs.

Pure parts against hand-computed values (GAE: a truncation bootstraps from the value of the episode's last
observation, a termination not at all; the PPO losses), the network's shapes, the loop on a maze whose
episodes end at the 500-step limit, short runs (run directory, tags, saved model, its evaluation in the
levels it trained on, the evaluation tool, videos, same seed same numbers), the resume with new envs, bad
input, and one learning test on a single level of starpilot.
"""

import math

import numpy as np
import pytest
import torch

pytest.importorskip("procgen")

from cleanrl import ppo_procgen  # noqa: E402
from cleanrl.ppo_procgen import Agent, compute_gae, ppo_losses  # noqa: E402
from cleanrl_utils.procgen import ProcgenVectorEnv  # noqa: E402
from tests.conftest import (  # noqa: E402
    ROOT,
    _run_in_process_until_exit,
    assert_stops_with_one_line,
    enjoy,
    episodic_returns,
    run_dir,
    run_in_process,
    run_script,
    scalars,
    sigterm_then_resume,
)
from tests.test_ppo_atari import LOSS_TAGS, STANDARD_TAGS  # noqa: E402  (the PPO scripts' tags)

TINY = ["--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--total-timesteps", "128"]


# ---- GAE: a truncation bootstraps from V(s_t), a termination does not

GAMMA, LAM = 0.9, 0.8  # γλ = 0.72
REWARDS = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], np.float32)
VALUES = np.array([[0.5] * 3, [0.6] * 3, [2.0] * 3, [0.3] * 3], np.float32)
LAST = np.array([0.7] * 3, np.float32)
# env 0: truncated at t=1; env 1: terminated at t=1; env 2: no end. For envs 0 and 1, s_2 (V = 2.0) is the first
# observation of the next episode (Procgen resets within the step that ends an episode).
TERMINATIONS = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]], np.float32)
TRUNCATIONS = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]], np.float32)


def test_gae_bootstraps_a_truncation_from_the_last_value_and_a_termination_not_at_all():
    advantages, returns = compute_gae(REWARDS, VALUES, LAST, TERMINATIONS, TRUNCATIONS, GAMMA, LAM)
    # later steps, the same in every env: δ3 = 1 + .9*.7 - .3 = 1.33; δ2 = 0 + .9*.3 - 2.0 = -1.73;
    #   A3 = 1.33; A2 = -1.73 + .72*1.33 = -0.7724
    # env 0 (truncated at t=1): δ1 = 1 + .9*V(s_1) - V(s_1) = 1 + .9*.6 - .6 = 0.94, not V(s_2) (the next episode's);
    #   the recursion stops at the end: A1 = 0.94; δ0 = 1 + .9*.6 - .5 = 1.04; A0 = 1.04 + .72*.94 = 1.7168
    np.testing.assert_allclose(advantages[:, 0], [1.7168, 0.94, -0.7724, 1.33], rtol=1e-6)
    np.testing.assert_allclose(returns[:, 0], [2.2168, 1.54, 1.2276, 1.63], rtol=1e-6)
    # env 1 (terminated at t=1): δ1 = 1 - .6 = .4 (no bootstrap); A0 = 1.04 + .72*.4 = 1.328
    np.testing.assert_allclose(advantages[:, 1], [1.328, 0.4, -0.7724, 1.33], rtol=1e-6)
    # env 2 (no end): δ1 = 1 + .9*2.0 - .6 = 2.2; A1 = 2.2 + .72*A2 = 1.643872; A0 = 1.04 + .72*A1 = 2.22358784
    np.testing.assert_allclose(advantages[:, 2], [2.22358784, 1.643872, -0.7724, 1.33], rtol=1e-6)
    assert advantages.dtype == np.float32 and returns.dtype == np.float32


def test_gae_with_lambda_one_and_no_ends_is_the_discounted_return_minus_value():
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=(6, 2)).astype(np.float32), rng.normal(size=(6, 2)).astype(np.float32)
    last, zeros = rng.normal(size=2).astype(np.float32), np.zeros((6, 2), np.float32)
    _, returns = compute_gae(rewards, values, last, zeros, zeros, 0.99, 1.0)
    expected = last.copy()
    for t in reversed(range(6)):
        expected = rewards[t] + 0.99 * expected
        np.testing.assert_allclose(returns[t], expected, rtol=1e-5)


# ---- the PPO losses


def _losses(norm_adv=False, clip_vloss=True):
    """Two samples: ratios 1.2 and 0.5, A = (1, -1), V = (1, 0), V_old = (0.5, 0), R = (2, 1), ε = 0.1."""
    oldlogprob = torch.full((2,), -1.0)
    newlogprob = (oldlogprob + torch.tensor([math.log(1.2), math.log(0.5)])).requires_grad_()
    newvalue = torch.tensor([1.0, 0.0]).requires_grad_()
    entropy = torch.tensor([0.5, 1.5]).requires_grad_()
    args = (torch.tensor([0.5, 0.0]), torch.tensor([1.0, -1.0]), torch.tensor([2.0, 1.0]), 0.1)
    return ppo_losses(newlogprob, entropy, newvalue, oldlogprob, *args, clip_vloss=clip_vloss, norm_adv=norm_adv)


def test_ppo_losses_hand_computed():
    losses = _losses()
    # sample 1 (A = 1): max(-1.2, -1.1) = -1.1; sample 2 (A = -1): max(0.5, 0.9) = 0.9; mean -0.1
    assert losses["policy_loss"].item() == pytest.approx(-0.1, abs=1e-6)
    # value: sample 1 max((1-2)², (0.5+0.1-2)²) = 1.96; sample 2 max((0-1)², (0+0-1)²) = 1; 0.5 * (1.96 + 1) / 2
    assert losses["value_loss"].item() == pytest.approx(0.74, abs=1e-6)
    assert _losses(clip_vloss=False)["value_loss"].item() == pytest.approx(0.5, abs=1e-6)  # 0.5 * (1 + 1) / 2
    assert losses["entropy"].item() == pytest.approx(1.0)
    assert losses["clipfrac"].item() == 1.0  # both ratios outside [0.9, 1.1]
    assert losses["old_approx_kl"].item() == pytest.approx(-(math.log(1.2) + math.log(0.5)) / 2, abs=1e-6)
    assert losses["approx_kl"].item() == pytest.approx(((0.2 - math.log(1.2)) + (-0.5 - math.log(0.5))) / 2, abs=1e-6)
    # normalised advantages: mean 0, unbiased std √2 -> ±0.7071: max(-.7071*1.2, -.7071*1.1), max(.7071*.5, .7071*.9)
    normalised = _losses(norm_adv=True)["policy_loss"].item()
    assert normalised == pytest.approx((-0.7071068 * 1.1 + 0.7071068 * 0.9) / 2, abs=1e-6)


# ---- the IMPALA CNN


def test_the_impala_cnn_has_its_shapes_and_reads_height_width_channel_frames():
    envs = ppo_procgen.make_envs("starpilot", 1, False, "", num_envs=2)
    agent = Agent(envs)
    assert [stack.conv.out_channels for stack in agent.network[:3]] == [16, 32, 32]
    assert agent.network[5].in_features == 32 * 8 * 8 and agent.network[5].out_features == 256
    assert agent.actor.out_features == 15
    # 3 stacks (a conv and 2 residual blocks of 2 convs each, 3x3) + linear 2048 -> 256 + the heads
    convs = sum(9 * c_in * c_out + c_out for c_in, c_out in [(3, 16), (16, 32), (32, 32)])
    convs += 4 * sum(9 * c * c + c for c in (16, 32, 32))
    assert sum(p.numel() for p in agent.parameters()) == convs + 2048 * 256 + 256 + 257 * 15 + 257
    obs, _ = envs.reset()
    assert obs.shape == (2, 64, 64, 3) and obs.dtype == np.uint8
    frames = torch.as_tensor(obs)
    action, log_prob, entropy, value = agent.get_action_and_value(frames)
    assert action.shape == log_prob.shape == entropy.shape == value.shape == (2,)
    # the same numbers as the frames given channels-first, and with channels-last weights
    permuted = agent.network(frames.permute(0, 3, 1, 2).contiguous().float() / 255.0)
    torch.testing.assert_close(agent.hidden(frames), permuted)
    channels_last = Agent(envs)
    channels_last.load_state_dict(agent.state_dict())
    channels_last.to(memory_format=torch.channels_last)
    torch.testing.assert_close(channels_last.get_value(frames), agent.get_value(frames), rtol=1e-4, atol=1e-5)
    envs.close()


# ---- the loop: truncations at maze's 500-step limit


def test_the_loop_bootstraps_a_truncation_from_the_value_of_the_last_observation(monkeypatch, tmp_path):
    """Maze level 1 (easy) is rarely solved by a near-uniform policy: both envs' first episodes end at the
    500-step limit, in the second rollout of 2 x 256 steps (row 243). A learning rate of 1e-30 keeps the
    weights those of the rollout, so the stored values are V of the stored frames."""
    g = run_in_process(
        "ppo_procgen.py",
        monkeypatch,
        tmp_path,
        *["--env-id", "maze", "--num-levels", "1", "--start-level", "1", "--num-envs", "2", "--num-steps", "256"],
        *["--num-minibatches", "2", "--update-epochs", "1", "--total-timesteps", "1024", "--learning-rate", "1e-30"],
    )
    truncations, terminations = g["truncations"], g["terminations"]
    assert np.argwhere(truncations).tolist() == [[243, 0], [243, 1]] and not terminations.any()
    agent, obs = g["agent"], g["obs"]
    with torch.no_grad():
        values = agent.get_value(obs.reshape(-1, 64, 64, 3)).reshape(256, 2).numpy()
    np.testing.assert_allclose(g["values"].numpy(), values, rtol=1e-4, atol=1e-5)
    # A_t = δ_t = r_t + γ V(s_t) - V(s_t) where step t truncated: the recursion stops, no value of the next episode
    rewards, advantages = g["rewards"], g["advantages"]
    expected = rewards[243] + (0.999 - 1.0) * values[243]
    np.testing.assert_allclose(advantages[243], expected, rtol=1e-4, atol=1e-6)
    assert not np.allclose(obs[244].numpy(), obs[243].numpy())  # row 244: the next episode's first frame
    lengths = [value for _, value in scalars(run_dir(tmp_path))["charts/episodic_length"]]
    assert lengths == [500.0, 500.0]


# ---- whole runs


@pytest.mark.long  # the contract's short run (tests/test_contracts.py) covers training, the model and its evaluation in
# the README's command; this one adds videos, a seeded evaluation and the tool's score: CI's -m long
def test_smoke_video_model_evaluation_and_the_evaluation_tool(tmp_path):
    flags = ["--total-timesteps", "256", "--save-model", "--eval-episodes", "1", "--capture-video"]
    result = run_script("ppo_procgen.py", *TINY, *flags, cwd=tmp_path)
    directory = run_dir(tmp_path)
    assert directory.name.startswith("starpilot__ppo_procgen__1__")
    tags = scalars(directory)
    assert STANDARD_TAGS | LOSS_TAGS | {"eval/episodic_return", "eval/episodic_return_std"} <= set(tags), set(tags)
    assert "evaluation over 1 episodes" in result.stdout
    assert [v for v in (directory / "videos").glob("*.mp4") if v.stat().st_size > 1000]
    assert len(list((directory / "videos-eval").glob("*.mp4"))) == 1
    model = directory / "ppo_procgen.cleanrl_model"
    returns = ppo_procgen.evaluate(str(model), eval_episodes=2)
    assert returns.shape == (2,) and np.all(returns >= 0)
    np.testing.assert_array_equal(ppo_procgen.evaluate(str(model), eval_episodes=2), returns)  # seeded
    from cleanrl import ppo_atari_envpool

    with pytest.raises(ValueError, match="written by ppo_procgen.py, not by ppo_atari_envpool.py"):
        ppo_atari_envpool.evaluate(str(model), eval_episodes=1)
    tool = enjoy(str(model), "--eval-episodes", "2", cwd=tmp_path)
    assert f"{returns.mean():.2f}" in tool.stdout, tool.stdout


def test_evaluation_plays_the_levels_the_model_trained_on(monkeypatch, tmp_path):
    run_script(
        "ppo_procgen.py",
        *TINY,
        *["--env-id", "maze", "--distribution-mode", "hard", "--num-levels", "3", "--start-level", "7"],
        *["--save-model", "--eval-episodes", "1"],
        cwd=tmp_path,
    )
    made = []
    original = ppo_procgen.ProcgenVectorEnv

    def recorded(*args, **kwargs):
        made.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(ppo_procgen, "ProcgenVectorEnv", recorded)
    model = run_dir(tmp_path) / "ppo_procgen.cleanrl_model"
    ppo_procgen.evaluate(str(model), eval_episodes=1, seed=5)
    assert made == [("maze", 1, 5, 3, 7, "hard")]
    # a forged level count is refused in Python: Procgen's C++ would abort the process on a negative one
    from tests.test_run_files import forge

    forge(model, "num_levels", -5)
    with pytest.raises(ValueError, match=r"make no env: num_levels must be in \[0, 2\*\*31\), got -5"):
        ppo_procgen.evaluate(str(model), eval_episodes=1)
    forge(model, "num_levels", 3)
    forge(model, "distribution_mode", "memory")  # the evaluation tool: one line, no traceback
    result = enjoy(str(model), "--eval-episodes", "1", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert "its saved distribution_mode: invalid choice 'memory' for argument '--distribution-mode'" in line, line


def nan_reward_at(monkeypatch, at: int = 40, env: int = 1) -> None:
    """Procgen's envs with env ``env``'s reward (the game's and the one returned) NaN at their ``at``-th step."""
    step, calls = ProcgenVectorEnv.step, []

    def patched(self, actions):
        obs, rewards, terminations, truncations, info = step(self, actions)
        calls.append(1)
        if len(calls) == at:
            rewards, info["reward"] = rewards.copy(), info["reward"].copy()
            rewards[env] = info["reward"][env] = np.nan
        return obs, rewards, terminations, truncations, info

    monkeypatch.setattr(ProcgenVectorEnv, "step", patched)


def test_a_nan_reward_stops_the_run_in_one_line_naming_the_env_and_step(monkeypatch, tmp_path):
    """The rollout's (scaled) rewards checked once after it: env 1's NaN at its 40th step, in the second rollout of
    2 x 32 steps, ends the run in one line, exit 1, before that rollout's update."""
    nan_reward_at(monkeypatch)
    code, stderr = _run_in_process_until_exit(str(ROOT / "cleanrl" / "ppo_procgen.py"), TINY, tmp_path)
    assert code == 1 and stderr.strip() == (
        "ppo_procgen.py: env 1 returned a non-finite reward (nan) at global step 80 (step 7 of the rollout); "
        "last checkpoint: none"
    ), stderr
    assert [step for step, _ in scalars(run_dir(tmp_path))["losses/value_loss"]] == [64]


def test_same_seed_same_numbers(tmp_path):
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        run_script("ppo_procgen.py", *TINY, "--seed", "7", cwd=tmp_path / name)
        tags = scalars(run_dir(tmp_path / name))
        runs.append({tag: [value for _, value in values] for tag, values in tags.items() if tag != "charts/SPS"})
    assert len(runs[0]["losses/value_loss"]) == 2  # 2 rollouts of 2 x 32 steps
    assert runs[0] == runs[1]


def test_resume_continues_the_run_with_new_envs_and_the_saved_statistics(monkeypatch, tmp_path):
    """Procgen's envs cannot be restored, so the resume is not exact: every rollout is logged once (no overlap,
    no gap) with the same learning-rate schedule; it starts from the checkpoint's weights, and the reward
    scaling goes on from the checkpoint's statistics (their count: the checkpoint's plus one per env step)."""
    from cleanrl_utils.files import checkpoint_step, checkpoints
    from cleanrl_utils.resume import load

    flags = [*TINY[:-2], "--update-epochs", "1", "--anneal-lr", "--save-model", "--eval-episodes", "1"]
    whole, resumed = sigterm_then_resume("ppo_procgen.py", [*flags, "--total-timesteps", "384"], 128, 384, tmp_path)
    for tag in LOSS_TAGS | {"charts/learning_rate"}:
        steps = [s for s, _ in resumed["curves"][tag]]
        assert steps == [s for s, _ in whole["curves"][tag]] == list(range(64, 385, 64)), tag
    assert resumed["curves"]["charts/learning_rate"] == whole["curves"]["charts/learning_rate"]

    checkpoint = checkpoints(run_dir(tmp_path / "cut"))[-1]
    step, saved = checkpoint_step(checkpoint), load(str(checkpoint), "ppo_procgen")["state"]
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, closure=None: None)
    (run_dir(tmp_path / "cut") / "ppo_procgen.cleanrl_model").unlink()  # finished: resumable without its model
    g = run_in_process("ppo_procgen.py", monkeypatch, tmp_path / "cut", "--resume", str(checkpoint))
    assert g["global_step"] == 384 and g["start_iteration"] == step // 64 + 1
    for name, tensor in saved["agent"].items():  # loaded, and not updated (the optimiser's steps disabled)
        assert torch.equal(g["agent"].state_dict()[name], tensor), name
    count = g["normalization"].state_dict()["return_rms.count"].item()
    assert count == pytest.approx(saved["reward_normalization"]["return_rms.count"].item() + (384 - step))


BAD_INPUT = [
    ("ppo_procgen.py", ["--env-id", "starpilots"], "--env-id", "unknown Procgen game 'starpilots'; did you mean starpilot?"),
    ("ppo_procgen.py", ["--env-id", "CartPole-v1"], "--env-id", "unknown Procgen game 'CartPole-v1'"),
    ("ppo_procgen.py", ["--distribution-mode", "memory"], "--distribution-mode", "invalid choice 'memory'"),
    ("ppo_procgen.py", ["--env-mode", "async"], "--env-mode", "Procgen steps its envs in C++ already"),
    ("ppo_procgen.py", ["--num-levels", "-1"], "--num-levels", "must be in [0, 2147483647]"),
    ("ppo_procgen.py", ["--start-level", str(2**31)], "--start-level", "must be in [0, 2147483647]"),
    ("ppo_procgen.py", ["--num-minibatches", "3"], "--num-minibatches", "does not divide the batch of 16384"),
    ("ppo_procgen.py", ["--total-timesteps", "100"], "--total-timesteps", "less than one rollout of 16384 steps"),
    ("ppo_procgen.py", ["--checkpoint-interval", "-1"], "--checkpoint-interval", "must be >= 0"),
]


@pytest.mark.parametrize("script,flags,flag,message", BAD_INPUT)
def test_bad_input_stops_with_one_line(script, flags, flag, message, tmp_path):
    assert_stops_with_one_line(script, flags, flag, message, tmp_path)


# ---- learning


@pytest.mark.learning
@pytest.mark.long
def test_learns_a_starpilot_level(tmp_path):
    """Starpilot, level 0 only (easy, ``--num-levels 1 --start-level 0``), 16,384 steps (16 envs x 64 steps x 16
    rollouts; about 2 CPU-minutes): the last 20 episodes' mean return must reach 2. Measured with these flags: the
    policy frozen at its initialisation (``--learning-rate 1e-30``) scores 0.6 (0.40 over its 250 episodes); seeds
    1 and 2 score 4.2 and 4.75 (first 20 episodes: 0.45 and 0.25), their reward per 2,048 steps rising from 13 and
    5 to 100 and 144. (Jumper level 4 was tried first: its agents learned to stop dying and then to stop reaching
    the carrot within 16,384 steps, episodes without end, a curve no threshold reads well.)"""
    run_script(
        "ppo_procgen.py",
        *["--env-id", "starpilot", "--num-levels", "1", "--start-level", "0"],
        *["--num-envs", "16", "--num-steps", "64", "--total-timesteps", "16384"],
        cwd=tmp_path,
        timeout=1500,
    )
    returns = episodic_returns(run_dir(tmp_path))
    last20 = float(np.mean(returns[-20:]))
    print(f"ppo_procgen.py on starpilot level 0: mean return over the last 20 episodes {last20:.2f} ({len(returns)} episodes)")
    assert len(returns) >= 20 and last20 >= 2.0
