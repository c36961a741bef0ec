"""``tbconvert verify``: equal sources pass, every kind of difference is named."""

import shutil

import numpy as np
from helpers import FIXTURES

import tbconvert
from tbconvert.cli import main
from tbconvert.formats.tfevents import records


def test_verify_equal_after_roundtrip(tmp_path, capsys):
    out = tmp_path / "out"
    tbconvert.convert(FIXTURES / "torch_logdir", out, to_format="tfevents")
    assert main(["verify", str(FIXTURES / "torch_logdir"), str(out)]) == 0
    assert "same data" in capsys.readouterr().out


def test_verify_names_differences(tmp_path, capsys):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "tensorboardx_logdir", src)
    f = next(p for p in (src / "run_b").iterdir() if "tfevents" in p.name)
    buf = bytearray(f.read_bytes())
    starts, _, _ = records.scan(bytes(buf))
    buf[int(starts[5]) + 2] ^= 0x10  # one corrupt record: one point fewer
    f.write_bytes(bytes(buf))
    code = main(["verify", str(FIXTURES / "tensorboardx_logdir"), str(src)])
    out, err = capsys.readouterr()
    assert code == 10
    assert "run_b/loss: 25 points != 24 points" in out
    assert "differ" in err and "Traceback" not in err


def test_verify_detects_changed_value(tmp_path):
    from tbconvert.verify import compare
    data = tbconvert.read(FIXTURES / "tf2_logdir", restarts="keep-all")
    loss = data.series["eager"]["loss"]
    changed = loss.values.copy()
    changed[3] = np.nextafter(changed[3], np.float32(10))
    from tbconvert.api import open_writer
    out = tmp_path / "changed"
    with open_writer(out, format="tfevents") as w:
        for run_name, run in data.runs.items():
            series = list(data.series[run_name].values())
            if run_name == "eager":
                series = [s if s.tag != "loss" else type(s)(
                    run=s.run, tag=s.tag, metadata=s.metadata, steps=s.steps,
                    wall_times=s.wall_times, hidden=None, values=changed) for s in series]
            w.write_run(run, series)
    diffs = compare(FIXTURES / "tf2_logdir", out)
    assert diffs == ["eager/loss: values differ"]
