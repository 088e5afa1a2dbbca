"""The training report's facts (:mod:`coa.evaluate.training_report`): SFT's speed and its machine."""

from __future__ import annotations

from coa.evaluate.training_report import throughput


def test_throughput_gives_steps_a_minute_and_the_device_the_run_recorded() -> None:
    result = {"tokens_per_s": 10_496.8, "steps_run": 5000, "train_runtime_s": 786.4, "device": "cpu"}
    named = result | {"device_name": "AMD EPYC 7B13, 2 threads"}
    assert throughput(named) == "10,497 tokens/s, 381 steps/min on AMD EPYC 7B13, 2 threads"
    assert throughput(result) == "10,497 tokens/s, 381 steps/min on cpu"  # written before device_name
    assert throughput(result | {"steps_run": 0}) == "10,497 tokens/s on cpu"  # a resumed run at its end
