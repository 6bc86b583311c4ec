"""Feedback modes: the message each builds from a hand-built joint answer, the history an agent is
shown at the next turn, and the expert reviewer against loopback HTTP servers and a local model."""

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from magrpo.config.schemas import ConfigError
from magrpo.models.agents import load_agents
from magrpo.rollout.feedback import FEEDBACKS, NodeView, build_feedback
from magrpo.rollout.feedback.diagnostics import test_outcomes as outcomes_of
from magrpo.rollout.record import Generation, Rollout, Sampling, joint_indices
from magrpo.rollout.turns import expand, node_views
from magrpo.tasks import build_task
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg

HELPER = "def aux(x):\n    return x - int(x)\n"
MAIN_CALLS = "def truncate_number(number):\n    return aux(number) + 1.0\n"
MAIN_ALONE = "def truncate_number(number):\n    return 1.0\n"


def _task(name: str):
    cfg = validate(compose_cfg([f"output_dir=/tmp/unused-{name}", f"task={name}"]))
    return build_task(cfg.task, cfg.reward)


@pytest.fixture(scope="module")
def coding():
    task = _task("humaneval")
    return task, task.load("eval")[2]      # truncate_number: three tests


def _view(task, item, answers, turn=1) -> NodeView:
    s = task.score([item], [["", ""]], [answers])
    return NodeView(item, task.prompts(item, len(answers)), answers, s[0], {k: v[0] for k, v in s.components.items()},
                    {k: v[0] for k, v in s.extras.items()}, turn)


# --- the simple modes ----------------------------------------------------------------------------


def test_every_mode_is_registered_and_has_a_conf_file():
    from pathlib import Path

    from magrpo.cli.train import CONF_DIR

    assert set(FEEDBACKS) == {"none", "plain", "passed", "diagnostics", "expert", "discussion"}
    assert {p.stem for p in Path(CONF_DIR, "feedback").glob("*.yaml")} == set(FEEDBACKS)


def test_plain_none_passed_and_discussion_messages(coding):
    task, item = coding
    view = _view(task, item, [HELPER, MAIN_ALONE])
    revise = task.revise_instruction(item, 0, 2)
    none = build_feedback({"mode": "none"}, task)([view])[0]
    assert none == [revise, revise]
    plain = build_feedback({"mode": "plain"}, task).message(view, 1)
    assert "previous answer" in plain and plain.endswith(revise) and HELPER not in plain
    passed = build_feedback({"mode": "passed"}, task).message(view, 0)
    assert passed.startswith("The team's program did not pass all the tests.")
    assert "AssertionError" not in passed and "1 of" not in passed          # pass/fail only
    # discussion: each agent reads the others' answers, never its own
    disc = build_feedback({"mode": "discussion"}, task)([view])[0]
    assert "Agent 2's answer:\n" + MAIN_ALONE.strip() in disc[0] and HELPER.strip() not in disc[0]
    assert "Agent 1's answer:\n" + HELPER.strip() in disc[1] and MAIN_ALONE.strip() not in disc[1]


def test_passed_says_pass_when_every_test_passes(coding):
    task, item = coding
    good = "def truncate_number(number):\n    return number % 1.0\n"
    view = _view(task, item, [HELPER, good])
    assert view.extras["passed"]
    assert build_feedback({"mode": "passed"}, task).message(view, 1).startswith("The team's program passed all the tests.")


# --- diagnostics ---------------------------------------------------------------------------------


def test_coding_diagnostics_from_the_sandbox_errors(coding):
    task, item = coding
    fb = build_feedback({"mode": "diagnostics"}, task)
    text = fb.message(_view(task, item, [HELPER, MAIN_ALONE]), 0)
    assert "`aux` (agent 1's helper): defined, returns a value" in text
    assert "`truncate_number` (agent 2's main function): defined, returns a value" in text
    assert "tests: 0 of 3 passed" in text and text.count("AssertionError") == 3
    assert "`truncate_number` calls `aux`: no" in text
    assert "assert " not in text                      # show_tests is off: no assertion source
    calls = fb.message(_view(task, item, [HELPER, MAIN_CALLS]), 0)
    assert "`truncate_number` calls `aux`: yes" in calls


def test_coding_diagnostics_read_per_test_outcomes_by_index(coding):
    task, item = coding
    view = _view(task, item, [HELPER, MAIN_ALONE])
    view.extras["test_outcomes"] = [
        {"index": 0, "status": "passed", "error": None},
        {"index": 1, "status": "failed", "error": "AssertionError"},
        {"index": 2, "status": "timeout", "error": "timed out after 2 s"},
    ]
    view.extras["tests_fraction"] = 1 / 3
    hidden = build_feedback({"mode": "diagnostics"}, task).message(view, 1)
    assert "tests: 1 of 3 passed" in hidden
    assert "test 2 failed: AssertionError" in hidden and "test 3 timeout: timed out after 2 s" in hidden
    assert "test 1 " not in hidden and item["tests"][1] not in hidden
    shown = build_feedback({"mode": "diagnostics", "show_tests": True}, task).message(view, 1)
    assert item["tests"][1] in shown and item["tests"][2] in shown and item["tests"][0] not in shown


