"""PQN on Atari with EnvPool (pqn_atari_envpool.py, pqn_atari_envpool_lstm.py).

The Q(λ) returns against hand-computed values (an episode terminated and one truncated inside
the rollout, λ = 0, λ = 1, one step); the training loops run in this process on Breakout with
episodes cut at 20 steps (the return of a truncated step bootstraps from its real final
observation, EnvPool's reset steps are masked out, the LSTM's sequences replay the rollout from
their stored state and are reset where an episode's first observation comes), the same seed giving the
same numbers; short runs of both scripts (tags, saved model and its evaluation, videos); SIGTERM, then
--resume with new envs; bad input.
No learning tests: learning takes millions of Atari steps.
"""

import numpy as np
import pytest
import torch

from cleanrl import pqn_atari_envpool, pqn_atari_envpool_lstm
from cleanrl_utils.files import checkpoint_step, checkpoints
from cleanrl_utils.resume import load
from tests.conftest import (
    ROOT,
    _run_in_process_until_exit,
    assert_stops_with_one_line,
    run_dir,
    run_in_process,
    run_script,
    scalars,
    sigterm_then_resume,
)

SCRIPTS = {"pqn_atari_envpool.py": pqn_atari_envpool, "pqn_atari_envpool_lstm.py": pqn_atari_envpool_lstm}
TAGS = {
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "charts/epsilon",
    "losses/td_loss",
    "losses/q_values",
}
ONE_UPDATE = ["--num-minibatches", "1", "--update-epochs", "1", "--num-threads", "1", "--torch-threads", "1"]


# ---- Q(λ) returns, by hand

GAMMA, LAM = 0.9, 0.5
# Four envs (columns), four steps, the same rewards and next values in each; they differ in how the episode ends.
REWARDS = torch.tensor([[1.0] * 4, [2.0] * 4, [0.0] * 4, [1.0] * 4])
NEXT_VALUES = torch.tensor([[0.5] * 4, [3.0] * 4, [1.0] * 4, [2.0] * 4])
TERMINATIONS = torch.zeros(4, 4)
TRUNCATIONS = torch.zeros(4, 4)
TERMINATIONS[1, 0] = 1.0  # env 0: terminated at t = 1
TRUNCATIONS[1, 1] = 1.0  # env 1: truncated at t = 1 (NEXT_VALUES[1, 1] is its real final observation's)
TERMINATIONS[3, 3] = 1.0  # env 3: terminated at the rollout's last step; env 2: no end


