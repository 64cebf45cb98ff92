"""Sampling a reply again when it repeats an earlier one or loops (agent/core/resample.py)."""

from __future__ import annotations

from dataclasses import replace

from agent.events import AgentResult, Warning
from scripted import ScriptedModel, conversation, fake_stats, full_auto, git_repo  # noqa: F401


class Sampled(ScriptedModel):
    """A scripted model that takes sampling per call: records the temperature of each reply
    (0.0: its own setting) and the seeds it was given."""

    sampling = True

    def __init__(self, turns, loop_at=()):
        super().__init__(turns)
        self.temps, self.seeds, self.loop_at = [], [], set(loop_at)

    def generate(self, messages, cancel=None, sampling=None):
        self.temps.append(sampling.temperature if sampling is not None else 0.0)
        if sampling is not None:
            self.seeds.append(sampling.seed)
        looped = len(self.temps) in self.loop_at
        for ev in super().generate(messages, cancel):
            yield replace(ev, finish_reason="repetition") if looped and hasattr(ev, "finish_reason") else ev


CODE = "calc.py\n```python\ndef add(a, b):\n    return a - b\n```\n"
OTHER = "calc.py\n```python\ndef add(a, b):\n    return b + a\n```\n"
# calc.py once OTHER is written: sub, which the replies leave out, is kept (core/pymerge.py)
AFTER_OTHER = "def add(a, b):\n    return b + a\n\n\ndef sub(a, b):\n    return a - b\n"


def test_a_reply_repeating_an_earlier_one_is_sampled_again(git_repo):
    model = Sampled([CODE, CODE, OTHER])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", resample_temperature=0.7))
    list(conv.send("change add"))
    events = list(conv.send("the tests fail, fix add"))
    warned = [e.message for e in events if isinstance(e, Warning)]
    assert any("repeats an earlier one" in w for w in warned)
    assert model.temps == [0.0, 0.0, 0.7]
    assert len(model.seeds) == 1
    assert [m["content"] for m in conv.messages if m["role"] == "assistant"][-1] == OTHER
    assert (git_repo / "calc.py").read_text() == AFTER_OTHER


def test_resampling_is_bounded_and_can_be_off(git_repo):
    model = Sampled([CODE, CODE, CODE, CODE, CODE])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", resample_temperature=0.7))
    list(conv.send("change add"))
    list(conv.send("again"))
    # Two resamples, then the repeat stands; it is pointed out once (a turn at 0.0, its repeat
    # resampled, and the script has run out: "Done.").
    assert model.temps == [0.0, 0.0, 0.7, 0.7, 0.0, 0.7]
    model = Sampled([CODE, CODE])  # (fix_mode "repair": no fresh replies either)
    conv = conversation(git_repo, model, full_auto(edit_format="whole", resample_temperature=0,
                                                   fix_mode="repair"))
    list(conv.send("change add"))
    list(conv.send("again"))
    assert model.temps == [0.0, 0.0]  # no resampling, and no pointing out


def test_a_looping_reply_is_sampled_again(git_repo):
    model = Sampled([CODE, OTHER], loop_at={1})
    conv = conversation(git_repo, model, full_auto(edit_format="whole", resample_temperature=0.7))
    result = list(conv.send("change add"))[-1]
    assert isinstance(result, AgentResult) and result.stop_reason == "answered"
    assert model.temps == [0.0, 0.7]
    assert result.usage["model_turns"] == 2  # the dropped reply's figures count


def test_a_repeat_that_survives_resampling_is_pointed_out_once(git_repo):
    model = Sampled([CODE, CODE, CODE, CODE, OTHER, OTHER])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", resample_temperature=0.7))
    list(conv.send("change add"))
    events = list(conv.send("the tests fail, fix add"))
    assert model.temps == [0.0, 0.0, 0.7, 0.7, 0.0]  # then the nudge, greedy again
    nudge = model.seen[-1][-1]
    assert nudge["role"] == "user" and "the same as in your earlier reply" in nudge["content"]
    assert (git_repo / "calc.py").read_text() == AFTER_OTHER
    assert events[-1].stop_reason == "answered"


def test_the_same_code_under_other_words_is_sampled_again(git_repo):
    model = Sampled([CODE + "Fixed add.", CODE + "Now add is right.", OTHER])
    conv = conversation(git_repo, model, full_auto(edit_format="whole", resample_temperature=0.7))
    list(conv.send("change add"))
    events = list(conv.send("the tests fail, fix add"))
    assert any("code repeats an earlier" in e.message for e in events if isinstance(e, Warning))
    assert model.temps == [0.0, 0.0, 0.7]
    assert (git_repo / "calc.py").read_text() == AFTER_OTHER
