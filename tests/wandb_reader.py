"""Read logged history back from an offline W&B run file (run-*.wandb).

The file is W&B's 7-byte header followed by LevelDB-log framed records (32 KiB blocks; each
chunk has a 7-byte header: crc32c, little-endian length, type FULL/FIRST/MIDDLE/LAST), each
record a protobuf `Record`. Only what the tests need: the history rows, the run record, the
defined metrics and the exit code.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

BLOCK = 32768
HEADER = 7  # ":W&B" + magic (2 bytes) + version (1 byte)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, buf = HEADER, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:           # the tail of a block too small for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == FULL:
            buf = chunk
        elif kind == FIRST:
            buf = chunk
            continue
        elif kind == MIDDLE:
            buf += chunk
            continue
        elif kind == LAST:
            buf += chunk
        else:
            break
        rec = pb.Record()
        rec.ParseFromString(buf)
        yield rec


def complete_records(path: Path, timeout: float = 60.0) -> list:
    """Every record of a finished run. The W&B service writes the file on its own schedule and may
    still be flushing it when `wandb.finish()` has returned: wait for the run's exit record."""
    deadline = time.monotonic() + timeout
    while True:
        recs = list(records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in recs) or time.monotonic() > deadline:
            return recs
        time.sleep(0.2)


def history(path: Path) -> list[dict]:
    rows = []
    for rec in complete_records(path):
        if rec.WhichOneof("record_type") == "history":
            row = {}
            for item in rec.history.item:
                if item.key:
                    row[item.key] = json.loads(item.value_json)
                else:  # a media object (a table): one item per field, under nested keys
                    *path, leaf = item.nested_key
                    node = row
                    for part in path:
                        node = node.setdefault(part, {})
                    node[leaf] = json.loads(item.value_json)
            rows.append(row)
    return rows


def run_info(path: Path) -> dict:
    """The run record (name, group, job type, top-level config keys) and the exit code, if any."""
    info: dict = {"config": {}, "exit_code": None, "metrics": {}}
    for rec in complete_records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            info.update(name=rec.run.display_name, group=rec.run.run_group, job_type=rec.run.job_type)
            for item in rec.run.config.update:
                info["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in rec.config.update:
                info["config"][item.key] = json.loads(item.value_json)
        elif kind == "exit":
            info["exit_code"] = rec.exit.exit_code
        elif kind == "metric":
            m = rec.metric
            if m.glob_name or m.name:
                info["metrics"][m.glob_name or m.name] = {"step_metric": m.step_metric,
                                                          "max": m.summary.max, "last": m.summary.last}
    return info
