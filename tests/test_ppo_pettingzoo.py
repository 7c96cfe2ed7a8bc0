"""ppo_pettingzoo.py: parameter-shared PPO on PettingZoo parallel envs (MinefieldRace, multi-agent Pong).

Pure parts (folding agents into rows and back, the agent id, GAE over rows with dead agents masked, the
minibatches of live rows), the vector of parallel envs (agents that die mid-episode, autoreset, faults),
short runs on MinefieldRace and pong_v3 (tags per agent, model, evaluation, video, same seed same numbers,
exact resume after SIGTERM), bad input, and the learning test on MinefieldRace.
"""

import re

import numpy as np
import pytest
import torch

from cleanrl import ppo_pettingzoo
from cleanrl.ppo_pettingzoo import add_agent_id, compute_gae, fold_agents, minibatches, unfold_agents
from cleanrl_utils.envs import MinefieldRace
from cleanrl_utils.faults import EnvFault
from cleanrl_utils.pettingzoo import ParallelEnvs, check_rollout
from tests.conftest import (
    ROOT,
    _run_in_process_until_exit,
    assert_stops_with_one_line,
    enjoy,
    run_dir,
    run_script,
    scalars,
    sigterm_then_resume,
)

RACE = "cleanrl_utils.envs:MinefieldRace"
AGENTS = ["a", "b", "c"]


# ---- rows: fold, unfold, agent id


