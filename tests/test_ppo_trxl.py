"""PPO-TrXL (ppo_trxl.py) and the proof-of-memory task (cleanrl_utils/envs.py).

Unit tests: the task's rules and its chance level; the sliding memory window (positions, mask,
rows of the rollout's buffer); the mask at episode starts (no output reads memory of an earlier
episode: changing that memory changes nothing, changing the episode's own does); the rollout's
bookkeeping, run in this process with the optimiser's steps disabled, against recomputed numbers:
the minibatch forward from stored memory equals the rollout's forward (same log π and V), a step
replayed from its episode's start with a fresh memory gets the rollout's value, and a truncation
bootstraps from V(final observation) read with the episode's memory. Smoke runs (subprocess): run
directory, tags, saved model and evaluation, the same seed the same numbers, async = sync, bad input,
MiniGrid (and Memory Gym where installed); exact resume is tests/test_contracts.py's (Discrete actions).
MultiDiscrete actions (one head per dimension, log π and entropy summed): the heads' sampling and sums, the
rollout's actions per dimension and what the env receives, a Memory Gym Endless task's run, saved model,
evaluation and exact resume.
Learning (marked ``learning``): on the proof-of-memory task ppo_trxl.py wins most episodes and
ppo.py, with the same steps, stays at chance (budget and measured values in the test's docstring).
"""

import shlex
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

import cleanrl_utils.envs  # noqa: F401  (registers ProofOfMemory-v0)
import tests.envs  # noqa: F401  (registers Counter-v0)
from cleanrl import ppo_lstm, ppo_trxl
from tests.conftest import (
    assert_stops_with_one_line,
    enjoy,
    episodic_returns,
    run_dir,
    run_in_process,
    run_script,
    scalars,
    sigterm_then_resume,
)

POM = "cleanrl_utils.envs:ProofOfMemory-v0"
PPO_TAGS = {
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/SPS",
    "charts/learning_rate",
    "losses/value_loss",
    "losses/policy_loss",
    "losses/entropy",
    "losses/old_approx_kl",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
}


# ---- the proof-of-memory task


def test_proof_of_memory_rewards_the_cued_side_after_the_delay():
    env = gym.make(POM)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        side = int(np.argmax(obs[:2]))
        assert obs.sum() == 1.0 and obs[2] == 0.0  # the cue, once
        steps = 1
        while True:
            obs, reward, terminated, truncated, _ = env.step(1 - side)  # actions before go do nothing
            if obs[2] == 1.0:
                break
            assert obs.sum() == 0.0 and reward == 0.0 and not terminated and not truncated
            steps += 1
        assert 5 <= steps <= 13  # delays 4 to 12, then go
        wrong = seed % 2 == 0
        _, reward, terminated, truncated, _ = env.step(1 - side if wrong else side)
        assert reward == (-1.0 if wrong else 1.0) and terminated and not truncated


def test_proof_of_memory_is_at_chance_without_memory():
    """Uniform actions (a memoryless policy sees the same go observation whatever the cue): mean return ~ 0."""
    env = gym.make(POM)
    env.reset(seed=0)
    env.action_space.seed(0)
    returns = []
    for _ in range(4000):
        env.reset()
        done, total = False, 0.0
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total, done = total + reward, terminated or truncated
        returns.append(total)
    assert abs(np.mean(returns)) < 0.05  # 3 standard errors of 4000 episodes of ±1


# ---- the sliding window and its mask


def test_memory_window_positions_and_mask():
    positions, mask = ppo_trxl.memory_window(torch.tensor([0, 1, 3, 4, 10]), 4)
    # slot j holds the step 4 - j steps back: positions step-4 .. step-1, masked where negative
    expected = torch.tensor([[-4, -3, -2, -1], [-3, -2, -1, 0], [-1, 0, 1, 2], [0, 1, 2, 3], [6, 7, 8, 9]])
    torch.testing.assert_close(positions, expected.clamp(min=0))
    torch.testing.assert_close(mask, expected >= 0)
    assert not mask[0].any() and mask[3:].all()  # an episode's first step reads no memory