@pytest.mark.parametrize("module", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_q_lambda_returns_hand_computed(module):
    returns = module.q_lambda_returns(REWARDS, TERMINATIONS, TRUNCATIONS, NEXT_VALUES, GAMMA, LAM)
    assert returns.shape == (4, 4) and returns.dtype == torch.float32
    # env 2 (no end): G3 = 1 + .9*2 = 2.8 (bootstrap after the rollout); G2 = 0 + .9(.5*1 + .5*2.8) = 1.71;
    #   G1 = 2 + .9(.5*3 + .5*1.71) = 4.1195; G0 = 1 + .9(.5*.5 + .5*4.1195) = 3.078775
    torch.testing.assert_close(returns[:, 2], torch.tensor([3.078775, 4.1195, 1.71, 2.8]))
    # env 0 (terminated at 1): G1 = 2 (no bootstrap, no mixing with G2); G0 = 1 + .9(.25 + .5*2) = 2.125
    torch.testing.assert_close(returns[:, 0], torch.tensor([2.125, 2.0, 1.71, 2.8]))
    # env 1 (truncated at 1): G1 = 2 + .9*3 = 4.7 (the final observation's value, no mixing); G0 = 1 + .9(.25 + 2.35) = 3.34
    torch.testing.assert_close(returns[:, 1], torch.tensor([3.34, 4.7, 1.71, 2.8]))
    # env 3 (terminated at 3): G3 = 1; G2 = .9(.5 + .5) = .9; G1 = 2 + .9(1.5 + .45) = 3.755; G0 = 1 + .9(.25 + 1.8775)
    torch.testing.assert_close(returns[:, 3], torch.tensor([2.91475, 3.755, 0.9, 1.0]))


@pytest.mark.parametrize("module", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_q_lambda_returns_at_lambda_zero_one_and_one_step(module):
    # λ = 0: one-step Q-learning targets r + γ (1 - term) next_value, wherever the episode ends
    zero = module.q_lambda_returns(REWARDS, TERMINATIONS, TRUNCATIONS, NEXT_VALUES, GAMMA, 0.0)
    torch.testing.assert_close(zero[:, 2], torch.tensor([1.45, 4.7, 0.9, 2.8]))
    torch.testing.assert_close(zero[:, 0], torch.tensor([1.45, 2.0, 0.9, 2.8]))
    torch.testing.assert_close(zero[:, 3], torch.tensor([1.45, 4.7, 0.9, 1.0]))
    # λ = 1: discounted rewards to the episode's end or the rollout's, bootstrapped there unless terminated
    one = module.q_lambda_returns(REWARDS, TERMINATIONS, TRUNCATIONS, NEXT_VALUES, GAMMA, 1.0)
    torch.testing.assert_close(one[:, 2], torch.tensor([4.8412, 4.268, 2.52, 2.8]))  # 2.8, .9*2.8, 2 + .9*2.52, ...
    torch.testing.assert_close(one[:, 0], torch.tensor([2.8, 2.0, 2.52, 2.8]))  # G0 = 1 + .9*2
    torch.testing.assert_close(one[:, 1], torch.tensor([5.23, 4.7, 2.52, 2.8]))  # G0 = 1 + .9*4.7
    torch.testing.assert_close(one[:, 3], torch.tensor([3.529, 2.81, 0.9, 1.0]))  # 1, .9*1, 2 + .9*.9, 1 + .9*2.81
    # T = 1: the one-step target, whatever λ; a truncation bootstraps, a termination does not
    single = module.q_lambda_returns(
        torch.tensor([[1.0, 1.0, 1.0]]),
        torch.tensor([[0.0, 1.0, 0.0]]),
        torch.tensor([[0.0, 0.0, 1.0]]),
        torch.tensor([[2.0, 2.0, 2.0]]),
        GAMMA,
        0.65,
    )
    torch.testing.assert_close(single, torch.tensor([[2.8, 1.0, 2.8]]))


# ---- the training loops, run in this process


def _short_episodes(monkeypatch, steps: int = 20) -> None:
    """EnvPool's Atari envs with a time limit of ``steps`` agent steps (the scripts' ``envpool`` is this module)."""
    make = pqn_atari_envpool.envpool.make
    monkeypatch.setattr(pqn_atari_envpool.envpool, "make", lambda *a, **kw: make(*a, **{**kw, "max_episode_steps": steps}))


LOOP = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "128", "--learning-rate", "1e-30", *ONE_UPDATE]
"""Two rollouts of 2 x 32 steps; a learning rate of 1e-30 keeps the weights those of the last rollout."""


def _check_truncations(g: dict, values: torch.Tensor) -> None:
    """Episodes cut at 20 steps: each truncated step's return bootstraps from max_a Q of the next row, the real final
    observation; the row after it is EnvPool's reset step, masked out; the returns are q_lambda_returns' of the rollout."""
    truncations, terminations, resets, returns = g["truncations"], g["terminations"], g["resets"], g["returns"]
    truncated = (truncations > 0) & (terminations == 0)
    assert truncated[:-1].sum() >= 2, truncations  # each env's episode is cut inside the last rollout
    torch.testing.assert_close(g["values"], values, rtol=1e-4, atol=1e-5)  # the rollout's max Q, recomputed
    for t, i in truncated[:-1].nonzero().tolist():
        assert resets[t + 1, i] and not resets[t, i]
        expected = g["rewards"][t, i] + 0.99 * values[t + 1, i]
        torch.testing.assert_close(returns[t, i], expected, rtol=1e-5, atol=1e-6)
    dones = (truncations + terminations > 0)[:-1]
    torch.testing.assert_close(resets[1:], dones)  # reset steps come right after the dones, and only there
    next_values = torch.cat([values[1:], g["next_values"][-1:]])
    torch.testing.assert_close(
        returns, g["q_lambda_returns"](g["rewards"], terminations, truncations, next_values, 0.99, 0.65)
    )


def test_loop_bootstraps_truncations_from_the_final_observation_and_masks_reset_steps(monkeypatch, tmp_path):
    _short_episodes(monkeypatch)
    g = run_in_process("pqn_atari_envpool.py", monkeypatch, tmp_path, *LOOP)
    obs, q_network = g["obs"], g["q_network"]
    with torch.no_grad():
        values = q_network(obs.flatten(0, 1)).max(dim=1).values.view(obs.shape[:2])
    _check_truncations(g, values)
    for t, i in g["truncations"][:-1].nonzero().tolist():
        torch.testing.assert_close(obs[t + 1, i, :3], obs[t, i, 1:])  # the final observation: the frame stack goes on
    np.testing.assert_array_equal(g["b_mask"].numpy(), (~g["resets"]).flatten().float().numpy())
    lengths = [value for _, value in scalars(run_dir(tmp_path))["charts/episodic_length"]]
    assert lengths and set(lengths) <= {4.0 * 20}  # games end only at the 20-step limit, in frames


def test_lstm_loop_replays_sequences_and_resets_memory_at_episode_starts(monkeypatch, tmp_path):
    """The update's unroll from the stored initial state (not zero: the second rollout's) gives the rollout's Q-values;
    the LSTM state is kept through the final observation and reset at the next episode's first one."""
    _short_episodes(monkeypatch)
    g = run_in_process("pqn_atari_envpool_lstm.py", monkeypatch, tmp_path, *LOOP)
    obs, starts, resets, q_network, initial_state = g["obs"], g["starts"], g["resets"], g["q_network"], g["initial_state"]
    assert initial_state[0].abs().sum() > 0  # the state carried from the first rollout
    with torch.no_grad():
        values = q_network(obs, starts, initial_state)[0].max(dim=2).values
    _check_truncations(g, values)
    torch.testing.assert_close(starts[1:], resets[:-1].float())  # the observation after a reset step starts an episode
    assert starts.sum() >= 2 and not (starts.bool() & resets).any()
    with torch.no_grad():  # from a zero state the values differ: the memory carried over matters
        assert not torch.allclose(q_network(obs, starts, q_network.initial_state(2))[0].max(dim=2).values, values)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_nan_reward_stops_the_run_in_one_line_naming_the_env_and_step(script, monkeypatch, tmp_path):
    """The rollout's rewards (torch, on the device) checked once after it: env 1's NaN at its 40th step, in the second
    rollout of 2 x 32 steps, ends the run in one line, exit 1, before that rollout's update."""
    from tests.test_ppo_atari import _NanReward

    make = pqn_atari_envpool.envpool.make
    monkeypatch.setattr(pqn_atari_envpool.envpool, "make", lambda *args, **kwargs: _NanReward(make(*args, **kwargs)))
    flags = ["--num-envs", "2", "--num-steps", "32", "--total-timesteps", "128", *ONE_UPDATE]
    code, stderr = _run_in_process_until_exit(str(ROOT / "cleanrl" / script), flags, tmp_path)
    assert code == 1 and stderr.strip() == (
        f"{script}: env 1 returned a non-finite reward (nan) at global step 80 (step 7 of the rollout); last checkpoint: none"
    ), stderr
    assert [step for step, _ in scalars(run_dir(tmp_path))["losses/td_loss"]] == [64]


@pytest.mark.parametrize("script", SCRIPTS)
def test_same_seed_same_numbers(script, monkeypatch, tmp_path):
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        g = run_in_process(script, monkeypatch, tmp_path / name, *LOOP[:6], *ONE_UPDATE, "--seed", "3")
        runs.append((g["returns"], g["q_network"].state_dict()))
    torch.testing.assert_close(runs[0][0], runs[1][0], rtol=0, atol=0)
    for key, tensor in runs[0][1].items():
        assert torch.equal(tensor, runs[1][1][key]), key


# ---- whole scripts


@pytest.mark.long  # the contract's short run (tests/test_contracts.py) covers training, the model and its evaluation in
# the README's command; this one adds videos, ε's schedule, whole-game lengths and a seeded evaluation: CI's -m long
@pytest.mark.parametrize("script", SCRIPTS)
def test_smoke_tags_model_and_evaluation(script, tmp_path):
    """A short run on Breakout (games end, tags, the model saved and evaluated, env 0's games on video); the model
    evaluates again with the same scores, and the other script refuses it."""
    flags = ["--num-envs", "2", "--num-steps", "64", "--total-timesteps", "2048", *ONE_UPDATE, "--save-model"]
    result = run_script(script, *flags, "--eval-episodes", "1", "--capture-video", cwd=tmp_path)
    directory = run_dir(tmp_path)
    name = script[:-3]
    assert directory.name.startswith(f"Breakout-v5__{name}__1__")
    tags = scalars(directory)
    assert TAGS | {"eval/episodic_return", "eval/episodic_return_std"} <= set(tags), set(tags)
    assert len(tags["losses/td_loss"]) == 16 and all(np.isfinite(value) for _, value in tags["losses/td_loss"])
    lengths = [value for _, value in tags["charts/episodic_length"]]
    assert len(lengths) >= 2 and all(length % 4 == 0 for length in lengths)  # whole games, in frames
    epsilons = [value for _, value in tags["charts/epsilon"]]  # 1 -> 0.01 over the first 10% of 2048 steps
    assert epsilons[0] == pytest.approx(1 - 0.99 * 128 / 204.8) and epsilons[-1] == pytest.approx(0.01)
    assert "evaluation over 1 episodes" in result.stdout
    assert [v for v in (directory / "videos").glob("*.mp4") if v.stat().st_size > 1000]
    assert len(list((directory / "videos-eval").glob("*.mp4"))) == 1
    model = directory / f"{name}.cleanrl_model"
    returns = SCRIPTS[script].evaluate(str(model), eval_episodes=1)
    assert returns.shape == (1,) and np.all(returns >= 0)
    np.testing.assert_array_equal(SCRIPTS[script].evaluate(str(model), eval_episodes=1), returns)  # seeded
    other = next(module for key, module in SCRIPTS.items() if key != script)
    with pytest.raises(ValueError, match=f"written by {script}, not by {other.__name__.split('.')[-1]}.py"):
        other.evaluate(str(model), eval_episodes=1)


RESUMED_RUN = [
    *["--num-envs", "2", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--num-threads", "1"],
    *["--save-model", "--eval-episodes", "1", "--total-timesteps", "192"],
]


@pytest.mark.long  # two whole runs and two resumes: CI's -m long, out of the README's command (30 minutes)
@pytest.mark.parametrize("script", SCRIPTS)
def test_resume_after_sigterm_continues_the_run_with_new_envs(script, monkeypatch, tmp_path):
    """EnvPool's envs cannot be restored, so the resume is not exact (as ppo_atari_envpool.py's): every rollout is
    logged once, with the uninterrupted run's learning rate and ε at each step, and the run starts from the
    checkpoint's weights (resumed again with the optimiser's steps disabled, it ends with them)."""
    whole, resumed = sigterm_then_resume(script, RESUMED_RUN, 64, 192, tmp_path)
    assert resumed["model"].keys() == whole["model"].keys()
    assert all(torch.isfinite(tensor).all() for tensor in resumed["model"].values())
    for tag in ("losses/td_loss", "losses/q_values", "charts/learning_rate", "charts/epsilon"):
        steps = [s for s, _ in resumed["curves"][tag]]
        assert steps == [s for s, _ in whole["curves"][tag]] == list(range(32, 193, 32)), tag
    for tag in ("charts/learning_rate", "charts/epsilon"):
        assert resumed["curves"][tag] == whole["curves"][tag]

    checkpoint = checkpoints(run_dir(tmp_path / "cut"))[0]  # the older of the two kept: the run's last rollouts follow it
    assert checkpoint_step(checkpoint) < 192
    monkeypatch.setattr(torch.optim.RAdam, "step", lambda self, closure=None: None)
    (run_dir(tmp_path / "cut") / script.replace(".py", ".cleanrl_model")).unlink()  # finished: resumable without its model
    g = run_in_process(script, monkeypatch, tmp_path / "cut", "--resume", str(checkpoint), "--no-save-model")
    assert g["global_step"] == 192 and g["start_iteration"] == checkpoint_step(checkpoint) // 32 + 1
    for name, tensor in load(str(checkpoint), script[:-3])["state"]["q_network"].items():
        assert torch.equal(g["q_network"].state_dict()[name], tensor), name


BAD_INPUT = [
    (["--env-id", "CartPole-v1"], "--env-id", "CartPole-v1 is not an Atari game"),
    (["--env-id", "BreakoutNoFrameskip-v4"], "--env-id", "did you mean Breakout-v5?"),
    (["--env-id", "NoSuchGame-v5"], "--env-id", "unknown EnvPool Atari game"),
    (["--env-mode", "async"], "--env-mode", "EnvPool already steps the envs"),
    (["--num-threads", "0"], "--num-threads", "must be in [1, 1024]"),
    (["--q-lambda", "1.5"], "--q-lambda", "must be in [0, 1]"),
    (["--start-e", "0.1", "--end-e", "0.5"], "--end-e", "0.5 is above --start-e 0.1"),
    (["--exploration-fraction", "0"], "--exploration-fraction", "must be in (0, 1]"),
    (["--max-grad-norm", "0"], "--max-grad-norm", "must be a positive finite number"),
    (["--total-timesteps", "100"], "--total-timesteps", "less than one rollout of 1024"),
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_bad_input_stops_with_one_line(script, tmp_path):
    cases = [
        *BAD_INPUT,
        {
            "pqn_atari_envpool.py": (
                ["--num-minibatches", "3"],
                "--num-minibatches",
                "does not divide the rollout of 1024 steps",
            ),
            "pqn_atari_envpool_lstm.py": (["--num-minibatches", "3"], "--num-minibatches", "does not divide --num-envs 8"),
        }[script],
    ]
    for i, (flags, flag, message) in enumerate(cases):
        (tmp_path / str(i)).mkdir()
        assert_stops_with_one_line(script, flags, flag, message, tmp_path / str(i))
