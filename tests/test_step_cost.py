"""bench/step_cost.py: a step's CPU time = forward (head inside) + sampler, per method; it prints what it
returns."""
import json

from bench import step_cost


def test_step_splits_into_forward_and_sampler(tmp_path, capsys):
    out = step_cost.main(["--rounds", "1", "--new", "4", "--json", str(tmp_path / "s.json")])
    assert set(out) == {(m, "eager") for m in ("ar", "mdlm", "bd3lm", "setdiffusion")}
    for m, r in out.items():
        assert 0 <= r["ms_head"] <= r["ms_forward"] <= r["ms_step"], m
        assert abs(r["ms_forward"] + r["ms_sampler"] - r["ms_step"]) < 1e-9, m
    sd = out["setdiffusion", "eager"]
    assert out["ar", "eager"]["nfe"] == 4 and sd["nfe"] == 4                     # tau = inf: one token a step
    assert json.loads((tmp_path / "s.json").read_text())["setdiffusion eager"] == sd
    assert f"| setdiffusion | eager | {sd['ms_step']:.3f} |" in capsys.readouterr().out
