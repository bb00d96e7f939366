import pytest

from hangwatch.generator.policy import cudagraphs_enabled_in, rollout_engine_kwargs, rollout_policy

NONE = {"compilation_config": {"cudagraph_mode": "NONE"}}


@pytest.mark.parametrize("env, kwargs", [
    ({}, {}),
    ({"HANGWATCH_CUDAGRAPHS": "1"}, {}),
    ({"HANGWATCH_CUDAGRAPHS": ""}, {}),
    ({"HANGWATCH_CUDAGRAPHS": "0"}, NONE),
    ({"HANGWATCH_CUDAGRAPHS": " 0 "}, NONE),
    ({"HANGWATCH_ENFORCE_EAGER": "1"}, {"enforce_eager": True}),
    ({"HANGWATCH_ENFORCE_EAGER": "1", "HANGWATCH_CUDAGRAPHS": "0"}, {"enforce_eager": True}),
    ({"HANGWATCH_ENFORCE_EAGER": "1", "HANGWATCH_CUDAGRAPHS": "1"}, {"enforce_eager": True}),
    ({"HANGWATCH_ENFORCE_EAGER": "0", "HANGWATCH_CUDAGRAPHS": "0"}, NONE),
])
def test_env_to_kwargs(env, kwargs):
    assert rollout_engine_kwargs(env) == kwargs
    assert cudagraphs_enabled_in(kwargs) == (kwargs == {})


@pytest.mark.parametrize("name, value", [("HANGWATCH_CUDAGRAPHS", "off"), ("HANGWATCH_CUDAGRAPHS", "true"),
                                         ("HANGWATCH_ENFORCE_EAGER", "yes")])
def test_invalid_value_names_variable_and_value(name, value):
    with pytest.raises(ValueError, match=f"{name}='{value}'"):
        rollout_engine_kwargs({name: value})


def test_beat_info_reports_setting():
    assert rollout_policy({"HANGWATCH_CUDAGRAPHS": "0"}).beat_info() == {"cudagraphs": "off", "enforce_eager": False}
    assert rollout_policy({}).beat_info()["cudagraphs"] == "on"
    assert rollout_policy({"HANGWATCH_ENFORCE_EAGER": "1"}).beat_info() == {"cudagraphs": "off", "enforce_eager": True}


def test_graphs_detection_is_case_insensitive():
    assert not cudagraphs_enabled_in({"compilation_config": {"cudagraph_mode": "none"}})
    assert cudagraphs_enabled_in({"compilation_config": {"cudagraph_mode": "PIECEWISE"}})
    assert cudagraphs_enabled_in({"compilation_config": 3})