def test_gather_windows_slides_along_the_rollout_rows():
    M, T, N = 3, 5, 2
    memory = torch.arange((M + T) * N, dtype=torch.float32).view(M + T, N, 1, 1).expand(M + T, N, 2, 4).clone()
    steps, envs = torch.tensor([0, 4, 2]), torch.tensor([1, 0, 1])
    windows = ppo_trxl.gather_windows(memory, steps, envs, M)
    assert windows.shape == (3, M, 2, 4)
    for b in range(3):  # rows steps[b] .. steps[b] + M - 1: the M steps before step steps[b] (its row is M + steps[b])
        torch.testing.assert_close(windows[b], memory[steps[b] : steps[b] + M, envs[b]])


def spaces(obs_dim, actions):
    """What an Agent reads of a vector env: its single observation and action spaces (``actions``: Discrete's n, or
    a space)."""
    action_space = gym.spaces.Discrete(actions) if isinstance(actions, int) else actions
    return SimpleNamespace(single_observation_space=gym.spaces.Box(-1.0, 1.0, (obs_dim,)), single_action_space=action_space)


def test_a_step_never_reads_memory_of_an_earlier_episode():
    torch.manual_seed(0)
    M, L, D = 6, 3, 16
    agent = ppo_trxl.Agent(spaces(3, 2), dim=D, num_layers=L, num_heads=4, memory_length=M)
    obs, memory = torch.randn(7, 3), torch.randn(7, M, L, D)
    episode_step = torch.tensor([0, 1, 2, 5, 6, 9, 3])  # 6 or more: the whole window is the episode's
    with torch.no_grad():
        hidden, layer_inputs = agent.trxl(obs, memory, episode_step)
        changed = memory.clone()
        _, mask = ppo_trxl.memory_window(episode_step, M)
        changed[~mask] = 1e4 * torch.randn(int((~mask).sum()), L, D)  # other episodes' slots, every layer
        torch.testing.assert_close(agent.trxl(obs, changed, episode_step)[0], hidden, rtol=0, atol=0)
        # an episode's first step reads only itself: as with no memory at all
        torch.testing.assert_close(agent.trxl(obs[:1], torch.zeros(1, M, L, D), episode_step[:1])[0], hidden[:1])
        # the episode's own slots do matter, in every layer
        for layer in range(L):
            own = memory.clone()
            own[1:, -1, layer] += torch.randn(D)  # the previous step, which every step but the first reads
            moved = agent.trxl(obs, own, episode_step)[0]
            torch.testing.assert_close(moved[0], hidden[0], rtol=0, atol=0)
            assert ((moved[1:] - hidden[1:]).abs().amax(1) > 1e-4).all(), layer
    assert layer_inputs.shape == (7, L, D)
    torch.testing.assert_close(layer_inputs[:, 0], agent.encode(obs).detach())  # layer 0 reads the encoder's token


def test_agent_samples_from_its_softmax_and_scores_what_it_sampled():
    torch.manual_seed(0)
    agent = ppo_trxl.Agent(spaces(3, 2), dim=8, num_layers=1, num_heads=2, memory_length=4)
    with torch.no_grad():
        agent.actor.weight.zero_()
        agent.actor.bias.copy_(torch.tensor([0.0, 1.0]))  # logits [0, 1] whatever the memory
        B = 30000
        action, log_prob, entropy, value, _ = agent.get_action_and_value(
            torch.randn(B, 3), torch.randn(B, 4, 1, 8), torch.randint(0, 9, (B,))
        )
    assert action.shape == (B, 1) and value.shape == (B,)  # Discrete: one action dimension
    action = action[:, 0]
    probs = torch.softmax(torch.tensor([0.0, 1.0]), -1)
    frequencies = torch.bincount(action, minlength=2).double() / B
    torch.testing.assert_close(frequencies, probs.double(), atol=0.006, rtol=0)  # > 3 standard errors
    torch.testing.assert_close(log_prob, torch.log(probs)[action])
    torch.testing.assert_close(entropy, torch.full((B,), float(-(probs * probs.log()).sum())))