def test_test_outcomes_fall_back_to_the_errors_of_failing_tests():
    assert outcomes_of({"test_errors": ["AssertionError", "timeout: the sandbox wall clock ran out"]}) == [
        {"index": None, "status": "failed", "error": "AssertionError"},
        {"index": None, "status": "timeout", "error": "timeout: the sandbox wall clock ran out"}]
    given = [{"index": 3, "status": "crashed", "error": "exit 1"}]
    assert outcomes_of({"test_outcomes": given, "test_errors": ["x"]}) == given
    assert outcomes_of({}) == []


def test_coding_diagnostics_name_the_syntax_error_line_and_column(coding):
    task, item = coding
    broken = "def truncate_number(number):\n    return (number +\n"
    text = build_feedback({"mode": "diagnostics"}, task).message(_view(task, item, [HELPER, broken]), 1)
    assert "syntax error in the team's program at line" in text and "column" in text
    assert "tests: not run" in text


def test_writing_diagnostics_name_the_failed_level_with_its_numbers():
    task = _task("tldr")
    item = task.load("eval")[0]
    a1 = "The poster asks whether to move to a new city for a better paid job offer now."
    a2 = "Short reply here with nine words in it okay."
    text = build_feedback({"mode": "diagnostics"}, task).message(_view(task, item, [a1, a2]), 1)
    ratio = len(a2) / len(a1)
    assert "level 1, length of each answer (8-256 words): answer 1 has 17, answer 2 has 9: passed" in text
    assert f"{ratio:.2f}: FAILED" in text and "level 3" not in text          # later levels are not scored


def test_generic_diagnostics_give_the_reward_and_components():
    task = _task("length_ratio")
    view = _view(task, task.load("eval")[0], ["one two", "three four five six seven"])
    text = build_feedback({"mode": "diagnostics"}, task).message(view, 0)
    assert f"reward is {view.reward:.3f}" in text and f"length_ratio = {25 / 7:.3f}" in text


# --- what the next turn's prompt holds -----------------------------------------------------------


def _hand_rollout(task, item, answers_per_agent: list[list[str]]) -> Rollout:
    dummy = torch.zeros(1, 1, dtype=torch.long)
    gens = [Generation(dummy, dummy, dummy.repeat(2, 1), torch.ones(2, 1), list(texts), 2, 0.0,
                       prompts=[task.prompts(item, 2)[i]]) for i, texts in enumerate(answers_per_agent)]
    r = Rollout([item], gens, joint_indices(2, 2, "aligned"))
    r.score(task)
    return r


@pytest.mark.parametrize("mode", ["plain", "diagnostics", "discussion"])
def test_each_agent_history_holds_its_own_prompts_answers_and_feedback(coding, mode):
    task, item = coding
    cfg = validate(compose_cfg(["output_dir=/tmp/unused", "agents.num_agents=2"]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    parent = _hand_rollout(task, item, [[HELPER, "def aux(y):\n    return y\n"], [MAIN_ALONE, MAIN_CALLS]])
    fb = build_feedback({"mode": mode}, task)
    child = expand(agents, task, fb, parent, [0, 1], Sampling(2, 2), "aligned")
    views = node_views(parent, [0, 1])
    for i in range(2):
        convs = child.samples[i].conversations
        assert len(convs) == 2 and child.samples[i].prompts[0].startswith(task.prompts(item, 2)[i])
        for k in range(2):
            user, answer, feedback = convs[k]
            assert user == {"role": "user", "content": task.prompts(item, 2)[i]}
            assert answer == {"role": "assistant", "content": views[k].answers[i]}
            assert feedback == {"role": "user", "content": fb.message(views[k], i)}
            other = views[k].answers[1 - i].strip()
            assert (other in feedback["content"]) == (mode == "discussion")
    # the next turn knows the discussion so far (MAPoRL's incentives read it)
    assert child.items[1]["turn_history"] == [views[1].answers]
    assert child.parents.tolist() == [0, 1] and child.turn == 2


# --- expert ---------------------------------------------------------------------------------------


class _Server:
    """A chat-completions server on 127.0.0.1 (loopback only) whose reply the test chooses."""

    def __init__(self, reply, delay: float = 0.0):
        outer = self
        self.requests: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                time.sleep(delay)
                data = reply(body).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):   # the client gave up (the slow case)
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(text: str) -> str:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})


def _expert(task, url, **kw):
    return build_feedback({"mode": "expert", "url": url, "model": "reviewer-1", "api_key_env": "MAGRPO_TEST_KEY",
                           "timeout_s": 2.0, "retries": 1, "retry_backoff_s": 0.0, **kw}, task)


