"""`engine.estimate`: the time estimate's arithmetic and JSON on hand-made measurements."""

from __future__ import annotations

from trajectory_compressor.engine.estimate import Probe, TargetTime, TimeEstimate

# -- the time estimate's JSON -------------------------------------------------------------

def test_the_time_estimates_seconds_are_given_to_a_tenth_of_a_millisecond():
    probe = Probe(rows=1, seconds=(1.234567,), failures=(), startup_seconds=0.123456)
    estimate = TimeEstimate("openai", "probed", rows=3, read_seconds=2.345678,
                            targets=[TargetTime(100, 1, 0.987654, 1, 1.234567)],
                            seconds_per_call=1.234567, concurrency=1, probe=probe)
    data = estimate.to_dict()
    assert data["read_and_count_seconds"] == 2.3457
    assert data["seconds_per_call"] == 1.2346
    assert data["probe"]["startup_seconds"] == 0.1235
    assert data["probe"]["call_seconds"] == [1.2346]
    (t,) = data["targets"]
    assert (t["local_seconds"], t["wait_seconds"], t["seconds"]) == (0.9877, 1.2346, 2.2222)