def test_fold_puts_agent_a_of_env_e_in_row_e_times_agents_plus_a_and_unfold_inverts_it():
    dicts = [{"a": [1, 2], "c": [3, 4]}, {"b": [5, 6]}, {}]  # env 0 lost b, env 1 has only b, env 2 none
    rows, present = fold_agents(dicts, AGENTS, (2,), np.float32)
    assert rows.shape == (9, 2) and rows.dtype == np.float32
    np.testing.assert_array_equal(present, [1, 0, 1, 0, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(rows[[0, 2, 4]], [[1, 2], [3, 4], [5, 6]])
    assert not rows[~present].any()  # absent agents' rows are zeros
    back = unfold_agents(rows, AGENTS, present)
    assert [sorted(d) for d in back] == [sorted(d) for d in dicts]
    for original, unfolded in zip(dicts, back):
        for agent, value in original.items():
            np.testing.assert_array_equal(unfolded[agent], value)
    actions = np.arange(9)  # rows -> each present agent's action, from its own row
    assert unfold_agents(actions, AGENTS, present) == [{"a": 0, "c": 2}, {"b": 4}, {}]


def test_agent_id_is_a_one_hot_vector_or_constant_image_planes():
    vectors = np.full((6, 2), 0.5, np.float32)  # 2 envs x 3 agents
    with_id = add_agent_id(vectors, 3)
    assert with_id.shape == (6, 5) and with_id.dtype == np.float32
    np.testing.assert_array_equal(with_id[:, :2], vectors)
    np.testing.assert_array_equal(with_id[:, 2:], np.tile(np.eye(3, dtype=np.float32), (2, 1)))
    images = np.random.default_rng(0).integers(0, 256, (4, 84, 84, 4), dtype=np.uint8)  # 2 envs x 2 agents
    with_id = add_agent_id(images, 2)
    assert with_id.shape == (4, 84, 84, 6) and with_id.dtype == np.uint8
    np.testing.assert_array_equal(with_id[..., :4], images)
    for row in range(4):
        assert (with_id[row, :, :, 4 + row % 2] == 255).all() and (with_id[row, :, :, 5 - row % 2] == 0).all()


# ---- GAE over rows, minibatches of live rows

GAMMA, LAM = 0.9, 0.8  # γλ = 0.72


def test_gae_masks_dead_rows_and_bootstraps_truncations_from_the_final_observation():
    """Three rows, four steps. Row 0 dies (terminated) at t=1 and is absent at t=2..3 (the env goes on);
    row 1 is truncated at t=2 and acts again at t=3 (its next episode); row 2 lives through."""
    rewards = np.array([[1, 1, 1], [-1, 1, 1], [0, 1, 1], [0, 1, 1]], np.float32)
    values = np.array([[0.5] * 3, [0.6] * 3, [9.0, 0.7, 0.7], [9.0, 0.8, 0.8]], np.float32)  # 9: junk of absent rows
    last = np.array([9.0, 1.0, 1.0], np.float32)
    final = np.zeros((4, 3), np.float32)
    final[2, 1] = 2.0  # V(final observation) of row 1's truncated episode
    terminations = np.zeros((4, 3), np.float32)
    terminations[1, 0] = 1
    dones = terminations.copy()
    dones[2, 1] = 1
    alive = np.ones((4, 3), np.float32)
    alive[2:, 0] = 0
    advantages, returns = compute_gae(rewards, values, last, final, terminations, dones, alive, GAMMA, LAM)
    # row 0: δ1 = -1 - .6 = -1.6 (no bootstrap); δ0 = 1 + .9*.6 - .5 = 1.04; A0 = 1.04 + .72*(-1.6) = -0.112
    np.testing.assert_allclose(advantages[:, 0], [-0.112, -1.6, 0.0, 0.0], rtol=1e-5, atol=1e-6)
    # row 1: δ3 = 1 + .9*1 - .8 = 1.1; δ2 = 1 + .9*2.0 - .7 = 2.1 (V(final obs)), cut; δ1 = 1 + .9*.7 - .6 = 1.03;
    #   A1 = 1.03 + .72*2.1 = 2.542; δ0 = 1.04; A0 = 1.04 + .72*2.542 = 2.87024
    np.testing.assert_allclose(advantages[:, 1], [2.87024, 2.542, 2.1, 1.1], rtol=1e-5)
    np.testing.assert_allclose(returns[:, 1], advantages[:, 1] + values[:, 1], rtol=1e-6)
    # the absent rows' junk values reach nothing else: row 2 is the plain recursion
    expected, carry = [], 0.0
    for t in reversed(range(4)):
        next_value = last[2] if t == 3 else values[t + 1, 2]
        carry = rewards[t, 2] + GAMMA * next_value - values[t, 2] + GAMMA * LAM * carry
        expected.insert(0, carry)
    np.testing.assert_allclose(advantages[:, 2], expected, rtol=1e-5)


def test_minibatches_hold_every_live_row_once_and_no_dead_row():
    torch.manual_seed(0)
    alive = torch.tensor([True, False, True, True, False, True, True, False, True, True])
    batches = minibatches(alive, 3)
    assert [len(b) for b in batches] == [3, 2, 2]
    rows = torch.cat(batches)
    assert sorted(rows.tolist()) == [0, 2, 3, 5, 6, 8, 9]
    assert [len(b) for b in minibatches(torch.tensor([True, False, True]), 4)] == [1, 1]  # no empty minibatch


def test_dead_rows_are_in_no_minibatch_and_have_no_advantage(monkeypatch, tmp_path):
    """The rows of agents that were not acting are in no loss (its minibatches hold live rows only) and have advantage 0;
    MinefieldRace's racers die mid-episode (rows masked while the other racer goes on)."""
    from tests.conftest import run_in_process

    g = run_in_process(
        "ppo_pettingzoo.py",
        monkeypatch,
        tmp_path,
        *["--env-id", RACE, "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "128", "--torch-threads", "1"],
    )
    alive, advantages = g["alive"], g["advantages"]
    assert 0 < alive.mean() < 1  # some racer died while the other raced on
    np.testing.assert_array_equal(advantages[alive == 0], 0.0)
    assert g["b_alive"][g["mb_inds"]].all()
    # a dead racer's row follows a step where it terminated; its env went on (the other racer's row is alive)
    T, R = alive.shape
    for t, r in zip(*np.nonzero(alive[1:] == 0)):
        if alive[t, r]:
            assert g["dones"][t, r] and alive[t + 1, r ^ 1]


# ---- the vector of parallel envs


class Leaving(MinefieldRace):
    """A race whose racer_1 leaves at step 2 without a termination or truncation (a broken env)."""

    def step(self, actions):
        result = super().step(actions)
        if self.time == 2 and "racer_1" in self.agents:
            self.agents.remove("racer_1")
        return result


def test_parallel_envs_end_dead_agents_reset_whole_envs_and_refuse_agents_that_vanish():
    envs = ParallelEnvs([MinefieldRace, MinefieldRace])
    obs, _ = envs.reset(seed=3)
    assert [sorted(o) for o in obs] == [["racer_0", "racer_1"]] * 2
    # racer_1 starts at cell 0 or 1 and has a mine at cell 2: stepping there from 1 kills it, jumping from 0
    start = [int(np.argmax(o["racer_1"][:11])) for o in obs]
    actions = [{"racer_0": 2, "racer_1": 0 if s == 1 else 1} for s in start]
    obs, rewards, terminations, truncations, infos = envs.step(actions)
    for i in range(2):
        assert rewards[i]["racer_1"] == -1.0 and terminations[i]["racer_1"] and not truncations[i]["racer_1"]
        assert infos[i]["racer_1"]["episode"] == {"r": -1.0, "l": 1}
        assert infos[i]["racer_1"]["final_obs"][2] == 1.0  # its last observation: on the mine
        assert list(obs[i]) == ["racer_0"]  # the env goes on with racer_0
    for _ in range(19):  # racer_0 waits until the time limit truncates it: the envs are reset
        obs, rewards, terminations, truncations, infos = envs.step([{"racer_0": 2}] * 2)
    assert all(truncations[i]["racer_0"] and infos[i]["racer_0"]["episode"]["l"] == 20 for i in range(2))
    assert [sorted(o) for o in obs] == [["racer_0", "racer_1"]] * 2  # the next episodes
    envs.close()
    broken = ParallelEnvs([Leaving])
    broken.reset(seed=0)
    broken.step([{"racer_0": 2, "racer_1": 2}])
    with pytest.raises(EnvFault, match="env 0 at vector step 2: agent 'racer_1' left the env without a termination"):
        broken.step([{"racer_0": 2, "racer_1": 2}])


FAULTY_RACES = '''
from cleanrl_utils.envs.multi_agent import MinefieldRace


class WrongShape(MinefieldRace):
    """A race whose racer_1 gets 5 of its 12 observation entries at its first step (racer_1 acts then, always)."""

    def step(self, actions):
        obs, *rest = super().step(actions)
        if self.time == 1:
            obs["racer_1"] = obs["racer_1"][:5]
        return obs, *rest


class Intruder(MinefieldRace):
    """A race whose step 1 returns an observation, a reward and flags for an agent not in possible_agents."""

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = super().step(actions)
        if self.time == 1:
            obs["intruder"], rewards["intruder"] = obs["racer_0"], 0.0
            terminations["intruder"] = truncations["intruder"] = False
        return obs, rewards, terminations, truncations, infos


class WrongShapeAtReset(MinefieldRace):
    def reset(self, seed=None, options=None):
        obs, infos = super().reset(seed, options)
        return {**obs, "racer_0": obs["racer_0"][None]}, infos
'''
"""Faulty races: tested here, and written to a module in a run's working directory (``faulty_races.py``)."""
FAULTY: dict = {}
exec(FAULTY_RACES, FAULTY)


def test_parallel_envs_refuse_an_observation_of_another_shape_and_an_agent_not_in_possible_agents():
    """Checked at each step and reset, named by env, agent and vector step (before: fold_agents' traceback in the
    script, or the unknown agent dropped without a word)."""
    for env, message in [
        ("WrongShape", r"env 1 at vector step 1: agent 'racer_1' got an observation of shape \(5,\); its observation "
         r"space is Box\(-1\.0, 1\.0, \(12,\), float32\)$"),
        ("Intruder", r"env 1 at vector step 1: agent 'intruder' appeared but is not one of the env's possible_agents "
         r"\['racer_0', 'racer_1'\]$"),
    ]:  # fmt: skip
        envs = ParallelEnvs([MinefieldRace, FAULTY[env]])
        envs.reset(seed=0)
        with pytest.raises(EnvFault, match=message):
            envs.step([{agent: 2 for agent in obs} for obs in envs.obs])
    reset = r"^env 0 at vector step 0 \(its reset\): agent 'racer_0' got an observation of shape \(1, 12\)"
    with pytest.raises(EnvFault, match=reset):
        ParallelEnvs([FAULTY["WrongShapeAtReset"]]).reset(seed=0)


@pytest.mark.parametrize(
    "factory,fault",
    [
        ("WrongShape", r"agent 'racer_1' got an observation of shape \(5,\); its observation space is Box\(.*\)"),
        ("Intruder", r"agent 'intruder' appeared but is not one of the env's possible_agents \['racer_0', 'racer_1'\]"),
    ],
)
def test_a_faulty_env_of_a_module_in_the_working_directory_stops_the_run_in_one_line(factory, fault, tmp_path):
    """``--env-id faulty_races:WrongShape`` with faulty_races.py where the command runs: found as the gymnasium
    scripts find theirs (``python cleanrl/ppo_pettingzoo.py`` puts cleanrl/ on the path, not the working directory);
    its fault ends the run in one line naming the env, the agent and the step, exit 1."""
    (tmp_path / "faulty_races.py").write_text(FAULTY_RACES)
    flags = ["--env-id", f"faulty_races:{factory}", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "512"]
    result = run_script("ppo_pettingzoo.py", *flags, "--torch-threads", "1", cwd=tmp_path, check=False, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    pattern = rf"ppo_pettingzoo\.py: env 0 at vector step 1: {fault}; last checkpoint: none"
    assert re.fullmatch(pattern, lines[0]), lines[0]


def test_a_module_found_nowhere_is_refused_saying_where_it_looked(tmp_path):
    result = run_script("ppo_pettingzoo.py", "--env-id", "no_such_races:Race", cwd=tmp_path, check=False, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    looked = f"(looked in {ROOT / 'cleanrl'}, {ROOT}, the standard library and installed packages, "
    assert lines[0].startswith(f"error: --env-id: cannot import 'no_such_races' {looked}"), lines[0]
    assert lines[0].endswith(f" {tmp_path.resolve()} (the working directory)): No module named 'no_such_races'"), lines[0]


def test_check_rollout_names_the_env_agent_and_step_of_the_first_non_finite_value():
    """Rows are env * agents + agent; the first bad value in step order, then row order; integer frames skipped."""
    rewards = np.zeros((4, 6), np.float32)  # 4 steps of 2 envs x 3 agents
    check_rollout(240, AGENTS, reward=rewards, frames=np.zeros((4, 6, 2), np.uint8))
    rewards[2, 4], rewards[3, 0] = np.nan, np.inf
    with pytest.raises(EnvFault, match=r"^env 1, agent 'b' got a non-finite reward \(nan\) at global step 234 \(step 2 of"):
        check_rollout(240, AGENTS, reward=rewards)
    obs = torch.zeros(4, 6, 3)
    obs[0, 2, 1] = float("inf")
    with pytest.raises(EnvFault, match=r"^env 0, agent 'c' got a non-finite observation \(inf\) at global step 222 "):
        check_rollout(240, AGENTS, observation=obs)


def test_a_nan_reward_stops_the_run_in_one_line_naming_the_env_agent_and_step(monkeypatch, tmp_path):
    """Checked once per rollout, not per agent per step: every reward of env 1's 20th step NaN (the envs step in
    turn: its 40th call), in the second rollout of 2 envs x 16 steps, ends the run in one line, exit 1."""
    step, calls = MinefieldRace.step, []

    def nan_rewards(self, actions):
        obs, rewards, terminations, truncations, infos = step(self, actions)
        calls.append(1)
        if len(calls) == 40:
            rewards = {agent: float("nan") for agent in rewards}
        return obs, rewards, terminations, truncations, infos

    monkeypatch.setattr(MinefieldRace, "step", nan_rewards)
    flags = ["--env-id", RACE, "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "512"]
    code, stderr = _run_in_process_until_exit(str(ROOT / "cleanrl" / "ppo_pettingzoo.py"), flags, tmp_path)
    lines = stderr.strip().splitlines()
    assert code == 1 and len(lines) == 1, stderr
    pattern = r"ppo_pettingzoo\.py: env 1, agent 'racer_[01]' got a non-finite reward \(nan\) at global step 80 "
    assert re.fullmatch(pattern + r"\(step 3 of the rollout\); last checkpoint: none", lines[0]), lines[0]
    assert [step for step, _ in scalars(run_dir(tmp_path))["losses/value_loss"]] == [64]


def test_parallel_envs_replay_a_checkpoint_into_fresh_envs_exactly():
    rng = np.random.default_rng(0)

    def play(envs, steps):
        out = []
        for _ in range(steps):
            actions = [{agent: int(rng.integers(3)) for agent in o} for o in envs.obs]
            out.append(envs.step(actions)[:4])
        return out

    envs = ParallelEnvs([MinefieldRace] * 3)
    envs.reset(seed=5)
    play(envs, 7)
    saved = envs.state_dict()
    state = rng.bit_generator.state
    after = play(envs, 30)
    fresh = ParallelEnvs([MinefieldRace] * 3)
    fresh.load_state_dict(saved)
    rng.bit_generator.state = state
    again = play(fresh, 30)
    assert fresh.steps == 37
    for (o1, *rest1), (o2, *rest2) in zip(after, again):
        assert rest1 == rest2
        assert [sorted(o) for o in o1] == [sorted(o) for o in o2]
        assert all(np.array_equal(a[k], b[k]) for a, b in zip(o1, o2) for k in a)


# ---- whole scripts

TINY = ["--env-id", RACE, "--num-envs", "2", "--num-steps", "32", "--total-timesteps", "512", "--torch-threads", "1"]


@pytest.fixture(scope="module")
def race_run(tmp_path_factory):
    """A short MinefieldRace run with video and its model evaluated: (its stdout, its run directory)."""
    cwd = tmp_path_factory.mktemp("race")
    result = run_script("ppo_pettingzoo.py", *TINY, "--save-model", "--eval-episodes", "3", "--capture-video", cwd=cwd)
    return result.stdout, run_dir(cwd)


def test_smoke_on_minefield_race_per_agent_tags_video_model_and_evaluation(race_run):
    stdout, directory = race_run
    assert directory.name.startswith("cleanrl_utils.envs-MinefieldRace__ppo_pettingzoo__1__")
    tags = scalars(directory)
    per_agent = {f"charts/episodic_{what}/racer_{i}" for what in ("return", "length") for i in (0, 1)}
    assert per_agent | {"charts/episodic_return", "charts/SPS", "losses/value_loss", "eval/episodic_return"} <= set(tags)
    assert len(tags["charts/episodic_return"]) == sum(len(tags[f"charts/episodic_return/racer_{i}"]) for i in (0, 1))
    assert "evaluation over 3 episodes" in stdout
    assert list((directory / "videos").glob("*.mp4")) and len(list((directory / "videos-eval").glob("*.mp4"))) == 3
    model = str(directory / "ppo_pettingzoo.cleanrl_model")
    returns = ppo_pettingzoo.evaluate(model, eval_episodes=5, eval_agent=1)
    assert returns.shape == (5,) and set(returns) <= {-1.0, 0.0, 1.0}
    np.testing.assert_array_equal(ppo_pettingzoo.evaluate(model, eval_episodes=5, eval_agent=1), returns)  # seeded
    itself = ppo_pettingzoo.evaluate(model, eval_episodes=5, eval_agent=1, eval_opponent="self")
    assert itself.shape == (5,) and set(itself) <= {-1.0, 0.0, 1.0}
    with pytest.raises(ValueError, match=r"eval_agent must be -1 or an index of \['racer_0', 'racer_1'\], got 2"):
        ppo_pettingzoo.evaluate(model, eval_episodes=1, eval_agent=2)
    with pytest.raises(ValueError, match="eval_opponent must be 'random', 'self' or '', got 'itself'"):
        ppo_pettingzoo.evaluate(model, eval_episodes=1, eval_opponent="itself")
    from cleanrl import ppo

    with pytest.raises(ValueError, match="written by ppo_pettingzoo.py, not by ppo.py"):
        ppo.evaluate(model, eval_episodes=1)


def test_the_evaluation_tool_refuses_an_agent_the_env_lacks_in_one_line(race_run, tmp_path):
    model = str(race_run[1] / "ppo_pettingzoo.cleanrl_model")
    refused = enjoy(model, "--option", "eval_agent=5", cwd=tmp_path, check=False)  # the tool: one line, exit 2
    assert refused.returncode == 2 and not refused.stdout
    assert refused.stderr.strip() == "error: --option: eval_agent must be -1 or an index of ['racer_0', 'racer_1'], got 5"


def test_same_seed_same_numbers(tmp_path):
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        run_script("ppo_pettingzoo.py", *TINY, "--seed", "7", cwd=tmp_path / name)
        tags = scalars(run_dir(tmp_path / name))
        runs.append({tag: [value for _, value in values] for tag, values in tags.items() if tag != "charts/SPS"})
    assert len(runs[0]["losses/value_loss"]) == 4  # 4 rollouts of 2 envs x 2 agents x 32 steps
    assert runs[0] == runs[1]


PONG_TINY = ["--num-envs", "1", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1", "--torch-threads", "1"]


def test_pong_self_play_smoke_and_exact_resume(tmp_path):
    """pong_v3 with SuperSuit's preprocessing: frames [84, 84, 4] and 2 id planes, both paddles played by the
    policy; SIGTERM then --resume replays the game from its seed and ends with the uninterrupted run's weights."""
    flags = [*PONG_TINY, "--total-timesteps", "192", "--save-model", "--eval-episodes", "1"]
    whole, resumed = sigterm_then_resume("ppo_pettingzoo.py", flags, 64, 192, tmp_path)
    assert whole["model"]["trunk.0.weight"].shape == (32, 6, 8, 8)
    for name, tensor in whole["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name
    assert resumed["curves"] == whole["curves"]
    assert {"eval/episodic_return", "losses/value_loss"} <= set(whole["curves"])


BAD_INPUT = [
    (["--env-id", "nosuch_v0"], "--env-id", "unknown PettingZoo env 'nosuch_v0'"),
    (["--env-id", "cleanrl_utils.envs:NoSuchRace"], "--env-id", "has no env factory 'NoSuchRace'"),
    (["--env-id", "tests.nosuchmodule:Env"], "--env-id", "cannot import"),
    (["--env-id", RACE, "--eval-agent", "2"], "--eval-agent", "must be in [0, 1]"),
    (["--env-id", RACE, "--total-timesteps", "100"], "--total-timesteps", "less than one rollout of 2048 agent steps"),
    (["--env-id", RACE, "--num-minibatches", "5000"], "--num-minibatches", "too many for 16 rows"),
    (["--num-envs", "0"], "--num-envs", "must be a positive finite number"),
    (["--eval-opponent", "nobody"], "--eval-opponent", "nobody"),
]


@pytest.mark.parametrize("flags,flag,message", BAD_INPUT)
def test_bad_input_stops_with_one_line(flags, flag, message, tmp_path):
    assert_stops_with_one_line("ppo_pettingzoo.py", flags, flag, message, tmp_path)


# ---- learning: MinefieldRace against a random opponent

RANDOM_RETURN = -0.957
"""racer_0's mean return when both racers act uniformly at random: 4000 episodes (seeds 0-3999), standard
error 0.005. Playing the mines of its own lane (which only its id tells) wins against a random racer (+1)."""


@pytest.mark.learning
def test_learns_to_cross_both_lanes_and_beat_a_random_racer(tmp_path):
    """61,440 agent steps (8 envs x 2 racers x 64 steps x 60 rollouts; about 15 s on an idle core). The policy,
    playing either racer against a uniformly random one, must average above 0.8 over 200 games (random: -0.957).
    Measured once: this run scores 1.0 and 0.98; with --no-agent-id, 1.0 -> -1.0 as racer_0 and 0.94 as racer_1
    (one policy cannot tell which lane's mines it faces)."""
    flags = ["--env-id", RACE, "--num-envs", "8", "--num-steps", "64", "--total-timesteps", "61440", "--seed", "1"]
    flags += ["--learning-rate", "2.5e-3", "--clip-coef", "0.2", "--save-model", "--eval-episodes", "200"]
    run_script("ppo_pettingzoo.py", *flags, cwd=tmp_path, timeout=900)
    model = str(run_dir(tmp_path) / "ppo_pettingzoo.cleanrl_model")
    for racer in (0, 1):
        returns = ppo_pettingzoo.evaluate(model, eval_episodes=200, eval_agent=racer)
        print(f"racer_{racer} against a random racer: {returns.mean():.3f} over 200 games (random: {RANDOM_RETURN})")
        assert returns.mean() > 0.8
