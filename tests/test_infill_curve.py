"""make infill-curve's driver (paper/infill_curve.py) end to end on a tiny model."""
import json
import os

import pytest

from paper import infill_curve

TINY = "--max-iters 2 --n-layer 1 --n-embd 32 --n-head 2 --eval-limit 2 --max-new-tokens 8 --warmup 1"


def test_curve_trains_once_evaluates_each_kept_step_and_tabulates(tmp_path, monkeypatch):
    """train.py keeps each step's weights, each kept step is evaluated once (accuracy and the number infill;
    every span at the last step), a finished run is neither trained nor evaluated again, --tabulate trains
    nothing, and the table and plot are written."""
    real_sleep = infill_curve.time.sleep
    monkeypatch.setattr(infill_curve.time, "sleep", lambda s: real_sleep(min(s, 0.05)))   # its polling
    out = tmp_path / "runs"
    args = ["--runs", "b16", "--seeds", "1", "--out-dir", str(out), "--threads", "1", "--keep-every", "1",
            "--limit", "3", "--curve-limit", "2", "--train-flags", TINY, "--json", str(tmp_path / "c.json"),
            "--md", str(tmp_path / "c.md"), "--plot", str(tmp_path / "c.png")]
    infill_curve.main(args)
    rows = json.load(open(tmp_path / "c.json"))
    assert [r["step"] for r in rows] == [1, 2] and all(r["run"] == "b16" and r["seed"] == 1 for r in rows)
    assert set(rows[0]) >= {"accuracy", "infill_number"} and "infill_verb" not in rows[0]
    assert {f"infill_{s}" for s in infill_curve.SPANS} | {"infill_verb_op"} <= set(rows[1])
    stamp = os.path.getmtime(out / "b16-s1" / "model.safetensors")
    measured = (out / "b16-s1.json").read_bytes()
    monkeypatch.setattr(infill_curve.cli, "set_threads", lambda n: None)     # this process keeps its own
    # the run's own process, here: it finds nothing to do
    infill_curve.main([*args, "--one", "b16", "1"])
    assert os.path.getmtime(out / "b16-s1" / "model.safetensors") == stamp
    assert (out / "b16-s1.json").read_bytes() == measured
    table = open(tmp_path / "c.md").read()
    assert "| b16 | `--infill 0.5 --batch-size 16 --max-iters 3000` | cpu | 2 | 1 | 3 |" in table
    assert os.path.getsize(tmp_path / "c.png") > 0
    os.remove(tmp_path / "c.md")
    infill_curve.main([*args[:1], "b16,none", *args[2:], "--tabulate"])
    assert not (out / "none-s1").exists() and "| b16 |" in open(tmp_path / "c.md").read()
    assert json.load(open(tmp_path / "c.json")) == rows


def test_the_plot_the_table_cells_and_a_bad_run():
    """A line only for a run measured at several steps; cells are the seeds' mean [min, max] in percent."""
    rows = [{"run": "b16", "step": 1000}, {"run": "b16", "step": 3000}, {"run": "ar", "step": 2000},
            {"run": "ar", "step": 2000}]                            # ar: two seeds, one step
    assert infill_curve.curves(rows, ["b16", "ar", "none"]) == ["b16"]
    assert infill_curve.mean_range([0.5, 1.0,
                                    0.0]) == "50.0 [0.0, 100.0]" and infill_curve.mean_range([0.25]) == "25.0"
    with pytest.raises(SystemExit, match="--runs b64: the runs are b16, b32"):
        infill_curve.main(["--runs", "b64"])