def test_multidiscrete_heads_sample_independently_and_their_log_probs_and_entropies_add_up():
    """MultiDiscrete([2, 3]): one head per dimension, each sampled from its own softmax; the joint action's log π
    is the sum of the dimensions', and so is the entropy."""
    torch.manual_seed(0)
    agent = ppo_trxl.Agent(spaces(3, gym.spaces.MultiDiscrete([2, 3])), dim=8, num_layers=1, num_heads=2, memory_length=4)
    assert agent.action_nvec == [2, 3] and agent.actor.out_features == 5
    with torch.no_grad():
        agent.actor.weight.zero_()
        agent.actor.bias.copy_(torch.tensor([0.0, 1.0, 0.5, -1.0, 1.5]))  # logits [0, 1] and [0.5, -1, 1.5]
        B = 30000
        action, log_prob, entropy, value, _ = agent.get_action_and_value(
            torch.randn(B, 3), torch.randn(B, 4, 1, 8), torch.randint(0, 9, (B,))
        )
    assert action.shape == (B, 2) and value.shape == (B,)
    probs = [torch.softmax(torch.tensor([0.0, 1.0]), -1), torch.softmax(torch.tensor([0.5, -1.0, 1.5]), -1)]
    for d, p in enumerate(probs):
        frequencies = torch.bincount(action[:, d], minlength=len(p)).double() / B
        torch.testing.assert_close(frequencies, p.double(), atol=0.01, rtol=0)  # > 3 standard errors (0.0029 at most)
    pairs = torch.bincount(action[:, 0] * 3 + action[:, 1], minlength=6).double() / B  # independent: p0 x p1
    torch.testing.assert_close(pairs, (probs[0][:, None] * probs[1][None]).flatten().double(), atol=0.01, rtol=0)
    torch.testing.assert_close(log_prob, probs[0].log()[action[:, 0]] + probs[1].log()[action[:, 1]])
    total_entropy = sum(float(-(p * p.log()).sum()) for p in probs)
    torch.testing.assert_close(entropy, torch.full((B,), total_entropy))
    # a given action is scored, not resampled
    with torch.no_grad():
        given = torch.tensor([[1, 2], [0, 1]])
        again = agent.get_action_and_value(torch.randn(2, 3), torch.randn(2, 4, 1, 8), torch.tensor([0, 5]), given)
    assert again[0] is given
    torch.testing.assert_close(again[1], torch.stack([probs[0][1] * probs[1][2], probs[0][0] * probs[1][1]]).log())


def test_gae_is_ppo_lstm_s():
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(6, 3)).astype(np.float32) for _ in range(2)] + [rng.normal(size=3).astype(np.float32)]
    args += [rng.normal(size=(6, 3)).astype(np.float32)] + [(rng.random((6, 3)) < p).astype(np.float32) for p in (0.2, 0.4)]
    args[5] = np.maximum(args[4], args[5])  # a termination is a done
    for ours, reference in zip(ppo_trxl.compute_gae(*args, 0.99, 0.95), ppo_lstm.compute_gae(*args, 0.99, 0.95)):
        np.testing.assert_array_equal(ours, reference)


# ---- the training loop, run in this process so that its variables can be inspected


def frozen(env_id, steps, monkeypatch, tmp_path, *flags):
    """Two rollouts of 4 envs x ``steps`` with the optimiser's steps disabled: the weights stay those of the rollouts."""
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, closure=None: None)
    loop = ["--num-envs", "4", "--num-steps", str(steps), "--num-minibatches", "2", "--update-epochs", "2"]
    small = ["--trxl-dim", "16", "--trxl-num-layers", "2", "--trxl-num-heads", "2", "--seed", "11"]
    total = ["--total-timesteps", str(8 * steps)]
    return run_in_process("ppo_trxl.py", monkeypatch, tmp_path, "--env-id", env_id, *loop, *total, *small, *flags)


@pytest.fixture
def pom_run(monkeypatch, tmp_path):
    return frozen(POM, 40, monkeypatch, tmp_path, "--trxl-memory-length", "4")


def replay(agent, obs, M):
    """Values of one episode's observations ``[S, 3]`` acting from its start with a fresh sliding memory (as evaluate)."""
    L, D = agent.num_layers, agent.dim
    window, out = torch.zeros(1, M, L, D), []
    for s in range(len(obs)):
        hidden, layer_inputs = agent.trxl(obs[s : s + 1], window, torch.tensor([s]))
        window = torch.cat([window[:, 1:], layer_inputs[:, None]], dim=1)
        out.append(agent.critic(hidden).item())
    return out


