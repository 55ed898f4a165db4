"""What an ops request's ``--record`` pair holds is bounded (issue 13, --record's memory):
an answer is kept only under ``--record`` (without it, nothing of an answer stays in memory
once written), and then only its first ``stdio.MAX_CAPTURE`` bytes; the pair's ``dropped``
counts the rest. The client still gets every line.

End to end through ``agentproto agent --record`` with a mock turn of more than 16 MiB, and
the pipeline itself in-process for the no-record case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sidecar import ROOT, base_env

from agentproto.loopio.loop import Loop
from agentproto.loopio.lifetime import MAX_CAPTURE, Job, Pipeline

DELTA = "x" * 16384
DELTAS = MAX_CAPTURE // len(DELTA) + 64  # an answer past MAX_CAPTURE


def test_a_long_answer_is_recorded_by_its_head_and_the_count_it_dropped(tmp_path: Path) -> None:
    steps: list[object] = [{"Emit": {"TextDelta": {"message_id": "m1", "text": DELTA}}} for _ in range(DELTAS)]
    steps.append({"End": {"Completed": {"source": "Protocol"}}})
    mock = tmp_path / "long.json"
    mock.write_text(json.dumps({"turns": [steps]}))
    record = tmp_path / "agent.ndjson"
    requests = [
        {"op": "open", "agent": "mock", "dir": "/tmp"},
        {"op": "prompt", "text": "go"},
        {"op": "close"},
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "agentproto", "agent", "--mock", str(mock), "--record", str(record)],
        input=b"".join(json.dumps(r).encode() + b"\n" for r in requests),
        capture_output=True,
        env=base_env(),
        cwd=str(ROOT),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.splitlines(keepends=True)
    assert sum(DELTA in line.decode() for line in out) == DELTAS  # the client got every delta
    dones = [i for i, line in enumerate(out) if b'"kind":"done"' in line]
    assert len(dones) == 3
    prompt_bytes = sum(len(line) for line in out[dones[0] + 1 : dones[1] + 1])
    pairs = [json.loads(line) for line in record.read_text().splitlines() if line.startswith('{"request"')]
    assert [json.loads(pair["request"])["op"] for pair in pairs] == ["open", "prompt", "close"]
    opened, prompted, closed = pairs
    assert "dropped" not in opened and "dropped" not in closed
    assert opened["response"].encode() == b"".join(out[: dones[0] + 1])
    kept = prompted["response"].encode()
    assert len(kept) <= MAX_CAPTURE and prompted["dropped"] > 0
    assert len(kept) + prompted["dropped"] == prompt_bytes
    assert b"".join(out[dones[0] + 1 :]).startswith(kept)  # the head, whole lines, in order


def test_without_a_record_an_answer_is_not_kept_once_written() -> None:
    loop = Loop()
    try:
        sent: list[bytes] = []
        for recording in (False, True):
            pipeline = Pipeline(loop, lambda data, _session: sent.append(data), lambda _job: True, recording)
            job = Job(lambda _job: None, b'{"op":"prompt"}')
            pipeline.submit(job)
            for index in range(10_000):
                pipeline.write(job, b'{"kind":"event","n":%d}\n' % index)
            held = job.captured.size
            pipeline.finish(job)
            assert held == (len(b"".join(sent[-10_000:])) if recording else 0), (recording, held)
    finally:
        loop.close()