def test_expert_endpoint_reviews_every_item(coding, monkeypatch):
    task, item = coding
    monkeypatch.setenv("MAGRPO_TEST_KEY", "sk-test")
    views = [_view(task, item, [HELPER, MAIN_ALONE]), _view(task, item, [HELPER, MAIN_CALLS])]
    with _Server(lambda body: _completion("Use aux in truncate_number.")) as server:
        fb = _expert(task, server.url)
        out = fb(views)
    assert fb.degraded == 0 and len(server.requests) == 2
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"]["model"] == "reviewer-1"
    user = req["body"]["messages"][-1]["content"]
    assert HELPER.strip() in user and "Agent 2's answer" in user
    for per_agent in out:
        for i, msg in enumerate(per_agent):
            assert "Use aux in truncate_number." in msg and msg.endswith(task.revise_instruction(item, i, 2))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["closed", "garbage", "slow", "not_a_completion"])
def test_a_failing_reviewer_degrades_to_plain_with_one_warning(coding, caplog, case):
    task, item = coding
    views = [_view(task, item, [HELPER, MAIN_ALONE]) for _ in range(3)]
    plain = build_feedback({"mode": "plain"}, task)([views[0]])[0]
    replies = {"garbage": (lambda b: "<html>oops", 0.0), "slow": (lambda b: _completion("late"), 1.0),
               "not_a_completion": (lambda b: json.dumps({"choices": []}), 0.0)}
    caplog.set_level(logging.WARNING, logger="magrpo.rollout.feedback.expert")
    t0 = time.perf_counter()
    if case == "closed":
        fb = _expert(task, f"http://127.0.0.1:{_closed_port()}/v1")
        out = fb(views)
    else:
        reply, delay = replies[case]
        with _Server(reply, delay) as server:
            fb = _expert(task, server.url, timeout_s=0.3 if case == "slow" else 2.0)
            out = fb(views)
        assert len(server.requests) == 3 * 2                 # every item tried once more (retries=1)
    assert out == [plain] * 3
    assert fb.degraded == 3
    warnings = [r for r in caplog.records if "expert feedback failed" in r.getMessage()]
    assert len(warnings) == 1 and "3 of 3" in warnings[0].getMessage()
    assert time.perf_counter() - t0 < 30


def test_expert_with_a_local_model_reviews_in_one_batch(coding):
    task, item = coding
    views = [_view(task, item, [HELPER, MAIN_ALONE]), _view(task, item, [HELPER, MAIN_CALLS])]
    fb = build_feedback({"mode": "expert", "url": None, "local_model": "builtin:tiny", "max_new_tokens": 8}, task)
    out = fb(views)
    assert fb.degraded == 0
    assert all(m.startswith("A reviewer read the team's answers and suggests:\n") for row in out for m in row)


def test_expert_needs_exactly_one_reviewer_and_unknown_modes_fail():
    with pytest.raises(ConfigError, match="set exactly one"):
        validate(compose_cfg(["output_dir=/tmp/unused", "feedback=expert", "feedback.url=null"]))
    with pytest.raises(ConfigError) as e:
        validate(compose_cfg(["output_dir=/tmp/unused", "feedback.mode=banana"]))
    assert "feedback.mode='banana'" in str(e.value) and "discussion" in str(e.value)


def test_expert_degradation_is_counted_in_training_metrics(make_cfg, tmp_path):
    from magrpo.cli.train import run

    out = tmp_path / "run"
    run(make_cfg(["debug=smoke", "algo.num_turns=2", "feedback=expert", f"feedback.url=http://127.0.0.1:{_closed_port()}",
                  "feedback.retries=0", "algo.max_new_tokens=4", "algo.num_generations=2", "save_final=false"],
                 out=str(out)))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/feedback/degraded" in r]
    assert train and all(r["train/feedback/degraded"] == 2 * 2 for r in train)   # B=2 items x G=2 nodes
    assert [r["eval/feedback/degraded"] for r in rows if "eval/feedback/degraded" in r] == [4.0, 4.0]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("mode", ["passed", "diagnostics"])
def test_a_task_family_a_mode_has_no_words_for_is_an_error_not_a_generic_message(mode):
    # feedback=passed|diagnostics word their message per task family (Task.feedback_kind); a kind
    # they do not know used to fall back to the generic words silently.
    class Poem:
        name, feedback_kind = "poem", "poetry"

    with pytest.raises(ConfigError, match=rf"feedback={mode}: task 'poem' declares feedback_kind='poetry'.*"
                                          r"known kinds: coding, generic, math, writing"):
        FEEDBACKS[mode](None, Poem())
    Poem.feedback_kind = "generic"
    assert FEEDBACKS[mode](None, Poem()).kind() == "generic"
    FEEDBACKS["plain"](None, type("Any", (), {"feedback_kind": "poetry"})())      # a mode with no per-family words