def test_minibatch_forward_from_stored_memory_equals_the_rollouts(pom_run):
    """Same weights, same numbers: each sample read with its stored window reproduces the rollout's log π and V."""
    g = pom_run
    agent, memory, N, M = g["agent"], g["memory"], g["N"], g["M"]
    assert g["iteration"] == 2
    mb = g["mb"]  # the update's last minibatch
    torch.testing.assert_close(g["newlogprob"].detach(), g["b_logprobs"][mb], rtol=0, atol=1e-6)
    torch.testing.assert_close(g["newvalue"].detach(), g["b_values"][mb], rtol=0, atol=1e-6)
    assert abs(g["approx_kl"].item()) < 1e-7 and max(c.item() for c in g["clipfracs"]) == 0.0
    # every sample at once
    everything = torch.arange(g["T"] * N)
    with torch.no_grad():
        window = ppo_trxl.gather_windows(memory, everything // N, everything % N, M)
        _, logprob, _, value, layer_inputs = agent.get_action_and_value(
            g["b_obs"], window, g["b_episode_steps"], g["b_actions"]
        )
    torch.testing.assert_close(logprob, g["b_logprobs"], rtol=0, atol=1e-6)
    torch.testing.assert_close(value, g["b_values"], rtol=0, atol=1e-6)
    torch.testing.assert_close(layer_inputs.view(g["T"], N, -1, agent.dim), memory[M:], rtol=0, atol=1e-6)
    # the second rollout began inside episodes (memory carried from the first): without it they read otherwise
    carried = g["episode_steps"][0] > 0
    assert carried.any()
    with torch.no_grad():
        blank = agent.get_value(g["obs"][0], torch.zeros_like(window[:N]), g["episode_steps"][0])
    assert ((blank - g["values"][0]).abs()[carried] > 1e-4).all()


def test_rollout_memory_is_the_episode_replayed_from_its_start(pom_run):
    """A step's value is that of its episode replayed from step 0 with a fresh memory: the window slides one
    step at a time, and nothing before the episode's start is read (the episode steps restart at each end)."""
    g = pom_run
    agent, obs, episode_steps, dones = g["agent"], g["obs"], g["episode_steps"], g["dones"]
    np.testing.assert_array_equal(episode_steps[1:].numpy() == 0, dones[:-1] > 0)  # step 0 after every end
    checked = 0
    with torch.no_grad():
        for n in range(g["N"]):
            starts = [int(t) for t in torch.nonzero(episode_steps[:, n] == 0).flatten()]
            for begin, end in zip(starts, starts[1:] + [g["T"]]):
                values = replay(agent, obs[begin:end, n], g["M"])
                np.testing.assert_allclose(values, g["values"][begin:end, n].numpy(), rtol=0, atol=1e-5)
                checked += end - begin
    assert checked > g["T"] * g["N"] // 2 and int(episode_steps.max()) > g["M"]  # windows that slid past the start


def test_truncation_bootstraps_with_the_episodes_memory(monkeypatch, tmp_path):
    """Counter-v0 (3-step time limit, action 1 terminates): V(final observation [3]) reads the episode's memory."""
    g = frozen("tests.envs:Counter-v0", 10, monkeypatch, tmp_path, "--trxl-memory-length", "2")
    agent, obs, episode_steps = g["agent"], g["obs"], g["episode_steps"]
    truncated = (g["dones"] > 0) & (g["terminations"] == 0)
    assert truncated.sum() >= 2
    np.testing.assert_array_equal(g["final_values"][~truncated], 0.0)
    with torch.no_grad():
        for t, n in zip(*np.nonzero(truncated)):
            assert episode_steps[t, n] == 2
            episode = torch.cat([obs[t - 2 : t + 1, n], torch.tensor([[3.0]])])  # its 3 observations and the final one
            expected = replay(agent, episode, g["M"])[-1]
            np.testing.assert_allclose(g["final_values"][t, n], expected, rtol=0, atol=1e-5)
            blank = agent.get_value(
                torch.tensor([[3.0]]), torch.zeros(1, g["M"], agent.num_layers, agent.dim), torch.tensor([3])
            )
            assert abs(expected - blank.item()) > 1e-4  # the memory matters


def test_multidiscrete_rollout_keeps_one_action_per_dimension_and_the_env_receives_them(monkeypatch, tmp_path):
    """MultiDiscreteCounter-v0 (MultiDiscrete([2, 3]); action[0] == 1 terminates, the reward is action[1]): the
    rollout stores actions [T, N, 2], the env gets each row, and every sample read from the stored memory scores
    its stored action with the rollout's log π (same weights)."""
    g = frozen("tests.envs:MultiDiscreteCounter-v0", 10, monkeypatch, tmp_path, "--trxl-memory-length", "2")
    actions, T, N = g["actions"], g["T"], g["N"]
    assert actions.shape == (T, N, 2) and g["b_actions"].shape == (T * N, 2)
    np.testing.assert_array_equal(g["rewards"], actions[..., 1].numpy())  # dimension 1 reached the env
    np.testing.assert_array_equal(g["terminations"], actions[..., 0].numpy() == 1)  # and dimension 0
    assert len(set(map(tuple, g["b_actions"].tolist()))) == 6  # every pair sampled
    everything = torch.arange(T * N)
    with torch.no_grad():
        window = ppo_trxl.gather_windows(g["memory"], everything // N, everything % N, g["M"])
        _, logprob, entropy, _, _ = g["agent"].get_action_and_value(g["b_obs"], window, g["b_episode_steps"], g["b_actions"])
    torch.testing.assert_close(logprob, g["b_logprobs"], rtol=0, atol=1e-6)
    assert (entropy > np.log(3)).all()  # two heads near uniform: about log 2 + log 3


# ---- whole scripts


def test_smoke_logs_saves_and_evaluates(tmp_path):
    result = run_script(
        "ppo_trxl.py",
        "--total-timesteps",
        "1024",
        "--num-envs",
        "4",
        "--num-steps",
        "64",
        "--update-epochs",
        "2",
        "--save-model",
        "--eval-episodes",
        "2",
        "--capture-video",
        cwd=tmp_path,
    )
    directory = run_dir(tmp_path)
    assert directory.name.startswith("cleanrl_utils.envs-ProofOfMemory-v0__ppo_trxl__1__")
    assert PPO_TAGS | {"eval/episodic_return", "eval/episodic_return_std"} <= set(scalars(directory))
    assert "evaluation over 2 episodes" in result.stdout
    assert list((directory / "videos").glob("*.mp4")) and list((directory / "videos-eval").glob("*.mp4"))
    # the evaluation tool scores the model as training's evaluation did (same episodes, seed and policy)
    trained = scalars(directory)["eval/episodic_return"][-1][1]
    out = enjoy(str(directory), "--env-id", POM, "--eval-episodes", "2", cwd=tmp_path).stdout
    assert out.startswith("ppo_trxl.py, ") and float(out.split("return ")[1].split(" ±")[0]) == pytest.approx(trained)
    model = directory / "ppo_trxl.cleanrl_model"
    returns = ppo_trxl.evaluate(str(model), eval_episodes=4)
    assert returns.shape == (4,) and set(returns) <= {-1.0, 1.0}
    np.testing.assert_array_equal(ppo_trxl.evaluate(str(model), eval_episodes=4), returns)  # seeded
    assert ppo_trxl.evaluate(str(model), eval_episodes=2, deterministic=False, seed=5).shape == (2,)
    with pytest.raises(ValueError, match="written by ppo_trxl.py, not by ppo_lstm.py"):
        ppo_lstm.evaluate(str(model), eval_episodes=1)


@pytest.mark.long  # four whole runs: CI's -m long, out of the README's command (30 minutes)
def test_same_seed_same_returns_and_async_matches_sync(tmp_path):
    flags = ["--total-timesteps", "1024", "--num-envs", "2", "--num-steps", "64", "--update-epochs", "2"]
    returns = {}
    for name, extra in [("a", []), ("b", []), ("async", ["--env-mode", "async"]), ("seed", ["--seed", "2"])]:
        (tmp_path / name).mkdir()
        run_script("ppo_trxl.py", *flags, *extra, cwd=tmp_path / name)
        returns[name] = episodic_returns(run_dir(tmp_path / name))
    assert len(returns["a"]) > 50
    assert returns["a"] == returns["b"] == returns["async"]
    assert returns["seed"] != returns["a"]


IMAGE_SMOKE = ["--total-timesteps", "256", "--num-envs", "2", "--num-steps", "64", "--num-minibatches", "2"]
IMAGE_SMOKE += ["--update-epochs", "1"]  # the smallest run of the image tasks: one update of 2 envs x 64 steps


def test_minigrid_memory_task_runs_and_evaluates(tmp_path):
    """MiniGrid-MemoryS7-v0 as CleanRL's ppo_trxl sees it: 84x84 RGB of a 3x3 view, through the Nature CNN."""
    run_script(
        "ppo_trxl.py",
        "--env-id",
        "MiniGrid-MemoryS7-v0",
        *IMAGE_SMOKE,
        "--save-model",
        "--eval-episodes",
        "1",
        cwd=tmp_path,
        timeout=600,
    )
    directory = run_dir(tmp_path)
    state = torch.load(directory / "ppo_trxl.cleanrl_model", weights_only=True)["agent"]
    assert state["encoder.0.0.weight"].shape == (32, 3, 8, 8)
    assert ppo_trxl.evaluate(str(directory / "ppo_trxl.cleanrl_model"), eval_episodes=1).shape == (1,)


def test_memory_gym_grid_task_runs(tmp_path):
    """Memory Gym (requirements/memory_gym.txt): MysteryPath-Grid-v0, 84x84 RGB, registered by importing memory_gym."""
    pytest.importorskip("memory_gym")
    run_script(
        "ppo_trxl.py",
        "--env-id",
        "memory_gym:MysteryPath-Grid-v0",
        *IMAGE_SMOKE,
        cwd=tmp_path,
        timeout=600,
    )
    assert "losses/value_loss" in scalars(run_dir(tmp_path))


ENDLESS = "memory_gym:Endless-MortarMayhem-v0"  # MultiDiscrete([3 3]) actions, 84x84 RGB, no time limit


def test_memory_gym_endless_task_with_multidiscrete_actions_runs_saves_and_evaluates(tmp_path):
    """CleanRL's headline Memory Gym task: two heads of 3 are trained and saved, and the model evaluates, in this
    process and with the evaluation tool (a module's env id is named again: --env-id), as training's evaluation did."""
    pytest.importorskip("memory_gym")
    flags = ["--env-id", ENDLESS, *IMAGE_SMOKE, "--save-model", "--eval-episodes", "2"]
    summary = run_script("ppo_trxl.py", *flags, cwd=tmp_path).stdout.strip().splitlines()[-1]
    directory = run_dir(tmp_path)
    assert directory.name.startswith("memory_gym-Endless-MortarMayhem-v0__ppo_trxl__1__")
    assert PPO_TAGS | {"eval/episodic_return", "eval/episodic_return_std"} <= set(scalars(directory))
    model = str(directory / "ppo_trxl.cleanrl_model")
    assert torch.load(model, weights_only=True)["agent"]["actor.weight"].shape == (6, 64)  # the heads side by side
    trained = scalars(directory)["eval/episodic_return"][-1][1]
    assert ppo_trxl.evaluate(model, eval_episodes=2, env_id=ENDLESS).mean() == pytest.approx(trained)
    assert ppo_trxl.evaluate(model, eval_episodes=2, deterministic=False, seed=5, env_id=ENDLESS).shape == (2,)
    # the closing summary's evaluate command names the env id again (the run's file may not choose a module to import)
    command = ["python", "-m", "cleanrl_utils.enjoy", f"runs/{directory.name}", "--eval-episodes", "10", "--env-id", ENDLESS]
    assert shlex.split(summary.removeprefix("evaluate it again: ")) == command, summary
    out = enjoy(*command[3:5], "2", *command[6:], cwd=tmp_path).stdout  # the pasted command, with 2 episodes
    assert float(out.split("return ")[1].split(" ±")[0]) == pytest.approx(trained)


def test_memory_gym_endless_task_sigterm_then_resume_equals_an_uninterrupted_run(tmp_path):
    """tests/test_contracts.py's exact-resume check for MultiDiscrete actions (its own runs are Discrete): the
    checkpoint's envs are replayed, and the model and curves end as an uninterrupted run's."""
    pytest.importorskip("memory_gym")
    flags = ["--env-id", ENDLESS, "--num-envs", "2", "--num-steps", "32", "--num-minibatches", "2", "--update-epochs", "1"]
    flags += ["--trxl-dim", "16", "--total-timesteps", "1024", "--save-model", "--eval-episodes", "1"]
    whole, resumed = sigterm_then_resume("ppo_trxl.py", flags, 256, 1024, tmp_path)
    assert whole["model"].keys() == resumed["model"].keys() and whole["model"]["actor.weight"].shape == (6, 16)
    for key, tensor in whole["model"].items():
        assert tensor.equal(resumed["model"][key]), key
    assert resumed["curves"] == whole["curves"] and len(whole["curves"]["charts/episodic_return"]) > 10


BAD_INPUT = [
    ("--trxl-num-heads", ["--trxl-num-heads", "3"], "3 does not divide --trxl-dim 64"),
    ("--trxl-dim", ["--trxl-dim", "63", "--trxl-num-heads", "1"], "must be even"),
    ("--trxl-memory-length", ["--trxl-memory-length", "0"], "must be a positive finite number"),
    ("--trxl-num-layers", ["--trxl-num-layers", "65"], "must be in [1, 64]"),
    ("--num-minibatches", ["--num-minibatches", "4096"], "does not divide the batch of 2048"),
    ("--num-minibatches", ["--num-minibatches", "3"], "does not divide the batch of 2048 (--num-envs 16 x --num-steps 128)"),
    ("--env-id", ["--env-id", "Pendulum-v1"], "supports Discrete or MultiDiscrete only"),
    (
        "--env-id",
        ["--env-id", "tests.envs:MultiDiscreteTable-v0"],
        "MultiDiscrete actions of shape (2, 2); ppo_trxl.py supports one row",
    ),
    ("--env-id", ["--env-id", "tests.envs:Image-v0"], "supports vectors or HxWxC uint8 images"),
    ("--env-id", ["--env-id", "cleanrl_utils.envs:NoSuchTask-v1"], "unknown environment"),
    ("--total-timesteps", ["--total-timesteps", "100"], "less than one rollout of 2048"),
]


@pytest.mark.parametrize("flag,flags,message", BAD_INPUT, ids=[case[0] + str(i) for i, case in enumerate(BAD_INPUT)])
def test_bad_input_stops_with_one_line(flag, flags, message, tmp_path):
    assert_stops_with_one_line("ppo_trxl.py", flags, flag, message, tmp_path)


def test_a_bare_memory_gym_id_is_refused_with_its_module_prefix(tmp_path):
    """CleanRL's ``--env-id Endless-MortarMayhem-v0``: one line giving ``memory_gym:Endless-MortarMayhem-v0``. In a
    subprocess: this process may have imported memory_gym, which registers the bare ids."""
    result = run_script("ppo_trxl.py", "--env-id", "Endless-MortarMayhem-v0", cwd=tmp_path, check=False, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and not (tmp_path / "runs").exists(), result.stderr
    unknown = "error: --env-id: unknown environment 'Endless-MortarMayhem-v0' (Memory Gym ids name their module, "
    assert lines[0].startswith(unknown + "which registers them: --env-id memory_gym:Endless-MortarMayhem-v0"), lines[0]


# ---- learning

LEARNING_STEPS = 49152  # whole rollouts of both scripts (24 of ppo_trxl.py's 16 x 128, 96 of ppo.py's 4 x 128)


def last100(script, tmp_path):
    run_script(script, "--env-id", POM, "--seed", "1", "--total-timesteps", str(LEARNING_STEPS), cwd=tmp_path, timeout=1800)
    returns = episodic_returns(run_dir(tmp_path))
    print(f"{script}: mean return over the last 100 episodes {np.mean(returns[-100:]):.2f} ({len(returns)} episodes)")
    assert len(returns) >= 1000
    return float(np.mean(returns[-100:]))


@pytest.mark.learning
def test_ppo_trxl_remembers_the_cue(tmp_path):
    """Across 4 to 12 blank steps, the transformer's memory carries the cue to the choice.

    Budget: 49,152 steps (24 rollouts of 16 envs x 128 steps), seed 1, the script's defaults; pass: mean
    return of the last 100 episodes >= 0.6 (1 is every choice right; chance, the expected return of any
    policy without memory, is 0: see test_proof_of_memory_is_at_chance_without_memory). Measured: seed 1
    ended at 1.0 (4,885 episodes), 16 s of CPU time (44 s of wall time on the shared 2-core machine).
    """
    assert last100("ppo_trxl.py", tmp_path) >= 0.6


@pytest.mark.learning
def test_ppo_without_memory_stays_at_chance(tmp_path):
    """The contrast: ppo.py (a memoryless MLP policy), the same steps on the same task, cannot beat chance (0).

    Budget: the same 49,152 steps (96 rollouts of 4 envs x 128 steps), seed 1, ppo.py's defaults; pass:
    mean return of the last 100 episodes below 0.3. Measured: -0.02 (4,890 episodes), 7 s of CPU time.
    """
    assert last100("ppo.py", tmp_path) < 0.3
